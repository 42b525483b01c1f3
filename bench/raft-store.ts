/**
 * The embedded Raft store (src/stores/raft, openRaftStore) end to end: three nodes in this
 * process on loopback, each with its own WAL on this machine's disk (real fdatasync). The leader's
 * store takes the writes, as a user of the embedded store calls it.
 *
 * - append commit: one fenced append of a 100-byte payload at a time, from `appendFenced` to its
 *   answer (encode with a session, propose, leader fsync, both followers' fsync, commit, apply:
 *   fence check and write, result);
 * - throughput: fenced appends with 256 in flight (one stream per in-flight writer), appends/s;
 * - acquire + release: one pair at a time, each a committed command.
 *
 *   npx tsx bench/raft-store.ts           // after npm run build (npm run bench -- raft-store builds first)
 *   TENURE_BENCH_DIR=/mnt/disk ...        // where the data directories go (default: the OS temporary directory)
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { freePort } from '../test/fixtures/ports.js';
import { openRaftStore, type RaftStore } from './lib/built.js';
import { metric, opsPerSecond } from './lib/stats.js';
import type { BenchOptions, BenchResult, Benchmark } from './lib/types.js';

const SECRET = 'raft store bench secret 0123456789';
const PAYLOAD = 'x'.repeat(100);
const IN_FLIGHT = 256;
const WARMUP = 200;

export interface RaftStoreBenchResult {
  readonly appendMs: number[];
  readonly appendsPerSecond: number;
  readonly acquireReleaseMs: number[];
}

export async function runRaftStoreBench(samples = 2000, total = 20_000): Promise<RaftStoreBenchResult> {
  const root = mkdtempSync(join(process.env.TENURE_BENCH_DIR ?? tmpdir(), 'tenure-raft-store-'));
  const peers: Record<number, string> = {};
  for (const id of [1, 2, 3]) peers[id] = `127.0.0.1:${await freePort()}`;
  const stores: RaftStore[] = [];
  try {
    for (const id of [1, 2, 3]) stores.push(await openRaftStore({ id, listen: peers[id]!, peers, dataDir: join(root, `n${id}`), secret: SECRET, clusterId: 'bench' }));
    const leader = stores[0]!;
    const deadline = performance.now() + 10_000;
    while (!leader.isLeader) {
      if (performance.now() > deadline) throw new Error('node 1 did not become a ready leader within 10 s');
      leader.campaign();
      await new Promise((r) => setTimeout(r, 100));
    }
    const { lease } = await leader.acquire('bench', 'bench~1', 600_000);
    const token = { lease: 'bench', term: lease.term };
    const appendMs: number[] = [];
    for (let i = 0; i < WARMUP + samples; i++) {
      const t0 = performance.now();
      await leader.appendFenced(token, 'one', PAYLOAD);
      if (i >= WARMUP) appendMs.push(performance.now() - t0);
    }
    const acquireReleaseMs: number[] = [];
    for (let i = 0; i < WARMUP / 2 + samples / 4; i++) {
      const t0 = performance.now();
      const r = await leader.acquire('pair', 'p~1', 5000);
      await leader.release('pair', 'p~1', r.lease.term);
      if (i >= WARMUP / 2) acquireReleaseMs.push(performance.now() - t0);
    }
    let started = 0;
    const t0 = performance.now();
    const worker = async (w: number): Promise<void> => {
      while (started < total) {
        started++;
        await leader.appendFenced(token, `w${w}`, PAYLOAD);
      }
    };
    await Promise.all(Array.from({ length: IN_FLIGHT }, (_, w) => worker(w)));
    return { appendMs, appendsPerSecond: opsPerSecond(total, performance.now() - t0), acquireReleaseMs };
  } finally {
    await Promise.all(stores.map((s) => s.close()));
    rmSync(root, { recursive: true, force: true });
  }
}

export function raftStoreBenchmark(): Benchmark {
  return {
    name: 'raft-store',
    description: 'The embedded Raft store, three nodes in one process with fsync: fenced append commit latency, appends/s with 256 in flight, acquire + release.',
    tags: ['raft'],
    async run(options: BenchOptions): Promise<BenchResult> {
      const started = performance.now();
      const samples = Math.max(200, options.cycles * 100);
      const r = await runRaftStoreBench(samples);
      const metrics = [
        metric('append', `appendFenced of a 100-byte payload via the leader's store until committed and applied, one in flight; three nodes in this process`, r.appendMs),
        metric('throughput', `fenced appends/s with ${IN_FLIGHT} in flight`, [r.appendsPerSecond], undefined, 'ops/s'),
        metric('acquire-release', 'acquire then release, one pair in flight (two commands)', r.acquireReleaseMs),
      ];
      return { name: 'raft-store', description: 'Embedded Raft store end to end', target: 'raft', params: { samples, inFlight: IN_FLIGHT, payloadBytes: PAYLOAD.length }, metrics, notes: [], durationMs: performance.now() - started };
    },
  };
}

if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href) {
  const pct = (xs: number[], q: number): number => [...xs].sort((x, y) => x - y)[Math.max(0, Math.ceil(q * xs.length) - 1)]!;
  const r = await runRaftStoreBench(2000, 20_000);
  process.stdout.write(
    `fenced append commit p50 ${pct(r.appendMs, 0.5).toFixed(3)} ms, p99 ${pct(r.appendMs, 0.99).toFixed(3)} ms (n ${r.appendMs.length}); ` +
      `${IN_FLIGHT} in flight: ${r.appendsPerSecond.toFixed(0)} appends/s; acquire + release p50 ${pct(r.acquireReleaseMs, 0.5).toFixed(3)} ms\n`,
  );
}
