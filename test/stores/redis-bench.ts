/**
 * Quick side-by-side of uncontended acquire + release on one Redis (not wired into `npm run bench`,
 * which lives outside this helper's files): `npx tsx test/stores/redis-bench.ts [N] [redis://…]`.
 *   raw:        ioredis SET NX PX + EVALSHA compare-and-delete (the floor, no fencing)
 *   node-redlock 4 on one instance (no fencing)
 *   tenure RedisStore acquire + release (the term is the fencing token)
 *   tenure Redlock on one instance (fencing counter INCR inside the acquire script)
 */
import { createRequire } from 'node:module';
import { randomBytes } from 'node:crypto';
import { Redis } from 'ioredis';
import { Redlock, redisCounter } from '../../src/locks/index.js';
import { RedisStore } from '../../src/stores/redis/index.js';
import { deleteKeys } from './redis-backend.js';

const n = Number(process.argv[2] ?? 3000);
const url = process.argv[3] ?? 'redis://127.0.0.1:6379';
const prefix = `{bench-${randomBytes(4).toString('hex')}}:`;

async function measure(name: string, op: (i: number) => Promise<void>): Promise<void> {
  for (let i = 0; i < Math.min(200, n); i++) await op(i); // warm-up
  const lat: number[] = [];
  const t0 = performance.now();
  for (let i = 0; i < n; i++) {
    const s = performance.now();
    await op(i);
    lat.push(performance.now() - s);
  }
  const total = performance.now() - t0;
  lat.sort((a, b) => a - b);
  const p = (q: number): string => (lat[Math.min(lat.length - 1, Math.floor(q * lat.length))]! * 1000).toFixed(0);
  console.log(`${name.padEnd(34)} ${(n / (total / 1000)).toFixed(0).padStart(7)} ops/s   p50 ${p(0.5).padStart(5)} µs   p99 ${p(0.99).padStart(6)} µs`);
}

const client = new Redis(url);
const del = `if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0`;
const delSha = String(await client.script('LOAD', del));
await measure('raw SET NX PX + EVALSHA delete', async () => {
  const v = randomBytes(16).toString('hex');
  if ((await client.set(`${prefix}raw`, v, 'PX', 10_000, 'NX')) !== 'OK') throw new Error('raw: not acquired');
  await client.evalsha(delSha, 1, `${prefix}raw`, v);
});

const require = createRequire(import.meta.url);
const NodeRedlock = require('redlock') as new (c: Redis[], o?: object) => { lock(r: string, ttl: number): Promise<{ unlock(): Promise<void> }> };
const theirs = new NodeRedlock([client], { retryCount: 0 });
await measure('node-redlock 4, one instance', async () => {
  const l = await theirs.lock(`${prefix}nr`, 10_000);
  await l.unlock();
});

const store = new RedisStore({ client, keyPrefix: prefix });
await measure('tenure RedisStore, fenced (term)', async (i) => {
  const r = await store.acquire('lease', `bench~${i}`, 10_000);
  if (!r.acquired) throw new Error('store: not acquired');
  await store.release('lease', `bench~${i}`, r.lease.term);
});

const ours = new Redlock({ clients: [client], autoExtend: false, fencing: redisCounter({ instance: 0 }) });
await measure('tenure Redlock, one instance, fenced', async () => {
  const h = await ours.acquire(`${prefix}rl`, { ttlMs: 10_000, waitMs: 0 });
  await h.release();
});

await store.close();
await deleteKeys(client, prefix);
await client.del('{tenure}:term:' + `${prefix}rl`);
client.disconnect();
