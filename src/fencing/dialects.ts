/**
 * What `fencedUpdate` needs to know about one SQL dialect: how to write a placeholder, quote an
 * identifier, compare the lease column byte for byte, bind a value, run a statement on the
 * caller's own client, and tell a missing column or table from any other error. The drivers are
 * the caller's: nothing here imports one, the handles are described by the few calls made on them.
 */
import { createHash } from 'node:crypto';
import { StoreDataError } from '../core/index.js';
import type { CheckedRowValue } from './rows.js';

/** A database error `fencedUpdate` explains: a column or a table the statement named is missing. */
export interface MissingObject {
  readonly kind: 'column' | 'table';
  /** The name as the server reported it (possibly qualified: `db.table`). */
  readonly name: string;
}

export interface SqlDialect<Db> {
  readonly name: 'postgres' | 'mysql' | 'sqlite';
  /** The longest identifier the server accepts. */
  readonly identifierMax: number;
  /** What the first part of `A.B` is called: `SCHEMA` or `DATABASE`. */
  readonly qualifier: string;
  /** Why a string must not contain U+0000, or null when it may. */
  readonly nulRefusal: string | null;
  /** The column type `fencedUpdate` tells the caller to add for the lease column. */
  readonly leaseColumnType: string;
  /** An identifier, already checked against `[A-Za-z_][A-Za-z0-9_$]*`, quoted. */
  quote(identifier: string): string;
  /** The placeholder of the `index`-th value (1-based); each placeholder binds a value of its own. */
  placeholder(index: number): string;
  /** A placeholder holding a term, typed as the server needs. */
  term(placeholder: string): string;
  /** A placeholder holding a lease name, typed as the server needs. */
  lease(placeholder: string): string;
  /** `column` holds exactly the lease of `placeholder`, byte for byte whatever its collation. */
  leaseEquals(column: string, placeholder: string): string;
  /** The lease column as read back in the refusal report (`null` column: no lease). */
  leaseRead(column: string | null): string;
  /** A checked value as the driver binds it. */
  bind(value: CheckedRowValue): unknown;
  /** Run an UPDATE; resolves to the rows it matched. */
  update(db: Db, sql: string, values: readonly unknown[]): Promise<number>;
  /** Run a SELECT; resolves to its rows. */
  select(db: Db, sql: string, values: readonly unknown[]): Promise<readonly Record<string, unknown>[]>;
  /** The missing column or table this error reports, or null for any other error. */
  missing(err: unknown): MissingObject | null;

  // The fence table of the HTTP guard (http-guard.ts): one row per group, its highest term.
  /** Appended to a SELECT: lock the rows read until the transaction ends, shared with other such readers. */
  readonly lockShared: string;
  /** Appended to a SELECT: lock the rows read exclusively until the transaction ends. */
  readonly lockExclusive: string;
  /** `CREATE TABLE IF NOT EXISTS` for a fence table `table` (quoted, maybe qualified): `name` the group, `term` its highest term. */
  fenceTableDdl(table: string): string;
  /** Insert (name, term) at placeholders 1 and 2 into a fence table, or raise its term to the higher of the two. */
  raiseFence(table: string): string;
  /** The error is a deadlock, serialization failure or lock timeout: nothing of the statement applied; a retry may succeed. */
  contended(err: unknown): boolean;
  /** Whether `db` is inside a transaction, when its driver tells (undefined: cannot tell). */
  inTransaction(db: Db): boolean | undefined;
  /**
   * Begin a transaction on `db` (SQLite: BEGIN IMMEDIATE) and run the SELECT that `sql` builds in
   * it, in as few round trips as the driver allows: PostgreSQL sends both in one (the SELECT,
   * with `$n` placeholders, prepared once per connection, then EXECUTEd with each value as an
   * escaped literal), the others one each (`param` is a placeholder).
   */
  beginThenSelect(db: Db, sql: (param: (value: string | number) => string) => string): Promise<readonly Record<string, unknown>[]>;
}

function errorFields(err: unknown): { code: unknown; errno: unknown; message: string } {
  const e = (typeof err === 'object' && err !== null ? err : {}) as { code?: unknown; errno?: unknown; message?: unknown };
  return { code: e.code, errno: e.errno, message: typeof e.message === 'string' ? e.message : '' };
}

function matched(kind: MissingObject['kind'], re: RegExp, message: string): MissingObject | null {
  const m = re.exec(message);
  return m?.[1] ? { kind, name: m[1] } : null;
}

/** A pg Pool, Client or PoolClient (also one inside the caller's own transaction). */
export interface PgQueryable {
  query(text: string | { name: string; text: string; values: unknown[] }, values?: unknown[]): Promise<{ rowCount: number | null; rows: Record<string, unknown>[] }>;
}

/**
 * The name of the prepared statement for one statement text: pg prepares it once per connection
 * and then only binds and executes it, sparing PostgreSQL the parse and plan of the fenced UPDATE
 * (with its lease-table subquery) on every call. The statements are few: one per table and column
 * set the application updates.
 */
const statementNames = new Map<string, string>();
function statementName(sql: string): string {
  let name = statementNames.get(sql);
  if (name === undefined) {
    name = `tenure_${createHash('sha256').update(sql).digest('hex').slice(0, 40)}`;
    if (statementNames.size >= 1000) statementNames.clear();
    statementNames.set(sql, name);
  }
  return name;
}

/** PostgreSQL through `pg`. */
export const postgresDialect: SqlDialect<PgQueryable> = {
  name: 'postgres',
  identifierMax: 63,
  qualifier: 'SCHEMA',
  nulRefusal: 'PostgreSQL text cannot hold it',
  leaseColumnType: 'text',
  quote: (id) => `"${id.replace(/"/g, '""')}"`,
  placeholder: (i) => `$${i}`,
  term: (p) => `${p}::bigint`,
  lease: (p) => `${p}::text`,
  leaseEquals: (column, p) => `${column} = ${p}`,
  leaseRead: (column) => column ?? 'NULL::text',
  bind: (v) => v,
  update: async (db, sql, values) => (await db.query({ name: statementName(sql), text: sql, values: [...values] })).rowCount ?? 0,
  select: async (db, sql, values) => (await db.query(sql, [...values])).rows,
  missing: (err) => {
    const { code, message } = errorFields(err);
    if (code === '42703') return matched('column', /column "([^"]+)"/, message);
    if (code === '42P01') return matched('table', /relation "([^"]+)"/, message);
    return null;
  },
  lockShared: ' FOR SHARE',
  lockExclusive: ' FOR UPDATE',
  fenceTableDdl: (table) => `CREATE TABLE IF NOT EXISTS ${table} (name text PRIMARY KEY, term bigint NOT NULL CHECK (term >= 1))`,
  raiseFence: (table) => `INSERT INTO ${table} AS f (name, term) VALUES ($1::text, $2::bigint) ON CONFLICT (name) DO UPDATE SET term = GREATEST(f.term, EXCLUDED.term)`,
  // deadlock_detected, serialization_failure, lock_not_available
  contended: (err) => ['40P01', '40001', '55P03'].includes(String(errorFields(err).code)),
  inTransaction: () => undefined,
  beginThenSelect: async (db, sql) => {
    // One simple-protocol query, two statements: BEGIN, and the SELECT as an EXECUTE of a
    // statement prepared once per connection (PREPARE, its own round trip the first time), so
    // the server neither parses nor plans it again on every call. E'' reads backslashes as
    // escapes whatever standard_conforming_strings says; a name has no NUL (checkName).
    const values: (string | number)[] = [];
    const text = sql((v) => (values.push(v), `$${values.length}`));
    if (values.length === 0) return lastRows(await db.query(`BEGIN; ${text}`));
    const name = preparedName(text);
    const execute = `BEGIN; EXECUTE ${name}(${values.map(pgLiteral).join(', ')})`;
    if (!preparedOn.get(db)?.has(name)) await prepareOn(db, name, text);
    try {
      return lastRows(await db.query(execute));
    } catch (err) {
      // The session lost it (DISCARD ALL, DEALLOCATE, a pooler's other session): the BEGIN ran,
      // the SELECT did not; roll back, prepare again, once.
      if (errorFields(err).code !== '26000' /* invalid_sql_statement_name */) throw err;
      await db.query('ROLLBACK');
      preparedOn.get(db)?.delete(name);
      await prepareOn(db, name, text);
      return lastRows(await db.query(execute));
    }
  },
};

/** A value as a PostgreSQL literal: a whole number, or E'' text (backslashes and quotes escaped). */
function pgLiteral(v: string | number): string {
  return typeof v === 'number' ? String(Math.trunc(v)) : `E'${v.replace(/\\/g, '\\\\').replace(/'/g, "''")}'`;
}

/** The rows of a simple query's last statement. */
function lastRows(results: unknown): readonly Record<string, unknown>[] {
  const last = (Array.isArray(results) ? results[results.length - 1] : results) as { rows?: Record<string, unknown>[] } | undefined;
  return last?.rows ?? [];
}

/**
 * The SQL-level prepared statements (PREPARE) made on each pg connection by beginThenSelect, by
 * name. Their names differ from the protocol-level ones of `update` (`tenure_b_…`): both live in
 * the session's one namespace.
 */
const preparedOn = new WeakMap<object, Set<string>>();
function preparedName(text: string): string {
  return `tenure_b_${statementName(`beginThenSelect:${text}`).slice('tenure_'.length, 'tenure_'.length + 32)}`;
}
async function prepareOn(db: PgQueryable, name: string, text: string): Promise<void> {
  try {
    await db.query(`PREPARE ${name} AS ${text}`);
  } catch (err) {
    if (errorFields(err).code !== '42P05' /* duplicate_prepared_statement: prepared already */) throw err;
  }
  let names = preparedOn.get(db);
  if (!names) preparedOn.set(db, (names = new Set()));
  if (names.size >= 100) names.clear();
  names.add(name);
}

/** A mysql2/promise Pool, Connection or PoolConnection (also inside the caller's own transaction). */
export interface MysqlExecutor {
  execute(sql: string, values?: (string | number | bigint | boolean | Date | null | Buffer)[]): Promise<[unknown, unknown]>;
}

/**
 * MySQL and MariaDB through `mysql2/promise`. The row count relies on mysql2's default
 * FOUND_ROWS flag (matched rows, not changed rows).
 */
export const mysqlDialect: SqlDialect<MysqlExecutor> = {
  name: 'mysql',
  identifierMax: 64,
  qualifier: 'DATABASE',
  nulRefusal: null,
  leaseColumnType: 'VARBINARY(800) NULL',
  quote: (id) => `\`${id.replace(/`/g, '``')}\``,
  placeholder: () => '?',
  term: (p) => p,
  lease: (p) => p,
  // Byte for byte, whatever the column's collation: 'Billing' is not 'billing'.
  leaseEquals: (column, p) => `CAST(${column} AS BINARY) = CAST(${p} AS BINARY)`,
  leaseRead: (column) => (column ? `CAST(${column} AS BINARY)` : 'NULL'),
  bind: (v) => v,
  update: async (db, sql, values) => {
    const [result] = await db.execute(sql, values as Parameters<MysqlExecutor['execute']>[1]);
    return Number((result as { affectedRows?: unknown }).affectedRows ?? 0);
  },
  select: async (db, sql, values) => {
    const [rows] = await db.execute(sql, values as Parameters<MysqlExecutor['execute']>[1]);
    return rows as Record<string, unknown>[];
  },
  missing: (err) => {
    const { errno, message } = errorFields(err);
    if (errno === 1054 /* ER_BAD_FIELD_ERROR */) return matched('column', /column '([^']+)'/i, message);
    if (errno === 1146 /* ER_NO_SUCH_TABLE */) return matched('table', /table '([^']+)'/i, message);
    return null;
  },
  lockShared: ' LOCK IN SHARE MODE',
  lockExclusive: ' FOR UPDATE',
  // The group byte for byte (VARBINARY: no collation folds 'Billing' into 'billing'); 200 characters of up to 4 bytes.
  fenceTableDdl: (table) => `CREATE TABLE IF NOT EXISTS ${table} (name VARBINARY(800) NOT NULL PRIMARY KEY, term BIGINT NOT NULL) ENGINE=InnoDB`,
  raiseFence: (table) => `INSERT INTO ${table} (name, term) VALUES (?, ?) ON DUPLICATE KEY UPDATE term = GREATEST(term, VALUES(term))`,
  // ER_LOCK_DEADLOCK, ER_LOCK_WAIT_TIMEOUT
  contended: (err) => [1213, 1205].includes(Number(errorFields(err).errno)),
  inTransaction: () => undefined,
  beginThenSelect: async (db, sql) => {
    const c = db as MysqlExecutor & { beginTransaction?: () => Promise<unknown>; query?: (sql: string) => Promise<unknown> };
    if (typeof c.beginTransaction === 'function') await c.beginTransaction();
    else if (typeof c.query === 'function') await c.query('START TRANSACTION');
    else throw new Error('mysqlDialect.beginThenSelect: the connection has neither beginTransaction() nor query()');
    const values: (string | number)[] = [];
    const [rows] = await db.execute(sql((v) => (values.push(v), '?')), values);
    return rows as Record<string, unknown>[];
  },
};

/** A better-sqlite3 Database or a node:sqlite DatabaseSync (also inside the caller's own transaction). */
export interface SqliteDatabase {
  prepare(sql: string): {
    run(...params: unknown[]): { changes: number | bigint };
    all(...params: unknown[]): unknown[];
  };
}

/**
 * SQLite through `better-sqlite3` or `node:sqlite`. SQLite has no boolean or date type: a boolean
 * is bound as 1 or 0 and a Date as its ISO 8601 text (what SQLite's date functions read).
 */

/**
 * Rows read from SQLite. node:sqlite throws a RangeError on an integer past 2^53 - 1 (a term or
 * version written by hand or by another program): that is bad data, a StoreDataError, as every
 * other store reports it, on every read the fencing helpers make (fenced rows, epochs, the HTTP
 * and message ledgers).
 */
function sqliteRows(read: () => Record<string, unknown>[]): Record<string, unknown>[] {
  try {
    return read();
  } catch (err) {
    if (err instanceof RangeError) throw new StoreDataError(`sqlite: a value tenure cannot read exactly: ${err.message} (an integer past 2^53 - 1, written by hand or by another program?)`);
    throw err;
  }
}

export const sqliteDialect: SqlDialect<SqliteDatabase> = {
  name: 'sqlite',
  identifierMax: 128,
  qualifier: 'SCHEMA',
  nulRefusal: null,
  leaseColumnType: 'TEXT',
  quote: (id) => `"${id.replace(/"/g, '""')}"`,
  placeholder: () => '?',
  term: (p) => p,
  lease: (p) => p,
  // The explicit collation wins over the column's (a column declared COLLATE NOCASE included).
  leaseEquals: (column, p) => `${column} = ${p} COLLATE BINARY`,
  leaseRead: (column) => column ?? 'NULL',
  bind: (v) => (typeof v === 'boolean' ? (v ? 1 : 0) : v instanceof Date ? v.toISOString() : v),
  update: async (db, sql, values) => Number(db.prepare(sql).run(...values).changes),
  select: async (db, sql, values) => sqliteRows(() => db.prepare(sql).all(...values) as Record<string, unknown>[]),
  missing: (err) => {
    const { message } = errorFields(err);
    return matched('column', /no such column: (\S+)/, message) ?? matched('table', /no such table: (\S+)/, message);
  },
  // The writer's BEGIN IMMEDIATE holds the whole database's write lock: rows need no locks of their own.
  lockShared: '',
  lockExclusive: '',
  fenceTableDdl: (table) => `CREATE TABLE IF NOT EXISTS ${table} (name TEXT NOT NULL PRIMARY KEY, term INTEGER NOT NULL CHECK (term >= 1))`,
  raiseFence: (table) => `INSERT INTO ${table} (name, term) VALUES (?, ?) ON CONFLICT (name) DO UPDATE SET term = max(term, excluded.term)`,
  contended: (err) => {
    // better-sqlite3: code SQLITE_BUSY(_…); node:sqlite: errcode 5 (SQLITE_BUSY) in its low byte.
    const { code } = errorFields(err);
    const errcode = (err as { errcode?: unknown } | null)?.errcode;
    return (typeof code === 'string' && /^SQLITE_BUSY(_|$)/.test(code)) || (typeof errcode === 'number' && (errcode & 0xff) === 5);
  },
  // better-sqlite3's inTransaction; node:sqlite's isTransaction (Node >= 22.16).
  inTransaction: (db) => {
    const d = db as { inTransaction?: unknown; isTransaction?: unknown };
    return typeof d.inTransaction === 'boolean' ? d.inTransaction : typeof d.isTransaction === 'boolean' ? d.isTransaction : undefined;
  },
  beginThenSelect: async (db, sql) => {
    db.prepare('BEGIN IMMEDIATE').run();
    const values: (string | number)[] = [];
    return sqliteRows(() => db.prepare(sql((v) => (values.push(v), '?'))).all(...values) as Record<string, unknown>[]);
  },
};
