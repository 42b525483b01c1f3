import { describe, expect, it } from 'vitest';
import { checkHistory, checkKey, describeCounterexample, type KvOp, type Operation } from './linearizability.js';

let nextId = 0;
function op(client: number, o: KvOp, output: number | boolean | undefined, call: number, ret: number | undefined, key = 'x'): Operation {
  return { id: nextId++, client, key, op: o, output, call, ret };
}
const read = (c: number, v: number, call: number, ret: number | undefined, key?: string): Operation => op(c, { kind: 'read' }, v, call, ret, key);
const write = (c: number, v: number, call: number, ret: number | undefined, key?: string): Operation =>
  op(c, { kind: 'write', value: v }, ret === undefined ? undefined : true, call, ret, key);
const cas = (c: number, e: number, v: number, ok: boolean | undefined, call: number, ret: number | undefined): Operation =>
  op(c, { kind: 'cas', expected: e, value: v }, ok, call, ret);

describe('linearizability checker', () => {
  it('accepts a sequential history and an empty one', () => {
    expect(checkKey('x', [])).toBeUndefined();
    expect(checkKey('x', [write(1, 1, 0, 1), read(1, 1, 2, 3), cas(1, 1, 2, true, 4, 5), read(1, 2, 6, 7), cas(1, 1, 3, false, 8, 9)])).toBeUndefined();
  });

  it('accepts overlapping operations that can be ordered either way', () => {
    // The read overlaps the write: it may see the old or the new value.
    expect(checkKey('x', [write(1, 1, 0, 10), read(2, 0, 1, 2)])).toBeUndefined();
    expect(checkKey('x', [write(1, 1, 0, 10), read(2, 1, 1, 2)])).toBeUndefined();
    // Two concurrent writes, then reads that agree on which came last.
    expect(checkKey('x', [write(1, 1, 0, 5), write(2, 2, 1, 6), read(3, 1, 7, 8), read(3, 1, 9, 10)])).toBeUndefined();
  });

  it('refuses a stale read after a completed write', () => {
    const c = checkKey('x', [write(1, 1, 0, 1), read(2, 0, 2, 3)]);
    expect(c).toBeDefined();
    expect(c!.blocked.op.kind).toBe('read');
    expect(c!.prefix.map((o) => o.op.kind)).toEqual(['write']);
  });

  it('refuses reads that see two writes in both orders', () => {
    // Both writes are concurrent, but one reader sees 1 then 2 and the other 2 then 1.
    const h = [write(1, 1, 0, 20), write(2, 2, 0, 20), read(3, 1, 1, 2), read(3, 2, 3, 4), read(4, 2, 5, 6), read(4, 1, 7, 8)];
    expect(checkKey('x', h)).toBeDefined();
  });

  it('refuses a value that was never written, and a read that goes back', () => {
    expect(checkKey('x', [read(1, 7, 0, 1)])).toBeDefined();
    expect(checkKey('x', [write(1, 1, 0, 1), write(1, 2, 2, 3), read(2, 2, 4, 5), read(2, 1, 6, 7)])).toBeDefined();
  });

  it('checks compare-and-set outcomes against the state', () => {
    // Two CAS 0->n both succeed while strictly one after the other: impossible.
    expect(checkKey('x', [cas(1, 0, 1, true, 0, 1), cas(2, 0, 2, true, 2, 3)])).toBeDefined();
    // Concurrent, one wins and one fails: fine.
    expect(checkKey('x', [cas(1, 0, 1, true, 0, 3), cas(2, 0, 2, false, 1, 4), read(3, 1, 5, 6)])).toBeUndefined();
    // A failed CAS claims the value differed, but nothing could have changed it.
    expect(checkKey('x', [cas(1, 0, 1, false, 0, 1)])).toBeDefined();
  });

  it('lets an ambiguous operation take effect at any time after its call, or never', () => {
    // The write's outcome is unknown; a later read may see it...
    expect(checkKey('x', [write(1, 5, 0, undefined), read(2, 5, 10, 11)])).toBeUndefined();
    // ...or not see it (it may never have happened, or happen later)...
    expect(checkKey('x', [write(1, 5, 0, undefined), read(2, 0, 10, 11)])).toBeUndefined();
    // ...but once seen, it cannot be unseen.
    expect(checkKey('x', [write(1, 5, 0, undefined), read(2, 5, 10, 11), read(2, 0, 12, 13)])).toBeDefined();
    // And it cannot take effect before it was invoked.
    expect(checkKey('x', [read(2, 5, 0, 1), write(1, 5, 2, undefined)])).toBeDefined();
    // An ambiguous CAS may have swapped or not.
    expect(checkKey('x', [cas(1, 0, 9, undefined, 0, undefined), read(2, 9, 5, 6)])).toBeUndefined();
    expect(checkKey('x', [cas(1, 0, 9, undefined, 0, undefined), read(2, 0, 5, 6)])).toBeUndefined();
  });

  it('checks each key on its own and reports only the bad key', () => {
    const h = [write(1, 1, 0, 1, 'a'), read(2, 1, 2, 3, 'a'), write(1, 2, 4, 5, 'b'), read(2, 0, 6, 7, 'b')];
    const r = checkHistory(h);
    expect(r.ok).toBe(false);
    expect(r.counterexamples.map((c) => c.key)).toEqual(['b']);
    const text = describeCounterexample(r.counterexamples[0]!).join('\n');
    expect(text).toMatch(/key b: not linearizable/);
    expect(text).toMatch(/cannot place before its response: op#\d+ client 2 read b -> 0/);
    expect(checkHistory(h.slice(0, 2)).ok).toBe(true);
  });

  it('handles a long history with many concurrent and ambiguous operations quickly', () => {
    // 3 clients, 600 ops: each writes a unique value and reads back; a few writes are ambiguous.
    const h: Operation[] = [];
    let t = 0;
    let current = 0;
    for (let i = 0; i < 200; i++) {
      const base = t;
      const v = i + 1;
      const ambiguous = i % 17 === 0;
      h.push(write(1, v, base, ambiguous ? undefined : base + 3));
      h.push(read(2, current, base + 1, base + 2));
      if (!ambiguous) current = v;
      h.push(read(3, current, base + 4, base + 5));
      if (ambiguous) {
        // The ambiguous write never showed up; the next write supersedes it.
      }
      t += 6;
    }
    const start = performance.now();
    expect(checkKey('x', h)).toBeUndefined();
    expect(performance.now() - start).toBeLessThan(2000);
    // Corrupt one read in the middle.
    const bad = h.slice();
    const at = 301;
    const o = bad[at]!;
    bad[at] = { ...o, output: 123456 };
    expect(checkKey('x', bad)).toBeDefined();
  });
});
