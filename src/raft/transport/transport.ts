/**
 * The Raft transport: TCP (or TLS) connections between the nodes of one cluster, carrying the
 * core's messages as length-prefixed frames (frame.ts, codec.ts).
 *
 * - One connection per peer pair. Either node dials when it has something to send and no
 *   connection; when both dial at once, the connection dialed by the lower node id is kept on
 *   both sides (and, between two connections from the same dialer, the newer one). The loser is
 *   no longer written and is closed after a grace period, so frames already on it are still read.
 * - Sends are pipelined and batched: `send` only queues; once per tick (a microtask) every peer
 *   with queued messages gets them as one frame written to a corked socket, without waiting for
 *   any answer. A peer whose socket does not drain keeps its messages in its own queue, bounded
 *   in messages and bytes; past the bound messages are dropped and counted. No peer's queue or
 *   socket ever waits on another's.
 * - Lost connections are dialed again with exponential back-off and jitter (the injected Random
 *   and Clock), for as long as messages wait.
 * - Every connection is authenticated before any message is read (handshake.ts): same cluster id,
 *   a known peer id, the shared secret proven by HMAC both ways; optionally inside TLS with
 *   client certificates. A refused or malformed connection is closed with one log line (never the
 *   secret) and the node keeps serving.
 * - A snapshot message larger than one chunk is sent as chunk frames (its data is written as
 *   views, not copied), one chunk between batches of other messages so that heartbeats overtake
 *   it, and reassembled on the other side up to a bound.
 */
import net from 'node:net';
import tls from 'node:tls';
import { systemClock, type Clock } from '../../core/clock.js';
import { ClosedError, InvalidArgumentError } from '../../core/errors.js';
import { systemRandom, type Random } from '../../core/random.js';
import { isLocalMessage, type Message, type NodeId } from '../core/types.js';
import { Reader, Writer, decodeMessages, messageSize, readMessage, varintSize, writeMessage } from './codec.js';
import { FrameError, type RefusalReason } from './errors.js';
import { FrameKind, FrameReader, HEADER_BYTES, VersionError, header, frame, kindName, writeHeader } from './frame.js';
import {
  CLUSTER_ID_MAX_BYTES,
  HANDSHAKE_MAX_FRAME_BYTES,
  decodeStep,
  encodeStep,
  handshakeMac,
  macMatches,
  newIncarnation,
  newNonce,
  reasonText,
  type HandshakeContext,
  type HandshakeStep,
} from './handshake.js';

/** Where a peer listens. */
export interface PeerAddress {
  readonly host: string;
  readonly port: number;
}

/**
 * TLS with mutual certificates: this node's key and certificate (PEM), and the CA its peers'
 * certificates chain to. Every connection to the node must then be TLS (a plaintext one is
 * refused with `tls-required`), every peer must present a certificate the CA signed and that has
 * not expired, and the cluster secret is still proven inside (the HMAC handshake): a stolen
 * certificate alone, or the secret alone, gets nobody in.
 */
export interface TransportTlsOptions {
  readonly key: string | Buffer;
  readonly cert: string | Buffer;
  readonly ca: string | Buffer | readonly (string | Buffer)[];
  /** The name the peers' server certificates are checked against (default: the dialed host). */
  readonly servername?: string;
  /**
   * Let store clients (`rafts://`, dialer id 0) in without a client certificate, on the cluster
   * secret alone (default false: they need one, as peers do). A certificate that is presented
   * but not accepted is refused either way, and peers always need one.
   */
  readonly clientsWithoutCert?: boolean;
}

export interface TransportOptions {
  /** This node's id, a positive integer. */
  readonly id: NodeId;
  /** The cluster's name; a peer with another is refused. 1..256 bytes of UTF-8. */
  readonly clusterId: string;
  /** The cluster's shared secret, at least 16 bytes. Never logged, never sent. */
  readonly secret: string | Uint8Array;
  /** Where to listen; port 0 picks a free port (see `address`). */
  readonly listen: PeerAddress | string;
  /** The other nodes (this node's own id is ignored). */
  readonly peers?: ReadonlyMap<NodeId, PeerAddress | string> | Readonly<Record<number, PeerAddress | string>>;
  readonly tls?: TransportTlsOptions;
  readonly clock?: Clock;
  readonly random?: Random;
  /** Where the transport's log lines go (default: stderr). */
  readonly log?: (line: string) => void;
  /** Largest frame body accepted or sent, bytes (default 64 MiB). */
  readonly maxFrameBytes?: number;
  /** Snapshot data per chunk frame, bytes (default 1 MiB). */
  readonly snapshotChunkBytes?: number;
  /** Largest snapshot data reassembled from chunks, bytes (default 1 GiB). */
  readonly maxSnapshotBytes?: number;
  /** Messages queued per peer before new ones are dropped (default 4096). */
  readonly maxQueuedMessages?: number;
  /** Encoded bytes queued per peer before new messages are dropped (default 64 MiB; one message alone is always taken). */
  readonly maxQueuedBytes?: number;
  /** A connection not authenticated within this many ms is closed (default 5000). */
  readonly handshakeTimeoutMs?: number;
  /** Store client connections open at once (default 1024); more are refused at their hello with `busy`. */
  readonly maxClients?: number;
  /** Largest frame body a store client may send, bytes (default 8 MiB); a larger one closes its connection. */
  readonly maxClientFrameBytes?: number;
  /** First reconnect delay, ms (default 50); doubles per failure up to `reconnectMaxMs`. */
  readonly reconnectMinMs?: number;
  /** Longest reconnect delay, ms (default 2000). Each delay is jittered to [50%, 100%]. */
  readonly reconnectMaxMs?: number;
}

/** One peer's counters. */
export interface PeerStats {
  readonly id: NodeId;
  readonly address: PeerAddress;
  readonly connected: boolean;
  /** Messages waiting in this node's queue for the peer (not yet handed to the socket), snapshots included. */
  readonly queued: number;
  /** Their encoded bytes, without the data of chunked snapshots (the node's own buffers, not copies). */
  readonly queuedBytes: number;
  /** Messages dropped because the queue was full (or a message could not be framed). */
  readonly dropped: number;
  /** Connections established after the first one. */
  readonly reconnects: number;
  /** Messages handed to the socket. */
  readonly sent: number;
  /** Frames written (a frame holds a batch of messages, or one snapshot chunk). */
  readonly sentFrames: number;
  readonly received: number;
}

export interface TransportStats {
  readonly peers: readonly PeerStats[];
  readonly queued: number;
  readonly dropped: number;
  readonly reconnects: number;
  /** Messages addressed to a node that is not a peer. */
  readonly droppedUnknownPeer: number;
}

export const transportDefaults = {
  maxFrameBytes: 64 * 1024 * 1024,
  snapshotChunkBytes: 1024 * 1024,
  maxSnapshotBytes: 1024 * 1024 * 1024,
  maxQueuedMessages: 4096,
  maxQueuedBytes: 64 * 1024 * 1024,
  handshakeTimeoutMs: 5000,
  maxClients: 1024,
  maxClientFrameBytes: 8 * 1024 * 1024,
  reconnectMinMs: 50,
  reconnectMaxMs: 2000,
} as const;

/** Messages are framed together up to this many bytes (one socket write per frame). */
const BATCH_BYTES = 1024 * 1024;
/**
 * TCP keepalive after this much idle time, ms: a peer whose host vanished (no FIN, no RST) is
 * found out by the kernel even when nothing is being sent to it.
 */
const KEEPALIVE_MS = 10_000;
/**
 * Accepted connections in their handshake at once; more are closed at accept. Each costs at most
 * a 1 KiB frame buffer for at most `handshakeTimeoutMs`, so a flood costs a bounded amount.
 */
const MAX_PENDING_HANDSHAKES = 64;
/** The first byte of a TLS connection: a record of content type handshake (the ClientHello). */
const TLS_HANDSHAKE_RECORD = 0x16;
/** A refused connection is closed after its refusal is flushed, or after this many ms at most. */
const REFUSE_LINGER_MS = 1000;
/** How long a connection that lost the tie is still read before it is closed, ms. */
const RETIRE_GRACE_MS = 2000;
/**
 * Chunked snapshots queued per peer (the leader sends one at a time; a second waits for the
 * first). Their data is not counted in `maxQueuedBytes`: it is the node's own buffer, not a copy.
 */
const MAX_QUEUED_SNAPSHOTS = 2;
/** The queue's array is compacted once this many sent items sit before its head. */
const COMPACT_AT = 1024;

interface QueueItem {
  readonly message: Message;
  readonly size: number;
}

/** A snapshot too large for one chunk: sent as chunk frames, the next from `offset`. */
interface SnapshotItem {
  readonly message: Message;
  offset: number;
  seq: number;
}

interface SnapshotAssembly {
  readonly seq: number;
  readonly message: Message;
  readonly data: Buffer;
  received: number;
}

/** `client`: an authenticated store client, its frames handed to the client handler. */
type ConnState = 'handshake' | 'open' | 'client' | 'closed';

/**
 * An authenticated store client's connection, as the transport hands it to the client handler
 * (the Raft store's server). Its frames are client requests in, client responses out; anything
 * else closes it.
 */
export interface ClientLink {
  /** `host:port` of the client, for log lines. */
  readonly remote: string;
  /** Writes one response frame. False when the socket's buffer is over its high-water mark. */
  send(body: Uint8Array): boolean;
  /** Bytes written but not yet taken by the kernel (the handler bounds a slow reader with it). */
  readonly bufferedBytes: number;
  /** Closes the connection; `why` becomes one log line. */
  close(why: string): void;
  /** Each request frame's body. One handler; a later call replaces it. */
  onRequest(handler: (body: Buffer) => void): void;
  /** Told once when the connection is gone. */
  onClose(handler: () => void): void;
}

/** The dialer id a store client sends in its hello: 0, never a node's id. */
export const CLIENT_DIALER_ID = 0;

interface Conn {
  readonly socket: net.Socket;
  readonly reader: FrameReader;
  readonly role: 'dialer' | 'acceptor';
  readonly remote: string;
  state: ConnState;
  peerId: NodeId;
  /** The handshake step expected next. */
  phase: number;
  dialerNonce: Buffer | null;
  acceptorNonce: Buffer | null;
  /** The peer's incarnation, from its hello or challenge. */
  peerIncarnation: Buffer | null;
  cancelTimeout: (() => void) | null;
  /** No longer written: another connection to the same peer won the tie (closed after a grace period). */
  retired: boolean;
  needDrain: boolean;
  snapshotIn: SnapshotAssembly | null;
  nextSnapshotSeq: number;
  /** Set once the connection is an authenticated store client's. */
  client: { onRequest: ((body: Buffer) => void) | null; onClose: (() => void) | null } | null;
  /** A TLS connection whose other end presented no certificate: a store client's at most. */
  certless: boolean;
}

interface Peer {
  readonly id: NodeId;
  address: PeerAddress;
  queue: QueueItem[];
  head: number;
  queuedBytes: number;
  /** Chunked snapshots, written a chunk at a time between batches of the queue's messages. */
  snapshots: SnapshotItem[];
  active: Conn | null;
  dialing: Conn | null;
  cancelRetry: (() => void) | null;
  attempt: number;
  everConnected: boolean;
  /** A failure was logged since the last connection (so a down peer is one line, not one per retry). */
  downLogged: boolean;
  dropped: number;
  reconnects: number;
  sent: number;
  sentFrames: number;
  received: number;
}

/** `host:port` (IPv6 as `[::1]:7001`) or an address object, checked. */
export function parseAddress(field: string, value: PeerAddress | string): PeerAddress {
  let host: string;
  let port: number;
  if (typeof value === 'string') {
    const m = /^\[([^\]]+)\]:(\d+)$/.exec(value) ?? /^([^:]+):(\d+)$/.exec(value);
    if (!m) throw new InvalidArgumentError(field, `expected host:port, got ${JSON.stringify(value)}`);
    host = m[1]!;
    port = Number(m[2]);
  } else {
    host = value.host;
    port = value.port;
  }
  if (typeof host !== 'string' || host === '') throw new InvalidArgumentError(field, 'host must not be empty');
  if (!Number.isInteger(port) || port < 0 || port > 65535) throw new InvalidArgumentError(field, `port must be in [0, 65535], got ${String(port)}`);
  return { host, port };
}

function checkId(field: string, id: unknown): NodeId {
  if (typeof id !== 'number' || !Number.isSafeInteger(id) || id < 1) throw new InvalidArgumentError(field, `expected a positive integer node id, got ${String(id)}`);
  return id;
}

function checkSize(field: string, value: number | undefined, fallback: number, min: number, max: number): number {
  const v = value ?? fallback;
  if (!Number.isSafeInteger(v) || v < min || v > max) throw new InvalidArgumentError(field, `must be an integer in [${min}, ${max}], got ${String(value)}`);
  return v;
}

function peerEntries(peers: TransportOptions['peers']): [NodeId, PeerAddress | string][] {
  if (peers === undefined) return [];
  if (peers instanceof Map) return [...(peers as ReadonlyMap<NodeId, PeerAddress | string>).entries()];
  return Object.entries(peers).map(([k, v]) => [Number(k), v]);
}

/**
 * The network of one Raft node. Create it with `RaftTransport.listen(options)`; hand it the
 * messages of each Ready with `send`, and step what `onMessage` delivers.
 */
export class RaftTransport implements AsyncDisposable {
  readonly id: NodeId;
  private readonly clusterId: string;
  private readonly secret: Uint8Array;
  private readonly clock: Clock;
  private readonly random: Random;
  private readonly log: (line: string) => void;
  private readonly tls: TransportTlsOptions | undefined;
  private readonly maxFrameBytes: number;
  private readonly chunkBytes: number;
  private readonly maxSnapshotBytes: number;
  private readonly maxQueuedMessages: number;
  private readonly maxQueuedBytes: number;
  private readonly handshakeTimeoutMs: number;
  private readonly maxClients: number;
  private readonly maxClientFrameBytes: number;
  private clientHandler: ((link: ClientLink) => void) | null = null;
  private readonly reconnectMinMs: number;
  private readonly reconnectMaxMs: number;
  private readonly listenAt: PeerAddress;
  /** Random per instance: a peer tells this process from an earlier one on the same id. */
  private readonly incarnation = newIncarnation();
  private readonly peers = new Map<NodeId, Peer>();
  private readonly conns = new Set<Conn>();
  private readonly toFlush = new Set<Peer>();
  private flushScheduled = false;
  private server: net.Server | null = null;
  /** Accepted sockets not yet tracked: waiting for their first bytes, or in their TLS handshake. */
  private readonly unsorted = new Set<net.Socket>();
  /** When each accepted TCP socket came (clock ms): its handshake deadline runs from then. */
  private readonly admittedAt = new WeakMap<net.Socket, number>();
  private bound: PeerAddress | null = null;
  private closed = false;
  private droppedUnknownPeer = 0;
  private floodLogged = false;
  private messageHandler: ((m: Message) => void) | null = null;
  private unreachableHandler: ((peer: NodeId) => void) | null = null;
  private snapshotHandler: ((peer: NodeId, ok: boolean) => void) | null = null;

  private constructor(options: TransportOptions) {
    this.id = checkId('id', options.id);
    if (typeof options.clusterId !== 'string' || options.clusterId === '' || Buffer.byteLength(options.clusterId) > CLUSTER_ID_MAX_BYTES) {
      throw new InvalidArgumentError('clusterId', `expected 1..${CLUSTER_ID_MAX_BYTES} bytes of text`);
    }
    this.clusterId = options.clusterId;
    const secret = typeof options.secret === 'string' ? Buffer.from(options.secret, 'utf8') : options.secret;
    // The message names the length only: the secret itself never reaches an error or a log.
    if (!(secret instanceof Uint8Array) || secret.byteLength < 16) throw new InvalidArgumentError('secret', `must be at least 16 bytes, got ${secret instanceof Uint8Array ? secret.byteLength : typeof secret}`);
    this.secret = Buffer.from(secret);
    this.clock = options.clock ?? systemClock;
    this.random = options.random ?? systemRandom;
    this.log = options.log ?? ((line) => process.stderr.write(`${line}\n`));
    this.tls = options.tls;
    this.maxFrameBytes = checkSize('maxFrameBytes', options.maxFrameBytes, transportDefaults.maxFrameBytes, 64 * 1024, 0xffff_ffff);
    this.chunkBytes = checkSize('snapshotChunkBytes', options.snapshotChunkBytes, transportDefaults.snapshotChunkBytes, 1024, Math.floor(this.maxFrameBytes / 2));
    this.maxSnapshotBytes = checkSize('maxSnapshotBytes', options.maxSnapshotBytes, transportDefaults.maxSnapshotBytes, 1, 2 ** 32);
    this.maxQueuedMessages = checkSize('maxQueuedMessages', options.maxQueuedMessages, transportDefaults.maxQueuedMessages, 1, 1 << 24);
    this.maxQueuedBytes = checkSize('maxQueuedBytes', options.maxQueuedBytes, transportDefaults.maxQueuedBytes, 1, Number.MAX_SAFE_INTEGER);
    this.handshakeTimeoutMs = checkSize('handshakeTimeoutMs', options.handshakeTimeoutMs, transportDefaults.handshakeTimeoutMs, 1, 600_000);
    this.maxClients = checkSize('maxClients', options.maxClients, transportDefaults.maxClients, 1, 1 << 20);
    this.maxClientFrameBytes = checkSize('maxClientFrameBytes', options.maxClientFrameBytes, transportDefaults.maxClientFrameBytes, 1024, this.maxFrameBytes);
    this.reconnectMinMs = checkSize('reconnectMinMs', options.reconnectMinMs, transportDefaults.reconnectMinMs, 1, 600_000);
    this.reconnectMaxMs = checkSize('reconnectMaxMs', options.reconnectMaxMs, transportDefaults.reconnectMaxMs, this.reconnectMinMs, 3_600_000);
    this.listenAt = parseAddress('listen', options.listen);
    for (const [id, address] of peerEntries(options.peers)) if (id !== this.id) this.addPeer(id, address);
  }

  /** Starts listening; resolves once the port is bound. Rejects (and closes nothing else) if it cannot be. */
  static async listen(options: TransportOptions): Promise<RaftTransport> {
    const t = new RaftTransport(options);
    await t.start();
    return t;
  }

  private start(): Promise<void> {
    const tlsServer = this.tls ? this.tlsServer(this.tls) : null;
    const server = net.createServer({ noDelay: true }, (s) => this.admit(s, tlsServer));
    this.server = server;
    return new Promise((resolve, reject) => {
      const onError = (err: Error): void => reject(err);
      server.once('error', onError);
      server.listen({ host: this.listenAt.host, port: this.listenAt.port }, () => {
        server.off('error', onError);
        server.on('error', (err) => this.log(`raft transport ${this.id}: listening socket error: ${err.message}`));
        const a = server.address() as net.AddressInfo;
        this.bound = { host: this.listenAt.host, port: a.port };
        resolve();
      });
    });
  }

  /**
   * The TLS side of the listener: it never listens itself, `admit` hands it the connections that
   * open with a TLS record. The client certificate is requested and checked here (not by
   * rejectUnauthorized), so a refusal is logged with the peer's address and the reason, like every
   * other refusal, and the other end is told why inside TLS (a `certificate` refusal) instead of
   * seeing its connection vanish.
   */
  private tlsServer(options: TransportTlsOptions): tls.Server {
    const server = tls.createServer(
      { key: options.key, cert: options.cert, ca: options.ca as tls.SecureContextOptions['ca'], requestCert: true, rejectUnauthorized: false, minVersion: 'TLSv1.2', handshakeTimeout: this.handshakeTimeoutMs },
      (s) => {
        const raw = (s as unknown as { _parent?: net.Socket })._parent ?? s;
        this.unsorted.delete(raw);
        const since = this.admittedAt.get(raw);
        if (this.closed) {
          s.destroy();
          return;
        }
        if (s.authorized) {
          this.accept(s, false, since);
          return;
        }
        // No certificate at all: a store client may still come in on the secret (if allowed);
        // its hello must then name the client role. Any certificate that did not verify: refused.
        const none = Object.keys(s.getPeerCertificate() ?? {}).length === 0;
        if (none && options.clientsWithoutCert === true) {
          this.accept(s, true, since);
          return;
        }
        this.log(`raft transport ${this.id}: refused TLS connection from ${remoteOf(s)}: client certificate not accepted (${none ? 'none presented' : String(s.authorizationError)})`);
        s.end(frame(FrameKind.handshake, encodeStep({ step: 'refuse', reason: 'certificate' })), () => s.destroy());
        this.clock.setTimer(REFUSE_LINGER_MS, () => s.destroy());
      },
    );
    server.on('tlsClientError', (err: Error & { reason?: string; code?: string }, s) => {
      // The TLS socket is gone by now; its TCP socket still knows the address.
      const raw = (s as unknown as { _parent?: net.Socket })._parent;
      const why = err.code === 'ECONNRESET' ? 'the other end closed it (does it trust the CA that signed this node\'s certificate?)' : (err.reason ?? err.code ?? err.message);
      this.log(`raft transport ${this.id}: TLS handshake from ${remoteOf(raw ?? s)} failed: ${why}`);
      s.destroy();
    });
    return server;
  }

  /**
   * A new connection: its first byte says whether it speaks TLS (a TLS record of type handshake,
   * 0x16) or this protocol in the clear (a frame length's high byte, 0 for every frame allowed
   * before authentication), so a connection in the wrong one is refused with a reason its sender
   * understands instead of being read as garbage.
   */
  private admit(socket: net.Socket, tlsServer: tls.Server | null): void {
    if (this.closed) {
      socket.destroy();
      return;
    }
    let pending = this.unsorted.size;
    for (const c of this.conns) if (c.role === 'acceptor' && c.state === 'handshake') pending++;
    if (pending >= MAX_PENDING_HANDSHAKES) {
      // A flood of connections that do not authenticate: refused at once, one line per flood.
      if (!this.floodLogged) {
        this.floodLogged = true;
        this.log(`raft transport ${this.id}: refusing connections: ${pending} are already in their handshake (from ${remoteOf(socket)} and others)`);
      }
      socket.destroy();
      return;
    }
    this.floodLogged = false;
    this.unsorted.add(socket);
    this.admittedAt.set(socket, this.clock.now());
    socket.on('error', () => {});
    socket.once('close', () => this.unsorted.delete(socket));
    const remote = remoteOf(socket);
    let cancel: (() => void) | null = this.clock.setTimer(this.handshakeTimeoutMs, () => {
      cancel = null;
      if (socket.destroyed || !this.unsorted.has(socket)) return;
      this.log(`raft transport ${this.id}: closed connection from ${remote}: handshake not completed within ${this.handshakeTimeoutMs} ms`);
      socket.destroy();
    });
    socket.once('close', () => cancel?.());
    socket.once('readable', () => {
      const first: Buffer | null = socket.read();
      if (first === null || first.length === 0) return; // ended before any byte: its close cleans up
      socket.unshift(first);
      cancel?.();
      cancel = null;
      const speaksTls = first[0] === TLS_HANDSHAKE_RECORD;
      if (speaksTls && tlsServer !== null) {
        // The TLS server's own handshake timeout runs from here; the rest of the deadline after it.
        tlsServer.emit('connection', socket);
        return;
      }
      this.unsorted.delete(socket);
      if (tlsServer !== null) {
        this.log(`raft transport ${this.id}: refused connection from ${remote}: not TLS, and this node takes TLS connections only`);
        socket.end(frame(FrameKind.handshake, encodeStep({ step: 'refuse', reason: 'tls-required' })), () => socket.destroy());
        this.clock.setTimer(REFUSE_LINGER_MS, () => socket.destroy());
        return;
      }
      if (speaksTls) {
        // Answered in the clear: the TLS client reads it as a record of no known version and
        // stops with that error (its "wrong version number"), instead of seeing a reset it might retry.
        this.log(`raft transport ${this.id}: refused connection from ${remote}: a TLS handshake, but this node serves without TLS`);
        socket.end(frame(FrameKind.handshake, encodeStep({ step: 'refuse', reason: 'protocol' })), () => socket.destroy());
        this.clock.setTimer(REFUSE_LINGER_MS, () => socket.destroy());
        return;
      }
      this.accept(socket, false, this.admittedAt.get(socket));
    });
  }

  /** The address this node listens on (the chosen port when `listen` gave port 0). */
  get address(): PeerAddress {
    return this.bound ?? this.listenAt;
  }

  /** Delivers each message received from an authenticated peer. One handler; a later call replaces it. */
  onMessage(handler: (message: Message) => void): void {
    this.messageHandler = handler;
  }

  /**
   * Serves store clients on this port: a connection whose hello names dialer id 0 proves the
   * cluster secret like a peer (HMAC both ways), then is handed to `handler`. Without a handler,
   * clients are refused at their hello. One handler; a later call replaces it.
   */
  onClient(handler: (link: ClientLink) => void): void {
    this.clientHandler = handler;
  }

  /** Told when a peer's connection is lost or its messages are dropped (the node reports it unreachable to the core). */
  onUnreachable(handler: (peer: NodeId) => void): void {
    this.unreachableHandler = handler;
  }

  /** Told whether each snapshot message was handed to the peer's socket whole (true) or dropped (false). */
  onSnapshotStatus(handler: (peer: NodeId, ok: boolean) => void): void {
    this.snapshotHandler = handler;
  }

  /** Adds a peer, or changes its address (taken at the next dial). */
  addPeer(id: NodeId, address: PeerAddress | string): void {
    checkId('peer id', id);
    if (id === this.id) throw new InvalidArgumentError('peer id', `${id} is this node's own id`);
    const addr = parseAddress(`address of peer ${id}`, address);
    const existing = this.peers.get(id);
    if (existing) {
      existing.address = addr;
      return;
    }
    this.peers.set(id, {
      id,
      address: addr,
      queue: [],
      head: 0,
      queuedBytes: 0,
      snapshots: [],
      active: null,
      dialing: null,
      cancelRetry: null,
      attempt: 0,
      everConnected: false,
      downLogged: false,
      dropped: 0,
      reconnects: 0,
      sent: 0,
      sentFrames: 0,
      received: 0,
    });
  }

  /** Removes a peer: its connections are closed and its queued messages discarded. */
  removePeer(id: NodeId): void {
    const peer = this.peers.get(id);
    if (!peer) return;
    this.peers.delete(id);
    this.toFlush.delete(peer);
    peer.cancelRetry?.();
    peer.cancelRetry = null;
    for (const c of [...this.conns]) if (c.peerId === id) this.destroy(c);
    peer.queue = [];
    peer.head = 0;
    peer.queuedBytes = 0;
    peer.snapshots = [];
  }

  /**
   * Queues messages for their peers (by `to`) and returns at once; they are framed and written
   * within this tick. A message to a node that is not a peer, or beyond its peer's queue bound,
   * is dropped and counted. Throws ClosedError after close(), and InvalidArgumentError (nothing
   * queued) for a message not from this node or of a local type (`hup`, `beat`...).
   */
  send(messages: readonly Message[]): void {
    if (this.closed) throw new ClosedError('raft transport');
    // The receiver closes a connection carrying either; refused here first, before anything is queued.
    for (const m of messages) {
      if (m.from !== this.id) throw new InvalidArgumentError('message.from', `a message sent by node ${this.id} must be from ${this.id}, got ${m.from} (${m.type} to ${m.to})`);
      if (isLocalMessage(m.type)) throw new InvalidArgumentError('message.type', `${m.type} messages are local to a node and never sent`);
    }
    for (const m of messages) {
      const peer = this.peers.get(m.to);
      if (!peer) {
        this.droppedUnknownPeer++;
        continue;
      }
      const size = messageSize(m);
      if (m.snapshot !== undefined && size > this.chunkBytes) {
        if (peer.snapshots.length >= MAX_QUEUED_SNAPSHOTS) this.drop(peer, m);
        else {
          peer.snapshots.push({ message: m, offset: 0, seq: 0 });
          this.toFlush.add(peer);
        }
        continue;
      }
      const queued = peer.queue.length - peer.head;
      if (queued >= this.maxQueuedMessages || (queued > 0 && peer.queuedBytes + size > this.maxQueuedBytes)) {
        this.drop(peer, m);
        continue;
      }
      if (size + varintSize(1) > this.maxFrameBytes) {
        this.log(`raft transport ${this.id}: dropped a ${m.type} message of ${size} bytes to peer ${peer.id}: more than the frame limit of ${this.maxFrameBytes}`);
        this.drop(peer, m);
        continue;
      }
      peer.queue.push({ message: m, size });
      peer.queuedBytes += size;
      this.toFlush.add(peer);
    }
    if (this.toFlush.size > 0 && !this.flushScheduled) {
      this.flushScheduled = true;
      queueMicrotask(() => this.flushAll());
    }
  }

  /**
   * Writes what `send` queued now, in this turn, instead of in the microtask `send` scheduled:
   * the node sends a leader's appends this way just before its own fdatasync blocks the thread,
   * so the followers write the entries while the leader does.
   */
  flushNow(): void {
    if (this.flushScheduled && !this.closed) this.flushAll();
  }

  stats(): TransportStats {
    const peers: PeerStats[] = [];
    let queued = 0;
    let dropped = 0;
    let reconnects = 0;
    for (const p of this.peers.values()) {
      const q = p.queue.length - p.head + p.snapshots.length;
      queued += q;
      dropped += p.dropped;
      reconnects += p.reconnects;
      peers.push({ id: p.id, address: p.address, connected: p.active !== null, queued: q, queuedBytes: p.queuedBytes, dropped: p.dropped, reconnects: p.reconnects, sent: p.sent, sentFrames: p.sentFrames, received: p.received });
    }
    return { peers, queued, dropped, reconnects, droppedUnknownPeer: this.droppedUnknownPeer };
  }

  /** Stops listening, closes every connection and timer; queued messages are discarded. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    for (const p of this.peers.values()) {
      p.cancelRetry?.();
      p.cancelRetry = null;
    }
    for (const s of this.unsorted) s.destroy();
    this.unsorted.clear();
    const sockets = [...this.conns].map((c) => c.socket);
    const closedAll = Promise.all(sockets.map((s) => (s.destroyed ? Promise.resolve() : new Promise<void>((r) => s.once('close', () => r())))));
    for (const c of [...this.conns]) this.destroy(c);
    const server = this.server;
    this.server = null;
    await Promise.all([closedAll, server ? new Promise<void>((r) => server.close(() => r())) : Promise.resolve()]);
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }

  // ---- queues and writing ----

  private drop(peer: Peer, m: Message): void {
    peer.dropped++;
    if (m.type === 'snap') this.snapshotHandler?.(peer.id, false);
    this.unreachableHandler?.(peer.id);
  }

  private flushAll(): void {
    this.flushScheduled = false;
    const peers = [...this.toFlush];
    this.toFlush.clear();
    for (const peer of peers) {
      if (peer.active) this.flush(peer, peer.active);
      else this.ensureConnection(peer);
    }
  }

  /** Whether the peer has anything waiting. */
  private pending(peer: Peer): boolean {
    return peer.head < peer.queue.length || peer.snapshots.length > 0;
  }

  /**
   * Writes the peer's queue to its connection until nothing waits or the socket is full: all
   * queued messages (framed in batches), then one chunk of a snapshot, and again. Messages sent
   * while a large snapshot is on its way (heartbeats, votes) overtake it instead of waiting for
   * its last chunk; Raft does not need the two in order (the leader sends no appends to a peer
   * it is sending a snapshot).
   */
  private flush(peer: Peer, conn: Conn): void {
    if (conn.state !== 'open' || conn.needDrain || !this.pending(peer)) return;
    const socket = conn.socket;
    socket.cork();
    try {
      while (!conn.needDrain && this.pending(peer)) {
        while (!conn.needDrain && peer.head < peer.queue.length) this.writeBatch(peer, conn);
        if (!conn.needDrain && peer.snapshots.length > 0) this.writeChunk(peer, conn, peer.snapshots[0]!);
      }
    } finally {
      socket.uncork();
    }
    this.compact(peer);
  }

  /** Frames consecutive queued messages together, up to BATCH_BYTES, and writes the frame. */
  private writeBatch(peer: Peer, conn: Conn): void {
    let end = peer.head;
    let bytes = 0;
    while (end < peer.queue.length) {
      const it = peer.queue[end]!;
      if (end > peer.head && bytes + it.size > BATCH_BYTES) break;
      bytes += it.size;
      end++;
    }
    const count = end - peer.head;
    const bodyLength = varintSize(count) + bytes;
    const buf = Buffer.allocUnsafe(HEADER_BYTES + bodyLength);
    writeHeader(buf, 0, bodyLength, FrameKind.peerMessages);
    const w = new Writer(buf, HEADER_BYTES);
    w.varint(count);
    for (let i = peer.head; i < end; i++) {
      const it = peer.queue[i]!;
      writeMessage(w, it.message);
      if (it.message.type === 'snap') this.snapshotHandler?.(peer.id, true);
    }
    peer.head = end;
    peer.queuedBytes -= bytes;
    peer.sent += count;
    peer.sentFrames++;
    if (!conn.socket.write(buf)) conn.needDrain = true;
  }

  /** Writes the next chunk frame of a large snapshot (its data as a view, not copied). */
  private writeChunk(peer: Peer, conn: Conn, item: SnapshotItem): void {
    const socket = conn.socket;
    const m = item.message;
    const data = m.snapshot!.data;
    const total = data.byteLength;
    const first = item.offset === 0;
    if (first) item.seq = conn.nextSnapshotSeq++;
    const n = Math.min(this.chunkBytes, total - item.offset);
    let meta: Buffer;
    if (first) {
      const msgLength = messageSize(m, false);
      meta = Buffer.allocUnsafe(1 + varintSize(item.seq) + varintSize(total) + varintSize(msgLength) + msgLength);
      const w = new Writer(meta);
      w.u8(1);
      w.varint(item.seq);
      w.varint(total);
      w.varint(msgLength);
      writeMessage(w, m, false);
    } else {
      meta = Buffer.allocUnsafe(1 + varintSize(item.seq) + varintSize(item.offset));
      const w = new Writer(meta);
      w.u8(0);
      w.varint(item.seq);
      w.varint(item.offset);
    }
    socket.write(header(meta.length + n, FrameKind.snapshotChunk));
    socket.write(meta);
    const ok = socket.write(data.subarray(item.offset, item.offset + n));
    item.offset += n;
    peer.sentFrames++;
    if (!ok) conn.needDrain = true;
    if (item.offset >= total) {
      peer.snapshots.shift();
      peer.sent++;
      this.snapshotHandler?.(peer.id, true);
    }
  }

  private compact(peer: Peer): void {
    if (peer.head >= peer.queue.length) {
      peer.queue = [];
      peer.head = 0;
    } else if (peer.head >= COMPACT_AT && peer.head * 2 >= peer.queue.length) {
      peer.queue = peer.queue.slice(peer.head);
      peer.head = 0;
    }
  }

  // ---- connections ----

  private ensureConnection(peer: Peer): void {
    if (this.closed || peer.active || peer.dialing || peer.cancelRetry) return;
    this.dial(peer);
  }

  private dial(peer: Peer): void {
    const { host, port } = peer.address;
    const socket = this.tls
      ? tls.connect({ host, port, key: this.tls.key, cert: this.tls.cert, ca: this.tls.ca as tls.SecureContextOptions['ca'], servername: this.tls.servername, minVersion: 'TLSv1.2' })
      : net.connect({ host, port, noDelay: true });
    const conn = this.track(socket, 'dialer', `${host}:${port}`, peer.id);
    peer.dialing = conn;
    socket.once(this.tls ? 'secureConnect' : 'connect', () => {
      if (conn.state !== 'handshake') return;
      socket.setNoDelay(true);
      socket.setKeepAlive(true, KEEPALIVE_MS);
      conn.dialerNonce = newNonce();
      this.writeStep(conn, encodeStep({ step: 'hello', dialer: this.id, acceptor: peer.id, clusterId: this.clusterId, nonce: conn.dialerNonce, incarnation: this.incarnation }));
    });
  }

  /**
   * A connection sorted by `admit` (and through TLS, if the node has it): its handshake starts,
   * to be done by `handshakeTimeoutMs` after the TCP connection came (`since`).
   */
  private accept(socket: net.Socket, certless: boolean, since: number | undefined): void {
    if (this.closed) {
      socket.destroy();
      return;
    }
    socket.setNoDelay(true);
    socket.setKeepAlive(true, KEEPALIVE_MS);
    this.track(socket, 'acceptor', remoteOf(socket), 0, since).certless = certless;
  }

  private track(socket: net.Socket, role: 'dialer' | 'acceptor', remote: string, peerId: NodeId, since?: number): Conn {
    const conn: Conn = {
      socket,
      reader: new FrameReader(HANDSHAKE_MAX_FRAME_BYTES, (kind, body) => this.onFrame(conn, kind, body)),
      role,
      remote,
      state: 'handshake',
      peerId,
      phase: 0,
      dialerNonce: null,
      acceptorNonce: null,
      peerIncarnation: null,
      cancelTimeout: null,
      retired: false,
      needDrain: false,
      snapshotIn: null,
      nextSnapshotSeq: 0,
      client: null,
      certless: false,
    };
    this.conns.add(conn);
    const left = since === undefined ? this.handshakeTimeoutMs : Math.max(1, this.handshakeTimeoutMs - (this.clock.now() - since));
    conn.cancelTimeout = this.clock.setTimer(left, () => {
      conn.cancelTimeout = null;
      if (conn.state !== 'handshake') return;
      this.fail(conn, `handshake not completed within ${this.handshakeTimeoutMs} ms`);
    });
    socket.on('data', (chunk: Buffer) => {
      if (conn.state === 'closed') return;
      try {
        conn.reader.push(chunk);
      } catch (err) {
        this.onBadInput(conn, err);
      }
    });
    socket.on('drain', () => {
      conn.needDrain = false;
      const peer = this.peers.get(conn.peerId);
      if (peer && peer.active === conn) this.flush(peer, conn);
    });
    socket.on('error', (err) => {
      // The close that follows does the bookkeeping; a dial failure is worth one line per outage.
      if (conn.state === 'handshake' && role === 'dialer') {
        const peer = this.peers.get(conn.peerId);
        if (peer && !peer.downLogged) {
          peer.downLogged = true;
          this.log(`raft transport ${this.id}: cannot reach peer ${conn.peerId} at ${remote}: ${err.message}; retrying with back-off`);
        }
      }
    });
    socket.on('close', () => this.onClose(conn));
    return conn;
  }

  private onBadInput(conn: Conn, err: unknown): void {
    const who = conn.state === 'open' ? `peer ${conn.peerId} (${conn.remote})` : conn.state === 'client' ? `store client ${conn.remote}` : `${conn.remote}`;
    let why: string;
    if (err instanceof VersionError) why = `it speaks ${err.message}`;
    else if (err instanceof FrameError) why = err.message;
    else why = `unexpected error: ${err instanceof Error ? err.message : String(err)}`;
    this.log(`raft transport ${this.id}: closed connection ${conn.state === 'open' || conn.state === 'client' ? 'with' : 'from'} ${who}: ${why}`);
    this.destroy(conn);
  }

  /** Closes a connection that failed; logs one line (for a peer this node dials, one per outage). */
  private fail(conn: Conn, why: string): void {
    const peer = conn.role === 'dialer' ? this.peers.get(conn.peerId) : undefined;
    if (peer?.downLogged) {
      this.destroy(conn);
      return;
    }
    if (peer) peer.downLogged = true;
    this.log(`raft transport ${this.id}: closed connection ${conn.role === 'dialer' ? 'to' : 'from'} ${conn.peerId ? `peer ${conn.peerId} ` : ''}${conn.remote}: ${why}`);
    this.destroy(conn);
  }

  private destroy(conn: Conn): void {
    if (conn.state !== 'closed') {
      conn.state = 'closed';
      conn.reader.stop();
      conn.cancelTimeout?.();
      conn.cancelTimeout = null;
    }
    conn.socket.destroy();
  }

  private onClose(conn: Conn): void {
    if (conn.client !== null) {
      const onClose = conn.client.onClose;
      conn.client = null;
      this.conns.delete(conn);
      conn.state = 'closed';
      conn.reader.stop();
      try {
        onClose?.();
      } catch (err) {
        this.log(`raft transport ${this.id}: the client handler threw on close: ${err instanceof Error ? err.message : String(err)}`);
      }
      return;
    }
    if (conn.state === 'handshake' && conn.role === 'dialer') {
      // Closed by the other side before it accepted (a TLS server refusing this node's
      // certificate does just that): one line per outage, as a failed dial.
      const peer = this.peers.get(conn.peerId);
      if (peer && !peer.downLogged) {
        peer.downLogged = true;
        this.log(`raft transport ${this.id}: connection to peer ${conn.peerId} at ${conn.remote} closed during the handshake; retrying with back-off`);
      }
    }
    if (conn.state !== 'closed') {
      conn.state = 'closed';
      conn.reader.stop();
      conn.cancelTimeout?.();
      conn.cancelTimeout = null;
    }
    this.conns.delete(conn);
    const peer = this.peers.get(conn.peerId);
    if (!peer) return;
    let lost = false;
    if (peer.dialing === conn) {
      peer.dialing = null;
      lost = true;
    }
    if (peer.active === conn) {
      peer.active = null;
      lost = true;
      // A snapshot cut off midway is dropped and reported, not sent again by the transport: the
      // core sends a fresh one when it learns of the failure (and one the peer refuses, say for
      // its size, does not loop here).
      const snapshot = peer.snapshots[0];
      if (snapshot !== undefined && snapshot.offset > 0) {
        peer.snapshots.shift();
        peer.dropped++;
        this.snapshotHandler?.(peer.id, false);
      }
      // Another authenticated connection from this peer (one that lost the tie) may still be open.
      for (const c of this.conns) if (c.peerId === peer.id && c.state === 'open' && !c.retired) peer.active = c;
      if (!peer.active) this.unreachableHandler?.(peer.id);
    }
    if (peer.active) {
      this.flush(peer, peer.active);
      return;
    }
    if (lost && !this.closed && this.pending(peer)) this.scheduleRetry(peer);
  }

  private scheduleRetry(peer: Peer): void {
    if (peer.cancelRetry || peer.dialing || peer.active) return;
    const cap = Math.min(this.reconnectMaxMs, this.reconnectMinMs * 2 ** Math.min(peer.attempt, 30));
    peer.attempt++;
    const delay = cap / 2 + (this.random.next() * cap) / 2;
    peer.cancelRetry = this.clock.setTimer(delay, () => {
      peer.cancelRetry = null;
      if (this.peers.get(peer.id) !== peer) return;
      this.ensureConnection(peer);
    });
  }

  private writeStep(conn: Conn, body: Buffer): void {
    conn.socket.write(frame(FrameKind.handshake, body));
  }

  /** Refuses a connection at the handshake: one log line here, the reason to the other side. */
  private refuse(conn: Conn, reason: RefusalReason, detail: string): void {
    this.log(`raft transport ${this.id}: refused connection from ${conn.remote}: ${detail}`);
    conn.state = 'closed';
    conn.reader.stop();
    conn.cancelTimeout?.();
    conn.cancelTimeout = null;
    const socket = conn.socket;
    socket.end(frame(FrameKind.handshake, encodeStep({ step: 'refuse', reason })), () => socket.destroy());
  }

  private onFrame(conn: Conn, kind: FrameKind, body: Buffer): void {
    if (conn.state === 'handshake') {
      if (kind !== FrameKind.handshake) {
        const what = `a ${kindName(kind)} frame before authentication`;
        if (conn.role === 'acceptor') this.refuse(conn, 'protocol', what);
        else this.fail(conn, what);
        return;
      }
      this.onHandshake(conn, body);
      return;
    }
    if (conn.state === 'client') {
      if (kind !== FrameKind.clientRequest) throw new FrameError(`a ${kindName(kind)} frame on a store client's connection`);
      conn.client?.onRequest?.(body);
      return;
    }
    if (conn.state !== 'open') return;
    const peer = this.peers.get(conn.peerId);
    if (!peer) {
      this.fail(conn, 'peer removed');
      return;
    }
    if (kind === FrameKind.peerMessages) {
      const messages = decodeMessages(body);
      for (const m of messages) this.deliver(conn, peer, m);
    } else if (kind === FrameKind.snapshotChunk) {
      this.onChunk(conn, peer, body);
    } else {
      throw new FrameError(`a ${kindName(kind)} frame on a peer connection`);
    }
  }

  private deliver(conn: Conn, peer: Peer, m: Message): void {
    if (conn.state !== 'open') return;
    if (m.from !== peer.id || m.to !== this.id) throw new FrameError(`a ${m.type} message from ${m.from} to ${m.to} on the connection of peer ${peer.id} to node ${this.id}`);
    if (isLocalMessage(m.type)) throw new FrameError(`a ${m.type} message, which is never sent between nodes`);
    peer.received++;
    try {
      this.messageHandler?.(m);
    } catch (err) {
      this.log(`raft transport ${this.id}: the message handler threw on a ${m.type} from peer ${peer.id}: ${err instanceof Error ? err.message : String(err)}`);
    }
  }

  private onChunk(conn: Conn, peer: Peer, body: Buffer): void {
    const r = new Reader(body);
    const first = r.u8('chunk flags');
    const seq = r.varint('snapshot seq');
    let asm: SnapshotAssembly;
    if (first === 1) {
      const total = r.varint('snapshot size');
      if (total > this.maxSnapshotBytes) throw new FrameError(`a snapshot of ${total} bytes, more than the limit of ${this.maxSnapshotBytes}`);
      const msgLength = r.length('snapshot message');
      const mr = new Reader(body, r.pos, r.pos + msgLength);
      const m = readMessage(mr);
      if (mr.left !== 0 || m.type !== 'snap' || m.snapshot === undefined || m.snapshot.data.byteLength !== 0) throw new FrameError('a snapshot chunk whose message is not a snap message without data');
      r.pos += msgLength;
      // A newer snapshot replaces one whose chunks stopped coming (the sender moved on).
      asm = { seq, message: m, data: Buffer.allocUnsafe(total), received: 0 };
      conn.snapshotIn = asm;
    } else if (first === 0) {
      const offset = r.varint('chunk offset');
      const current = conn.snapshotIn;
      if (current === null || current.seq !== seq || current.received !== offset) throw new FrameError(`snapshot chunk ${seq} at offset ${offset} does not continue the snapshot being received`);
      asm = current;
    } else {
      throw new FrameError(`unknown chunk flags ${first}`);
    }
    const n = r.left;
    if (asm.received + n > asm.data.length) throw new FrameError(`snapshot chunk overruns the declared size of ${asm.data.length} bytes`);
    body.copy(asm.data, asm.received, r.pos);
    asm.received += n;
    if (asm.received === asm.data.length) {
      conn.snapshotIn = null;
      const m = asm.message;
      this.deliver(conn, peer, { ...m, snapshot: { metadata: m.snapshot!.metadata, data: asm.data } });
    }
  }

  private onHandshake(conn: Conn, body: Buffer): void {
    const step = decodeStep(body);
    if (step.step === 'refuse') {
      this.fail(conn, `the peer refused it: ${reasonText(step.reason)}`);
      return;
    }
    if (conn.role === 'acceptor') {
      if (conn.phase === 0 && step.step === 'hello' && step.dialer === CLIENT_DIALER_ID) {
        this.onClientHello(conn, step);
        return;
      }
      if (conn.phase === 0 && step.step === 'hello') {
        if (conn.certless) {
          this.refuse(conn, 'certificate', `node ${step.dialer} presented no TLS client certificate (peers need one)`);
          return;
        }
        if (step.clusterId !== this.clusterId) {
          this.refuse(conn, 'cluster-mismatch', `node ${step.dialer} is in cluster ${JSON.stringify(step.clusterId)}, this node in ${JSON.stringify(this.clusterId)}`);
          return;
        }
        if (step.acceptor !== this.id) {
          this.refuse(conn, 'wrong-node', `node ${step.dialer} dialed node ${step.acceptor}, this is node ${this.id}`);
          return;
        }
        if (!this.peers.has(step.dialer)) {
          this.refuse(conn, 'unknown-peer', `node id ${step.dialer} is not a peer of this node`);
          return;
        }
        conn.peerId = step.dialer;
        conn.dialerNonce = Buffer.from(step.nonce);
        conn.peerIncarnation = Buffer.from(step.incarnation);
        conn.acceptorNonce = newNonce();
        conn.phase = 1;
        this.writeStep(conn, encodeStep({ step: 'challenge', nonce: conn.acceptorNonce, incarnation: this.incarnation }));
        return;
      }
      if (conn.phase === 1 && step.step === 'auth' && conn.peerId === CLIENT_DIALER_ID) {
        const ctx = this.context(conn, CLIENT_DIALER_ID, CLIENT_DIALER_ID);
        if (!macMatches(handshakeMac(this.secret, 'dialer', ctx), step.mac)) {
          this.refuse(conn, 'auth-failed', 'a store client did not prove the cluster secret (wrong secret?)');
          return;
        }
        this.writeStep(conn, encodeStep({ step: 'accept', mac: handshakeMac(this.secret, 'acceptor', ctx) }));
        this.openClient(conn);
        return;
      }
      if (conn.phase === 1 && step.step === 'auth') {
        const ctx = this.context(conn, conn.peerId, this.id);
        if (!macMatches(handshakeMac(this.secret, 'dialer', ctx), step.mac)) {
          this.refuse(conn, 'auth-failed', `node ${conn.peerId} did not prove the cluster secret (wrong secret?)`);
          return;
        }
        this.writeStep(conn, encodeStep({ step: 'accept', mac: handshakeMac(this.secret, 'acceptor', ctx) }));
        this.open(conn);
        return;
      }
    } else {
      if (conn.phase === 0 && step.step === 'challenge') {
        conn.acceptorNonce = Buffer.from(step.nonce);
        conn.peerIncarnation = Buffer.from(step.incarnation);
        conn.phase = 1;
        this.writeStep(conn, encodeStep({ step: 'auth', mac: handshakeMac(this.secret, 'dialer', this.context(conn, this.id, conn.peerId)) }));
        return;
      }
      if (conn.phase === 1 && step.step === 'accept') {
        if (!macMatches(handshakeMac(this.secret, 'acceptor', this.context(conn, this.id, conn.peerId)), step.mac)) {
          this.fail(conn, 'the peer did not prove the cluster secret (wrong secret?)');
          return;
        }
        this.open(conn);
        return;
      }
    }
    throw new FrameError(`unexpected handshake step ${step.step}`);
  }

  /**
   * A store client's hello: the same cluster, acceptor id 0 (a client dials an address, not a
   * node id), a handler to serve it and room for one more client. Then the challenge, as for a peer.
   */
  private onClientHello(conn: Conn, step: Extract<HandshakeStep, { step: 'hello' }>): void {
    if (this.clientHandler === null) {
      this.refuse(conn, 'protocol', 'store clients are not served on this port');
      return;
    }
    if (step.clusterId !== this.clusterId) {
      this.refuse(conn, 'cluster-mismatch', `a store client of cluster ${JSON.stringify(step.clusterId)}, this node is in ${JSON.stringify(this.clusterId)}`);
      return;
    }
    if (step.acceptor !== CLIENT_DIALER_ID) {
      this.refuse(conn, 'protocol', `a store client named acceptor ${step.acceptor}; clients name 0`);
      return;
    }
    let clients = 0;
    for (const c of this.conns) if (c.state === 'client') clients++;
    if (clients >= this.maxClients) {
      this.refuse(conn, 'busy', `${clients} store clients are connected, the limit`);
      return;
    }
    conn.peerId = CLIENT_DIALER_ID;
    conn.dialerNonce = Buffer.from(step.nonce);
    conn.peerIncarnation = Buffer.from(step.incarnation);
    conn.acceptorNonce = newNonce();
    conn.phase = 1;
    this.writeStep(conn, encodeStep({ step: 'challenge', nonce: conn.acceptorNonce, incarnation: this.incarnation }));
  }

  /** A store client proved the secret: its connection now carries its requests to the client handler. */
  private openClient(conn: Conn): void {
    conn.state = 'client';
    conn.cancelTimeout?.();
    conn.cancelTimeout = null;
    conn.reader.maxFrameBytes = this.maxClientFrameBytes;
    const handlers: { onRequest: ((body: Buffer) => void) | null; onClose: (() => void) | null } = { onRequest: null, onClose: null };
    conn.client = handlers;
    const socket = conn.socket;
    const link: ClientLink = {
      remote: conn.remote,
      send: (body) => (conn.state === 'client' ? socket.write(frame(FrameKind.clientResponse, body)) : false),
      get bufferedBytes() {
        return socket.writableLength;
      },
      close: (why) => {
        if (conn.state !== 'client') return;
        this.log(`raft transport ${this.id}: closed store client connection from ${conn.remote}: ${why}`);
        this.destroy(conn);
      },
      onRequest: (h) => {
        handlers.onRequest = h;
      },
      onClose: (h) => {
        handlers.onClose = h;
      },
    };
    try {
      this.clientHandler?.(link);
    } catch (err) {
      this.log(`raft transport ${this.id}: the client handler threw: ${err instanceof Error ? err.message : String(err)}`);
      this.destroy(conn);
    }
  }

  private context(conn: Conn, dialer: NodeId, acceptor: NodeId): HandshakeContext {
    const mine = this.incarnation;
    const theirs = conn.peerIncarnation!;
    return {
      clusterId: this.clusterId,
      dialer,
      acceptor,
      dialerNonce: conn.dialerNonce!,
      acceptorNonce: conn.acceptorNonce!,
      dialerIncarnation: conn.role === 'dialer' ? mine : theirs,
      acceptorIncarnation: conn.role === 'dialer' ? theirs : mine,
    };
  }

  /** The handshake succeeded: the connection carries messages, and may become the peer's active one. */
  private open(conn: Conn): void {
    conn.state = 'open';
    conn.cancelTimeout?.();
    conn.cancelTimeout = null;
    conn.reader.maxFrameBytes = this.maxFrameBytes;
    const peer = this.peers.get(conn.peerId);
    if (!peer) {
      this.destroy(conn);
      return;
    }
    if (peer.dialing === conn) peer.dialing = null;
    const current = peer.active;
    if (current && current !== conn) {
      if (!current.peerIncarnation!.equals(conn.peerIncarnation!)) {
        // The peer restarted (or its host vanished without closing): the old connection leads
        // to a process that is gone, whoever dialed it.
        this.destroy(current);
      } else {
        // Both ends apply the same rule, so both keep the same connection: the one dialed by the
        // lower id, or between two from the same dialer, the newer (the dialer gave up the old one).
        const dialerOf = (c: Conn): NodeId => (c.role === 'dialer' ? this.id : c.peerId);
        if (dialerOf(conn) > dialerOf(current)) {
          this.retire(conn);
          return;
        }
        this.retire(current);
      }
    }
    peer.active = conn;
    // A snapshot cut off with the previous connection starts again from its first chunk.
    const snapshot = peer.snapshots[0];
    if (snapshot) snapshot.offset = 0;
    peer.attempt = 0;
    peer.downLogged = false;
    if (peer.everConnected) peer.reconnects++;
    peer.everConnected = true;
    peer.cancelRetry?.();
    peer.cancelRetry = null;
    this.flush(peer, conn);
  }

  /**
   * Stops writing to a connection that lost the tie, and closes it after a grace period: frames
   * the peer wrote before it retired the same connection are still read meanwhile. (Not a
   * half-close: TLS sockets do not keep reading after end().)
   */
  private retire(conn: Conn): void {
    conn.retired = true;
    conn.cancelTimeout?.();
    conn.cancelTimeout = this.clock.setTimer(RETIRE_GRACE_MS, () => {
      conn.cancelTimeout = null;
      this.destroy(conn);
    });
  }
}

function remoteOf(s: net.Socket): string {
  return s.remoteAddress !== undefined ? `${s.remoteAddress.includes(':') ? `[${s.remoteAddress}]` : s.remoteAddress}:${s.remotePort}` : 'an unknown address';
}
