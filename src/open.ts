/**
 * openStore: a Store from a URL (`memory:`, `sqlite:PATH`, ...) or options, with `lock()` added.
 * Drivers are loaded only when their store is used.
 */
import { readFile } from 'node:fs/promises';
import { InvalidArgumentError, StaleTermError, redactUrl } from './core/index.js';
import { TypedEmitter } from './core/index.js';
import type { AcquireResult, FencingToken, Lease, LeaseMeta, ReadStreamOptions, RenewManyItem, RenewResult, Store, StreamEntry, Unsubscribe, WatchListener } from './core/index.js';
import { Lock } from './locks/index.js';
import type { LockOptions } from './locks/index.js';

export const DEFAULT_STORE_URL = 'sqlite:./.tenure/tenure.db';

export type StoreOptions =
  | { kind: 'memory' }
  | { kind: 'sqlite'; path: string; timeoutMs?: number; busyTimeoutMs?: number; pollMs?: number; readOnly?: boolean }
  | { kind: 'postgres'; url: string; tablePrefix?: string; handOver?: boolean }
  | { kind: 'mysql'; url: string; tablePrefix?: string }
  | { kind: 'redis'; url: string; keyPrefix?: string; commandTimeoutMs?: number }
  | {
      kind: 'etcd';
      hosts: string[];
      namespace?: string;
      requestTimeoutMs?: number;
      auth?: { username: string; password: string };
      /** TLS to every member; files (PEM) are read when the store is opened. */
      tls?: { caFile?: string; certFile?: string; keyFile?: string };
    };

/** The schemes openStore serves, for error messages. */
const AVAILABLE = 'sqlite:PATH, memory:, postgres://, mysql://, redis://, etcd://, etcds:// (and redlock:// for tenure lock)';

/** Parse a store URL into options; throws InvalidArgumentError (field `store`) on a bad URL. */
export function parseStoreUrl(url: string): StoreOptions {
  if (typeof url !== 'string' || url.trim() === '') throw new InvalidArgumentError('store', 'expected a store URL such as sqlite:./.tenure/tenure.db or memory:');
  const m = /^([a-z][a-z0-9+.-]*):(.*)$/i.exec(url.trim());
  if (!m) throw new InvalidArgumentError('store', `expected SCHEME:..., such as sqlite:./data/tenure.db, got '${redactUrl(url)}'`);
  const scheme = m[1]!.toLowerCase();
  const rest = m[2]!;
  if (scheme === 'memory') return { kind: 'memory' };
  if (scheme === 'sqlite') {
    // sqlite:PATH, sqlite:///abs/path and sqlite://./rel all name a file.
    const path = rest.startsWith('//') ? rest.slice(2) : rest;
    if (path === '') throw new InvalidArgumentError('store', `sqlite needs a file path, such as sqlite:./.tenure/tenure.db, got '${redactUrl(url)}'`);
    return { kind: 'sqlite', path };
  }
  if (scheme === 'redis' || scheme === 'rediss') return parseRedisUrl(url.trim());
  if (scheme === 'redlock') {
    throw new InvalidArgumentError('store', 'redlock://host:port,… is a lock over several Redis servers, not a store: open it with openRedlock(url)');
  }
  if (scheme === 'postgres' || scheme === 'postgresql' || scheme === 'mysql') return parseSqlUrl(scheme === 'mysql' ? 'mysql' : 'postgres', url.trim());
  if (scheme === 'etcd' || scheme === 'etcds') return parseEtcdUrl(url.trim());
  throw new InvalidArgumentError('store', `unknown store scheme '${scheme}:' (available: ${AVAILABLE})`);
}

/**
 * `redis://[user:pass@]host:port[/db][?prefix=P]` (or `rediss://` for TLS): `prefix` is the store's
 * key prefix (default `{tenure}:`); other query parameters are passed to ioredis.
 */
function parseRedisUrl(url: string): StoreOptions {
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    throw new InvalidArgumentError('store', `expected redis://host:port, got '${redactUrl(url)}'`);
  }
  if (parsed.hostname === '') throw new InvalidArgumentError('store', `redis needs a host, such as redis://127.0.0.1:6379, got '${redactUrl(url)}'`);
  // The database is a number (whether the server has it is checked on connect: RedisStore).
  const db = parsed.pathname.replace(/^\//, '');
  if (db !== '' && !/^\d{1,9}$/.test(db)) {
    throw new InvalidArgumentError('store', `redis database must be a number, such as redis://127.0.0.1:6379/0, got '/${db}'`);
  }
  const keyPrefix = parsed.searchParams.get('prefix');
  parsed.searchParams.delete('prefix');
  return { kind: 'redis', url: parsed.toString(), ...(keyPrefix !== null ? { keyPrefix } : {}) };
}

/**
 * `postgres://user:pass@host:port/db[?prefix=P&handover=off&sslmode=…]` or `mysql://…/db[?prefix=P]`:
 * `prefix` is the table prefix (default `tenure_`); PostgreSQL's `handover` (`on`, the default, or
 * `off`) is the store's `handOver` option; everything else goes to the driver as given.
 */
function parseSqlUrl(kind: 'postgres' | 'mysql', url: string): StoreOptions {
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    throw new InvalidArgumentError('store', `expected ${kind}://user@host:port/database, got '${redactUrl(url)}'`);
  }
  if (parsed.hostname === '') throw new InvalidArgumentError('store', `${kind} needs a host, such as ${kind}://127.0.0.1/tenure, got '${redactUrl(url)}'`);
  const tablePrefix = parsed.searchParams.get('prefix');
  parsed.searchParams.delete('prefix');
  const handover = parsed.searchParams.get('handover');
  parsed.searchParams.delete('handover');
  if (handover !== null && (kind !== 'postgres' || (handover !== 'on' && handover !== 'off'))) {
    throw new InvalidArgumentError('store', kind === 'postgres' ? `handover must be on or off, got '${handover}'` : 'handover applies to postgres:// stores only (MySQL has no push)');
  }
  return {
    kind,
    url: parsed.toString(),
    ...(tablePrefix !== null ? { tablePrefix } : {}),
    ...(handover !== null ? { handOver: handover === 'on' } : {}),
  };
}

/**
 * `etcd://[user:password@]host:port[,host:port…][?prefix=P&tls=1&ca=PATH&cert=PATH&key=PATH]`
 * (or `etcds://…` for TLS): the members to talk to (the client moves between them), an optional
 * key namespace (default none, so `etcdctl elect G` joins tenure group G), etcd auth, and TLS with
 * an optional CA and client certificate (PEM files).
 */
function parseEtcdUrl(url: string): StoreOptions {
  const m = /^(etcds?):\/\/(?:([^@/?#]*)@)?([^@/?#]*)\/?(?:\?([^#]*))?$/i.exec(url);
  const hosts = (m?.[3] ?? '').split(',').filter((h) => h !== '');
  if (!m || hosts.length === 0 || hosts.some((h) => !/^[^:\s]+:\d{1,5}$/.test(h))) {
    throw new InvalidArgumentError('store', `expected etcd://[user:password@]host:port[,host:port…], such as etcd://127.0.0.1:2379, got '${redactUrl(url)}'`);
  }
  let auth: { username: string; password: string } | undefined;
  if (m[2] !== undefined) {
    const colon = m[2].indexOf(':');
    const username = safeDecode(colon < 0 ? m[2] : m[2].slice(0, colon));
    const password = colon < 0 ? null : safeDecode(m[2].slice(colon + 1));
    if (username === null || username === '' || password === null) {
      throw new InvalidArgumentError('store', `etcd auth needs user:password@ (percent-encoded), got '${redactUrl(url)}'`);
    }
    auth = { username, password };
  }
  const params = new URLSearchParams(m[4] ?? '');
  const namespace = params.get('prefix');
  const flag = params.get('tls');
  if (flag !== null && !/^(1|0|true|false|on|off)$/i.test(flag)) throw new InvalidArgumentError('store', `tls must be 1 or 0, got '${flag}'`);
  const files = { caFile: params.get('ca'), certFile: params.get('cert'), keyFile: params.get('key') };
  const anyFile = Object.values(files).some((f) => f !== null);
  if (Object.values(files).some((f) => f === '')) throw new InvalidArgumentError('store', 'ca, cert and key need a file path');
  if ((files.certFile === null) !== (files.keyFile === null)) throw new InvalidArgumentError('store', 'a client certificate needs both cert and key');
  const tlsOn = flag === null ? m[1]!.toLowerCase() === 'etcds' || anyFile : /^(1|true|on)$/i.test(flag);
  if (!tlsOn && (anyFile || m[1]!.toLowerCase() === 'etcds')) throw new InvalidArgumentError('store', 'tls=0 contradicts etcds:// or ca, cert and key');
  const tls = Object.fromEntries(Object.entries(files).filter(([, v]) => v !== null)) as { caFile?: string; certFile?: string; keyFile?: string };
  return { kind: 'etcd', hosts, ...(namespace !== null ? { namespace } : {}), ...(auth ? { auth } : {}), ...(tlsOn ? { tls } : {}) };
}

function safeDecode(s: string): string | null {
  try {
    return decodeURIComponent(s);
  } catch {
    return null;
  }
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
    case 'redis': {
      const { RedisStore } = await import('./stores/redis/index.js');
      backend = new RedisStore(options);
      break;
    }
    case 'postgres': {
      const { PostgresStore } = await import('./stores/postgres/index.js');
      backend = new PostgresStore(options);
      break;
    }
    case 'mysql': {
      const { MysqlStore } = await import('./stores/mysql/index.js');
      backend = new MysqlStore(options);
      break;
    }
    case 'etcd': {
      const { EtcdStore } = await import('./stores/etcd/index.js');
      const { tls, ...rest } = options;
      backend = new EtcdStore({
        ...rest,
        ...(tls
          ? {
              tls: {
                ...(tls.caFile !== undefined ? { ca: await readFile(tls.caFile) } : {}),
                ...(tls.certFile !== undefined ? { cert: await readFile(tls.certFile) } : {}),
                ...(tls.keyFile !== undefined ? { key: await readFile(tls.keyFile) } : {}),
              },
            }
          : {}),
      });
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
  /** Batched renewal in one round trip, where the backend has it (not etcd); LeaseSet uses it. */
  readonly renewMany?: (owner: string, leases: readonly RenewManyItem[], ttlMs: number) => Promise<RenewResult[]>;

  constructor(backend: Store) {
    super();
    this.backend = backend;
    if (backend.watch) this.watch = (name, listener) => backend.watch!(name, listener);
    if (backend.renewMany) this.renewMany = (owner, leases, ttlMs) => backend.renewMany!(owner, leases, ttlMs);
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
