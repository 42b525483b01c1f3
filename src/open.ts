/**
 * openStore: a Store from a URL (`memory:`, `sqlite:PATH`, ...) or options, with `lock()` added.
 * Drivers are loaded only when their store is used.
 */
import { InvalidArgumentError, StaleTermError } from './core/index.js';
import { TypedEmitter } from './election/index.js';
import type { AcquireResult, FencingToken, Lease, LeaseMeta, ReadStreamOptions, RenewResult, Store, StreamEntry, Unsubscribe, WatchListener } from './core/index.js';
import { Lock } from './locks/index.js';
import type { LockOptions } from './locks/index.js';

export const DEFAULT_STORE_URL = 'sqlite:./.tenure/tenure.db';

export type StoreOptions =
  | { kind: 'memory' }
  | { kind: 'sqlite'; path: string; busyTimeoutMs?: number; pollMs?: number };

/** Schemes that later versions serve; named so the error can say so instead of "unknown". */
const PLANNED = ['postgres', 'postgresql', 'mysql', 'redis', 'redlock', 'etcd'];

/** Parse a store URL into options; throws InvalidArgumentError (field `store`) on a bad URL. */
export function parseStoreUrl(url: string): StoreOptions {
  if (typeof url !== 'string' || url.trim() === '') throw new InvalidArgumentError('store', 'expected a store URL such as sqlite:./.tenure/tenure.db or memory:');
  const m = /^([a-z][a-z0-9+.-]*):(.*)$/i.exec(url.trim());
  if (!m) throw new InvalidArgumentError('store', `expected SCHEME:..., such as sqlite:./data/tenure.db, got '${url}'`);
  const scheme = m[1]!.toLowerCase();
  const rest = m[2]!;
  if (scheme === 'memory') return { kind: 'memory' };
  if (scheme === 'sqlite') {
    // sqlite:PATH, sqlite:///abs/path and sqlite://./rel all name a file.
    const path = rest.startsWith('//') ? rest.slice(2) : rest;
    if (path === '') throw new InvalidArgumentError('store', `sqlite needs a file path, such as sqlite:./.tenure/tenure.db, got '${url}'`);
    return { kind: 'sqlite', path };
  }
  if (PLANNED.includes(scheme)) throw new InvalidArgumentError('store', `the ${scheme} store is not available in this version of tenure (available: sqlite:, memory:)`);
  throw new InvalidArgumentError('store', `unknown store scheme '${scheme}:' (available: sqlite:PATH, memory:)`);
}

/** Open a store from a URL or options. The default is embedded SQLite in ./.tenure/tenure.db. */
export async function openStore(target: string | StoreOptions = DEFAULT_STORE_URL): Promise<TenureStore> {
  const options = typeof target === 'string' ? parseStoreUrl(target) : target;
  let backend: Store;
  switch (options.kind) {
    case 'memory': {
      const { MemoryStore } = await import('./stores/memory/index.js');
      backend = new MemoryStore();
      break;
    }
    case 'sqlite': {
      const { SqliteStore } = await import('./stores/sqlite/index.js');
      backend = new SqliteStore(options);
      break;
    }
    default:
      throw new InvalidArgumentError('store', `unknown store kind '${(options as { kind: string }).kind}'`);
  }
  return new TenureStore(backend);
}

export interface TenureStoreEvents {
  /** A fenced write was refused because a newer term had written (safety rule 7). */
  'fenced-rejected': { error: StaleTermError; stream: string };
}

/** A Store with the library's conveniences on top; every Store call goes to the backend as is. */
export class TenureStore extends TypedEmitter<TenureStoreEvents> implements Store, AsyncDisposable {
  readonly backend: Store;
  readonly watch?: (name: string, listener: WatchListener) => Unsubscribe;

  constructor(backend: Store) {
    super();
    this.backend = backend;
    if (backend.watch) this.watch = (name, listener) => backend.watch!(name, listener);
  }

  get kind(): string {
    return this.backend.kind;
  }

  /** A lock on `name`: `await store.lock('nightly').acquire({ waitMs: 5000 })`. */
  lock(name: string, options?: LockOptions): Lock {
    return new Lock(this, name, options);
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
  async appendFenced(token: FencingToken, stream: string, payload: string): Promise<number> {
    try {
      return await this.backend.appendFenced(token, stream, payload);
    } catch (err) {
      if (err instanceof StaleTermError) this.emit('fenced-rejected', { error: err, stream });
      throw err;
    }
  }
  readStream(stream: string, options?: ReadStreamOptions): Promise<StreamEntry[]> {
    return this.backend.readStream(stream, options);
  }
  close(): Promise<void> {
    return this.backend.close();
  }
  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }
}
