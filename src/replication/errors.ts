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
