/**
 * The messages of the classic elections (Bully and Ring) and their binary form.
 *
 * Every message carries the sender's term (the highest it knows), so a term never goes back on
 * any node that hears it, and a winner's term, its fencing token, is above every term its
 * electorate has seen. The codec is strict: a version byte, a kind byte, then unsigned LEB128
 * varints, each a safe integer; node ids are positive, lists are bounded, nothing may follow the
 * last field. Any other input ends in one ElectionMessageError (a FrameError, code
 * FRAME_INVALID) after at most one pass over the bytes: it never throws anything else.
 */
import { FrameError } from '../../raft/transport/errors.js';

export type NodeId = number;

/** The message format's version, the first byte of every message. */
export const CLASSIC_VERSION = 1;
/** Most node ids a ring token may carry (a ring larger than this is refused at configuration). */
export const MAX_MEMBERS = 1024;

export type ClassicMessage =
  /** Bully: a candidate asks a higher node whether it is alive. */
  | { readonly kind: 'election'; readonly from: NodeId; readonly to: NodeId; readonly term: number }
  /** Bully: the higher node answers that it is alive and takes the election over. */
  | { readonly kind: 'answer'; readonly from: NodeId; readonly to: NodeId; readonly term: number }
  /** Both: `leader` leads in `term` (the victory announcement, repeated as the leader's heartbeat). */
  | { readonly kind: 'coordinator'; readonly from: NodeId; readonly to: NodeId; readonly term: number; readonly leader: NodeId }
  /** Both: the message you sent carried a term older than mine (`term`). */
  | { readonly kind: 'stale'; readonly from: NodeId; readonly to: NodeId; readonly term: number }
  /** Ring: the election token, collecting the ids of the live nodes it passes. */
  | {
      readonly kind: 'ring-election';
      readonly from: NodeId;
      readonly to: NodeId;
      readonly term: number;
      readonly seq: number;
      readonly initiator: NodeId;
      readonly round: number;
      readonly candidates: readonly NodeId[];
    }
  /** Ring: the result, going round once so that every node learns it. */
  | {
      readonly kind: 'ring-coordinator';
      readonly from: NodeId;
      readonly to: NodeId;
      readonly term: number;
      readonly seq: number;
      readonly initiator: NodeId;
      readonly round: number;
      readonly leader: NodeId;
    }
  /** Ring: the successor got the token (`seq` of the forward it acknowledges). */
  | { readonly kind: 'ring-ack'; readonly from: NodeId; readonly to: NodeId; readonly term: number; readonly seq: number };

export type ClassicMessageKind = ClassicMessage['kind'];

/** Wire codes; the position is the code, so append only. */
const KINDS: readonly ClassicMessageKind[] = ['election', 'answer', 'coordinator', 'stale', 'ring-election', 'ring-coordinator', 'ring-ack'];
const CODE = new Map<ClassicMessageKind, number>(KINDS.map((k, i) => [k, i]));

/** `an election`, `a coordinator`: the kind with its article, for error messages. */
export function an(kind: ClassicMessageKind): string {
  return `${kind === 'election' || kind === 'answer' ? 'an' : 'a'} ${kind}`;
}

/** A classic election message that is not valid: what was expected and what came. */
export class ElectionMessageError extends FrameError {
  constructor(message: string) {
    super(`invalid election message: ${message}`);
  }
}

function varintBytes(n: number, out: number[]): void {
  let v = n;
  while (v >= 0x80) {
    out.push((v % 0x80) | 0x80);
    v = Math.floor(v / 0x80);
  }
  out.push(v);
}

/** Encodes one message (its fields checked: a caller's bug is an error here, not on the peer). */
export function encodeClassic(m: ClassicMessage): Uint8Array {
  const out: number[] = [CLASSIC_VERSION, CODE.get(m.kind)!];
  const put = (field: string, n: number, min: number): void => {
    if (!Number.isSafeInteger(n) || n < min) throw new ElectionMessageError(`${field} must be an integer >= ${min}, got ${String(n)}`);
    varintBytes(n, out);
  };
  put('from', m.from, 1);
  put('to', m.to, 1);
  put('term', m.term, 0);
  switch (m.kind) {
    case 'election':
    case 'answer':
    case 'stale':
      break;
    case 'coordinator':
      put('leader', m.leader, 1);
      break;
    case 'ring-election':
      put('seq', m.seq, 0);
      put('initiator', m.initiator, 1);
      put('round', m.round, 0);
      if (m.candidates.length > MAX_MEMBERS) throw new ElectionMessageError(`${m.candidates.length} candidates, more than ${MAX_MEMBERS}`);
      put('candidate count', m.candidates.length, 0);
      for (const c of m.candidates) put('candidate', c, 1);
      break;
    case 'ring-coordinator':
      put('seq', m.seq, 0);
      put('initiator', m.initiator, 1);
      put('round', m.round, 0);
      put('leader', m.leader, 1);
      break;
    case 'ring-ack':
      put('seq', m.seq, 0);
      break;
  }
  return Uint8Array.from(out);
}

class Cursor {
  pos = 0;
  constructor(private readonly bytes: Uint8Array) {}
  u8(field: string): number {
    if (this.pos >= this.bytes.length) throw new ElectionMessageError(`truncated before ${field}`);
    return this.bytes[this.pos++]!;
  }
  /** A varint that must be a safe integer >= min (at most 8 bytes: 2^56 > MAX_SAFE_INTEGER). */
  varint(field: string, min: number): number {
    let value = 0;
    let scale = 1;
    for (let i = 0; i < 8; i++) {
      const b = this.u8(field);
      value += (b & 0x7f) * scale;
      if ((b & 0x80) === 0) {
        if (!Number.isSafeInteger(value)) throw new ElectionMessageError(`${field} ${value} is not a safe integer`);
        if (value < min) throw new ElectionMessageError(`${field} must be >= ${min}, got ${value}`);
        return value;
      }
      scale *= 0x80;
    }
    throw new ElectionMessageError(`${field} is longer than 8 bytes (larger than any safe integer)`);
  }
  get left(): number {
    return this.bytes.length - this.pos;
  }
}

/** Decodes one message; anything but a valid message is an ElectionMessageError. */
export function decodeClassic(bytes: Uint8Array): ClassicMessage {
  if (!(bytes instanceof Uint8Array)) throw new ElectionMessageError('expected bytes');
  const r = new Cursor(bytes);
  const version = r.u8('version');
  if (version !== CLASSIC_VERSION) throw new ElectionMessageError(`version ${version}, this node speaks version ${CLASSIC_VERSION}`);
  const code = r.u8('kind');
  const kind = KINDS[code];
  if (kind === undefined) throw new ElectionMessageError(`unknown kind code ${code}`);
  const from = r.varint('from', 1);
  const to = r.varint('to', 1);
  const term = r.varint('term', 0);
  let m: ClassicMessage;
  switch (kind) {
    case 'election':
    case 'answer':
    case 'stale':
      m = { kind, from, to, term };
      break;
    case 'coordinator':
      m = { kind, from, to, term, leader: r.varint('leader', 1) };
      break;
    case 'ring-election': {
      const seq = r.varint('seq', 0);
      const initiator = r.varint('initiator', 1);
      const round = r.varint('round', 0);
      const count = r.varint('candidate count', 0);
      // Each candidate takes at least one byte: a count above the bytes left is a lie, refused before the loop.
      if (count > MAX_MEMBERS || count > r.left) throw new ElectionMessageError(`candidate count ${count} exceeds ${Math.min(MAX_MEMBERS, r.left)}`);
      const candidates: NodeId[] = [];
      for (let i = 0; i < count; i++) candidates.push(r.varint('candidate', 1));
      m = { kind, from, to, term, seq, initiator, round, candidates };
      break;
    }
    case 'ring-coordinator':
      m = { kind, from, to, term, seq: r.varint('seq', 0), initiator: r.varint('initiator', 1), round: r.varint('round', 0), leader: r.varint('leader', 1) };
      break;
    case 'ring-ack':
      m = { kind, from, to, term, seq: r.varint('seq', 0) };
      break;
  }
  if (r.left !== 0) throw new ElectionMessageError(`${r.left} bytes after the end of ${an(kind)} message`);
  return m;
}
