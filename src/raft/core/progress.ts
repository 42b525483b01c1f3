/**
 * The leader's view of one follower: how far its log matches, what to send next, and the flow
 * control state that bounds what is in flight.
 */
import { invariant } from './errors.js';

/**
 * A bounded window of append messages in flight to one follower, each recorded by its last
 * index and payload bytes. Full when `maxCount` messages or `maxBytes` bytes are outstanding.
 */
export class Inflights {
  private readonly indexes: number[] = [];
  private readonly sizes: number[] = [];
  private head = 0;
  private bytes = 0;
  readonly maxCount: number;
  /** 0 means no byte bound. */
  readonly maxBytes: number;

  constructor(maxCount: number, maxBytes: number) {
    this.maxCount = maxCount;
    this.maxBytes = maxBytes;
  }

  get count(): number {
    return this.indexes.length - this.head;
  }

  add(index: number, bytes: number): void {
    invariant(!this.full(), () => `inflights full: ${this.count} messages, ${this.bytes} bytes`);
    const last = this.indexes[this.indexes.length - 1];
    invariant(last === undefined || this.count === 0 || index > last, () => `inflight index ${index} not after ${last}`);
    this.indexes.push(index);
    this.sizes.push(bytes);
    this.bytes += bytes;
  }

  /** Releases every message whose last index is ≤ `index` (acknowledged). */
  freeLE(index: number): void {
    while (this.head < this.indexes.length && this.indexes[this.head]! <= index) {
      this.bytes -= this.sizes[this.head]!;
      this.head++;
    }
    // Keep the arrays from growing without bound.
    if (this.head > 64 && this.head * 2 > this.indexes.length) {
      this.indexes.splice(0, this.head);
      this.sizes.splice(0, this.head);
      this.head = 0;
    }
  }

  /** Releases the oldest message: a heartbeat answer suggests it was lost, so the window may slide. */
  freeFirstOne(): void {
    const first = this.indexes[this.head];
    if (first !== undefined) this.freeLE(first);
  }

  full(): boolean {
    return this.count >= this.maxCount || (this.maxBytes > 0 && this.bytes >= this.maxBytes);
  }

  reset(): void {
    this.indexes.length = 0;
    this.sizes.length = 0;
    this.head = 0;
    this.bytes = 0;
  }
}

/**
 * - `probe`: the leader does not know where the follower's log ends; it sends one append at a
 *   time and waits for the answer (or a heartbeat reply) before the next.
 * - `replicate`: the follower is known to match up to `match`; appends are streamed optimistically
 *   up to the Inflights bound.
 * - `snapshot`: the follower needs entries the leader has compacted; a snapshot is on its way and
 *   nothing else is sent until it is reported.
 */
export type ProgressState = 'probe' | 'replicate' | 'snapshot';

export class Progress {
  /** Highest index known to match the leader's log. Never decreases. */
  match = 0;
  /** Index of the next entry to send. */
  next: number;
  state: ProgressState = 'probe';
  /** In `snapshot` state: the index of the snapshot sent. */
  pendingSnapshot = 0;
  /** Heard from since the last CheckQuorum round. */
  recentActive: boolean;
  /** In `probe` state: an append was sent and no answer has come yet. */
  probeSent = false;
  isLearner: boolean;
  /** Highest commit index sent to the follower (in appends or heartbeats). */
  sentCommit = 0;
  readonly inflights: Inflights;

  constructor(next: number, inflights: Inflights, isLearner: boolean, recentActive: boolean) {
    this.next = next;
    this.inflights = inflights;
    this.isLearner = isLearner;
    this.recentActive = recentActive;
  }

  /** A shallow copy sharing the Inflights (the copy replaces the original or is discarded). */
  clone(): Progress {
    return Object.assign(Object.create(Progress.prototype) as Progress, this);
  }

  private resetState(state: ProgressState): void {
    this.probeSent = false;
    this.pendingSnapshot = 0;
    this.state = state;
    this.inflights.reset();
  }

  becomeProbe(): void {
    // After a snapshot, entries after it are what the follower lacks.
    const afterSnapshot = this.state === 'snapshot' ? this.pendingSnapshot + 1 : 0;
    this.resetState('probe');
    this.next = Math.max(this.match + 1, afterSnapshot);
  }

  becomeReplicate(): void {
    this.resetState('replicate');
    this.next = this.match + 1;
  }

  becomeSnapshot(snapshotIndex: number): void {
    this.resetState('snapshot');
    this.pendingSnapshot = snapshotIndex;
  }

  /**
   * Records an acknowledgement up to `index`; returns whether `match` moved. A stale ack (for an
   * index at or below `match`) changes nothing but still ends a probe round.
   */
  maybeUpdate(index: number): boolean {
    let updated = false;
    if (this.match < index) {
      this.match = index;
      updated = true;
      this.probeSent = false;
    }
    this.next = Math.max(this.next, index + 1);
    return updated;
  }

  /**
   * A rejection of the append whose preceding index was `rejected`, with the follower's hint
   * `matchHint`. Returns false when the rejection is stale (an older message's answer).
   */
  maybeDecrTo(rejected: number, matchHint: number): boolean {
    if (this.state === 'replicate') {
      if (rejected <= this.match) return false;
      this.next = this.match + 1;
      return true;
    }
    if (this.next - 1 !== rejected) return false;
    this.next = Math.max(Math.min(rejected, matchHint + 1), this.match + 1);
    this.probeSent = false;
    return true;
  }

  /** Records that an append with `count` entries (`bytes` of payload) starting at `next` was sent. */
  sentEntries(count: number, bytes: number): void {
    if (this.state === 'replicate') {
      if (count > 0) {
        const last = this.next + count - 1;
        this.next = last + 1;
        this.inflights.add(last, bytes);
      }
    } else if (this.state === 'probe') {
      this.probeSent = true;
    } else {
      invariant(false, () => `append sent to a follower in snapshot state`);
    }
  }

  /** Whether the follower may not know commit index `committed` yet although it could apply it. */
  canBumpCommit(committed: number): boolean {
    return this.sentCommit < committed && this.sentCommit < this.next - 1;
  }

  /** Whether the leader must hold further appends back (heartbeats still go out). */
  isPaused(): boolean {
    switch (this.state) {
      case 'probe':
        return this.probeSent;
      case 'replicate':
        return this.inflights.full();
      case 'snapshot':
        return true;
    }
  }

  describe(): string {
    let s = `${this.state} match=${this.match} next=${this.next}`;
    if (this.isLearner) s += ' learner';
    if (this.state === 'snapshot') s += ` pendingSnapshot=${this.pendingSnapshot}`;
    if (this.state === 'probe' && this.probeSent) s += ' paused';
    if (this.state === 'replicate' && this.inflights.count > 0) s += ` inflight=${this.inflights.count}${this.inflights.full() ? '[full]' : ''}`;
    return s;
  }
}
