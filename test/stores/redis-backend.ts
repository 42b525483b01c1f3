/**
 * The Redis store as the contract and chaos suites open it: the shared Redis at
 * TENURE_TEST_REDIS_URL (default redis://127.0.0.1:6379), a random key prefix per store so
 * tests never see each other's keys, and a cleanup that deletes every key under that prefix.
 */
import { randomBytes } from 'node:crypto';
import { Redis } from 'ioredis';
import type { Backend } from '../contract/backends.js';
import { RedisStore } from '../../src/stores/redis/index.js';

export const testRedisUrl = process.env.TENURE_TEST_REDIS_URL ?? 'redis://127.0.0.1:6379';

/** Delete every key that starts with `prefix` (SCAN, so a big database is never blocked). */
export async function deleteKeys(client: Redis, prefix: string): Promise<void> {
  const pattern = `${prefix.replace(/[*?[\]\\]/g, (c) => `\\${c}`)}*`;
  let cursor = '0';
  do {
    const [next, keys] = await client.scan(cursor, 'MATCH', pattern, 'COUNT', 1000);
    cursor = next;
    if (keys.length > 0) await client.del(...keys);
  } while (cursor !== '0');
}

export const redisBackend: Backend = {
  name: 'redis',
  capabilities: { renewMany: true, watch: true, streamPush: true, streamClock: true },
  open: async () => {
    const keyPrefix = `{tenure-test-${randomBytes(6).toString('hex')}}:`;
    const store = new RedisStore({ url: testRedisUrl, keyPrefix });
    return {
      store,
      cleanup: async () => {
        await store.close();
        const admin = new Redis(testRedisUrl);
        try {
          await deleteKeys(admin, keyPrefix);
        } finally {
          admin.disconnect();
        }
      },
    };
  },
};
