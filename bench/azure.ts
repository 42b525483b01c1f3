/**
 * Azure Blob lease store on a private Azurite: handoff by polling and crash failover.
 *
 *   npx tsx bench/azure.ts [--samples N] [--crashes N]
 *
 * Azure has no push, so a waiting node learns of a release by polling `acquire`; the handoff is
 * measured from the holder's release call to the waiter's successful acquire, per poll interval.
 * Crash failover: the holder stops renewing right after a renew; measured from that renew's send
 * to the waiter's successful acquire (Azure's floor: the blob lease's TTL, 15 s at least).
 * Writes bench/results/azure-<timestamp>.json.
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { AzureBlobStore } from '../src/stores/azure/index.js';
import { AZURITE_ACCOUNT, AZURITE_KEY, startAzurite } from '../test/fixtures/azurite.js';

const { values } = parseArgs({ options: { samples: { type: 'string', default: '15' }, crashes: { type: 'string', default: '3' } } });
const samples = Number(values.samples);
const crashes = Number(values.crashes);
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const pct = (xs: number[], p: number) => {
  const s = [...xs].sort((a, b) => a - b);
  return Math.round(s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))]! * 10) / 10;
};

const azurite = await startAzurite();
const open = () => new AzureBlobStore({ endpoint: `http://127.0.0.1:${azurite.port}/${AZURITE_ACCOUNT}`, account: AZURITE_ACCOUNT, accountKey: AZURITE_KEY, container: 'bench' });
const a = open();
const b = open();

/** Poll acquire every `pollMs` until it succeeds; resolves with the local instant it did. */
async function pollAcquire(store: AzureBlobStore, name: string, owner: string, pollMs: number, signal: { stop: boolean }): Promise<number> {
  for (;;) {
    const r = await store.acquire(name, owner, 15_000);
    if (r.acquired) return performance.now();
    if (signal.stop) return -1;
    await sleep(pollMs);
  }
}

const ops = { acquire: [] as number[], renew: [] as number[], release: [] as number[], append: [] as number[] };
for (let i = 0; i < 30; i++) {
  let t = performance.now();
  const r = await a.acquire(`op${i}`, 'a~1', 15_000);
  ops.acquire.push(performance.now() - t);
  t = performance.now();
  await a.renew(`op${i}`, 'a~1', r.lease.term, 15_000);
  ops.renew.push(performance.now() - t);
  t = performance.now();
  await a.appendFenced({ lease: `op${i}`, term: r.lease.term }, 'ops', `e${i}`).catch(() => 0);
  ops.append.push(performance.now() - t);
  t = performance.now();
  await a.release(`op${i}`, 'a~1', r.lease.term);
  ops.release.push(performance.now() - t);
}

const handoff: { pollMs: number; p50: number; p95: number; max: number; samples: number }[] = [];
for (const pollMs of [25, 100, 250, 1000]) {
  const xs: number[] = [];
  for (let i = 0; i < samples; i++) {
    const name = `h${pollMs}-${i}`;
    const held = await a.acquire(name, 'a~1', 15_000);
    const stop = { stop: false };
    const waiter = pollAcquire(b, name, 'b~1', pollMs, stop);
    await sleep(pollMs + Math.random() * pollMs); // release at a random phase of the waiter's polling
    const t0 = performance.now();
    await a.release(name, 'a~1', held.lease.term);
    xs.push((await waiter) - t0);
  }
  handoff.push({ pollMs, p50: pct(xs, 50), p95: pct(xs, 95), max: Math.round(Math.max(...xs)), samples: xs.length });
}

const failover: number[] = [];
for (let i = 0; i < crashes; i++) {
  const name = `crash-${i}`;
  const held = await a.acquire(name, 'a~1', 15_000);
  const sentAt = performance.now();
  await a.renew(name, 'a~1', held.lease.term, 15_000); // the last renew, then the holder is gone
  const at = await pollAcquire(b, name, 'b~1', 100, { stop: false });
  failover.push(at - sentAt);
}

const result = {
  name: 'azure-blob',
  date: new Date().toISOString(),
  azurite: 'in memory, one process, loopback',
  opsMs: Object.fromEntries(Object.entries(ops).map(([k, xs]) => [k, { p50: pct(xs, 50), p95: pct(xs, 95) }])),
  handoffByPolling: handoff,
  crashFailover: { ttlMs: 15_000, pollMs: 100, samplesMs: failover.map((x) => Math.round(x)), overTtlMs: failover.map((x) => Math.round(x - 15_000)) },
};
console.log(JSON.stringify(result, null, 2));
console.log('\nhandoff by polling (release -> waiter acquired):');
for (const h of handoff) console.log(`  poll ${String(h.pollMs).padStart(4)} ms: p50 ${h.p50} ms, p95 ${h.p95} ms, max ${h.max} ms (${h.samples} samples)`);
console.log(`crash failover (last renew sent -> new holder, TTL 15 s, poll 100 ms): ${failover.map((x) => Math.round(x)).join(', ')} ms`);
mkdirSync(join(import.meta.dirname, 'results'), { recursive: true });
writeFileSync(join(import.meta.dirname, 'results', `azure-${result.date.replace(/[:.]/g, '-')}.json`), `${JSON.stringify(result, null, 2)}\n`);
await a.close();
await b.close();
await azurite.stop();
