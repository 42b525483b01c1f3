/**
 * Typed errors of the Raft node. They reuse the existing codes so that one `code` vocabulary
 * covers tenure: NOT_LEADER (ask the named leader), PROPOSAL_DROPPED (nothing was written; retry
 * is safe), STORE_UNAVAILABLE (maybe: no answer in time).
 */
import { NotLeaderError, StoreUnavailableError } from '../../core/errors.js';
import { RaftError } from '../core/errors.js';
import type { NodeId } from '../core/types.js';

/** A leader-only request reached a node that is not the leader; `leader` is the known one (0 when none is known). */
export class RaftNotLeaderError extends NotLeaderError {
  readonly nodeId: NodeId;
  readonly leader: NodeId;
  /** The leader's `host:port` when this node knows it. */
  readonly leaderAddress: string | undefined;
  constructor(nodeId: NodeId, leader: NodeId, leaderAddress: string | undefined, what: string) {
    const where = leader === 0 ? 'no leader is known' : `the leader is node ${leader}${leaderAddress ? ` at ${leaderAddress}` : ''}`;
    super(`${what}: node ${nodeId} is not the leader; ${where}`);
    this.nodeId = nodeId;
    this.leader = leader;
    this.leaderAddress = leaderAddress;
  }
}

/**
 * A proposal this node appended as leader was overwritten: another entry committed at its index.
 * It is not in the log and never will be, so retrying is safe.
 */
export class ProposalLostError extends RaftError {
  readonly index: number;
  constructor(index: number, term: number, committedTerm: number) {
    super('PROPOSAL_DROPPED', `proposal lost: entry ${index} of term ${term} was replaced by an entry of term ${committedTerm} (leadership changed before it committed); retry`);
    this.index = index;
  }
}

/** A read index or leadership transfer was not confirmed in time (the leader may be partitioned away). */
export class RaftTimeoutError extends StoreUnavailableError {
  /** `why`: e.g. `within 600 ms`, or `before the leader changed`. */
  constructor(what: string, why: string) {
    super(`${what} not confirmed ${why} (no leader reachable with a quorum?)`);
  }
}
