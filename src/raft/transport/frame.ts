/**
 * Frames on a Raft connection: a 6-byte header, then the body.
 *
 *   u32 body length (big-endian) | u8 protocol version | u8 kind | body
 *
 * Every frame carries the version, so a peer speaking another version is told apart at its first
 * frame, before anything of its body is read. The kinds are reserved for the whole life of the
 * port: the same listening socket will also serve store clients (request and response frames),
 * so their codes are fixed now and a frame of any other kind is refused.
 */
import { FrameError } from './errors.js';

/** The protocol this code speaks. A peer with another version is refused at its first frame. */
export const PROTOCOL_VERSION = 1;
export const HEADER_BYTES = 6;
/** The largest length the header can claim (the u32's range). */
export const MAX_FRAME_LENGTH = 0xffff_ffff;

export const FrameKind = {
  /** The connection's authentication steps (hello, challenge, auth, accept, refuse). */
  handshake: 1,
  /** A batch of Raft messages between peers. */
  peerMessages: 2,
  /** One chunk of a large snapshot message. */
  snapshotChunk: 3,
  /** Reserved: a store client's request (served by the Raft store, not by the peer transport). */
  clientRequest: 4,
  /** Reserved: the answer to a store client's request. */
  clientResponse: 5,
} as const;
export type FrameKind = (typeof FrameKind)[keyof typeof FrameKind];

const KIND_NAMES: Record<number, string> = { 1: 'handshake', 2: 'peer messages', 3: 'snapshot chunk', 4: 'client request', 5: 'client response' };

/** A readable name of a frame kind, for log lines. */
export function kindName(kind: number): string {
  return KIND_NAMES[kind] ?? `unknown kind ${kind}`;
}

/** Writes a header for a body of `length` bytes at `buf[offset]`. */
export function writeHeader(buf: Buffer, offset: number, length: number, kind: FrameKind): void {
  buf.writeUInt32BE(length, offset);
  buf[offset + 4] = PROTOCOL_VERSION;
  buf[offset + 5] = kind;
}

/** A header alone, for a body written separately (a snapshot chunk's data, sent without a copy). */
export function header(length: number, kind: FrameKind): Buffer {
  const buf = Buffer.allocUnsafe(HEADER_BYTES);
  writeHeader(buf, 0, length, kind);
  return buf;
}

/** A whole frame around `body` (one copy; for small frames). */
export function frame(kind: FrameKind, body: Uint8Array): Buffer {
  const buf = Buffer.allocUnsafe(HEADER_BYTES + body.byteLength);
  writeHeader(buf, 0, body.byteLength, kind);
  buf.set(body, HEADER_BYTES);
  return buf;
}

/** A version other than ours: the connection is closed, and the log says which version came. */
export class VersionError extends FrameError {
  readonly version: number;
  constructor(version: number) {
    super(`protocol version ${version}, this node speaks version ${PROTOCOL_VERSION}`);
    this.version = version;
  }
}

/**
 * Cuts a byte stream into frames. A frame wholly inside one received chunk is handed on as a
 * view of that chunk (no copy); a frame split across chunks is gathered into one buffer of its
 * exact size, allocated once its header is read. A header claiming more than `maxFrameBytes`
 * throws before anything is allocated, so a peer claiming 4 GiB costs 6 bytes.
 */
export class FrameReader {
  /** Body bytes a frame may claim; lowered before authentication, raised after. */
  maxFrameBytes: number;
  private readonly headerBuf = Buffer.alloc(HEADER_BYTES);
  private headerFilled = 0;
  private body: Buffer | null = null;
  private bodyKind = 0;
  private bodyFilled = 0;
  private stopped = false;

  constructor(
    maxFrameBytes: number,
    private readonly onFrame: (kind: FrameKind, body: Buffer) => void,
  ) {
    this.maxFrameBytes = maxFrameBytes;
  }

  /** Stops handing on frames (the connection is closing); later input is ignored. */
  stop(): void {
    this.stopped = true;
    this.body = null;
  }

  /** Bytes of a frame read so far but not yet handed on. */
  get pendingBytes(): number {
    return this.headerFilled + this.bodyFilled;
  }

  /** Feeds received bytes; throws FrameError (or VersionError) on a bad header. */
  push(chunk: Buffer): void {
    let off = 0;
    const end = chunk.length;
    while (!this.stopped && off < end) {
      if (this.body !== null) {
        const n = Math.min(this.body.length - this.bodyFilled, end - off);
        chunk.copy(this.body, this.bodyFilled, off, off + n);
        this.bodyFilled += n;
        off += n;
        if (this.bodyFilled < this.body.length) return;
        const body = this.body;
        this.body = null;
        this.bodyFilled = 0;
        this.onFrame(this.bodyKind as FrameKind, body);
        continue;
      }
      let length: number;
      let version: number;
      let kind: number;
      if (this.headerFilled === 0 && end - off >= HEADER_BYTES) {
        length = chunk.readUInt32BE(off);
        version = chunk[off + 4]!;
        kind = chunk[off + 5]!;
        off += HEADER_BYTES;
      } else {
        const n = Math.min(HEADER_BYTES - this.headerFilled, end - off);
        chunk.copy(this.headerBuf, this.headerFilled, off, off + n);
        this.headerFilled += n;
        off += n;
        if (this.headerFilled < HEADER_BYTES) return;
        this.headerFilled = 0;
        length = this.headerBuf.readUInt32BE(0);
        version = this.headerBuf[4]!;
        kind = this.headerBuf[5]!;
      }
      if (version !== PROTOCOL_VERSION) throw new VersionError(version);
      if (kind < FrameKind.handshake || kind > FrameKind.clientResponse) throw new FrameError(`unknown frame kind ${kind}`);
      if (length > this.maxFrameBytes) throw new FrameError(`a ${kindName(kind)} frame claims ${length} bytes, more than the limit of ${this.maxFrameBytes}`);
      if (end - off >= length) {
        const body = chunk.subarray(off, off + length);
        off += length;
        this.onFrame(kind as FrameKind, body);
      } else {
        this.body = Buffer.allocUnsafe(length);
        this.bodyKind = kind;
        this.bodyFilled = 0;
      }
    }
  }
}
