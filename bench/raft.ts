/**
 * Raft core benchmark: three in-memory cores in one process, messages delivered at once, no
 * fsync. Measures committed entries per second with proposals batched per Ready cycle, and the
 * rate of ticks plus steps of an idle group (heartbeats and their answers). The goal is at least
 * 100,000 committed entries/s, so the core is never the bottleneck next to a disk's fsync.
 *
 *   import { runRaftBench } from './raft.js';  // for the bench runner
 *   npx tsx bench/raft.ts                       // on its own: prints the rows
 */
import type { Benchmark, BenchResult } from './lib/types.js';
import { metric } from './lib/stats.js';
import { pathToFileURL } from 'node:url';
import type { ConfState, Message, NodeId } from '../src/raft/core/index.js';
import { MemoryStorage, NONE, RawNode, SeededRandom } from './lib/built.js';

export interface RaftBenchOptions {
  /** Entries to commit per batch size (default 200,000). */
  entries?: number;
  /** Proposals per Ready cycle to measure (default 1, 16, 256). */
  batches?: readonly number[];
  /** Payload bytes per entry (default 64). */
  payload?: number;
  /** Ticks of the idle-group measurement (default 200,000). */
  ticks?: number;
}

export interface RaftBenchResult {
  name: string;
  rows: Record<string, number | string>[];
}

interface Group {
  nodes: RawNode[];
  storages: MemoryStorage[];
  queue: Message[];
  /** Committed entries applied by the leader (node 1). */
  applied: number;
  steps: number;
}

function makeGroup(): Group {
  const cs: ConfState = { voters: [1, 2, 3], learners: [], votersOutgoing: [], learnersNext: [], autoLeave: false };
  const storages: MemoryStorage[] = [];
  const nodes: RawNode[] = [];
  for (const id of [1, 2, 3]) {
    const s = new MemoryStorage(cs);
    s.applySnapshot({ metadata: { index: 1, term: 1, confState: cs }, data: new Uint8Array() });
    s.setHardState({ term: 1, vote: NONE, commit: 1 });
    storages.push(s);
    nodes.push(new RawNode({ id, storage: s, random: new SeededRandom(id), electionTick: 10, heartbeatTick: 1 }));
  }
  const g: Group = { nodes, storages, queue: [], applied: 0, steps: 0 };
  nodes[0]!.campaign();
  pump(g);
  if (nodes[0]!.status().role !== 'leader') throw new Error('raft bench: node 1 did not become leader');
  return g;
}

/** Handles Readies and delivers messages at once until the group is quiet. */
function pump(g: Group): void {
  for (;;) {
    let progress = false;
    for (let i = 0; i < 3; i++) {
      const n = g.nodes[i]!;
      if (!n.hasReady()) continue;
      progress = true;
      const s = g.storages[i]!;
      const rd = n.ready();
      if (rd.snapshot !== undefined) s.applySnapshot(rd.snapshot);
      if (rd.entries.length > 0) s.append(rd.entries);
      if (rd.hardState !== undefined) s.setHardState(rd.hardState);
      for (const m of rd.messages) g.queue.push(m);
      if (i === 0) g.applied += rd.committedEntries.length;
      n.advance();
    }
    if (g.queue.length > 0) {
      progress = true;
      const q = g.queue;
      g.queue = [];
      for (const m of q) {
        g.nodes[(m.to as NodeId) - 1]!.step(m);
        g.steps++;
      }
    }
    if (!progress) return;
  }
}

/** Keeps the in-memory logs short, as a node that snapshots regularly would. */
function compact(g: Group): void {
  for (let i = 0; i < 3; i++) {
    const s = g.storages[i]!;
    const applied = g.nodes[i]!.status().applied;
    const keep = applied - 64;
    if (keep > s.firstIndex() + 1024) {
      s.createSnapshot(keep, s.snapshot().metadata.confState, new Uint8Array());
      s.compact(keep);
    }
  }
}

/** Wall-clock and CPU seconds since `start` (CPU time of this process: unaffected by other load on the machine). */
interface Timing {
  wall: number;
  cpu: number;
}

function since(start: { wall: number; cpu: NodeJS.CpuUsage }): Timing {
  const cpu = process.cpuUsage(start.cpu);
  return { wall: (performance.now() - start.wall) / 1000, cpu: (cpu.user + cpu.system) / 1e6 };
}

function now(): { wall: number; cpu: NodeJS.CpuUsage } {
  return { wall: performance.now(), cpu: process.cpuUsage() };
}

function commitRate(entries: number, batch: number, payload: number): { wall: number; cpu: number } {
  const g = makeGroup();
  const data = new Uint8Array(payload);
  const leader = g.nodes[0]!;
  // Warm up the JIT on a short run first.
  const warm = Math.min(20_000, entries / 4);
  let proposed = 0;
  const run = (target: number): void => {
    while (g.applied < target) {
      for (let b = 0; b < batch && proposed < target + 2; b++, proposed++) leader.propose(data);
      pump(g);
      if (proposed % 4096 < batch) compact(g);
    }
  };
  run(warm);
  const base = g.applied;
  const start = now();
  run(base + entries);
  const t = since(start);
  return { wall: (g.applied - base) / t.wall, cpu: (g.applied - base) / t.cpu };
}

function tickRate(ticks: number): { wall: number; cpu: number; ticks: number; steps: number } {
  const g = makeGroup();
  const start = now();
  const steps0 = g.steps;
  for (let t = 0; t < ticks; t++) {
    for (const n of g.nodes) n.tick();
    pump(g);
  }
  const time = since(start);
  const steps = g.steps - steps0;
  return { wall: (ticks * 3 + steps) / time.wall, cpu: (ticks * 3 + steps) / time.cpu, ticks: ticks * 3, steps };
}

export async function runRaftBench(options: RaftBenchOptions = {}): Promise<RaftBenchResult> {
  const entries = options.entries ?? 200_000;
  const payload = options.payload ?? 64;
  const rows: Record<string, number | string>[] = [];
  for (const batch of options.batches ?? [1, 16, 256]) {
    const rate = commitRate(entries, batch, payload);
    rows.push({
      measure: `committed entries/s, ${batch} per batch, ${payload} B`,
      value: Math.round(rate.wall),
      'per CPU second': Math.round(rate.cpu),
      goal: 100_000,
      ok: rate.wall >= 100_000 ? 'yes' : 'no',
    });
    await Promise.resolve();
  }
  const t = tickRate(options.ticks ?? 200_000);
  rows.push({
    measure: `ticks + steps/s (idle group, heartbeat every tick; ${t.ticks} ticks, ${t.steps} steps)`,
    value: Math.round(t.wall),
    'per CPU second': Math.round(t.cpu),
    goal: '',
    ok: '',
  });
  return { name: 'raft core (3 in-memory nodes, instant delivery, no fsync)', rows };
}

/** The Raft core as an entry of bench/run.ts: each row becomes a metric (one sample, ops/s). */
export function raftBenchmark(): Benchmark {
  return {
    name: 'raft-core',
    description: 'Three in-memory Raft cores in one process, messages delivered at once, no fsync.',
    tags: ['raft'],
    async run(): Promise<BenchResult> {
      const started = performance.now();
      const r = await runRaftBench();
      const metrics = r.rows.map((row, i) => {
        const goal = typeof row.goal === 'number' ? { stat: 'p50' as const, min: row.goal, label: `${row.goal} entries/s` } : undefined;
        return metric(i < r.rows.length - 1 ? `commit-rate-${i + 1}` : 'ticks-steps', String(row.measure), [Number(row.value)], goal, 'ops/s');
      });
      const notes = r.rows.map((row) => `${String(row.measure)}: ${String(row['per CPU second'])} per CPU second`);
      return { name: 'raft-core', description: r.name, target: 'raft', params: {}, metrics, notes, durationMs: performance.now() - started };
    },
  };
}

if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href) {
  const r = await runRaftBench();
  process.stdout.write(`${r.name}\n`);
  for (const row of r.rows) {
    const goal = row.ok === '' ? '' : ` (goal ${String(row.goal)}: ${String(row.ok)})`;
    process.stdout.write(`  ${String(row.measure)}: ${String(row.value)} (${String(row['per CPU second'])} per CPU second)${goal}\n`);
  }
}
