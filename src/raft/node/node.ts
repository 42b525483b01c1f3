/**
 * RaftNode: the Raft core with a disk, a network and a clock. It owns a RawNode, a
 * DurableStorage (the WAL) and a RaftTransport, ticks the core every `tickMs`, steps what the
 * transport delivers, and runs the Ready loop in the contract's order:
 *
 *   1. persist the Ready's snapshot, entries and hard state (one write, one fdatasync: MustSync);
 *   2. only then send its messages (a vote or an append acknowledgement claims that step 1 is
 *      durable). A leader's appends and heartbeats are the exception (Raft thesis 10.2.1, as
 *      etcd's server does): they are written to the sockets before step 1, so the followers'
 *      fdatasync runs while the leader's does and a commit costs one disk flush of latency, not
 *      two. They claim nothing durable on the leader: its own match index counts toward commit,
 *      but no acknowledgement is stepped before its save returns (the save is synchronous), and
 *      a leader that crashes before its save returns loses only entries nobody acknowledged to a
 *      client;
 *   3. install a received snapshot, apply committed entries (the application's `apply`), apply
 *      conf changes to the core and the transport, serve read states;
 *   4. advance, and maybe snapshot and compact.
 *
 * The loop runs synchronously (the WAL's save is synchronous) in a `setImmediate` turn, so all
 * proposals and messages that arrived in one pass of the event loop's poll phase land in one
 * Ready and share one fsync (group commit).
 */
import { ClosedError, InvalidArgumentError, StoreUnavailableError } from '../../core/errors.js';
import { systemClock, type Clock } from '../../core/clock.js';
import { systemRandom, type Random } from '../../core/random.js';
import { InvariantError, ProposalDroppedError } from '../core/errors.js';
import { RawNode, type Status } from '../core/raw-node.js';
import type { RaftConfig } from '../core/raft.js';
import {
  decodeConfChange,
  NONE,
  type ConfChange,
  type ConfState,
  type Entry,
  type Message,
  type NodeId,
  type Ready,
  type Role,
  type Snapshot,
} from '../core/types.js';
import { DurableStorage, type DurableStorageOptions } from '../wal/storage.js';
import { DiskFullError } from '../wal/errors.js';
import { RaftTransport, type ClientLink, type PeerAddress, type TransportOptions, type TransportStats, type TransportTlsOptions } from '../transport/transport.js';
import { ProposalLostError, RaftNotLeaderError, RaftTimeoutError } from './errors.js';
import { decodeNodeSnapshot, encodeNodeSnapshot } from './snapshot-data.js';

/** What the application supplies: its state machine. */
export interface StateMachine<R> {
  /**
   * Applies committed normal entries (in log order, each exactly once per start: after a restart
   * the entries after the last snapshot are applied again to the restored state). The leader's
   * empty no-op entries are not passed. Returns one result per entry (handed to the proposer),
   * or nothing. A throw stops the node (the state machine can no longer follow the log).
   */
  apply(entries: readonly Entry[]): readonly R[] | void;
  /** The state machine's image as of the last applied entry (called after `apply`, synchronously). */
  snapshot(): Uint8Array;
  /** Replaces the state with an image made by `snapshot` (empty bytes: the empty initial state). */
  restore(data: Uint8Array): void;
}

export interface RaftNodeOptions<R> extends StateMachine<R> {
  /** This node's id, a positive integer. */
  readonly id: NodeId;
  /** Data directory of the WAL and snapshots. One process per directory. */
  readonly dataDir: string;
  /** Where the transport listens (`host:port`; port 0 picks one). */
  readonly listen: PeerAddress | string;
  /**
   * Addresses of the cluster's nodes (this node's own entry is ignored by the transport). On the
   * first start, unless `join` is set, these ids (and this node) are the initial voters.
   */
  readonly peers: Readonly<Record<number, string>> | ReadonlyMap<NodeId, string>;
  /** Start empty and wait to be added by a conf change (default false: bootstrap from `peers`). */
  readonly join?: boolean;
  readonly clusterId: string;
  /** The cluster's shared secret, at least 16 bytes. */
  readonly secret: string | Uint8Array;
  readonly tls?: TransportTlsOptions;
  /** Length of one tick, ms (default 10). */
  readonly tickMs?: number;
  /** Election timeout in ticks (default 30: 300 ms at 10 ms ticks; randomized to [T, 2T)). */
  readonly electionTicks?: number;
  /** Heartbeat interval in ticks (default 5: 50 ms at 10 ms ticks). */
  readonly heartbeatTicks?: number;
  /** Take a snapshot after this many applied entries (default 10,000). */
  readonly snapshotEntries?: number;
  /** Entries kept in the log behind a snapshot for slow followers (default 5,000; 0 compacts up to the snapshot). */
  readonly catchUpEntries?: number;
  /** A read index or transfer not confirmed within this many ms is rejected (default: 2 election timeouts). */
  readonly requestTimeoutMs?: number;
  /** Proposals waiting for their commit at most (default 65,536); more are refused. */
  readonly maxPendingProposals?: number;
  /** Delay between retries of a save that found the disk full, ms (default 100). */
  readonly diskRetryMs?: number;
  /** Options passed through to the core (preVote, checkQuorum, size limits...). */
  readonly raft?: Partial<Omit<RaftConfig, 'id' | 'storage' | 'random' | 'electionTick' | 'heartbeatTick' | 'applied'>>;
  /** Options passed through to the storage (segment size, snapshots kept, the fs seam for fault tests). */
  readonly storage?: Partial<Omit<DurableStorageOptions, 'dir' | 'log'>>;
  /** Options passed through to the transport. */
  readonly transport?: Partial<Omit<TransportOptions, 'id' | 'clusterId' | 'secret' | 'listen' | 'peers' | 'tls' | 'clock' | 'random' | 'log'>>;
  readonly clock?: Clock;
  readonly random?: Random;
  /** Where one-line reports go (default: stderr). */
  readonly log?: (line: string) => void;
}

/** A committed and applied proposal. */
export interface Proposed<R> {
  readonly index: number;
  readonly term: number;
  /** What `apply` returned for the entry (undefined when it returned nothing). */
  readonly result: R | undefined;
}

export interface NodeStatus extends Status {
  /** The leader's address when known. */
  readonly leaderAddress: string | undefined;
  /** Index of the latest snapshot. */
  readonly snapshotIndex: number;
  readonly firstIndex: number;
  readonly lastIndex: number;
  /** Set while the disk is full: proposals are refused until a save succeeds again. */
  readonly diskFull: DiskFullError | undefined;
  readonly transport: TransportStats;
}

/** A leader's append or heartbeat: sent before the Ready is persisted (see the loop's step 2). */
const sentBeforePersist = (m: Message): boolean => m.type === 'app' || m.type === 'heartbeat';

export const raftNodeDefaults = {
  tickMs: 10,
  electionTicks: 30,
  heartbeatTicks: 5,
  snapshotEntries: 10_000,
  catchUpEntries: 5_000,
  maxPendingProposals: 65_536,
  diskRetryMs: 100,
} as const;

interface ProposalWaiter<R> {
  readonly term: number;
  resolve(p: Proposed<R>): void;
  reject(err: unknown): void;
}

interface ReadWaiter {
  /** 0 until the read state arrives. */
  index: number;
  resolve(index: number): void;
  reject(err: unknown): void;
}

interface ConfWaiter {
  readonly term: number;
  resolve(cs: ConfState): void;
  reject(err: unknown): void;
}

const encoder = new TextEncoder();

function positiveInt(field: string, value: number | undefined, fallback: number, min = 1): number {
  const v = value ?? fallback;
  if (!Number.isSafeInteger(v) || v < min) throw new InvalidArgumentError(field, `expected an integer >= ${min}, got ${String(value)}`);
  return v;
}

function addressText(a: PeerAddress | string): string {
  return typeof a === 'string' ? a : `${a.host.includes(':') ? `[${a.host}]` : a.host}:${a.port}`;
}

/**
 * A Raft node. Start one with `RaftNode.start(options)`; propose with `propose`, read with
 * `readIndex`, change membership with `addMember`/`removeMember`, stop with `close()`.
 */
export class RaftNode<R = unknown> implements AsyncDisposable {
  readonly id: NodeId;
  private readonly sm: StateMachine<R>;
  private readonly clock: Clock;
  private readonly log: (line: string) => void;
  private readonly tickMs: number;
  private readonly electionMs: number;
  private readonly snapshotEntries: number;
  private readonly catchUpEntries: number;
  private readonly requestTimeoutMs: number;
  private readonly maxPendingProposals: number;
  private readonly diskRetryMs: number;
  private readonly addresses: Map<NodeId, string>;

  private readonly proposals = new Map<number, ProposalWaiter<R>>();
  private readonly reads = new Map<string, ReadWaiter>();
  private readonly confWaiters = new Map<number, ConfWaiter>();
  private readonly leaderWaiters = new Set<{ to: NodeId; resolve(): void; reject(err: unknown): void }>();
  private readonly roleListeners = new Set<() => void>();
  private readSeq = 0;
  private confState: ConfState;
  private applied: number;
  private snapshotIndex: number;
  private lead: NodeId = NONE;
  private role: Role = 'follower';
  private scheduled = false;
  private cancelTick: (() => void) | null = null;
  /** When the next tick is due on the tick grid (clock ms; 0 before the first). */
  private nextTickAt = 0;
  /** Missed ticks made up in one go at most: one heartbeat interval's worth. */
  private readonly maxCatchUpTicks: number;
  private cancelDiskRetry: (() => void) | null = null;
  /** A Ready whose save found the disk full, retried until it succeeds. */
  private stalled: Ready | undefined = undefined;
  private diskFull: DiskFullError | undefined = undefined;
  private fatal: unknown = undefined;
  private closed = false;
  private closing: Promise<void> | null = null;

  private constructor(
    options: RaftNodeOptions<R>,
    private readonly storage: DurableStorage,
    private readonly transport: RaftTransport,
    private readonly raw: RawNode,
    addresses: Map<NodeId, string>,
  ) {
    this.id = options.id;
    this.sm = options;
    this.clock = options.clock ?? systemClock;
    this.log = options.log ?? ((line) => process.stderr.write(`${line}\n`));
    this.tickMs = positiveInt('tickMs', options.tickMs, raftNodeDefaults.tickMs);
    this.electionMs = this.tickMs * (options.electionTicks ?? raftNodeDefaults.electionTicks);
    this.maxCatchUpTicks = options.heartbeatTicks ?? raftNodeDefaults.heartbeatTicks;
    this.snapshotEntries = positiveInt('snapshotEntries', options.snapshotEntries, raftNodeDefaults.snapshotEntries);
    this.catchUpEntries = positiveInt('catchUpEntries', options.catchUpEntries, raftNodeDefaults.catchUpEntries, 0);
    this.requestTimeoutMs = positiveInt('requestTimeoutMs', options.requestTimeoutMs, 2 * this.electionMs);
    this.maxPendingProposals = positiveInt('maxPendingProposals', options.maxPendingProposals, raftNodeDefaults.maxPendingProposals);
    this.diskRetryMs = positiveInt('diskRetryMs', options.diskRetryMs, raftNodeDefaults.diskRetryMs);
    this.addresses = addresses;
    const snap = storage.snapshot();
    this.confState = snap.metadata.confState;
    this.snapshotIndex = snap.metadata.index;
    this.applied = snap.metadata.index;
  }

  /**
   * Opens the data directory (bootstrapping a new cluster from `peers` on the first start),
   * restores the application from the latest snapshot, starts listening and ticking. Rejects
   * with InvalidArgumentError for bad options, WalCorruptError for a damaged data directory,
   * or the transport's error when the port cannot be bound (nothing is left open then).
   */
  static async start<R>(options: RaftNodeOptions<R>): Promise<RaftNode<R>> {
    const id = options.id;
    if (!Number.isSafeInteger(id) || id < 1) throw new InvalidArgumentError('id', `expected a positive integer node id, got ${String(id)}`);
    positiveInt('tickMs', options.tickMs, raftNodeDefaults.tickMs);
    const electionTick = positiveInt('electionTicks', options.electionTicks, raftNodeDefaults.electionTicks, 2);
    const heartbeatTick = positiveInt('heartbeatTicks', options.heartbeatTicks, raftNodeDefaults.heartbeatTicks);
    if (heartbeatTick >= electionTick) throw new InvalidArgumentError('heartbeatTicks', `must be less than electionTicks (${electionTick}), got ${heartbeatTick}`);
    const addresses = new Map<NodeId, string>();
    const entries = options.peers instanceof Map ? [...(options.peers as ReadonlyMap<NodeId, string>).entries()] : Object.entries(options.peers).map(([k, v]) => [Number(k), v] as const);
    for (const [peer, addr] of entries) {
      if (!Number.isSafeInteger(peer) || peer < 1) throw new InvalidArgumentError('peers', `expected positive integer node ids, got ${String(peer)}`);
      addresses.set(peer, addressText(addr));
    }
    const log = options.log ?? ((line: string) => process.stderr.write(`${line}\n`));
    const random = options.random ?? systemRandom;
    const storage = DurableStorage.open({ ...options.storage, dir: options.dataDir, log: (line) => log(`raft node ${id}: ${line}`) });
    let transport: RaftTransport | undefined;
    try {
      if (storage.lastIndex() === 0 && !options.join) {
        // A new cluster: the initial membership as a snapshot at index 1 (see RawNode's constructor).
        const voters = [...new Set([...addresses.keys(), id])].sort((a, b) => a - b);
        storage.save({
          snapshot: { metadata: { index: 1, term: 1, confState: { voters, learners: [], votersOutgoing: [], learnersNext: [], autoLeave: false } }, data: new Uint8Array() },
          hardState: { term: 1, vote: 0, commit: 1 },
          entries: [],
        });
      }
      const snap = storage.snapshot();
      if (snap.data.byteLength > 0) {
        const { addresses: saved, app } = decodeNodeSnapshot(snap.data);
        for (const [peer, addr] of saved) if (!addresses.has(peer)) addresses.set(peer, addr);
        options.restore(app);
      }
      transport = await RaftTransport.listen({
        ...options.transport,
        id,
        clusterId: options.clusterId,
        secret: options.secret,
        listen: options.listen,
        peers: new Map([...addresses].filter(([peer]) => peer !== id)),
        ...(options.tls ? { tls: options.tls } : {}),
        clock: options.clock ?? systemClock,
        random,
        log,
      });
      const raw = new RawNode({ ...options.raft, id, storage, random, electionTick, heartbeatTick });
      const node = new RaftNode<R>(options, storage, transport, raw, addresses);
      node.begin();
      return node;
    } catch (err) {
      await transport?.close();
      storage.close();
      throw err;
    }
  }

  private begin(): void {
    this.transport.onMessage((m) => this.onMessage(m));
    this.transport.onUnreachable((peer) => {
      if (this.closed) return;
      this.raw.reportUnreachable(peer);
      this.schedule();
    });
    this.transport.onSnapshotStatus((peer, ok) => {
      if (this.closed) return;
      this.raw.reportSnapshot(peer, ok ? 'finish' : 'failure');
      this.schedule();
    });
    this.armTick();
    this.schedule();
  }

  /** The transport's bound address (the chosen port when `listen` gave port 0). */
  get address(): PeerAddress {
    return this.transport.address;
  }

  get isLeader(): boolean {
    return this.role === 'leader';
  }

  /**
   * Calls `listener` after each change of this node's role or of the leader it knows, once the
   * Ready that carried it is persisted, in a microtask (so it may call back into the node).
   * Returns the function that stops it. A new leader learns it leads at once, not on a poll.
   */
  onRoleChange(listener: () => void): () => void {
    this.roleListeners.add(listener);
    return () => void this.roleListeners.delete(listener);
  }

  /** The known leader, 0 when none is known. */
  get leader(): NodeId {
    return this.lead;
  }

  /**
   * Proposes `data` for the log. Resolves once the entry is committed and applied on this node,
   * with its index and the result `apply` returned for it. Rejects with RaftNotLeaderError (naming
   * the leader) on a follower, ProposalDroppedError when the core refuses it, ProposalLostError
   * when leadership changed and another entry committed at its index (retry is safe), DiskFullError
   * while the disk is full, ClosedError after close, and the signal's reason when it aborts
   * (the entry may still commit: a timeout is "maybe").
   */
  propose(data: Uint8Array, signal?: AbortSignal): Promise<Proposed<R>> {
    return new Promise<Proposed<R>>((resolve, reject) => {
      if (signal?.aborted) return reject(signal.reason);
      const refused = this.refusal('proposal');
      if (refused) return reject(refused);
      if (this.proposals.size >= this.maxPendingProposals) {
        return reject(new ProposalDroppedError('uncommitted-size-limit', this.id, this.raw.status().term, this.role));
      }
      try {
        this.raw.propose(data);
      } catch (err) {
        return reject(err);
      }
      // A leader appends a proposal to its log at once, so the entry is the log's last one.
      // (The core has no other way to name it; `internal` is read-only here.)
      const r = this.raw.internal;
      const index = r.log.lastIndex();
      const waiter: ProposalWaiter<R> = { term: r.term, resolve, reject };
      this.proposals.set(index, waiter);
      if (signal) {
        const onAbort = (): void => {
          if (this.proposals.get(index) === waiter) this.proposals.delete(index);
          reject(signal.reason);
        };
        signal.addEventListener('abort', onAbort, { once: true });
        const done = (): void => signal.removeEventListener('abort', onAbort);
        waiter.resolve = (p) => (done(), resolve(p));
        waiter.reject = (e) => (done(), reject(e));
      }
      this.schedule();
    });
  }

  /**
   * Resolves with a read index once every entry committed before the call is applied on this
   * node: a read of the local state machine after that is linearizable. Works on followers (the
   * request goes to the leader). Rejects with RaftTimeoutError when no quorum confirms it within
   * `requestTimeoutMs` (a partitioned old leader never confirms), ProposalDroppedError when no
   * leader is known, ClosedError, or the signal's reason.
   */
  readIndex(signal?: AbortSignal): Promise<number> {
    return new Promise<number>((resolve, reject) => {
      if (signal?.aborted) return reject(signal.reason);
      if (this.closed) return reject(new ClosedError(`raft node ${this.id}`));
      if (this.fatal !== undefined) return reject(this.fatal);
      const context = `${this.id}.${++this.readSeq}`;
      try {
        this.raw.readIndex(context);
      } catch (err) {
        return reject(err);
      }
      const cancelTimer = this.clock.setTimer(this.requestTimeoutMs, () => finish(new RaftTimeoutError('read index', `within ${this.requestTimeoutMs} ms`)));
      const onAbort = (): void => finish(signal?.reason);
      const finish = (err: unknown, index?: number): void => {
        if (!this.reads.delete(context)) return;
        cancelTimer();
        signal?.removeEventListener('abort', onAbort);
        if (index !== undefined) resolve(index);
        else reject(err);
      };
      signal?.addEventListener('abort', onAbort, { once: true });
      this.reads.set(context, { index: 0, resolve: (i) => finish(undefined, i), reject: (e) => finish(e) });
      this.schedule();
    });
  }

  /**
   * Hands leadership to `to`. Resolves once this node sees `to` as leader; rejects with
   * RaftTimeoutError after `requestTimeoutMs` (the core gives up after one election timeout),
   * ProposalDroppedError when no leader is known.
   */
  transferLeadership(to: NodeId, signal?: AbortSignal): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      if (signal?.aborted) return reject(signal.reason);
      if (this.closed) return reject(new ClosedError(`raft node ${this.id}`));
      if (this.lead === to) return resolve();
      try {
        this.raw.transferLeadership(to);
      } catch (err) {
        return reject(err);
      }
      const cancelTimer = this.clock.setTimer(this.requestTimeoutMs, () => finish(new RaftTimeoutError(`transfer of leadership to node ${to}`, `within ${this.requestTimeoutMs} ms`)));
      const onAbort = (): void => finish(signal?.reason);
      const waiter = { to, resolve: () => finish(undefined, true), reject: (e: unknown) => finish(e) };
      const finish = (err: unknown, ok?: boolean): void => {
        if (!this.leaderWaiters.delete(waiter)) return;
        cancelTimer();
        signal?.removeEventListener('abort', onAbort);
        if (ok) resolve();
        else reject(err);
      };
      signal?.addEventListener('abort', onAbort, { once: true });
      this.leaderWaiters.add(waiter);
      this.schedule();
    });
  }

  /**
   * Serves store clients on this node's port (the transport's client role): each authenticated
   * client connection is handed to `handler`. One handler; a later call replaces it.
   */
  serveClients(handler: (link: ClientLink) => void): void {
    this.transport.onClient(handler);
  }

  /** Starts an election now (ignored on a leader or learner). */
  campaign(): void {
    if (this.closed || this.stalled) return;
    this.raw.campaign();
    this.schedule();
  }

  /**
   * Adds a voter (or a learner) at `address`. Resolves with the new membership once the change
   * is committed and applied here; the address travels in the entry, so every node learns it.
   * Rejects like `propose` (one conf change at a time: `conf-change-pending`).
   */
  addMember(id: NodeId, address: PeerAddress | string, options: { learner?: boolean; signal?: AbortSignal } = {}): Promise<ConfState> {
    if (!Number.isSafeInteger(id) || id < 1) return Promise.reject(new InvalidArgumentError('id', `expected a positive integer node id, got ${String(id)}`));
    return this.proposeConfChange({ transition: 'auto', changes: [{ type: options.learner ? 'addLearner' : 'addNode', nodeId: id }] }, { [id]: addressText(address) }, options.signal);
  }

  /** Promotes a learner to voter (the same as addMember without a new address). */
  promoteMember(id: NodeId, signal?: AbortSignal): Promise<ConfState> {
    return this.proposeConfChange({ transition: 'auto', changes: [{ type: 'addNode', nodeId: id }] }, {}, signal);
  }

  /** Removes a member. Resolves with the new membership once applied here. */
  removeMember(id: NodeId, signal?: AbortSignal): Promise<ConfState> {
    return this.proposeConfChange({ transition: 'auto', changes: [{ type: 'removeNode', nodeId: id }] }, {}, signal);
  }

  /**
   * Proposes any conf change (joint ones included). `addresses` names the new members' addresses;
   * they are carried in the entry beside the change, so every node's transport learns them.
   */
  proposeConfChange(cc: ConfChange, addresses: Readonly<Record<number, string>> = {}, signal?: AbortSignal): Promise<ConfState> {
    return new Promise<ConfState>((resolve, reject) => {
      if (signal?.aborted) return reject(signal.reason);
      const refused = this.refusal('conf change');
      if (refused) return reject(refused);
      const data = encoder.encode(JSON.stringify({ t: cc.transition, c: cc.changes.map((c) => [c.type, c.nodeId]), a: addresses }));
      const r = this.raw.internal;
      // RawNode.proposeConfChange encodes the change itself, with no room for the addresses; the
      // core's decoder reads `t` and `c` and ignores `a`, so the entry is a valid conf change.
      const dropped = r.step({ type: 'prop', from: this.id, to: NONE, term: 0, logTerm: 0, index: 0, entries: [{ term: 0, index: 0, type: 'confChange', data }], commit: 0, reject: false, rejectHint: 0 });
      if (dropped !== undefined) return reject(new ProposalDroppedError(dropped, this.id, r.term, r.role, 'conf change'));
      const index = r.log.lastIndex();
      const onAbort = (): void => {
        if (this.confWaiters.get(index) === waiter) this.confWaiters.delete(index);
        reject(signal?.reason);
      };
      const waiter: ConfWaiter = {
        term: r.term,
        resolve: (cs) => (signal?.removeEventListener('abort', onAbort), resolve(cs)),
        reject: (e) => (signal?.removeEventListener('abort', onAbort), reject(e)),
      };
      this.confWaiters.set(index, waiter);
      signal?.addEventListener('abort', onAbort, { once: true });
      this.schedule();
    });
  }

  status(): NodeStatus {
    const s = this.raw.status();
    return {
      ...s,
      leaderAddress: this.addresses.get(s.lead),
      snapshotIndex: this.snapshotIndex,
      firstIndex: this.storage.firstIndex(),
      lastIndex: this.storage.lastIndex(),
      diskFull: this.diskFull,
      transport: this.transport.stats(),
    };
  }

  /**
   * Stops ticking, closes the transport and the WAL. Waiting proposals reject with ClosedError
   * (they may still commit on the others: "maybe"). Idempotent.
   */
  close(): Promise<void> {
    if (this.closing) return this.closing;
    this.closed = true;
    this.cancelTick?.();
    this.cancelDiskRetry?.();
    const err = new ClosedError(`raft node ${this.id}`);
    this.failAll(err);
    this.closing = this.transport.close().finally(() => this.storage.close());
    return this.closing;
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }

  // ---- the loop ----

  /** Why a write is refused now, or undefined. */
  private refusal(what: string): Error | undefined {
    if (this.closed) return new ClosedError(`raft node ${this.id}`);
    if (this.fatal !== undefined) return this.fatal instanceof Error ? this.fatal : new InvariantError(String(this.fatal));
    if (this.diskFull) return this.diskFull;
    // The core's own view, not the last Ready's: a proposal stepped into a node that has just
    // stepped down would be forwarded, and its index would not be the log's last.
    const r = this.raw.internal;
    if (r.role !== 'leader') return new RaftNotLeaderError(this.id, r.lead, this.addresses.get(r.lead), what);
    return undefined;
  }

  /**
   * Ticks keep to a grid of `tickMs` from the start, as a Go ticker does: a timer that fires late
   * does not push every later tick back. Re-arming `tickMs` after each tick let the lateness add
   * up: on a loaded machine 30 ticks took 350-400 ms, so the election timeout (and the failover
   * after a crash) ran 15-30 % over what was set. Ticks missed by a late timer are made up, up to
   * one heartbeat interval's worth (etcd, whose tick is its heartbeat interval, buffers one
   * tick); after a longer stall (a pause, a long GC) the grid restarts from now, so a node that
   * could not read its sockets meanwhile does not campaign on ticks it slept through.
   */
  private armTick(): void {
    const now = this.clock.now();
    if (this.nextTickAt === 0) this.nextTickAt = now + this.tickMs;
    this.cancelTick = this.clock.setTimer(this.nextTickAt - now, () => {
      if (this.closed) return;
      const at = this.clock.now();
      const due = Math.floor((at - this.nextTickAt) / this.tickMs) + 1;
      const ticks = Math.max(1, Math.min(due, this.maxCatchUpTicks));
      this.nextTickAt += ticks * this.tickMs;
      if (this.nextTickAt <= at) this.nextTickAt = at + this.tickMs;
      // A node whose disk is full does not tick: it stays silent (no heartbeats, no campaigns)
      // rather than act on state it could not persist; the others elect a leader meanwhile.
      if (this.stalled === undefined && this.fatal === undefined) {
        for (let i = 0; i < ticks; i++) this.raw.tick();
        this.run();
      }
      this.armTick();
    });
  }

  private onMessage(m: Message): void {
    if (this.closed || this.stalled !== undefined || this.fatal !== undefined) return;
    try {
      this.raw.step(m);
    } catch (err) {
      this.log(`raft node ${this.id}: dropped a ${m.type} message from ${m.from}: ${(err as Error).message}`);
      return;
    }
    this.schedule();
  }

  /** Runs the loop in the next check phase, after every I/O callback of this poll phase (group commit). */
  private schedule(): void {
    if (this.scheduled || this.closed) return;
    this.scheduled = true;
    setImmediate(() => {
      this.scheduled = false;
      this.run();
    });
  }

  private run(): void {
    if (this.closed || this.stalled !== undefined || this.fatal !== undefined) return;
    try {
      while (this.raw.hasReady()) {
        const rd = this.raw.ready();
        const early = rd.messages.filter(sentBeforePersist);
        if (early.length > 0) {
          this.transport.send(early);
          this.transport.flushNow();
        }
        const ready = early.length > 0 ? { ...rd, messages: rd.messages.filter((m) => !sentBeforePersist(m)) } : rd;
        if (!this.persist(ready)) return;
        this.handle(ready);
      }
    } catch (err) {
      this.stop(err);
    }
  }

  /** Step 1; false when the disk is full (the Ready is kept and retried). */
  private persist(rd: Ready): boolean {
    try {
      this.storage.save(rd);
    } catch (err) {
      if (!(err instanceof DiskFullError)) throw err;
      if (this.diskFull === undefined) this.log(`raft node ${this.id}: ${err.message}; refusing proposals until a save succeeds`);
      this.diskFull = err;
      this.stalled = rd;
      // Proposals appended by this node as leader are in the unsaved Ready: none can commit
      // through it, and the others will elect a leader without them.
      this.cancelDiskRetry = this.clock.setTimer(this.diskRetryMs, () => this.retryStalled());
      return false;
    }
    return true;
  }

  private retryStalled(): void {
    this.cancelDiskRetry = null;
    const rd = this.stalled;
    if (this.closed || rd === undefined) return;
    this.stalled = undefined;
    try {
      if (!this.persist(rd)) return;
      this.log(`raft node ${this.id}: the disk has room again; accepting proposals`);
      this.diskFull = undefined;
      this.handle(rd);
      this.run();
    } catch (err) {
      this.stop(err);
    }
  }

  /** Steps 2-4 for a persisted Ready. */
  private handle(rd: Ready): void {
    if (rd.messages.length > 0) this.transport.send(rd.messages);
    if (rd.snapshot !== undefined) this.installSnapshot(rd.snapshot);
    if (rd.committedEntries.length > 0) this.applyEntries(rd.committedEntries);
    if (rd.softState !== undefined) this.onSoftState(rd.softState.lead, rd.softState.role);
    for (const rs of rd.readStates) {
      const w = this.reads.get(rs.context);
      if (w) w.index = Math.max(rs.index, 1);
    }
    this.raw.advance();
    if (this.reads.size > 0) this.serveReads();
    this.maybeSnapshot();
  }

  private installSnapshot(snap: Snapshot): void {
    const { addresses, app } = decodeNodeSnapshot(snap.data);
    for (const [peer, addr] of addresses) this.learnAddress(peer, addr);
    this.sm.restore(app);
    // Proposals at or below the snapshot: whether ours committed is not knowable here ("maybe").
    for (const [index, w] of this.proposals) {
      if (index <= snap.metadata.index) {
        this.proposals.delete(index);
        w.reject(new StoreUnavailableError(`proposal at index ${index}: a snapshot replaced the log before it was applied here; it may have committed`));
      }
    }
    this.confState = snap.metadata.confState;
    this.snapshotIndex = snap.metadata.index;
    this.applied = snap.metadata.index;
    this.syncPeers();
  }

  private applyEntries(entries: readonly Entry[]): void {
    const batch: Entry[] = [];
    const flush = (): void => {
      if (batch.length === 0) return;
      const results = this.sm.apply(batch);
      for (let i = 0; i < batch.length; i++) this.settleProposal(batch[i]!, results ? results[i] : undefined);
      batch.length = 0;
    };
    for (const e of entries) {
      if (e.type === 'confChange') {
        flush();
        this.applyConfEntry(e);
      } else if (e.data.byteLength > 0) {
        batch.push(e);
      } else {
        this.settleProposal(e, undefined);
      }
    }
    flush();
    this.applied = entries[entries.length - 1]!.index;
  }

  private settleProposal(e: Entry, result: R | undefined): void {
    const w = this.proposals.get(e.index);
    if (w === undefined) return;
    this.proposals.delete(e.index);
    if (w.term === e.term) w.resolve({ index: e.index, term: e.term, result });
    else w.reject(new ProposalLostError(e.index, w.term, e.term));
  }

  private applyConfEntry(e: Entry): void {
    let cc: ConfChange;
    let addrs: Record<string, unknown> = {};
    try {
      cc = decodeConfChange(e.data);
      const raw = JSON.parse(new TextDecoder().decode(e.data)) as { a?: unknown };
      if (typeof raw.a === 'object' && raw.a !== null) addrs = raw.a as Record<string, unknown>;
    } catch (err) {
      // A committed entry every node decodes the same way: skipping it keeps them in step.
      this.log(`raft node ${this.id}: skipped a malformed conf change at index ${e.index}: ${(err as Error).message}`);
      this.settleConf(e, this.confState);
      return;
    }
    for (const [k, v] of Object.entries(addrs)) if (typeof v === 'string') this.learnAddress(Number(k), v);
    this.confState = this.raw.applyConfChange(cc);
    for (const c of cc.changes) {
      if (c.type === 'removeNode' && c.nodeId !== this.id) {
        this.transport.removePeer(c.nodeId);
      }
    }
    this.syncPeers();
    this.settleConf(e, this.confState);
  }

  private settleConf(e: Entry, cs: ConfState): void {
    const w = this.confWaiters.get(e.index);
    this.settleProposal(e, undefined);
    if (w === undefined) return;
    this.confWaiters.delete(e.index);
    if (w.term === e.term) w.resolve(cs);
    else w.reject(new ProposalLostError(e.index, w.term, e.term));
  }

  private learnAddress(peer: NodeId, addr: string): void {
    if (!Number.isSafeInteger(peer) || peer < 1) return;
    this.addresses.set(peer, addr);
  }

  /** Makes the transport's peers the members of the configuration whose addresses are known. */
  private syncPeers(): void {
    const cs = this.confState;
    const members = new Set([...cs.voters, ...cs.learners, ...cs.votersOutgoing, ...cs.learnersNext]);
    for (const m of members) {
      if (m === this.id) continue;
      const addr = this.addresses.get(m);
      if (addr !== undefined) this.transport.addPeer(m, addr);
      else this.log(`raft node ${this.id}: member ${m} has no known address; messages to it are dropped`);
    }
  }

  private onSoftState(lead: NodeId, role: Role): void {
    const leaderChanged = lead !== this.lead;
    if (leaderChanged || role !== this.role) for (const l of this.roleListeners) queueMicrotask(l);
    this.lead = lead;
    this.role = role;
    if (leaderChanged) {
      // A read waiting for a confirmation from the old leader will not get one.
      for (const w of [...this.reads.values()]) if (w.index === 0) w.reject(new RaftTimeoutError('read index', 'before the leader changed'));
      for (const w of [...this.leaderWaiters]) if (w.to === lead) w.resolve();
    }
  }

  private serveReads(): void {
    for (const w of [...this.reads.values()]) if (w.index > 0 && w.index <= this.applied) w.resolve(w.index);
  }

  private maybeSnapshot(): void {
    if (this.applied - this.snapshotIndex < this.snapshotEntries) return;
    const index = this.applied;
    const data = encodeNodeSnapshot(this.addresses, this.sm.snapshot());
    try {
      this.storage.createSnapshot(index, this.confState, data);
    } catch (err) {
      // Not fatal: the log simply stays longer; the next apply tries again.
      if (err instanceof DiskFullError) {
        this.log(`raft node ${this.id}: snapshot at index ${index} not written: ${err.message}`);
        return;
      }
      throw err;
    }
    this.snapshotIndex = index;
    const compactTo = index - this.catchUpEntries;
    if (compactTo >= this.storage.firstIndex()) this.storage.compact(compactTo);
  }

  /** An error the node cannot continue after (apply threw, storage broke): everything waiting rejects. */
  private stop(err: unknown): void {
    if (this.fatal !== undefined) return;
    this.fatal = err;
    this.log(`raft node ${this.id}: stopped: ${(err as Error)?.message ?? String(err)}`);
    this.cancelTick?.();
    this.failAll(err);
  }

  private failAll(err: unknown): void {
    for (const w of this.proposals.values()) w.reject(err);
    this.proposals.clear();
    for (const w of this.confWaiters.values()) w.reject(err);
    this.confWaiters.clear();
    for (const w of [...this.reads.values()]) w.reject(err);
    for (const w of [...this.leaderWaiters]) w.reject(err);
  }
}
