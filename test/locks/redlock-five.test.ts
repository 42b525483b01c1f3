/**
 * Redlock over five servers: quorum 3, so two may be down; with three down, acquire fails within
 * its wait. Tokens from a store lease, so which servers are down does not matter for fencing.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MemoryStore } from '../../src/stores/memory/index.js';
import { RedlockTimeoutError, openRedlock, storeLeaseClock } from '../../src/locks/index.js';
import { startServers } from '../stores/redis-servers.js';
import type { RedisServer } from '../stores/redis-servers.js';

let servers: RedisServer[];
beforeAll(async () => {
  servers = await startServers(5);
});
afterAll(async () => {
  await Promise.all(servers.map((s) => s.stop()));
});

describe('Redlock over five servers', () => {
  it('has quorum 3, works with two down and fails in time with three down', async () => {
    const rl = await openRedlock(`redlock://${servers.map((s) => s.address).join(',')}`, { fencing: storeLeaseClock(new MemoryStore()) });
    try {
      expect(rl.quorum).toBe(3);
      await servers[0]!.kill();
      servers[1]!.pause();
      const h = await rl.acquire('five', { ttlMs: 1000, waitMs: 1000 });
      expect(h.remainingMs()).toBeGreaterThan(0);
      await h.release();
      await servers[2]!.kill();
      const started = Date.now();
      const err = await rl.acquire('five', { waitMs: 300 }).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(RedlockTimeoutError);
      expect((err as Error).message).toMatch(/2 of 5 servers granted, quorum is 3/);
      expect(Date.now() - started).toBeLessThan(300 + 500);
    } finally {
      servers[1]!.resume();
      await rl.close();
    }
  });
});
