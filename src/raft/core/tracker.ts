/**
 * Membership and the leader's per-follower progress, with the quorum arithmetic for majority
 * and joint configurations.
 */
import { invariant } from './errors.js';
import { Inflights, Progress } from './progress.js';
import type { ConfState, NodeId } from './types.js';

export type VoteResult = 'won' | 'lost' | 'pending';

/**
 * The highest index acknowledged by a majority of `voters`, by their `acked` index. An empty
 * configuration returns Infinity so that it never limits a joint configuration.
 */
export function majorityCommitted(voters: ReadonlySet<NodeId>, acked: (id: NodeId) => number): number {
  if (voters.size === 0) return Infinity;
  const idx: number[] = [];
  for (const id of voters) idx.push(acked(id));
  idx.sort((a, b) => b - a);
  return idx[Math.floor(voters.size / 2)]!;
}

/** The outcome of an election among `voters` given the answers in `votes`. An empty set wins. */
export function majorityVote(voters: ReadonlySet<NodeId>, votes: ReadonlyMap<NodeId, boolean>): VoteResult {
  if (voters.size === 0) return 'won';
  let granted = 0;
  let missing = 0;
  for (const id of voters) {
    const v = votes.get(id);
    if (v === undefined) missing++;
    else if (v) granted++;
  }
  const q = Math.floor(voters.size / 2) + 1;
  if (granted >= q) return 'won';
  if (granted + missing >= q) return 'pending';
  return 'lost';
}

export function jointVote(a: VoteResult, b: VoteResult): VoteResult {
  if (a === b) return a;
  if (a === 'lost' || b === 'lost') return 'lost';
  return 'pending';
}

/** A configuration: `incoming` voters and, while joint, the `outgoing` voters too. */
export interface TrackerConfig {
  incoming: Set<NodeId>;
  outgoing: Set<NodeId>;
  learners: Set<NodeId>;
  /** Outgoing voters that become learners when the joint configuration is left. */
  learnersNext: Set<NodeId>;
  autoLeave: boolean;
}

export function cloneConfig(c: TrackerConfig): TrackerConfig {
  return {
    incoming: new Set(c.incoming),
    outgoing: new Set(c.outgoing),
    learners: new Set(c.learners),
    learnersNext: new Set(c.learnersNext),
    autoLeave: c.autoLeave,
  };
}

const sorted = (s: Iterable<NodeId>): NodeId[] => [...s].sort((a, b) => a - b);

export function toConfState(c: TrackerConfig): ConfState {
  return {
    voters: sorted(c.incoming),
    learners: sorted(c.learners),
    votersOutgoing: sorted(c.outgoing),
    learnersNext: sorted(c.learnersNext),
    autoLeave: c.autoLeave,
  };
}

export function isJoint(c: TrackerConfig): boolean {
  return c.outgoing.size > 0;
}

/** Checks the rules a configuration obeys; throws InvariantError when one is broken. */
export function checkConfig(c: TrackerConfig, progress: ReadonlyMap<NodeId, Progress>): void {
  for (const id of c.learners) {
    invariant(!c.incoming.has(id) && !c.outgoing.has(id), () => `learner ${id} is also a voter`);
    invariant(progress.get(id)?.isLearner === true, () => `learner ${id} has no learner progress`);
  }
  for (const id of c.learnersNext) {
    invariant(c.outgoing.has(id), () => `next learner ${id} is not an outgoing voter`);
    invariant(!c.incoming.has(id) && !c.learners.has(id), () => `next learner ${id} is also an incoming voter or learner`);
  }
  for (const id of [...c.incoming, ...c.outgoing]) {
    invariant(progress.get(id)?.isLearner === false, () => `voter ${id} has no voter progress`);
  }
  invariant(c.outgoing.size > 0 || (c.learnersNext.size === 0 && !c.autoLeave), () => 'a non-joint configuration has next learners or auto-leave');
  for (const id of progress.keys()) {
    invariant(c.incoming.has(id) || c.outgoing.has(id) || c.learners.has(id), () => `progress for ${id}, which is not a member`);
  }
}

export class ProgressTracker {
  config: TrackerConfig = {
    incoming: new Set(),
    outgoing: new Set(),
    learners: new Set(),
    learnersNext: new Set(),
    autoLeave: false,
  };
  progress = new Map<NodeId, Progress>();
  votes = new Map<NodeId, boolean>();
  readonly maxInflight: number;
  readonly maxInflightBytes: number;

  constructor(maxInflight: number, maxInflightBytes: number) {
    this.maxInflight = maxInflight;
    this.maxInflightBytes = maxInflightBytes;
  }

  newProgress(next: number, isLearner: boolean): Progress {
    // A new member counts as active so that CheckQuorum does not step the leader down right
    // after a configuration change.
    return new Progress(next, new Inflights(this.maxInflight, this.maxInflightBytes), isLearner, true);
  }

  /** Member ids (voters and learners) in ascending order, for deterministic iteration. */
  ids(): NodeId[] {
    return sorted(this.progress.keys());
  }

  voterIds(): NodeId[] {
    return sorted(new Set([...this.config.incoming, ...this.config.outgoing]));
  }

  isVoter(id: NodeId): boolean {
    return this.config.incoming.has(id) || this.config.outgoing.has(id);
  }

  /**
   * Whether `id` alone is a quorum: the only voter of each half of the configuration, as in
   * (1) or the joint (1) && (1). Such a leader needs nobody's answer to confirm a read.
   */
  isQuorumAlone(id: NodeId): boolean {
    return this.voteResult(new Map([[id, true]])) === 'won';
  }

  /** The highest index a (joint) quorum of voters has in its log. */
  committed(): number {
    const acked = (id: NodeId): number => this.progress.get(id)?.match ?? 0;
    return Math.min(majorityCommitted(this.config.incoming, acked), majorityCommitted(this.config.outgoing, acked));
  }

  voteResult(votes: ReadonlyMap<NodeId, boolean>): VoteResult {
    return jointVote(majorityVote(this.config.incoming, votes), majorityVote(this.config.outgoing, votes));
  }

  /** Whether a quorum of voters was heard from recently (for CheckQuorum). */
  quorumActive(): boolean {
    const votes = new Map<NodeId, boolean>();
    for (const [id, pr] of this.progress) {
      if (!pr.isLearner) votes.set(id, pr.recentActive);
    }
    return this.voteResult(votes) === 'won';
  }

  resetVotes(): void {
    this.votes = new Map();
  }

  /** Records `id`'s answer; the first answer of a node in an election counts. */
  recordVote(id: NodeId, granted: boolean): void {
    if (!this.votes.has(id)) this.votes.set(id, granted);
  }

  tallyVotes(): { granted: number; rejected: number; result: VoteResult } {
    let granted = 0;
    let rejected = 0;
    for (const id of this.voterIds()) {
      const v = this.votes.get(id);
      if (v === true) granted++;
      else if (v === false) rejected++;
    }
    return { granted, rejected, result: this.voteResult(this.votes) };
  }

  confState(): ConfState {
    return toConfState(this.config);
  }
}
