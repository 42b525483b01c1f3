/**
 * The Raft write-ahead log on this machine's disk (DurableStorage, real fdatasync):
 *
 * - save latency of one Ready holding one small entry and a hard state (one write + one fdatasync);
 * - group commit: entries/s when each Ready carries 16 or 256 entries (still one write + one fdatasync each);
 * - open time of a data directory holding 1 GiB of log, without a snapshot (every record read,
 *   checksummed and indexed) and with a snapshot near the end and the log compacted behind it.
 *
 * The open times are with the files in the page cache (the benchmark does not drop the
 * machine's caches, which other work here shares).
 *
 *   npx tsx bench/run.ts wal          // after npm run build (npm run bench -- wal builds first)
 *   TENURE_BENCH_DIR=/mnt/disk ...    // where the files go (default: the OS temporary directory)
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { ConfState, Entry } from '../src/raft/core/index.js';
import { DurableStorage } from './lib/built.js';
import { metric, opsPerSecond } from './lib/stats.js';
import type { Benchmark, BenchResult, Metric } from './lib/types.js';

export interface WalBenchOptions {
  /** Saves timed for the latency metric (default 2000). */
  saves?: number;
  /** Bytes of log for the open-time metrics (default 1 GiB). */
  logBytes?: number;
  /** Payload of each entry in the big log, bytes (default 1024). */
  bigEntryBytes?: number;
  /** Opens timed per scenario (default 3). */
  opens?: number;
}

const cs3: ConfState = { voters: [1, 2, 3], learners: [], votersOutgoing: [], learnersNext: [], autoLeave: false };
const SMALL = 64;

function fresh(root: string, name: string): DurableStorage {
  const s = DurableStorage.open({ dir: join(root, name) });
  s.save({ snapshot: { metadata: { index: 1, term: 1, confState: cs3 }, data: new Uint8Array() }, hardState: { term: 1, vote: 1, commit: 1 }, entries: [] });
  return s;
}

function batch(from: number, n: number, bytes: number): Entry[] {
  const data = new Uint8Array(bytes).fill(7);
  const out: Entry[] = [];
  for (let i = 0; i < n; i++) out.push({ index: from + i, term: 1, type: 'normal', data });
  return out;
}

function saveLatency(root: string, saves: number): number[] {
  const s = fresh(root, 'latency');
  const samples: number[] = [];
  let next = 2;
  for (let i = -200; i < saves; i++) {
    const rd = { hardState: { term: 1, vote: 1, commit: next - 1 }, entries: batch(next, 1, SMALL) };
    const t0 = performance.now();
    s.save(rd);
    const ms = performance.now() - t0;
    if (i >= 0) samples.push(ms);
    next++;
  }
  s.close();
  return samples;
}

function groupCommit(root: string, perReady: number, readies: number): { rate: number; latency: number[] } {
  const s = fresh(root, `group-${perReady}`);
  let next = 2;
  const latency: number[] = [];
  let total = 0;
  for (let i = -20; i < readies; i++) {
    const rd = { hardState: { term: 1, vote: 1, commit: next - 1 }, entries: batch(next, perReady, SMALL) };
    const t0 = performance.now();
    s.save(rd);
    const ms = performance.now() - t0;
    if (i >= 0) {
      latency.push(ms);
      total += ms;
    }
    next += perReady;
  }
  s.close();
  return { rate: opsPerSecond(perReady * readies, total), latency };
}

/** Writes `bytes` of log (Readies of 256 entries; fdatasync every 64 MiB, as the writes fill segments). */
function bigLog(dir: string, bytes: number, entryBytes: number): number {
  const s = DurableStorage.open({ dir });
  s.save({ snapshot: { metadata: { index: 1, term: 1, confState: cs3 }, data: new Uint8Array() }, hardState: { term: 1, vote: 1, commit: 1 }, entries: [] });
  const count = Math.ceil(bytes / entryBytes);
  let next = 2;
  while (next < count + 2) {
    const n = Math.min(256, count + 2 - next);
    s.save({ hardState: { term: 1, vote: 1, commit: next - 1 }, entries: batch(next, n, entryBytes) });
    next += n;
  }
  s.save({ hardState: { term: 1, vote: 1, commit: next - 1 }, entries: [] });
  s.close();
  return next - 1;
}

/** Wall and CPU (user + system, this process) ms of each open: CPU time does not grow when other work shares the machine. */
function timeOpens(dir: string, opens: number, expectLast: number): { wall: number[]; cpu: number[] } {
  const wall: number[] = [];
  const cpu: number[] = [];
  for (let i = 0; i < opens; i++) {
    const c0 = process.cpuUsage();
    const t0 = performance.now();
    const s = DurableStorage.open({ dir });
    wall.push(performance.now() - t0);
    const c = process.cpuUsage(c0);
    cpu.push((c.user + c.system) / 1000);
    if (s.lastIndex() !== expectLast) throw new Error(`wal bench: reopened log ends at ${s.lastIndex()}, expected ${expectLast}`);
    s.close();
  }
  return { wall, cpu };
}

export async function runWalBench(options: WalBenchOptions = {}, log: (line: string) => void = () => {}): Promise<{ metrics: Metric[]; notes: string[]; params: Record<string, number | string> }> {
  const root = mkdtempSync(join(process.env.TENURE_BENCH_DIR ?? tmpdir(), 'tenure-wal-bench-'));
  const saves = options.saves ?? 2000;
  const logBytes = options.logBytes ?? 1024 * 1024 * 1024;
  const entryBytes = options.bigEntryBytes ?? 1024;
  const opens = options.opens ?? 3;
  const metrics: Metric[] = [];
  const notes: string[] = [];
  try {
    log(`save latency: ${saves} Readies of one ${SMALL} B entry, each one write + one fdatasync`);
    metrics.push(
      metric('save-1', `DurableStorage.save of one ${SMALL} B entry + hard state (one write + one fdatasync), ms`, saveLatency(root, saves), {
        stat: 'p50',
        max: 0.5,
        label: 'a third of the 1.5 ms commit p50 budget',
      }),
    );
    await Promise.resolve();
    for (const per of [16, 256]) {
      log(`group commit: Readies of ${per} entries`);
      const g = groupCommit(root, per, per === 256 ? 400 : 1000);
      metrics.push(metric(`group-${per}-rate`, `entries/s saved durably, ${per} ${SMALL} B entries per Ready (one write + one fdatasync each)`, [g.rate], undefined, 'ops/s'));
      metrics.push(metric(`group-${per}-save`, `save of one Ready of ${per} ${SMALL} B entries, ms`, g.latency));
      await Promise.resolve();
    }
    const big = join(root, 'big');
    log(`writing ${(logBytes / 2 ** 20).toFixed(0)} MiB of log in ${entryBytes} B entries...`);
    const t0 = performance.now();
    const last = bigLog(big, logBytes, entryBytes);
    notes.push(`wrote ${last - 1} entries of ${entryBytes} B (${(logBytes / 2 ** 20).toFixed(0)} MiB) in ${((performance.now() - t0) / 1000).toFixed(1)} s`);
    log('timing opens without a snapshot...');
    const plain = timeOpens(big, opens, last);
    const mib = (logBytes / 2 ** 20).toFixed(0);
    metrics.push(metric('open-no-snapshot', `open of ${mib} MiB of log, no snapshot: every record read, checksummed, indexed (page cache warm), wall ms`, plain.wall));
    metrics.push(metric('open-no-snapshot-cpu', `the same opens, CPU ms (user + system) of this process`, plain.cpu));
    {
      const s = DurableStorage.open({ dir: big });
      const at = last - 1000;
      s.createSnapshot(at, cs3, new Uint8Array(1024 * 1024).fill(3));
      s.compact(at);
      notes.push(`snapshot at ${at} (1 MiB image), ${s.segmentNames().length} segment(s) kept after compaction`);
      s.close();
    }
    log('timing opens with a snapshot...');
    const snapped = timeOpens(big, opens, last);
    metrics.push(metric('open-snapshot', `open of the same log with a 1 MiB snapshot 1000 entries before its end and the log compacted behind it, wall ms`, snapped.wall));
    metrics.push(metric('open-snapshot-cpu', `the same opens, CPU ms (user + system) of this process`, snapped.cpu));
  } finally {
    rmSync(root, { recursive: true, force: true });
  }
  return { metrics, notes, params: { saves, logBytes, entryBytes, opens, dir: process.env.TENURE_BENCH_DIR ?? tmpdir() } };
}

/** The WAL as an entry of bench/run.ts. */
export function walBenchmark(): Benchmark {
  return {
    name: 'raft-wal',
    description: 'Raft write-ahead log (DurableStorage) on the local disk: save latency with fdatasync, group commit, open time of 1 GiB of log.',
    tags: ['raft', 'wal'],
    async run({ log }): Promise<BenchResult> {
      const started = performance.now();
      const r = await runWalBench({}, log);
      return { name: 'raft-wal', description: this.description, target: 'raft', params: r.params, metrics: r.metrics, notes: r.notes, durationMs: performance.now() - started };
    },
  };
}
