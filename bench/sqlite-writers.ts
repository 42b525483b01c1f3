/**
 * Issue 20: SQLite under write contention from other processes. 1, 2 and 8 writer processes
 * (test/fixtures/sqlite-hammer) append to one database file, one call at a time each, as fast as
 * the store answers (every 8th call a zombie's with a stale term, refused with StaleTermError),
 * beside a leader process renewing at a 200 ms TTL (and doing nothing else). Each round runs the
 * three writer counts in turn (order rotated each round), each on a fresh file; a sample is the
 * acknowledged appends of all writers over the round's elapsed time.
 *
 *   npm run bench -- sqlite-writers            (or --only sqlite-writers; --cycles N rounds, default 3)
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { FixtureProcess, killAll, num } from '../test/fixtures/harness.js';
import { metric, opsPerSecond } from './lib/stats.js';
import type { BenchOptions, BenchResult, Benchmark, Metric } from './lib/types.js';

const WRITERS = [1, 2, 8] as const;
const HAMMER_MS = 3000;
const LEADER_TTL_MS = 200;
const WAIT_MS = 60_000;
/** Rounds at most (each round is three runs of HAMMER_MS plus start-up). */
const MAX_ROUNDS = 5;

interface RunOutcome {
  rate: number;
  perWriter: number[];
  errors: number;
  staleRefused: number;
  slowestCallMs: number;
  renewals: number;
  leaderTrouble: number;
  leaderWorstRenewMs: number;
}

async function runOnce(writers: number): Promise<RunOutcome> {
  const dir = mkdtempSync(join(tmpdir(), 'tenure-bench-writers-'));
  const db = join(dir, 'tenure.db');
  const procs: FixtureProcess[] = [];
  try {
    const leader = new FixtureProcess('leader', 'campaigner', [db, 'lead', 'node-lead', String(LEADER_TTL_MS), '--append-ms', '0']);
    procs.push(leader);
    await leader.waitFor('elected', WAIT_MS);
    const hammers = Array.from({ length: writers }, (_, i) => new FixtureProcess(`w${i}`, 'sqlite-hammer', [db, `w${i}`, String(HAMMER_MS)]));
    procs.push(...hammers);
    await Promise.all(hammers.map((h) => h.waitFor('ready', WAIT_MS)));
    const from = leader.events.length;
    for (const h of hammers) h.send('go');
    const done = await Promise.all(hammers.map((h) => h.waitFor('done', WAIT_MS)));
    const during = leader.events.slice(from);
    const acks = done.map((d) => num(d, 'acks'));
    const elapsedMs = Math.max(...done.map((d) => num(d, 'elapsedMs')));
    const renewLatencies = during.filter((e) => e.ev === 'renewed').map((e) => num(e, 'latencyMs'));
    return {
      rate: opsPerSecond(
        acks.reduce((a, b) => a + b, 0),
        elapsedMs,
      ),
      perWriter: done.map((d) => opsPerSecond(num(d, 'acks'), num(d, 'elapsedMs'))),
      errors: done.reduce((a, d) => a + num(d, 'errors') + num(d, 'staleAccepted'), 0),
      staleRefused: done.reduce((a, d) => a + num(d, 'stale'), 0),
      slowestCallMs: Math.max(...done.map((d) => num(d, 'maxCallMs'))),
      renewals: renewLatencies.length,
      leaderTrouble: during.filter((e) => ['deposed', 'renew-failed', 'store-error', 'append-error'].includes(e.ev)).length,
      leaderWorstRenewMs: Math.max(0, ...renewLatencies),
    };
  } finally {
    await killAll(procs);
    rmSync(dir, { recursive: true, force: true });
  }
}

const DESCRIPTION =
  `1, 2 and 8 writer processes append to one SQLite file as fast as the store answers (one call at a time each; every 8th call a zombie's with a stale term), ` +
      `beside a leader process renewing at a ${LEADER_TTL_MS} ms TTL. Each run lasts ${HAMMER_MS / 1000} s on a fresh file; ` +
      'a sample is all writers\' acknowledged appends per second in one run. synchronous=FULL: every append is fsynced before it is acknowledged.';

export function sqliteWritersBenchmark(): Benchmark {
  return {
    name: 'sqlite-writers',
    description: DESCRIPTION,
    tags: ['sqlite'],
    async run({ cycles, log }: BenchOptions): Promise<BenchResult> {
      const started = performance.now();
      const rounds = Math.min(cycles, MAX_ROUNDS);
      const outcomes = new Map<number, RunOutcome[]>(WRITERS.map((w) => [w, []]));
      for (let r = 0; r < rounds; r++) {
        const order = WRITERS.map((_, i) => WRITERS[(i + r) % WRITERS.length]!);
        for (const writers of order) {
          const o = await runOnce(writers);
          outcomes.get(writers)!.push(o);
          log(`round ${r + 1}/${rounds}, ${writers} writer(s): ${o.rate.toFixed(0)} appends/s, errors ${o.errors}, leader trouble ${o.leaderTrouble}, worst renew ${o.leaderWorstRenewMs.toFixed(1)} ms`);
        }
      }
      const metrics: Metric[] = [];
      const notes: string[] = [];
      for (const writers of WRITERS) {
        const os = outcomes.get(writers)!;
        metrics.push(metric(`appends-${writers}`, `acknowledged appends per second, all ${writers} writer process(es) together`, os.map((o) => o.rate), undefined, 'ops/s'));
        metrics.push(metric(`renew-worst-${writers}`, `the leader's slowest renewal (sent -> answered) in a run beside ${writers} writer(s)`, os.map((o) => o.leaderWorstRenewMs)));
        const per = os.flatMap((o) => o.perWriter);
        notes.push(
          `${writers} writer(s): errors other than StaleTermError ${os.reduce((a, o) => a + o.errors, 0)}; stale calls refused ${os.reduce((a, o) => a + o.staleRefused, 0)}; ` +
            `leader deposed / failed calls ${os.reduce((a, o) => a + o.leaderTrouble, 0)} (renewals ${os.reduce((a, o) => a + o.renewals, 0)}); ` +
            `per-writer rate ${Math.min(...per).toFixed(0)}..${Math.max(...per).toFixed(0)} appends/s; slowest append ${Math.max(...os.map((o) => o.slowestCallMs)).toFixed(0)} ms`,
        );
      }
      return {
        name: 'sqlite-writers',
        description: DESCRIPTION,
        target: 'sqlite',
        params: { writers: WRITERS.join(','), runMs: HAMMER_MS, leaderTtlMs: LEADER_TTL_MS, rounds },
        metrics,
        notes,
        durationMs: performance.now() - started,
      };
    },
  };
}
