/**
 * The view of stable storage the core reads. The core never writes it: the application persists
 * what a Ready batch hands it and the core then reads it back through this interface.
 */
import {
  InvariantError,
  LogCompactedError,
  LogUnavailableError,
  SnapshotOutOfDateError,
} from './errors.js';
import { emptyConfState, type ConfState, type Entry, type HardState, type Snapshot } from './types.js';

export interface InitialState {
  readonly hardState: HardState;
  readonly confState: ConfState;
}

export interface Storage {
  /** The persisted hard state and the membership as of the last applied snapshot or conf change. */
  initialState(): InitialState;
  /**
   * Entries with index in [lo, hi), at least one if any exist, then as many as fit in
   * `maxBytes` of payload (undefined: no limit). Throws LogCompactedError when lo < firstIndex()
   * and LogUnavailableError when hi > lastIndex() + 1.
   */
  entries(lo: number, hi: number, maxBytes?: number): Entry[];
  /**
   * The term of entry `index`, for index in [firstIndex() - 1, lastIndex()] (the entry just before
   * the first is kept by its term for the log matching check). Throws LogCompactedError or
   * LogUnavailableError outside that range.
   */
  term(index: number): number;
  /** Index of the first entry still available (older ones are in the snapshot). */
  firstIndex(): number;
  lastIndex(): number;
  /** The most recent snapshot; may throw SnapshotUnavailableError while one is being made. */
  snapshot(): Snapshot;
}

/**
 * Cuts `entries` so their payload fits `maxBytes`, keeping at least one. `maxBytes` 0 keeps
 * exactly one; undefined keeps all.
 */
export function limitSize(entries: Entry[], maxBytes: number | undefined): Entry[] {
  if (maxBytes === undefined || entries.length <= 1) return entries;
  if (maxBytes === 0) return entries.slice(0, 1);
  let size = entries[0]!.data.byteLength;
  let n = 1;
  for (; n < entries.length; n++) {
    size += entries[n]!.data.byteLength;
    if (size > maxBytes) break;
  }
  return n === entries.length ? entries : entries.slice(0, n);
}

/**
 * Storage in memory, for tests and simulation. `entries[0]` is a dummy holding the index and term
 * of the last entry covered by the snapshot.
 */
export class MemoryStorage implements Storage {
  private hardState: HardState = { term: 0, vote: 0, commit: 0 };
  private snap: Snapshot;
  private ents: Entry[];

  constructor(confState: ConfState = emptyConfState()) {
    this.snap = { metadata: { index: 0, term: 0, confState }, data: new Uint8Array() };
    this.ents = [{ index: 0, term: 0, type: 'normal', data: new Uint8Array() }];
  }

  /**
   * Storage holding what a node recovered from disk: its hard state, its snapshot and the log
   * after it. `ents[0]` must be the dummy at the snapshot's index and term; `ents` is kept as
   * given, not copied (a recovered log may hold millions of entries). A durable storage keeps one
   * of these as the index of its log in memory.
   */
  static restore(hardState: HardState, snap: Snapshot, ents: Entry[]): MemoryStorage {
    const dummy = ents[0];
    if (dummy === undefined || dummy.index !== snap.metadata.index || dummy.term !== snap.metadata.term) {
      throw new InvariantError(`a restored log must start with the snapshot's index ${snap.metadata.index} and term ${snap.metadata.term}`);
    }
    const storage = new MemoryStorage(snap.metadata.confState);
    storage.hardState = hardState;
    storage.snap = snap;
    storage.ents = ents;
    return storage;
  }

  initialState(): InitialState {
    return { hardState: this.hardState, confState: this.snap.metadata.confState };
  }

  setHardState(hs: HardState): void {
    this.hardState = hs;
  }

  private get offset(): number {
    return this.ents[0]!.index;
  }

  entries(lo: number, hi: number, maxBytes?: number): Entry[] {
    if (lo <= this.offset) throw new LogCompactedError(lo, this.firstIndex());
    if (hi > this.lastIndex() + 1) throw new LogUnavailableError(hi - 1, this.lastIndex());
    return limitSize(this.ents.slice(lo - this.offset, hi - this.offset), maxBytes);
  }

  term(index: number): number {
    if (index < this.offset) throw new LogCompactedError(index, this.firstIndex());
    const e = this.ents[index - this.offset];
    if (e === undefined) throw new LogUnavailableError(index, this.lastIndex());
    return e.term;
  }

  firstIndex(): number {
    return this.offset + 1;
  }

  lastIndex(): number {
    return this.offset + this.ents.length - 1;
  }

  snapshot(): Snapshot {
    return this.snap;
  }

  /** Replaces the whole log with a snapshot received from the leader. */
  applySnapshot(snap: Snapshot): void {
    if (snap.metadata.index <= this.snap.metadata.index) {
      throw new SnapshotOutOfDateError(snap.metadata.index, this.snap.metadata.index);
    }
    this.snap = snap;
    this.ents = [{ index: snap.metadata.index, term: snap.metadata.term, type: 'normal', data: new Uint8Array() }];
  }

  /**
   * Records a snapshot of the application's state as of `index` (which must be applied, so at
   * most the commit index). Entries are kept until `compact`.
   */
  createSnapshot(index: number, confState: ConfState, data: Uint8Array): Snapshot {
    if (index <= this.snap.metadata.index) throw new SnapshotOutOfDateError(index, this.snap.metadata.index);
    if (index > this.lastIndex()) throw new LogUnavailableError(index, this.lastIndex());
    this.snap = { metadata: { index, term: this.term(index), confState }, data };
    return this.snap;
  }

  /** Discards entries up to and including `index`, which must be covered by the snapshot. */
  compact(index: number): void {
    if (index <= this.offset) throw new LogCompactedError(index, this.firstIndex());
    if (index > this.lastIndex()) throw new LogUnavailableError(index, this.lastIndex());
    if (index > this.snap.metadata.index) {
      throw new InvariantError(`compacting to ${index} would drop entries not in the snapshot at ${this.snap.metadata.index}`);
    }
    const i = index - this.offset;
    const dummy = this.ents[i]!;
    this.ents = [{ index: dummy.index, term: dummy.term, type: 'normal', data: new Uint8Array() }, ...this.ents.slice(i + 1)];
  }

  /**
   * Appends entries that must be contiguous; entries overlapping the stored log replace the
   * stored suffix from their first index on (a conflicting suffix is truncated).
   */
  append(entries: readonly Entry[]): void {
    const first = entries[0];
    if (first === undefined) return;
    const last = first.index + entries.length - 1;
    if (last <= this.offset) return; // all already compacted
    // Skip what is already in the snapshot.
    const skip = Math.max(0, this.offset + 1 - first.index);
    const fresh = entries.slice(skip);
    const from = fresh[0]!.index;
    if (from > this.lastIndex() + 1) {
      throw new LogUnavailableError(from, this.lastIndex());
    }
    // Truncate a conflicting suffix (if any) in place, then append: O(new entries), not O(log).
    if (from <= this.lastIndex()) this.ents.length = from - this.offset;
    for (const e of fresh) this.ents.push(e);
  }
}
