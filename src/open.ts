/**
 * openStore: a Store from a URL (`memory:`, `sqlite:PATH`, ...) or options, with `lock()` added.
 * Drivers are loaded only when their store is used.
 */
import { InvalidArgumentError, StaleTermError, VersionConflictError, redactUrl, reportFencedWrite } from './core/index.js';
import { TypedEmitter } from './core/index.js';
import type { AcquireResult, AppendFencedOptions, FencingToken, Lease, LeaseMeta, ReadStreamOptions, RenewManyItem, RenewResult, Store, StreamEntry, StreamHead, Unsubscribe, WatchListener } from './core/index.js';
import { Lock, ReadWriteLock, Semaphore } from './locks/index.js';
import type { LockOptions, ReadWriteLockOptions, SemaphoreOptions } from './locks/index.js';
import { availableSchemes, backendForKind, backendForScheme, notStores } from './stores/registry.js';
import type { StoreOptions } from './stores/registry.js';

export type { StoreOptions } from './stores/registry.js';

export const DEFAULT_STORE_URL = 'sqlite:./.tenure/tenure.db';

/**
 * Parse a store URL into options; throws InvalidArgumentError (field `store`) on a bad URL. The
 * scheme picks the store (`stores/registry.ts`); the store's own parser reads the rest.
 */
export function parseStoreUrl(url: string): StoreOptions {
  if (typeof url !== 'string' || url.trim() === '') throw new InvalidArgumentError('store', 'expected a store URL such as sqlite:./.tenure/tenure.db or memory:');
  const trimmed = url.trim();
  const m = /^([a-z][a-z0-9+.-]*):(.*)$/i.exec(trimmed);
  if (!m) throw new InvalidArgumentError('store', `expected SCHEME:..., such as sqlite:./data/tenure.db, got '${redactUrl(url)}'`);
  const scheme = m[1]!.toLowerCase();
  const backend = backendForScheme(scheme);
  if (backend) return backend.parse({ given: url, url: trimmed, scheme, rest: m[2]! });
  const other = Object.hasOwn(notStores, scheme) ? notStores[scheme] : undefined;
  if (other) throw new InvalidArgumentError('store', other.why);
  throw new InvalidArgumentError('store', `unknown store scheme '${scheme}:' (available: ${availableSchemes()})`);
}

/** Open a store from a URL or options. The default is embedded SQLite in ./.tenure/tenure.db. */
export async function openStore(target: string | StoreOptions = DEFAULT_STORE_URL): Promise<TenureStore> {
  const options = typeof target === 'string' ? parseStoreUrl(target) : target;
  const backend = backendForKind((options as { kind: string }).kind);
  if (!backend) throw new InvalidArgumentError('store', `unknown store kind '${(options as { kind: string }).kind}'`);
  return new TenureStore(await backend.open(options));
}

export interface TenureStoreEvents {
  /** A fenced write was refused because a newer term had written (safety rule 7). */
  'fenced-rejected': { error: StaleTermError; stream: string };
}

/** A Store with the library's conveniences on top; every Store call goes to the backend as is. */
export class TenureStore extends TypedEmitter<TenureStoreEvents> implements Store, AsyncDisposable {
  readonly backend: Store;
  readonly watch?: (name: string, listener: WatchListener) => Unsubscribe;
  /** Batched renewal in one round trip, where the backend has it (not etcd); LeaseSet uses it. */
  readonly renewMany?: (owner: string, leases: readonly RenewManyItem[], ttlMs: number) => Promise<RenewResult[]>;
  readonly withdraw?: (name: string, owner: string) => Promise<void>;
  /** The stream's last entry in one read, where the backend has it (every built-in store). */
  readonly readLast?: (stream: string) => Promise<StreamEntry | null>;
  /** Push of a stream's new head after appends, where the backend has it (not MySQL); Follower uses it. */
  readonly watchStream?: (stream: string, listener: (head: number) => void) => Unsubscribe;
  /** A stream's head and the store's time, where the backend has a readable clock (not etcd). */
  readonly streamHead?: (stream: string) => Promise<StreamHead>;
  readonly purge?: (prefix: string) => Promise<number>;

  constructor(backend: Store) {
    super();
    this.backend = backend;
    if (backend.watch) this.watch = (name, listener) => backend.watch!(name, listener);
    if (backend.renewMany) this.renewMany = (owner, leases, ttlMs) => backend.renewMany!(owner, leases, ttlMs);
    if (backend.withdraw) this.withdraw = (name, owner) => backend.withdraw!(name, owner);
    if (backend.readLast) this.readLast = (stream) => backend.readLast!(stream);
    if (backend.watchStream) this.watchStream = (stream, listener) => backend.watchStream!(stream, listener);
    if (backend.streamHead) this.streamHead = (stream) => backend.streamHead!(stream);
    if (backend.purge) this.purge = (prefix) => backend.purge!(prefix);
  }

  get kind(): string {
    return this.backend.kind;
  }

  /** A lock on `name`: `await store.lock('nightly').acquire({ waitMs: 5000 })`. */
  lock(name: string, options?: LockOptions): Lock {
    return new Lock(this, name, options);
  }

  /** A counting semaphore on `name`: `await store.semaphore('exports', { permits: 3 }).acquire()`. */
  semaphore(name: string, options: SemaphoreOptions): Semaphore {
    return new Semaphore(this, name, options);
  }

  /** A read/write lock on `name`: `await store.readWriteLock('catalog').read.acquire()`. */
  readWriteLock(name: string, options?: ReadWriteLockOptions): ReadWriteLock {
    return new ReadWriteLock(this, name, options);
  }

  acquire(name: string, owner: string, ttlMs: number, meta?: LeaseMeta): Promise<AcquireResult> {
    return this.backend.acquire(name, owner, ttlMs, meta);
  }
  renew(name: string, owner: string, term: number, ttlMs: number): Promise<RenewResult> {
    return this.backend.renew(name, owner, term, ttlMs);
  }
  release(name: string, owner: string, term: number): Promise<boolean> {
    return this.backend.release(name, owner, term);
  }
  read(name: string): Promise<Lease | null> {
    return this.backend.read(name);
  }
  list(prefix?: string): Promise<Lease[]> {
    return this.backend.list(prefix);
  }
  async appendFenced(token: FencingToken, stream: string, payload: string, options?: AppendFencedOptions): Promise<number> {
    const start = performance.now();
    const lease = typeof token?.lease === 'string' ? token.lease : '';
    try {
      const seq = await (options === undefined ? this.backend.appendFenced(token, stream, payload) : this.backend.appendFenced(token, stream, payload, options));
      reportFencedWrite({ path: 'stream', lease, ms: performance.now() - start, outcome: 'ok' });
      return seq;
    } catch (err) {
      const stale = err instanceof StaleTermError;
      const outcome = stale ? 'stale' : err instanceof VersionConflictError ? 'conflict' : 'error';
      reportFencedWrite({ path: 'stream', lease, ms: performance.now() - start, outcome });
      if (stale) this.emit('fenced-rejected', { error: err, stream });
      throw err;
    }
  }
  readStream(stream: string, options?: ReadStreamOptions): Promise<StreamEntry[]> {
    return this.backend.readStream(stream, options);
  }
  /** Create or upgrade the backend's schema now, where it has one; a no-op otherwise. */
  async migrate(): Promise<void> {
    await this.backend.migrate?.();
  }
  close(): Promise<void> {
    return this.backend.close();
  }
  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }
}
