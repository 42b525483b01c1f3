/**
 * The quorum counter (the default generation clock) under server faults:
 *  - three processes take and release one lock in a loop while servers 0, 1 and 2 are killed in
 *    turn (one down at a time, restarted with their data before the next is killed): every
 *    acquisition succeeds, tokens strictly increase in the order the lock was held, and
 *    node-redlock and tenure still exclude each other both ways while a server is down;
 *  - a server restarted empty never makes a token go back: it is left out until its probation is
 *    over and a write-back has raised its counter for the resource.
 */
import { spawn } from 'node:child_process';
import type { ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { RedlockTimeoutError, openRedlock } from '../../src/locks/index.js';
import type { Redlock } from '../../src/locks/index.js';
import { startServers } from '../stores/redis-servers.js';
import type { RedisServer } from '../stores/redis-servers.js';
import { waitFor } from '../stores/restart-scenario.js';

const require = createRequire(import.meta.url);
interface NodeRedlockLock {
  value: string;
  unlock(): Promise<void>;
}
interface NodeRedlock {
  lock(resource: string, ttl: number): Promise<NodeRedlockLock>;
  on(event: string, fn: (err: unknown) => void): void;
}
type NodeRedlockCtor = new (clients: Redis[], options?: { retryCount?: number; retryDelay?: number; retryJitter?: number }) => NodeRedlock;
const NodeRedlockClass = require('redlock') as NodeRedlockCtor;

const dir = mkdtempSync(join(tmpdir(), 'tenure-redlock-rolling-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** Lines `PID TERM` of the log, in the order the lock was held. */
function held(logFile: string): { pid: number; term: number }[] {
  let text = '';
  try {
    text = readFileSync(logFile, 'utf8');
  } catch {
    return [];
  }
  return text
    .split('\n')
    .filter((l) => l !== '')
    .map((l) => {
      const [pid, term] = l.split(' ');
      return { pid: Number(pid), term: Number(term) };
    });
}

/** node-redlock and tenure exclude each other on `resource`, both ways. */
async function interop(servers: readonly RedisServer[], rl: Redlock, resource: string): Promise<void> {
  const clients = servers.map((s) => {
    const c = new Redis({ port: s.port, maxRetriesPerRequest: 0, enableOfflineQueue: false, retryStrategy: () => null });
    c.on('error', () => {});
    return c;
  });
  try {
    await Promise.all(clients.map((c) => new Promise<void>((r) => (c.status === 'ready' ? r() : (c.once('ready', () => r()), c.once('end', () => r()))))));
    const theirs = new NodeRedlockClass(clients, { retryCount: 20, retryDelay: 100, retryJitter: 50 });
    theirs.on('clientError', () => {});
    // Theirs first: tenure is kept out, then let in by their release.
    const lock = await theirs.lock(resource, 3000);
    await expect(rl.acquire(resource, { ttlMs: 2000, waitMs: 300 })).rejects.toBeInstanceOf(RedlockTimeoutError);
    await lock.unlock();
    const h = await rl.acquire(resource, { ttlMs: 2000, waitMs: 3000 });
    // Ours: node-redlock is kept out, then let in by our release.
    const short = new NodeRedlockClass(clients, { retryCount: 2, retryDelay: 50, retryJitter: 10 });
    short.on('clientError', () => {});
    await expect(short.lock(resource, 1000)).rejects.toThrow(/Exceeded 2 attempts/);
    await h.release();
    const again = await theirs.lock(resource, 1000);
    await again.unlock();
  } finally {
    for (const c of clients) c.disconnect();
  }
}

describe('Redlock quorum counter, servers killed in turn (persistent servers)', () => {
  let servers: RedisServer[];
  beforeAll(async () => {
    servers = await startServers(3, { persist: true });
  });
  afterAll(async () => {
    await Promise.all(servers.map((s) => s.stop()));
  });

  it('3 processes lock in a loop while servers 0, 1, 2 go down in turn: every acquisition succeeds and tokens strictly increase', async () => {
    const url = `redlock://${servers.map((s) => s.address).join(',')}`;
    const logFile = join(dir, 'held.log');
    writeFileSync(logFile, '');
    const resource = `rolling-${process.pid}`;
    const loopers: ChildProcess[] = [];
    const outputs: string[] = [];
    for (let i = 0; i < 3; i++) {
      const child = spawn(process.execPath, ['--import', 'tsx', 'test/locks/redlock-looper.ts', url, resource, logFile, '15000'], {
        stdio: ['pipe', 'pipe', 'inherit'],
      });
      outputs.push('');
      child.stdout!.on('data', (d: Buffer) => (outputs[i] += d.toString()));
      loopers.push(child);
    }
    const rl = await openRedlock(url);
    try {
      /** Wait until `more` acquisitions (by any process) have been logged. */
      const progress = async (more: number, what: string): Promise<void> => {
        const from = held(logFile).length;
        await waitFor(() => held(logFile).length >= from + more, 60_000, what);
      };
      await progress(15, 'the loop under way with every server up');
      for (const i of [0, 1, 2]) {
        await servers[i]!.kill();
        await progress(15, `15 acquisitions with server ${i} down`);
        await interop(servers, rl, `interop-${i}-${process.pid}`);
        await servers[i]!.restart();
        await progress(10, `10 acquisitions after server ${i} came back`);
      }
    } finally {
      await rl.close();
      const ended = loopers.map((c) => new Promise((r) => c.once('exit', r)));
      for (const c of loopers) c.stdin!.end();
      await Promise.all(ended);
    }
    const summaries = outputs.map((o) => JSON.parse(o.trim().split('\n').at(-1)!) as { done: number; failures: number });
    expect(outputs.join('')).not.toContain('"error"');
    for (const s of summaries) {
      expect(s.failures).toBe(0);
      expect(s.done).toBeGreaterThan(0);
    }
    const log = held(logFile);
    expect(new Set(log.map((l) => l.pid)).size).toBe(3);
    for (let k = 1; k < log.length; k++) {
      if (!(log[k]!.term > log[k - 1]!.term)) throw new Error(`token ${log[k]!.term} (pid ${log[k]!.pid}) came after ${log[k - 1]!.term} (pid ${log[k - 1]!.pid}) at line ${k + 1}`);
    }
  }, 240_000);
});

describe('Redlock quorum counter, a server restarted empty (no persistence)', () => {
  let servers: RedisServer[];
  beforeAll(async () => {
    servers = await startServers(3);
  });
  afterAll(async () => {
    await Promise.all(servers.map((s) => s.stop()));
  });

  it('never makes tokens go back: the emptied server is left out until its probation is over and a write-back vouched for it', async () => {
    const url = `redlock://${servers.map((s) => s.address).join(',')}?probation=1s`;
    const rl = await openRedlock(url);
    const probe = new Redis({ port: servers[0]!.port, retryStrategy: () => 50 });
    probe.on('error', () => {});
    const r = `emptied-${process.pid}`;
    let last = 0;
    /** Take and release r; its token must be above every earlier one. */
    const take = async (waitMs: number): Promise<number> => {
      const h = await rl.acquire(r, { ttlMs: 500, waitMs });
      await h.release();
      expect(h.term).toBeGreaterThan(last);
      last = h.term;
      return h.term;
    };
    try {
      for (let k = 0; k < 5; k++) await take(2000);
      // Server 0 loses everything: its counter for r is gone.
      await servers[0]!.restart();
      // With every server up the token still comes from the two that kept their counters; the
      // first acquisition once the client has reconnected to server 0 marks it 'reborn'.
      await waitFor(async () => (await take(3000), (await probe.get('{tenure}:redlock-marker')) === 'reborn'), 10_000, 'server 0 marked reborn');
      // Now server 1 is out too: the emptied server 0 must not make up a majority with server 2,
      // or the token would go back to what server 0 counted since its restart. Its probation may
      // end meanwhile: it still does not count for r until a write-back vouched for it.
      servers[1]!.pause();
      const err = await take(800).catch((e: unknown) => e);
      servers[1]!.resume();
      expect(err).toBeInstanceOf(RedlockTimeoutError);
      expect((err as Error).message).toMatch(/1 of 3 servers can vouch for their counter, 2 needed/);
      expect((err as Error).message).toContain(`${servers[0]!.address} re-seeding`);
      // After the probation, one acquisition with a majority of counted servers raises server 0's
      // counter and vouches for it; from then on it counts for r with server 1 out again.
      await waitFor(async () => (await probe.exists('{tenure}:redlock-probation')) === 0, 10_000, "server 0's probation over");
      await take(3000);
      expect(await probe.exists(`{tenure}:redlock-trusted:${r}`)).toBe(1);
      servers[1]!.pause();
      await take(3000);
      servers[1]!.resume();
    } finally {
      servers[1]!.resume();
      probe.disconnect();
      await rl.close();
    }
  }, 60_000);
});
