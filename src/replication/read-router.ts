/**
 * ReadRouter: send a read to a follower whose lag is within the caller's threshold, else to the
 * leader; or, for a linearizable read, to the leader only, confirmed after the request arrived.
 *
 * It runs on any node: followers are found by their adverts (LagAdvert: a lease per follower
 * under `<group>/followers/`, listed with `store.list`), the leader by the group's lease.
 *
 * How stale a follower may be when it serves is bounded from facts no clock comparison is needed
 * for (safety rule 1), and no duration another machine measured either. With each listing of the
 * adverts the router reads the head of the stream the followers tail (`store.readLast`) and keeps
 * the sample: the instant the read was *sent*, on its own monotonic clock, and the head found.
 * Every entry appended before that instant has a seq at most that head; so a follower whose advert
 * says it had applied at least that head lacks only entries appended after the instant, and its
 * staleness from then on is at most the time since (a follower's applied seq only grows). A
 * follower's bound is the time since the latest such sample; with no such sample it has no bound
 * and is not routed to under `maxLagMs`.
 *
 * The lag a follower measures itself (`lagMs` in its advert, plus the advert's age on the store's
 * clock and the time the listing was held) only ever raises the bound, never lowers it: a follower
 * is not routed as fresher than it says it is (one that has not found the log's end since it
 * started says so). On its own that claim is no bound: it was measured when the advert write was
 * sent, and the store starts the advert's age when the write arrives, so a write delayed in
 * transit (a slow network, a loaded store, a write that lands after the follower gave up on it)
 * would understate the staleness by the delay, without limit. (The chaos suite found exactly
 * that: a read reported 641 ms stale was 855 ms stale.)
 *
 * An advert whose lease may have expired by now is never used: the store does not list expired
 * leases, and a cached listing is good only while the lease's time left, less the time since the
 * list was sent, is above zero.
 *
 * A linearizable read: on the leader's own node (the router is given the node's elector and it
 * leads), the elector confirms after the request arrived that the store still holds its lease
 * with its term (a renew, compare-and-set on owner and term), then the read runs; on another
 * node, the read runs against the leader the store names, and afterwards the store must still
 * name the same owner with the same term (a term changes whenever the holder does, so the leader
 * held the lease throughout). Either way a deposed or unreachable leader's read is refused with
 * NotLeaderError, never served.
 */
import { InvalidArgumentError, NotLeaderError, checkName, nodeIdOf, randomInt, systemClock, systemRandom } from '../core/index.js';
import type { Clock, Lease, LeaseMeta, Random, Store } from '../core/index.js';
import { followerLeasePrefix } from './lag-advert.js';

/**
 * This node's elector as the router uses it (a LeaderElector is one): whether it leads, and a
 * confirmation, after the request arrived, that the store still holds its lease with its term.
 */
export interface LocalLeader {
  readonly group: string;
  readonly owner: string;
  readonly isLeader: boolean;
  confirmLeadership(): Promise<{ readonly term: number }>;
}

export interface ReadRouterOptions {
  readonly store: Store;
  /** The replication group: the leader's lease name (the elector's group). */
  readonly group: string;
  /** This node's elector, if it campaigns: a linearizable read routed to it is confirmed by it. */
  readonly elector?: LocalLeader;
  /** Default threshold of route() and read(), ms. */
  readonly maxLagMs?: number;
  /** Default threshold of route() and read(), entries. */
  readonly maxLagEntries?: number;
  /**
   * Reuse a listing of the followers this long, ms: 0..60000 (default 0, one `store.list` per
   * route). The time a listing is held counts in each follower's lag and against its lease.
   */
  readonly cacheMs?: number;
  readonly clock?: Clock;
  /** Picks among the followers within the threshold (spreads the reads). */
  readonly random?: Random;
  /**
   * The stream the followers tail. Default: the stream each advert names (a LagAdvert of a Follower
   * publishes it; at most 8 distinct streams are sampled). Given, only adverts of this stream (or
   * naming none) are routed to.
   */
  readonly stream?: string;
}

export interface RouteOptions {
  /** Serve from a follower only if it is at most this stale, ms (its own lag plus its advert's age). */
  readonly maxLagMs?: number;
  /** Serve from a follower only if it was at most this many entries behind when it advertised. */
  readonly maxLagEntries?: number;
  /** Leader only, confirmed after the request arrived; refused with NotLeaderError otherwise. */
  readonly linearizable?: boolean;
}

/** A follower chosen to serve a read. */
export interface FollowerTarget {
  readonly role: 'follower';
  /** The follower's node id (from its advert's lease name). */
  readonly nodeId: string;
  /** Its incarnation (the advert lease's owner). */
  readonly owner: string;
  readonly endpoint: string | null;
  /** The last entry it had applied when it advertised. */
  readonly appliedSeq: number;
  /** Entries it was behind when it advertised. */
  readonly lagEntries: number;
  /**
   * The bound on its staleness when routed, ms: the time since the latest head sample at most its
   * applied seq was sent, or its own claim (advertised lag + advert age + listing age) when larger
   * (see the file's header); Infinity when no sample proves one.
   */
  readonly lagMs: number;
  /** The lag it measured itself and advertised, ms: for information only, never the bound. */
  readonly advertisedLagMs: number;
}

/** The leader chosen to serve a read. */
export interface LeaderTarget {
  readonly role: 'leader';
  readonly nodeId: string;
  readonly owner: string;
  readonly term: number;
  /** `meta.endpoint`, else `meta.url`, when a string. */
  readonly endpoint: string | null;
  readonly meta: LeaseMeta;
  /** True when the leader is this node's own elector. */
  readonly local: boolean;
}

export type ReadTarget = FollowerTarget | LeaderTarget;

/** What read() reports beside the value. */
export interface RoutedRead<T> {
  readonly value: T;
  readonly target: ReadTarget;
  /** The node id that served it. */
  readonly servedBy: string;
  /** The staleness bound it was served under, ms (0 from the leader). */
  readonly lagMs: number;
  /** Entries behind (as advertised; 0 from the leader). */
  readonly lagEntries: number;
  /** For a linearizable read: the leader's term that was confirmed. */
  readonly confirmedTerm: number | null;
}

/** What read() runs against the chosen target: a local query, an HTTP call to its endpoint, ... */
export type ReadFn<T> = (target: ReadTarget, context: { readonly linearizable: boolean }) => Promise<T> | T;

interface Listing {
  readonly sentAt: number;
  readonly leases: readonly Lease[];
}

/** A read of a stream's head: sent at `sentAt` (router's clock), found `head`. */
interface HeadSample {
  readonly sentAt: number;
  readonly head: number;
}

const CACHE_MAX_MS = 60_000;
/** Head samples kept per stream (thinned past it, see sampleHead), and streams sampled at most. */
const SAMPLES_MAX = 256;
const STREAMS_MAX = 8;

export class ReadRouter {
  readonly group: string;
  private readonly store: Store;
  private readonly elector: LocalLeader | null;
  private readonly prefix: string;
  private readonly defaults: { readonly maxLagMs: number | undefined; readonly maxLagEntries: number | undefined };
  private readonly cacheMs: number;
  private readonly clock: Clock;
  private readonly random: Random;
  private listing: Listing | null = null;
  private listing$: Promise<Listing> | null = null;
  private readonly stream: string | undefined;
  /** Head samples per stream, oldest first by send time. */
  private readonly heads = new Map<string, HeadSample[]>();

  constructor(options: ReadRouterOptions) {
    if (typeof options !== 'object' || options === null) throw new InvalidArgumentError('options', 'expected an object');
    if (typeof options.store?.list !== 'function' || typeof options.store.read !== 'function') throw new InvalidArgumentError('store', 'expected a Store');
    this.group = checkName('group', options.group);
    this.prefix = followerLeasePrefix(this.group);
    this.store = options.store;
    if (options.elector !== undefined) {
      if (typeof options.elector?.confirmLeadership !== 'function') throw new InvalidArgumentError('elector', 'expected a LeaderElector');
      if (options.elector.group !== this.group) {
        throw new InvalidArgumentError('elector', `leads group ${JSON.stringify(options.elector.group)}, the router routes ${JSON.stringify(this.group)}`);
      }
    }
    this.elector = options.elector ?? null;
    this.defaults = {
      maxLagMs: optionalMs('maxLagMs', options.maxLagMs),
      maxLagEntries: optionalCount('maxLagEntries', options.maxLagEntries),
    };
    this.cacheMs = optionalMs('cacheMs', options.cacheMs, CACHE_MAX_MS) ?? 0;
    this.clock = options.clock ?? systemClock;
    this.random = options.random ?? systemRandom;
    this.stream = options.stream === undefined ? undefined : checkName('stream', options.stream);
    if (this.stream !== undefined) this.heads.set(this.stream, []);
  }

  /**
   * The target for a read: a follower within the thresholds (one of them at random), else the
   * leader. For `linearizable`, the leader only (confirmation happens in read()). Rejects with
   * NotLeaderError when the leader is needed and no one leads; with InvalidArgumentError when
   * no threshold is given (here or in the router's options) and the read is not linearizable.
   */
  async route(options: RouteOptions = {}): Promise<ReadTarget> {
    const o = this.resolve(options);
    if (o.linearizable) return this.leaderTarget();
    const listing = await this.list();
    const now = this.clock.now();
    const heldMs = Math.max(0, now - listing.sentAt);
    const eligible: FollowerTarget[] = [];
    for (const lease of listing.leases) {
      const t = this.followerTarget(lease, heldMs, now);
      if (!t) continue;
      if (o.maxLagMs !== undefined && t.lagMs > o.maxLagMs) continue;
      if (o.maxLagEntries !== undefined) {
        // lagAtLeast: the follower read a full page, so it may be further behind than it knows.
        if (t.lagEntries > o.maxLagEntries || (lease.meta as { lagAtLeast?: unknown }).lagAtLeast !== false) continue;
      }
      eligible.push(t);
    }
    if (eligible.length > 0) return eligible[randomInt(this.random, 0, eligible.length)]!;
    return this.leaderTarget();
  }

  /**
   * Route, then run `fn` against the target and report who served and how stale it could be.
   * A linearizable read is confirmed after the request arrived (see the file's header) and
   * refused with NotLeaderError on a deposed, partitioned or changed leader; its value is then
   * never returned. `fn`'s own error is passed on (no other target is tried).
   */
  async read<T>(fn: ReadFn<T>, options: RouteOptions = {}): Promise<RoutedRead<T>> {
    if (typeof fn !== 'function') throw new InvalidArgumentError('fn', 'expected a function (target, { linearizable }) => value');
    const o = this.resolve(options);
    if (!o.linearizable) {
      const target = await this.route(o);
      const value = await fn(target, { linearizable: false });
      return target.role === 'follower'
        ? { value, target, servedBy: target.nodeId, lagMs: target.lagMs, lagEntries: target.lagEntries, confirmedTerm: null }
        : { value, target, servedBy: target.nodeId, lagMs: 0, lagEntries: 0, confirmedTerm: null };
    }
    const e = this.elector;
    if (e?.isLeader) {
      // This node leads: ReadIndex-style, confirm with the store after the request arrived, then read.
      const confirmed = await e.confirmLeadership();
      const lease = { owner: e.owner, term: confirmed.term };
      const target: LeaderTarget = { role: 'leader', nodeId: nodeIdOf(e.owner), owner: lease.owner, term: lease.term, endpoint: null, meta: {}, local: true };
      const value = await fn(target, { linearizable: true });
      return { value, target, servedBy: target.nodeId, lagMs: 0, lagEntries: 0, confirmedTerm: confirmed.term };
    }
    const target = await this.leaderTarget();
    if (target.local) {
      throw new NotLeaderError(`${target.owner} holds ${this.group} in the store (term ${target.term}) but its elector here does not lead: read refused`);
    }
    const value = await fn(target, { linearizable: true });
    // The store must still name the same holder with the same term: the leader held the lease
    // from before the read was sent until after it was answered.
    const after = await this.store.read(this.group);
    if (!after || after.owner !== target.owner || after.term !== target.term) {
      const now = after ? `${after.owner} term ${after.term}` : 'no one';
      throw new NotLeaderError(`linearizable read of ${this.group} refused: the leader was ${target.owner} term ${target.term} when it was sent, and is ${now} after it was answered`);
    }
    return { value, target, servedBy: target.nodeId, lagMs: 0, lagEntries: 0, confirmedTerm: target.term };
  }

  /** Forget the cached listing (the next route lists again). */
  invalidate(): void {
    this.listing = null;
  }

  private resolve(options: RouteOptions): { maxLagMs: number | undefined; maxLagEntries: number | undefined; linearizable: boolean } {
    if (typeof options !== 'object' || options === null) throw new InvalidArgumentError('options', 'expected an object');
    const linearizable = options.linearizable ?? false;
    if (typeof linearizable !== 'boolean') throw new InvalidArgumentError('linearizable', `expected a boolean, got ${typeof linearizable}`);
    const maxLagMs = optionalMs('maxLagMs', options.maxLagMs) ?? this.defaults.maxLagMs;
    const maxLagEntries = optionalCount('maxLagEntries', options.maxLagEntries) ?? this.defaults.maxLagEntries;
    if (!linearizable && maxLagMs === undefined && maxLagEntries === undefined) {
      throw new InvalidArgumentError('maxLagMs', 'give maxLagMs or maxLagEntries (here or in the router options), or linearizable: true');
    }
    return { maxLagMs, maxLagEntries, linearizable };
  }

  private async leaderTarget(): Promise<LeaderTarget> {
    const lease = await this.store.read(this.group);
    if (!lease) throw new NotLeaderError(`no one leads ${this.group}: nowhere to send the read`);
    const meta = lease.meta;
    const endpoint = typeof meta.endpoint === 'string' ? meta.endpoint : typeof meta.url === 'string' ? meta.url : null;
    return { role: 'leader', nodeId: nodeIdOf(lease.owner), owner: lease.owner, term: lease.term, endpoint, meta, local: this.elector?.owner === lease.owner };
  }

  /** A listed advert as a target, or null when it may have expired by now or its meta is not an advert. */
  private followerTarget(lease: Lease, heldMs: number, now: number): FollowerTarget | null {
    if (!lease.name.startsWith(this.prefix) || lease.name.length === this.prefix.length) return null;
    // Never an advert that may be dead: its time left as the store reported it, less all the time since the list was sent.
    if (!(lease.remainingMs - heldMs > 0)) return null;
    const m = lease.meta as { [key: string]: unknown };
    const appliedSeq = m.appliedSeq;
    const lagEntries = m.lagEntries;
    const lagMs = m.lagMs;
    if (!isCount(appliedSeq) || !isCount(lagEntries) || typeof lagMs !== 'number' || !Number.isFinite(lagMs) || lagMs < 0) return null;
    const stream = this.streamOf(m);
    if (stream === null) return null;
    // The follower's own claim: its lag, plus the advert's age on the store's clock (durations only, at most its TTL), plus the listing's.
    const claimedMs = lagMs + Math.max(0, Math.min(lease.ttlMs, lease.ttlMs - lease.remainingMs)) + heldMs;
    return {
      role: 'follower',
      nodeId: lease.name.slice(this.prefix.length),
      owner: lease.owner,
      endpoint: typeof m.endpoint === 'string' ? m.endpoint : null,
      appliedSeq,
      lagEntries,
      lagMs: Math.max(this.boundMs(stream, appliedSeq, now), claimedMs),
      advertisedLagMs: lagMs,
    };
  }

  /** The stream an advert's follower tails: the router's own, else the advert's; null when neither is usable. */
  private streamOf(meta: { readonly [key: string]: unknown }): string | null {
    const named = meta.stream;
    if (named !== undefined && (typeof named !== 'string' || !isName(named))) return null;
    if (this.stream !== undefined) return named === undefined || named === this.stream ? this.stream : null;
    return named ?? null;
  }

  /** Time since the latest head sample of `stream` at most `applied` was sent; Infinity when none. */
  private boundMs(stream: string, applied: number, now: number): number {
    const samples = this.heads.get(stream);
    if (!samples) return Infinity;
    // The samples ascend in both send time and head (see sampleHead): the last one at most `applied`.
    let lo = 0;
    let hi = samples.length;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (samples[mid]!.head <= applied) lo = mid + 1;
      else hi = mid;
    }
    return lo === 0 ? Infinity : Math.max(0, now - samples[lo - 1]!.sentAt);
  }

  /**
   * Read `stream`'s head and keep the sample; a failed read keeps none (older samples still bound).
   * Only samples no other beats are kept (a later send with a head no higher proves more for every
   * follower), so they ascend in both send time and head. Past SAMPLES_MAX the older half is
   * thinned to every second sample: recent ones stay dense, old ones sparse, a lagging follower
   * still finds one.
   */
  private async sampleHead(stream: string, sentAt: number): Promise<void> {
    // The head alone (streamHead) where the store has it: on MySQL readLast also makes the entry
    // durable (a write), which a head for a bound does not need (a head a crash then loses only
    // makes the bound more cautious).
    const { streamHead, readLast } = this.store;
    let head: number;
    try {
      if (typeof streamHead === 'function') head = (await streamHead.call(this.store, stream)).seq;
      else if (typeof readLast === 'function') head = (await readLast.call(this.store, stream))?.seq ?? 0;
      else return;
    } catch {
      return;
    }
    if (!isCount(head)) return;
    const samples = this.heads.get(stream);
    if (!samples) return;
    // Beaten by a kept sample (sent no earlier, head no higher): nothing to add.
    if (samples.some((s) => s.sentAt >= sentAt && s.head <= head)) return;
    const kept = samples.filter((s) => !(s.sentAt <= sentAt && s.head >= head));
    let i = kept.length;
    while (i > 0 && kept[i - 1]!.sentAt > sentAt) i--;
    kept.splice(i, 0, { sentAt, head });
    if (kept.length > SAMPLES_MAX) {
      const half = kept.length - SAMPLES_MAX / 2;
      const thinned = kept.slice(0, half).filter((_, j) => j % 2 === 0); // the oldest stays: it bounds the furthest behind
      kept.splice(0, half, ...thinned);
    }
    samples.length = 0;
    samples.push(...kept);
  }

  private async list(): Promise<Listing> {
    const cached = this.listing;
    if (cached && this.cacheMs > 0 && this.clock.now() - cached.sentAt < this.cacheMs) return cached;
    // Concurrent routes share one list in flight.
    this.listing$ ??= (async () => {
      const sentAt = this.clock.now();
      try {
        // The heads of the streams known so far are read beside the list, sent at the same instant.
        const known = [...this.heads.keys()];
        const [leases] = await Promise.all([this.store.list(this.prefix), ...known.map((stream) => this.sampleHead(stream, sentAt))]);
        // Streams named by adverts for the first time: sampled now (sent after the list, still a sound bound).
        if (this.stream === undefined) {
          const fresh: string[] = [];
          for (const lease of leases) {
            const named = (lease.meta as { stream?: unknown }).stream;
            if (typeof named !== 'string' || !isName(named) || this.heads.has(named) || this.heads.size >= STREAMS_MAX) continue;
            this.heads.set(named, []);
            fresh.push(named);
          }
          if (fresh.length > 0) {
            const at = this.clock.now();
            await Promise.all(fresh.map((stream) => this.sampleHead(stream, at)));
          }
        }
        const l: Listing = { sentAt, leases };
        this.listing = l;
        return l;
      } finally {
        this.listing$ = null;
      }
    })();
    return this.listing$;
  }
}

function isName(v: string): boolean {
  try {
    checkName('stream', v);
    return true;
  } catch {
    return false;
  }
}

function isCount(v: unknown): v is number {
  return typeof v === 'number' && Number.isSafeInteger(v) && v >= 0;
}

function optionalMs(field: string, value: unknown, max = 86_400_000): number | undefined {
  if (value === undefined) return undefined;
  if (typeof value !== 'number' || !Number.isFinite(value) || value < 0 || value > max) {
    throw new InvalidArgumentError(field, `expected a number of ms in [0, ${max}], got ${String(value)}`);
  }
  return value;
}

function optionalCount(field: string, value: unknown): number | undefined {
  if (value === undefined) return undefined;
  if (!isCount(value)) throw new InvalidArgumentError(field, `expected a whole number >= 0, got ${String(value)}`);
  return value;
}
