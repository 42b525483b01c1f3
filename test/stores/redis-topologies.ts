/**
 * Private Redis Cluster and Sentinel setups for tests: processes on free ports, no persistence,
 * each in its own temp dir, killed (and the dirs removed) by `stop()`.
 *
 *  - `startCluster(3)`: three masters (`--cluster-enabled yes`), joined by
 *    `redis-cli --cluster create … --cluster-yes`, returned once every node reports
 *    `cluster_state:ok` and agrees on the slot map.
 *  - `startSentinel()`: one master, one replica in sync with it, and sentinels monitoring the
 *    master as `name` (quorum 2 of 3 by default), returned once every sentinel knows the replica
 *    and the other sentinels.
 */
import { spawn } from 'node:child_process';
import type { ChildProcess } from 'node:child_process';
import { closeSync, mkdtempSync, openSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { expect } from 'vitest';
import { StoreUnavailableError } from '../../src/core/index.js';
import { freePort, killAndWait } from './redis-servers.js';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Poll `check` every 50 ms until it is true, or throw naming `what` after `ms`. */
export async function waitUntil(what: string, check: () => Promise<boolean>, ms = 15_000): Promise<void> {
  const until = Date.now() + ms;
  for (;;) {
    if (await check().catch(() => false)) return;
    if (Date.now() > until) throw new Error(`timed out after ${ms} ms waiting until ${what}`);
    await sleep(50);
  }
}

/** Run `fn` until it succeeds; every failure on the way must be StoreUnavailableError. Returns the failures seen. */
export async function untilRecovered<T>(fn: () => Promise<T>, ms = 30_000): Promise<{ value: T; failures: number }> {
  const until = Date.now() + ms;
  let failures = 0;
  for (;;) {
    try {
      return { value: await fn(), failures };
    } catch (err) {
      expect(err).toBeInstanceOf(StoreUnavailableError);
      failures++;
      if (Date.now() > until) throw err;
      await sleep(100);
    }
  }
}

/** One redis-server (or sentinel) process in its own temp dir. */
export class RedisProcess {
  private proc: ChildProcess | null = null;

  private constructor(
    readonly port: number,
    readonly dir: string,
    private readonly args: readonly string[],
  ) {}

  /** Start redis-server with the arguments `args` gives for a fresh temp dir and a free port. */
  static async start(args: (dir: string, port: number) => string[]): Promise<RedisProcess> {
    const port = await freePort();
    const dir = mkdtempSync(join(tmpdir(), 'tenure-redis-topo-'));
    const p = new RedisProcess(port, dir, args(dir, port));
    try {
      await p.spawn();
    } catch (err) {
      await p.stop();
      throw err;
    }
    return p;
  }

  get address(): string {
    return `127.0.0.1:${this.port}`;
  }

  get running(): boolean {
    return this.proc !== null;
  }

  /** A short-lived admin connection: `fn` runs with it, then it is closed. */
  async admin<T>(fn: (c: Redis) => Promise<T>): Promise<T> {
    const c = new Redis({ port: this.port, host: '127.0.0.1', lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null });
    c.on('error', () => {});
    try {
      await c.connect();
      return await fn(c);
    } finally {
      c.disconnect();
    }
  }

  private async spawn(): Promise<void> {
    const log = join(this.dir, 'redis.log');
    const fd = openSync(log, 'a');
    const proc = spawn('redis-server', [...this.args], { stdio: ['ignore', fd, fd] });
    closeSync(fd);
    this.proc = proc;
    // An exit ends the wait at once, with the server's own words (waitUntil swallows the check's errors).
    await waitUntil(`redis on ${this.port} answers PING`, async () => proc.exitCode !== null || (await this.admin((c) => c.ping())) === 'PONG', 5000);
    if (proc.exitCode !== null) throw new Error(`redis-server on ${this.port} exited with ${proc.exitCode}: ${readFileSync(log, 'utf8').trim().slice(-800)}`);
  }

  /** SIGSTOP: the server keeps its sockets but answers nothing until resume(). */
  pause(): void {
    this.proc?.kill('SIGSTOP');
  }

  resume(): void {
    this.proc?.kill('SIGCONT');
  }

  /** SIGKILL and wait for the exit. */
  async kill(): Promise<void> {
    const proc = this.proc;
    this.proc = null;
    await killAndWait(proc);
  }

  async stop(): Promise<void> {
    await this.kill();
    rmSync(this.dir, { recursive: true, force: true });
  }
}

/** redis-server arguments for a private, non-persistent node. */
function nodeArgs(dir: string, port: number, extra: string[] = []): string[] {
  return ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--dir', dir, '--protected-mode', 'no', '--loglevel', 'warning', ...extra];
}

function run(command: string, args: string[], timeoutMs = 20_000): Promise<string> {
  return new Promise((resolve, reject) => {
    const p = spawn(command, args, { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    p.stdout.on('data', (d: Buffer) => (out += d.toString()));
    p.stderr.on('data', (d: Buffer) => (out += d.toString()));
    const timer = setTimeout(() => p.kill('SIGKILL'), timeoutMs);
    p.once('error', reject);
    p.once('exit', (code) => {
      clearTimeout(timer);
      if (code === 0) resolve(out);
      else reject(new Error(`${command} ${args.join(' ')} exited with ${code}: ${out}`));
    });
  });
}

export interface PrivateCluster {
  readonly nodes: readonly RedisProcess[];
  /** Startup nodes for `new Cluster(...)`. */
  readonly startupNodes: { host: string; port: number }[];
  stop(): Promise<void>;
}

/** `n` (>= 3) masters, no replicas, all 16384 slots assigned, cluster_state:ok everywhere. */
export async function startCluster(n = 3): Promise<PrivateCluster> {
  // The cluster bus gets a free port of its own: by default it is the node's port + 10000, which
  // nobody checked was free (seen in CI: a node that never answered PING).
  const nodes = await Promise.all(
    Array.from({ length: n }, async () => {
      const bus = await freePort();
      return RedisProcess.start((dir, port) =>
        nodeArgs(dir, port, ['--cluster-enabled', 'yes', '--cluster-port', String(bus), '--cluster-config-file', join(dir, 'nodes.conf'), '--cluster-node-timeout', '3000']),
      );
    }),
  );
  const stop = async (): Promise<void> => {
    await Promise.all(nodes.map((p) => p.stop()));
  };
  try {
    await run('redis-cli', ['--cluster', 'create', ...nodes.map((p) => p.address), '--cluster-replicas', '0', '--cluster-yes']);
    await waitUntil('every node reports cluster_state:ok and knows every node', async () => {
      for (const p of nodes) {
        const info = await p.admin((c) => c.cluster('INFO'));
        if (!/cluster_state:ok/.test(String(info)) || !new RegExp(`cluster_known_nodes:${n}\\b`).test(String(info))) return false;
      }
      return true;
    });
  } catch (err) {
    await stop();
    throw err;
  }
  return { nodes, startupNodes: nodes.map((p) => ({ host: '127.0.0.1', port: p.port })), stop };
}

export interface PrivateSentinel {
  readonly name: string;
  /** Index 0 is the master at start, 1 its replica. */
  readonly servers: readonly RedisProcess[];
  readonly sentinels: readonly RedisProcess[];
  /** For ioredis's `sentinels` option. */
  readonly sentinelNodes: { host: string; port: number }[];
  /** The port of the master the sentinels currently report. */
  masterPort(): Promise<number>;
  stop(): Promise<void>;
}

/** One master, one replica in sync, and `count` sentinels (quorum `quorum`) watching the master. */
export async function startSentinel(options: { name?: string; count?: number; quorum?: number } = {}): Promise<PrivateSentinel> {
  const name = options.name ?? 'tenure-test';
  const count = options.count ?? 3;
  const quorum = options.quorum ?? Math.min(2, count);
  const master = await RedisProcess.start((dir, port) => nodeArgs(dir, port));
  const all: RedisProcess[] = [master];
  const stop = async (): Promise<void> => {
    await Promise.all(all.map((p) => p.stop()));
  };
  try {
    const replica = await RedisProcess.start((dir, port) => nodeArgs(dir, port, ['--replicaof', '127.0.0.1', String(master.port)]));
    all.push(replica);
    await waitUntil('the replica is in sync with the master', async () => /master_link_status:up/.test(await replica.admin((c) => c.info('replication'))));
    const sentinels: RedisProcess[] = [];
    for (let i = 0; i < count; i++) {
      const s = await RedisProcess.start((dir, port) => {
        const conf = join(dir, 'sentinel.conf');
        writeFileSync(
          conf,
          [
            `port ${port}`,
            'bind 127.0.0.1',
            'protected-mode no',
            `dir ${dir}`,
            `sentinel monitor ${name} 127.0.0.1 ${master.port} ${quorum}`,
            `sentinel down-after-milliseconds ${name} 1000`,
            `sentinel failover-timeout ${name} 10000`,
            `sentinel parallel-syncs ${name} 1`,
            '',
          ].join('\n'),
        );
        return [conf, '--sentinel', '--loglevel', 'warning'];
      });
      sentinels.push(s);
      all.push(s);
    }
    await waitUntil('every sentinel knows the replica and the other sentinels', async () => {
      for (const s of sentinels) {
        const replicas = (await s.admin((c) => c.call('SENTINEL', 'REPLICAS', name))) as unknown[];
        const others = (await s.admin((c) => c.call('SENTINEL', 'SENTINELS', name))) as unknown[];
        if (replicas.length < 1 || others.length < count - 1) return false;
      }
      return true;
    });
    const masterPort = async (): Promise<number> => {
      for (const s of sentinels) {
        if (!s.running) continue;
        const addr = (await s.admin((c) => c.call('SENTINEL', 'GET-MASTER-ADDR-BY-NAME', name)).catch(() => null)) as string[] | null;
        if (addr) return Number(addr[1]);
      }
      throw new Error('no sentinel answered');
    };
    return { name, servers: [master, replica], sentinels, sentinelNodes: sentinels.map((s) => ({ host: '127.0.0.1', port: s.port })), masterPort, stop };
  } catch (err) {
    await stop();
    throw err;
  }
}
