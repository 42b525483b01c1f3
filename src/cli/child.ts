/**
 * The child command of `tenure run` and `tenure lock`: started in its own process group
 * (detached), so that stopping it reaches everything it started; stopped with SIGTERM to the
 * group, then SIGKILL to the group after a grace period.
 *
 * The child must not outlive tenure, even when tenure is killed outright (kill -9, the OOM
 * killer): its lease would then run out and another node would start a second copy. So each
 * child gets a watchdog: a small node process, in a session of its own, that holds the read end
 * of a pipe whose write end only tenure has. The kernel closes that pipe however tenure dies;
 * on end of file the watchdog stops the child's group the same way (SIGTERM, SIGKILL after the
 * grace period). Tenure disarms the watchdog (writes to the pipe) once the group is gone, and the
 * watchdog also leaves by itself as soon as it sees the group empty.
 */
import { spawn } from 'node:child_process';
import type { ChildProcess } from 'node:child_process';
import { accessSync, constants as fsConstants, readFileSync, readdirSync, statSync } from 'node:fs';
import { delimiter, join, resolve } from 'node:path';
import { constants } from 'node:os';

export interface ChildExit {
  /** The exit code as a shell reports it: the code, or 128 + signal number, or 127 when it could not start. */
  readonly code: number;
  readonly signal: NodeJS.Signals | null;
  /** Set when the command could not be started (not found, not executable). */
  readonly error?: string;
}

export interface StopReport {
  /** Called when SIGTERM is sent to the group. */
  onTerm?(pid: number): void;
  /** Called when the grace period ran out and SIGKILL is sent. */
  onKill?(pid: number): void;
}

/** How often the group is checked for survivors after the child itself exited, ms. */
const GROUP_POLL_MS = 50;

/**
 * The watchdog's program (`node -e WATCHDOG PGID GRACE_MS`). Any byte on stdin disarms it; end of
 * file (tenure is gone) or SIGTERM/SIGHUP/SIGINT stops the group: SIGTERM, then SIGKILL when
 * anything is left after GRACE_MS. It leaves once no live process is in the group.
 */
const WATCHDOG = `
const pgid = Number(process.argv[1]);
const graceMs = Number(process.argv[2]);
process.title = 'tenure-watchdog ' + pgid;
const fs = require('fs');
// kill(2) counts zombies, which an init that reaps slowly leaves for a while: on Linux, count
// the group's live members in /proc, as the supervisor does.
const liveOnLinux = () => {
  if (process.platform !== 'linux') return null;
  try {
    let n = 0;
    for (const e of fs.readdirSync('/proc')) {
      if (!/^[0-9]+$/.test(e)) continue;
      let st;
      try { st = fs.readFileSync('/proc/' + e + '/stat', 'utf8'); } catch { continue; }
      const f = st.slice(st.lastIndexOf(')') + 2).split(' ');
      if (Number(f[2]) === pgid && f[0] !== 'Z' && f[0] !== 'X') n++;
    }
    return n;
  } catch { return null; }
};
const alive = () => {
  try { process.kill(-pgid, 0); } catch (e) { return e.code === 'EPERM'; }
  const n = liveOnLinux();
  return n === null || n > 0;
};
const signal = (s) => { try { process.kill(-pgid, s); } catch {} };
let firing = false;
const fire = () => {
  if (firing) return;
  firing = true;
  if (!alive()) process.exit(0);
  signal('SIGTERM');
  const since = Date.now();
  setInterval(() => {
    if (!alive()) process.exit(0);
    if (Date.now() - since >= graceMs) { signal('SIGKILL'); process.exit(0); }
  }, 50);
};
process.stdin.on('data', () => { if (!firing) process.exit(0); });
process.stdin.on('end', fire);
process.stdin.on('error', fire);
for (const s of ['SIGTERM', 'SIGHUP', 'SIGINT']) process.on(s, fire);
setInterval(() => { if (!firing && !alive()) process.exit(0); }, 1000);
`;

export interface ChildOptions {
  /** The grace period between SIGTERM and SIGKILL when the watchdog stops the group, ms. */
  readonly graceMs: number;
}

export class ChildJob {
  readonly pid: number | undefined;
  /** Resolves once, when the child has exited (or failed to start). Never rejects. */
  readonly exited: Promise<ChildExit>;
  private readonly proc: ChildProcess;
  private result: ChildExit | null = null;
  private stopping: Promise<ChildExit> | null = null;
  private forceKill: (() => void) | null = null;
  private watchdog: ChildProcess | null = null;

  constructor(command: string, args: readonly string[], env: NodeJS.ProcessEnv, options: ChildOptions) {
    // stdin is not passed on: the child runs in its own process group, where reading the
    // terminal would stop it (SIGTTIN).
    this.proc = spawn(command, args, { detached: true, stdio: ['ignore', 'inherit', 'inherit'], env });
    this.pid = this.proc.pid;
    if (this.pid !== undefined) this.watchdog = startWatchdog(this.pid, options.graceMs);
    this.exited = new Promise<ChildExit>((resolve) => {
      const done = (exit: ChildExit): void => {
        if (this.result) return;
        this.result = exit;
        resolve(exit);
      };
      this.proc.once('error', (err: NodeJS.ErrnoException) => {
        // 'error' without a pid: the command never started. With a pid, 'exit' still follows.
        if (this.proc.pid === undefined) done({ code: err.code === 'EACCES' ? 126 : 127, signal: null, error: startError(command, err) });
      });
      this.proc.once('exit', (code, signal) => {
        // Nothing left in the group: the watchdog has nothing to guard (and must not signal a
        // group id that could be reused).
        if (this.pid !== undefined && !groupAlive(this.pid)) this.disarm();
        done({ code: code ?? 128 + (signal ? (constants.signals[signal] ?? 0) : 0), signal });
      });
    });
  }

  /** Let the watchdog go without it touching the group. */
  private disarm(): void {
    const w = this.watchdog;
    if (!w) return;
    this.watchdog = null;
    w.stdin?.end('disarm\n');
  }

  get hasExited(): boolean {
    return this.result !== null;
  }

  /**
   * Stop the child: SIGTERM to its process group, then SIGKILL to the group when anything in it
   * is still alive after `graceMs`. Resolves with the child's exit once the child is gone and the
   * group is empty or killed. Idempotent; `hurry()` skips the rest of the grace period.
   */
  stop(graceMs: number, report: StopReport = {}): Promise<ChildExit> {
    if (this.stopping) return this.stopping;
    const pid = this.pid;
    if (pid === undefined) return (this.stopping = this.exited);
    if (!this.hasExited || groupAlive(pid)) {
      report.onTerm?.(pid);
      signalGroup(pid, 'SIGTERM');
    }
    this.stopping = new Promise<ChildExit>((resolve) => {
      let killed = false;
      const kill = (): void => {
        if (killed) return;
        killed = true;
        if (!this.hasExited || groupAlive(pid)) {
          report.onKill?.(pid);
          signalGroup(pid, 'SIGKILL');
        }
      };
      this.forceKill = kill;
      const timer = setTimeout(kill, graceMs);
      const finish = (exit: ChildExit): void => {
        clearTimeout(timer);
        this.disarm();
        resolve(exit);
      };
      void this.exited.then((exit) => {
        // The child is gone; wait (within the grace period) for the rest of its group too.
        const check = (): void => {
          if (!groupAlive(pid)) finish(exit);
          else if (killed) setTimeout(() => finish(exit), GROUP_POLL_MS);
          else setTimeout(check, GROUP_POLL_MS);
        };
        check();
      });
    });
    return this.stopping;
  }

  /** Send SIGKILL now if a stop is under way (a second Ctrl-C). */
  hurry(): void {
    this.forceKill?.();
  }
}

/**
 * Start the watchdog of group `pgid`. It is detached (a session of its own, so a terminal's
 * signals to tenure's group do not end it first) and unreferenced (it never keeps tenure
 * running). The pipe's write end is opened close-on-exec, so no child inherits it and only
 * tenure's death (or a disarm) ends the watchdog's input.
 */
function startWatchdog(pgid: number, graceMs: number): ChildProcess | null {
  let w: ChildProcess;
  try {
    w = spawn(process.execPath, ['-e', WATCHDOG, String(pgid), String(graceMs)], { detached: true, stdio: ['pipe', 'ignore', 'ignore'], env: {} });
  } catch {
    return null;
  }
  w.on('error', () => {}); // could not start: the child runs unguarded, as it would have before
  w.stdin?.on('error', () => {}); // the watchdog left first (the group was empty)
  w.unref();
  (w.stdin as unknown as { unref?: () => void } | null)?.unref?.();
  return w;
}

/** Send `signal` to the process group led by `pid`; falls back to the process alone. */
export function signalGroup(pid: number, signal: NodeJS.Signals): void {
  try {
    process.kill(-pid, signal);
  } catch {
    try {
      process.kill(pid, signal);
    } catch {
      // already gone
    }
  }
}

/** True while any live process remains in the group led by `pid`. */
export function groupAlive(pid: number): boolean {
  try {
    process.kill(-pid, 0);
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
  // kill(2) also counts zombies: members that died after their parent and wait for init to reap
  // them. On Linux, look closer so that a dead process is not waited for.
  const live = liveMembersOnLinux(pid);
  return live === null || live > 0;
}

/** The number of live (not zombie) processes in group `pgid`, or null where /proc cannot tell. */
function liveMembersOnLinux(pgid: number): number | null {
  if (process.platform !== 'linux') return null;
  let count = 0;
  try {
    for (const entry of readdirSync('/proc')) {
      if (!/^\d+$/.test(entry)) continue;
      let stat: string;
      try {
        stat = readFileSync(`/proc/${entry}/stat`, 'utf8');
      } catch {
        continue; // exited meanwhile
      }
      // "pid (comm) state ppid pgrp ...": comm may hold spaces and parentheses.
      const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      if (Number(fields[2]) === pgid && fields[0] !== 'Z' && fields[0] !== 'X') count++;
    }
  } catch {
    return null;
  }
  return count;
}

/** The conventional exit status for a process ended by `signal`: 128 + its number. */
export function signalExitCode(signal: NodeJS.Signals): number {
  return 128 + (constants.signals[signal] ?? 0);
}

/** CMD cannot be started: exit code 127 (not found) or 126 (not executable), as a shell gives them. */
export class UnstartableCommandError extends Error {
  constructor(
    message: string,
    readonly exitCode: 126 | 127,
  ) {
    super(message);
    this.name = 'UnstartableCommandError';
  }
}

/**
 * Look CMD up as the child's spawn will (in PATH when it has no slash, else from `cwd`) and throw
 * UnstartableCommandError unless an executable file is there. `run`, `lock` and `follow` call it
 * before they touch the store: a node that cannot start CMD would otherwise win the group and
 * hold it, failing, while a node that can waits.
 */
export function checkStartable(command: string, env: NodeJS.ProcessEnv, cwd = process.cwd()): void {
  const dirs = (env.PATH ?? '/usr/bin:/bin').split(delimiter);
  const candidates = command.includes('/') ? [resolve(cwd, command)] : dirs.map((d) => resolve(cwd, join(d || '.', command)));
  let denied = false;
  for (const path of candidates) {
    try {
      if (!statSync(path).isFile()) {
        denied = true; // a directory: execve refuses it with EACCES
        continue;
      }
      accessSync(path, fsConstants.X_OK);
      return;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'EACCES') denied = true;
    }
  }
  throw denied ? new UnstartableCommandError(`permission denied: ${command}`, 126) : new UnstartableCommandError(`command not found: ${command}`, 127);
}

function startError(command: string, err: NodeJS.ErrnoException): string {
  if (err.code === 'ENOENT') return `command not found: ${command}`;
  if (err.code === 'EACCES') return `permission denied: ${command}`;
  return `cannot start ${command}: ${err.message}`;
}

/** Resolve with the child's exit, or with null as soon as `signal` aborts (whichever is first). */
export function exitOrAbort(child: ChildJob, signal: AbortSignal): Promise<ChildExit | null> {
  if (signal.aborted) return Promise.resolve(null);
  return new Promise((resolve) => {
    const onAbort = (): void => resolve(null);
    signal.addEventListener('abort', onAbort, { once: true });
    void child.exited.then((exit) => {
      signal.removeEventListener('abort', onAbort);
      resolve(exit);
    });
  });
}

/** Sleep `ms`, ending early (without error) when `signal` aborts. */
export function pauseUnlessAborted(ms: number, signal: AbortSignal): Promise<void> {
  if (signal.aborted) return Promise.resolve();
  return new Promise((resolve) => {
    const done = (): void => {
      clearTimeout(timer);
      signal.removeEventListener('abort', done);
      resolve();
    };
    const timer = setTimeout(done, ms);
    signal.addEventListener('abort', done, { once: true });
  });
}
