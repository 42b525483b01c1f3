/**
 * Redlock over three private redis-server processes: quorum, validity, extension, loss, interop
 * with node-redlock, and the faults the issue names (servers down, paused, flushed, restarted).
 */
import { spawn } from 'node:child_process';
import { createRequire } from 'node:module';
import { createInterface } from 'node:readline';
import { Redis } from 'ioredis';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { LockTimeoutError, NotLeaderError, StaleTermError, StoreDataError } from '../../src/core/index.js';
import { MemoryStore } from '../../src/stores/memory/index.js';
import { RedisStore } from '../../src/stores/redis/index.js';
import { Redlock, RedlockTimeoutError, openRedlock, parseRedlockUrl, redisCounter, storeLeaseClock } from '../../src/locks/index.js';
import type { RedlockHandle } from '../../src/locks/index.js';
import { startServers } from '../stores/redis-servers.js';
import type { RedisServer } from '../stores/redis-servers.js';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
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

let servers: RedisServer[];
let url: string;
const open: { close(): Promise<void> }[] = [];
let n = 0;
/** A fresh resource name per test, so a leftover key of one test never blocks another. */
const resource = (): string => `res-${process.pid}-${++n}`;

async function redlock(extra: Parameters<typeof openRedlock>[1] = {}): Promise<Redlock> {
  const r = await openRedlock(url, extra);
  open.push(r);
  return r;
}

beforeAll(async () => {
  servers = await startServers(3);
  url = `redlock://${servers.map((s) => s.address).join(',')}`;
});

afterEach(async () => {
  for (const r of open.splice(0)) await r.close();
  // Bring every server back for the next test.
  for (const s of servers) {
    s.resume();
  }
  await Promise.all(
    servers.map(async (s) => {
      const c = new Redis({ port: s.port, lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null });
      c.on('error', () => {});
      const alive = await c.connect().then(() => c.ping().then(() => true), () => false);
      c.disconnect();
      if (!alive) await s.restart();
    }),
  );
  // A new deployment for every test: a server restarted empty above would otherwise be left out
  // of the quorum counter's count (for its probation) in the next test.
  await Promise.all(
    servers.map(async (s) => {
      const c = new Redis({ port: s.port });
      await c.flushall();
      c.disconnect();
    }),
  );
});

afterAll(async () => {
  await Promise.all(servers.map((s) => s.stop()));
});

describe('Redlock', () => {
  it('parses redlock URLs and rejects bad ones naming the problem', () => {
    expect(parseRedlockUrl('redlock://a:1,b:2,c:3?fence=2&ttl=5s')).toMatchObject({
      servers: [{ host: 'a', port: 1 }, { host: 'b', port: 2 }, { host: 'c', port: 3 }],
      fenceInstance: 2,
      ttlMs: 5000,
    });
    expect(parseRedlockUrl('redlock://a:1,b:2,c:3')).toMatchObject({ fenceInstance: null });
    expect(parseRedlockUrl('redlock://a:1,b:2,c:3?fence=quorum&probation=2s')).toMatchObject({ fenceInstance: null, probationMs: 2000 });
    expect(() => parseRedlockUrl('redlock://a:1,b:2?fence=5')).toThrow(/fence must be 'quorum' or a server index/);
    // A password never shows in the message about a bad URL.
    const bad = (() => {
      try {
        parseRedlockUrl('redlock://:s3cret@a:1,b:x?fence=9');
      } catch (err) {
        return (err as Error).message;
      }
      return '';
    })();
    expect(bad).toMatch(/bad server 'b:x' in 'redlock:\/\/:\*\*\*@a:1,b:x\?fence=9'/);
    expect(bad).not.toContain('s3cret');
    expect(() => parseRedlockUrl('redlock://')).toThrow(/expected redlock:\/\/host:port/);
  });

  it('lets one of two clients hold a resource, with increasing fencing tokens across holders', async () => {
    const a = await redlock();
    const b = await redlock();
    const r = resource();
    const h1 = await a.acquire(r, { ttlMs: 2000 });
    expect(h1.token).toEqual({ lease: r, term: expect.any(Number) });
    await expect(b.acquire(r, { ttlMs: 2000, waitMs: 300 })).rejects.toBeInstanceOf(LockTimeoutError);
    await h1.release();
    expect(h1.signal.aborted).toBe(true);
    const h2 = await b.acquire(r, { ttlMs: 2000, waitMs: 1000 });
    expect(h2.term).toBeGreaterThan(h1.term);
    await h2.release();
  });

  it('computes validity as ttl - elapsed - drift and reports what is left at any moment', async () => {
    const rl = await redlock();
    const ttlMs = 5000;
    const drift = Math.round(0.01 * ttlMs) + 2;
    expect(rl.driftMs(ttlMs)).toBe(drift);
    const h = await rl.acquire(resource(), { ttlMs, autoExtend: false });
    const first = h.remainingMs();
    expect(first).toBeLessThanOrEqual(ttlMs - drift);
    expect(first).toBeGreaterThan(ttlMs - drift - 100);
    await sleep(100);
    expect(h.remainingMs()).toBeLessThan(first - 90);
    await h.release();
    expect(h.remainingMs()).toBe(0);
  });

  it('extends automatically while held, so a lock outlives its TTL', async () => {
    const a = await redlock();
    const b = await redlock();
    const r = resource();
    const h = await a.acquire(r, { ttlMs: 300 });
    await sleep(800);
    expect(h.signal.aborted).toBe(false);
    expect(h.remainingMs()).toBeGreaterThan(0);
    await expect(b.acquire(r, { ttlMs: 300, waitMs: 200 })).rejects.toBeInstanceOf(LockTimeoutError);
    await h.release();
  });

  it('aborts the signal when no extension reaches a quorum before the validity ends', async () => {
    const rl = await redlock();
    const h = await rl.acquire(resource(), { ttlMs: 600 });
    const acquiredAt = Date.now();
    // A reference timer for the latest instant the validity can end: on a loaded machine timers
    // fire late, and the lock's own deadline timer may be no later than this one.
    let referenceAt = Number.POSITIVE_INFINITY;
    setTimeout(() => (referenceAt = Date.now()), 600);
    let abortedAt = Number.POSITIVE_INFINITY;
    h.signal.addEventListener('abort', () => (abortedAt = Date.now()), { once: true });
    await Promise.all([servers[1]!.kill(), servers[2]!.kill()]);
    const reason = await new Promise<unknown>((r) =>
      h.signal.aborted ? r(h.signal.reason) : h.signal.addEventListener('abort', () => r(h.signal.reason), { once: true }),
    );
    expect(reason).toBeInstanceOf(NotLeaderError);
    expect((reason as Error).message).toMatch(/validity ended before an extension reached a quorum/);
    await new Promise((r) => setTimeout(r, Math.max(0, acquiredAt + 650 - Date.now())));
    expect(abortedAt).toBeLessThanOrEqual(Math.max(acquiredAt + 600, referenceAt) + 10);
    expect(h.remainingMs()).toBe(0);
  });

  it('is suspended while extensions miss a quorum, recovers with the same term, and is lost at the validity end', async () => {
    const rl = await redlock();
    const h = await rl.acquire(resource(), { ttlMs: 4000 });
    const events: string[] = [];
    h.on('suspended', () => events.push('suspended')).on('recovered', () => events.push('recovered')).on('lost', ({ reason }) => events.push(`lost:${reason}`));
    const next = (event: 'suspended' | 'recovered' | 'lost'): Promise<void> => new Promise((r) => h.once(event, () => r()));
    // Two of three servers paused: the next extension (in about 1.3 s) cannot reach a quorum.
    const suspended = next('suspended');
    servers[1]!.pause();
    servers[2]!.pause();
    await suspended;
    expect(h.suspended).toBe(true);
    expect(h.signal.aborted).toBe(false);
    const left = h.remainingMs();
    expect(left).toBeGreaterThan(0);
    const recovered = next('recovered');
    servers[1]!.resume();
    servers[2]!.resume();
    await recovered;
    expect(h.suspended).toBe(false);
    expect(h.remainingMs()).toBeGreaterThan(left);
    expect(h.signal.aborted).toBe(false);
    const lost = next('lost');
    servers[1]!.pause();
    servers[2]!.pause();
    await lost;
    expect(h.signal.aborted).toBe(true);
    expect(h.remainingMs()).toBe(0);
    expect(events).toEqual(['suspended', 'recovered', 'suspended', 'lost:deadline']);
  }, 30_000);

  it('aborts the signal at the next extension when the key was taken on a majority', async () => {
    const rl = await redlock();
    const r = resource();
    const h = await rl.acquire(r, { ttlMs: 900 });
    for (const s of servers) {
      const c = new Redis({ port: s.port });
      await c.set(r, 'someone-else', 'PX', 5000);
      c.disconnect();
    }
    const started = Date.now();
    await new Promise<void>((res) => h.signal.addEventListener('abort', () => res(), { once: true }));
    expect(Date.now() - started).toBeLessThan(500); // at the next extension (every ttl/3), not at the deadline
    expect((h.signal.reason as Error).message).toMatch(/gone or taken on 3 of 3 servers/);
  });

  describe('interoperates with node-redlock on the same resource', () => {
    let clients: Redis[];
    beforeAll(() => {
      clients = servers.map((s) => new Redis({ port: s.port }));
    });
    afterAll(() => {
      for (const c of clients) c.disconnect();
    });

    it('a node-redlock holder excludes tenure, and its release lets tenure in', async () => {
      const r = resource();
      const theirs = new NodeRedlockClass(clients, { retryCount: 0 });
      theirs.on('clientError', () => {});
      const lock = await theirs.lock(r, 3000);
      expect(await clients[0]!.get(r)).toBe(lock.value);
      const ours = await redlock();
      await expect(ours.acquire(r, { waitMs: 300 })).rejects.toBeInstanceOf(RedlockTimeoutError);
      await lock.unlock();
      const h = await ours.acquire(r, { waitMs: 1000 });
      await h.release();
    });

    it('a tenure holder excludes node-redlock, and its release lets node-redlock in', async () => {
      const r = resource();
      const ours = await redlock();
      const h: RedlockHandle = await ours.acquire(r, { ttlMs: 3000 });
      expect(await clients[1]!.get(r)).toBe(h.value);
      expect(h.value).toMatch(/^[0-9a-f]{32}$/);
      const theirs = new NodeRedlockClass(clients, { retryCount: 2, retryDelay: 50, retryJitter: 10 });
      theirs.on('clientError', () => {});
      await expect(theirs.lock(r, 1000)).rejects.toThrow(/Exceeded 2 attempts/);
      await h.release();
      const lock = await theirs.lock(r, 1000);
      await lock.unlock();
    });
  });

  describe('faults', () => {
    it('keeps working with 1 of 3 servers down, whichever it is (server 0 included: tokens come from a majority)', async () => {
      const a = await redlock();
      const b = await redlock();
      const r = resource();
      // The deployment is in use (each server has its marker) before one goes down.
      await (await a.acquire(r, { ttlMs: 1000, waitMs: 2000 })).release();
      await servers[0]!.kill();
      const h = await a.acquire(r, { ttlMs: 1000, waitMs: 2000 });
      await expect(b.acquire(r, { waitMs: 300 })).rejects.toBeInstanceOf(LockTimeoutError);
      await sleep(1200); // extended past its TTL on the two servers left
      expect(h.signal.aborted).toBe(false);
      await h.release();
      const h2 = await b.acquire(r, { waitMs: 1000 });
      expect(h2.term).toBeGreaterThan(h.term);
      await h2.release();
    });

    it('keeps working with the counter server down when tokens come from a store lease', async () => {
      await servers[0]!.kill();
      const store = new MemoryStore();
      const a = await redlock({ fencing: storeLeaseClock(store) });
      const r = resource();
      const h = await a.acquire(r, { ttlMs: 1000, waitMs: 2000 });
      expect(await store.read(r)).toMatchObject({ owner: h.value, term: h.term });
      await h.release();
      expect(await store.read(r)).toBeNull();
      const h2 = await a.acquire(r, { ttlMs: 1000, waitMs: 2000 });
      expect(h2.term).toBe(h.term + 1);
      await h2.release();
    });

    it('with 2 of 3 servers down, acquire fails within its wait with an error naming the servers', async () => {
      await Promise.all([servers[1]!.kill(), servers[2]!.kill()]);
      const rl = await redlock();
      const started = Date.now();
      const err = await rl.acquire(resource(), { waitMs: 500 }).catch((e: unknown) => e);
      const took = Date.now() - started;
      expect(err).toBeInstanceOf(RedlockTimeoutError);
      expect(err).toMatchObject({ code: 'LOCK_TIMEOUT' });
      expect((err as Error).message).toMatch(/not acquired within 500 ms: 1 of 3 servers granted, quorum is 2/);
      expect((err as Error).message).toContain(`${servers[1]!.address} unavailable (not connected)`);
      expect(took).toBeLessThan(500 + 600);
    });

    it('with 2 of 3 servers paused, acquire still fails within its wait', async () => {
      const rl = await redlock({ instanceTimeoutMs: 50 });
      servers[1]!.pause();
      servers[2]!.pause();
      const started = Date.now();
      const err = await rl.acquire(resource(), { waitMs: 400 }).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(RedlockTimeoutError);
      expect((err as Error).message).toMatch(/no answer within 50 ms/);
      expect(Date.now() - started).toBeLessThan(400 + 300);
    });

    it('survives SCRIPT FLUSH on every server (EVALSHA reloads the scripts)', async () => {
      const rl = await redlock();
      const r = resource();
      const h = await rl.acquire(r, { ttlMs: 1000 });
      for (const s of servers) {
        const c = new Redis({ port: s.port });
        await c.script('FLUSH');
        c.disconnect();
      }
      expect(await h.extend()).toBe(true);
      await h.release();
      const c = new Redis({ port: servers[0]!.port });
      expect(await c.get(r)).toBeNull();
      c.disconnect();
      const again = await rl.acquire(r, { waitMs: 500 });
      await again.release();
    });

    it('survives restarted servers: its connections come back and they rejoin the quorum', async () => {
      // Tokens from a store lease, so that only the quorum matters while server 0 is down below.
      const rl = await redlock({ fencing: storeLeaseClock(new MemoryStore()) });
      const r = resource();
      await (await rl.acquire(r, { waitMs: 1000 })).release();
      await servers[1]!.restart();
      await servers[2]!.restart();
      await servers[0]!.kill();
      // Only the restarted two are left: the same Redlock's clients must have reconnected to them.
      const h = await rl.acquire(r, { ttlMs: 1000, waitMs: 3000 });
      expect(h.remainingMs()).toBeGreaterThan(0);
      await h.release();
    });

    it("rejects a paused holder's fenced write after another client took the lock", async () => {
      const r = resource();
      const storeUrl = servers[0]!.url;
      const child = spawn(process.execPath, ['--import', 'tsx', 'test/locks/redlock-holder.ts', url, storeUrl, r, '600'], {
        stdio: ['pipe', 'pipe', 'inherit'],
      });
      const lines = createInterface({ input: child.stdout! })[Symbol.asyncIterator]();
      const next = async (): Promise<Record<string, unknown>> => JSON.parse(String((await lines.next()).value)) as Record<string, unknown>;
      try {
        const first = await next();
        const oldToken = first.acquired as { lease: string; term: number };
        child.stdin!.write('before the pause\n');
        expect(await next()).toMatchObject({ wrote: 1 });
        child.kill('SIGSTOP'); // the holder stops mid-work: no extensions, no writes
        const rl = await redlock();
        const h = await rl.acquire(r, { ttlMs: 2000, waitMs: 3000 });
        expect(h.term).toBeGreaterThan(oldToken.term);
        const store = new RedisStore({ url: storeUrl });
        try {
          expect(await store.appendFenced(h.token, 'ledger', 'by the new holder')).toBe(2);
          child.kill('SIGCONT');
          child.stdin!.write('after the pause\n'); // the old holder writes as if nothing happened
          const outcome = await next();
          expect(outcome).toMatchObject({ error: 'STALE_TERM' });
          expect(String(outcome.message)).toBe(new StaleTermError(r, oldToken.term, h.term).message);
          expect((await store.readStream('ledger')).map((e) => e.payload)).toEqual(['before the pause', 'by the new holder']);
        } finally {
          await store.close();
          await h.release();
        }
      } finally {
        child.kill('SIGCONT');
        child.stdin!.end('exit\n');
        await new Promise((res) => child.once('exit', res));
      }
    });
  });
});

/**
 * A counter at 2^53 - 1 (set by hand) can give no next token: the acquire fails at once with a
 * StoreDataError, every counter script writes nothing (the counter as it was, the resource key not
 * left behind), and no token past 2^53 - 1 is written back anywhere.
 */
describe('Redlock counters at 2^53 - 1', () => {
  const MAX = String(Number.MAX_SAFE_INTEGER);
  const counterKey = (r: string): string => `{tenure}:term:${r}`;
  const admin = (i: number): Redis => {
    const c = new Redis({ port: servers[i]!.port });
    open.push({ close: async () => c.disconnect() });
    return c;
  };
  const counters = (r: string): Promise<(string | null)[]> => Promise.all(servers.map((_, i) => admin(i).get(counterKey(r))));
  const keysGone = async (r: string): Promise<void> => {
    const until = Date.now() + 5000; // the undo of the other servers' grants is not awaited by the acquire
    while ((await Promise.all(servers.map((_, i) => admin(i).exists(r)))).some((n) => n === 1)) {
      if (Date.now() > until) throw new Error(`resource key ${r} still set somewhere after 5 s`);
      await sleep(10);
    }
  };
  const rejects = async (p: Promise<unknown>): Promise<Error> => {
    const t0 = performance.now();
    const err = await p.then(
      () => null,
      (e: unknown) => e as Error,
    );
    expect(err).toBeInstanceOf(StoreDataError);
    expect(err!.message).toMatch(/no new token can be issued/);
    expect(performance.now() - t0).toBeLessThan(4000); // not waited out to waitMs
    return err!;
  };

  it('quorum counter, every server at the top: StoreDataError, nothing written on any server', async () => {
    const r = resource();
    await Promise.all(servers.map((_, i) => admin(i).set(counterKey(r), MAX)));
    const rl = await redlock();
    await rejects(rl.acquire(r, { ttlMs: 2000, waitMs: 10_000 }));
    expect(await counters(r)).toEqual([MAX, MAX, MAX]);
    await keysGone(r);
  });

  it('quorum counter, one granting server at the top: StoreDataError, that server unchanged, no key left', async () => {
    const r = resource();
    await Promise.all(servers.map((_, i) => admin(i).set(counterKey(r), i === 1 ? MAX : '5')));
    const rl = await redlock();
    await rejects(rl.acquire(r, { ttlMs: 2000, waitMs: 10_000 }));
    const after = await counters(r);
    expect(after[1]).toBe(MAX);
    for (const c of after) expect(Number(c)).toBeLessThanOrEqual(Number.MAX_SAFE_INTEGER);
    await keysGone(r);
  });

  it('quorum counter, a refusing server at the top: StoreDataError, no token past 2^53 - 1 written back', async () => {
    const r = resource();
    await admin(0).set(r, 'someone-else', 'PX', 60_000);
    await Promise.all(servers.map((_, i) => admin(i).set(counterKey(r), i === 0 ? MAX : '3')));
    const rl = await redlock();
    await rejects(rl.acquire(r, { ttlMs: 2000, waitMs: 10_000 }));
    const after = await counters(r);
    expect(after[0]).toBe(MAX);
    for (const c of after) expect(Number(c)).toBeLessThanOrEqual(Number.MAX_SAFE_INTEGER);
    expect(await admin(0).get(r)).toBe('someone-else');
    await admin(0).del(r);
    await keysGone(r);
  });

  it('single-server counter in the acquire script: StoreDataError, the counter unchanged, no key left', async () => {
    const r = resource();
    await admin(0).set(counterKey(r), MAX);
    const rl = await redlock({ fencing: redisCounter({ instance: 0 }) });
    await rejects(rl.acquire(r, { ttlMs: 2000, waitMs: 10_000 }));
    expect((await counters(r))[0]).toBe(MAX);
    await keysGone(r);
  });

  it('counter on a separate Redis: StoreDataError, the counter unchanged, no key left', async () => {
    const r = resource();
    const separate = admin(2);
    await separate.set(`{sep}:term:${r}`, MAX);
    const rl = await redlock({ fencing: redisCounter({ client: separate, keyPrefix: '{sep}:' }) });
    await rejects(rl.acquire(r, { ttlMs: 2000, waitMs: 10_000 }));
    expect(await separate.get(`{sep}:term:${r}`)).toBe(MAX);
    await keysGone(r);
  });
});
