/**
 * The log as the core sees it: what stable storage holds plus the unstable tail (entries and at
 * most one snapshot) that the application has not persisted yet.
 */
import { invariant, RaftError } from './errors.js';
import { limitSize, type Storage } from './storage.js';
import type { Entry, Snapshot } from './types.js';

/** Entries and a snapshot handed to the application in a Ready but not yet confirmed stable. */
class Unstable {
  snapshot: Snapshot | undefined = undefined;
  entries: Entry[] = [];
  /** Index of entries[0]. */
  offset: number;

  constructor(offset: number) {
    this.offset = offset;
  }

  maybeFirstIndex(): number | undefined {
    return this.snapshot === undefined ? undefined : this.snapshot.metadata.index + 1;
  }

  maybeLastIndex(): number | undefined {
    if (this.entries.length > 0) return this.offset + this.entries.length - 1;
    return this.snapshot?.metadata.index;
  }

  maybeTerm(index: number): number | undefined {
    if (index < this.offset) {
      return this.snapshot !== undefined && this.snapshot.metadata.index === index ? this.snapshot.metadata.term : undefined;
    }
    return this.entries[index - this.offset]?.term;
  }

  stableTo(index: number, term: number): void {
    // Only if the entry is still the one that was persisted: a later append may have replaced it.
    if (index < this.offset || this.maybeTerm(index) !== term) return;
    this.entries = this.entries.slice(index + 1 - this.offset);
    this.offset = index + 1;
  }

  stableSnapTo(index: number): void {
    if (this.snapshot !== undefined && this.snapshot.metadata.index === index) this.snapshot = undefined;
  }

  restore(snap: Snapshot): void {
    this.offset = snap.metadata.index + 1;
    this.entries = [];
    this.snapshot = snap;
  }

  truncateAndAppend(ents: readonly Entry[]): void {
    const from = ents[0]!.index;
    if (from === this.offset + this.entries.length) {
      for (const e of ents) this.entries.push(e); // not push(...ents): a batch may exceed a call's argument limit
    } else if (from <= this.offset) {
      // Replaces everything unstable (and shadows the stored suffix from `from` on).
      this.offset = from;
      this.entries = ents.slice();
    } else {
      this.entries = this.entries.slice(0, from - this.offset).concat(ents);
    }
  }

  slice(lo: number, hi: number): Entry[] {
    invariant(lo >= this.offset && hi <= this.offset + this.entries.length, () => `unstable slice [${lo},${hi}) out of [${this.offset},${this.offset + this.entries.length})`);
    return this.entries.slice(lo - this.offset, hi - this.offset);
  }
}

export class RaftLog {
  readonly storage: Storage;
  readonly unstable: Unstable;
  /** Highest index known committed. Never decreases. */
  committed: number;
  /** Highest index handed to the application to apply and confirmed by advance(). */
  applied: number;
  /** Bound on the payload of committed entries handed out in one Ready (undefined: none). */
  readonly maxApplyBytes: number | undefined;

  constructor(storage: Storage, maxApplyBytes: number | undefined) {
    this.storage = storage;
    this.maxApplyBytes = maxApplyBytes;
    const first = storage.firstIndex();
    const last = storage.lastIndex();
    this.unstable = new Unstable(last + 1);
    this.committed = first - 1;
    this.applied = first - 1;
  }

  firstIndex(): number {
    return this.unstable.maybeFirstIndex() ?? this.storage.firstIndex();
  }

  lastIndex(): number {
    return this.unstable.maybeLastIndex() ?? this.storage.lastIndex();
  }

  /** The term of entry `index`, or undefined when it is compacted or beyond the end. */
  term(index: number): number | undefined {
    const dummy = this.firstIndex() - 1;
    if (index < dummy || index > this.lastIndex()) return undefined;
    const t = this.unstable.maybeTerm(index);
    if (t !== undefined) return t;
    try {
      return this.storage.term(index);
    } catch (err) {
      if (err instanceof RaftError && (err.code === 'LOG_COMPACTED' || err.code === 'LOG_UNAVAILABLE')) return undefined;
      throw err;
    }
  }

  /** Term of the entry at `index`, or 0 when unknown; for places where a missing entry matches nothing. */
  zeroTermOnMissing(index: number): number {
    return this.term(index) ?? 0;
  }

  lastTerm(): number {
    const t = this.term(this.lastIndex());
    invariant(t !== undefined, () => `no term for the last index ${this.lastIndex()}`);
    return t;
  }

  matchTerm(index: number, term: number): boolean {
    return this.term(index) === term;
  }

  /** Raft's up-to-date check (§5.4.1): a later last term wins; equal terms compare length. */
  isUpToDate(lastIndex: number, lastTerm: number): boolean {
    const myTerm = this.lastTerm();
    return lastTerm > myTerm || (lastTerm === myTerm && lastIndex >= this.lastIndex());
  }

  /**
   * Index of the first entry in `entries` whose term differs from the log (a conflict) or that is
   * beyond the log (new), or 0 when all are already present.
   */
  findConflict(entries: readonly Entry[]): number {
    for (const e of entries) {
      if (!this.matchTerm(e.index, e.term)) return e.index;
    }
    return 0;
  }

  /**
   * The largest index ≤ `index` whose term is ≤ `term` (or the first known index). A follower uses
   * it to hint where its log may agree with the leader's; the leader to skip a whole term at once.
   */
  findConflictByTerm(index: number, term: number): number {
    let i = Math.min(index, this.lastIndex());
    for (; i > 0; i--) {
      const t = this.term(i);
      if (t === undefined) return i; // compacted: the snapshot point is committed, so it matches
      if (t <= term) return i;
    }
    return 0;
  }

  /**
   * Follower side of AppendEntries: when the entry at `prevIndex` has `prevTerm`, appends
   * `entries` (truncating a conflicting suffix), advances commit to min(`leaderCommit`, last new
   * index) and returns the last new index; otherwise returns undefined and changes nothing.
   */
  maybeAppend(prevIndex: number, prevTerm: number, leaderCommit: number, entries: readonly Entry[]): number | undefined {
    if (!this.matchTerm(prevIndex, prevTerm)) return undefined;
    const lastNew = prevIndex + entries.length;
    const conflict = this.findConflict(entries);
    if (conflict !== 0) {
      invariant(conflict > this.committed, () => `entry ${conflict} conflicts with the committed prefix up to ${this.committed}`);
      this.append(entries.slice(conflict - prevIndex - 1));
    }
    this.commitTo(Math.min(leaderCommit, lastNew));
    return lastNew;
  }

  /** Appends contiguous entries, truncating any suffix from their first index on. Returns the new last index. */
  append(entries: readonly Entry[]): number {
    const first = entries[0];
    if (first === undefined) return this.lastIndex();
    invariant(first.index - 1 >= this.committed, () => `appending at ${first.index} would overwrite committed entries up to ${this.committed}`);
    invariant(first.index <= this.lastIndex() + 1, () => `appending at ${first.index} leaves a gap after ${this.lastIndex()}`);
    this.unstable.truncateAndAppend(entries);
    return this.lastIndex();
  }

  /** Advances the commit index; a lower value is ignored, so it never decreases. */
  commitTo(index: number): void {
    if (index <= this.committed) return;
    invariant(index <= this.lastIndex(), () => `commit ${index} is beyond the last index ${this.lastIndex()}`);
    this.committed = index;
  }

  /** Leader side: commits `index` only if it is of the leader's own `term` (Figure 8). */
  maybeCommit(index: number, term: number): boolean {
    if (index > this.committed && this.term(index) === term) {
      this.commitTo(index);
      return true;
    }
    return false;
  }

  appliedTo(index: number): void {
    if (index === 0) return;
    invariant(index <= this.committed && index >= this.applied, () => `applied ${index} outside [${this.applied}, ${this.committed}]`);
    this.applied = index;
  }

  /** Entries in [lo, hi) from storage and the unstable tail, cut to `maxBytes` of payload. */
  slice(lo: number, hi: number, maxBytes?: number): Entry[] {
    if (lo >= hi) return [];
    invariant(lo >= this.firstIndex() && hi <= this.lastIndex() + 1, () => `slice [${lo},${hi}) out of [${this.firstIndex()},${this.lastIndex() + 1})`);
    let out: Entry[] = [];
    const uoff = this.unstable.offset;
    if (lo < uoff) {
      out = this.storage.entries(lo, Math.min(hi, uoff), maxBytes);
      // Storage cut the result short: the limit is reached.
      if (out.length < Math.min(hi, uoff) - lo) return out;
    }
    if (hi > uoff) {
      out = out.concat(this.unstable.slice(Math.max(lo, uoff), hi));
    }
    return limitSize(out, maxBytes);
  }

  /** Entries from `index` to the end, cut to `maxBytes`; undefined when `index` is compacted. */
  entriesFrom(index: number, maxBytes?: number): Entry[] | undefined {
    if (index < this.firstIndex()) return undefined;
    if (index > this.lastIndex()) return [];
    return this.slice(index, this.lastIndex() + 1, maxBytes);
  }

  /** All entries, for tests and debugging. */
  allEntries(): Entry[] {
    return this.slice(this.firstIndex(), this.lastIndex() + 1);
  }

  unstableEntries(): Entry[] {
    return this.unstable.entries.slice();
  }

  hasNextCommittedEntries(): boolean {
    const lo = Math.max(this.applied + 1, this.firstIndex());
    return this.committed >= lo && this.unstable.snapshot === undefined;
  }

  /** Committed entries not yet applied (within `maxApplyBytes`). */
  nextCommittedEntries(): Entry[] {
    if (!this.hasNextCommittedEntries()) return [];
    const lo = Math.max(this.applied + 1, this.firstIndex());
    return this.slice(lo, this.committed + 1, this.maxApplyBytes);
  }

  /** The snapshot to send to a follower that is behind the first index. */
  snapshot(): Snapshot {
    return this.unstable.snapshot ?? this.storage.snapshot();
  }

  /** Replaces the log with a snapshot from the leader; the commit index moves to its index. */
  restore(snap: Snapshot): void {
    invariant(snap.metadata.index > this.committed, () => `restoring snapshot ${snap.metadata.index} at or below commit ${this.committed}`);
    this.committed = snap.metadata.index;
    this.unstable.restore(snap);
  }

  stableTo(index: number, term: number): void {
    this.unstable.stableTo(index, term);
  }

  stableSnapTo(index: number): void {
    this.unstable.stableSnapTo(index);
  }
}
