/**
 * Private `redis-server` processes for fault tests: each on a free port, in its own temp dir, with
 * no persistence (a restart comes back empty) unless `persist` is set (append-only file, fsync
 * on every write: a restart comes back with every acknowledged write); killed, paused (SIGSTOP),
 * resumed and restarted on the same port.
 */
import { spawn } from 'node:child_process';
import type { ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePort } from '../fixtures/ports.js';

export { freePort };

/** SIGKILL a child process (resumed first, in case it was paused) and wait until it has exited. */
export async function killAndWait(proc: ChildProcess | null): Promise<void> {
  if (!proc || proc.exitCode !== null || proc.signalCode !== null) return;
  const exited = new Promise<void>((r) => proc.once('exit', () => r()));
  proc.kill('SIGCONT');
  proc.kill('SIGKILL');
  await exited;
}


function ping(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const sock = connect(port, '127.0.0.1');
    const done = (ok: boolean): void => {
      sock.destroy();
      resolve(ok);
    };
    sock.setTimeout(200, () => done(false));
    sock.once('error', () => done(false));
    sock.once('connect', () => sock.write('PING\r\n'));
    sock.once('data', (d) => done(d.toString().startsWith('+PONG')));
  });
}

export class RedisServer {
  readonly port: number;
  readonly dir: string;
  private proc: ChildProcess | null = null;

  readonly persist: boolean;

  private constructor(port: number, persist: boolean) {
    this.port = port;
    this.persist = persist;
    this.dir = mkdtempSync(join(tmpdir(), 'tenure-redis-'));
  }

  get address(): string {
    return `127.0.0.1:${this.port}`;
  }

  get url(): string {
    return `redis://127.0.0.1:${this.port}`;
  }

  /** The running process's id, if it is running. */
  get pid(): number | undefined {
    return this.proc?.pid;
  }

  static async start(options: { persist?: boolean } = {}): Promise<RedisServer> {
    const server = new RedisServer(await freePort(), options.persist ?? false);
    await server.restart();
    return server;
  }

  /** Start (again) on the same port: with an empty data set, or with the persisted one when `persist` is set. */
  async restart(): Promise<void> {
    if (this.proc) await this.kill();
    const durability = this.persist ? ['--appendonly', 'yes', '--appendfsync', 'always'] : ['--appendonly', 'no'];
    const proc = spawn(
      'redis-server',
      ['--port', String(this.port), '--bind', '127.0.0.1', '--save', '', ...durability, '--dir', this.dir, '--protected-mode', 'no', '--loglevel', 'warning'],
      { stdio: 'ignore' },
    );
    this.proc = proc;
    const until = Date.now() + 5000;
    while (Date.now() < until) {
      if (proc.exitCode !== null) throw new Error(`redis-server on ${this.port} exited with ${proc.exitCode}`);
      if (await ping(this.port)) return;
      await new Promise((r) => setTimeout(r, 20));
    }
    throw new Error(`redis-server on ${this.port} did not answer PING within 5 s`);
  }

  /** SIGKILL and wait for the exit. */
  async kill(): Promise<void> {
    const proc = this.proc;
    this.proc = null;
    await killAndWait(proc);
  }

  pause(): void {
    this.proc?.kill('SIGSTOP');
  }

  resume(): void {
    this.proc?.kill('SIGCONT');
  }

  async stop(): Promise<void> {
    await this.kill();
    rmSync(this.dir, { recursive: true, force: true });
  }
}

/** Start `n` servers at once. */
export async function startServers(n: number, options: { persist?: boolean } = {}): Promise<RedisServer[]> {
  return Promise.all(Array.from({ length: n }, () => RedisServer.start(options)));
}
