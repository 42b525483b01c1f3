/**
 * What the dashboard shows, read from a store by ONE loop shared by every viewer: each poll is a
 * single `store.list(prefix)` (groups, their leaders and their followers' lag adverts in one
 * query), and where the store pushes (`store.watch`, `store.watchStream`) a change of holder or a
 * stream's new head is taken from the push at once, with no query. The loop keeps the last known
 * state, a bounded history of term changes per group, and tells its subscribers each change as
 * one `DashboardUpdate` (only the groups that changed, plus the leases whose time left moved
 * other than by counting down).
 *
 * Time left on a lease is the store's `remainingMs` (its own clock, safety rule 1) counted down
 * on the local monotonic clock from the SEND of the read that returned it (rule 2: never longer
 * than the store could grant). Wall-clock instants (leader since, the chart) are for display only.
 */
import { InvalidArgumentError, checkMs, checkName, redactSecrets, systemClock } from '../core/index.js';
import type { Clock, Lease, LeaseMeta, Store, Unsubscribe } from '../core/index.js';
import { LAG_UNKNOWN_MS } from '../replication/index.js';

/** The marker in a follower advert's lease name: `<group>/followers/<nodeId>` (see LagAdvert). */
const FOLLOWERS = '/followers/';

export interface DashboardSourceOptions {
  /** The store to read. The dashboard never writes to it and never closes it. */
  readonly store: Store;
  /**
   * The store's URL, if known: shown on the page with its credentials replaced by `***`, and
   * every credential in it is removed from the store errors the page shows.
   */
  readonly storeUrl?: string;
  /** Only these groups (lease names). Default: every lease under `prefix`. */
  readonly groups?: readonly string[];
  /** Only leases whose name starts with this (default: all). */
  readonly prefix?: string;
  /**
   * Poll interval, ms (100..60000). Default 1000, or 2000 where the store pushes changes of
   * holder (the poll then only finds new groups, refreshes time left and follower lag).
   */
  readonly pollMs?: number;
  /** Use the store's push where it has one (default true). */
  readonly push?: boolean;
  /** A poll with no answer after this long counts as failed, ms (default max(2000, 2 × pollMs)). */
  readonly timeoutMs?: number;
  /** At most this many groups are tracked (default 10000); the rest are counted, not shown. */
  readonly maxGroups?: number;
  /** Term changes kept per group for the chart (default 60). */
  readonly historyPerGroup?: number;
  /** A group with no live lease and no follower is forgotten after this long, ms (default 600000). */
  readonly forgetMs?: number;
  readonly clock?: Clock;
  /** Wall clock for display instants, ms since the epoch (default Date.now). */
  readonly wallNow?: () => number;
}

/** A follower of a group, from its lag advert (LagAdvert's lease meta). */
export interface FollowerView {
  readonly node: string;
  readonly owner: string;
  readonly appliedSeq: number | null;
  readonly lagEntries: number | null;
  readonly lagAtLeast: boolean;
  /** ms behind by the follower's own clock; null when unknown (it has not found the log's end yet). */
  readonly lagMs: number | null;
  readonly endpoint: string | null;
}

/** One group as the page shows it. */
export interface GroupView {
  readonly name: string;
  /** The live leader, or null when no live lease is held. */
  readonly leader: { readonly owner: string; readonly term: number; readonly meta: LeaseMeta; readonly ttlMs: number } | null;
  /** The highest term seen for this group (kept while it has no leader). */
  readonly term: number | null;
  /** Wall ms when this dashboard first saw the current term; `sinceExact` false when it was already held at the first read. */
  readonly since: number | null;
  readonly sinceExact: boolean;
  /** Term changes seen: [wall ms, term, owner] oldest first (the first entry is the term found at the first read). */
  readonly history: ReadonlyArray<readonly [number, number, string]>;
  readonly followers: readonly FollowerView[];
  /** The fenced stream the followers tail (meta.stream, else the group's name) and its head seq (null until read). */
  readonly stream: { readonly name: string; readonly head: number | null } | null;
}

export interface StoreStatus {
  readonly ok: boolean;
  /** The last failure, credentials removed (null when ok). */
  readonly error: string | null;
  /** Wall ms of the change to this state. */
  readonly since: number;
  /** Wall ms of the last successful read (null before the first). */
  readonly lastReadAt: number | null;
}

/** Everything the page needs at first: every group, with the time left of each live lease. */
export interface DashboardSnapshot {
  readonly store: string;
  readonly push: boolean;
  readonly pollMs: number;
  readonly status: StoreStatus;
  readonly groups: readonly GroupView[];
  /** Time left per live lease, ms, as of now (`name -> ms`). */
  readonly remaining: Readonly<Record<string, number>>;
  /** Groups beyond maxGroups, not tracked. */
  readonly untracked: number;
  readonly now: number;
}

/** What changed since the last update. */
export interface DashboardUpdate {
  readonly status: StoreStatus;
  readonly groups: readonly GroupView[];
  readonly removed: readonly string[];
  readonly remaining: Readonly<Record<string, number>>;
  readonly untracked: number;
  readonly now: number;
}

interface Held {
  readonly lease: Lease;
  /** Monotonic ms: the send time of the read that returned it (or the push's arrival). */
  readonly readAt: number;
}

interface GroupState {
  readonly name: string;
  held: Held | null;
  term: number | null;
  since: number | null;
  sinceExact: boolean;
  history: Array<[number, number, string]>;
  followers: Map<string, Held>;
  streamName: string | null;
  streamHead: number | null;
  unwatch: Unsubscribe | null;
  unwatchStream: Unsubscribe | null;
  /** Monotonic ms when last seen with a lease or follower. */
  seenAt: number;
  /** The view last told (JSON), to tell only changes. */
  told: string;
  /** Time left last told and when (monotonic), to tell only leases renewed meanwhile. */
  toldRemaining: number | null;
  toldAt: number;
}

/** A deviation of time left from the told countdown smaller than this is not told, ms. */
const REMAINING_SLACK_MS = 250;
/** Polls allowed in flight at once (a poll that timed out may still be pending). */
const MAX_PENDING_POLLS = 2;

type Subscriber = (update: DashboardUpdate) => void;

export class DashboardSource {
  readonly store: Store;
  readonly storeLabel: string;
  readonly pollMs: number;
  readonly push: boolean;
  private readonly storeUrl: string | undefined;
  private readonly only: ReadonlySet<string> | null;
  private readonly listPrefix: string;
  private readonly timeoutMs: number;
  private readonly maxGroups: number;
  private readonly historyPerGroup: number;
  private readonly forgetMs: number;
  private readonly clock: Clock;
  private readonly wallNow: () => number;
  private readonly groups = new Map<string, GroupState>();
  private readonly subscribers = new Set<Subscriber>();
  private status: StoreStatus;
  private untracked = 0;
  private firstRead = true;
  private pending = 0;
  private timer: (() => void) | null = null;
  private flushQueued = false;
  private closed = false;
  private removed: string[] = [];
  /** Counts of the dashboard's own store calls, by operation (for the benchmark and tests). */
  readonly calls: Record<string, number> = {};

  constructor(options: DashboardSourceOptions) {
    if (typeof options !== 'object' || options === null) throw new InvalidArgumentError('options', 'expected an object');
    const store = options.store;
    if (typeof store?.list !== 'function' || typeof store.read !== 'function') throw new InvalidArgumentError('store', 'expected a Store');
    this.store = store;
    if (options.storeUrl !== undefined && typeof options.storeUrl !== 'string') throw new InvalidArgumentError('storeUrl', 'expected a string');
    this.storeUrl = options.storeUrl;
    this.storeLabel = options.storeUrl !== undefined ? redactSecrets(options.storeUrl, [options.storeUrl]) : `${store.kind} store`;
    if (options.groups !== undefined && options.prefix !== undefined) throw new InvalidArgumentError('groups', 'give groups or prefix, not both');
    if (options.groups !== undefined) {
      if (!Array.isArray(options.groups) || options.groups.length === 0) throw new InvalidArgumentError('groups', 'expected a non-empty array of group names');
      const names = options.groups.map((g: unknown) => checkName('groups', g));
      this.only = new Set(names);
      this.listPrefix = commonPrefix(names);
    } else {
      this.only = null;
      this.listPrefix = options.prefix === undefined || options.prefix === '' ? '' : checkName('prefix', options.prefix);
    }
    this.push = (options.push ?? true) && typeof store.watch === 'function';
    this.pollMs = checkMs('pollMs', options.pollMs ?? (this.push ? 2000 : 1000), 100, 60_000);
    this.timeoutMs = checkMs('timeoutMs', options.timeoutMs ?? Math.max(2000, 2 * this.pollMs), 10, 600_000);
    this.maxGroups = checkCount('maxGroups', options.maxGroups ?? 10_000, 1, 1_000_000);
    this.historyPerGroup = checkCount('historyPerGroup', options.historyPerGroup ?? 60, 1, 10_000);
    this.forgetMs = checkMs('forgetMs', options.forgetMs ?? 600_000, 0, 86_400_000);
    this.clock = options.clock ?? systemClock;
    this.wallNow = options.wallNow ?? Date.now;
    this.status = { ok: false, error: null, since: this.wallNow(), lastReadAt: null };
  }

  /** Start polling (idempotent). The first poll is sent at once. */
  start(): void {
    if (this.closed || this.timer !== null) return;
    this.timer = () => {};
    void this.loop();
  }

  /** Stop polling and every watch. Does not close the store. */
  close(): void {
    if (this.closed) return;
    this.closed = true;
    this.timer?.();
    this.timer = null;
    for (const g of this.groups.values()) this.unwatchGroup(g);
    this.subscribers.clear();
  }

  /** Hear every update; returns the unsubscribe function. */
  subscribe(fn: Subscriber): () => void {
    this.subscribers.add(fn);
    return () => this.subscribers.delete(fn);
  }

  /** The whole state now. */
  snapshot(): DashboardSnapshot {
    const now = this.clock.now();
    const groups = [...this.groups.values()].sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
    const remaining: Record<string, number> = {};
    for (const g of groups) if (g.held) remaining[g.name] = remainingOf(g.held, now);
    return {
      store: this.storeLabel,
      push: this.push,
      pollMs: this.pollMs,
      status: this.status,
      groups: groups.map((g) => this.view(g)),
      remaining,
      untracked: this.untracked,
      now: this.wallNow(),
    };
  }

  /** One poll now (the loop calls it; tests and the benchmark may too). Never rejects. */
  async poll(): Promise<void> {
    if (this.closed || this.pending >= MAX_PENDING_POLLS) return;
    this.pending++;
    const sentAt = this.clock.now();
    try {
      const leases = await this.timed('list', this.store.list(this.listPrefix === '' ? undefined : this.listPrefix));
      if (this.closed) return;
      this.applyList(leases, sentAt);
      if (!this.push || typeof this.store.watchStream !== 'function') await this.pollStreams();
      this.setStatus(true, null);
    } catch (err) {
      if (!this.closed) this.setStatus(false, err);
    } finally {
      this.pending--;
    }
    this.queueFlush();
  }

  private async loop(): Promise<void> {
    while (!this.closed) {
      const started = this.clock.now();
      await this.poll();
      if (this.closed) return;
      const waitMs = Math.max(0, this.pollMs - (this.clock.now() - started));
      await new Promise<void>((resolve) => {
        const cancel = this.clock.setTimer(waitMs, () => {
          this.timer = () => {};
          resolve();
        });
        this.timer = () => {
          cancel();
          resolve();
        };
      });
    }
  }

  private timed<T>(operation: string, promise: Promise<T>): Promise<T> {
    this.calls[operation] = (this.calls[operation] ?? 0) + 1;
    return new Promise<T>((resolve, reject) => {
      const cancel = this.clock.setTimer(this.timeoutMs, () => reject(new Error(`no answer to ${operation} within ${this.timeoutMs} ms`)));
      promise.then(
        (v) => {
          cancel();
          resolve(v);
        },
        (err: unknown) => {
          cancel();
          reject(err instanceof Error ? err : new Error(String(err)));
        },
      );
    });
  }

  private setStatus(ok: boolean, err: unknown): void {
    const wall = this.wallNow();
    const error = ok ? null : this.describe(err);
    const lastReadAt = ok ? wall : this.status.lastReadAt;
    if (ok !== this.status.ok || error !== this.status.error) this.status = { ok, error, since: wall, lastReadAt };
    else this.status = { ...this.status, lastReadAt };
  }

  private describe(err: unknown): string {
    const text = err instanceof Error ? err.message : String(err);
    return redactSecrets(text, this.storeUrl === undefined ? [] : [this.storeUrl]).replace(/\s*\n\s*/g, ' ').slice(0, 500);
  }

  private wanted(group: string): boolean {
    return this.only === null || this.only.has(group);
  }

  private applyList(leases: readonly Lease[], sentAt: number): void {
    const wall = this.wallNow();
    const leaders = new Map<string, Lease>();
    const followers = new Map<string, Map<string, Lease>>();
    for (const lease of leases) {
      const at = lease.name.indexOf(FOLLOWERS);
      if (at > 0 && at + FOLLOWERS.length < lease.name.length && !lease.name.includes('/', at + FOLLOWERS.length)) {
        const group = lease.name.slice(0, at);
        if (!this.wanted(group)) continue;
        let m = followers.get(group);
        if (!m) followers.set(group, (m = new Map()));
        m.set(lease.name.slice(at + FOLLOWERS.length), lease);
      } else if (this.wanted(lease.name)) {
        leaders.set(lease.name, lease);
      }
    }
    let untracked = 0;
    for (const name of new Set([...leaders.keys(), ...followers.keys()])) {
      if (!this.groups.has(name)) {
        if (this.groups.size >= this.maxGroups) {
          untracked++;
          continue;
        }
        this.groups.set(name, this.newGroup(name));
      }
    }
    this.untracked = untracked;
    for (const g of [...this.groups.values()]) {
      const lease = leaders.get(g.name) ?? null;
      // A push newer than this read (sent before it answered) wins: keep the pushed holder.
      if (!(g.held && g.held.readAt > sentAt && (lease === null || lease.term <= g.held.lease.term))) {
        this.setHeld(g, lease ? { lease, readAt: sentAt } : null, wall);
      }
      const fl = followers.get(g.name);
      g.followers = new Map([...(fl ?? new Map<string, Lease>())].map(([node, l]) => [node, { lease: l, readAt: sentAt }]));
      if (g.held || g.followers.size > 0) g.seenAt = sentAt;
      else if (sentAt - g.seenAt > this.forgetMs) {
        this.unwatchGroup(g);
        this.groups.delete(g.name);
        this.removed.push(g.name);
        continue;
      }
      this.updateStream(g);
      if (this.push && g.unwatch === null && typeof this.store.watch === 'function') {
        try {
          g.unwatch = this.store.watch(g.name, (l) => this.onPush(g.name, l));
        } catch {
          g.unwatch = null; // a closed store: polling still covers it
        }
      }
    }
    this.firstRead = false;
  }

  private newGroup(name: string): GroupState {
    return {
      name, held: null, term: null, since: null, sinceExact: false, history: [], followers: new Map(), streamName: null, streamHead: null,
      unwatch: null, unwatchStream: null, seenAt: this.clock.now(), told: '', toldRemaining: null, toldAt: 0,
    };
  }

  /** A push from `store.watch`: the new holder (or null), no query needed. */
  private onPush(name: string, lease: Lease | null): void {
    const g = this.groups.get(name);
    if (!g || this.closed) return;
    this.setHeld(g, lease ? { lease, readAt: this.clock.now() } : null, this.wallNow());
    this.updateStream(g);
    this.queueFlush();
  }

  private setHeld(g: GroupState, held: Held | null, wall: number): void {
    // Terms never go back (rule 4): an older answer arriving late is not shown over a newer one.
    if (held && g.term !== null && held.lease.term < g.term) return;
    if (held && (g.term === null || held.lease.term > g.term)) {
      const initial = this.firstRead || g.term === null;
      g.term = held.lease.term;
      g.since = wall;
      g.sinceExact = !initial;
      g.history.push([wall, held.lease.term, held.lease.owner]);
      if (g.history.length > this.historyPerGroup) g.history.splice(0, g.history.length - this.historyPerGroup);
    }
    g.held = held;
  }

  private updateStream(g: GroupState): void {
    const fromMeta = g.held?.lease.meta.stream;
    const name = typeof fromMeta === 'string' && fromMeta.length > 0 && fromMeta.length <= 200 ? fromMeta : g.followers.size > 0 ? g.name : g.streamName;
    if (name === g.streamName) return;
    g.unwatchStream?.();
    g.unwatchStream = null;
    g.streamName = name;
    g.streamHead = null;
    if (name === null) return;
    if (this.push && typeof this.store.watchStream === 'function') {
      try {
        g.unwatchStream = this.store.watchStream(name, (head) => {
          if (g.streamName !== name || (g.streamHead !== null && head <= g.streamHead)) return;
          g.streamHead = head;
          this.queueFlush();
        });
      } catch {
        g.unwatchStream = null;
      }
      void this.readHead(g, name).then(() => this.queueFlush());
    }
  }

  /** Stores without stream push: each stream's head once per poll. */
  private async pollStreams(): Promise<void> {
    const reads: Promise<void>[] = [];
    for (const g of this.groups.values()) if (g.streamName !== null) reads.push(this.readHead(g, g.streamName));
    await Promise.all(reads);
  }

  private async readHead(g: GroupState, stream: string): Promise<void> {
    try {
      let head: number;
      // The head alone where the store has it (on MySQL readLast is also a durability write).
      if (typeof this.store.streamHead === 'function') head = (await this.timed('streamHead', this.store.streamHead(stream))).seq;
      else if (typeof this.store.readLast === 'function') head = (await this.timed('readLast', this.store.readLast(stream)))?.seq ?? 0;
      else return;
      if (g.streamName === stream && (g.streamHead === null || head > g.streamHead)) g.streamHead = head;
    } catch {
      // Shown as unknown; the store's status comes from the list.
    }
  }

  private unwatchGroup(g: GroupState): void {
    g.unwatch?.();
    g.unwatch = null;
    g.unwatchStream?.();
    g.unwatchStream = null;
  }

  private view(g: GroupState): GroupView {
    const l = g.held?.lease;
    return {
      name: g.name,
      leader: l ? { owner: l.owner, term: l.term, meta: l.meta, ttlMs: l.ttlMs } : null,
      term: g.term,
      since: g.since,
      sinceExact: g.sinceExact,
      history: g.history,
      followers: [...g.followers].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)).map(([node, f]) => followerView(node, f.lease)),
      stream: g.streamName === null ? null : { name: g.streamName, head: g.streamHead },
    };
  }

  /** Pushes and polls within one turn are told as one update. */
  private queueFlush(): void {
    if (this.flushQueued || this.closed) return;
    this.flushQueued = true;
    setImmediate(() => {
      this.flushQueued = false;
      this.flush();
    });
  }

  private flush(): void {
    if (this.closed) return;
    const now = this.clock.now();
    const changed: GroupView[] = [];
    const remaining: Record<string, number> = {};
    for (const g of this.groups.values()) {
      const v = this.view(g);
      const text = JSON.stringify(v);
      if (text !== g.told) {
        g.told = text;
        changed.push(v);
      }
      const left = g.held ? remainingOf(g.held, now) : null;
      const predicted = g.toldRemaining === null ? null : Math.max(0, g.toldRemaining - (now - g.toldAt));
      if (left !== null && (predicted === null || Math.abs(left - predicted) > REMAINING_SLACK_MS)) remaining[g.name] = left;
      if (left === null ? g.toldRemaining !== null : remaining[g.name] !== undefined) {
        g.toldRemaining = left;
        g.toldAt = now;
      }
    }
    const removed = this.removed;
    this.removed = [];
    const update: DashboardUpdate = { status: this.status, groups: changed, removed, remaining, untracked: this.untracked, now: this.wallNow() };
    for (const fn of [...this.subscribers]) fn(update);
  }
}

function remainingOf(held: Held, now: number): number {
  return Math.max(0, Math.round(held.lease.remainingMs - (now - held.readAt)));
}

function followerView(node: string, lease: Lease): FollowerView {
  const m = lease.meta;
  const num = (v: unknown): number | null => (typeof v === 'number' && Number.isFinite(v) && v >= 0 ? v : null);
  const lagMs = num(m.lagMs);
  return {
    node,
    owner: lease.owner,
    appliedSeq: num(m.appliedSeq),
    lagEntries: num(m.lagEntries),
    lagAtLeast: m.lagAtLeast === true,
    lagMs: lagMs === null || lagMs >= LAG_UNKNOWN_MS ? null : lagMs,
    endpoint: typeof m.endpoint === 'string' ? m.endpoint.slice(0, 200) : null,
  };
}

function commonPrefix(names: readonly string[]): string {
  let p = names[0] ?? '';
  for (const n of names) while (!n.startsWith(p)) p = p.slice(0, -1);
  return p;
}

function checkCount(field: string, value: unknown, min: number, max: number): number {
  if (typeof value !== 'number' || !Number.isInteger(value) || value < min || value > max) {
    throw new InvalidArgumentError(field, `expected a whole number in [${min}, ${max}], got ${String(value)}`);
  }
  return value;
}
