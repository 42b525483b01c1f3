/**
 * One authenticated connection from a `raft://` client to one Raft store node: the transport's
 * handshake in the client role (hello with dialer id 0, the node's challenge, the client's HMAC
 * proof, the node's HMAC proof checked in constant time), then requests and answers by id, and
 * watch pushes (client-protocol.ts). The secret is never sent and never appears in an error.
 */
import net from 'node:net';
import tls from 'node:tls';
import { InvalidArgumentError, StoreUnavailableError } from '../../core/index.js';
import { CLIENT_DIALER_ID, FrameError, FrameKind, type PeerAddress } from '../../raft/transport/index.js';
import { FrameReader, frame } from '../../raft/transport/frame.js';
import {
  HANDSHAKE_MAX_FRAME_BYTES,
  decodeStep,
  encodeStep,
  handshakeMac,
  macMatches,
  newIncarnation,
  newNonce,
  reasonText,
  type HandshakeContext,
} from '../../raft/transport/handshake.js';
import { CLIENT_RESPONSE_MAX_BYTES, decodeJson, encodeJson, type ClientAnswer, type ClientPush, type ClientRequest } from './client-protocol.js';

/** Distributive Omit: a request without its id, for each kind of request. */
export type RequestBody = ClientRequest extends infer R ? (R extends ClientRequest ? Omit<R, 'id'> : never) : never;

/**
 * The node refused the client at its handshake for a reason a retry does not cure (wrong
 * secret, another cluster): the store stops trying instead of looping until its deadline.
 */
export class RaftClientRefusedError extends StoreUnavailableError {
  constructor(
    readonly address: string,
    readonly reason: string,
  ) {
    super(`raft store node ${address} refused the client: ${reason}`);
  }
}

/** The connection was lost (or could not be made) before the answer came. */
export class ConnectionLostError extends StoreUnavailableError {}

interface Pending {
  resolve(answer: ClientAnswer): void;
  reject(err: unknown): void;
}

/** TLS to the nodes (`rafts://`): what the client trusts and the certificate it shows, PEM. */
export interface RaftClientTlsOptions {
  /** The CA the nodes' certificates chain to (default: Node's bundled root CAs). */
  readonly ca?: string | Buffer | readonly (string | Buffer)[];
  /** This client's certificate and key, for nodes that require one (both or neither). */
  readonly cert?: string | Buffer;
  readonly key?: string | Buffer;
  /** The name the nodes' certificates must carry (default: the host of each member's address). */
  readonly servername?: string;
}

export interface ConnectOptions {
  readonly clusterId: string;
  readonly secret: Uint8Array;
  /** The handshake must be done within this many ms. */
  readonly timeoutMs: number;
  /** A secure context made once from the client's TLS options (`clientSecureContext`); none: plaintext. */
  readonly tls?: { readonly context: tls.SecureContext; readonly servername?: string };
}

/**
 * The secure context of a client's TLS options, made (and its files' contents checked) once.
 * InvalidArgumentError (field `tls`) naming what is wrong, never quoting a key.
 */
export function clientSecureContext(options: RaftClientTlsOptions): tls.SecureContext {
  if ((options.cert === undefined) !== (options.key === undefined)) throw new InvalidArgumentError('tls', 'a client certificate needs both cert and key');
  try {
    return tls.createSecureContext({
      minVersion: 'TLSv1.2',
      ...(options.ca !== undefined ? { ca: options.ca as tls.SecureContextOptions['ca'] } : {}),
      ...(options.cert !== undefined ? { cert: options.cert, key: options.key } : {}),
    });
  } catch (err) {
    // OpenSSL's reason ("key values mismatch", "no start line"), which quotes nothing of the files.
    throw new InvalidArgumentError('tls', `the CA, certificate or key cannot be used: ${(err as Error).message}`);
  }
}

/**
 * The certificate checks of the client (or the node's answer to them) that a retry does not
 * cure: an untrusted or expired node certificate, or one for another name.
 */
function certificateProblem(err: NodeJS.ErrnoException): boolean {
  return CERTIFICATE_CODES.has(err.code ?? '');
}
const CERTIFICATE_CODES = new Set([
  'ERR_TLS_CERT_ALTNAME_INVALID',
  'UNABLE_TO_GET_ISSUER_CERT',
  'UNABLE_TO_GET_ISSUER_CERT_LOCALLY',
  'UNABLE_TO_VERIFY_LEAF_SIGNATURE',
  'UNABLE_TO_DECRYPT_CERT_SIGNATURE',
  'CERT_SIGNATURE_FAILURE',
  'SELF_SIGNED_CERT_IN_CHAIN',
  'DEPTH_ZERO_SELF_SIGNED_CERT',
  'CERT_HAS_EXPIRED',
  'CERT_NOT_YET_VALID',
  'CERT_UNTRUSTED',
  'CERT_REJECTED',
  'CERT_REVOKED',
  'CERT_CHAIN_TOO_LONG',
  'PATH_LENGTH_EXCEEDED',
  'INVALID_CA',
  'INVALID_PURPOSE',
  'HOSTNAME_MISMATCH',
  'IP_ADDRESS_MISMATCH',
]);

export class ClientConnection {
  private readonly pending = new Map<number, Pending>();
  private nextId = 1;
  private closedWith: Error | undefined;
  private pushHandler: ((push: ClientPush) => void) | null = null;
  private closeHandlers: (() => void)[] = [];

  private constructor(
    readonly address: string,
    private readonly socket: net.Socket,
    reader: FrameReader,
  ) {
    reader.maxFrameBytes = CLIENT_RESPONSE_MAX_BYTES;
    socket.on('close', () => this.lost(new ConnectionLostError(`connection to raft store node ${address} closed`)));
  }

  /** Connects and authenticates; rejects with RaftClientRefusedError or ConnectionLostError. */
  static connect(address: PeerAddress, options: ConnectOptions): Promise<ClientConnection> {
    const text = `${address.host.includes(':') ? `[${address.host}]` : address.host}:${address.port}`;
    return new Promise((resolve, reject) => {
      const secure = options.tls;
      const socket = secure
        ? tls.connect({ host: address.host, port: address.port, secureContext: secure.context, ...(secure.servername !== undefined ? { servername: secure.servername } : {}) })
        : net.connect({ host: address.host, port: address.port, noDelay: true });
      let opened = false;
      const nonce = newNonce();
      const incarnation = newIncarnation();
      let ctx: HandshakeContext | null = null;
      let conn: ClientConnection | null = null;
      let settled = false;
      const fail = (err: Error): void => {
        if (settled) {
          conn?.lost(err);
          return;
        }
        settled = true;
        clearTimeout(timer);
        socket.destroy();
        reject(err);
      };
      const timer = setTimeout(() => fail(new ConnectionLostError(`raft store node ${text}: handshake not done within ${options.timeoutMs} ms`)), options.timeoutMs);
      const reader = new FrameReader(HANDSHAKE_MAX_FRAME_BYTES, (kind, body) => {
        if (conn !== null) {
          conn.onFrame(kind, body);
          return;
        }
        if (kind !== FrameKind.handshake) throw new FrameError(`a ${kind} frame during the handshake`);
        const step = decodeStep(body);
        if (step.step === 'refuse') {
          const why = reasonText(step.reason);
          if (step.reason === 'tls-required') {
            fail(new RaftClientRefusedError(text, `${why}: connect with rafts:// (or ?tls=1), with the cluster's CA`));
            return;
          }
          const final = step.reason === 'auth-failed' || step.reason === 'cluster-mismatch' || step.reason === 'protocol' || step.reason === 'certificate';
          fail(final ? new RaftClientRefusedError(text, why) : new ConnectionLostError(`raft store node ${text} refused the client: ${why}`));
          return;
        }
        if (step.step === 'challenge' && ctx === null) {
          ctx = {
            clusterId: options.clusterId,
            dialer: CLIENT_DIALER_ID,
            acceptor: CLIENT_DIALER_ID,
            dialerNonce: nonce,
            acceptorNonce: Buffer.from(step.nonce),
            dialerIncarnation: incarnation,
            acceptorIncarnation: Buffer.from(step.incarnation),
          };
          socket.write(frame(FrameKind.handshake, encodeStep({ step: 'auth', mac: handshakeMac(options.secret, 'dialer', ctx) })));
          return;
        }
        if (step.step === 'accept' && ctx !== null) {
          if (!macMatches(handshakeMac(options.secret, 'acceptor', ctx), step.mac)) {
            fail(new RaftClientRefusedError(text, 'the node did not prove the cluster secret (wrong secret?)'));
            return;
          }
          settled = true;
          clearTimeout(timer);
          conn = new ClientConnection(text, socket, reader);
          resolve(conn);
          return;
        }
        throw new FrameError(`unexpected handshake step ${step.step}`);
      });
      socket.on('data', (chunk: Buffer) => {
        try {
          reader.push(chunk);
        } catch (err) {
          fail(err instanceof Error ? err : new Error(String(err)));
          socket.destroy();
        }
      });
      socket.on('error', (err: NodeJS.ErrnoException) => {
        if (secure && certificateProblem(err)) fail(new RaftClientRefusedError(text, `its TLS certificate is not accepted: ${err.message}`));
        else if (secure && !opened && err.code === 'ERR_SSL_WRONG_VERSION_NUMBER') fail(new RaftClientRefusedError(text, 'it answered a TLS handshake in the clear: the node serves without TLS (connect with raft://, or start every node with --tls-cert, --tls-key and --tls-ca)'));
        else if (secure && !opened) fail(new ConnectionLostError(`cannot reach raft store node ${text} over TLS: ${err.message}`));
        else fail(new ConnectionLostError(`cannot reach raft store node ${text}: ${err.message}`));
      });
      socket.on('close', () => fail(new ConnectionLostError(`raft store node ${text} closed the connection during the handshake`)));
      socket.once(secure ? 'secureConnect' : 'connect', () => {
        opened = true;
        socket.setNoDelay(true);
        socket.setKeepAlive(true, 10_000);
        socket.write(frame(FrameKind.handshake, encodeStep({ step: 'hello', dialer: CLIENT_DIALER_ID, acceptor: CLIENT_DIALER_ID, clusterId: options.clusterId, nonce, incarnation })));
      });
    });
  }

  get closed(): boolean {
    return this.closedWith !== undefined;
  }

  /** Each push (a watch's change). One handler. */
  onPush(handler: (push: ClientPush) => void): void {
    this.pushHandler = handler;
  }

  /** Told once when the connection is gone. */
  onClose(handler: () => void): void {
    if (this.closedWith) queueMicrotask(handler);
    else this.closeHandlers.push(handler);
  }

  /**
   * Sends a request; resolves with its answer. Rejects with ConnectionLostError when the
   * connection goes first, or when no answer came within `timeoutMs` (then the connection is
   * dropped: a node that does not answer is not asked again on it).
   */
  request(body: RequestBody, timeoutMs: number): Promise<ClientAnswer> {
    if (this.closedWith) return Promise.reject(this.closedWith);
    const id = this.nextId++;
    return new Promise<ClientAnswer>((resolve, reject) => {
      const timer = setTimeout(() => {
        this.pending.delete(id);
        reject(new ConnectionLostError(`raft store node ${this.address}: no answer within ${timeoutMs} ms`));
        this.close();
      }, timeoutMs);
      this.pending.set(id, {
        resolve: (a) => (clearTimeout(timer), resolve(a)),
        reject: (e) => (clearTimeout(timer), reject(e)),
      });
      this.socket.write(frame(FrameKind.clientRequest, encodeJson({ ...body, id })));
    });
  }

  close(): void {
    this.lost(new ConnectionLostError(`connection to raft store node ${this.address} closed`));
  }

  private onFrame(kind: number, body: Buffer): void {
    if (kind !== FrameKind.clientResponse) throw new FrameError(`a frame of kind ${kind} from a raft store node`);
    const o = decodeJson(body);
    if (typeof o.watch === 'number') {
      this.pushHandler?.(o as unknown as ClientPush);
      return;
    }
    const id = o.id;
    const p = typeof id === 'number' ? this.pending.get(id) : undefined;
    if (p === undefined) return; // an answer to a request given up on
    this.pending.delete(id as number);
    p.resolve(o as unknown as ClientAnswer);
  }

  private lost(err: Error): void {
    if (this.closedWith) return;
    this.closedWith = err;
    this.socket.destroy();
    for (const p of this.pending.values()) p.reject(err);
    this.pending.clear();
    for (const h of this.closeHandlers.splice(0)) h();
  }
}
