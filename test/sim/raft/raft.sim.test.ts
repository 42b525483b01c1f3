/**
 * The Raft simulation in CI: 2,000 seeds (odd ones with 3 nodes, even ones with 5), each with
 * network faults, crashes and restarts, membership changes and transfers, checked step by step
 * for the safety properties of the Raft paper and at the end for linearizability. Any range can
 * be run with `tsx test/sim/raft/cli.ts --seeds N --from S`.
 */
import { describe, expect, it } from 'vitest';
import { nodesFor } from './seeds.js';
import { runSeed, type SimStats } from './simulation.js';

const SEEDS = 2000;
const BATCH = 250;

describe('raft simulation', () => {
  const totals: Partial<SimStats> = {};
  for (let from = 1; from <= SEEDS; from += BATCH) {
    const to = Math.min(SEEDS, from + BATCH - 1);
    it(`seeds ${from}..${to}: no safety or linearizability violation`, () => {
      const reports: string[] = [];
      for (let seed = from; seed <= to; seed++) {
        const r = runSeed({ seed, nodes: nodesFor(seed, undefined) });
        for (const [k, v] of Object.entries(r.stats) as [keyof SimStats, number][]) totals[k] = (totals[k] ?? 0) + v;
        if (r.violation !== undefined) reports.push(r.violation.report);
      }
      expect(reports.slice(0, 2).join('\n\n')).toBe('');
    });
  }

  it('exercised what it claims to', () => {
    // Guard against a simulation that silently tests less than it says.
    expect(totals.leaders).toBeGreaterThan(SEEDS * 2);
    expect(totals.crashes).toBeGreaterThan(SEEDS);
    expect(totals.partitions).toBeGreaterThan(SEEDS / 2);
    expect(totals.confChanges).toBeGreaterThan(SEEDS / 2);
    expect(totals.transfers).toBeGreaterThan(SEEDS / 2);
    expect(totals.snapshotsSent).toBeGreaterThan(SEEDS / 2);
    expect(totals.duplicated).toBeGreaterThan(SEEDS);
    expect(totals.ambiguous).toBeGreaterThan(SEEDS);
    expect(totals.reads).toBeGreaterThan(SEEDS * 20);
    expect(totals.completed).toBeGreaterThan(SEEDS * 50);
  });

  it('replays a seed exactly', () => {
    const a = runSeed({ seed: 4242, nodes: 5 });
    const b = runSeed({ seed: 4242, nodes: 5 });
    expect(b.stats).toEqual(a.stats);
    expect(b.history).toEqual(a.history);
  });
});
