/**
 * Helpers for the CLI tests: run the built `bin/tenure.js` as a real child process, collect its
 * output, poll for conditions, and freeze processes with SIGSTOP at a moment when they hold no
 * SQLite write lock.
 */
import { execSync, spawn } from 'node:child_process';
import type { ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { openDatabase } from '../../src/stores/sqlite/driver.js';
import type { SqliteDatabase } from '../../src/stores/sqlite/driver.js';

export const BIN = fileURLToPath(new URL('../../bin/tenure.js', import.meta.url));

export interface Result {
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
}

/** A fresh directory with its own store (TENURE_STORE points into it). */
export interface Sandbox {
  readonly dir: string;
  readonly db: string;
  readonly env: NodeJS.ProcessEnv;
}

const sandboxes: string[] = [];
const started = new Set<Running>();

export function sandbox(): Sandbox {
  const dir = mkdtempSync(join(tmpdir(), 'tenure-cli-test-'));
  sandboxes.push(dir);
  const db = join(dir, 'tenure.db');
  const env: NodeJS.ProcessEnv = { ...process.env, TENURE_STORE: `sqlite:${db}` };
  delete env.TENURE_DEBUG;
  return { dir, db, env };
}

/** Run `tenure ARGS` to completion. */
export function tenure(box: Sandbox, args: readonly string[], options: { input?: string | Buffer; timeoutMs?: number; env?: NodeJS.ProcessEnv } = {}): Promise<Result> {
  const proc = spawn(process.execPath, [BIN, ...args], { cwd: box.dir, env: options.env ?? box.env, stdio: ['pipe', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  proc.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
  proc.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
  proc.stdin.on('error', () => {});
  proc.stdin.end(options.input ?? '');
  const timeoutMs = options.timeoutMs ?? 30_000;
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      proc.kill('SIGKILL');
      reject(new Error(`tenure ${args.join(' ')} did not finish within ${timeoutMs} ms\nstdout: ${stdout}\nstderr: ${stderr}`));
    }, timeoutMs);
    proc.on('close', (code, signal) => {
      clearTimeout(timer);
      resolve({ code, signal, stdout, stderr });
    });
  });
}

/** A long-running `tenure` process. */
export class Running {
  readonly proc: ChildProcess;
  stdout = '';
  stderr = '';
  readonly exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  exit: { code: number | null; signal: NodeJS.Signals | null } | null = null;

  constructor(box: Sandbox, args: readonly string[], env?: NodeJS.ProcessEnv) {
    this.proc = spawn(process.execPath, [BIN, ...args], { cwd: box.dir, env: env ?? box.env, stdio: ['ignore', 'pipe', 'pipe'] });
    this.proc.stdout!.on('data', (d: Buffer) => (this.stdout += d.toString()));
    this.proc.stderr!.on('data', (d: Buffer) => (this.stderr += d.toString()));
    this.exited = new Promise((resolve) =>
      this.proc.on('close', (code, signal) => {
        this.exit = { code, signal };
        started.delete(this);
        resolve(this.exit);
      }),
    );
    started.add(this);
  }

  get pid(): number {
    return this.proc.pid!;
  }

  /** The JSON lines `--json` wrote on stderr, optionally only those of one event. */
  events(name?: string): Array<Record<string, unknown>> {
    const out: Array<Record<string, unknown>> = [];
    for (const line of this.stderr.split('\n')) {
      if (!line.startsWith('{')) continue;
      try {
        const e = JSON.parse(line) as Record<string, unknown>;
        if (name === undefined || e.event === name) out.push(e);
      } catch {
        // a partial line; complete on a later read
      }
    }
    return out;
  }

  /** Child pids this tenure reported starting. */
  childPids(): number[] {
    return this.events('child-started').map((e) => Number(e.pid));
  }

  signal(sig: NodeJS.Signals): void {
    try {
      process.kill(this.pid, sig);
    } catch {
      // gone
    }
  }
}

export function start(box: Sandbox, args: readonly string[], env?: NodeJS.ProcessEnv): Running {
  return new Running(box, args, env);
}

/** Poll `check` every 50 ms until it returns a truthy value; fail with `what` after `timeoutMs`. */
export async function waitUntil<T>(what: string, check: () => T | Promise<T>, timeoutMs = 30_000): Promise<NonNullable<T>> {
  const until = Date.now() + timeoutMs;
  for (;;) {
    const value = await check();
    if (value) return value as NonNullable<T>;
    if (Date.now() > until) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await sleep(50);
  }
}

export function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/** True while any live process is in the process group led by `pgid` (zombies do not count). */
export function groupAlive(pgid: number): boolean {
  try {
    process.kill(-pgid, 0);
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
  return liveProcesses().some((p) => p.pgid === pgid);
}

/** True while `pid` is a live process (a zombie does not count). */
export function processAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
  return liveProcesses().some((p) => p.pid === pid);
}

/** Every live process with its group, from /proc (Linux); elsewhere a zombie counts as alive. */
function liveProcesses(): Array<{ pid: number; pgid: number }> {
  if (process.platform !== 'linux') {
    return execSync('ps -A -o pid= -o pgid= -o stat=')
      .toString()
      .split('\n')
      .map((l) => l.trim().split(/\s+/))
      .filter((f) => f.length >= 3 && !f[2]!.startsWith('Z'))
      .map((f) => ({ pid: Number(f[0]), pgid: Number(f[1]) }));
  }
  const out: Array<{ pid: number; pgid: number }> = [];
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, 'utf8');
      const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      if (fields[0] !== 'Z' && fields[0] !== 'X') out.push({ pid: Number(entry), pgid: Number(fields[2]) });
    } catch {
      // exited meanwhile
    }
  }
  return out;
}

/** True if nobody holds the SQLite write lock of `db` (waiting up to 1.5 s for brief holders). */
function writeLockFree(db: string): boolean {
  // The store's own driver picker: node:sqlite where the runtime has it, so this runs on any Node.
  const conn = openDatabase(db).db;
  try {
    conn.exec('PRAGMA busy_timeout = 1500');
    conn.exec('BEGIN IMMEDIATE');
    conn.exec('ROLLBACK');
    return true;
  } catch {
    return false;
  } finally {
    conn.close();
  }
}

/**
 * SIGSTOP `targets` (a negative number is a process group) at a moment when none of them is
 * inside a SQLite write transaction: a process frozen there would hold the database's write lock
 * and block every other process, which is not the fault under test. Retries with fresh timing.
 */
export async function freeze(db: string, targets: readonly number[]): Promise<void> {
  for (let attempt = 0; attempt < 20; attempt++) {
    for (const t of targets) process.kill(t, 'SIGSTOP');
    await sleep(50);
    if (writeLockFree(db)) return;
    for (const t of targets) process.kill(t, 'SIGCONT');
    await sleep(100 + Math.floor(Math.random() * 200));
  }
  throw new Error('could not freeze the processes outside a write transaction');
}

/** Read a stream straight from the database (for polling without starting a process). */
export function streamTerms(db: string, stream: string): Array<{ seq: number; term: number; payload: string }> {
  let conn: SqliteDatabase;
  try {
    conn = openDatabase(db).db;
    conn.exec('PRAGMA busy_timeout = 1500');
  } catch {
    return [];
  }
  try {
    return conn.prepare('SELECT seq, term, payload FROM tenure_streams WHERE stream = ? ORDER BY seq').all(stream) as unknown as Array<{
      seq: number;
      term: number;
      payload: string;
    }>;
  } catch {
    return [];
  } finally {
    conn.close();
  }
}

/** Stop everything a test started (and its children), and remove the sandboxes. */
export async function cleanUp(): Promise<void> {
  for (const r of [...started]) {
    for (const pid of r.childPids()) {
      try {
        process.kill(-pid, 'SIGCONT');
        process.kill(-pid, 'SIGKILL');
      } catch {
        // gone
      }
    }
    r.signal('SIGCONT');
    r.signal('SIGKILL');
    await r.exited;
  }
  for (const dir of sandboxes.splice(0)) rmSync(dir, { recursive: true, force: true });
}

/** Assert-friendly: stderr lines that are not empty. */
export function lines(text: string): string[] {
  return text.split('\n').filter((l) => l.trim() !== '');
}
