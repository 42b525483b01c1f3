/**
 * The application's handle on the Raft core: drive it with `tick`, `step` and the request
 * methods; collect work with `hasReady`/`ready`; report the work done with `advance`.
 *
 * Everything is synchronous and deterministic: given the same storage, Random seed and sequence
 * of calls, a RawNode produces the same Ready batches. Errors thrown are typed (see errors.ts).
 */
import { InvariantError, ProposalDroppedError, RaftError, type DropReason } from './errors.js';
import { Raft, type RaftConfig } from './raft.js';
import type { ProgressState } from './progress.js';
import {
  encodeConfChange,
  isLocalMessage,
  message,
  NONE,
  type ConfChange,
  type ConfState,
  type HardState,
  type Message,
  type NodeId,
  type Ready,
  type Role,
  type SoftState,
} from './types.js';

export interface ProgressStatus {
  readonly match: number;
  readonly next: number;
  readonly state: ProgressState;
  readonly isLearner: boolean;
  readonly recentActive: boolean;
}

export interface Status {
  readonly id: NodeId;
  readonly term: number;
  readonly vote: NodeId;
  readonly commit: number;
  readonly applied: number;
  readonly lead: NodeId;
  readonly role: Role;
  readonly leadTransferee: NodeId;
  readonly config: ConfState;
  /** Per member, on the leader only. */
  readonly progress: ReadonlyMap<NodeId, ProgressStatus>;
}

const sameHard = (a: HardState, b: HardState): boolean => a.term === b.term && a.vote === b.vote && a.commit === b.commit;
const sameSoft = (a: SoftState, b: SoftState): boolean => a.lead === b.lead && a.role === b.role;

export class RawNode {
  private readonly raft: Raft;
  private prevSoft: SoftState;
  private prevHard: HardState;
  /** The Ready handed out and not yet advanced. */
  private pending: Ready | undefined = undefined;

  /**
   * Starts (or restarts) a node from what `config.storage` holds. A brand-new group is bootstrapped
   * by giving every initial member a storage whose snapshot ConfState lists the voters, and that
   * snapshot must be at index ≥ 1 (say index 1, term 1, with hard state commit 1). A node added
   * later starts empty; it must learn the initial membership from a snapshot. With a bootstrap
   * snapshot at index 0 the leader would send it the log from index 1 instead, it would apply the
   * conf change that adds it to an empty configuration, believe itself the only voter and elect
   * itself alone (found by the simulator in test/sim/raft).
   */
  constructor(config: RaftConfig) {
    this.raft = new Raft(config);
    this.prevSoft = this.raft.softState();
    this.prevHard = this.raft.hardState();
  }

  get id(): NodeId {
    return this.raft.id;
  }

  /** Advances logical time by one tick (election and heartbeat timeouts are counted in ticks). */
  tick(): void {
    this.raft.tick();
  }

  /** Starts an election now (with a pre-vote round when PreVote is on). Ignored on a leader or learner. */
  campaign(): void {
    this.raft.step(message({ type: 'hup', from: this.id }));
  }

  /**
   * Proposes `data` for the log. On a follower it is forwarded to the known leader. Throws
   * ProposalDroppedError when it cannot be taken (no leader known, transfer in progress,
   * uncommitted size bound, this node no longer in its configuration); a proposal that was
   * taken may still be lost if leadership changes before it commits, so the application
   * matches committed entries to its requests.
   */
  propose(data: Uint8Array): void {
    this.throwIfDropped(this.raft.step(message({ type: 'prop', from: this.id, entries: [{ term: 0, index: 0, type: 'normal', data }] })));
  }

  /**
   * Proposes a membership change. Only one may be pending at a time; the configuration changes
   * when the entry is applied and passed to `applyConfChange`. Throws ProposalDroppedError.
   */
  proposeConfChange(cc: ConfChange): void {
    const data = encodeConfChange(cc);
    this.throwIfDropped(this.raft.step(message({ type: 'prop', from: this.id, entries: [{ term: 0, index: 0, type: 'confChange', data }] })));
  }

  /**
   * Asks for a linearizable read point. When confirmed, a ReadState with `context` (which should
   * be unique per request) appears in a Ready; reads are served once its index is applied.
   * A request that loses its leader on the way is never answered: retry after a timeout.
   * Throws ProposalDroppedError when no leader is known, when this node is no longer in its
   * configuration (it gets no more entries, so could never serve the read), or when this node
   * is a new leader whose queue of reads waiting for its first commit is full
   * (`maxPendingReadIndex`).
   */
  readIndex(context: string): void {
    this.throwIfDropped(this.raft.step(message({ type: 'readIndex', from: NONE, context })), 'read-index request');
  }

  /**
   * Asks the leader to hand leadership to `to`: the leader stops taking proposals, catches `to`
   * up and sends it TimeoutNow; abandoned after one election timeout. Throws ProposalDroppedError
   * when no leader is known.
   */
  transferLeadership(to: NodeId): void {
    this.throwIfDropped(this.raft.step(message({ type: 'transferLeader', from: NONE, transferee: to })), 'transfer request');
  }

  /**
   * Hands a message from another node to the core. Messages from unknown senders are ignored by
   * the leader's bookkeeping; local-only message types are refused.
   */
  step(m: Message): void {
    if (isLocalMessage(m.type)) throw new RaftError('INVARIANT_VIOLATED', `message type ${m.type} is local and cannot be stepped`);
    if (m.to !== this.id) throw new RaftError('INVARIANT_VIOLATED', `message for ${m.to} stepped into node ${this.id}`);
    this.raft.step(m);
  }

  /** Applies a committed conf change entry; returns the membership to store with snapshots. */
  applyConfChange(cc: ConfChange): ConfState {
    return this.raft.applyConfChange(cc);
  }

  /** Tells the leader that a message to `id` could not be delivered (it slows replication down). */
  reportUnreachable(id: NodeId): void {
    this.raft.step(message({ type: 'unreachable', from: id }));
  }

  /** Tells the leader whether the snapshot sent to `id` arrived. */
  reportSnapshot(id: NodeId, status: 'finish' | 'failure'): void {
    this.raft.step(message({ type: 'snapStatus', from: id, reject: status === 'failure' }));
  }

  /** Whether `ready()` has work. False while a Ready is handed out and not yet advanced. */
  hasReady(): boolean {
    if (this.pending !== undefined) return false;
    const r = this.raft;
    return (
      !sameSoft(r.softState(), this.prevSoft) ||
      !sameHard(r.hardState(), this.prevHard) ||
      r.log.unstable.snapshot !== undefined ||
      r.log.unstable.entries.length > 0 ||
      r.msgs.length > 0 ||
      r.readStates.length > 0 ||
      r.log.hasNextCommittedEntries()
    );
  }

  /** Takes the next batch of work; see Ready for the order in which to do it. Call `advance()` after. */
  ready(): Ready {
    if (this.pending !== undefined) throw new InvariantError('ready() called again before advance()');
    const r = this.raft;
    const soft = r.softState();
    const hard = r.hardState();
    const rd: Ready = {
      softState: sameSoft(soft, this.prevSoft) ? undefined : soft,
      hardState: sameHard(hard, this.prevHard) ? undefined : hard,
      entries: r.log.unstableEntries(),
      snapshot: r.log.unstable.snapshot,
      committedEntries: r.log.nextCommittedEntries(),
      messages: r.msgs,
      readStates: r.readStates,
    };
    r.msgs = [];
    r.readStates = [];
    this.prevSoft = soft;
    this.prevHard = hard;
    this.pending = rd;
    return rd;
  }

  /** Reports that the last Ready was persisted, sent and applied as its contract says. */
  advance(): void {
    const rd = this.pending;
    if (rd === undefined) throw new InvariantError('advance() called without a Ready');
    this.pending = undefined;
    const r = this.raft;
    if (rd.snapshot !== undefined) {
      r.log.stableSnapTo(rd.snapshot.metadata.index);
      if (rd.snapshot.metadata.index > r.log.applied) r.log.appliedTo(rd.snapshot.metadata.index);
    }
    const lastEntry = rd.entries[rd.entries.length - 1];
    if (lastEntry !== undefined) r.log.stableTo(lastEntry.index, lastEntry.term);
    const lastCommitted = rd.committedEntries[rd.committedEntries.length - 1];
    if (lastCommitted !== undefined) {
      r.reduceUncommittedSize(rd.committedEntries);
      r.appliedTo(lastCommitted.index);
    }
  }

  status(): Status {
    const r = this.raft;
    const progress = new Map<NodeId, ProgressStatus>();
    if (r.role === 'leader') {
      for (const id of r.tracker.ids()) {
        const pr = r.tracker.progress.get(id)!;
        progress.set(id, { match: pr.match, next: pr.next, state: pr.state, isLearner: pr.isLearner, recentActive: pr.recentActive });
      }
    }
    return {
      id: r.id,
      term: r.term,
      vote: r.vote,
      commit: r.log.committed,
      applied: r.log.applied,
      lead: r.lead,
      role: r.role,
      leadTransferee: r.leadTransferee,
      config: r.tracker.confState(),
      progress,
    };
  }

  /** The internal state machine, for tests and debugging output only. */
  get internal(): Raft {
    return this.raft;
  }

  private throwIfDropped(reason: DropReason | undefined, what?: string): void {
    if (reason !== undefined) throw new ProposalDroppedError(reason, this.raft.id, this.raft.term, this.raft.role, what);
  }
}
