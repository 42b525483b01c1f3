/**
 * The embedded Raft store: a RaftNode in this process with the Raft store's state machine as its
 * application, serving the Store interface (docs/raft-store.md, "Embedded: openRaftStore").
 *
 * Writes are proposed through the node on the leader and answered from the apply result; a
 * follower refuses them with RaftNotLeaderError naming the leader (no forwarding). Reads wait for
 * a ReadIndex, so they are linearizable on any member, then read the local state machine. The
 * node layer's duties listed in docs/raft-store.md are all here: a new leader's first command is
 * `takeover`, commands are stamped with the leader's lease clock, an idle leader proposes `tick`,
 * the node that answers reports a stale append, and the dedupe bounds are fixed for every node.
 */
import { randomBytes } from 'node:crypto';
import {
  ClosedError,
  InvalidArgumentError,
  StaleTermError,
  StoreUnavailableError,
  checkAppendOptions,
  checkName,
  reportStale,
  sleep,
  systemClock,
} from '../../core/index.js';
import type {
  AcquireResult,
  AppendFencedOptions,
  Clock,
  FencingToken,
  Lease,
  LeaseMeta,
  ReadStreamOptions,
  RenewManyItem,
  RenewResult,
  Store,
  StreamEntry,
  StreamHead,
  Unsubscribe,
  WatchListener,
} from '../../core/index.js';
import { RaftNode, RaftNotLeaderError, type NodeStatus, type RaftNodeOptions } from '../../raft/node/index.js';
import type { TransportTlsOptions } from '../../raft/transport/index.js';
import type { Random } from '../../core/index.js';
import { COMMAND_MAX_BYTES, encodeCommand, resultToError } from './commands.js';
import type { CommandResult, Operation, ResultValue } from './commands.js';
import { RaftStateMachine, type ChangeEvent, type StateMachineOptions } from './state-machine.js';
import type { Session } from './commands.js';
import type { ClientOperation, MemberStatus, Membership } from './client-protocol.js';
import { serveClient } from './client-server.js';

/**
 * The dedupe bounds of every Raft store node. They decide which answers are forgotten, so every
 * node of a cluster must use the same ones: they are fixed here, not options.
 */
export const RAFT_STORE_DEDUPE: Required<StateMachineOptions> = { maxSessions: 10_000, maxResultsPerSession: 1024 };

export interface RaftStoreOptions {
  /** This node's id, a positive integer. */
  readonly id: number;
  /** Where this node's Raft transport listens, `host:port`. */
  readonly listen: string;
  /** Every member's transport address by id (this node's own included). */
  readonly peers: Readonly<Record<number, string>> | ReadonlyMap<number, string>;
  /** This node's data directory (WAL and snapshots). One process per directory. */
  readonly dataDir: string;
  /** The cluster's shared secret, at least 16 bytes. */
  readonly secret: string | Uint8Array;
  /** Names the cluster; a node of another cluster is refused at the handshake (default `tenure`). */
  readonly clusterId?: string;
  /**
   * Mutual TLS on this node's port (docs/raft-store.md, "TLS"): its key and certificate, and the
   * CA that signed every member's (PEM). Peers must present a certificate the CA signed, and
   * `rafts://` clients too unless `clientsWithoutCert`; the cluster secret is still proven inside.
   * Every member of a cluster uses TLS or none does.
   */
  readonly tls?: TransportTlsOptions;
  /** A write not committed and applied within this many ms rejects with StoreUnavailableError: maybe written (default 5000). */
  readonly proposeTimeoutMs?: number;
  /** An idle leader proposes a `tick` this often, ms, so followers' log time moves (default 250). */
  readonly idleTickMs?: number;
  /** Passed to the node (tickMs, electionTicks, heartbeatTicks, snapshotEntries, transport, ...). */
  readonly node?: Partial<Omit<RaftNodeOptions<CommandResult | null>, 'id' | 'dataDir' | 'listen' | 'peers' | 'secret' | 'tls' | 'clusterId' | 'apply' | 'snapshot' | 'restore' | 'clock' | 'random' | 'log'>>;
  readonly clock?: Clock;
  readonly random?: Random;
  /** Wall clock read once, by a brand-new cluster's first leader, to seed the log's time (default Date.now). */
  readonly wallClock?: () => number;
  /** Where one-line reports go (default stderr). */
  readonly log?: (line: string) => void;
  /**
   * Serve `raft://` store clients on this node's port (default true). They prove the cluster
   * secret at the handshake, like a peer (docs/raft-store.md, "raft:// clients").
   */
  readonly serveClients?: boolean;
}

/** What `RaftStore.status()` reports. */
export interface RaftStoreStatus {
  readonly node: NodeStatus;
  /** This node is the leader and its takeover command is applied: it takes writes. */
  readonly leaderReady: boolean;
  /** The state machine's log time, ms. */
  readonly logTimeMs: number;
  readonly appliedIndex: number;
}

/** Starts a Raft store node (bootstrapping the cluster from `peers` on its first start). */
export function openRaftStore(options: RaftStoreOptions): Promise<RaftStore> {
  return RaftStore.open(options);
}

interface LeaseWatch {
  readonly listeners: Set<WatchListener>;
  /** What the watchers were last told: `owner@term`, or null. */
  told: string | null;
  cancelExpiry: (() => void) | undefined;
}

function positive(field: string, value: number | undefined, fallback: number): number {
  const v = value ?? fallback;
  if (!Number.isSafeInteger(v) || v < 1) throw new InvalidArgumentError(field, `expected an integer >= 1, got ${String(value)}`);
  return v;
}

export class RaftStore implements Store, AsyncDisposable {
  readonly kind = 'raft';
  private machine = new RaftStateMachine(RAFT_STORE_DEDUPE);
  private node!: RaftNode<CommandResult | null>;
  private readonly clock: Clock;
  private readonly wallClock: () => number;
  private readonly log: (line: string) => void;
  private readonly proposeTimeoutMs: number;
  private readonly idleTickMs: number;
  private readonly pollMs: number;
  /** This process's session: a fresh client id per open, seqs 1, 2, ... (docs/raft-store.md, Sessions). */
  private readonly client: string;
  private seq = 0;
  /** Seqs in flight, in increasing order (a Set keeps insertion order): the first is `ack`. */
  private readonly inflight = new Set<number>();

  /** The term this node leads in (0 when it does not), and whether its takeover is applied. */
  private leaderTerm = 0;
  private ready = false;
  private readyWaiters: { resolve(): void; reject(err: unknown): void }[] = [];
  /** The lease clock: the log time taken at leadership, and the monotonic time it was taken. */
  private base = 0;
  private baseMono = 0;
  private lastProposalMono = 0;

  private readonly leaseWatches = new Map<string, LeaseWatch>();
  private readonly streamWatches = new Map<string, Set<(head: number) => void>>();
  private cancelPoll: (() => void) | undefined;
  private closed = false;
  private closing: Promise<void> | undefined;

  private constructor(options: RaftStoreOptions) {
    this.clock = options.clock ?? systemClock;
    this.wallClock = options.wallClock ?? Date.now;
    this.log = options.log ?? ((line) => process.stderr.write(`${line}\n`));
    this.proposeTimeoutMs = positive('proposeTimeoutMs', options.proposeTimeoutMs, 5000);
    this.idleTickMs = positive('idleTickMs', options.idleTickMs, 250);
    this.pollMs = options.node?.tickMs ?? 10;
    this.client = `raft-${options.id}-${randomBytes(8).toString('hex')}`;
  }

  static async open(options: RaftStoreOptions): Promise<RaftStore> {
    if (typeof options !== 'object' || options === null) throw new InvalidArgumentError('options', 'expected an object');
    if (typeof options.dataDir !== 'string' || options.dataDir === '') throw new InvalidArgumentError('dataDir', 'expected a directory path');
    // A command must fit in one WAL record and one transport frame.
    const maxRecord = options.node?.storage?.maxRecordBytes;
    if (maxRecord !== undefined && maxRecord <= COMMAND_MAX_BYTES + 1024) {
      throw new InvalidArgumentError('node.storage.maxRecordBytes', `must be above the largest command (${COMMAND_MAX_BYTES} bytes), got ${maxRecord}`);
    }
    const maxFrame = options.node?.transport?.maxFrameBytes;
    if (maxFrame !== undefined && maxFrame <= COMMAND_MAX_BYTES + 64 * 1024) {
      throw new InvalidArgumentError('node.transport.maxFrameBytes', `must be above the largest command (${COMMAND_MAX_BYTES} bytes), got ${maxFrame}`);
    }
    const store = new RaftStore(options);
    store.node = await RaftNode.start<CommandResult | null>({
      ...options.node,
      id: options.id,
      dataDir: options.dataDir,
      listen: options.listen,
      peers: options.peers,
      clusterId: options.clusterId ?? 'tenure',
      secret: options.secret,
      ...(options.tls ? { tls: options.tls } : {}),
      clock: store.clock,
      ...(options.random ? { random: options.random } : {}),
      log: store.log,
      apply: (entries) => entries.map((e) => store.applyEntry(e.index, e.data)),
      snapshot: () => store.machine.snapshot(),
      // The bootstrap snapshot has empty data: that is a fresh machine, not a snapshot to restore.
      restore: (data) => {
        store.machine = data.byteLength === 0 ? new RaftStateMachine(RAFT_STORE_DEDUPE) : RaftStateMachine.restore(data);
      },
    });
    // A change of leadership is acted on when the node reports it (the poll is the fallback).
    store.node.onRoleChange(() => {
      if (!store.closed) store.checkLeadership();
    });
    store.poll();
    if (options.serveClients !== false) store.node.serveClients((link) => serveClient(store, link));
    return store;
  }

  // ---- the node layer ----

  private applyEntry(index: number, data: Uint8Array): CommandResult | null {
    const { result, events } = this.machine.apply(index, data);
    if (events.length > 0) this.tell(events);
    return result;
  }

  /** Runs every tick: notices a change of leadership, and proposes a tick when the leader is idle. */
  private poll(): void {
    this.cancelPoll = this.clock.setTimer(this.pollMs, () => {
      if (this.closed) return;
      this.checkLeadership();
      if (this.ready && this.clock.now() - this.lastProposalMono >= this.idleTickMs) {
        this.lastProposalMono = this.clock.now();
        this.node.propose(this.command({ op: 'tick' })).catch(() => {});
      }
      this.poll();
    });
  }

  private checkLeadership(): void {
    const leading = this.node.isLeader;
    if (!leading) {
      if (this.leaderTerm !== 0) this.stepDown();
      return;
    }
    const term = this.node.status().term;
    if (term === this.leaderTerm) return;
    if (this.leaderTerm !== 0) this.stepDown();
    this.leaderTerm = term;
    void this.takeOver(term);
  }

  private stepDown(): void {
    this.leaderTerm = 0;
    this.ready = false;
    // Writes waiting for this node's takeover will not get one: they go to the new leader.
    if (this.readyWaiters.length > 0 && !this.closed) {
      const st = this.node.status();
      const err = new RaftNotLeaderError(this.node.id, st.lead, st.leaderAddress, 'raft store write');
      for (const w of this.readyWaiters.splice(0)) w.reject(err);
    }
  }

  /**
   * A new leader: apply its whole log (a read index confirms an entry of this term is applied),
   * take the lease clock's base from the log's time (or, for a brand-new cluster, once, from the
   * wall clock), then propose `takeover` as its first command. Writes wait until it is applied.
   */
  private async takeOver(term: number): Promise<void> {
    for (let attempt = 0; !this.closed && this.leaderTerm === term; attempt++) {
      try {
        await this.node.readIndex();
        if (this.leaderTerm !== term) return;
        const logTime = this.machine.logTimeMs;
        this.base = logTime === 0 ? Math.floor(this.wallClock()) : logTime;
        this.baseMono = this.clock.now();
        this.lastProposalMono = this.baseMono;
        const { result } = await this.node.propose(this.command({ op: 'takeover', raftTerm: term }), AbortSignal.timeout(this.proposeTimeoutMs));
        if (result === undefined || result === null || !result.ok) throw new StoreUnavailableError('takeover command refused');
        if (this.leaderTerm !== term) return;
        this.ready = true;
        for (const w of this.readyWaiters.splice(0)) w.resolve();
        return;
      } catch (err) {
        if (this.closed || this.leaderTerm !== term) return;
        this.log(`raft store ${this.node.id}: takeover in term ${term} (attempt ${attempt + 1}) failed: ${(err as Error).message}`);
        // Not a hot loop: a refusal that comes back at once waits a tick before the next try.
        await sleep(this.clock, this.pollMs);
      }
    }
  }

  /** The leader's lease clock, whole ms: never below the log's time (docs/raft-store.md, Time). */
  private leaseClock(): number {
    return Math.max(this.machine.logTimeMs, Math.floor(this.base + (this.clock.now() - this.baseMono)));
  }

  /** A command with no session (takeover, tick: the node's own, never retried by a caller). */
  private command(operation: Operation): Uint8Array {
    return encodeCommand({ timeMs: this.leaseClock(), operation });
  }

  /** Resolves when this node is the leader with its takeover applied; rejects at once on a follower. */
  private whenReady(signal: AbortSignal): Promise<void> {
    if (this.ready) return Promise.resolve();
    if (this.leaderTerm === 0 && !this.node.isLeader) {
      // No forwarding: the caller goes to the leader this error names (or retries when none is known).
      const st = this.node.status();
      return Promise.reject(new RaftNotLeaderError(this.node.id, st.lead, st.leaderAddress, 'raft store write'));
    }
    return new Promise((resolve, reject) => {
      const onAbort = (): void => {
        this.readyWaiters = this.readyWaiters.filter((w) => w !== waiter);
        reject(new StoreUnavailableError(`raft store ${this.node.id}: the new leader's takeover was not applied within ${this.proposeTimeoutMs} ms`));
      };
      const waiter = {
        resolve: () => (signal.removeEventListener('abort', onAbort), resolve()),
        reject: (e: unknown) => (signal.removeEventListener('abort', onAbort), reject(e)),
      };
      this.readyWaiters.push(waiter);
      signal.addEventListener('abort', onAbort, { once: true });
    });
  }

  /** Proposes a caller's operation in this store's session and answers from the apply result. */
  private async propose(operation: Operation, stream?: string): Promise<ResultValue> {
    if (this.closed) throw new ClosedError('raft store');
    const signal = AbortSignal.timeout(this.proposeTimeoutMs);
    // Checked before waiting: bad input never reaches the log, and is refused the same everywhere.
    encodeCommand({ timeMs: 0, operation });
    await this.whenReady(signal);
    const seq = ++this.seq;
    this.inflight.add(seq);
    try {
      const ack = this.inflight.values().next().value as number;
      return await this.proposeCommand({ client: this.client, seq, ack }, operation, signal, stream);
    } finally {
      this.inflight.delete(seq);
    }
  }

  /**
   * Proposes a remote client's operation in the client's own session (a `raft://` client's
   * write): a retry of the same seq, here or at a later leader, is answered from the state
   * machine's dedupe table, never applied twice. Rejects like a local write: RaftNotLeaderError
   * naming the leader on a follower, StoreUnavailableError after `proposeTimeoutMs` (maybe
   * written), the state machine's typed errors (a stale append is reported here, on the node
   * that answers, and again by the client in its own process).
   */
  async proposeFor(session: Session, operation: ClientOperation): Promise<ResultValue> {
    if (this.closed) throw new ClosedError('raft store');
    const signal = AbortSignal.timeout(this.proposeTimeoutMs);
    encodeCommand({ timeMs: 0, session, operation });
    await this.whenReady(signal);
    return this.proposeCommand(session, operation, signal, operation.op === 'append' ? operation.stream : undefined);
  }

  private async proposeCommand(session: Session, operation: Operation, signal: AbortSignal, stream: string | undefined): Promise<ResultValue> {
    const data = encodeCommand({ timeMs: this.leaseClock(), session, operation });
    this.lastProposalMono = this.clock.now();
    let proposed;
    try {
      proposed = await this.node.propose(data, signal);
    } catch (err) {
      if (signal.aborted && err === signal.reason) {
        throw new StoreUnavailableError(`raft store ${this.node.id}: no answer within ${this.proposeTimeoutMs} ms; the write may have been applied`, { cause: err });
      }
      throw err;
    }
    const result = proposed.result;
    if (result === undefined || result === null) throw new StoreUnavailableError('raft store: no result for a command');
    if (!result.ok) {
      const err = resultToError(result.error);
      // The node that answers reports the refusal, once (the state machine never does).
      throw err instanceof StaleTermError ? reportStale(err, stream === undefined ? {} : { stream }) : err;
    }
    return result.value;
  }

  /** Waits for a read index (linearizable on any member), then runs `fn` on the local state. */
  private async local<T>(fn: (atMs: number | undefined) => T): Promise<T> {
    if (this.closed) throw new ClosedError('raft store');
    await this.node.readIndex(AbortSignal.timeout(this.proposeTimeoutMs));
    if (this.closed) throw new ClosedError('raft store');
    // The leader judges expiry on its lease clock; a follower at its applied log time (it lags:
    // the conservative direction, docs/raft-store.md, Time).
    return fn(this.ready ? this.leaseClock() : undefined);
  }

  // ---- watchers ----

  private tell(events: readonly ChangeEvent[]): void {
    for (const e of events) {
      if (e.kind === 'stream') {
        const set = this.streamWatches.get(e.stream);
        if (set) for (const l of [...set]) queueMicrotask(() => l(e.seq));
        continue;
      }
      const w = this.leaseWatches.get(e.name);
      if (w === undefined) continue;
      if (e.change === 'acquired' || e.change === 'released') this.tellLease(w, e.lease);
      if (e.lease !== null) this.armExpiry(e.name, w, e.lease.remainingMs);
    }
  }

  private tellLease(w: LeaseWatch, lease: Lease | null): void {
    w.told = lease === null ? null : `${lease.owner}@${lease.term}`;
    for (const l of [...w.listeners]) queueMicrotask(() => l(lease));
  }

  /** Expiry is not an entry: a timer tells watchers `null` once the lease reads as expired here. */
  private armExpiry(name: string, w: LeaseWatch, inMs: number): void {
    w.cancelExpiry?.();
    w.cancelExpiry = this.clock.setTimer(Math.max(inMs, 1) + 1, () => {
      w.cancelExpiry = undefined;
      if (this.closed || this.leaseWatches.get(name) !== w) return;
      const lease = this.machine.read(name, this.ready ? this.leaseClock() : undefined);
      if (lease === null) {
        if (w.told !== null) this.tellLease(w, null);
      } else {
        // Renewed, or a follower whose log time has not reached the expiry yet: look again.
        this.armExpiry(name, w, Math.max(lease.remainingMs, this.idleTickMs));
      }
    });
  }

  // ---- Store ----

  acquire(name: string, owner: string, ttlMs: number, meta?: LeaseMeta): Promise<AcquireResult> {
    return this.propose({ op: 'acquire', name, owner, ttlMs, meta: meta as LeaseMeta }) as Promise<AcquireResult>;
  }

  renew(name: string, owner: string, term: number, ttlMs: number): Promise<RenewResult> {
    return this.propose({ op: 'renew', name, owner, term, ttlMs }) as Promise<RenewResult>;
  }

  renewMany(owner: string, leases: readonly RenewManyItem[], ttlMs: number): Promise<RenewResult[]> {
    return this.propose({ op: 'renewMany', owner, leases, ttlMs }) as Promise<RenewResult[]>;
  }

  release(name: string, owner: string, term: number): Promise<boolean> {
    return this.propose({ op: 'release', name, owner, term }) as Promise<boolean>;
  }

  /** Delete every lease, fence and stream whose name starts with `prefix`, in one command (see Store.purge). */
  purge(prefix: string): Promise<number> {
    return this.propose({ op: 'purge', prefix }) as Promise<number>;
  }

  appendFenced(token: FencingToken, stream: string, payload: string, options?: AppendFencedOptions): Promise<number> {
    let expectSeq: number | undefined;
    try {
      expectSeq = checkAppendOptions(options);
    } catch (err) {
      return Promise.reject(err as Error);
    }
    const op: Operation = expectSeq === undefined ? { op: 'append', token, stream, payload } : { op: 'append', token, stream, payload, expectSeq };
    return this.propose(op, stream) as Promise<number>;
  }

  read(name: string): Promise<Lease | null> {
    return this.local((atMs) => this.machine.read(name, atMs));
  }

  list(prefix?: string): Promise<Lease[]> {
    return this.local((atMs) => this.machine.list(prefix, atMs));
  }

  readStream(stream: string, options?: ReadStreamOptions): Promise<StreamEntry[]> {
    return this.local(() => this.machine.readStream(stream, options));
  }

  readLast(stream: string): Promise<StreamEntry | null> {
    return this.local(() => this.machine.readLast(stream));
  }

  /** The stream's head and the store's time: the leader's lease clock (a follower: its log time), the clock of appendedAt. */
  streamHead(stream: string): Promise<StreamHead> {
    return this.local((atMs) => {
      checkName('stream', stream);
      return { seq: this.machine.streamHead(stream), nowMs: atMs ?? this.machine.logTimeMs };
    });
  }

  watch(name: string, listener: WatchListener): Unsubscribe {
    checkName('name', name);
    if (this.closed) throw new ClosedError('raft store');
    let w = this.leaseWatches.get(name);
    if (!w) {
      const lease = this.machine.read(name, this.ready ? this.leaseClock() : undefined);
      w = { listeners: new Set(), told: lease === null ? null : `${lease.owner}@${lease.term}`, cancelExpiry: undefined };
      this.leaseWatches.set(name, w);
      if (lease !== null) this.armExpiry(name, w, lease.remainingMs);
    }
    const watch = w;
    watch.listeners.add(listener);
    return () => {
      watch.listeners.delete(listener);
      if (watch.listeners.size === 0 && this.leaseWatches.get(name) === watch) {
        watch.cancelExpiry?.();
        this.leaseWatches.delete(name);
      }
    };
  }

  watchStream(stream: string, listener: (head: number) => void): Unsubscribe {
    checkName('stream', stream);
    if (this.closed) throw new ClosedError('raft store');
    let set = this.streamWatches.get(stream);
    if (!set) this.streamWatches.set(stream, (set = new Set()));
    const watchers = set;
    watchers.add(listener);
    return () => {
      watchers.delete(listener);
      if (watchers.size === 0 && this.streamWatches.get(stream) === watchers) this.streamWatches.delete(stream);
    };
  }

  /** This node's Raft status, whether it takes writes, and its state machine's position. */
  status(): RaftStoreStatus {
    return { node: this.node.status(), leaderReady: this.ready, logTimeMs: this.machine.logTimeMs, appliedIndex: this.machine.appliedIndex };
  }

  /** This node's status as a `raft://` client sees it (`tenure raft status`). */
  memberStatus(): MemberStatus {
    const st = this.node.status();
    const address = this.node.address;
    return {
      id: st.id,
      address: `${address.host.includes(':') ? `[${address.host}]` : address.host}:${address.port}`,
      role: st.role,
      term: st.term,
      leader: st.lead,
      leaderAddress: st.leaderAddress ?? null,
      commit: st.commit,
      applied: this.machine.appliedIndex,
      leaderReady: this.ready && this.node.isLeader,
      voters: [...st.config.voters, ...st.config.votersOutgoing.filter((v) => !st.config.voters.includes(v))].sort((a, b) => a - b),
      learners: [...st.config.learners, ...st.config.learnersNext].sort((a, b) => a - b),
      lastIndex: st.lastIndex,
      snapshotIndex: st.snapshotIndex,
    };
  }

  /**
   * Changes the membership, on the leader: `add` a voter or (with `learner`) a learner at
   * `address`, `promote` a learner, `remove` a member. Resolves with the membership once the
   * change is applied here. RaftNotLeaderError on a follower; one change at a time.
   */
  async changeMember(action: 'add' | 'promote' | 'remove', member: number, address: string | undefined, learner: boolean): Promise<Membership> {
    if (this.closed) throw new ClosedError('raft store');
    if (!this.node.isLeader) {
      const st = this.node.status();
      throw new RaftNotLeaderError(this.node.id, st.lead, st.leaderAddress, 'membership change');
    }
    const signal = AbortSignal.timeout(this.proposeTimeoutMs);
    let cs;
    if (action === 'add') {
      if (address === undefined) throw new InvalidArgumentError('address', 'adding a member needs its host:port');
      cs = await this.node.addMember(member, address, { learner, signal });
    } else if (action === 'promote') {
      if (!this.node.status().config.learners.includes(member)) throw new InvalidArgumentError('id', `node ${member} is not a learner`);
      cs = await this.node.promoteMember(member, signal);
    } else {
      cs = await this.node.removeMember(member, signal);
    }
    return { voters: [...cs.voters].sort((a, b) => a - b), learners: [...cs.learners].sort((a, b) => a - b) };
  }

  /** This node's id. */
  get id(): number {
    return this.node.id;
  }

  /** True when this node is the leader and takes writes (its takeover is applied). */
  get isLeader(): boolean {
    return this.ready && this.node.isLeader;
  }

  /** Starts an election now (an operator's or a test's nudge; ignored on a leader). */
  campaign(): void {
    if (!this.closed) this.node.campaign();
  }

  /** Hands leadership to member `to`; resolves once this node sees it lead. */
  transferLeadership(to: number, signal?: AbortSignal): Promise<void> {
    return this.node.transferLeadership(to, signal);
  }

  /** Stops the node (transport and WAL); waiting calls reject with ClosedError. Idempotent. */
  close(): Promise<void> {
    if (this.closing) return this.closing;
    this.closed = true;
    this.stepDown();
    this.cancelPoll?.();
    for (const w of this.leaseWatches.values()) w.cancelExpiry?.();
    this.leaseWatches.clear();
    this.streamWatches.clear();
    const err = new ClosedError('raft store');
    for (const w of this.readyWaiters.splice(0)) w.reject(err);
    this.closing = this.node.close();
    return this.closing;
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }
}
