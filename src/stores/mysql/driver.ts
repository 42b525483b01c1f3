/**
 * The few calls tenure needs from `mysql2/promise`, typed structurally so that a user's own
 * mysql2 pool fits and tenure's published types do not depend on mysql2's. The driver is loaded
 * only when a store is opened from a URL; a missing package is a DriverMissingError.
 */
import { createRequire } from 'node:module';
import { DriverMissingError } from '../../core/index.js';

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
}

/** A mysql2/promise Pool, or anything shaped like it. */
export interface MysqlPool {
  getConnection(): Promise<MysqlConnection>;
  end(): Promise<void>;
}

interface Mysql2Promise {
  createPool(config: Record<string, unknown>): MysqlPool;
}

const require = createRequire(import.meta.url);

export function loadMysql2(): Mysql2Promise {
  try {
    return require('mysql2/promise') as Mysql2Promise;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'MODULE_NOT_FOUND') throw new DriverMissingError('mysql2', 'mysql');
    throw err;
  }
}
