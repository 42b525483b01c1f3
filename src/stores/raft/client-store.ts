/**
 * The `raft://` store: a Store that talks to a cluster of Raft store nodes (`tenure raft serve`,
 * or apps with `openRaftStore`) over their Raft port, in the client role (docs/raft-store.md,
 * "raft:// clients").
 *
 * - One connection at a time, to any listed member; a NOT_LEADER answer names the leader's
 *   address and the client moves there (or to the next member when none is named or it is down).
 * - Writes carry this client's session `{ client, seq, ack }`; a write whose answer did not come
 *   (lost connection, a node that timed out, a new leader) is sent again with the same seq until
 *   `timeoutMs` has passed since the call, so the state machine applies it at most once. Past the
 *   deadline: StoreUnavailableError, maybe written (rule 3).
 * - Reads wait for a read index on the node that serves them: linearizable on any member.
 * - Watches are the node's own, pushed; after a reconnect they are subscribed again and the
 *   current value is read, so a change during the gap is told.
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
} from '../../core/index.js';
import type {
  AcquireResult,
  AppendFencedOptions,
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
import { parseAddress, type PeerAddress } from '../../raft/transport/index.js';
import { CLIENT_MAX_INFLIGHT, CLIENT_MAX_WATCHES, isResultError, wireToError, type ClientOperation, type ClientPush, type MemberStatus, type Membership, type StreamPage, type WireError } from './client-protocol.js';
import { ClientConnection, ConnectionLostError, RaftClientRefusedError, clientSecureContext, type ConnectOptions, type RaftClientTlsOptions, type RequestBody } from './client-connection.js';

export interface RaftClientOptions {
  /** The members to talk to, `host:port` each (the addresses their Raft transports listen on). */
  readonly members: readonly PeerAddress[];
  /** The cluster's shared secret (at least 16 bytes). Never sent, never shown. */
  readonly secret: string | Uint8Array;
  /** The cluster id the nodes were started with (default `tenure`). */
  readonly clusterId?: string;
  /** A call not answered within this many ms rejects with StoreUnavailableError (default 10 000); a write may then have been applied. */
  readonly timeoutMs?: number;
  /** Where one-line reports go (a watch that could not be subscribed again; default stderr). */
  readonly log?: (line: string) => void;
  /**
   * TLS to every member (the nodes were started with certificates: `tenure raft serve --tls-cert`).
   * The members' certificates are checked against `ca` and against the host of each address (or
   * `servername`). Without it the client speaks plaintext, which a TLS node refuses.
   */
  readonly tls?: RaftClientTlsOptions;
}

interface LeaseWatchEntry {
  readonly listeners: Set<WatchListener>;
  /** What the listeners were last told, `owner@term` or null; undefined before the first read. */
  told: string | null | undefined;
  /** The node's id of this watch on the current connection. */
  serverId: number | null;
  /** The connection this watch is subscribed, or being subscribed, on: one subscription each. */
  on: ClientConnection | null;
  /** Pushes handled so far: a read answered after a push is older than what was told. */
  pushes: number;
  /**
   * The connection whose resubscription read is awaited, or null. Until that read answers, the
   * member's pushes are not told: a member the client moved to may lag behind the one that told
   * the last state, and replays older states as it catches up; the read (a ReadIndex read, so at
   * least as new as anything already told) answers after those pushes on the same connection.
   */
  holding: ClientConnection | null;
}

interface StreamWatchEntry {
  readonly listeners: Set<(head: number) => void>;
  head: number;
  serverId: number | null;
  /** As for a lease watch. */
  on: ClientConnection | null;
  /** Subscribed once: a later subscription is after a reconnect. */
  subscribed: boolean;
}

const leaseKey = (l: Lease | null): string | null => (l === null ? null : `${l.owner}@${l.term}`);

/** A failed answer, kept typed for the retry loop. */
class Refusal extends Error {
  constructor(readonly wire: WireError) {
    super('message' in wire ? String(wire.message) : wire.code);
  }
}

export class RaftClientStore implements Store, AsyncDisposable {
  readonly kind = 'raft';
  private readonly members: string[];
  private readonly addresses = new Map<string, PeerAddress>();
  private readonly secret: Uint8Array;
  private readonly clusterId: string;
  private readonly connectOptions: Omit<ConnectOptions, 'timeoutMs'>;
  private readonly timeoutMs: number;
  private readonly log: (line: string) => void;
  /** This client's session: a fresh id per store, seqs 1, 2, … (docs/raft-store.md, Sessions). */
  private readonly client = `raftc-${randomBytes(8).toString('hex')}`;
  private seq = 0;
  private readonly inflightSeqs = new Set<number>();
  private conn: ClientConnection | null = null;
  private connecting: Promise<ClientConnection> | null = null;
  /** Where the next connection attempt starts in `members`. */
  private next = 0;
  private inflight = 0;
  private readonly slotWaiters: (() => void)[] = [];
  private readonly leaseWatches = new Map<string, LeaseWatchEntry>();
  private readonly streamWatches = new Map<string, StreamWatchEntry>();
  private readonly byServerId = new Map<number, { kind: 'lease'; name: string; entry: LeaseWatchEntry } | { kind: 'stream'; name: string; entry: StreamWatchEntry }>();
  private rewatchTimer: NodeJS.Timeout | undefined;
  private closed = false;

  constructor(options: RaftClientOptions) {
    if (!Array.isArray(options.members) || options.members.length === 0) throw new InvalidArgumentError('members', 'expected at least one host:port');
    this.members = options.members.map((a) => `${a.host.includes(':') ? `[${a.host}]` : a.host}:${a.port}`);
    options.members.forEach((a, i) => this.addresses.set(this.members[i]!, a));
    const secret = typeof options.secret === 'string' ? Buffer.from(options.secret, 'utf8') : options.secret;
    if (!(secret instanceof Uint8Array) || secret.byteLength < 16) throw new InvalidArgumentError('secret', `must be at least 16 bytes, got ${secret instanceof Uint8Array ? secret.byteLength : typeof secret}`);
    this.secret = Buffer.from(secret);
    this.clusterId = options.clusterId ?? 'tenure';
    this.timeoutMs = options.timeoutMs ?? 10_000;
    if (!Number.isSafeInteger(this.timeoutMs) || this.timeoutMs < 1) throw new InvalidArgumentError('timeoutMs', `expected an integer >= 1, got ${String(options.timeoutMs)}`);
    this.log = options.log ?? ((line) => process.stderr.write(`${line}\n`));
    const tls = options.tls === undefined ? undefined : { context: clientSecureContext(options.tls), ...(options.tls.servername !== undefined ? { servername: options.tls.servername } : {}) };
    this.connectOptions = { clusterId: this.clusterId, secret: this.secret, ...(tls ? { tls } : {}) };
    this.next = Math.floor(Math.random() * this.members.length);
  }

  // ---- connections ----

  /** The current connection, or a new one to `prefer` (a leader's address), else to the members in turn. */
  private async connection(deadline: number, prefer?: string): Promise<ClientConnection> {
    for (;;) {
      if (this.closed) throw new ClosedError('raft store client');
      const c = this.conn;
      if (c !== null && !c.closed && (prefer === undefined || c.address === prefer)) return c;
      if (this.connecting !== null) {
        await this.connecting.catch(() => {});
        if (prefer !== undefined && this.conn?.address !== prefer && this.conn !== null && !this.conn.closed) prefer = undefined;
        continue;
      }
      this.connecting = this.dial(deadline, prefer);
      try {
        return await this.connecting;
      } finally {
        this.connecting = null;
      }
    }
  }

  private async dial(deadline: number, prefer: string | undefined): Promise<ClientConnection> {
    const order = prefer !== undefined && this.addresses.has(prefer) ? [prefer, ...this.members.filter((m) => m !== prefer)] : this.rotation();
    let last: unknown;
    for (const address of order) {
      const left = deadline - performance.now();
      if (left <= 0) break;
      try {
        const conn = await ClientConnection.connect(this.addresses.get(address) ?? parseAddress('address', address), { ...this.connectOptions, timeoutMs: Math.max(1, Math.min(left, 2000)) });
        if (this.closed) {
          conn.close();
          throw new ClosedError('raft store client');
        }
        this.adopt(conn);
        return conn;
      } catch (err) {
        if (err instanceof RaftClientRefusedError || err instanceof ClosedError) throw err;
        last = err;
      }
    }
    throw last instanceof Error ? last : new ConnectionLostError('no raft store member reachable');
  }

  private rotation(): string[] {
    const start = this.next % this.members.length;
    this.next++;
    return [...this.members.slice(start), ...this.members.slice(0, start)];
  }

  /** Makes `conn` the current connection and subscribes every watch on it again. */
  private adopt(conn: ClientConnection): void {
    const old = this.conn;
    this.conn = conn;
    if (old !== null && old !== conn) old.close();
    this.byServerId.clear();
    for (const e of this.leaseWatches.values()) [e.serverId, e.on] = [null, null];
    for (const e of this.streamWatches.values()) [e.serverId, e.on] = [null, null];
    conn.onPush((p) => this.onPush(conn, p));
    conn.onClose(() => {
      if (this.conn === conn) this.conn = null;
      this.scheduleRewatch();
    });
    for (const [name, entry] of this.leaseWatches) void this.subscribeLease(conn, name, entry, true);
    for (const [name, entry] of this.streamWatches) void this.subscribeStream(conn, name, entry);
  }

  /** Watches need a connection even when no call is made: reconnect in the background, bounded back-off. */
  private scheduleRewatch(attempt = 0): void {
    if (this.closed || this.rewatchTimer !== undefined || (this.leaseWatches.size === 0 && this.streamWatches.size === 0)) return;
    const delay = Math.min(1000, 20 * 2 ** Math.min(attempt, 6)) * (0.5 + Math.random() / 2);
    this.rewatchTimer = setTimeout(() => {
      this.rewatchTimer = undefined;
      if (this.closed || (this.conn !== null && !this.conn.closed)) return;
      this.connection(performance.now() + this.timeoutMs).catch((err: unknown) => {
        if (err instanceof RaftClientRefusedError) this.log(`raft store client: watches not subscribed again: ${err.message}`);
        this.scheduleRewatch(attempt + 1);
      });
    }, delay);
    this.rewatchTimer.unref?.();
  }

  private onPush(conn: ClientConnection, p: ClientPush): void {
    if (conn !== this.conn) return;
    const w = this.byServerId.get(p.watch);
    if (w === undefined) return;
    if (w.kind === 'lease' && 'lease' in p) {
      w.entry.pushes++;
      if (w.entry.holding !== null) return;
      // The holder watchers were last told, again: after the client moved to another member (its
      // connection to the last one lost or slow), that member can apply, after the watch is
      // subscribed, a change the last one had already pushed. No news, as the other stores tell it.
      const key = leaseKey(p.lease);
      if (key !== null && key === w.entry.told) return;
      w.entry.told = key;
      for (const l of [...w.entry.listeners]) queueMicrotask(() => l(p.lease));
    } else if (w.kind === 'stream' && 'head' in p) {
      if (p.head <= w.entry.head) return;
      w.entry.head = p.head;
      for (const l of [...w.entry.listeners]) queueMicrotask(() => l(p.head));
    }
  }

  private async subscribeLease(conn: ClientConnection, name: string, entry: LeaseWatchEntry, resync: boolean): Promise<void> {
    if (entry.on === conn) return;
    entry.on = conn;
    try {
      const a = await conn.request({ op: 'watch', kind: 'lease', name }, this.timeoutMs);
      if (!a.ok) throw new Refusal(a.error);
      if (this.leaseWatches.get(name) !== entry || conn !== this.conn) return void conn.request({ op: 'unwatch', watch: a.value as number }, this.timeoutMs).catch(() => {});
      entry.serverId = a.value as number;
      if (resync && entry.told !== undefined) {
        await this.resyncLease(conn, name, entry);
        return;
      }
      this.byServerId.set(entry.serverId, { kind: 'lease', name, entry });
      // The value now: the baseline of a first subscription.
      const pushes = entry.pushes;
      const r = await conn.request({ op: 'read', name }, this.timeoutMs);
      // A push handled meanwhile (it may be in the same chunk as the answer, handled before this
      // continuation runs) told a state at least as new as the read's.
      if (!r.ok || this.leaseWatches.get(name) !== entry || entry.pushes !== pushes) return;
      entry.told ??= leaseKey(r.value as Lease | null);
    } catch (err) {
      if (entry.on === conn && entry.serverId === null) entry.on = null;
      if (!conn.closed && !this.closed) this.log(`raft store client: cannot watch lease ${JSON.stringify(name)} at ${conn.address}: ${(err as Error).message}`);
    }
  }

  /**
   * After a reconnect: the member's pushes are held until its read of the lease answers (a
   * ReadIndex read, retried while the member has no leader to ask), then that state is told if it
   * is not what watchers were last told, and the pushes after it are told as they come. A push
   * answered before the read is at most as new as the read, and may be older than what the last
   * member told (this one lags behind it and replays what it applies): telling it would take the
   * watchers back.
   */
  private async resyncLease(conn: ClientConnection, name: string, entry: LeaseWatchEntry): Promise<void> {
    entry.holding = conn;
    this.byServerId.set(entry.serverId!, { kind: 'lease', name, entry });
    const giveUpAt = performance.now() + this.timeoutMs;
    let why = '';
    try {
      for (let attempt = 0; ; attempt++) {
        const r = await conn.request({ op: 'read', name }, Math.max(1, giveUpAt - performance.now()));
        if (this.leaseWatches.get(name) !== entry || conn !== this.conn || entry.holding !== conn) return;
        if (r.ok) {
          const lease = r.value as Lease | null;
          if (leaseKey(lease) !== entry.told) {
            entry.told = leaseKey(lease);
            for (const l of [...entry.listeners]) queueMicrotask(() => l(lease));
          }
          return;
        }
        why = 'message' in r.error ? String(r.error.message) : r.error.code;
        if (performance.now() >= giveUpAt) break;
        await this.backoff(attempt, giveUpAt);
      }
      this.log(`raft store client: lease ${JSON.stringify(name)} not read at ${conn.address} after reconnecting (${why}); its changes are told as that member pushes them`);
    } finally {
      if (entry.holding === conn) entry.holding = null;
    }
  }

  private async subscribeStream(conn: ClientConnection, name: string, entry: StreamWatchEntry): Promise<void> {
    if (entry.on === conn) return;
    entry.on = conn;
    try {
      const a = await conn.request({ op: 'watch', kind: 'stream', name }, this.timeoutMs);
      if (!a.ok) throw new Refusal(a.error);
      if (this.streamWatches.get(name) !== entry || conn !== this.conn) return void conn.request({ op: 'unwatch', watch: a.value as number }, this.timeoutMs).catch(() => {});
      entry.serverId = a.value as number;
      this.byServerId.set(entry.serverId, { kind: 'stream', name, entry });
      const first = !entry.subscribed;
      entry.subscribed = true;
      const r = await conn.request({ op: 'streamHead', stream: name }, this.timeoutMs);
      if (!r.ok || this.streamWatches.get(name) !== entry) return;
      const head = (r.value as StreamHead).seq;
      if (first) {
        // The baseline: a head from before the watch is not news.
        entry.head = Math.max(entry.head, head);
      } else if (head > entry.head) {
        entry.head = head;
        for (const l of [...entry.listeners]) queueMicrotask(() => l(head));
      }
    } catch (err) {
      if (entry.on === conn && entry.serverId === null) entry.on = null;
      if (!conn.closed && !this.closed) this.log(`raft store client: cannot watch stream ${JSON.stringify(name)} at ${conn.address}: ${(err as Error).message}`);
    }
  }

  // ---- calls ----

  /** At most CLIENT_MAX_INFLIGHT calls on the wire; more wait here (the node would refuse them). */
  private async slot(): Promise<void> {
    if (this.inflight < CLIENT_MAX_INFLIGHT) {
      this.inflight++;
      return;
    }
    await new Promise<void>((r) => this.slotWaiters.push(r));
  }

  private freeSlot(): void {
    const w = this.slotWaiters.shift();
    if (w) w();
    else this.inflight--;
  }

  /**
   * Sends a request until a final answer or the deadline: moves to the leader a NOT_LEADER
   * names, to the next member when a connection fails, waits a bounded back-off after a
   * refusal that may pass (no leader yet, a leader taking over). The request's body is the
   * same on every attempt (a write's seq included).
   */
  private async call(body: RequestBody, what: string): Promise<unknown> {
    if (this.closed) throw new ClosedError('raft store client');
    const started = performance.now();
    const deadline = started + this.timeoutMs;
    await this.slot();
    let prefer: string | undefined;
    let lastWhy = 'no member answered';
    let hops = 0;
    try {
      for (let attempt = 0; ; attempt++) {
        if (this.closed) throw new ClosedError('raft store client');
        const left = deadline - performance.now();
        if (left <= 0) break;
        let conn: ClientConnection;
        try {
          conn = await this.connection(deadline, prefer);
        } catch (err) {
          if (err instanceof RaftClientRefusedError || err instanceof ClosedError) throw err;
          lastWhy = (err as Error).message;
          prefer = undefined;
          await this.backoff(attempt, deadline);
          continue;
        }
        let answer;
        try {
          answer = await conn.request(body, Math.max(1, Math.min(deadline - performance.now(), Math.max(1000, this.timeoutMs / 3))));
        } catch (err) {
          if (this.closed) throw new ClosedError('raft store client');
          lastWhy = (err as Error).message;
          // That node went away or hung: the next attempt goes to the next member.
          if (this.conn === conn) this.conn = null;
          conn.close();
          prefer = undefined;
          continue;
        }
        if (answer.ok) return answer.value;
        const e = answer.error;
        if (isResultError(e)) throw wireToError(e);
        lastWhy = e.message;
        if (e.code === 'NOT_LEADER') {
          // A follower may still name a leader that is gone: after the first hop, pause between hops.
          if (++hops > 1) await this.backoff(hops - 2, deadline);
          prefer = e.address !== '' && e.address !== conn.address ? e.address : undefined;
          if (prefer !== undefined && !this.addresses.has(prefer)) this.addresses.set(prefer, parseAddress('address', prefer));
          if (prefer === undefined) {
            // No leader known here (an election is on): ask another member after a pause.
            this.conn = null;
            conn.close();
            await this.backoff(attempt, deadline);
          }
          continue;
        }
        // PROPOSAL_DROPPED, BUSY, CLOSED, STORE_UNAVAILABLE: nothing done or maybe done; the same body again.
        if (e.code === 'CLOSED') {
          if (this.conn === conn) this.conn = null;
          conn.close();
        }
        await this.backoff(attempt, deadline);
      }
      throw new StoreUnavailableError(`raft store: ${what} not answered within ${this.timeoutMs} ms (${lastWhy})${body.op === 'write' ? '; the write may have been applied' : ''}`);
    } finally {
      this.freeSlot();
    }
  }

  private async backoff(attempt: number, deadline: number): Promise<void> {
    const ms = Math.min(250, 10 * 2 ** Math.min(attempt, 5)) * (0.5 + Math.random() / 2);
    const left = deadline - performance.now();
    if (left <= 0) return;
    await new Promise((r) => setTimeout(r, Math.min(ms, left)));
  }

  /** A write in this client's session: the same seq on every retry. */
  private async write(operation: ClientOperation, stream?: string): Promise<unknown> {
    if (this.closed) throw new ClosedError('raft store client');
    const seq = ++this.seq;
    this.inflightSeqs.add(seq);
    try {
      const ack = this.inflightSeqs.values().next().value as number;
      return await this.call({ op: 'write', session: { client: this.client, seq, ack }, operation }, operation.op);
    } catch (err) {
      // The node that answered reported it in its process; this is the caller's.
      throw err instanceof StaleTermError ? reportStale(err, stream === undefined ? {} : { stream }) : err;
    } finally {
      this.inflightSeqs.delete(seq);
    }
  }

  // ---- Store ----

  acquire(name: string, owner: string, ttlMs: number, meta?: LeaseMeta): Promise<AcquireResult> {
    return this.write({ op: 'acquire', name, owner, ttlMs, meta: meta as LeaseMeta }) as Promise<AcquireResult>;
  }

  renew(name: string, owner: string, term: number, ttlMs: number): Promise<RenewResult> {
    return this.write({ op: 'renew', name, owner, term, ttlMs }) as Promise<RenewResult>;
  }

  renewMany(owner: string, leases: readonly RenewManyItem[], ttlMs: number): Promise<RenewResult[]> {
    return this.write({ op: 'renewMany', owner, leases, ttlMs }) as Promise<RenewResult[]>;
  }

  release(name: string, owner: string, term: number): Promise<boolean> {
    return this.write({ op: 'release', name, owner, term }) as Promise<boolean>;
  }

  /** Delete every lease, fence and stream whose name starts with `prefix`, in one command (see Store.purge). */
  purge(prefix: string): Promise<number> {
    return this.write({ op: 'purge', prefix }) as Promise<number>;
  }

  appendFenced(token: FencingToken, stream: string, payload: string, options?: AppendFencedOptions): Promise<number> {
    let expectSeq: number | undefined;
    try {
      expectSeq = checkAppendOptions(options);
    } catch (err) {
      return Promise.reject(err as Error);
    }
    const op: ClientOperation = expectSeq === undefined ? { op: 'append', token, stream, payload } : { op: 'append', token, stream, payload, expectSeq };
    return this.write(op, stream) as Promise<number>;
  }

  read(name: string): Promise<Lease | null> {
    return this.call({ op: 'read', name }, 'read') as Promise<Lease | null>;
  }

  list(prefix?: string): Promise<Lease[]> {
    return this.call(prefix === undefined ? { op: 'list' } : { op: 'list', prefix }, 'list') as Promise<Lease[]>;
  }

  /** Pages through the node's size-bounded answers until `limit` entries or the stream's end. */
  async readStream(stream: string, options?: ReadStreamOptions): Promise<StreamEntry[]> {
    const out: StreamEntry[] = [];
    let after = options?.after;
    let limit = options?.limit;
    for (;;) {
      const page = (await this.call({ op: 'readStream', stream, ...(after !== undefined ? { after } : {}), ...(limit !== undefined ? { limit } : {}) }, 'readStream')) as StreamPage;
      for (const e of page.entries) out.push(e);
      if (!page.more || page.entries.length === 0) return out;
      after = page.entries[page.entries.length - 1]!.seq;
      if (limit !== undefined) {
        limit -= page.entries.length;
        if (limit <= 0) return out;
      }
    }
  }

  readLast(stream: string): Promise<StreamEntry | null> {
    return this.call({ op: 'readLast', stream }, 'readLast') as Promise<StreamEntry | null>;
  }

  streamHead(stream: string): Promise<StreamHead> {
    return this.call({ op: 'streamHead', stream }, 'streamHead') as Promise<StreamHead>;
  }

  watch(name: string, listener: WatchListener): Unsubscribe {
    checkName('name', name);
    if (this.closed) throw new ClosedError('raft store client');
    let entry = this.leaseWatches.get(name);
    if (!entry) {
      if (this.leaseWatches.size + this.streamWatches.size >= CLIENT_MAX_WATCHES) throw new InvalidArgumentError('watch', `at most ${CLIENT_MAX_WATCHES} names watched per raft store client`);
      entry = { listeners: new Set(), told: undefined, serverId: null, on: null, pushes: 0, holding: null };
      this.leaseWatches.set(name, entry);
      const e = entry;
      void this.connection(performance.now() + this.timeoutMs)
        .then((conn) => {
          // adopt() subscribed it already when this call made the connection (subscribeLease
          // returns at once then: two subscriptions would tell every change twice).
          if (this.leaseWatches.get(name) === e) return this.subscribeLease(conn, name, e, false);
        })
        .catch(() => this.scheduleRewatch());
    }
    const watch = entry;
    watch.listeners.add(listener);
    return () => {
      watch.listeners.delete(listener);
      if (watch.listeners.size === 0 && this.leaseWatches.get(name) === watch) {
        this.leaseWatches.delete(name);
        this.unwatch(watch.serverId);
      }
    };
  }

  watchStream(stream: string, listener: (head: number) => void): Unsubscribe {
    checkName('stream', stream);
    if (this.closed) throw new ClosedError('raft store client');
    let entry = this.streamWatches.get(stream);
    if (!entry) {
      if (this.leaseWatches.size + this.streamWatches.size >= CLIENT_MAX_WATCHES) throw new InvalidArgumentError('watchStream', `at most ${CLIENT_MAX_WATCHES} names watched per raft store client`);
      entry = { listeners: new Set(), head: 0, serverId: null, on: null, subscribed: false };
      this.streamWatches.set(stream, entry);
      const e = entry;
      void this.connection(performance.now() + this.timeoutMs)
        .then((conn) => {
          if (this.streamWatches.get(stream) === e) return this.subscribeStream(conn, stream, e);
        })
        .catch(() => this.scheduleRewatch());
    }
    const watch = entry;
    watch.listeners.add(listener);
    return () => {
      watch.listeners.delete(listener);
      if (watch.listeners.size === 0 && this.streamWatches.get(stream) === watch) {
        this.streamWatches.delete(stream);
        this.unwatch(watch.serverId);
      }
    };
  }

  private unwatch(serverId: number | null): void {
    if (serverId === null) return;
    this.byServerId.delete(serverId);
    const conn = this.conn;
    if (conn !== null && !conn.closed) conn.request({ op: 'unwatch', watch: serverId }, this.timeoutMs).catch(() => {});
  }

  /** Each listed member's status (`tenure raft status`): one connection per member; an unreachable one is an error in its place. */
  async memberStatuses(): Promise<{ address: string; status?: MemberStatus; error?: string }[]> {
    if (this.closed) throw new ClosedError('raft store client');
    return Promise.all(
      this.members.map(async (address) => {
        let conn: ClientConnection | undefined;
        try {
          conn = await ClientConnection.connect(this.addresses.get(address)!, { ...this.connectOptions, timeoutMs: Math.min(this.timeoutMs, 3000) });
          const a = await conn.request({ op: 'status' }, Math.min(this.timeoutMs, 3000));
          if (!a.ok) throw new Refusal(a.error);
          return { address, status: a.value as MemberStatus };
        } catch (err) {
          return { address, error: (err as Error).message };
        } finally {
          conn?.close();
        }
      }),
    );
  }

  /** A membership change, sent to the leader (`tenure raft add/promote/remove`). */
  async changeMember(action: 'add' | 'promote' | 'remove', member: number, address?: string, learner = false): Promise<Membership> {
    return (await this.call({ op: 'member', action, member, ...(address !== undefined ? { address } : {}), ...(learner ? { learner } : {}) }, `${action} member ${member}`)) as Membership;
  }

  /** Closes the connection; later calls reject with ClosedError. Idempotent. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    clearTimeout(this.rewatchTimer);
    this.leaseWatches.clear();
    this.streamWatches.clear();
    this.conn?.close();
    this.conn = null;
    for (const w of this.slotWaiters.splice(0)) w();
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }
}
