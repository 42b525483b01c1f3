/**
 * The Raft transport's typed error, a TenureError, and the reasons a connection is refused at
 * its handshake. Neither ever carries the cluster secret.
 */
import { TenureError } from '../../core/errors.js';

/**
 * Bytes from the wire that are not a valid frame or message: a bad header, a length over the
 * limit, a truncated or over-long field, an unknown type code. The decoder throws nothing else,
 * whatever the input; the transport closes the connection that sent them.
 */
export class FrameError extends TenureError {
  constructor(message: string) {
    super('FRAME_INVALID', message);
  }
}

/** Why a connection was refused at its handshake. */
export type RefusalReason =
  | 'cluster-mismatch'
  | 'unknown-peer'
  | 'wrong-node'
  | 'auth-failed'
  | 'version'
  | 'protocol'
  | 'removed'
  | 'timeout'
  | 'busy'
  | 'certificate'
  | 'tls-required';
