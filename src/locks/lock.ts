/**
 * Lock: a lease acquired with waiting, renewed automatically while held, released on dispose.
 * Built on LeaderElector, so it inherits the deadline rule: `handle.signal` aborts before the
 * lease could expire if renewals stop succeeding.
 */
import { LockTimeoutError, NotLeaderError, TenureError, checkMs, limits, systemClock } from '../core/index.js';
import type { Clock, FencingToken, LeaseMeta, Random, Store, TimingOptions } from '../core/index.js';
import { LeaderElector } from '../election/index.js';
import { runFenced } from '../fencing/context.js';

export interface LockOptions extends TimingOptions {
  /** Stable node id (an incarnation suffix is added). */
  id?: string;
  meta?: LeaseMeta;
  clock?: Clock;
  random?: Random;
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

export interface LockHandle extends AsyncDisposable {
  readonly name: string;
  readonly token: FencingToken;
  readonly term: number;
  /** Aborts when the lock is lost (deadline passed without renewal, or taken over). */
  readonly signal: AbortSignal;
  /** Release the lock. Idempotent. */
  release(): Promise<void>;
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
    new LeaderElector({ ...options, store, group: name });
  }

  /**
   * Acquire the lock, waiting as the options allow. Rejects with LockTimeoutError after `waitMs`,
   * with the signal's reason on abort, and with the error itself when the store answers something
   * waiting cannot fix (a StoreDataError for a lease whose term tenure cannot use).
   */
  acquire(options: AcquireOptions = {}): Promise<LockHandle> {
    const { signal, waitMs } = options;
    if (waitMs !== undefined) checkMs('waitMs', waitMs, 0, limits.ttlMaxMs);
    const elector = new LeaderElector({ ...this.options, store: this.store, group: this.name });
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
        if (operation === 'release' || (error instanceof TenureError && error.code === 'STORE_UNAVAILABLE')) return;
        fail(error);
      };
      const onAbort = (): void => fail(signal?.reason ?? new LockTimeoutError(this.name, waitMs ?? 0));
      const cleanup = (): void => {
        cancelTimer();
        elector.off('store-error', onStoreError);
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
        // A lost lock is not re-acquired behind the holder's back: stop campaigning.
        elector.once('deposed', () => void elector.stop());
        let released: Promise<void> | null = null;
        const release = (): Promise<void> => (released ??= elector.stop());
        resolve({
          name: this.name,
          token,
          term: token.term,
          signal: leaderSignal,
          release,
          [Symbol.asyncDispose]: release,
        });
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
