import { describe, expect, it } from 'vitest';
import { RaftLog } from '../../src/raft/core/log.js';
import {
  InvariantError,
  LogCompactedError,
  LogUnavailableError,
  MemoryStorage,
  SnapshotOutOfDateError,
  type Entry,
} from '../../src/raft/core/index.js';

const enc = new TextEncoder();
const ent = (index: number, term: number, data = ''): Entry => ({ index, term, type: 'normal', data: enc.encode(data) });
const ents = (terms: number[], from = 1): Entry[] => terms.map((t, i) => ent(from + i, t));
const terms = (es: Entry[]): number[] => es.map((e) => e.term);

function logWith(termsList: number[]): RaftLog {
  const s = new MemoryStorage();
  s.append(ents(termsList));
  return new RaftLog(s, undefined);
}

describe('MemoryStorage', () => {
  it('restores a recovered node: hard state, snapshot and the log after it, as given', () => {
    const confState = { voters: [1, 2, 3], learners: [], votersOutgoing: [], learnersNext: [], autoLeave: false };
    const snap = { metadata: { index: 10, term: 3, confState }, data: enc.encode('image') };
    const log = [ent(10, 3), ...ents([3, 4, 4], 11)];
    const s = MemoryStorage.restore({ term: 4, vote: 2, commit: 12 }, snap, log);
    expect(s.initialState()).toEqual({ hardState: { term: 4, vote: 2, commit: 12 }, confState });
    expect([s.firstIndex(), s.lastIndex(), s.term(10)]).toEqual([11, 13, 3]);
    expect(terms(s.entries(11, 14))).toEqual([3, 4, 4]);
    expect(() => s.term(9)).toThrow(LogCompactedError);
    // The log must start at the snapshot: anything else is a bug in the caller.
    expect(() => MemoryStorage.restore({ term: 4, vote: 0, commit: 0 }, snap, ents([3, 4], 11))).toThrow(InvariantError);
    expect(() => MemoryStorage.restore({ term: 4, vote: 0, commit: 0 }, snap, [])).toThrow(InvariantError);
  });

  it('appending over a conflicting suffix replaces it', () => {
    const s = new MemoryStorage();
    s.append(ents([1, 1, 2, 2]));
    s.append(ents([3, 3], 3));
    expect(terms(s.entries(1, 5))).toEqual([1, 1, 3, 3]);
    expect(s.lastIndex()).toBe(4);
  });

  it('refuses a gap', () => {
    const s = new MemoryStorage();
    s.append(ents([1]));
    expect(() => s.append(ents([1], 3))).toThrow(LogUnavailableError);
  });

  it('compacts only what a snapshot covers and keeps the term of the last compacted entry', () => {
    const s = new MemoryStorage();
    s.append(ents([1, 1, 2, 2, 3]));
    expect(() => s.compact(3)).toThrow(InvariantError);
    s.createSnapshot(3, { voters: [1], learners: [], votersOutgoing: [], learnersNext: [], autoLeave: false }, enc.encode('x'));
    s.compact(3);
    expect(s.firstIndex()).toBe(4);
    expect(s.term(3)).toBe(2);
    expect(() => s.term(2)).toThrow(LogCompactedError);
    expect(() => s.entries(3, 5)).toThrow(LogCompactedError);
    expect(() => s.term(6)).toThrow(LogUnavailableError);
    expect(terms(s.entries(4, 6))).toEqual([2, 3]);
  });

  it('limits entries by payload bytes but always returns one', () => {
    const s = new MemoryStorage();
    s.append([ent(1, 1, 'aaaa'), ent(2, 1, 'bb'), ent(3, 1, 'cc')]);
    expect(s.entries(1, 4, 1)).toHaveLength(1);
    expect(s.entries(1, 4, 6)).toHaveLength(2);
    expect(s.entries(1, 4, 0)).toHaveLength(1);
    expect(s.entries(1, 4)).toHaveLength(3);
  });

  it('refuses an older snapshot', () => {
    const s = new MemoryStorage();
    const cs = { voters: [1], learners: [], votersOutgoing: [], learnersNext: [], autoLeave: false };
    s.applySnapshot({ metadata: { index: 5, term: 2, confState: cs }, data: new Uint8Array() });
    expect(() => s.applySnapshot({ metadata: { index: 4, term: 2, confState: cs }, data: new Uint8Array() })).toThrow(SnapshotOutOfDateError);
    expect(s.firstIndex()).toBe(6);
    expect(s.lastIndex()).toBe(5);
  });
});

describe('RaftLog', () => {
  it('finds the first conflicting or new entry', () => {
    const log = logWith([1, 2, 3]);
    expect(log.findConflict(ents([1, 2, 3]))).toBe(0);
    expect(log.findConflict(ents([2, 3], 2))).toBe(0);
    expect(log.findConflict(ents([2, 3, 4], 2))).toBe(4);
    expect(log.findConflict(ents([1, 4, 4], 1))).toBe(2);
    expect(log.findConflict(ents([4], 3))).toBe(3);
  });

  it('appends only when the previous entry matches, truncating a conflicting suffix', () => {
    const log = logWith([1, 1, 2, 2]);
    expect(log.maybeAppend(2, 2, 0, ents([3], 3))).toBeUndefined(); // term at 2 is 1
    expect(log.maybeAppend(2, 1, 0, ents([3, 3], 3))).toBe(4);
    expect(terms(log.allEntries())).toEqual([1, 1, 3, 3]);
    // Entries already present (same terms) are not rewritten and nothing after them is lost.
    expect(log.maybeAppend(1, 1, 0, ents([1], 2))).toBe(2);
    expect(terms(log.allEntries())).toEqual([1, 1, 3, 3]);
  });

  it('commits up to min(leader commit, last new entry) and never back', () => {
    const log = logWith([1, 1, 1]);
    log.maybeAppend(1, 1, 10, ents([1], 2));
    expect(log.committed).toBe(2);
    log.commitTo(1);
    expect(log.committed).toBe(2);
    expect(() => log.commitTo(9)).toThrow(InvariantError);
  });

  it('never truncates committed entries', () => {
    const log = logWith([1, 1, 1]);
    log.commitTo(3);
    expect(() => log.maybeAppend(1, 1, 3, ents([2, 2], 2))).toThrow(InvariantError);
  });

  it('commits as leader only an entry of the current term (Figure 8)', () => {
    const log = logWith([1, 2, 4]);
    expect(log.maybeCommit(2, 4)).toBe(false);
    expect(log.committed).toBe(0);
    expect(log.maybeCommit(3, 4)).toBe(true);
    expect(log.committed).toBe(3);
  });

  it('up-to-date: a later last term wins, then a longer log', () => {
    const log = logWith([1, 2, 2]);
    expect(log.isUpToDate(1, 3)).toBe(true);
    expect(log.isUpToDate(3, 2)).toBe(true);
    expect(log.isUpToDate(2, 2)).toBe(false);
    expect(log.isUpToDate(10, 1)).toBe(false);
  });

  it('finds the last index with a term at or below a given one (backtracking hint)', () => {
    const log = logWith([1, 1, 1, 4, 4, 5, 5, 6, 6, 6]);
    expect(log.findConflictByTerm(10, 6)).toBe(10);
    expect(log.findConflictByTerm(10, 5)).toBe(7);
    expect(log.findConflictByTerm(10, 3)).toBe(3);
    expect(log.findConflictByTerm(10, 0)).toBe(0);
    expect(log.findConflictByTerm(5, 6)).toBe(5);
  });

  it('hands out unstable entries until they are stable, and ignores a stale stableTo', () => {
    const s = new MemoryStorage();
    const log = new RaftLog(s, undefined);
    log.append(ents([1, 1]));
    expect(log.unstableEntries()).toHaveLength(2);
    // The entry at 2 is replaced before the application confirms it.
    log.append(ents([2], 2));
    log.stableTo(2, 1);
    expect(terms(log.unstableEntries())).toEqual([1, 2]);
    s.append(log.unstableEntries());
    log.stableTo(2, 2);
    expect(log.unstableEntries()).toEqual([]);
    expect(terms(log.allEntries())).toEqual([1, 2]);
  });

  it('cuts committed entries to the apply size limit but hands out at least one', () => {
    const s = new MemoryStorage();
    s.append([ent(1, 1, 'aaaa'), ent(2, 1, 'bbbb'), ent(3, 1, 'cccc')]);
    const log = new RaftLog(s, 5);
    log.commitTo(3);
    expect(log.nextCommittedEntries().map((e) => e.index)).toEqual([1]);
    log.appliedTo(1);
    expect(log.nextCommittedEntries().map((e) => e.index)).toEqual([2]);
  });
});
