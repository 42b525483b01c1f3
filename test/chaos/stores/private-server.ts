/**
 * A private server process for a chaos backend (redis-server, postgres, mysqld, etcd): started on
 * a free port in the run's directory, and killed (kill -9), stopped and restarted on the same
 * port by the nemesis. Network chaos backends build their `start`, `restart` and `members` from it.
 */
import { execFileSync, spawn } from 'node:child_process';
import type { ChildProcess } from 'node:child_process';
import { closeSync, openSync, readFileSync } from 'node:fs';
import net from 'node:net';
import type { Endpoint } from '../proxy/index.js';
import { freePort } from '../../fixtures/ports.js';

export { freePort };

export interface PrivateServerOptions {
  /** For messages. */
  readonly name: string;
  readonly command: string;
  /** The command's arguments for a given port. */
  readonly args: (port: number) => readonly string[];
  /** Port to listen on (default: a free one, kept across restarts). */
  readonly port?: number;
  readonly host?: string;
  readonly env?: NodeJS.ProcessEnv;
  readonly cwd?: string;
  /** stdout and stderr go here (appended), else nowhere. */
  readonly logFile?: string;
  /** How long a start may take before it fails (default 20 s). */
  readonly readyTimeoutMs?: number;
  /** Readiness beyond "the port accepts" (a protocol ping); polled until true. */
  readonly ready?: (endpoint: Endpoint) => Promise<boolean>;
  /** Run as this user and group (PostgreSQL refuses to run as root). */
  readonly uid?: number;
  readonly gid?: number;
  /**
   * The server forks worker processes (PostgreSQL's backends): start it in its own process group
   * and send kill -9, SIGSTOP and SIGCONT to the whole group, as a crash or a stall of the host would.
   */
  readonly processGroup?: boolean;
  /** The signal for a clean stop (default SIGTERM; PostgreSQL's fast shutdown is SIGINT). */
  readonly stopSignal?: NodeJS.Signals;
}

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** Null when `command` runs here (`command --version` succeeds), else why not. */
export function missingCommand(command: string): string | null {
  try {
    execFileSync(command, ['--version'], { stdio: 'ignore', timeout: 10_000 });
    return null;
  } catch {
    return `${command} is not installed`;
  }
}

/** The last lines of a log file, for an error message (the run's directory may be gone by the time anyone reads it). */
function logTail(path: string, chars = 1500): string {
  try {
    return readFileSync(path, 'utf8').slice(-chars);
  } catch {
    return '(unreadable)';
  }
}

/** True when a TCP connection to `endpoint` is accepted within `timeoutMs`. */
export function canConnect(endpoint: Endpoint, timeoutMs = 500): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = net.connect(endpoint.port, endpoint.host);
    const done = (ok: boolean): void => {
      clearTimeout(timer);
      socket.destroy();
      resolve(ok);
    };
    const timer = setTimeout(() => done(false), timeoutMs);
    socket.once('connect', () => done(true));
    socket.once('error', () => done(false));
  });
}

export class PrivateServer {
  readonly endpoint: Endpoint;
  private child: ChildProcess | null = null;
  private exited: Promise<void> = Promise.resolve();

  private constructor(
    private readonly options: PrivateServerOptions,
    port: number,
  ) {
    this.endpoint = { host: options.host ?? '127.0.0.1', port };
  }

  /** Start a server and wait until it serves. */
  static async start(options: PrivateServerOptions): Promise<PrivateServer> {
    const server = new PrivateServer(options, options.port ?? (await freePort(options.host)));
    await server.start();
    return server;
  }

  get running(): boolean {
    return this.child !== null;
  }

  get pid(): number | undefined {
    return this.child?.pid;
  }

  /** Start the process (if not running) and wait until it serves. */
  async start(): Promise<void> {
    if (this.child) return;
    const o = this.options;
    const fd = o.logFile ? openSync(o.logFile, 'a') : 'ignore';
    const child = spawn(o.command, [...o.args(this.endpoint.port)], {
      cwd: o.cwd,
      env: o.env ?? process.env,
      stdio: ['ignore', fd, fd],
      ...(o.uid !== undefined ? { uid: o.uid } : {}),
      ...(o.gid !== undefined ? { gid: o.gid } : {}),
      detached: o.processGroup === true,
    });
    if (typeof fd === 'number') closeSync(fd);
    this.child = child;
    let exitInfo: string | null = null;
    this.exited = new Promise((resolve) => {
      child.once('error', (err) => {
        exitInfo = err.message;
        if (this.child === child) this.child = null;
        resolve();
      });
      child.once('exit', (code, signal) => {
        exitInfo = `exit code ${code}, signal ${signal}`;
        if (this.child === child) this.child = null;
        resolve();
      });
    });
    const until = performance.now() + (o.readyTimeoutMs ?? 20_000);
    for (;;) {
      if (exitInfo !== null) throw new Error(`${o.name} did not start (${exitInfo})${o.logFile ? `; the end of ${o.logFile}:\n${logTail(o.logFile)}` : ''}`);
      if ((await canConnect(this.endpoint, 300)) && (!o.ready || (await o.ready(this.endpoint).catch(() => false)))) return;
      if (performance.now() > until) {
        await this.kill();
        throw new Error(`${o.name} did not serve on ${this.endpoint.host}:${this.endpoint.port} within ${o.readyTimeoutMs ?? 20_000} ms`);
      }
      await sleep(50);
    }
  }

  /** Send `signal` to the process, or to its whole process group with `processGroup`. */
  private signal(child: ChildProcess, signal: NodeJS.Signals): void {
    if (this.options.processGroup && child.pid !== undefined) {
      try {
        process.kill(-child.pid, signal);
        return;
      } catch {
        // the group is gone; fall back to the process itself
      }
    }
    child.kill(signal);
  }

  /** kill -9 (the whole group with `processGroup`): no shutdown, no flush. Resolves when the process is gone. */
  async kill(): Promise<void> {
    if (!this.child) return;
    this.signal(this.child, 'SIGKILL');
    await this.exited;
  }

  /** SIGTERM (or the `stopSignal`), then SIGKILL after `graceMs`. */
  async stop(graceMs = 5000): Promise<void> {
    const child = this.child;
    if (!child) return;
    this.signal(child, 'SIGCONT');
    child.kill(this.options.stopSignal ?? 'SIGTERM');
    const timer = setTimeout(() => this.signal(child, 'SIGKILL'), graceMs);
    await this.exited;
    clearTimeout(timer);
    // Workers left behind by a stop that timed out go with the group.
    if (this.options.processGroup && child.pid !== undefined) {
      try {
        process.kill(-child.pid, 'SIGKILL');
      } catch {
        // none left
      }
    }
  }

  /**
   * SIGSTOP the server for `ms`, then SIGCONT: every request waits (a generic "slow the store").
   * Resolves with the interval it was stopped.
   */
  async pause(ms: number): Promise<{ from: number; to: number } | null> {
    const child = this.child;
    if (!child) return null;
    const from = Date.now();
    this.signal(child, 'SIGSTOP');
    try {
      await sleep(ms);
    } finally {
      this.signal(child, 'SIGCONT');
    }
    return { from, to: Date.now() };
  }

  /** Down for `downMs` (killed with -9 when `hard`, else stopped), then up again on the same port. */
  async restart(downMs: number, hard = true): Promise<void> {
    if (hard) await this.kill();
    else await this.stop();
    await sleep(downMs);
    await this.start();
  }
}
