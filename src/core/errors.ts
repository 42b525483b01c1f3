/**
 * Typed errors with stable `code` strings. Messages say what was expected and what came.
 */

export type TenureErrorCode =
  | 'STALE_TERM'
  | 'STORE_UNAVAILABLE'
  | 'STORE_DATA'
  | 'INVALID_ARGUMENT'
  | 'NOT_LEADER'
  | 'NO_TOKEN'
  | 'LOCK_TIMEOUT'
  | 'DRIVER_MISSING'
  | 'CLOSED'
  // A fenced message consumer waiting for an earlier message that failed (src/fencing/messages.ts):
  | 'CONSUMER_HALTED'
  // The Raft core's errors (RaftError and its subclasses, src/raft/core/errors.ts):
  | 'PROPOSAL_DROPPED'
  | 'LOG_COMPACTED'
  | 'LOG_UNAVAILABLE'
  | 'SNAPSHOT_OUT_OF_DATE'
  | 'SNAPSHOT_UNAVAILABLE'
  | 'INVALID_CONF_CHANGE'
  | 'INVALID_CONFIG'
  | 'INVARIANT_VIOLATED';

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

/** Leader-only work was requested on a node that does not hold leadership. */
export class NotLeaderError extends TenureError {
  constructor(message: string) {
    super('NOT_LEADER', message);
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
