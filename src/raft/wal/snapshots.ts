/**
 * Snapshot files `<term>-<index>.snap` (16 hex digits each) in one directory:
 *
 *   "TSNP" | u32le crc32c(body) | body = u8 version | varint index | varint term | ConfState | data
 *
 * A snapshot is written under a temporary name, fsynced, renamed into place and the directory
 * fsynced, so a crash leaves either the whole file or none. Loading takes the newest file whose
 * checksum holds and that the caller accepts (the WAL has its marker); a damaged newer file is
 * skipped with a log line, never trusted.
 */
import { join } from 'node:path';
import type { Snapshot, SnapshotMetadata } from '../core/types.js';
import { confStateSize, putConfState, putVarint, Reader, readConfState, varintSize } from './codec.js';
import { crc32c } from './crc32c.js';
import { DiskFullError, isNoSpace } from './errors.js';
import { syncDir, writeFully, type WalFs } from './fs.js';

const MAGIC = 0x504e5354; // "TSNP" read as u32le
const VERSION = 1;
const HEAD_BYTES = 8;
const SNAP_NAME = /^([0-9a-f]{16})-([0-9a-f]{16})\.snap$/;
const hex16 = (n: number): string => n.toString(16).padStart(16, '0');

export interface SnapshotFile {
  readonly name: string;
  readonly index: number;
  readonly term: number;
}

export class SnapshotFiles {
  constructor(
    readonly dir: string,
    private readonly fs: WalFs,
    private readonly log: (line: string) => void,
  ) {
    fs.mkdirSync(dir);
    for (const name of fs.readdirSync(dir)) {
      if (name.endsWith('.snap.tmp')) fs.unlinkSync(join(dir, name));
    }
  }

  /** The snapshot files present, oldest (lowest index) first. */
  list(): SnapshotFile[] {
    const files: SnapshotFile[] = [];
    for (const name of this.fs.readdirSync(this.dir)) {
      const m = SNAP_NAME.exec(name);
      if (m !== null) files.push({ name, term: parseInt(m[1]!, 16), index: parseInt(m[2]!, 16) });
    }
    return files.sort((a, b) => a.index - b.index || a.term - b.term);
  }

  /** Writes `snap` durably. DiskFullError when there is no room (no partial file is left). */
  save(snap: Snapshot): void {
    const { index, term, confState } = snap.metadata;
    const name = `${hex16(term)}-${hex16(index)}.snap`;
    const bodyLength = 1 + varintSize(index) + varintSize(term) + confStateSize(confState) + snap.data.byteLength;
    const buf = Buffer.allocUnsafe(HEAD_BYTES + bodyLength);
    let pos = HEAD_BYTES;
    buf[pos++] = VERSION;
    pos = putVarint(buf, pos, index);
    pos = putVarint(buf, pos, term);
    pos = putConfState(buf, pos, confState);
    buf.set(snap.data, pos);
    buf.writeUInt32LE(MAGIC, 0);
    buf.writeUInt32LE(crc32c(buf, 0, HEAD_BYTES, buf.length), 4);

    const tmp = join(this.dir, `${name}.tmp`);
    let fd: number | undefined;
    try {
      fd = this.fs.openSync(tmp, 'w');
      writeFully(this.fs, fd, buf, buf.length, 0);
      this.fs.fsyncSync(fd);
      this.fs.closeSync(fd);
      fd = undefined;
      this.fs.renameSync(tmp, join(this.dir, name));
      syncDir(this.fs, this.dir);
    } catch (err) {
      if (fd !== undefined) this.fs.closeSync(fd);
      try {
        this.fs.unlinkSync(tmp);
      } catch {
        // renamed already, or never made
      }
      if (isNoSpace(err)) throw new DiskFullError(join(this.dir, name), 'writing snapshot', { cause: err });
      throw err;
    }
  }

  /**
   * The newest snapshot whose file is whole and whose metadata `accept` takes, or undefined.
   * Newer files that are damaged or not accepted are skipped, each with a log line.
   */
  loadNewest(accept: (metadata: SnapshotMetadata) => boolean): Snapshot | undefined {
    const files = this.list();
    for (let i = files.length - 1; i >= 0; i--) {
      const file = files[i]!;
      const path = join(this.dir, file.name);
      const snap = this.read(path);
      if (typeof snap === 'string') {
        this.log(`snapshot: ignoring ${path}: ${snap}`);
        continue;
      }
      if (snap.metadata.index !== file.index || snap.metadata.term !== file.term) {
        this.log(`snapshot: ignoring ${path}: it holds index ${snap.metadata.index} term ${snap.metadata.term}, not what its name says`);
        continue;
      }
      if (!accept(snap.metadata)) {
        this.log(`snapshot: ignoring ${path}: the write-ahead log has no record of it (a save interrupted by a crash)`);
        continue;
      }
      return snap;
    }
    return undefined;
  }

  /** Deletes all but the newest `keep` snapshot files. */
  purge(keep: number): void {
    const files = this.list();
    const drop = files.slice(0, Math.max(0, files.length - keep));
    for (const f of drop) this.fs.unlinkSync(join(this.dir, f.name));
    if (drop.length > 0) syncDir(this.fs, this.dir);
  }

  /** The snapshot in `path`, or why it cannot be used. */
  private read(path: string): Snapshot | string {
    let buf: Buffer;
    try {
      buf = this.fs.readFileSync(path);
    } catch (err) {
      return `unreadable: ${(err as Error).message}`;
    }
    if (buf.length < HEAD_BYTES + 1 || buf.readUInt32LE(0) !== MAGIC) return 'not a snapshot file (bad magic)';
    if (crc32c(buf, 0, HEAD_BYTES, buf.length) !== buf.readUInt32LE(4)) return 'checksum mismatch';
    try {
      const r = new Reader(buf, HEAD_BYTES, buf.length);
      const version = r.byte();
      if (version !== VERSION) return `unknown version ${version}`;
      const index = r.varint();
      const term = r.varint();
      const confState = readConfState(r);
      return { metadata: { index, term, confState }, data: r.rest() };
    } catch (err) {
      return `undecodable: ${(err as Error).message}`;
    }
  }
}
