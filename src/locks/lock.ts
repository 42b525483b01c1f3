/**
 * Lock: a lease acquired with waiting, renewed automatically while held, released on dispose.
 * Built on LeaderElector, so it inherits the deadline rule: `handle.signal` aborts before the
 * lease could expire if renewals stop succeeding.
 */
import { LockTimeoutError, NotLeaderError, StoreUnavailableError, TenureError, TypedEmitter, checkMs, limits, systemClock } from '../core/index.js';
import type { Clock, FencingToken, LeaseMeta, Logger, Random, Store, TimingOptions } from '../core/index.js';
import { LeaderElector } from '../election/index.js';
import type { DeposedReason } from '../election/index.js';
import { runFenced } from '../fencing/context.js';

export interface LockOptions extends TimingOptions {
  /** Stable node id (an incarnation suffix is added). */
  id?: string;
  meta?: LeaseMeta;
  clock?: Clock;
  random?: Random;
  /** A pino-compatible logger: one structured line per transition of each handle (acquired, suspended, recovered, lost, released). */
  logger?: Logger;
  /**
   * Lock-delay (as Consul's), ms, default 0: after an involuntary loss (the holder vanished, paused
   * or was cut off from the store, so its lease lapsed rather than being released), nobody can
   * take the lock for this long past the instant the holder's `signal` aborted at the latest. The
   * store keeps the lease ttl + lockDelayMs from each renew, by its own clock; the holder's own
   * deadline stays at ttl - margin. A release never delays. ttlMs + lockDelayMs <= 24 h.
   */
  lockDelayMs?: number;
}

export interface AcquireOptions {
  /** Give up (reject with the signal's reason) when this aborts. */
  signal?: AbortSignal;
  /**
   * Give up with LockTimeoutError after this many ms. An attempt sent within the wait counts,
   * however late its answer comes: `waitMs: 0` is exactly one attempt, a free lock is taken.
   * Default: wait until acquired or aborted.
   */
  waitMs?: number;
}

/** What a held lock reports: the same transitions as a leader's. */
export interface LockHandleEvents {
  /** A renew failed as "maybe": still held for `remainingMs`, the deadline unchanged. */
  suspended: { term: number; error: Error; remainingMs: number };
  /** A renew succeeded again before the deadline: same term. */
  recovered: { term: number; suspendedMs: number; remainingMs: number };
  /** The lock was lost (deadline passed, taken over, a stale rejection): `signal` has aborted. Not emitted on release. */
  lost: { term: number; reason: DeposedReason };
}

export interface LockHandle extends AsyncDisposable {
  readonly name: string;
  readonly token: FencingToken;
  readonly term: number;
  /** Aborts when the lock is lost (deadline passed without renewal, or taken over). */
  readonly signal: AbortSignal;
  /** True until the lock is lost or released. */
  readonly held: boolean;
  /** True once the lock was lost (deadline passed, taken over, a stale rejection); false after a release. */
  readonly lost: boolean;
  /** True while held and the last renew failed as "maybe": the lock holds only until its deadline. */
  readonly suspended: boolean;
  /**
   * Time left on the lock's validity, ms: the last successful acquire or renew's send time + ttl
   * - margin (safety rule 2), minus now; never negative, 0 once lost or released.
   */
  remainingMs(): number;
  on<K extends keyof LockHandleEvents & string>(event: K, listener: (payload: LockHandleEvents[K]) => void): this;
  once<K extends keyof LockHandleEvents & string>(event: K, listener: (payload: LockHandleEvents[K]) => void): this;
  off<K extends keyof LockHandleEvents & string>(event: K, listener: (payload: LockHandleEvents[K]) => void): this;
  /** Release the lock. Idempotent. */
  release(): Promise<void>;
}

/** A held lock: its elector's leadership, seen as a handle. */
class HeldLock extends TypedEmitter<LockHandleEvents> implements LockHandle {
  readonly term: number;
  private released: Promise<void> | null = null;
  private wasLost = false;

  constructor(
    readonly name: string,
    readonly token: FencingToken,
    readonly signal: AbortSignal,
    private readonly elector: LeaderElector,
  ) {
    super();
    this.term = token.term;
    elector.on('suspended', (e) => this.emit('suspended', e));
    elector.on('recovered', (e) => this.emit('recovered', e));
    // A lost lock is not re-acquired behind the holder's back: stop campaigning.
    elector.once('deposed', ({ term, reason }) => {
      void elector.stop();
      if (reason !== 'stopped') {
        this.wasLost = true;
        this.emit('lost', { term, reason });
      }
    });
  }

  get held(): boolean {
    return !this.signal.aborted;
  }

  get lost(): boolean {
    return this.wasLost;
  }

  get suspended(): boolean {
    return !this.signal.aborted && this.elector.suspended;
  }

  remainingMs(): number {
    return this.signal.aborted ? 0 : this.elector.remainingMs();
  }

  release(): Promise<void> {
    return (this.released ??= this.elector.stop());
  }

  [Symbol.asyncDispose](): Promise<void> {
    return this.release();
  }
}

export class Lock {
  readonly name: string;
  private readonly store: Store;
  private readonly options: LockOptions;

  constructor(store: Store, name: string, options: LockOptions = {}) {
    this.store = store;
    this.name = name;
    this.options = options;
    // Validate eagerly so bad input fails at construction, not at first acquire.
    new LeaderElector({ ...options, store, group: name, transfers: false });
  }

  /**
   * Acquire the lock, waiting as the options allow. Rejects with LockTimeoutError after `waitMs`,
   * with the signal's reason on abort, and with the error itself when the store answers something
   * waiting cannot fix (a StoreDataError for a lease whose term tenure cannot use).
   */
  acquire(options: AcquireOptions = {}): Promise<LockHandle> {
    return this.attempt(options, null);
  }

  /**
   * One attempt, no wait: the handle when the lock was free and is now held, `null` when another
   * holder has it. Rejects with StoreUnavailableError when that one attempt got no answer to go
   * by: none in time (the store's own error), or a grant that came back after the lease's
   * deadline, too late to hold (the store may have granted it either way: a grant nobody renews
   * lapses at its TTL). Rejects with the signal's reason on abort, and with a fault as `acquire`
   * does.
   */
  async tryAcquire(options: { signal?: AbortSignal } = {}): Promise<LockHandle | null> {
    const outage: { error: Error | null } = { error: null };
    try {
      return await this.attempt({ ...options, waitMs: 0 }, outage);
    } catch (err) {
      if (!(err instanceof LockTimeoutError)) throw err;
      if (outage.error) throw outage.error;
      return null;
    }
  }

  /** acquire's body; `outage` (tryAcquire's) records the last "store unavailable" an attempt got. */
  private attempt(options: AcquireOptions, outage: { error: Error | null } | null): Promise<LockHandle> {
    const { signal, waitMs } = options;
    if (waitMs !== undefined) checkMs('waitMs', waitMs, 0, limits.ttlMaxMs);
    // Nobody hands a lock over: no hand-over hint to read after each win.
    const elector = new LeaderElector({ ...this.options, store: this.store, group: this.name, transfers: false });
    return new Promise<LockHandle>((resolve, reject) => {
      let settled = false;
      let cancelTimer = (): void => {};
      const fail = (err: unknown): void => {
        if (settled) return;
        settled = true;
        cleanup();
        void elector.stop().then(() => reject(err as Error));
      };
      // A fault (see LeaderElector: a lease row tenure cannot use, a store that broke its
      // contract) is not worth waiting out: the acquire fails with it. An outage is waited out.
      const onStoreError = ({ operation, error }: { operation: string; error: Error }): void => {
        if (operation === 'release') return;
        if (error instanceof TenureError && error.code === 'STORE_UNAVAILABLE') {
          if (outage && operation === 'acquire') outage.error = error;
          return;
        }
        fail(error);
      };
      // A win whose answer came after its own deadline (a slow store) is not a holder elsewhere:
      // tryAcquire's one attempt reports it as the outage it is, never as `null`.
      const onLate = ({ term, reason }: { term: number; reason: DeposedReason }): void => {
        if (outage && reason === 'late') {
          outage.error = new StoreUnavailableError(`lock ${this.name}: the ${this.store.kind} store granted term ${term} after the lease's deadline, too late to hold it (the grant lapses unrenewed)`);
        }
      };
      const onAbort = (): void => fail(signal?.reason ?? new LockTimeoutError(this.name, waitMs ?? 0));
      const cleanup = (): void => {
        cancelTimer();
        elector.off('store-error', onStoreError);
        elector.off('deposed', onLate);
        signal?.removeEventListener('abort', onAbort);
      };
      if (signal?.aborted) {
        reject(signal.reason as Error);
        return;
      }
      signal?.addEventListener('abort', onAbort, { once: true });
      if (waitMs !== undefined) {
        // The wait bounds when attempts start, not when their answers come: at the end of the
        // wait, the acquire on its way (the first one, with waitMs 0) still decides.
        cancelTimer = (this.options.clock ?? systemClock).setTimer(waitMs, () => {
          if (!settled) void elector.settled().then(() => fail(new LockTimeoutError(this.name, waitMs)));
        });
      }
      elector.on('store-error', onStoreError);
      elector.on('deposed', onLate);
      elector.once('elected', ({ token }) => {
        elector.off('store-error', onStoreError);
        if (settled) return;
        settled = true;
        cleanup();
        const leaderSignal = elector.signal;
        if (!leaderSignal) {
          reject(new NotLeaderError(`lock ${this.name} was lost as it was acquired`));
          return;
        }
        resolve(new HeldLock(this.name, token, leaderSignal, elector));
      });
      elector.start();
    });
  }

  /**
   * Acquire, run `fn` with the handle, release whatever happens. The handle's token is the fencing
   * context of `fn` and of everything it starts (tenure/fencing's helpers find it there).
   */
  async using<T>(fn: (handle: LockHandle) => Promise<T> | T, options?: AcquireOptions): Promise<T> {
    const handle = await this.acquire(options);
    try {
      return await runFenced(handle, () => fn(handle));
    } finally {
      await handle.release();
    }
  }
}
