/**
 * Issue 23, the leader directs work: a WorkCoordinator and four Workers in this process, each
 * with its own store object (its own connection), on every store.
 *
 * - Item round trip: a job of one item whose handler returns at once; the sample is from the
 *   call to `run` to its result, ms: the leader's round (lease, list, results), the append of the
 *   assignment, a worker's poll, its answer's append and the leader's next read. Both sides poll
 *   every POLL_MS (the Store interface has no push for streams).
 * - Throughput: a job of JOB_ITEMS items whose handler returns at once, each worker taking
 *   CONCURRENCY at a time; items/s from the call to `run` to its result.
 *
 *   npm run bench -- work        (--cycles N round-trip samples per store, default 20)
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { WorkCoordinator, Worker, openStore } from '../src/index.js';
import type { TenureStore } from '../src/index.js';
import { freshEtcd, freshMysql, freshPostgres, freshRedis } from './lib/servers.js';
import type { Prepared } from './lib/servers.js';
import { metric, opsPerSecond } from './lib/stats.js';
import type { BenchOptions, BenchResult, Benchmark, Metric } from './lib/types.js';

const POLL_MS = 5;
const WORKERS = 4;
const CONCURRENCY = 8;
const JOB_ITEMS = 400;
const ROUNDS = 3;
const DESCRIPTION = 'The leader directs work: one-item round trip and items/s of a job over four in-process workers, per store';

async function freshSqlite(): Promise<Prepared> {
  const dir = mkdtempSync(join(tmpdir(), 'tenure-bench-work-'));
  return { storeArg: `sqlite:${join(dir, 'work.db')}`, cleanup: async () => rmSync(dir, { recursive: true, force: true }) };
}

const TARGETS: readonly { name: string; prepare: () => Promise<Prepared> }[] = [
  { name: 'sqlite', prepare: freshSqlite },
  { name: 'postgres', prepare: freshPostgres },
  { name: 'mysql', prepare: freshMysql },
  { name: 'redis', prepare: freshRedis },
  { name: 'etcd', prepare: freshEtcd },
];

async function measure(name: string, prepare: () => Promise<Prepared>, samples: number, log: (line: string) => void): Promise<{ roundTrip: number[]; throughput: number[] }> {
  const prepared = await prepare();
  const stores: TenureStore[] = [];
  const workers: Worker<number, number>[] = [];
  try {
    const leaderStore = await openStore(prepared.storeArg);
    stores.push(leaderStore);
    for (let i = 0; i < WORKERS; i++) {
      const store = await openStore(prepared.storeArg);
      stores.push(store);
      const w = new Worker<number, number>({ store, group: 'bench', nodeId: `w${i}`, concurrency: CONCURRENCY, pollMs: POLL_MS, handler: (n) => n + 1 });
      void w.start().catch((err: unknown) => log(`${name}: worker w${i} failed: ${String(err)}`));
      workers.push(w);
    }
    while ((await leaderStore.list('bench/workers/')).length < WORKERS) await new Promise((r) => setTimeout(r, 10));
    const acquired = await leaderStore.acquire('bench', 'bench-leader', 600_000);
    const coordinator = new WorkCoordinator({ store: leaderStore, token: { lease: 'bench', term: acquired.lease.term }, pollMs: POLL_MS });
    const roundTrip: number[] = [];
    for (let i = 0; i < samples; i++) {
      const t0 = performance.now();
      await coordinator.run({ items: [{ id: `one-${i}`, input: i }] });
      roundTrip.push(performance.now() - t0);
    }
    const throughput: number[] = [];
    for (let r = 0; r < ROUNDS; r++) {
      const items = Array.from({ length: JOB_ITEMS }, (_, i) => ({ id: `r${r}-${i}`, input: i }));
      const t0 = performance.now();
      const report = await coordinator.run({ items });
      const ms = performance.now() - t0;
      if (report.results.size !== JOB_ITEMS) throw new Error(`${name}: ${report.results.size} results for ${JOB_ITEMS} items`);
      throughput.push(opsPerSecond(JOB_ITEMS, ms));
    }
    log(`${name}: round trip p50 ${roundTrip.sort((a, b) => a - b)[Math.floor(samples / 2)]!.toFixed(1)} ms, ${throughput.map((t) => t.toFixed(0)).join(' / ')} items/s`);
    return { roundTrip, throughput };
  } finally {
    for (const w of workers) await w.stop();
    for (const s of stores) await s.close();
    await prepared.cleanup();
  }
}

export function workBenchmark(): Benchmark {
  return {
    name: 'work',
    description: DESCRIPTION,
    tags: ['postgres', 'redis', 'sqlite', 'mysql', 'etcd', 'replication'],
    async run({ cycles, log }: BenchOptions): Promise<BenchResult> {
      const started = performance.now();
      const samples = Math.max(20, cycles);
      const metrics: Metric[] = [];
      for (const target of TARGETS) {
        const m = await measure(target.name, target.prepare, samples, log);
        metrics.push(metric(`round-trip-${target.name}`, `${target.name}: run() of a one-item job -> its result, ms`, m.roundTrip));
        metrics.push(metric(`throughput-${target.name}`, `${target.name}: items/s of a ${JOB_ITEMS}-item job, ${WORKERS} workers x ${CONCURRENCY} at a time`, m.throughput, undefined, 'ops/s'));
      }
      return {
        name: 'work',
        description: DESCRIPTION,
        target: TARGETS.map((t) => t.name).join(','),
        params: { pollMs: POLL_MS, workers: WORKERS, concurrency: CONCURRENCY, jobItems: JOB_ITEMS, rounds: ROUNDS, roundTripSamples: samples },
        metrics,
        notes: ['Leader and workers in one process, each with its own store object; both poll every 5 ms.'],
        durationMs: performance.now() - started,
      };
    },
  };
}
