/**
 * The demo's checks on a resource's record are not vacuous: fed a record in which a deposed
 * leader's write landed after its successor's, they say so; fed a clean one, they find nothing.
 */
import { describe, expect, it } from 'vitest';
import { WriteHistory } from '../../src/cli/demo-history.js';

const write = (seq: number, term: number, node: string, owner = `${node}~1`) => ({ seq, term, payload: JSON.stringify({ node, owner, n: seq }) });
const won = new Map([
  [1, { owner: 'node-1~1', node: 'node-1' }],
  [2, { owner: 'node-2~1', node: 'node-2' }],
]);

describe('the demo\'s checks on the applied writes', () => {
  it('find nothing wrong in a clean record, and tell who wrote each entry', () => {
    const violations: string[] = [];
    const h = new WriteHistory(violations);
    expect([write(1, 1, 'node-1'), write(2, 1, 'node-1'), write(3, 2, 'node-2')].map((w) => h.add(w))).toEqual(['node-1', 'node-1', 'node-2']);
    h.checkElections(won);
    expect(violations).toEqual([]);
    expect(h.entries).toBe(3);
    expect([...h.termWriters].map(([term, w]) => [term, w.node, w.entries])).toEqual([
      [1, 'node-1', 2],
      [2, 'node-2', 1],
    ]);
  });

  it('catch a lower term applied after a higher one: the zombie\'s write that fencing must refuse', () => {
    const violations: string[] = [];
    const h = new WriteHistory(violations);
    for (const w of [write(1, 1, 'node-1'), write(2, 2, 'node-2'), write(3, 1, 'node-1')]) h.add(w);
    expect(violations).toEqual(['entry #3 has term 1 after term 2: a stale write was accepted']);
  });

  it('catch a gap, two writers in one term, a term nobody won and a payload no node wrote', () => {
    const violations: string[] = [];
    const h = new WriteHistory(violations);
    h.add(write(1, 1, 'node-1'));
    h.add(write(3, 1, 'node-3', 'node-3~1'));
    h.add(write(4, 5, 'node-2'));
    h.add({ seq: 5, term: 5, payload: 'garbage' });
    h.checkElections(won);
    expect(violations).toEqual([
      'entry #3 follows #1: the sequence has a gap',
      'term 1 has two writers: node-1~1 and node-3~1 (entry #3)',
      'entry #5 has a payload no node wrote',
      'term 5 has two writers: node-2~1 and ? (entry #5)',
      'term 5 was written by node-2 but no node reported winning it',
    ]);
  });
});
