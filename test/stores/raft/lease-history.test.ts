/**
 * The translation of lease and stream histories into the simulator's linearizability checker
 * (lease-history.ts): a correct history passes, and each kind of tampering a broken store could
 * produce is caught — two holders of one term, a lease granted while held, a read of a released
 * holder, an acknowledged append lost or moved, an append applied twice, a stale-refused append
 * that landed.
 */
import { describe, expect, it } from 'vitest';
import { checkLinearizable, checkStreams, ownerNumber, type FinalEntry, type HistoryOp } from './lease-history.js';

/** Client 1 takes `a` (term 1), appends twice, releases; client 2 is refused meanwhile, then takes term 2 and appends. */
function good(): { ops: HistoryOp[]; streams: Map<string, FinalEntry[]> } {
  const ops: HistoryOp[] = [
    { kind: 'acquire', client: 1, name: 'a', call: 0, ret: 1, acquired: true, owner: 1, term: 1 },
    { kind: 'acquire', client: 2, name: 'a', call: 2, ret: 3, acquired: false, owner: 1, term: 1 },
    { kind: 'append', client: 1, stream: 's-a', payload: 'p1', call: 2, ret: 4, result: { kind: 'ok', seq: 1 } },
    { kind: 'renew', client: 1, name: 'a', term: 1, call: 5, ret: 6, renewed: true },
    { kind: 'append', client: 1, stream: 's-a', payload: 'p2', call: 5, ret: undefined, result: { kind: 'ambiguous' } },
    { kind: 'read', client: 2, name: 'a', call: 7, ret: 8, holder: { owner: 1, term: 1 } },
    { kind: 'release', client: 1, name: 'a', term: 1, call: 9, ret: 10, released: true },
    { kind: 'head', client: 2, stream: 's-a', call: 9, ret: 10, seq: 2 },
    { kind: 'acquire', client: 2, name: 'a', call: 11, ret: 12, acquired: true, owner: 2, term: 2 },
    { kind: 'renew', client: 1, name: 'a', term: 1, call: 13, ret: 14, renewed: false },
    { kind: 'append', client: 1, stream: 's-a', payload: 'late', call: 13, ret: 14, result: { kind: 'stale' } },
    { kind: 'append', client: 2, stream: 's-a', payload: 'q1', call: 15, ret: 16, result: { kind: 'ok', seq: 3 } },
    { kind: 'read', client: 1, name: 'a', call: 17, ret: 18, holder: { owner: 2, term: 2 } },
  ];
  const streams = new Map<string, FinalEntry[]>([
    [
      's-a',
      [
        { seq: 1, payload: 'p1' },
        { seq: 2, payload: 'p2' },
        { seq: 3, payload: 'q1' },
      ],
    ],
  ]);
  return { ops, streams };
}

function replace(ops: HistoryOp[], i: number, o: HistoryOp): HistoryOp[] {
  return ops.map((x, j) => (j === i ? o : x));
}

describe('lease histories through the linearizability checker', () => {
  it('accepts a correct history, with an ambiguous append placed from the final stream', () => {
    const { ops, streams } = good();
    const r = checkLinearizable(ops, streams);
    expect(r.report).toBe('');
    expect(r.ok).toBe(true);
    expect(checkStreams(ops, streams)).toEqual([]);
    // The ambiguous append may also never have landed.
    const without = new Map([['s-a', [{ seq: 1, payload: 'p1' }]]]);
    const noP2 = ops.filter((o) => !(o.kind === 'head' || (o.kind === 'append' && o.payload === 'q1')));
    expect(checkLinearizable(noP2, without).ok).toBe(true);
  });

  it('catches a lease granted twice in one term, or to a second owner while it was held', () => {
    const { ops, streams } = good();
    // Client 2 also "acquired" term 1 while client 1 held it.
    const twice = replace(ops, 1, { kind: 'acquire', client: 2, name: 'a', call: 2, ret: 3, acquired: true, owner: 2, term: 1 });
    const r = checkLinearizable(twice, streams);
    expect(r.ok).toBe(false);
    expect(r.report).toMatch(/key lease:a: not linearizable/);
    // Client 2 granted term 2 before client 1's release was even sent.
    const early = replace(ops, 8, { kind: 'acquire', client: 2, name: 'a', call: 2, ret: 3, acquired: true, owner: 2, term: 2 });
    expect(checkLinearizable(early, streams).ok).toBe(false);
  });

  it('catches a stale read: the released holder seen after a new one was granted', () => {
    const { ops, streams } = good();
    const stale = replace(ops, 12, { kind: 'read', client: 1, name: 'a', call: 17, ret: 18, holder: { owner: 1, term: 1 } });
    expect(checkLinearizable(stale, streams).ok).toBe(false);
    // A renew that succeeds after the release completed.
    const renewed = replace(ops, 9, { kind: 'renew', client: 1, name: 'a', term: 1, call: 13, ret: 14, renewed: true });
    expect(checkLinearizable(renewed, streams).ok).toBe(false);
  });

  it('catches an acknowledged append lost, moved or applied twice, and a stale append that landed', () => {
    const { ops, streams } = good();
    const lost = new Map([
      [
        's-a',
        [
          { seq: 1, payload: 'p2' },
          { seq: 2, payload: 'q1' },
        ],
      ],
    ]);
    expect(checkStreams(ops, lost).length).toBeGreaterThan(0);
    expect(checkLinearizable(ops, lost).ok).toBe(false);
    const twice = new Map([['s-a', [...streams.get('s-a')!, { seq: 4, payload: 'p1' }]]]);
    expect(checkStreams(ops, twice)).toContainEqual(expect.stringMatching(/p1 at seq 1 and 4 \(applied twice\)/));
    const landed = new Map([['s-a', [...streams.get('s-a')!, { seq: 4, payload: 'late' }]]]);
    expect(checkStreams(ops, landed)).toContainEqual(expect.stringMatching(/late refused as stale, yet at seq 4/));
    // Two appends acknowledged at the same seq.
    const same = replace(ops, 11, { kind: 'append', client: 2, stream: 's-a', payload: 'q1', call: 15, ret: 16, result: { kind: 'ok', seq: 2 } });
    expect(checkLinearizable(same, streams).ok).toBe(false);
    // A head read that goes back.
    const back = [...ops, { kind: 'head', client: 2, stream: 's-a', call: 20, ret: 21, seq: 2 } as const];
    expect(checkLinearizable(back, streams).ok).toBe(false);
  });

  it('refuses owners outside the workload', () => {
    expect(ownerNumber('client-7')).toBe(7);
    expect(() => ownerNumber('someone')).toThrow(/unexpected lease owner/);
    expect(() => ownerNumber('client-64')).toThrow(/unexpected lease owner/);
  });
});
