/**
 * The binary form of the core's Message on the wire: compact (numbers as unsigned LEB128
 * varints, one flag byte for the optional fields) and exact (every field round-trips: entries
 * with their type and data, snapshot metadata and data, context, reject hints, transferee).
 *
 * A batch is `varint count` then each message:
 *
 *   u8 type, u8 flags (1 reject, 2 snapshot, 4 context, 8 transferee),
 *   varint from, to, term, logTerm, index, commit, rejectHint,
 *   varint entry count, each entry: u8 type, varint term, varint index, varint length, bytes,
 *   [context: varint length, UTF-8], [transferee: varint],
 *   [snapshot: varint index, term, four id lists (varint count, varints), u8 autoLeave,
 *    varint data length, bytes]
 *
 * Encoding sizes the whole batch first and writes it into one buffer (one copy of each entry's
 * data, none of the header fields). Decoding checks every length and count against the bytes
 * left before it loops or allocates, so random input ends in a FrameError after at most one pass
 * over the bytes: it never throws anything else and never hangs. Decoded entry data is copied
 * out of the receive buffer, so a log that keeps an entry does not pin a socket's 64 KiB chunk.
 */
import type { ConfState, Entry, EntryType, Message, MessageType, NodeId, Snapshot } from '../core/types.js';
import { FrameError } from './errors.js';

/** Wire codes of the message types; the position is the code, so append only. */
export const MESSAGE_TYPES: readonly MessageType[] = [
  'hup',
  'beat',
  'prop',
  'checkQuorum',
  'transferLeader',
  'unreachable',
  'snapStatus',
  'readIndex',
  'app',
  'appResp',
  'vote',
  'voteResp',
  'preVote',
  'preVoteResp',
  'snap',
  'heartbeat',
  'heartbeatResp',
  'timeoutNow',
  'readIndexResp',
];
const TYPE_CODE = new Map<MessageType, number>(MESSAGE_TYPES.map((t, i) => [t, i]));
const ENTRY_TYPES: readonly EntryType[] = ['normal', 'confChange'];

const F_REJECT = 1;
const F_SNAPSHOT = 2;
const F_CONTEXT = 4;
const F_TRANSFEREE = 8;
const F_KNOWN = F_REJECT | F_SNAPSHOT | F_CONTEXT | F_TRANSFEREE;

const EMPTY = new Uint8Array(0);
const utf8 = new TextDecoder('utf-8', { fatal: true });

/** Bytes of `n` as an unsigned LEB128 varint (n a safe integer >= 0). */
export function varintSize(n: number): number {
  if (n < 0x80) return 1;
  if (n < 0x4000) return 2;
  if (n < 0x20_0000) return 3;
  if (n < 0x1000_0000) return 4;
  let size = 4;
  let rest = Math.floor(n / 0x1000_0000);
  while (rest > 0) {
    size++;
    rest = Math.floor(rest / 0x80);
  }
  return size;
}

/** A cursor writing into a buffer sized in advance. */
export class Writer {
  pos: number;
  constructor(
    readonly buf: Buffer,
    start = 0,
  ) {
    this.pos = start;
  }
  u8(n: number): void {
    this.buf[this.pos++] = n;
  }
  varint(n: number): void {
    const buf = this.buf;
    while (n >= 0x80) {
      buf[this.pos++] = (n % 0x80) | 0x80;
      n = Math.floor(n / 0x80);
    }
    buf[this.pos++] = n;
  }
  bytes(data: Uint8Array): void {
    this.buf.set(data, this.pos);
    this.pos += data.byteLength;
  }
}

/** A cursor reading a buffer; every read checks the bytes left and throws FrameError. */
export class Reader {
  pos: number;
  constructor(
    readonly buf: Uint8Array,
    start = 0,
    readonly end = buf.byteLength,
  ) {
    this.pos = start;
  }
  get left(): number {
    return this.end - this.pos;
  }
  u8(what: string): number {
    if (this.pos >= this.end) throw new FrameError(`truncated: ${what} missing at byte ${this.pos}`);
    return this.buf[this.pos++]!;
  }
  /** An unsigned varint up to 2^53 - 1 (at most 8 bytes). */
  varint(what: string): number {
    let result = 0;
    let scale = 1;
    for (let i = 0; i < 8; i++) {
      if (this.pos >= this.end) throw new FrameError(`truncated: ${what} missing at byte ${this.pos}`);
      const b = this.buf[this.pos++]!;
      result += (b & 0x7f) * scale;
      if (b < 0x80) {
        if (result > Number.MAX_SAFE_INTEGER) throw new FrameError(`${what}: ${result} is over 2^53 - 1`);
        if (i > 0 && b === 0) throw new FrameError(`${what}: varint with a redundant zero byte`);
        return result;
      }
      scale *= 0x80;
    }
    throw new FrameError(`${what}: varint longer than 8 bytes`);
  }
  /** A length that must fit in the bytes left. */
  length(what: string): number {
    const n = this.varint(what);
    if (n > this.left) throw new FrameError(`${what}: ${n} bytes claimed, ${this.left} left`);
    return n;
  }
  /** A count of items of at least `minItemBytes` each, checked against the bytes left. */
  count(what: string, minItemBytes: number): number {
    const n = this.varint(what);
    if (n * minItemBytes > this.left) throw new FrameError(`${what}: ${n} claimed, only ${this.left} bytes left`);
    return n;
  }
  /** `n` bytes as a plain Uint8Array view of the buffer (no copy, even when the buffer is a Buffer). */
  view(n: number, what: string): Uint8Array {
    if (n > this.left) throw new FrameError(`truncated: ${what} needs ${n} bytes, ${this.left} left`);
    const v = new Uint8Array(this.buf.buffer, this.buf.byteOffset + this.pos, n);
    this.pos += n;
    return v;
  }
}

function idsSize(ids: readonly NodeId[]): number {
  let size = varintSize(ids.length);
  for (const id of ids) size += varintSize(id);
  return size;
}

function writeIds(w: Writer, ids: readonly NodeId[]): void {
  w.varint(ids.length);
  for (const id of ids) w.varint(id);
}

function readIds(r: Reader, what: string): NodeId[] {
  const n = r.count(what, 1);
  const ids: NodeId[] = new Array<NodeId>(n);
  for (let i = 0; i < n; i++) ids[i] = r.varint(what);
  return ids;
}

/** Snapshot metadata bytes (everything but the data's length and bytes). */
function snapshotMetaSize(s: Snapshot): number {
  const cs = s.metadata.confState;
  return varintSize(s.metadata.index) + varintSize(s.metadata.term) + idsSize(cs.voters) + idsSize(cs.learners) + idsSize(cs.votersOutgoing) + idsSize(cs.learnersNext) + 1;
}

/**
 * Encoded size of one message. `withSnapshotData` false leaves the snapshot's data out (its
 * length is written as 0): the chunked path sends the data in frames of its own.
 */
export function messageSize(m: Message, withSnapshotData = true): number {
  let size = 2 + varintSize(m.from) + varintSize(m.to) + varintSize(m.term) + varintSize(m.logTerm) + varintSize(m.index) + varintSize(m.commit) + varintSize(m.rejectHint);
  size += varintSize(m.entries.length);
  for (const e of m.entries) size += 1 + varintSize(e.term) + varintSize(e.index) + varintSize(e.data.byteLength) + e.data.byteLength;
  if (m.context !== undefined) {
    const n = Buffer.byteLength(m.context, 'utf8');
    size += varintSize(n) + n;
  }
  if (m.transferee !== undefined) size += varintSize(m.transferee);
  if (m.snapshot !== undefined) {
    const n = withSnapshotData ? m.snapshot.data.byteLength : 0;
    size += snapshotMetaSize(m.snapshot) + varintSize(n) + n;
  }
  return size;
}

/** Writes one message (sized by messageSize with the same `withSnapshotData`). */
export function writeMessage(w: Writer, m: Message, withSnapshotData = true): void {
  const code = TYPE_CODE.get(m.type);
  if (code === undefined) throw new FrameError(`cannot encode message type ${String(m.type)}`);
  w.u8(code);
  w.u8((m.reject ? F_REJECT : 0) | (m.snapshot !== undefined ? F_SNAPSHOT : 0) | (m.context !== undefined ? F_CONTEXT : 0) | (m.transferee !== undefined ? F_TRANSFEREE : 0));
  w.varint(m.from);
  w.varint(m.to);
  w.varint(m.term);
  w.varint(m.logTerm);
  w.varint(m.index);
  w.varint(m.commit);
  w.varint(m.rejectHint);
  w.varint(m.entries.length);
  for (const e of m.entries) {
    w.u8(e.type === 'confChange' ? 1 : 0);
    w.varint(e.term);
    w.varint(e.index);
    w.varint(e.data.byteLength);
    w.bytes(e.data);
  }
  if (m.context !== undefined) {
    const n = Buffer.byteLength(m.context, 'utf8');
    w.varint(n);
    w.pos += w.buf.write(m.context, w.pos, n, 'utf8');
  }
  if (m.transferee !== undefined) w.varint(m.transferee);
  if (m.snapshot !== undefined) {
    const s = m.snapshot;
    const cs = s.metadata.confState;
    w.varint(s.metadata.index);
    w.varint(s.metadata.term);
    writeIds(w, cs.voters);
    writeIds(w, cs.learners);
    writeIds(w, cs.votersOutgoing);
    writeIds(w, cs.learnersNext);
    w.u8(cs.autoLeave ? 1 : 0);
    if (withSnapshotData) {
      w.varint(s.data.byteLength);
      w.bytes(s.data);
    } else {
      w.varint(0);
    }
  }
}

/** Reads one message; FrameError on anything malformed. */
export function readMessage(r: Reader): Message {
  const code = r.u8('message type');
  const type = MESSAGE_TYPES[code];
  if (type === undefined) throw new FrameError(`unknown message type code ${code}`);
  const flags = r.u8('message flags');
  if ((flags & ~F_KNOWN) !== 0) throw new FrameError(`unknown message flags 0x${flags.toString(16)}`);
  const from = r.varint('from');
  const to = r.varint('to');
  const term = r.varint('term');
  const logTerm = r.varint('logTerm');
  const index = r.varint('index');
  const commit = r.varint('commit');
  const rejectHint = r.varint('rejectHint');
  // An entry takes at least 4 bytes (type, term, index, length).
  const n = r.count('entry count', 4);
  const entries: Entry[] = new Array<Entry>(n);
  for (let i = 0; i < n; i++) {
    const t = r.u8('entry type');
    const et = ENTRY_TYPES[t];
    if (et === undefined) throw new FrameError(`unknown entry type code ${t}`);
    const eterm = r.varint('entry term');
    const eindex = r.varint('entry index');
    const len = r.length('entry data');
    const data = len === 0 ? EMPTY : new Uint8Array(r.view(len, 'entry data'));
    entries[i] = { term: eterm, index: eindex, type: et, data };
  }
  let context: string | undefined;
  if (flags & F_CONTEXT) {
    const len = r.length('context');
    try {
      context = utf8.decode(r.view(len, 'context'));
    } catch {
      throw new FrameError('context is not valid UTF-8');
    }
  }
  const transferee = flags & F_TRANSFEREE ? r.varint('transferee') : undefined;
  let snapshot: Snapshot | undefined;
  if (flags & F_SNAPSHOT) {
    const sindex = r.varint('snapshot index');
    const sterm = r.varint('snapshot term');
    const voters = readIds(r, 'voters');
    const learners = readIds(r, 'learners');
    const votersOutgoing = readIds(r, 'votersOutgoing');
    const learnersNext = readIds(r, 'learnersNext');
    const al = r.u8('autoLeave');
    if (al > 1) throw new FrameError(`autoLeave must be 0 or 1, got ${al}`);
    const confState: ConfState = { voters, learners, votersOutgoing, learnersNext, autoLeave: al === 1 };
    const len = r.length('snapshot data');
    // Snapshot data stays a view: the frame that carries it is its own allocation (it is large).
    const data = len === 0 ? EMPTY : r.view(len, 'snapshot data');
    snapshot = { metadata: { index: sindex, term: sterm, confState }, data };
  }
  const m: Message = { type, from, to, term, logTerm, index, entries, commit, reject: (flags & F_REJECT) !== 0, rejectHint };
  if (snapshot === undefined && context === undefined && transferee === undefined) return m;
  return { ...m, ...(snapshot !== undefined ? { snapshot } : {}), ...(context !== undefined ? { context } : {}), ...(transferee !== undefined ? { transferee } : {}) };
}

/** Encoded size of a batch of messages. */
export function batchSize(messages: readonly Message[]): number {
  let size = varintSize(messages.length);
  for (const m of messages) size += messageSize(m);
  return size;
}

/** Writes a batch (sized by batchSize). */
export function writeBatch(w: Writer, messages: readonly Message[]): void {
  w.varint(messages.length);
  for (const m of messages) writeMessage(w, m);
}

/** A batch as its own buffer. */
export function encodeMessages(messages: readonly Message[]): Buffer {
  const buf = Buffer.allocUnsafe(batchSize(messages));
  const w = new Writer(buf);
  writeBatch(w, messages);
  return buf;
}

/**
 * Decodes a batch that fills `bytes` exactly. Throws FrameError, and nothing else, on any
 * malformed input (trailing bytes included).
 */
export function decodeMessages(bytes: Uint8Array): Message[] {
  try {
    const r = new Reader(bytes);
    // A message takes at least 10 bytes (type, flags, seven varints, entry count).
    const n = r.count('message count', 10);
    const out: Message[] = new Array<Message>(n);
    for (let i = 0; i < n; i++) out[i] = readMessage(r);
    if (r.left !== 0) throw new FrameError(`${r.left} bytes after the last message`);
    return out;
  } catch (err) {
    if (err instanceof FrameError) throw err;
    // A bug in the checks above must not surface as a RangeError the caller does not expect.
    throw new FrameError(`malformed message batch: ${err instanceof Error ? err.message : String(err)}`);
  }
}
