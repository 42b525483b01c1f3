/**
 * The classic elections in the deterministic simulator: 200 seeds each, without partitions (one
 * leader per term, terms that never go back, an election settled on the highest id once faults
 * stop) and with them (the same safety checks, and the split brain the checker must find:
 * these elections are not safe under partitions). A wide range runs from the CLI:
 * `npx tsx test/sim/classic/cli.ts --seeds 20000 --from <random>`.
 */
import { describe, expect, it } from 'vitest';
import { ElectionChecker } from './checker.js';
import { report, runSeed, type Algorithm } from './simulation.js';

const SEEDS = 200;

describe.each<Algorithm>(['bully', 'ring'])('%s election in the simulator', (algorithm) => {
  it(`keeps one leader per term and elects the highest id after crashes, restarts, loss and delay (${SEEDS} seeds)`, () => {
    let elections = 0;
    let crashes = 0;
    for (let seed = 1; seed <= SEEDS; seed++) {
      const r = runSeed({ seed, algorithm });
      if (r.violations.length > 0) expect.fail(report(r, false));
      expect(r.stats.splitBrains).toBe(0);
      elections += r.stats.elections;
      crashes += r.stats.crashes;
    }
    // The runs did exercise the faults and the elections.
    expect(crashes).toBeGreaterThan(SEEDS);
    expect(elections).toBeGreaterThan(SEEDS * 3);
  });

  it(`shows split brain under partitions, and still never reuses a term (${SEEDS} seeds)`, () => {
    let splitSeeds = 0;
    let example = '';
    for (let seed = 1; seed <= SEEDS; seed++) {
      const r = runSeed({ seed, algorithm, partitions: true });
      if (r.violations.length > 0) expect.fail(report(r, true));
      const split = r.overlaps.filter((o) => o.splitBrain);
      if (split.length > 0) {
        splitSeeds++;
        const o = split[0]!;
        // Two leaders at the same time, in different terms, on the two sides of a partition.
        expect(o.a.node).not.toBe(o.b.node);
        expect(o.a.term).not.toBe(o.b.term);
        example ||= `seed ${seed}: node ${o.a.node} (term ${o.a.term}) and node ${o.b.node} (term ${o.b.term}) lead at t=${o.at}`;
      }
    }
    expect(splitSeeds, 'the checker found no split brain under partitions').toBeGreaterThan(SEEDS / 4);
    expect(example).not.toBe('');
  });
});

describe('the election checker', () => {
  const members = [1, 2, 3];
  const apart = (): boolean => true;
  const together = (): boolean => false;

  it('flags a term led twice, by two nodes or two incarnations of one', () => {
    const c = new ElectionChecker(members);
    c.elected(0, 2, 1, 4, together); // 4 mod 3 = position 1 = node 2
    c.ended(10, 2);
    c.elected(20, 2, 2, 4, together);
    expect(c.violations.map((v) => v.kind)).toEqual(['term-reused', 'term-went-back']);
  });

  it('flags a term its leader does not own, and finds split brain', () => {
    const c = new ElectionChecker(members);
    c.elected(0, 3, 1, 5, together); // 5 mod 3 = 2: node 3's
    c.elected(5, 1, 1, 6, apart); // 6 mod 3 = 0: node 1's, while node 3 still leads, across a partition
    c.elected(6, 1, 1, 7, together); // 7 mod 3 = 1: node 2's, not node 1's
    expect(c.violations.map((v) => v.kind)).toEqual(['term-not-owned']);
    expect(c.splitBrains).toHaveLength(1);
    expect(c.splitBrains[0]).toMatchObject({ a: { node: 3, term: 5 }, b: { node: 1, term: 6 } });
  });

  it('flags an election that did not settle', () => {
    const c = new ElectionChecker(members);
    c.settled(100, new Map([[1, { isLeader: true, leader: 1, term: 3 }], [2, { isLeader: false, leader: 1, term: 3 }], [3, { isLeader: false, leader: null, term: 3 }]]));
    expect(c.violations.map((v) => v.kind)).toEqual(['no-leader']);
  });
});
