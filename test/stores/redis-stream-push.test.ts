/**
 * Redis stream push beyond the contract: an append published while the subscriber connection is
 * down (heard by nobody) is still told, by the head read after the reconnect.
 */
import { Redis } from 'ioredis';
import { afterEach, describe, expect, it } from 'vitest';
import { RedisStore } from '../../src/stores/redis/index.js';
import { redisBackend, testRedisUrl } from './redis-backend.js';

const cleanups: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

async function until(cond: () => boolean, timeoutMs = 5000): Promise<void> {
  const t0 = Date.now();
  while (!cond() && Date.now() - t0 < timeoutMs) await new Promise((r) => setTimeout(r, 5));
}

describe('redis store: watchStream', () => {
  it('tells the head after its subscriber connection was lost, so an append published meanwhile is not missed', { timeout: 30_000 }, async () => {
    const { store, cleanup } = await redisBackend.open();
    cleanups.push(cleanup);
    const watcher = store as RedisStore;
    const writer = new RedisStore({ url: testRedisUrl, keyPrefix: watcher.keyPrefix });
    cleanups.push(() => writer.close());
    const { lease } = await writer.acquire('g', 'a~1', 60_000);
    const heads: number[] = [];
    const stop = watcher.watchStream('s', (h) => heads.push(h));
    cleanups.push(stop);
    await writer.appendFenced({ lease: 'g', term: lease.term }, 's', 'one');
    await until(() => heads.includes(1));
    expect(heads).toContain(1);
    // Drop the subscriber's connection (ioredis reconnects after its retry delay, >= 50 ms) and
    // append at once from the other store: the PUBLISH reaches no subscriber of this store.
    const subscriber = (watcher as unknown as { subscriber: Redis }).subscriber;
    subscriber.disconnect(true);
    await writer.appendFenced({ lease: 'g', term: lease.term }, 's', 'two');
    await until(() => heads.includes(2));
    expect(heads).toContain(2);
    for (let i = 1; i < heads.length; i++) expect(heads[i]!).toBeGreaterThanOrEqual(heads[i - 1]!);
  });
});
