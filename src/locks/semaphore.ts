/**
 * The lock family over any Store: a counting semaphore (N holders, each with its own lease and
 * token) and a read/write lock (many readers or one writer; a waiting writer shuts new readers
 * out, so writers are not starved).
 *
 * Both are built from leases the store already has, so every store gets them with no new
 * statement, and every safety rule of a lease holds for each holder:
 *  - a semaphore of N is N lease names (`NAME/permit/0` … `NAME/permit/N-1`); a holder holds one
 *    of them, renewed like any lock, and its token (lease `NAME/permit/i`, that permit's term)
 *    fences its writes like any other token;
 *  - a read/write lock is a writer gate (`NAME/write`, a plain lock: the writer's token) and a
 *    semaphore of reader permits (`NAME/read/…`). A reader takes a permit only when the gate is
 *    free, and checks the gate again after: if a writer took it meanwhile, the reader gives the
 *    permit back and waits. A writer takes the gate, then waits until no reader permit is held
 *    (`list`), and only then is handed the lock. With linearizable reads (every store here), a
 *    reader and a writer never both hold: whichever of the reader's permit and the writer's
 *    gate came second sees the other (the reader's second check, or the writer's list).
 * Waiting polls every `retryMs` (± jitter) until `waitMs` or the signal ends it.
 */
import { InvalidArgumentError, LockTimeoutError, TenureError, checkMs, checkName, limits, resolveTiming, sleep, systemClock, systemRandom } from '../core/index.js';
import type { Clock, Random, Store } from '../core/index.js';
import { runFenced } from '../fencing/context.js';
import { Lock } from './lock.js';
import type { AcquireOptions, LockHandle, LockOptions } from './lock.js';

/** The most permits a semaphore (or readers a read/write lock) may have: each is a lease name. */
export const maxPermits = 1024;

export interface SemaphoreOptions extends LockOptions {
  /** How many holders at once: an integer in [1, 1024]. */
  permits: number;
}

export interface ReadWriteLockOptions extends LockOptions {
  /** How many readers at once (reader permits): an integer in [1, 1024], default 64. */
  maxReaders?: number;
}

/** What a semaphore, and each side of a read/write lock, offers: a Lock's surface. */
export interface Acquirable {
  readonly name: string;
  /** Wait for a permit as the options allow (LockTimeoutError after `waitMs`; the signal's reason on abort). */
  acquire(options?: AcquireOptions): Promise<LockHandle>;
  /** One attempt, no wait: a handle, `null` when none is free, StoreUnavailableError when the store could not answer. */
  tryAcquire(options?: { signal?: AbortSignal }): Promise<LockHandle | null>;
  /** Acquire, run `fn` with the handle (its token is the fencing context), release whatever happens. */
  using<T>(fn: (handle: LockHandle) => Promise<T> | T, options?: AcquireOptions): Promise<T>;
}

function isUnavailable(err: unknown): err is TenureError {
  return err instanceof TenureError && err.code === 'STORE_UNAVAILABLE';
}

function checkPermits(field: string, value: unknown): number {
  if (typeof value !== 'number' || !Number.isInteger(value) || value < 1 || value > maxPermits) {
    throw new InvalidArgumentError(field, `expected an integer in [1, ${maxPermits}], got ${String(value)}`);
  }
  return value;
}

interface Pacing {
  readonly clock: Clock;
  readonly random: Random;
  readonly retryMs: number;
}

function pacing(options: LockOptions): Pacing {
  return { clock: options.clock ?? systemClock, random: options.random ?? systemRandom, retryMs: resolveTiming(options).retryMs };
}

/**
 * Try until `attempt` gives a handle, the wait ends (LockTimeoutError) or the signal aborts. An
 * attempt the store could not answer is tried again, as a Lock waits out an outage.
 */
async function attemptUntil(name: string, attempt: (signal?: AbortSignal) => Promise<LockHandle | null>, options: AcquireOptions, p: Pacing): Promise<LockHandle> {
  const { signal, waitMs } = options;
  if (waitMs !== undefined) checkMs('waitMs', waitMs, 0, limits.ttlMaxMs);
  const start = p.clock.now();
  for (;;) {
    signal?.throwIfAborted();
    try {
      const handle = await attempt(signal);
      if (handle) return handle;
    } catch (err) {
      if (!isUnavailable(err)) throw err;
    }
    const left = waitMs === undefined ? Infinity : waitMs - (p.clock.now() - start);
    if (left <= 0) throw new LockTimeoutError(name, waitMs ?? 0);
    await sleep(p.clock, Math.min(left, Math.ceil(p.retryMs * (0.5 + p.random.next()))), signal);
  }
}

async function usingHandle<T>(handle: LockHandle, fn: (handle: LockHandle) => Promise<T> | T): Promise<T> {
  try {
    return await runFenced(handle, () => fn(handle));
  } finally {
    await handle.release();
  }
}

/** A counting semaphore: at most `permits` holders at once, each with its own token. */
export class Semaphore implements Acquirable {
  readonly name: string;
  readonly permits: number;
  private readonly store: Store;
  private readonly slots: Lock[];
  private readonly prefix: string;
  private readonly pace: Pacing;
  private readonly random: Random;

  constructor(store: Store, name: string, options: SemaphoreOptions) {
    checkName('name', name);
    this.permits = checkPermits('permits', (options as Partial<SemaphoreOptions> | undefined)?.permits);
    this.store = store;
    this.name = name;
    this.prefix = `${name}/permit/`;
    checkName('name', `${this.prefix}${this.permits - 1}`); // room for the permits' names
    const { permits: _permits, ...lockOptions } = options;
    this.slots = Array.from({ length: this.permits }, (_, i) => new Lock(store, `${this.prefix}${i}`, lockOptions));
    this.pace = pacing(lockOptions);
    this.random = lockOptions.random ?? systemRandom;
  }

  /** The permits held now (live leases), sorted by name. */
  holders(): ReturnType<Store['list']> {
    return this.store.list(this.prefix);
  }

  async tryAcquire(options: { signal?: AbortSignal } = {}): Promise<LockHandle | null> {
    const { signal } = options;
    signal?.throwIfAborted();
    // One list to skip the permits held now; if the store cannot answer it, try them all.
    let held = new Set<string>();
    try {
      held = new Set((await this.store.list(this.prefix)).map((l) => l.name));
    } catch (err) {
      if (!isUnavailable(err)) throw err;
    }
    const free = this.slots.filter((s) => !held.has(s.name));
    // A random order, so that holders spread over the permits rather than all racing for the first.
    for (let i = free.length - 1; i > 0; i--) {
      const j = Math.floor(this.random.next() * (i + 1));
      [free[i], free[j]] = [free[j]!, free[i]!];
    }
    let outage: Error | null = null;
    for (const slot of free) {
      try {
        const handle = await slot.tryAcquire({ ...(signal ? { signal } : {}) });
        if (handle) return handle;
      } catch (err) {
        if (!isUnavailable(err)) throw err;
        outage = err;
      }
    }
    if (outage) throw outage;
    return null;
  }

  acquire(options: AcquireOptions = {}): Promise<LockHandle> {
    return attemptUntil(this.name, (signal) => this.tryAcquire(signal ? { signal } : {}), options, this.pace);
  }

  async using<T>(fn: (handle: LockHandle) => Promise<T> | T, options?: AcquireOptions): Promise<T> {
    return usingHandle(await this.acquire(options), fn);
  }
}

/** A read/write lock: many readers or one writer; a waiting writer shuts new readers out. */
export class ReadWriteLock {
  readonly name: string;
  /** The shared side: many holders at once, none while a writer holds or waits. */
  readonly read: Acquirable;
  /** The exclusive side: one holder, no reader meanwhile; its token is the gate's (`NAME/write`). */
  readonly write: Acquirable;

  constructor(store: Store, name: string, options: ReadWriteLockOptions = {}) {
    checkName('name', name);
    const { maxReaders = 64, ...lockOptions } = options;
    checkPermits('maxReaders', maxReaders);
    this.name = name;
    const gateName = `${name}/write`;
    const gate = new Lock(store, gateName, lockOptions);
    const readers = new Semaphore(store, `${name}/read`, { ...lockOptions, permits: maxReaders });
    const pace = pacing(lockOptions);

    const tryRead = async (signal?: AbortSignal): Promise<LockHandle | null> => {
      if (await store.read(gateName)) return null; // a writer holds or waits
      const handle = await readers.tryAcquire(signal ? { signal } : {});
      if (!handle) return null;
      // A writer may have taken the gate between the read above and this permit: check again.
      let writer: boolean;
      try {
        writer = (await store.read(gateName)) !== null;
      } catch (err) {
        await handle.release();
        throw err;
      }
      if (!writer) return handle;
      await handle.release();
      return null;
    };

    const drained = async (): Promise<boolean> => (await readers.holders()).length === 0;

    const tryWrite = async (signal?: AbortSignal): Promise<LockHandle | null> => {
      const handle = await gate.tryAcquire(signal ? { signal } : {});
      if (!handle) return null;
      try {
        if (await drained()) return handle;
      } catch (err) {
        await handle.release();
        throw err;
      }
      await handle.release();
      return null;
    };

    const acquireWrite = async (options: AcquireOptions): Promise<LockHandle> => {
      const { signal, waitMs } = options;
      if (waitMs !== undefined) checkMs('waitMs', waitMs, 0, limits.ttlMaxMs);
      const start = pace.clock.now();
      const left = (): number => (waitMs === undefined ? Infinity : waitMs - (pace.clock.now() - start));
      for (;;) {
        // The gate first (other writers queue there; new readers stay out from now on) ...
        const handle = await gate.acquire({ ...(signal ? { signal } : {}), ...(waitMs !== undefined ? { waitMs: Math.max(0, Math.floor(left())) } : {}) });
        // ... then the readers already in drain.
        try {
          for (;;) {
            signal?.throwIfAborted();
            if (handle.signal.aborted) break; // the gate was lost while waiting: take it again
            try {
              if (await drained()) return handle;
            } catch (err) {
              if (!isUnavailable(err)) throw err;
            }
            if (left() <= 0) throw new LockTimeoutError(name, waitMs ?? 0);
            await sleep(pace.clock, Math.min(left(), Math.ceil(pace.retryMs * (0.5 + pace.random.next()))), signal);
          }
        } catch (err) {
          await handle.release();
          throw err;
        }
        await handle.release();
      }
    };

    this.read = {
      name: `${name}/read`,
      acquire: (o = {}) => attemptUntil(name, tryRead, o, pace),
      tryAcquire: (o = {}) => tryRead(o.signal),
      using: async (fn, o) => usingHandle(await attemptUntil(name, tryRead, o ?? {}, pace), fn),
    };
    this.write = {
      name: gateName,
      acquire: (o = {}) => acquireWrite(o),
      tryAcquire: (o = {}) => tryWrite(o.signal),
      using: async (fn, o) => usingHandle(await acquireWrite(o ?? {}), fn),
    };
  }
}
