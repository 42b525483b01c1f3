/**
 * Why a follower stopped: its own `apply` refused an entry, or the offset it saved does not fit
 * the log it tails. Both are final for the run: retrying gives the same answer.
 */
import { TenureError } from '../core/index.js';

/**
 * The follower's `apply` callback threw on entry `seq`. Its batch was rolled back (the saved
 * offset is before it), so the next run starts with that entry again: it is never skipped.
 * The callback's error is `cause`.
 */
export class ApplyError extends TenureError {
  readonly stream: string;
  readonly seq: number;
  constructor(stream: string, seq: number, cause: unknown) {
    const why = cause instanceof Error ? cause.message : String(cause);
    super('APPLY_FAILED', `apply failed on entry ${seq} of stream ${JSON.stringify(stream)}: ${why}`, { cause });
    this.stream = stream;
    this.seq = seq;
  }
}

/**
 * The follower's saved offset does not fit: it points past the end of the log (a projection made
 * from another store or stream, or a log that was reset), or another follower of the same name
 * moved it while this one was applying (two processes sharing one offset row).
 */
export class OffsetMismatchError extends TenureError {
  readonly follower: string;
  readonly offset: number;
  constructor(follower: string, offset: number, message: string) {
    super('OFFSET_MISMATCH', `follower ${JSON.stringify(follower)}: ${message}`);
    this.follower = follower;
    this.offset = offset;
  }
}

/**
 * A job's item failed on every attempt it was allowed (`maxAttempts`): its handler threw on a
 * worker, or the worker died or stalled with it, each time. The job stops here; the items done so
 * far are in `results`. The last handler message, if any, is in the message and `lastError`.
 */
export class WorkFailedError extends TenureError {
  readonly item: string;
  readonly attempts: number;
  readonly lastError: string | null;
  /** Outputs of the items done before the job stopped, by item id. */
  readonly results: ReadonlyMap<string, unknown>;
  constructor(item: string, attempts: number, lastError: string | null, results: ReadonlyMap<string, unknown>) {
    const why = lastError === null ? 'its worker died or stalled each time' : `last error: ${lastError}`;
    super('WORK_FAILED', `work item ${JSON.stringify(item)} failed on all ${attempts} attempts (${why})`);
    this.item = item;
    this.attempts = attempts;
    this.lastError = lastError;
    this.results = results;
  }
}

/**
 * A broker follower (Model C) met a message it must not apply and must not skip: no fencing
 * token, a malformed one, another group's, or a payload that is not UTF-8 text. The follower
 * stops ON it: everything before it is applied and its offset saved, it is not acknowledged, and
 * the next run meets it again. What was wrong is `reason` (and `cause`, the parser's error).
 */
export class InvalidMessageError extends TenureError {
  readonly partition: string;
  readonly offset: number;
  readonly reason: string;
  constructor(partition: string, offset: number, reason: string, cause?: unknown) {
    super('INVALID_MESSAGE', `message at offset ${offset} of partition ${JSON.stringify(partition)} refused, the follower stops on it: ${reason}`, { cause });
    this.partition = partition;
    this.offset = offset;
    this.reason = reason;
  }
}
