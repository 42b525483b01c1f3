/**
 * The wire codec of the Raft transport: every message type round-trips with every field, and
 * hostile bytes end in a FrameError (never another error, never a hang).
 */
import { describe, expect, it } from 'vitest';
import { SeededRandom } from '../../src/core/random.js';
import { message, type Message } from '../../src/raft/core/types.js';
import { MESSAGE_TYPES, batchSize, decodeMessages, encodeMessages, messageSize } from '../../src/raft/transport/codec.js';
import { FrameError } from '../../src/raft/transport/errors.js';
import { FrameKind, FrameReader, HEADER_BYTES, PROTOCOL_VERSION, frame } from '../../src/raft/transport/frame.js';
import { decodeStep, encodeStep } from '../../src/raft/transport/handshake.js';

const bytes = (...b: number[]): Uint8Array => Uint8Array.from(b);

/** A message of `type` with every field set to something other than its zero value. */
function full(type: Message['type'], n: number): Message {
  return message({
    type,
    from: 1 + n,
    to: 2 ** 31 + n,
    term: Number.MAX_SAFE_INTEGER - n,
    logTerm: 127 + n,
    index: 128 + n,
    commit: 2 ** 40 + n,
    reject: n % 2 === 0,
    rejectHint: 16384 + n,
    entries: [
      { term: 3, index: 10, type: 'normal', data: bytes(1, 2, 3) },
      { term: 3, index: 11, type: 'confChange', data: new TextEncoder().encode('{"t":"auto","c":[["addNode",4]]}') },
      { term: 4, index: 12, type: 'normal', data: new Uint8Array(0) },
    ],
    snapshot: {
      metadata: {
        index: 99,
        term: 7,
        confState: { voters: [1, 2, 3], learners: [4], votersOutgoing: [1, 2, 5], learnersNext: [5], autoLeave: true },
      },
      data: Uint8Array.from({ length: 300 }, (_, i) => i & 0xff),
    },
    context: `read-${n}-é-✓`,
    transferee: 3 + n,
  });
}

describe('Raft transport codec', () => {
  it('round-trips every message type with every field set', () => {
    const all = MESSAGE_TYPES.map((t, i) => full(t, i));
    const decoded = decodeMessages(encodeMessages(all));
    expect(decoded).toEqual(all);
    for (const [i, m] of decoded.entries()) {
      expect(m.entries[0]!.data).toBeInstanceOf(Uint8Array);
      expect(m.snapshot!.data).toEqual(all[i]!.snapshot!.data);
    }
  });

  it('round-trips every message type with zero values (no optional field present)', () => {
    const all = MESSAGE_TYPES.map((type) => message({ type }));
    const encoded = encodeMessages(all);
    expect(encoded.length).toBe(batchSize(all));
    const decoded = decodeMessages(encoded);
    expect(decoded).toEqual(all);
    for (const m of decoded) {
      expect('snapshot' in m).toBe(false);
      expect('context' in m).toBe(false);
      expect('transferee' in m).toBe(false);
    }
  });

  it('is compact: a heartbeat takes 11 bytes, an append of one 100-byte entry 117', () => {
    expect(messageSize(message({ type: 'heartbeat', from: 1, to: 2, term: 5, commit: 1000 }))).toBe(11);
    const app = message({ type: 'app', from: 1, to: 2, term: 5, logTerm: 5, index: 1000, commit: 999, entries: [{ term: 5, index: 1001, type: 'normal', data: new Uint8Array(100) }] });
    expect(messageSize(app)).toBe(117);
    expect(decodeMessages(encodeMessages([app]))).toEqual([app]);
  });

  it('copies decoded entry data out of the receive buffer', () => {
    const m = message({ type: 'app', from: 1, to: 2, entries: [{ term: 1, index: 1, type: 'normal', data: bytes(9, 9, 9) }] });
    const buf = encodeMessages([m]);
    const decoded = decodeMessages(buf);
    buf.fill(0);
    expect(decoded[0]!.entries[0]!.data).toEqual(bytes(9, 9, 9));
  });

  it('refuses malformed batches with a FrameError naming the fault', () => {
    const good = encodeMessages([full('app', 1)]);
    expect(() => decodeMessages(good.subarray(0, good.length - 1))).toThrow(FrameError);
    expect(() => decodeMessages(Buffer.concat([good, bytes(0)]))).toThrow(/after the last message/);
    expect(() => decodeMessages(bytes(1, 200, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0))).toThrow(/unknown message type code 200/);
    // 2^53 claimed as a term: ten 0xff bytes.
    expect(() => decodeMessages(bytes(1, 8, 0, 1, 2, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f))).toThrow(/varint longer than 8 bytes|over 2\^53/);
    // A count of 2^40 entries in a few bytes is refused before any loop or allocation.
    expect(() => decodeMessages(bytes(1, 8, 0, 1, 2, 0, 0, 0, 0, 0, 0x80, 0x80, 0x80, 0x80, 0x80, 0x20))).toThrow(/entry count/);
    expect(() => decodeMessages(new Uint8Array(0))).toThrow(FrameError);
  });

  it('decodes random bytes and mutated batches to a FrameError or a message list, nothing else, quickly', () => {
    const random = new SeededRandom(24);
    const valid = encodeMessages(MESSAGE_TYPES.map((t, i) => full(t, i)));
    let refused = 0;
    let decoded = 0;
    const started = performance.now();
    for (let i = 0; i < 20_000; i++) {
      let input: Uint8Array;
      const mode = i % 3;
      if (mode === 0) {
        input = Uint8Array.from({ length: Math.floor(random.next() * 200) }, () => Math.floor(random.next() * 256));
      } else if (mode === 1) {
        input = Uint8Array.from(valid);
        const flips = 1 + Math.floor(random.next() * 4);
        for (let f = 0; f < flips; f++) input[Math.floor(random.next() * input.length)] = Math.floor(random.next() * 256);
      } else {
        input = valid.subarray(0, Math.floor(random.next() * valid.length));
      }
      try {
        decodeMessages(input);
        decoded++;
      } catch (err) {
        if (!(err instanceof FrameError)) throw new Error(`input ${i} (${Buffer.from(input).toString('hex')}) threw ${String(err)}`);
        refused++;
      }
    }
    expect(refused + decoded).toBe(20_000);
    expect(refused).toBeGreaterThan(15_000);
    expect(performance.now() - started).toBeLessThan(30_000);
  });

  it('handshake steps: round trip, and random bytes give a FrameError only', () => {
    const nonce = new Uint8Array(32).fill(7);
    const steps = [
      { step: 'hello', dialer: 1, acceptor: 2, clusterId: 'prod-ç', nonce, incarnation: Buffer.alloc(8, 3) },
      { step: 'challenge', nonce, incarnation: Buffer.alloc(8, 4) },
      { step: 'auth', mac: nonce },
      { step: 'accept', mac: nonce },
      { step: 'refuse', reason: 'auth-failed' },
    ] as const;
    for (const s of steps) expect(decodeStep(encodeStep(s))).toEqual({ ...s, ...('nonce' in s ? { nonce: Buffer.from(nonce) } : {}), ...('mac' in s ? { mac: Buffer.from(nonce) } : {}) });
    const random = new SeededRandom(7);
    for (let i = 0; i < 5000; i++) {
      const input = Uint8Array.from({ length: Math.floor(random.next() * 80) }, () => Math.floor(random.next() * 256));
      try {
        decodeStep(input);
      } catch (err) {
        if (!(err instanceof FrameError)) throw new Error(`handshake input ${Buffer.from(input).toString('hex')} threw ${String(err)}`);
      }
    }
  });

  it('frame reader: frames split at every byte boundary come out whole; bad headers are FrameErrors', () => {
    const a = frame(FrameKind.peerMessages, encodeMessages([full('app', 1)]));
    const b = frame(FrameKind.handshake, bytes(1, 2, 3));
    const stream = Buffer.concat([a, b, a]);
    for (let cut = 1; cut < stream.length; cut += 7) {
      const got: [number, string][] = [];
      const r = new FrameReader(1 << 20, (kind, body) => got.push([kind, Buffer.from(body).toString('hex')]));
      r.push(stream.subarray(0, cut));
      r.push(stream.subarray(cut));
      expect(got.map(([k]) => k)).toEqual([FrameKind.peerMessages, FrameKind.handshake, FrameKind.peerMessages]);
      expect(got[0]![1]).toBe(a.subarray(HEADER_BYTES).toString('hex'));
    }
    const claim4GiB = Buffer.from([0xff, 0xff, 0xff, 0xff, PROTOCOL_VERSION, FrameKind.peerMessages]);
    expect(() => new FrameReader(64 << 20, () => {}).push(claim4GiB)).toThrow(/claims 4294967295 bytes, more than the limit of 67108864/);
    expect(() => new FrameReader(1024, () => {}).push(Buffer.from([0, 0, 0, 1, 0, FrameKind.peerMessages]))).toThrow(/protocol version 0/);
    expect(() => new FrameReader(1024, () => {}).push(Buffer.from([0, 0, 0, 1, PROTOCOL_VERSION, 9]))).toThrow(/unknown frame kind 9/);
    const random = new SeededRandom(3);
    for (let i = 0; i < 5000; i++) {
      const input = Buffer.from(Uint8Array.from({ length: Math.floor(random.next() * 64) }, () => Math.floor(random.next() * 256)));
      try {
        new FrameReader(1024, () => {}).push(input);
      } catch (err) {
        if (!(err instanceof FrameError)) throw err;
      }
    }
  });
});
