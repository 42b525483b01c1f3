/**
 * The child command of `tenure run` and `tenure lock`: started in its own process group
 * (detached), so that stopping it reaches everything it started; stopped with SIGTERM to the
 * group, then SIGKILL to the group after a grace period.
 */
import { spawn } from 'node:child_process';
import type { ChildProcess } from 'node:child_process';
import { readFileSync, readdirSync } from 'node:fs';
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

export class ChildJob {
  readonly pid: number | undefined;
  /** Resolves once, when the child has exited (or failed to start). Never rejects. */
  readonly exited: Promise<ChildExit>;
  private readonly proc: ChildProcess;
  private result: ChildExit | null = null;
  private stopping: Promise<ChildExit> | null = null;
  private forceKill: (() => void) | null = null;

  constructor(command: string, args: readonly string[], env: NodeJS.ProcessEnv) {
    // stdin is not passed on: the child runs in its own process group, where reading the
    // terminal would stop it (SIGTTIN).
    this.proc = spawn(command, args, { detached: true, stdio: ['ignore', 'inherit', 'inherit'], env });
    this.pid = this.proc.pid;
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
        done({ code: code ?? 128 + (signal ? (constants.signals[signal] ?? 0) : 0), signal });
      });
    });
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
