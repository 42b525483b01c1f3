/**
 * One SQL dialect on a fresh database of its own, for the database-command and epoch tests:
 * PostgreSQL and MariaDB/MySQL on the servers of this machine, SQLite files through
 * better-sqlite3 and node:sqlite (whichever load on this Node).
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import mysql from 'mysql2/promise';
import pg from 'pg';
import { mysqlDialect, postgresDialect, sqliteDialect } from '../../src/fencing/index.js';
import type { SqlDialect, SqliteDatabase } from '../../src/fencing/index.js';
import { createMysqlDatabase, createPostgresDatabase } from '../stores/sql-servers.js';

/** A connection the caller holds for one transaction. */
export interface Tx<Db> {
  readonly db: Db;
  commit(): Promise<void>;
  rollback(): Promise<void>;
}

export interface SqlHarness<Db = unknown> {
  readonly name: string;
  readonly dialect: SqlDialect<Db>;
  /** The shared pool / database (autocommit). */
  readonly db: Db;
  readonly types: { int: string; text: string; token: string; lease: string };
  /** Whether two transactions on this harness can be open at once in this process. */
  readonly concurrentTx: boolean;
  exec(sql: string): Promise<void>;
  /** Rows, with bigint-ish columns as numbers and bytes as text. */
  rows(sql: string): Promise<Record<string, unknown>[]>;
  begin(): Promise<Tx<Db>>;
  close(): Promise<void>;
}

const NUMERIC = new Set(['last_fence_token', 'version', 'term', 'n']);
function normal(row: Record<string, unknown>): Record<string, unknown> {
  return Object.fromEntries(
    Object.entries(row).map(([k, v]) => [k, Buffer.isBuffer(v) ? v.toString('utf8') : NUMERIC.has(k) && v !== null && v !== undefined ? Number(v) : v]),
  );
}

async function postgres(): Promise<SqlHarness<pg.Pool>> {
  const tdb = await createPostgresDatabase();
  const pool = new pg.Pool({ connectionString: tdb.url, max: 12 });
  pool.on('error', () => {});
  return {
    name: 'postgres',
    dialect: postgresDialect as unknown as SqlDialect<pg.Pool>,
    db: pool,
    types: { int: 'int', text: 'text', token: 'bigint', lease: 'text' },
    concurrentTx: true,
    exec: async (sql) => void (await pool.query(sql)),
    rows: async (sql) => (await pool.query(sql)).rows.map(normal),
    begin: async () => {
      const c = await pool.connect();
      await c.query('BEGIN');
      return {
        db: c as unknown as pg.Pool,
        commit: async () => {
          await c.query('COMMIT');
          c.release();
        },
        rollback: async () => {
          await c.query('ROLLBACK');
          c.release();
        },
      };
    },
    close: async () => {
      await pool.end();
      await tdb.drop();
    },
  };
}

async function mariadb(): Promise<SqlHarness<mysql.Pool>> {
  const tdb = await createMysqlDatabase();
  const pool = mysql.createPool({ uri: tdb.url, connectionLimit: 12 });
  return {
    name: 'mysql',
    dialect: mysqlDialect as unknown as SqlDialect<mysql.Pool>,
    db: pool,
    types: { int: 'INT', text: 'VARCHAR(200) NULL', token: 'BIGINT NULL', lease: 'VARBINARY(800) NULL' },
    concurrentTx: true,
    exec: async (sql) => void (await pool.query(sql)),
    rows: async (sql) => ((await pool.query(sql))[0] as Record<string, unknown>[]).map(normal),
    begin: async () => {
      const c = await pool.getConnection();
      await c.beginTransaction();
      return {
        db: c as unknown as mysql.Pool,
        commit: async () => {
          await c.commit();
          c.release();
        },
        rollback: async () => {
          await c.rollback();
          c.release();
        },
      };
    },
    close: async () => {
      await pool.end();
      await tdb.drop();
    },
  };
}

type SqliteHandle = SqliteDatabase & { exec(sql: string): unknown; close(): unknown };

function sqlite(name: string, open: (path: string) => SqliteHandle): () => Promise<SqlHarness<SqliteHandle>> {
  return async () => {
    const dir = mkdtempSync(join(tmpdir(), 'tenure-fence-sql-'));
    const db = open(join(dir, 'app.db'));
    db.exec('PRAGMA journal_mode = WAL');
    return {
      name,
      dialect: sqliteDialect as unknown as SqlDialect<SqliteHandle>,
      db,
      types: { int: 'INTEGER', text: 'TEXT', token: 'INTEGER', lease: 'TEXT' },
      // One connection, synchronous: a second transaction would wait on the first in this thread.
      concurrentTx: false,
      exec: async (sql) => void db.exec(sql),
      rows: async (sql) => (db.prepare(sql).all() as Record<string, unknown>[]).map(normal),
      begin: async () => {
        db.exec('BEGIN IMMEDIATE');
        return {
          db,
          commit: async () => void db.exec('COMMIT'),
          rollback: async () => void db.exec('ROLLBACK'),
        };
      },
      close: async () => {
        db.close();
        rmSync(dir, { recursive: true, force: true });
      },
    };
  };
}

type DatabaseSync = new (path: string, options?: { timeout?: number }) => SqliteHandle;

/** Every dialect this Node can run, by name. */
export function sqlHarnesses(): Record<string, () => Promise<SqlHarness>> {
  const all: Record<string, () => Promise<SqlHarness>> = {
    postgres: postgres as () => Promise<SqlHarness>,
    mysql: mariadb as () => Promise<SqlHarness>,
  };
  try {
    new Database(':memory:').close();
    all['sqlite (better-sqlite3)'] = sqlite('sqlite (better-sqlite3)', (path) => {
      const db = new Database(path);
      db.pragma('busy_timeout = 5000');
      return db as unknown as SqliteHandle;
    }) as () => Promise<SqlHarness>;
  } catch {
    // no native binding for this Node
  }
  try {
    const { DatabaseSync } = createRequire(import.meta.url)('node:sqlite') as { DatabaseSync: DatabaseSync };
    all['sqlite (node:sqlite)'] = sqlite('sqlite (node:sqlite)', (path) => new DatabaseSync(path, { timeout: 5000 })) as () => Promise<SqlHarness>;
  } catch {
    // Node < 22.5
  }
  return all;
}
