/**
 * `tenure demo --store raft`: the Raft store the demo starts for itself. Three `tenure raft
 * serve` child processes on free loopback ports, each with a data directory under the demo's
 * temporary directory, sharing a random secret: the members read it from TENURE_RAFT_SECRET in
 * their environment, and the demo and its nodes from a file of the demo directory (mode 0600)
 * named by the raft:// URL, so the secret is never on a command line. The demo stops them (SIGTERM,
 * then kill -9 after a grace period) after its nodes, and kills them at once on a second ^C.
 */
import { spawn } from 'node:child_process';
import type { ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { writeFileSync } from 'node:fs';
import net from 'node:net';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { RAFT_SECRET_ENV } from '../stores/raft/backend.js';

const MEMBERS = 3;
/** How long a member may take to print its serving line. */
const START_TIMEOUT_MS = 20_000;
/** How long a member may take to close cleanly on SIGTERM before it is killed. */
const STOP_GRACE_MS = 3000;
/** What is kept of a member's stderr, for the error when it does not start. */
const STDERR_KEEP = 2000;
/**
 * A second's election timeout rather than the default: a demo runs beside whatever else the
 * machine does, and a member off the CPU past a short timeout starts a needless election.
 */
const TIMING = ['--election-timeout', '1000ms', '--heartbeat', '100ms'];

export interface DemoRaftCluster {
  /** raft://… of the three members, with `?secret-file=`. */
  readonly url: string;
  /** The members' process ids, in member order. */
  readonly pids: readonly number[];
  /** The environment of the members and the demo's nodes: the caller's plus TENURE_RAFT_SECRET. */
  readonly env: NodeJS.ProcessEnv;
  /** kill -9 every member now (the demo's second ^C). */
  kill(): void;
  /** SIGTERM every member, kill -9 what is left after a grace period; resolves when all exited. */
  stop(): Promise<void>;
}

export interface DemoRaftOptions {
  /** The demo's temporary directory: data directories and the secret file go here. */
  readonly dir: string;
  readonly env: NodeJS.ProcessEnv;
  /** The tenure entry script. */
  readonly bin: string;
  readonly signal: AbortSignal;
  readonly onSpawn: (pid: number) => void;
}

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as AddressInfo;
      server.close(() => resolve(port));
    });
  });
}

interface Member {
  readonly id: number;
  readonly proc: ChildProcess;
  readonly exited: Promise<void>;
  serving: boolean;
  stderr: string;
}

function gone(proc: ChildProcess): boolean {
  return proc.exitCode !== null || proc.signalCode !== null;
}

function send(proc: ChildProcess, sig: NodeJS.Signals): void {
  if (gone(proc)) return;
  try {
    proc.kill(sig);
  } catch {
    // already gone
  }
}

export async function startDemoRaftCluster(options: DemoRaftOptions): Promise<DemoRaftCluster> {
  const secret = randomBytes(24).toString('hex');
  const secretFile = join(options.dir, 'raft-secret');
  writeFileSync(secretFile, `${secret}\n`, { mode: 0o600 });
  const env: NodeJS.ProcessEnv = { ...options.env, [RAFT_SECRET_ENV]: secret };
  delete env.TENURE_STORE;
  const addresses: string[] = [];
  for (let i = 0; i < MEMBERS; i++) addresses.push(`127.0.0.1:${await freePort()}`);
  const peers = addresses.map((a, i) => `${i + 1}=${a}`).join(',');
  const members: Member[] = addresses.map((address, i) => {
    const id = i + 1;
    const args = [options.bin, 'raft', 'serve', '--id', String(id), '--listen', address, '--peers', peers, '--data', join(options.dir, `raft-n${id}`), ...TIMING];
    const proc = spawn(process.execPath, args, { env, stdio: ['ignore', 'pipe', 'pipe'] });
    const member: Member = { id, proc, serving: false, stderr: '', exited: new Promise((resolve) => proc.once('close', () => resolve())) };
    if (proc.pid) options.onSpawn(proc.pid);
    let head = '';
    proc.stdout!.on('data', (d: Buffer) => {
      if (member.serving) return;
      head = (head + d.toString()).slice(-STDERR_KEEP);
      if (head.includes('serving on')) member.serving = true;
    });
    proc.stderr!.on('data', (d: Buffer) => (member.stderr = (member.stderr + d.toString()).slice(-STDERR_KEEP)));
    proc.once('error', (err) => (member.stderr += err.message));
    return member;
  });
  const kill = (): void => {
    for (const m of members) {
      send(m.proc, 'SIGCONT');
      send(m.proc, 'SIGKILL');
    }
  };
  const stop = async (): Promise<void> => {
    for (const m of members) send(m.proc, 'SIGTERM');
    const all = Promise.all(members.map((m) => m.exited));
    let timer: NodeJS.Timeout | undefined;
    const inTime = await Promise.race([all.then(() => true), new Promise<boolean>((r) => (timer = setTimeout(() => r(false), STOP_GRACE_MS)))]);
    clearTimeout(timer);
    if (!inTime) {
      kill();
      await all;
    }
  };
  try {
    const until = performance.now() + START_TIMEOUT_MS;
    while (!members.every((m) => m.serving)) {
      options.signal.throwIfAborted();
      const dead = members.find((m) => gone(m.proc));
      if (dead) throw new Error(`raft member ${dead.id} exited before serving: ${dead.stderr.trim() || `exit code ${dead.proc.exitCode}`}`);
      if (performance.now() > until) throw new Error(`the raft members did not serve within ${START_TIMEOUT_MS / 1000} s`);
      await new Promise((r) => setTimeout(r, 50));
    }
  } catch (err) {
    kill();
    await Promise.all(members.map((m) => m.exited));
    throw err;
  }
  const list = addresses.join(',');
  return { url: `raft://${list}?secret-file=${encodeURIComponent(secretFile)}`, pids: members.map((m) => m.proc.pid ?? 0), env, kill, stop };
}
