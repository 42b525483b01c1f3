/**
 * Typed errors with stable `code` strings. Messages say what was expected and what came.
 */

export type TenureErrorCode =
  | 'STALE_TERM'
  | 'STORE_UNAVAILABLE'
  | 'STORE_DATA'
  | 'INVALID_ARGUMENT'
  | 'NOT_LEADER'
  // A compare-and-set on a stream's head (appendFenced's expectSeq, a state cell's expected version) found it moved:
  | 'VERSION_CONFLICT'
  | 'NO_TOKEN'
  | 'LOCK_TIMEOUT'
  // LeaderElector.transferTo: the named node did not take over within the bound, or another hand-over holds the hint.
  | 'TRANSFER_FAILED'
  | 'DRIVER_MISSING'
  | 'CLOSED'
  // A follower (src/replication/): its apply callback threw; its saved offset disagrees with the log.
  | 'APPLY_FAILED'
  | 'OFFSET_MISMATCH'
  // The leader directs work (src/replication/work*.ts): an item failed on every attempt it was given.
  | 'WORK_FAILED'
  // A broker follower (Model C) met a message it cannot apply: no token, a malformed one, bad payload.
  | 'INVALID_MESSAGE'
  // A fenced message consumer waiting for an earlier message that failed (src/fencing/messages.ts):
  | 'CONSUMER_HALTED'
  // The caller's transaction met a concurrent one (src/fencing/sql-commands.ts applyOnce): roll back, run it again.
  | 'RETRY_TRANSACTION'
  // The Raft core's errors (RaftError and its subclasses, src/raft/core/errors.ts):
  | 'PROPOSAL_DROPPED'
  | 'LOG_COMPACTED'
  | 'LOG_UNAVAILABLE'
  | 'SNAPSHOT_OUT_OF_DATE'
  | 'SNAPSHOT_UNAVAILABLE'
  | 'INVALID_CONF_CHANGE'
  | 'INVALID_CONFIG'
  | 'INVARIANT_VIOLATED'
  // The Raft write-ahead log and snapshot files (src/raft/wal/):
  | 'WAL_CORRUPT'
  | 'DISK_FULL'
  // The Raft transport (src/raft/transport/): a malformed frame or message from the wire.
  | 'FRAME_INVALID';

export class TenureError extends Error {
  readonly code: TenureErrorCode;
  constructor(code: TenureErrorCode, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.code = code;
    this.name = new.target.name;
  }
}

/** A write carried a fencing term lower than the highest the store has accepted for that lease. */
export class StaleTermError extends TenureError {
  readonly lease: string;
  readonly term: number;
  readonly currentTerm: number;
  constructor(lease: string, term: number, currentTerm: number) {
    super('STALE_TERM', `stale fencing token: term ${term} < ${currentTerm} for group ${lease}`);
    this.lease = lease;
    this.term = term;
    this.currentTerm = currentTerm;
  }
}

/**
 * A compare-and-set on a stream's head was refused: the caller expected the stream (a state
 * cell's version) at `expected`, the store found it at `current`. Nothing was written. Not a
 * "maybe": read the current value again and decide anew.
 */
export class VersionConflictError extends TenureError {
  readonly stream: string;
  readonly expected: number;
  readonly current: number;
  constructor(stream: string, expected: number, current: number) {
    super('VERSION_CONFLICT', `version conflict on stream ${JSON.stringify(stream)}: expected version ${expected}, the current version is ${current}`);
    this.stream = stream;
    this.expected = expected;
    this.current = current;
  }
}

/** The store could not be reached or did not answer in time. The operation may or may not have applied. */
export class StoreUnavailableError extends TenureError {
  constructor(message: string, options?: { cause?: unknown }) {
    super('STORE_UNAVAILABLE', message, options);
  }
}

/**
 * The store answered, but with a value tenure cannot use: a term outside the safe-integer range
 * (a row written by hand or by another program), or a term that cannot grow any further. Not a
 * "maybe" (StoreUnavailableError): retrying gives the same answer until the data is repaired.
 */
export class StoreDataError extends TenureError {
  constructor(message: string) {
    super('STORE_DATA', message);
  }
}

/** A caller passed a value outside the allowed range; the message names the field and the range. */
export class InvalidArgumentError extends TenureError {
  readonly field: string;
  constructor(field: string, message: string) {
    super('INVALID_ARGUMENT', `${field}: ${message}`);
    this.field = field;
  }
}

/**
 * The caller's transaction must be rolled back and run again from its start: a concurrent
 * transaction got in its way (a serialization failure, a deadlock or a lock wait timeout, or a
 * row it collides with that its snapshot cannot see). Not the caller's mistake and not a "maybe"
 * about the store: nothing of the transaction may be committed, and the retry can succeed.
 */
export class RetryTransactionError extends TenureError {
  constructor(message: string, options?: { cause?: unknown }) {
    super('RETRY_TRANSACTION', message, options);
  }
}

/** Leader-only work was requested on a node that does not hold leadership. */
export class NotLeaderError extends TenureError {
  constructor(message: string, options?: { cause?: unknown }) {
    super('NOT_LEADER', message, options);
  }
}

/**
 * A fenced helper (an HTTP call, a publish, a SQL command) was called with no fencing token in
 * its context: outside runWhileLeader / lock.using / runFenced, or after that leadership ended.
 * It never writes unfenced: it throws this instead.
 */
export class NoTokenError extends TenureError {
  constructor(message: string) {
    super('NO_TOKEN', message);
  }
}

/** A lock was not acquired within the allowed wait. */
export class LockTimeoutError extends TenureError {
  readonly lease: string;
  readonly waitMs: number;
  constructor(lease: string, waitMs: number) {
    super('LOCK_TIMEOUT', `lock ${lease} not acquired within ${waitMs} ms`);
    this.lease = lease;
    this.waitMs = waitMs;
  }
}

/**
 * `LeaderElector.transferTo(nodeId)` did not hand leadership to the named node: it did not take
 * over within `timeoutMs` (`reason: 'timeout'`: it is unknown, down, or not campaigning for the
 * group; leadership passed on to whoever campaigns, as after a resign), or a hand-over started by
 * an earlier leader is still under way (`reason: 'busy'`: nothing was changed).
 */
export class TransferError extends TenureError {
  readonly group: string;
  readonly target: string;
  readonly reason: 'timeout' | 'busy';
  constructor(group: string, target: string, reason: 'timeout' | 'busy', message: string) {
    super('TRANSFER_FAILED', message);
    this.group = group;
    this.target = target;
    this.reason = reason;
  }
}

/** An optional driver package is not installed. */
export class DriverMissingError extends TenureError {
  constructor(pkg: string, store: string) {
    super('DRIVER_MISSING', `the ${store} store needs the '${pkg}' package: npm install ${pkg}`);
  }
}

/** The store or handle was used after close(). */
export class ClosedError extends TenureError {
  constructor(what: string) {
    super('CLOSED', `${what} is closed`);
  }
}
