/**
 * The few calls tenure needs from `mysql2/promise`, typed structurally so that a user's own
 * mysql2 pool fits and tenure's published types do not depend on mysql2's. The driver is loaded
 * only when a store is opened from a URL; a missing package is a DriverMissingError.
 */
import { loadDriver } from '../../core/driver.js';

/** What `execute`/`query` resolve to: rows (SELECT) or a result header (INSERT/UPDATE), then fields. */
export type MysqlResult = [unknown, unknown];

/** A bind parameter value. */
export type MysqlValue = string | number | bigint | boolean | Date | null | Buffer;

/** Anything that runs a parameterized statement: a mysql2/promise Pool, Connection or PoolConnection. */
export interface MysqlExecutor {
  execute(sql: string, values?: MysqlValue[]): Promise<MysqlResult>;
}

/** A connection checked out of a mysql2/promise pool. */
export interface MysqlConnection extends MysqlExecutor {
  query(sql: string, values?: MysqlValue[]): Promise<MysqlResult>;
  release(): void;
  destroy(): void;
  /** mysql2 connections are event emitters: 'end' when the server closed the connection, 'error' on a fatal error. */
  on?(event: 'end' | 'error', listener: () => void): unknown;
  /** Prepare `sql` on this connection now (mysql2 keeps it for `execute`); only on connections tenure checks out of mysql2's own pool. */
  prepareStatement?(sql: string): Promise<void>;
}

/** A mysql2/promise Pool, or anything shaped like it. */
export interface MysqlPool {
  getConnection(): Promise<MysqlConnection>;
  end(): Promise<void>;
}

/** mysql2's callback-style pool connection, as a promise PoolConnection exposes it (`.connection`). */
interface CoreConnection {
  execute(sql: string, values: MysqlValue[] | undefined, cb: (err: Error | null, result?: unknown, fields?: unknown) => void): void;
  query(sql: string, values: MysqlValue[] | undefined, cb: (err: Error | null, result?: unknown, fields?: unknown) => void): void;
  release(): void;
  destroy(): void;
  on?(event: 'end' | 'error', listener: () => void): unknown;
  prepare?(sql: string, cb: (err: Error | null) => void): void;
}

/** mysql2's callback-style pool, as a promise Pool exposes it (`.pool`, public in mysql2's types). */
interface CorePool {
  getConnection(cb: (err: Error | null, conn?: CoreConnection) => void): void;
}

function isCorePool(v: unknown): v is CorePool {
  return typeof v === 'object' && v !== null && typeof (v as { getConnection?: unknown }).getConnection === 'function';
}

/**
 * How to check out a connection of `pool`. For a mysql2 promise pool, straight from the callback
 * pool underneath it (`pool.pool`), with a thin promise around each call: mysql2's promise layer
 * captures a stack trace for every call, which costs about a tenth of a one-row INSERT's time on
 * the client (measured: 30 µs of ~320 µs per call on this machine). Anything else shaped like a
 * pool is used through its own getConnection().
 */
export function connector(pool: MysqlPool): () => Promise<MysqlConnection> {
  const core = (pool as { pool?: unknown }).pool;
  if (!isCorePool(core)) return () => pool.getConnection();
  return () =>
    new Promise<MysqlConnection>((resolve, reject) => {
      core.getConnection((err, conn) => (err || !conn ? reject(err ?? new Error('mysql2 gave no connection')) : resolve(lean(conn))));
    });
}

function lean(c: CoreConnection): MysqlConnection {
  const call =
    (method: 'execute' | 'query') =>
    (sql: string, values?: MysqlValue[]): Promise<MysqlResult> =>
      new Promise<MysqlResult>((resolve, reject) => {
        c[method](sql, values, (err, result, fields) => (err ? reject(err) : resolve([result, fields])));
      });
  return {
    execute: call('execute'),
    query: call('query'),
    release: () => c.release(),
    destroy: () => c.destroy(),
    on: (event, listener) => c.on?.(event, listener),
    ...(typeof c.prepare === 'function'
      ? { prepareStatement: (sql: string) => new Promise<void>((resolve, reject) => c.prepare!(sql, (err) => (err ? reject(err) : resolve()))) }
      : {}),
  };
}

interface Mysql2Promise {
  createPool(config: Record<string, unknown>): MysqlPool;
}


export function loadMysql2(): Mysql2Promise {
  return loadDriver<Mysql2Promise>('mysql2/promise', 'mysql');
}
