/**
 * The binary encoding of WAL records and of the values they carry. A record on disk is
 *
 *   u32le length | u32le crc32c | body (length bytes)
 *
 * where the CRC covers the body and the body's first byte is the record type. Integers inside a
 * body are unsigned LEB128 varints (a term or index takes 1–8 bytes instead of a fixed 8), so a
 * small entry costs about 12 bytes of framing. Decoding never trusts a length: every read is
 * checked against the end of its buffer and fails with a RangeError the caller turns into a
 * WalCorruptError naming the file and offset.
 */
import type { ConfState, Entry, EntryType, HardState, NodeId, SnapshotMetadata } from '../core/types.js';
import { crc32c } from './crc32c.js';

export const HEADER_BYTES = 8;

/** The first byte of a record body. Snapshot: a snapshot's index, term and membership (SnapshotMarker). */
export const RecordType = { Entry: 1, HardState: 2, Snapshot: 3 } as const;

/**
 * Written when a snapshot is saved. `reset` marks a snapshot received from the leader, which
 * replaces the whole log (entries before the marker are dropped on replay); a local snapshot
 * only moves the log's start and keeps the entries after its index.
 */
export interface SnapshotMarker {
  readonly metadata: SnapshotMetadata;
  readonly reset: boolean;
}

export type WalRecord =
  | { readonly type: typeof RecordType.Entry; readonly entry: Entry }
  | { readonly type: typeof RecordType.HardState; readonly hardState: HardState }
  | { readonly type: typeof RecordType.Snapshot; readonly marker: SnapshotMarker };

/** Bytes of `n` as a varint (n a non-negative safe integer). */
export function varintSize(n: number): number {
  let size = 1;
  while (n >= 0x80) {
    n = Math.floor(n / 128);
    size++;
  }
  return size;
}

/** Writes `n` as a varint at `pos`; returns the position after it. */
export function putVarint(buf: Uint8Array, pos: number, n: number): number {
  // Division, not >>>, once past 32 bits: terms and indexes may grow beyond 2^32.
  while (n >= 0x80) {
    buf[pos++] = (n & 0x7f) | 0x80;
    n = n >= 0x1_0000_0000 ? Math.floor(n / 128) : n >>> 7;
  }
  buf[pos++] = n;
  return pos;
}

/** A cursor over one record body; every read is bounds-checked. */
export class Reader {
  pos: number;
  constructor(
    readonly buf: Uint8Array,
    start: number,
    readonly end: number,
  ) {
    this.pos = start;
  }
  byte(): number {
    if (this.pos >= this.end) throw new RangeError('record ends inside a field');
    return this.buf[this.pos++]!;
  }
  varint(): number {
    let n = 0;
    let scale = 1;
    for (let i = 0; i < 8; i++) {
      const b = this.byte();
      n += (b & 0x7f) * scale;
      if ((b & 0x80) === 0) {
        if (!Number.isSafeInteger(n)) throw new RangeError(`integer ${n} is beyond 2^53`);
        return n;
      }
      scale *= 128;
    }
    throw new RangeError('varint longer than 8 bytes');
  }
  rest(): Uint8Array {
    const out = this.buf.subarray(this.pos, this.end);
    this.pos = this.end;
    return out;
  }
  done(): void {
    if (this.pos !== this.end) throw new RangeError(`${this.end - this.pos} unexpected bytes at the end of the record`);
  }
}

const ENTRY_TYPES: readonly EntryType[] = ['normal', 'confChange'];

function entryBodySize(e: Entry): number {
  return 2 + varintSize(e.term) + varintSize(e.index) + e.data.byteLength;
}

function hardStateBodySize(hs: HardState): number {
  return 1 + varintSize(hs.term) + varintSize(hs.vote) + varintSize(hs.commit);
}

const lists = (cs: ConfState): readonly (readonly NodeId[])[] => [cs.voters, cs.learners, cs.votersOutgoing, cs.learnersNext];

export function confStateSize(cs: ConfState): number {
  let size = 1;
  for (const list of lists(cs)) {
    size += varintSize(list.length);
    for (const id of list) size += varintSize(id);
  }
  return size;
}

export function putConfState(buf: Uint8Array, pos: number, cs: ConfState): number {
  buf[pos++] = cs.autoLeave ? 1 : 0;
  for (const list of lists(cs)) {
    pos = putVarint(buf, pos, list.length);
    for (const id of list) pos = putVarint(buf, pos, id);
  }
  return pos;
}

export function readConfState(r: Reader): ConfState {
  const flags = r.byte();
  if (flags > 1) throw new RangeError(`bad conf state flags ${flags}`);
  const read = (): NodeId[] => {
    const n = r.varint();
    // Each id takes at least one byte: a count beyond the bytes left is a lie, not an allocation.
    if (n > r.end - r.pos) throw new RangeError(`conf state claims ${n} ids in ${r.end - r.pos} bytes`);
    const ids: NodeId[] = [];
    for (let i = 0; i < n; i++) ids.push(r.varint());
    return ids;
  };
  const voters = read();
  const learners = read();
  const votersOutgoing = read();
  const learnersNext = read();
  return { voters, learners, votersOutgoing, learnersNext, autoLeave: flags === 1 };
}

function markerBodySize(m: SnapshotMarker): number {
  return 2 + varintSize(m.metadata.index) + varintSize(m.metadata.term) + confStateSize(m.metadata.confState);
}

/** Bytes the records of one save take on disk, framing included. */
export function recordsSize(hardState: HardState | undefined, entries: readonly Entry[], marker?: SnapshotMarker): number {
  let size = 0;
  if (marker !== undefined) size += HEADER_BYTES + markerBodySize(marker);
  for (const e of entries) size += HEADER_BYTES + entryBodySize(e);
  if (hardState !== undefined) size += HEADER_BYTES + hardStateBodySize(hardState);
  return size;
}

/** Frames the body written at [start + 8, end): fills in the length and CRC at `start`. */
function frame(buf: Uint8Array, view: DataView, start: number, end: number): void {
  view.setUint32(start, end - start - HEADER_BYTES, true);
  view.setUint32(start + 4, crc32c(buf, 0, start + HEADER_BYTES, end), true);
}

/**
 * Encodes the records of one save into `buf` (of at least recordsSize bytes): the snapshot
 * marker first, then the entries in order, then the hard state, so a replay that stops at a torn
 * record never sees a hard state whose entries are missing. Each entry's data is copied once,
 * into this buffer; the whole batch is then written with one system call.
 */
export function encodeRecords(buf: Uint8Array, hardState: HardState | undefined, entries: readonly Entry[], marker?: SnapshotMarker): number {
  const view = new DataView(buf.buffer, buf.byteOffset, buf.byteLength);
  let pos = 0;
  if (marker !== undefined) {
    const start = pos;
    pos += HEADER_BYTES;
    buf[pos++] = RecordType.Snapshot;
    buf[pos++] = marker.reset ? 1 : 0;
    pos = putVarint(buf, pos, marker.metadata.index);
    pos = putVarint(buf, pos, marker.metadata.term);
    pos = putConfState(buf, pos, marker.metadata.confState);
    frame(buf, view, start, pos);
  }
  for (const e of entries) {
    const start = pos;
    pos += HEADER_BYTES;
    buf[pos++] = RecordType.Entry;
    buf[pos++] = e.type === 'normal' ? 0 : 1;
    pos = putVarint(buf, pos, e.term);
    pos = putVarint(buf, pos, e.index);
    buf.set(e.data, pos);
    pos += e.data.byteLength;
    frame(buf, view, start, pos);
  }
  if (hardState !== undefined) {
    const start = pos;
    pos += HEADER_BYTES;
    buf[pos++] = RecordType.HardState;
    pos = putVarint(buf, pos, hardState.term);
    pos = putVarint(buf, pos, hardState.vote);
    pos = putVarint(buf, pos, hardState.commit);
    frame(buf, view, start, pos);
  }
  return pos;
}

/**
 * Decodes the body at buf[start, end) (CRC already checked). Entry data is a view into `buf`,
 * not a copy: the segment's buffer stays alive while its entries are in the log.
 */
export function decodeBody(buf: Uint8Array, start: number, end: number): WalRecord {
  const r = new Reader(buf, start, end);
  const type = r.byte();
  switch (type) {
    case RecordType.Entry: {
      const et = ENTRY_TYPES[r.byte()];
      if (et === undefined) throw new RangeError('bad entry type');
      const term = r.varint();
      const index = r.varint();
      return { type, entry: { term, index, type: et, data: r.rest() } };
    }
    case RecordType.HardState: {
      const hardState = { term: r.varint(), vote: r.varint(), commit: r.varint() };
      r.done();
      return { type, hardState };
    }
    case RecordType.Snapshot: {
      const flags = r.byte();
      if (flags > 1) throw new RangeError(`bad snapshot marker flags ${flags}`);
      const index = r.varint();
      const term = r.varint();
      const confState = readConfState(r);
      r.done();
      return { type, marker: { metadata: { index, term, confState }, reset: flags === 1 } };
    }
    default:
      throw new RangeError(`unknown record type ${type}`);
  }
}
