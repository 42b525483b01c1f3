/**
 * The write-ahead log: what a Ready hands the application to persist (entries, hard state, a
 * snapshot's marker) appended to segment files `<seq>-<firstIndex>.wal` (16 hex digits each) in
 * one directory. A save is one write and, when `mustSync`, one fdatasync, however many entries
 * it holds (group commit); a segment past `segmentBytes` is closed and a new one started before
 * the next save. Each new segment begins with a copy of the current hard state and snapshot
 * marker, so segments wholly behind a snapshot can be deleted without losing them.
 *
 * Opening replays every segment. A damaged record at the end of the last segment is a write
 * that never completed (its save never returned, so nothing depending on it was sent): it is cut
 * off and logged. Any other damage (a bad record with a valid one after it, or in a segment that
 * is not the last, a missing segment, a gap in the indexes) throws WalCorruptError naming the
 * file and byte offset, because the bytes lost may hold acknowledged entries.
 */
import { ClosedError, InvalidArgumentError } from '../../core/errors.js';
import type { Entry, HardState } from '../core/types.js';
import { decodeBody, encodeRecords, HEADER_BYTES, RecordType, recordsSize, type SnapshotMarker } from './codec.js';
import { crc32c } from './crc32c.js';
import { DiskFullError, isNoSpace, WalCorruptError } from './errors.js';
import { nodeFs, syncDir, writeFully, type WalFs } from './fs.js';
import { join } from 'node:path';

export const DEFAULT_SEGMENT_BYTES = 64 * 1024 * 1024;
export const DEFAULT_MAX_RECORD_BYTES = 64 * 1024 * 1024;
const SCRATCH_START_BYTES = 64 * 1024;
const SCRATCH_KEEP_BYTES = 8 * 1024 * 1024;

export interface WalOptions {
  /** Directory of the segment files; created if missing. */
  readonly dir: string;
  /** A segment is closed once it holds at least this many bytes (default 64 MiB). */
  readonly segmentBytes?: number;
  /**
   * The largest record accepted, bytes (default 64 MiB). A save with a larger entry is refused;
   * on replay a record claiming more is damage, never an allocation of that size.
   */
  readonly maxRecordBytes?: number;
  /** File-system calls (default node:fs); tests inject failures and count syncs through it. */
  readonly fs?: WalFs;
  /** One line per notable event (torn tail cut, segment released). Default: none. */
  readonly log?: (line: string) => void;
}

/** What replaying the WAL found. */
export interface WalReplay {
  /** The last hard state saved (all zero when none). */
  readonly hardState: HardState;
  /** The live log in index order, contiguous; may start before the snapshot's index. */
  readonly entries: Entry[];
  /** Every snapshot marker found, oldest first. */
  readonly markers: SnapshotMarker[];
  /** Index below which the replayed log may have been released (entries start after it). */
  readonly floor: number;
}

interface Segment {
  readonly seq: number;
  readonly firstIndex: number;
  readonly name: string;
}

const SEGMENT_NAME = /^([0-9a-f]{16})-([0-9a-f]{16})\.wal$/;
const hex16 = (n: number): string => n.toString(16).padStart(16, '0');
const segmentName = (seq: number, firstIndex: number): string => `${hex16(seq)}-${hex16(firstIndex)}.wal`;

/**
 * etcd's MustSync rule: a Ready needs an fdatasync when it carries entries, or when the term or
 * vote changed (a vote given must survive a crash, or the node could vote twice in a term). A
 * commit index that moved alone need not: it is recovered from the leader after a crash.
 */
export function mustSync(hardState: HardState | undefined, previous: HardState, entryCount: number): boolean {
  if (entryCount > 0) return true;
  if (hardState === undefined) return false;
  return hardState.term !== previous.term || hardState.vote !== previous.vote;
}

function positiveInt(field: string, value: number | undefined, fallback: number): number {
  if (value === undefined) return fallback;
  if (!Number.isSafeInteger(value) || value < 1) throw new InvalidArgumentError(field, `expected a positive integer, got ${value}`);
  return value;
}

export class Wal {
  readonly dir: string;
  private readonly fs: WalFs;
  private readonly log: (line: string) => void;
  private readonly segmentBytes: number;
  private readonly maxRecordBytes: number;
  private segments: Segment[];
  private fd: number;
  /** Bytes in the open (last) segment: where the next record goes. */
  private size: number;
  private hardState: HardState;
  private marker: SnapshotMarker | undefined;
  /** Index of the last entry written (or of a reset snapshot), to name the next segment. */
  private lastIndex: number;
  /** Reused encode buffer: every save is encoded and written before the next one starts. */
  private scratch: Buffer = Buffer.allocUnsafe(SCRATCH_START_BYTES);
  private closed = false;

  private constructor(options: WalOptions, segments: Segment[], fd: number, size: number, replay: WalReplay, lastIndex: number) {
    this.dir = options.dir;
    this.fs = options.fs ?? nodeFs;
    this.log = options.log ?? (() => {});
    this.segmentBytes = positiveInt('segmentBytes', options.segmentBytes, DEFAULT_SEGMENT_BYTES);
    this.maxRecordBytes = positiveInt('maxRecordBytes', options.maxRecordBytes, DEFAULT_MAX_RECORD_BYTES);
    this.segments = segments;
    this.fd = fd;
    this.size = size;
    this.hardState = replay.hardState;
    this.marker = replay.markers[replay.markers.length - 1];
    this.lastIndex = lastIndex;
  }

  /**
   * Opens (creating if needed) the WAL in `options.dir` and replays it. Throws WalCorruptError
   * for damage that is not a torn last write, InvalidArgumentError for bad options, and
   * DiskFullError when a new directory's first segment cannot be created.
   */
  static open(options: WalOptions): { wal: Wal; replay: WalReplay } {
    const f = options.fs ?? nodeFs;
    const log = options.log ?? (() => {});
    const maxRecordBytes = positiveInt('maxRecordBytes', options.maxRecordBytes, DEFAULT_MAX_RECORD_BYTES);
    positiveInt('segmentBytes', options.segmentBytes, DEFAULT_SEGMENT_BYTES);
    const dir = options.dir;
    f.mkdirSync(dir);
    const segments: Segment[] = [];
    for (const name of f.readdirSync(dir)) {
      // A segment being prepared when the process died: it was never renamed into place, so it holds nothing saved.
      if (name.endsWith('.wal.tmp')) {
        f.unlinkSync(join(dir, name));
        log(`wal: removed unfinished segment ${name}`);
        continue;
      }
      const m = SEGMENT_NAME.exec(name);
      if (m !== null) segments.push({ seq: parseInt(m[1]!, 16), firstIndex: parseInt(m[2]!, 16), name });
    }
    segments.sort((a, b) => a.seq - b.seq);
    for (let i = 1; i < segments.length; i++) {
      if (segments[i]!.seq !== segments[i - 1]!.seq + 1) {
        throw new WalCorruptError(join(dir, segments[i]!.name), 0, `segment ${segments[i - 1]!.seq + 1} is missing before it`);
      }
    }

    if (segments.length === 0) {
      const first = { seq: 0, firstIndex: 1, name: segmentName(0, 1) };
      createSegment(f, dir, first.name, undefined);
      segments.push(first);
    }

    const replay = new Replayer(segments[0]!.firstIndex - 1);
    let size = 0;
    for (let i = 0; i < segments.length; i++) {
      const seg = segments[i]!;
      const path = join(dir, seg.name);
      const buf = f.readFileSync(path);
      const last = i === segments.length - 1;
      const end = scanSegment(buf, path, maxRecordBytes, last, replay);
      if (end < buf.length) {
        // Only the last segment gets here (scanSegment throws otherwise): a save that never completed.
        log(`wal: ${path}: cut a torn write of ${buf.length - end} bytes at byte offset ${end} (a save interrupted by a crash; it was never acknowledged)`);
        const fd = f.openSync(path, 'r+');
        try {
          f.ftruncateSync(fd, end);
          f.fsyncSync(fd);
        } finally {
          f.closeSync(fd);
        }
      }
      if (last) size = end;
    }
    const lastSeg = segments[segments.length - 1]!;
    const fd = f.openSync(join(dir, lastSeg.name), 'r+');
    const result = replay.result();
    const lastEntry = result.entries[result.entries.length - 1];
    const wal = new Wal(options, segments, fd, size, result, lastEntry?.index ?? replay.floor);
    return { wal, replay: result };
  }

  /**
   * Appends `entries` (contiguous; an index at or below the last one replaces the log from there
   * on) and `hardState` (if given), and, with `marker`, a snapshot's marker before them. One
   * write, then one fdatasync when `mustSync` (see `mustSync()`); returns once that is done.
   * Throws DiskFullError when the disk has no room (nothing of this save is kept; retry later),
   * InvalidArgumentError for an entry larger than `maxRecordBytes`, ClosedError after close().
   * Any other I/O error (EIO) is rethrown as it came, after the failed bytes were cut off: the
   * node must stop, since after a failed fdatasync the kernel may have dropped the pages.
   */
  save(hardState: HardState | undefined, entries: readonly Entry[], mustSync: boolean, marker?: SnapshotMarker): void {
    if (this.closed) throw new ClosedError('the write-ahead log');
    if (hardState === undefined && entries.length === 0 && marker === undefined) return;
    for (const e of entries) {
      if (e.data.byteLength + 32 > this.maxRecordBytes) {
        throw new InvalidArgumentError('entry', `entry ${e.index} has ${e.data.byteLength} bytes; the largest record is ${this.maxRecordBytes} bytes`);
      }
    }
    if (this.size >= this.segmentBytes) this.cut();
    const length = recordsSize(hardState, entries, marker);
    if (this.scratch.length < length) this.scratch = Buffer.allocUnsafe(Math.max(length, this.scratch.length * 2));
    encodeRecords(this.scratch, hardState, entries, marker);
    try {
      writeFully(this.fs, this.fd, this.scratch, length, this.size);
      if (mustSync) this.fs.fdatasyncSync(this.fd);
    } catch (err) {
      const path = join(this.dir, this.segments[this.segments.length - 1]!.name);
      this.undo(path);
      if (isNoSpace(err)) throw new DiskFullError(path, 'writing', { cause: err });
      throw err;
    }
    this.size += length;
    // A rare huge save should not pin its buffer for the life of the node.
    if (this.scratch.length > SCRATCH_KEEP_BYTES) this.scratch = Buffer.allocUnsafe(SCRATCH_START_BYTES);
    if (hardState !== undefined) this.hardState = hardState;
    if (marker !== undefined) {
      this.marker = marker;
      if (marker.reset) this.lastIndex = marker.metadata.index;
    }
    const last = entries[entries.length - 1];
    if (last !== undefined) this.lastIndex = last.index;
  }

  /** Fdatasyncs what was saved without `mustSync`. */
  sync(): void {
    this.fs.fdatasyncSync(this.fd);
  }

  /**
   * Deletes the segments whose entries are all at or below `index` (which a durable snapshot
   * covers); the last segment is always kept. Returns how many were deleted.
   */
  releaseTo(index: number): number {
    let n = 0;
    while (n + 1 < this.segments.length && this.segments[n + 1]!.firstIndex - 1 <= index) n++;
    if (n === 0) return 0;
    // Oldest first: a crash in between leaves a shorter but still contiguous run of segments.
    for (const seg of this.segments.slice(0, n)) this.fs.unlinkSync(join(this.dir, seg.name));
    syncDir(this.fs, this.dir);
    this.log(`wal: released ${n} segment(s) behind index ${index}`);
    this.segments = this.segments.slice(n);
    return n;
  }

  /** Names of the segment files, oldest first. */
  segmentNames(): string[] {
    return this.segments.map((s) => s.name);
  }

  close(): void {
    if (this.closed) return;
    this.closed = true;
    this.fs.closeSync(this.fd);
  }

  /** Cuts off whatever a failed save left at the end of the open segment. */
  private undo(path: string): void {
    try {
      this.fs.ftruncateSync(this.fd, this.size);
    } catch (err) {
      // If even the truncate fails the file may end in a partial record; replay treats it as a torn tail.
      this.log(`wal: ${path}: could not cut a failed write back to ${this.size} bytes: ${(err as Error).message}`);
    }
  }

  /** Closes the full segment and starts the next, headed by the current hard state and marker. */
  private cut(): void {
    const prev = this.segments[this.segments.length - 1]!;
    const next = { seq: prev.seq + 1, firstIndex: this.lastIndex + 1, name: segmentName(prev.seq + 1, this.lastIndex + 1) };
    const head = this.marker === undefined ? undefined : { metadata: this.marker.metadata, reset: false };
    createSegment(this.fs, this.dir, next.name, { hardState: this.hardState, marker: head });
    // The previous segment was fdatasynced by the save that filled it, unless that save was not mustSync.
    this.fs.fdatasyncSync(this.fd);
    this.fs.closeSync(this.fd);
    this.fd = this.fs.openSync(join(this.dir, next.name), 'r+');
    this.segments.push(next);
    this.size = recordsSize(this.hardState, [], head);
  }
}

/**
 * Creates segment `name` with its head records: written under a temporary name, fdatasynced,
 * renamed into place and the directory fsynced, so a crash never leaves a half-made segment
 * that replay would mistake for damage. DiskFullError when there is no room (nothing is left behind).
 */
function createSegment(f: WalFs, dir: string, name: string, head: { hardState: HardState; marker: SnapshotMarker | undefined } | undefined): void {
  const tmp = join(dir, `${name}.tmp`);
  let fd: number | undefined;
  try {
    fd = f.openSync(tmp, 'wx');
    if (head !== undefined) {
      const length = recordsSize(head.hardState, [], head.marker);
      const buf = Buffer.allocUnsafe(length);
      encodeRecords(buf, head.hardState, [], head.marker);
      writeFully(f, fd, buf, length, 0);
    }
    f.fdatasyncSync(fd);
    f.closeSync(fd);
    fd = undefined;
    f.renameSync(tmp, join(dir, name));
    syncDir(f, dir);
  } catch (err) {
    if (fd !== undefined) f.closeSync(fd);
    try {
      f.unlinkSync(tmp);
    } catch {
      // already gone (or renamed): nothing to clean
    }
    if (isNoSpace(err)) throw new DiskFullError(join(dir, name), 'creating segment', { cause: err });
    throw err;
  }
}

/** Applies records in order to an in-memory log: truncation on rewrite, reset on a leader's snapshot. */
class Replayer {
  hardState: HardState = { term: 0, vote: 0, commit: 0 };
  entries: Entry[] = [];
  markers: SnapshotMarker[] = [];
  constructor(public floor: number) {}

  /** Adds one entry; returns an error text for a gap. */
  entry(e: Entry): string | undefined {
    const ents = this.entries;
    const n = ents.length;
    if (n === 0) {
      if (e.index > this.floor + 1) return `entry ${e.index} follows index ${this.floor}: entries are missing`;
      ents.push(e);
      return undefined;
    }
    const start = ents[0]!.index;
    const last = ents[n - 1]!.index;
    if (e.index > last + 1) return `entry ${e.index} follows entry ${last}: entries are missing`;
    if (e.index < start) this.entries = [e];
    else {
      ents.length = e.index - start;
      ents.push(e);
    }
    return undefined;
  }

  snapshot(m: SnapshotMarker): void {
    this.markers.push(m);
    if (m.reset) {
      this.entries = [];
      this.floor = m.metadata.index;
    } else if (this.entries.length === 0) this.floor = Math.max(this.floor, m.metadata.index);
  }

  result(): WalReplay {
    return { hardState: this.hardState, entries: this.entries, markers: this.markers, floor: this.floor };
  }
}

/**
 * Why the record at `pos` cannot be read, or undefined when it is whole: its header, its
 * length (against the limit and the end of the file) and its CRC.
 */
function checkRecord(buf: Buffer, pos: number, maxRecordBytes: number): string | undefined {
  if (buf.length - pos < HEADER_BYTES) return `${buf.length - pos} bytes left, less than a record header`;
  const length = buf.readUInt32LE(pos);
  if (length === 0) return 'record of length 0';
  if (length > maxRecordBytes) return `record claims ${length} bytes, more than the limit of ${maxRecordBytes}`;
  if (pos + HEADER_BYTES + length > buf.length) return `record claims ${length} bytes but the file ends ${buf.length - pos - HEADER_BYTES} bytes after its header`;
  if (crc32c(buf, 0, pos + HEADER_BYTES, pos + HEADER_BYTES + length) !== buf.readUInt32LE(pos + 4)) return 'checksum mismatch';
  return undefined;
}

/** Bytes of checksum work a search for a whole record after a bad one may do before it gives up. */
const SEARCH_BUDGET_BYTES = 256 * 1024 * 1024;

/**
 * The offset of the first whole record (right length, type and CRC) starting after `from`, or -1;
 * `expected` (where the next record starts if the bad one's length is right) is tried first.
 * A write torn by a crash leaves garbage only at the end; a whole record after a bad one means
 * the bad one was damaged in place, and the records after it may be acknowledged entries.
 * Cheap tests (length, type byte) run before any checksum; past SEARCH_BUDGET_BYTES of checksum
 * work it answers -2, "undecided", and the caller refuses: when torn and damaged cannot be told
 * apart cheaply, refusing to start is the safe side.
 */
function findWholeRecord(buf: Buffer, from: number, expected: number, maxRecordBytes: number): number {
  if (expected > from && checkRecord(buf, expected, maxRecordBytes) === undefined) return expected;
  let budget = SEARCH_BUDGET_BYTES;
  for (let pos = from; pos + HEADER_BYTES < buf.length; pos++) {
    const length = buf[pos]! | (buf[pos + 1]! << 8) | (buf[pos + 2]! << 16) | (buf[pos + 3]! << 24);
    if (length <= 0 || length > maxRecordBytes || pos + HEADER_BYTES + length > buf.length) continue;
    const type = buf[pos + HEADER_BYTES]!;
    if (type !== RecordType.Entry && type !== RecordType.HardState && type !== RecordType.Snapshot) continue;
    budget -= length;
    if (budget < 0) return -2;
    if (checkRecord(buf, pos, maxRecordBytes) === undefined) return pos;
  }
  return -1;
}

/**
 * Replays the records of one segment; returns the offset after the last whole record. Throws
 * WalCorruptError for damage anywhere but at the end of the last segment.
 */
function scanSegment(buf: Buffer, path: string, maxRecordBytes: number, last: boolean, replay: Replayer): number {
  let pos = 0;
  while (pos < buf.length) {
    const bad = checkRecord(buf, pos, maxRecordBytes);
    if (bad !== undefined) {
      if (!last) throw new WalCorruptError(path, pos, `${bad}, in a segment that is not the last`);
      const claimed = buf.length - pos >= HEADER_BYTES ? pos + HEADER_BYTES + buf.readUInt32LE(pos) : -1;
      const next = findWholeRecord(buf, pos + 1, claimed, maxRecordBytes);
      if (next >= 0) throw new WalCorruptError(path, pos, `${bad}, followed by a valid record at byte offset ${next}`);
      if (next === -2) throw new WalCorruptError(path, pos, `${bad}; too much data follows to tell a torn write from damage`);
      return pos;
    }
    const length = buf.readUInt32LE(pos);
    const bodyStart = pos + HEADER_BYTES;
    let record;
    try {
      record = decodeBody(buf, bodyStart, bodyStart + length);
    } catch (err) {
      // The CRC matched, so these bytes were written as they are: not a torn write.
      throw new WalCorruptError(path, pos, `undecodable record: ${(err as Error).message}`);
    }
    if (record.type === RecordType.Entry) {
      const gap = replay.entry(record.entry);
      if (gap !== undefined) throw new WalCorruptError(path, pos, gap);
    } else if (record.type === RecordType.HardState) replay.hardState = record.hardState;
    else replay.snapshot(record.marker);
    pos = bodyStart + length;
  }
  return pos;
}
