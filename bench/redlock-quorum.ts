/**
 * What the quorum counter (Redlock's default generation clock) costs against the single-server
 * counter, on three private redis-server processes (no persistence), one client, one operation at
 * a time, the variants interleaved operation by operation in a seeded shuffled order (as in
 * redis-locks.ts, so the machine's fast and slow moments fall on all alike):
 *   single   redisCounter({ instance: 0 }): the INCR inside server 0's acquire script, one round trip
 *   quorum   quorumCounter(): every server's acquire script counts, the token is written back to a
 *            majority before acquire resolves: a second parallel round trip
 *   node-redlock  node-redlock 4 on the same three (no fencing token), for reference
 * Timed: acquire alone, and acquire + release. Run: `npm run build && npx tsx bench/redlock-quorum.ts [ROUNDS]`.
 */
import { createRequire } from 'node:module';
import { Redis } from 'ioredis';
import { Redlock, SeededRandom, quorumCounter, redisCounter } from './lib/built.js';
import { msBetween, nowNs } from '../test/fixtures/harness.js';
import { startServers } from '../test/stores/redis-servers.js';
import { summarize } from './lib/stats.js';

interface NodeRedlockLock {
  unlock(): Promise<void>;
}
const require = createRequire(import.meta.url);
const NodeRedlockClass = require('redlock') as new (clients: Redis[], options?: object) => { lock(resource: string, ttl: number): Promise<NodeRedlockLock> };

const ROUNDS = Number(process.argv[2] ?? 20);
const OPS_PER_ROUND = 100;
const TTL = 10_000;

const servers = await startServers(3);
const clients = servers.map((s) => new Redis({ port: s.port }));
try {
  const single = new Redlock({ clients, autoExtend: false, fencing: redisCounter({ instance: 0 }) });
  const quorum = new Redlock({ clients, autoExtend: false, fencing: quorumCounter() });
  const theirs = new NodeRedlockClass(clients, { retryCount: 0 });
  const variants = [
    { id: 'single', run: async () => {
      const t0 = nowNs();
      const h = await single.acquire('single', { ttlMs: TTL, waitMs: 0 });
      const t1 = nowNs();
      await h.release();
      return [msBetween(t0, t1), msBetween(t0, nowNs())] as const;
    } },
    { id: 'quorum', run: async () => {
      const t0 = nowNs();
      const h = await quorum.acquire('quorum', { ttlMs: TTL, waitMs: 0 });
      const t1 = nowNs();
      await h.release();
      return [msBetween(t0, t1), msBetween(t0, nowNs())] as const;
    } },
    { id: 'node-redlock', run: async () => {
      const t0 = nowNs();
      const l = await theirs.lock('theirs', TTL);
      const t1 = nowNs();
      await l.unlock();
      return [msBetween(t0, t1), msBetween(t0, nowNs())] as const;
    } },
  ];
  const acquire = new Map<string, number[]>(variants.map((v) => [v.id, []]));
  const both = new Map<string, number[]>(variants.map((v) => [v.id, []]));
  for (const v of variants) for (let k = 0; k < 50; k++) await v.run(); // warm up
  const random = new SeededRandom(20);
  for (let r = 0; r < ROUNDS; r++) {
    for (let k = 0; k < OPS_PER_ROUND; k++) {
      const order = [...variants].sort(() => random.next() - 0.5);
      for (const v of order) {
        const [a, ab] = await v.run();
        acquire.get(v.id)!.push(a);
        both.get(v.id)!.push(ab);
      }
    }
  }
  const fmt = (xs: number[]): string => {
    const s = summarize(xs);
    return `p50 ${s.p50.toFixed(3)} ms, p99 ${s.p99.toFixed(3)} ms`;
  };
  console.log(`Redlock on 3 local servers, ${ROUNDS * OPS_PER_ROUND} operations per variant, interleaved`);
  for (const v of variants) console.log(`${v.id.padEnd(13)} acquire: ${fmt(acquire.get(v.id)!)} | acquire+release: ${fmt(both.get(v.id)!)}`);
  const p50 = (m: Map<string, number[]>, id: string): number => summarize(m.get(id)!).p50;
  console.log(`quorum / single, p50: acquire ${(p50(acquire, 'quorum') / p50(acquire, 'single')).toFixed(2)}x, acquire+release ${(p50(both, 'quorum') / p50(both, 'single')).toFixed(2)}x`);
} finally {
  for (const c of clients) c.disconnect();
  await Promise.all(servers.map((s) => s.stop()));
}
