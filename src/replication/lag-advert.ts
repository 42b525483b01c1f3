/**
 * LagAdvert: a follower tells every node how far behind it is, through a lease of its own.
 *
 * The follower holds the lease `<group>/followers/<nodeId>` while it runs. Its meta carries the
 * lag the follower measured itself (applied seq, entries behind, ms behind on its own monotonic
 * clock: safety rule 1, no clock is compared across machines) and, optionally, where readers
 * reach it. Each refresh is an acquire by the same incarnation, which the Store contract makes a
 * live renewal with new meta (same term). The lease's TTL is the liveness: a follower that dies
 * stops refreshing, its lease expires on the store's clock, and `store.list` no longer returns it,
 * so no reader routes to its last (stale) advert. Stopping releases the lease at once.
 *
 * Any node lists the adverts with `store.list('<group>/followers/')`; ReadRouter does.
 */
import { InvalidArgumentError, StoreUnavailableError, TypedEmitter, checkMs, checkName, checkOwner, makeIncarnation, systemClock, systemRandom } from '../core/index.js';
import type { Clock, Lease, LeaseMeta, Random, Store } from '../core/index.js';
import type { FollowerEvents, FollowerLag } from './follower.js';

/** What the advert reads from a follower: its public getters and events (a Follower is one). */
export interface AdvertisedFollower {
  readonly applied: number;
  /** The stream it tails (a Follower's), published so that readers can bound its staleness (ReadRouter). */
  readonly stream?: string;
  lag(): FollowerLag;
  on<K extends keyof FollowerEvents & string>(event: K, listener: (payload: FollowerEvents[K]) => void): unknown;
  off<K extends keyof FollowerEvents & string>(event: K, listener: (payload: FollowerEvents[K]) => void): unknown;
}

/**
 * The `lagMs` a follower advertises while its lag is unknown (no read of its has found the end of
 * the log yet: `FollowerLag.staleMs` is Infinity, which JSON cannot carry): above any threshold.
 */
export const LAG_UNKNOWN_MS = Number.MAX_SAFE_INTEGER;

/** The meta of a follower's lease: its own measurement of its lag, as of the last refresh. */
export interface FollowerAdvert {
  /** The last entry applied (committed with its offset). */
  readonly appliedSeq: number;
  /** Entries in the log after it, as of the follower's last read. */
  readonly lagEntries: number;
  /** True when the log held at least `lagEntries` more (a full page), maybe more. */
  readonly lagAtLeast: boolean;
  /**
   * How stale its data may be, ms, on its own monotonic clock: the time since the send of its last
   * read that found the end of the log (FollowerLag.staleMs; a few ms when caught up and polling);
   * LAG_UNKNOWN_MS before any read found it.
   */
  readonly lagMs: number;
  /** Where readers reach this follower (a URL, host:port), when given. */
  readonly endpoint?: string;
  /**
   * The stream it tails, when the follower names one (a Follower does). A ReadRouter reads this
   * stream's head to bound the follower's staleness from `appliedSeq` (see read-router.ts).
   */
  readonly stream?: string;
}

export interface LagAdvertOptions {
  readonly store: Store;
  /** The replication group: the leader's lease name. Adverts live under `<group>/followers/`. */
  readonly group: string;
  /** This follower's stable node id (1..200 characters); the lease owner is an incarnation of it. */
  readonly nodeId: string;
  readonly follower: AdvertisedFollower;
  /** Published in the meta so readers can reach this follower (at most 1000 characters). */
  readonly endpoint?: string;
  /** The advert lease's TTL, ms: how long a dead follower's advert may still be listed. 10..86400000 (default 3000). */
  readonly ttlMs?: number;
  /**
   * Refresh interval, ms (default ttl / 3): readers count an advert's age on top of its lag, so
   * this bounds how stale a caught-up follower looks. Must be < ttlMs.
   */
  readonly refreshMs?: number;
  /** A store call with no answer after this long counts as failed, ms (default refreshMs). */
  readonly requestTimeoutMs?: number;
  /** Stop (and release) when this aborts. */
  readonly signal?: AbortSignal;
  readonly clock?: Clock;
  readonly random?: Random;
}

export interface LagAdvertEvents {
  /** The advert was written: the lease is held with this meta. */
  published: { readonly advert: FollowerAdvert; readonly term: number };
  /** Another incarnation of this node id holds the lease (an earlier process whose lease has not lapsed): retried each refresh. */
  conflict: { readonly holder: Lease };
  /** A store call failed; retried at the next refresh. */
  'store-error': { readonly operation: string; readonly error: Error };
  /** The advert stopped and its lease was released (or left to expire when the release failed). */
  stopped: { readonly released: boolean };
}

/** The prefix of the follower adverts of `group`. */
export function followerLeasePrefix(group: string): string {
  return `${checkName('group', group)}/followers/`;
}

const DEFAULT_TTL_MS = 3000;
const ENDPOINT_MAX = 1000;

export class LagAdvert extends TypedEmitter<LagAdvertEvents> implements AsyncDisposable {
  /** The advert's lease name, `<group>/followers/<nodeId>`. */
  readonly name: string;
  /** This advert's incarnation id, the lease owner. */
  readonly owner: string;
  readonly ttlMs: number;
  readonly refreshMs: number;
  private readonly store: Store;
  private readonly follower: AdvertisedFollower;
  private readonly endpoint: string | undefined;
  private readonly requestTimeoutMs: number;
  private readonly clock: Clock;
  private readonly stopper = new AbortController();
  private running: Promise<void> | null = null;
  private heldTerm: number | null = null;
  private cancelSleep: (() => void) | null = null;
  private readonly onFollowerEnd = (): void => this.stopper.abort();

  constructor(options: LagAdvertOptions) {
    super();
    if (typeof options !== 'object' || options === null) throw new InvalidArgumentError('options', 'expected an object');
    if (typeof options.store?.acquire !== 'function' || typeof options.store.release !== 'function') throw new InvalidArgumentError('store', 'expected a Store');
    const f = options.follower;
    if (typeof f?.lag !== 'function' || typeof f.on !== 'function' || typeof f.off !== 'function') {
      throw new InvalidArgumentError('follower', 'expected a Follower (lag(), applied, on/off)');
    }
    const nodeId = checkOwner('nodeId', options.nodeId);
    this.name = checkName('name', `${followerLeasePrefix(options.group)}${nodeId}`);
    if (options.endpoint !== undefined) {
      if (typeof options.endpoint !== 'string' || options.endpoint.length === 0 || options.endpoint.length > ENDPOINT_MAX) {
        throw new InvalidArgumentError('endpoint', `expected a string of 1..${ENDPOINT_MAX} characters`);
      }
    }
    this.endpoint = options.endpoint;
    this.ttlMs = checkMs('ttlMs', options.ttlMs ?? DEFAULT_TTL_MS, 10, 86_400_000);
    this.refreshMs = checkMs('refreshMs', options.refreshMs ?? Math.max(1, Math.floor(this.ttlMs / 3)), 1, this.ttlMs - 1);
    this.requestTimeoutMs = checkMs('requestTimeoutMs', options.requestTimeoutMs ?? this.refreshMs, 1, 86_400_000);
    this.store = options.store;
    this.follower = f;
    this.clock = options.clock ?? systemClock;
    this.owner = makeIncarnation(nodeId, options.random ?? systemRandom);
    const signal = options.signal;
    if (signal) {
      if (signal.aborted) this.stopper.abort();
      else signal.addEventListener('abort', () => this.stopper.abort(), { once: true });
    }
    this.stopper.signal.addEventListener('abort', () => this.cancelSleep?.(), { once: true });
  }

  /** True while the lease is held (the last refresh succeeded and it has not been released). */
  get held(): boolean {
    return this.heldTerm !== null;
  }

  /** The advert as the follower's lag reads now (what the next refresh publishes). */
  current(): FollowerAdvert {
    const lag = this.follower.lag();
    const advert: FollowerAdvert = {
      appliedSeq: this.follower.applied,
      lagEntries: lag.entries,
      lagAtLeast: lag.atLeast,
      // Not behindMs, which is 0 when the last read found the end however long ago that read was
      // sent: a follower whose reads stall (found by the chaos suite on etcd with a member down)
      // would advertise 0 while the log moved on. staleMs counts from that read's send.
      // Until a read has found the end (staleMs Infinity) the lag is unknown: published as the
      // largest safe integer (JSON has no Infinity), so any maxLagMs skips this follower.
      lagMs: Number.isFinite(lag.staleMs) ? Math.max(0, Math.ceil(lag.staleMs)) : LAG_UNKNOWN_MS,
    };
    const stream = this.follower.stream;
    return {
      ...advert,
      ...(this.endpoint === undefined ? {} : { endpoint: this.endpoint }),
      ...(typeof stream === 'string' ? { stream } : {}),
    };
  }

  /**
   * Start advertising (once; later calls return the same promise). Resolves when stopped: by
   * stop(), the signal, disposal, or the follower stopping or failing. Store failures never
   * reject it: each is reported as `store-error` and the next refresh tries again.
   * Start it with the follower (before or right after `follower.start()`): it hears the
   * follower's `stopped` and `failed` events only from then on, and a stopped follower that was
   * caught up still reads as lag 0.
   */
  start(): Promise<void> {
    this.running ??= this.run();
    return this.running;
  }

  /** Stop refreshing and release the lease; resolves when done. */
  async stop(): Promise<void> {
    this.stopper.abort();
    await this.running;
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.stop();
  }

  private async run(): Promise<void> {
    this.follower.on('stopped', this.onFollowerEnd);
    this.follower.on('failed', this.onFollowerEnd);
    try {
      while (!this.stopper.signal.aborted) {
        await this.refresh();
        await this.sleep(this.refreshMs);
      }
    } finally {
      this.follower.off('stopped', this.onFollowerEnd);
      this.follower.off('failed', this.onFollowerEnd);
    }
    const released = await this.release();
    this.emit('stopped', { released });
  }

  private async refresh(): Promise<void> {
    const advert = this.current();
    try {
      const r = await this.timed('acquire', this.store.acquire(this.name, this.owner, this.ttlMs, advert as unknown as LeaseMeta));
      if (r.acquired) {
        this.heldTerm = r.lease.term;
        this.emit('published', { advert, term: r.lease.term });
      } else {
        this.heldTerm = null;
        this.emit('conflict', { holder: r.lease });
      }
    } catch (err) {
      // Maybe held, maybe not (rule 3): a release later still covers the term we knew.
      this.emit('store-error', { operation: 'acquire', error: err instanceof Error ? err : new Error(String(err)) });
    }
  }

  private async release(): Promise<boolean> {
    const term = this.heldTerm;
    this.heldTerm = null;
    if (term === null) return false;
    try {
      return await this.timed('release', this.store.release(this.name, this.owner, term));
    } catch (err) {
      // The lease then expires at its TTL.
      this.emit('store-error', { operation: 'release', error: err instanceof Error ? err : new Error(String(err)) });
      return false;
    }
  }

  private timed<T>(operation: string, promise: Promise<T>): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      const cancel = this.clock.setTimer(this.requestTimeoutMs, () =>
        reject(new StoreUnavailableError(`${this.store.kind} store: no answer to ${operation} of ${this.name} within ${this.requestTimeoutMs} ms`)),
      );
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

  private sleep(ms: number): Promise<void> {
    if (this.stopper.signal.aborted) return Promise.resolve();
    return new Promise((resolve) => {
      const done = (): void => {
        cancel();
        this.cancelSleep = null;
        resolve();
      };
      const cancel = this.clock.setTimer(ms, done);
      this.cancelSleep = done;
    });
  }
}
