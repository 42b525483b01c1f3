/**
 * Typed errors of the write-ahead log and the snapshot files. Both are TenureErrors with stable
 * codes, so a node can tell "the disk is full, try again later" from "the data on disk is
 * damaged, a person must look".
 */
import { TenureError } from '../../core/errors.js';

/**
 * A WAL segment or snapshot file holds bytes that cannot be a torn last write: a bad record with
 * valid records after it, a bad record in a segment that is not the last, a missing segment or a
 * gap in the log. Opening refuses rather than drop entries that may have been acknowledged as
 * committed. `file` and `offset` (bytes from the start of the file) name the first bad byte.
 */
export class WalCorruptError extends TenureError {
  declare readonly code: 'WAL_CORRUPT';
  readonly file: string;
  readonly offset: number;
  constructor(file: string, offset: number, reason: string) {
    super('WAL_CORRUPT', `write-ahead log corrupt: ${file} at byte offset ${offset}: ${reason}`);
    this.file = file;
    this.offset = offset;
  }
}

/**
 * The disk had no room for a write (ENOSPC, or EDQUOT for a quota). Nothing of the failed save
 * is considered written: its partial bytes were cut off again, so the WAL on disk and in memory
 * is exactly as before the call, and the same save can be retried once space returns.
 */
export class DiskFullError extends TenureError {
  declare readonly code: 'DISK_FULL';
  readonly path: string;
  constructor(path: string, operation: string, options?: { cause?: unknown }) {
    super('DISK_FULL', `disk full: ${operation} ${path} failed for lack of space; nothing of it was kept, retry when space returns`, options);
    this.path = path;
  }
}

/** Whether `err` is a Node system error for lack of space. */
export function isNoSpace(err: unknown): boolean {
  const code = (err as { code?: unknown } | null)?.code;
  return code === 'ENOSPC' || code === 'EDQUOT';
}
