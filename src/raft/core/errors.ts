/**
 * Typed errors of the Raft core, each with a stable `code`. RaftError is a TenureError, so one
 * `instanceof TenureError` check (and one `code` vocabulary) covers every error tenure throws.
 */
import { TenureError } from '../../core/errors.js';
import type { NodeId, Role } from './types.js';

export type RaftErrorCode =
  | 'PROPOSAL_DROPPED'
  | 'LOG_COMPACTED'
  | 'LOG_UNAVAILABLE'
  | 'SNAPSHOT_OUT_OF_DATE'
  | 'SNAPSHOT_UNAVAILABLE'
  | 'INVALID_CONF_CHANGE'
  | 'INVALID_CONFIG'
  | 'INVARIANT_VIOLATED';

export class RaftError extends TenureError {
  declare readonly code: RaftErrorCode;
  constructor(code: RaftErrorCode, message: string) {
    super(code, message);
  }
}

/** Why a proposal (or read, or transfer request) was not taken. */
export type DropReason =
  | 'no-leader'
  | 'forwarding-disabled'
  | 'transferring-leadership'
  | 'not-a-member'
  | 'uncommitted-size-limit'
  | 'read-index-queue-full'
  | 'conf-change-pending'
  | 'conf-change-not-joint'
  | 'conf-change-already-joint'
  | 'conf-change-invalid';

const reasonText: Record<DropReason, string> = {
  'no-leader': 'no leader is known',
  'forwarding-disabled': 'this node is not the leader and proposal forwarding is disabled',
  'transferring-leadership': 'leadership is being transferred',
  'not-a-member': 'this node is not a member of its configuration',
  'uncommitted-size-limit': 'the uncommitted log is at its size limit',
  'read-index-queue-full': "too many reads already wait for the new leader's first commit",
  'conf-change-pending': 'an earlier conf change is not applied yet',
  'conf-change-not-joint': 'an empty conf change leaves a joint configuration, but the configuration is not joint',
  'conf-change-already-joint': 'the configuration is already joint; leave it first',
  'conf-change-invalid': 'the conf change cannot be applied to the current configuration',
};

/**
 * A proposal (or a read-index or transfer request) was not taken. Nothing was written to any
 * log; retrying is safe, for example once a leader is known.
 */
export class ProposalDroppedError extends RaftError {
  readonly reason: DropReason;
  readonly nodeId: NodeId;
  readonly term: number;
  readonly role: Role;
  /** What was dropped, for the message: `proposal`, `read-index request`, `transfer request`. */
  constructor(reason: DropReason, nodeId: NodeId, term: number, role: Role, what = 'proposal') {
    super('PROPOSAL_DROPPED', `${what} dropped: ${reasonText[reason]} (node ${nodeId} is ${role} at term ${term})`);
    this.reason = reason;
    this.nodeId = nodeId;
    this.term = term;
    this.role = role;
  }
}

/** The requested index is below the first index the storage still holds. */
export class LogCompactedError extends RaftError {
  constructor(index: number, firstIndex: number) {
    super('LOG_COMPACTED', `log index ${index} is compacted: the first available index is ${firstIndex}`);
  }
}

/** The requested index is beyond the last index the storage holds. */
export class LogUnavailableError extends RaftError {
  constructor(index: number, lastIndex: number) {
    super('LOG_UNAVAILABLE', `log index ${index} is unavailable: the last index is ${lastIndex}`);
  }
}

/** A snapshot older than the one the storage holds was offered. */
export class SnapshotOutOfDateError extends RaftError {
  constructor(index: number, current: number) {
    super('SNAPSHOT_OUT_OF_DATE', `snapshot at index ${index} is older than the stored one at ${current}`);
  }
}

/** The storage cannot produce a snapshot right now; the leader retries later. */
export class SnapshotUnavailableError extends RaftError {
  constructor(message: string) {
    super('SNAPSHOT_UNAVAILABLE', message);
  }
}

/** A conf change that cannot be applied to the current configuration. */
export class InvalidConfChangeError extends RaftError {
  constructor(message: string) {
    super('INVALID_CONF_CHANGE', `invalid conf change: ${message}`);
  }
}

/** A RaftConfig field outside its allowed range; the message names the field. */
export class InvalidRaftConfigError extends RaftError {
  readonly field: string;
  constructor(field: string, message: string) {
    super('INVALID_CONFIG', `${field}: ${message}`);
    this.field = field;
  }
}

/** A safety invariant did not hold. This is a bug (or corrupted storage); the node must stop. */
export class InvariantError extends RaftError {
  constructor(message: string) {
    super('INVARIANT_VIOLATED', `raft invariant violated: ${message}`);
  }
}

/** Throws InvariantError unless `condition` holds. */
export function invariant(condition: boolean, message: () => string): asserts condition {
  if (!condition) throw new InvariantError(message());
}
