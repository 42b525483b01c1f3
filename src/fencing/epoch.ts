/**
 * A dedicated epoch store, separate from the lease (the "seed" option): `epoch:<group>` is bumped
 * atomically on each takeover, in a store of the user's choice (a row in their PostgreSQL, MySQL
 * or SQLite database, a Redis INCR, an etcd key's revision), and the epoch is the fencing term for
 * the writes into that store. Write authority then lives in the database that is written to: its
 * rows are fenced by a counter it holds itself, checked in the writing statement against its own
 * `tenure_epochs` table.
 *
 * Safety, with `withEpoch`: the bump happens after the lease is won and before any write, and the
 * lease is read back (by the store's clock) after the bump: only if this node still holds the
 * lease with the same term does its work start. Any later leader acquires the lease after that
 * read, so it bumps after this node did, and holds a higher epoch. A zombie that bumped earlier
 * holds a lower epoch; a node that bumped after losing the lease never writes (its read-back
 * fails), and its bump at most makes the new leader's epoch refused, which deposes that leader
 * (a fenced refusal stops the writer) until the next election bumps again: a pause, never two
 * writers.
 *
 * Nothing here imports a driver: the SQL client is the dialect's, Redis and etcd clients are
 * described by the two calls made on them (ioredis and the etcd3 package fit).
 */
import { InvalidArgumentError, StoreDataError, checkName, limits, makeToken, onFencedRejection } from '../core/index.js';
import type { FencingToken } from '../core/index.js';
import { runFenced } from './context.js';
import type { MysqlExecutor, SqlDialect } from './dialects.js';
import { createIfMissing } from './sql-commands.js';

/** The lease name of an epoch's tokens: `epoch:<group>` (never a lease the lease store issues). */
export function epochLease(group: string): string {
  checkName('group', group);
  const lease = `epoch:${group}`;
  if (lease.length > limits.nameMaxLength) {
    throw new InvalidArgumentError('group', `must be at most ${limits.nameMaxLength - 'epoch:'.length} characters for an epoch (epoch:<group> is a lease name), got ${group.length}`);
  }
  return lease;
}

export interface EpochStore {
  /** `sql`, `redis` or `etcd`. */
  readonly kind: 'sql' | 'redis' | 'etcd';
  /**
   * Bump `epoch:<group>` atomically and return the new epoch (>= 1, never repeated, never lower
   * than one returned before). Call it only after winning the lease (withEpoch does).
   */
  bump(group: string): Promise<number>;
  /** The latest epoch of `group` (0 when never bumped). */
  current(group: string): Promise<number>;
  /** The fencing token `{ lease: 'epoch:<group>', term: epoch }`. */
  token(group: string, epoch: number): FencingToken;
}

/** Options of an epoch row in the user's SQL database. */
export interface SqlEpochOptions<Db> {
  /** postgresDialect, mysqlDialect or sqliteDialect. */
  readonly dialect: SqlDialect<Db>;
  /** Your pool, client or database (autocommit: a bump must be committed before any write). */
  readonly db: Db;
  /** The epochs table (default `tenure_epochs`), created on first use; name it as `leaseTable` in the fenced statements. */
  readonly table?: string;
}

/** The Redis calls made (ioredis `Redis` or `Cluster` fit). */
export interface RedisEpochClient {
  incr(key: string): Promise<number>;
  get(key: string): Promise<string | null>;
}

export interface RedisEpochOptions {
  readonly redis: RedisEpochClient;
  /** Prepended to `epoch:<group>` (default none). */
  readonly prefix?: string;
}

/** The etcd calls made (the etcd3 package's `Etcd3` fits). */
export interface EtcdEpochClient {
  put(key: string): { value(value: string): { exec(): Promise<{ header: { revision: string } }> } };
  get(key: string): { exec(): Promise<{ kvs: readonly { mod_revision: string }[] }> };
}

export interface EtcdEpochOptions {
  readonly etcd: EtcdEpochClient;
  /** Prepended to `epoch:<group>` (default none). */
  readonly prefix?: string;
}

export type EpochStoreOptions<Db = unknown> = SqlEpochOptions<Db> | RedisEpochOptions | EtcdEpochOptions;

function epochOf(store: string, key: string, value: unknown): number {
  let n: number | null = null;
  if (typeof value === 'number') n = value;
  else if (typeof value === 'bigint') n = value <= BigInt(Number.MAX_SAFE_INTEGER) && value >= 0n ? Number(value) : null;
  else if (typeof value === 'string' && /^[0-9]{1,16}$/.test(value)) n = Number(value);
  if (n === null || !Number.isSafeInteger(n) || n < 0) {
    const shown = typeof value === 'string' ? JSON.stringify(value.slice(0, 40)) : String(value);
    throw new StoreDataError(`${store} epoch store: ${key} holds ${shown}, which is not an epoch in [0, ${Number.MAX_SAFE_INTEGER}] (written by hand or by another program?)`);
  }
  return n;
}

function prefixOf(value: unknown): string {
  if (value === undefined) return '';
  if (typeof value !== 'string' || value.length > 100 || [...value].some((c) => c.charCodeAt(0) < 0x20)) {
    throw new InvalidArgumentError('prefix', 'expected a string of at most 100 characters without control characters');
  }
  return value;
}

function tokenOf(group: string, epoch: number): FencingToken {
  return makeToken(epochLease(group), epoch);
}

/**
 * An epoch store on the user's own SQL database, Redis or etcd:
 * `createEpochStore({ dialect: postgresDialect, db: pool })`, `createEpochStore({ redis })`,
 * `createEpochStore({ etcd })`.
 */
export function createEpochStore<Db>(options: EpochStoreOptions<Db>): EpochStore {
  if (typeof options !== 'object' || options === null) throw new InvalidArgumentError('options', 'expected { dialect, db }, { redis } or { etcd }');
  if ('dialect' in options) return sqlEpochs(options);
  if ('redis' in options) return redisEpochs(options);
  if ('etcd' in options) return etcdEpochs(options);
  throw new InvalidArgumentError('options', 'expected { dialect, db } (SQL), { redis } (an ioredis client) or { etcd } (an etcd3 client)');
}

function sqlEpochs<Db>(options: SqlEpochOptions<Db>): EpochStore {
  const d = options.dialect;
  if (typeof d !== 'object' || d === null || typeof d.update !== 'function') throw new InvalidArgumentError('dialect', 'expected postgresDialect, mysqlDialect or sqliteDialect');
  const db = options.db;
  if (typeof db !== 'object' || db === null) throw new InvalidArgumentError('db', `expected your ${d.name} pool, client or database`);
  const tableName = options.table ?? 'tenure_epochs';
  const parts = typeof tableName === 'string' ? tableName.split('.') : [];
  if (parts.length < 1 || parts.length > 2 || !parts.every((p) => /^[A-Za-z_][A-Za-z0-9_$]*$/.test(p) && p.length <= d.identifierMax)) {
    throw new InvalidArgumentError('table', `expected TABLE or ${d.qualifier}.TABLE of SQL identifiers, got ${JSON.stringify(tableName)}`);
  }
  const table = parts.map((p) => d.quote(p)).join('.');
  const ddl = {
    postgres: `CREATE TABLE IF NOT EXISTS ${table} (name text COLLATE "C" PRIMARY KEY, term bigint NOT NULL CHECK (term >= 1))`,
    mysql: `CREATE TABLE IF NOT EXISTS ${table} (name VARBINARY(800) NOT NULL PRIMARY KEY, term BIGINT NOT NULL) ENGINE=InnoDB`,
    sqlite: `CREATE TABLE IF NOT EXISTS ${table} (name TEXT NOT NULL PRIMARY KEY COLLATE BINARY, term INTEGER NOT NULL)`,
  }[d.name];
  let ready: Promise<void> | null = null;
  const ensure = (): Promise<void> => {
    ready ??= createIfMissing(d, db, ddl).catch((err: unknown) => {
      ready = null;
      throw err;
    });
    return ready;
  };
  const max = Number.MAX_SAFE_INTEGER;
  return {
    kind: 'sql',
    token: tokenOf,
    bump: async (group) => {
      const name = epochLease(group);
      await ensure();
      // One statement: the row's term + 1, or 1 for a new row; never past 2^53 - 1.
      if (d.name === 'mysql') {
        const [res] = await (db as unknown as MysqlExecutor).execute(
          `INSERT INTO ${table} (name, term) VALUES (?, LAST_INSERT_ID(1)) ON DUPLICATE KEY UPDATE term = LAST_INSERT_ID(IF(term < ${max}, term + 1, term))`,
          [name],
        );
        const epoch = epochOf('mysql', name, (res as { insertId?: unknown }).insertId);
        if (epoch >= max) throw new StoreDataError(`mysql epoch store: ${name} is at ${epoch}, the highest epoch tenure can issue`);
        return epoch;
      }
      const p = d.placeholder(1);
      const rows = await d.select(
        db,
        `INSERT INTO ${table} AS e (name, term) VALUES (${d.lease(p)}, 1) ON CONFLICT (name) DO UPDATE SET term = e.term + 1 WHERE e.term < ${max} RETURNING term`,
        [name],
      );
      if (rows.length === 0) throw new StoreDataError(`${d.name} epoch store: ${name} is at the highest epoch tenure can issue (${max}); nothing was written`);
      return epochOf(d.name, name, rows[0]!.term);
    },
    current: async (group) => {
      const name = epochLease(group);
      await ensure();
      const rows = await d.select(db, `SELECT term FROM ${table} WHERE name = ${d.lease(d.placeholder(1))}`, [name]);
      return rows.length === 0 ? 0 : epochOf(d.name, name, rows[0]!.term);
    },
  };
}

function redisEpochs(options: RedisEpochOptions): EpochStore {
  const redis = options.redis;
  if (typeof redis !== 'object' || redis === null || typeof redis.incr !== 'function' || typeof redis.get !== 'function') {
    throw new InvalidArgumentError('redis', 'expected a Redis client with incr(key) and get(key) (an ioredis Redis or Cluster)');
  }
  const prefix = prefixOf(options.prefix);
  return {
    kind: 'redis',
    token: tokenOf,
    bump: async (group) => {
      const key = prefix + epochLease(group);
      // INCR is atomic; it refuses past 2^63 - 1, and a value past 2^53 - 1 is refused here.
      const epoch = epochOf('redis', key, await redis.incr(key));
      if (epoch < 1 || epoch >= Number.MAX_SAFE_INTEGER) throw new StoreDataError(`redis epoch store: ${key} is at ${epoch}, outside the epochs tenure can issue`);
      return epoch;
    },
    current: async (group) => {
      const key = prefix + epochLease(group);
      const value = await redis.get(key);
      return value === null ? 0 : epochOf('redis', key, value);
    },
  };
}

function etcdEpochs(options: EtcdEpochOptions): EpochStore {
  const etcd = options.etcd;
  if (typeof etcd !== 'object' || etcd === null || typeof etcd.put !== 'function' || typeof etcd.get !== 'function') {
    throw new InvalidArgumentError('etcd', 'expected an etcd client with put(key).value(v).exec() and get(key).exec() (the etcd3 package)');
  }
  const prefix = prefixOf(options.prefix);
  return {
    kind: 'etcd',
    token: tokenOf,
    // The epoch is the key's mod revision: each put is one revision of the cluster's history,
    // which only grows (also across deletes), so two bumps never return the same epoch.
    bump: async (group) => {
      const key = prefix + epochLease(group);
      const res = await etcd.put(key).value(group).exec();
      const epoch = epochOf('etcd', key, res.header.revision);
      if (epoch < 1) throw new StoreDataError(`etcd epoch store: a put of ${key} answered revision ${epoch}`);
      return epoch;
    },
    current: async (group) => {
      const key = prefix + epochLease(group);
      const res = await etcd.get(key).exec();
      const kv = res.kvs[0];
      return kv ? epochOf('etcd', key, kv.mod_revision) : 0;
    },
  };
}

// ---- withEpoch: the elector's leadership carries the epoch -------------------------------------

/** What withEpoch needs of a LeaderElector. */
export interface EpochElector {
  readonly group: string;
  runWhileLeader(fn: (context: { readonly signal: AbortSignal; readonly term: number; readonly token: FencingToken }) => Promise<void> | void): Promise<void>;
  /** The live lease from the store (LeaderElector.leader()). */
  leader(): Promise<{ readonly term: number } | null>;
  resign(): Promise<void>;
}

/** What epoch-fenced leader work receives. */
export interface EpochContext {
  /** Aborts when the leadership ends, or when a write with this epoch is refused as stale. */
  readonly signal: AbortSignal;
  /** The epoch: the fencing term for writes into the epoch store's database. */
  readonly epoch: number;
  /** `{ lease: 'epoch:<group>', term: epoch }`, also the token of the fencing context (currentToken()). */
  readonly token: FencingToken;
  /** The lease's own term and token (for tenure's fenced streams). */
  readonly term: number;
  readonly leaseToken: FencingToken;
}

export interface EpochLeadership {
  /**
   * Like elector.runWhileLeader, but each leadership first bumps the epoch, checks the lease is
   * still held after the bump, and only then runs `fn` with the epoch as its token.
   */
  runWhileLeader(fn: (context: EpochContext) => Promise<void> | void): Promise<void>;
}

/**
 * Carry an epoch as the fencing term of an elector's leaderships: on each election the epoch of
 * the group is bumped in `epochs` (after the lease was won, before `fn` runs), the lease is read
 * back to check it is still this term's, and `fn` runs inside the fencing context of the epoch
 * token, so fencedUpdate / fencedInsert / fencedCompareAndSet with `currentToken()` (or
 * `context.token`) write with the epoch. A write refused as stale with this epoch aborts the
 * work's signal and resigns the lease at once.
 */
export function withEpoch(elector: EpochElector, epochs: EpochStore): EpochLeadership {
  if (typeof elector !== 'object' || elector === null || typeof elector.runWhileLeader !== 'function' || typeof elector.leader !== 'function') {
    throw new InvalidArgumentError('elector', 'expected a LeaderElector');
  }
  if (typeof epochs !== 'object' || epochs === null || typeof epochs.bump !== 'function') throw new InvalidArgumentError('epochs', 'expected an epoch store from createEpochStore');
  const group = elector.group;
  epochLease(group);
  return {
    runWhileLeader: (fn) => {
      if (typeof fn !== 'function') throw new InvalidArgumentError('fn', 'expected the leader work, a function');
      return elector.runWhileLeader(async (leadership) => {
        if (leadership.signal.aborted) return;
        const epoch = await epochs.bump(group);
        // The lease read back after the bump, by the store's clock: still this term's, so any
        // later leader bumps after this bump. Otherwise this node lost the lease meanwhile and
        // must not write (the elector deposes on its own).
        const lease = await elector.leader();
        if (leadership.signal.aborted || lease?.term !== leadership.term) return;
        const token = epochs.token(group, epoch);
        const controller = new AbortController();
        const stop = (): void => controller.abort(leadership.signal.reason);
        leadership.signal.addEventListener('abort', stop, { once: true });
        const unhear = onFencedRejection(({ error }) => {
          if (error.lease !== token.lease || error.term !== epoch || controller.signal.aborted) return;
          controller.abort(error);
          void elector.resign().catch(() => {});
        });
        try {
          await runFenced({ token, signal: controller.signal }, () =>
            fn({ signal: controller.signal, epoch, token, term: leadership.term, leaseToken: leadership.token }),
          );
        } finally {
          unhear();
          leadership.signal.removeEventListener('abort', stop);
        }
      });
    },
  };
}
