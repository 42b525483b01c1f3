/**
 * The authentication at connect: both ends prove they hold the cluster's shared secret, neither
 * ever sends it. Four steps, each one handshake frame:
 *
 *   dialer   -> acceptor  hello     { dialer id, acceptor id, cluster id, dialer nonce, incarnation }
 *   acceptor -> dialer    challenge { acceptor nonce, incarnation }
 *   dialer   -> acceptor  auth      { HMAC(secret, 'dialer'   | cluster | ids | nonces | incarnations) }
 *   acceptor -> dialer    accept    { HMAC(secret, 'acceptor' | cluster | ids | nonces | incarnations) }
 *
 * The incarnation is random per transport instance: a connection from a peer's new incarnation
 * replaces one from its old (a restarted process, or a host that went away without closing), so
 * a dead connection never outranks a live one.
 *
 * or `refuse { reason }` from the acceptor at any step. Nonces are 32 bytes from
 * crypto.randomBytes, so a recorded exchange cannot be replayed; the role label in each MAC
 * stops one side's proof from being reflected back as the other's; MACs are compared in
 * constant time. The acceptor checks the dialer first and answers with its own proof only then,
 * so a stranger learns nothing it could use.
 */
import { createHmac, randomBytes, timingSafeEqual } from 'node:crypto';
import type { NodeId } from '../core/types.js';
import { FrameError, type RefusalReason } from './errors.js';
import { Reader, Writer, varintSize } from './codec.js';

export const NONCE_BYTES = 32;
export const INCARNATION_BYTES = 8;
export const MAC_BYTES = 32;
/** A cluster id's longest UTF-8 form, bytes. */
export const CLUSTER_ID_MAX_BYTES = 256;
/** Handshake frames are small: before authentication nothing larger is read. */
export const HANDSHAKE_MAX_FRAME_BYTES = 1024;

export type HandshakeStep =
  | { readonly step: 'hello'; readonly dialer: NodeId; readonly acceptor: NodeId; readonly clusterId: string; readonly nonce: Uint8Array; readonly incarnation: Uint8Array }
  | { readonly step: 'challenge'; readonly nonce: Uint8Array; readonly incarnation: Uint8Array }
  | { readonly step: 'auth'; readonly mac: Uint8Array }
  | { readonly step: 'accept'; readonly mac: Uint8Array }
  | { readonly step: 'refuse'; readonly reason: RefusalReason };

const STEPS = ['hello', 'challenge', 'auth', 'accept', 'refuse'] as const;
/** The position is the wire code: append only. */
const REASONS: readonly RefusalReason[] = ['cluster-mismatch', 'unknown-peer', 'wrong-node', 'auth-failed', 'version', 'protocol', 'removed', 'timeout', 'busy', 'certificate', 'tls-required'];
const utf8 = new TextDecoder('utf-8', { fatal: true });

export function newNonce(): Buffer {
  return randomBytes(NONCE_BYTES);
}

export function newIncarnation(): Buffer {
  return randomBytes(INCARNATION_BYTES);
}

/** The body of a handshake frame. */
export function encodeStep(s: HandshakeStep): Buffer {
  switch (s.step) {
    case 'hello': {
      const id = Buffer.from(s.clusterId, 'utf8');
      const buf = Buffer.allocUnsafe(1 + varintSize(s.dialer) + varintSize(s.acceptor) + varintSize(id.length) + id.length + NONCE_BYTES + INCARNATION_BYTES);
      const w = new Writer(buf);
      w.u8(0);
      w.varint(s.dialer);
      w.varint(s.acceptor);
      w.varint(id.length);
      w.bytes(id);
      w.bytes(s.nonce);
      w.bytes(s.incarnation);
      return buf;
    }
    case 'challenge':
      return Buffer.concat([Buffer.of(1), s.nonce, s.incarnation]);
    case 'auth':
      return Buffer.concat([Buffer.of(2), s.mac]);
    case 'accept':
      return Buffer.concat([Buffer.of(3), s.mac]);
    case 'refuse':
      return Buffer.of(4, REASONS.indexOf(s.reason));
  }
}

/** Decodes a handshake frame's body; FrameError on anything malformed. */
export function decodeStep(body: Uint8Array): HandshakeStep {
  const r = new Reader(body);
  const code = r.u8('handshake step');
  const step = STEPS[code];
  let out: HandshakeStep;
  switch (step) {
    case 'hello': {
      const dialer = r.varint('dialer id');
      const acceptor = r.varint('acceptor id');
      const len = r.length('cluster id');
      if (len > CLUSTER_ID_MAX_BYTES) throw new FrameError(`cluster id of ${len} bytes, at most ${CLUSTER_ID_MAX_BYTES}`);
      let clusterId: string;
      try {
        clusterId = utf8.decode(r.view(len, 'cluster id'));
      } catch {
        throw new FrameError('cluster id is not valid UTF-8');
      }
      const nonce = Buffer.from(r.view(NONCE_BYTES, 'nonce'));
      out = { step, dialer, acceptor, clusterId, nonce, incarnation: Buffer.from(r.view(INCARNATION_BYTES, 'incarnation')) };
      break;
    }
    case 'challenge': {
      const nonce = Buffer.from(r.view(NONCE_BYTES, 'nonce'));
      out = { step, nonce, incarnation: Buffer.from(r.view(INCARNATION_BYTES, 'incarnation')) };
      break;
    }
    case 'auth':
    case 'accept':
      out = { step, mac: Buffer.from(r.view(MAC_BYTES, 'mac')) };
      break;
    case 'refuse': {
      const reason = REASONS[r.u8('refusal reason')] ?? 'protocol';
      out = { step, reason };
      break;
    }
    default:
      throw new FrameError(`unknown handshake step ${code}`);
  }
  if (r.left !== 0) throw new FrameError(`${r.left} bytes after the handshake ${step}`);
  return out;
}

/** What both MACs of one connection cover. */
export interface HandshakeContext {
  readonly clusterId: string;
  readonly dialer: NodeId;
  readonly acceptor: NodeId;
  readonly dialerNonce: Uint8Array;
  readonly acceptorNonce: Uint8Array;
  readonly dialerIncarnation: Uint8Array;
  readonly acceptorIncarnation: Uint8Array;
}

/** The proof of `role` for this connection: HMAC-SHA256 over every field, each length-framed. */
export function handshakeMac(secret: Uint8Array, role: 'dialer' | 'acceptor', c: HandshakeContext): Buffer {
  const h = createHmac('sha256', secret);
  const cluster = Buffer.from(c.clusterId, 'utf8');
  const fixed = Buffer.alloc(2 + 4 + 16);
  fixed.writeUInt8(PROTOCOL_MAC_VERSION, 0);
  fixed.writeUInt8(role === 'dialer' ? 1 : 2, 1);
  fixed.writeUInt32BE(cluster.length, 2);
  fixed.writeBigUInt64BE(BigInt(c.dialer), 6);
  fixed.writeBigUInt64BE(BigInt(c.acceptor), 14);
  h.update('tenure-raft-handshake');
  h.update(fixed);
  h.update(cluster);
  h.update(c.dialerNonce);
  h.update(c.acceptorNonce);
  h.update(c.dialerIncarnation);
  h.update(c.acceptorIncarnation);
  return h.digest();
}
const PROTOCOL_MAC_VERSION = 1;

/** Whether `mac` is the expected proof, compared in constant time. */
export function macMatches(expected: Uint8Array, mac: Uint8Array): boolean {
  return mac.byteLength === expected.byteLength && timingSafeEqual(expected, mac);
}

/** A reason as a phrase for log lines. */
export function reasonText(reason: RefusalReason): string {
  switch (reason) {
    case 'cluster-mismatch':
      return 'cluster id mismatch';
    case 'unknown-peer':
      return 'unknown peer id';
    case 'wrong-node':
      return 'dialed another node id';
    case 'auth-failed':
      return 'authentication failed (wrong secret?)';
    case 'version':
      return 'protocol version mismatch';
    case 'protocol':
      return 'protocol error';
    case 'removed':
      return 'peer removed';
    case 'timeout':
      return 'handshake timed out';
    case 'busy':
      return 'too many store clients connected';
    case 'certificate':
      return 'TLS client certificate not accepted (none, expired, or not signed by the cluster CA)';
    case 'tls-required':
      return 'this node takes TLS connections only';
  }
}
