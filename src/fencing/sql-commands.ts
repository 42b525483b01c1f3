/**
 * Database commands beside `fencedUpdate`, for the same three dialects (PostgreSQL, MySQL,
 * SQLite), on the caller's own client or transaction:
 *
 * - `fencedInsert`: a new row recorded with the token (its term and lease), in one statement
 *   that also checks the term was issued (the lease or epoch table in the same database);
 * - `fencedCompareAndSet`: an update applied only if the row's version is the expected one AND
 *   the token's term is >= the row's last term, in one statement, bumping the version and
 *   recording the term; a stale term, a version conflict and a missing row are three outcomes;
 * - `applyOnce`: a command carrying an idempotency key is applied at most once. The key is
 *   recorded in the caller's transaction, before the command, and the command's outcome with it;
 *   a repeat returns that outcome without applying again; concurrent duplicates meet on the key's
 *   unique constraint, and the later one waits for the first transaction and reads its outcome.
 *
 * Every check is in the statement that writes (safety rule 5): nothing here reads, decides in
 * JavaScript, then writes. The reads after a refusal only explain it.
 */
import { InvalidArgumentError, RetryTransactionError, StaleTermError, checkName, checkSqlIdentifier, checkToken } from '../core/index.js';
import type { FencingToken } from '../core/index.js';
import { leaseLabel, refuse, timeFencedWrite } from './context.js';
import type { SqlDialect } from './dialects.js';
import { checkRowValues, checkSetColumns, checkTermCheck, termOf } from './rows.js';
import type { CheckedRowValue, RowValue } from './rows.js';

/** The fencing columns and the table holding issued terms, as fencedUpdate takes them. */
export interface FenceColumns {
  /** The integer column holding the last term that wrote the row (default `last_fence_token`). */
  readonly tokenColumn?: string;
  /** The column binding the row to its lease (default `last_fence_lease`; `null`: rows not bound). */
  readonly leaseColumn?: string | null;
  /**
   * The table of issued terms in this database, read in the same statement: the lease store's
   * (default `tenure_leases`), or an epoch store's (`tenure_epochs`) when the token is an epoch.
   * `null` when the terms live elsewhere (an unissued term is then not detected).
   */
  readonly leaseTable?: string | null;
  /**
   * How the token's term is checked against `leaseTable`: `issued` (default) accepts any term up to
   * the latest issued; `current` only the latest, so a deposed leader's term is refused at once,
   * even on a row its successor has not written yet. Use `current` with an epoch table in the
   * same database (each takeover bumps it before writing).
   */
  readonly termCheck?: 'issued' | 'current';
}

/** The statement pieces every command shares, checked once. */
interface Prepared<Db> {
  readonly d: SqlDialect<Db>;
  readonly table: string;
  readonly tokenColumn: string;
  readonly tokenColumnName: string;
  readonly leaseColumn: string | null;
  readonly leaseColumnName: string | null;
  readonly leaseTable: string | null;
  readonly leaseTableName: string | null;
  readonly current: boolean;
  ident(field: string, value: string): string;
}

function checkDialect<Db>(what: string, dialect: SqlDialect<Db>, db: Db): void {
  if (typeof dialect !== 'object' || dialect === null || typeof dialect.update !== 'function') {
    throw new InvalidArgumentError('dialect', `expected postgresDialect, mysqlDialect or sqliteDialect from tenure/fencing: ${what}(dialect, db, …)`);
  }
  if (typeof db !== 'object' || db === null) throw new InvalidArgumentError('db', `expected your ${dialect.name} client, pool, connection or database`);
}

function tableOf<Db>(d: SqlDialect<Db>, field: string, table: unknown): string {
  const parts = typeof table === 'string' ? table.split('.') : [];
  if (parts.length < 1 || parts.length > 2) throw new InvalidArgumentError(field, `expected TABLE or ${d.qualifier}.TABLE, got ${JSON.stringify(table)}`);
  return parts.map((p) => d.quote(checkSqlIdentifier(field, p, d.identifierMax))).join('.');
}

function prepare<Db>(d: SqlDialect<Db>, table: unknown, columns: FenceColumns): Prepared<Db> {
  const ident = (field: string, value: string): string => d.quote(checkSqlIdentifier(field, value, d.identifierMax));
  const tokenColumnName = columns.tokenColumn ?? 'last_fence_token';
  const leaseColumnName = columns.leaseColumn === undefined ? 'last_fence_lease' : columns.leaseColumn;
  const leaseTableName = columns.leaseTable === undefined ? 'tenure_leases' : columns.leaseTable;
  return {
    d,
    table: tableOf(d, 'table', table),
    tokenColumn: ident('tokenColumn', tokenColumnName),
    tokenColumnName,
    leaseColumn: leaseColumnName === null ? null : ident('leaseColumn', leaseColumnName),
    leaseColumnName,
    leaseTable: leaseTableName === null ? null : tableOf(d, 'leaseTable', leaseTableName),
    leaseTableName,
    current: checkTermCheck(columns.termCheck, leaseTableName) === 'current',
    ident,
  };
}

/** Bind parameters in the order of the statement's text (MySQL and SQLite bind `?` by position). */
class Params<Db> {
  readonly values: unknown[] = [];
  constructor(private readonly d: SqlDialect<Db>) {}
  add(value: unknown): string {
    this.values.push(value);
    return this.d.placeholder(this.values.length);
  }
  value(v: CheckedRowValue): string {
    return this.add(this.d.bind(v));
  }
  term(term: number): string {
    return this.d.term(this.add(term));
  }
  lease(lease: string): string {
    return this.d.lease(this.add(lease));
  }
}

/** `term <= (the latest issued term of the token's lease)` (`=` for termCheck current), or null when not checked. */
function issuedCheck<Db>(p: Prepared<Db>, params: Params<Db>, token: FencingToken): string | null {
  if (!p.leaseTable) return null;
  return `${params.term(token.term)} ${p.current ? '=' : '<='} (SELECT l.term FROM ${p.leaseTable} AS l WHERE l.name = ${params.lease(token.lease)})`;
}

/** The latest term issued for the token's lease (0 when none), for the explanation of a refusal. */
async function issuedTerm<Db>(p: Prepared<Db>, db: Db, token: FencingToken): Promise<number | undefined> {
  if (!p.leaseTable) return undefined;
  const rows = await p.d.select(db, `SELECT term FROM ${p.leaseTable} WHERE name = ${p.d.lease(p.d.placeholder(1))}`, [token.lease]);
  return termOf(rows[0]?.term) ?? 0;
}

function neverIssued(token: FencingToken, issued: number): InvalidArgumentError {
  return new InvalidArgumentError('token.term', `term ${token.term} was never issued for lease ${token.lease} (latest ${issued})`);
}

/** A missing fencing column or table, told as the caller's setup to fix. */
async function explained<T, Db>(p: Prepared<Db>, fn: () => Promise<T>, extra?: { table: string; hint: string }): Promise<T> {
  try {
    return await fn();
  } catch (err) {
    const missing = p.d.missing(err);
    const last = (name: string): string => name.split('.').pop() ?? name;
    if (missing?.kind === 'column' && p.leaseColumnName !== null && last(missing.name) === p.leaseColumnName) {
      throw new InvalidArgumentError(
        'leaseColumn',
        `the table has no column ${p.leaseColumnName}: add it (ALTER TABLE … ADD COLUMN ${p.leaseColumnName} ${p.d.leaseColumnType}), or pass leaseColumn: null to leave rows unbound`,
      );
    }
    if (missing?.kind === 'table' && p.leaseTableName !== null && last(missing.name) === last(p.leaseTableName)) {
      throw new InvalidArgumentError(
        'leaseTable',
        `no lease table ${p.leaseTableName} in this database: name the store's (its table prefix + leases) or the epoch store's, or pass leaseTable: null when the terms live elsewhere (an unissued term is then not detected)`,
      );
    }
    if (missing?.kind === 'table' && extra && last(missing.name) === last(extra.table)) throw new InvalidArgumentError('table', extra.hint);
    throw err;
  }
}

function leaseText(value: unknown): string | null {
  if (value === null || value === undefined) return null;
  return Buffer.isBuffer(value) ? value.toString('utf8') : String(value);
}

// ---- fencedInsert ----------------------------------------------------------------------------

export interface FencedInsert extends FenceColumns {
  /** The table, `orders` or `schema.orders` (identifiers only, never user data). */
  readonly table: string;
  /** The new row's columns and values (bind parameters, as fencedUpdate's `set`). */
  readonly values: Readonly<Record<string, RowValue>>;
}

export interface FencedInsertResult {
  /** Always 1: a refused insert throws. */
  readonly inserted: number;
}

/**
 * `INSERT INTO table (…, last_fence_token, last_fence_lease) SELECT …, term, lease WHERE term <=
 * (the lease's latest issued term)`: a new row recorded with the token, so that from its first
 * write on only the token's lease, at this term or a later one, can update it (fencedUpdate,
 * fencedCompareAndSet). A term never issued writes nothing (InvalidArgumentError). A duplicate
 * key is the driver's own error, as for any INSERT.
 */
export function fencedInsert<Db>(dialect: SqlDialect<Db>, db: Db, token: FencingToken, insert: FencedInsert): Promise<FencedInsertResult> {
  // Timed for tenure_fenced_write_seconds{path="sql"}; the token is checked inside.
  return timeFencedWrite('sql', leaseLabel(token), () => fencedInsertOnce(dialect, db, token, insert));
}

async function fencedInsertOnce<Db>(dialect: SqlDialect<Db>, db: Db, token: FencingToken, insert: FencedInsert): Promise<FencedInsertResult> {
  checkDialect('fencedInsert', dialect, db);
  checkToken('token', token);
  if (typeof insert !== 'object' || insert === null) throw new InvalidArgumentError('insert', 'expected { table, values }');
  const p = prepare(dialect, insert.table, insert);
  const entries = checkRowValues('values', insert.values, dialect.nulRefusal);
  for (const [column] of entries) {
    if (column === p.tokenColumnName || column === p.leaseColumnName) throw new InvalidArgumentError(`values.${column}`, 'is written by fencedInsert itself (the token column or the lease column)');
  }
  const params = new Params(dialect);
  const columns = entries.map(([col]) => p.ident('values', col));
  const selected = entries.map(([, v]) => params.value(v));
  columns.push(p.tokenColumn);
  selected.push(params.term(token.term));
  if (p.leaseColumn) {
    columns.push(p.leaseColumn);
    selected.push(params.lease(token.lease));
  }
  const issued = issuedCheck(p, params, token);
  // MySQL wants a FROM for a WHERE; DUAL is its empty table. PostgreSQL types each placeholder
  // from the column it is inserted into.
  const from = dialect.name === 'mysql' ? ' FROM DUAL' : '';
  const sql = `INSERT INTO ${p.table} (${columns.join(', ')}) SELECT ${selected.join(', ')}${from}${issued ? ` WHERE ${issued}` : ''}`;
  const inserted = await explained(p, () => dialect.update(db, sql, params.values));
  if (inserted > 0) return { inserted };
  const latest = (await issuedTerm(p, db, token)) ?? 0;
  if (p.current && latest > token.term) throw refuse(new StaleTermError(token.lease, token.term, latest), 'sql', 'guard');
  throw neverIssued(token, latest);
}

// ---- fencedCompareAndSet ---------------------------------------------------------------------

export interface FencedCompareAndSet extends FenceColumns {
  /** The table, `accounts` or `schema.accounts`. */
  readonly table: string;
  /** Equality conditions naming the row (its key), ANDed (at least one). */
  readonly where: Readonly<Record<string, RowValue>>;
  /** Columns to set and their values. */
  readonly set: Readonly<Record<string, RowValue>>;
  /** The version the caller read: the update applies only if the row still has it. */
  readonly expectedVersion: number;
  /** The integer version column (default `version`), bumped by one by the update. */
  readonly versionColumn?: string;
}

/** What a fenced compare-and-set did. A stale term is not an outcome: it throws StaleTermError. */
export type CompareAndSetResult =
  /** Applied: the row now has `version` (the expected one + 1) and the token's term. */
  | { readonly outcome: 'applied'; readonly version: number }
  /** Not applied: the row's version is not the expected one (someone wrote it since it was read); read it again and decide. */
  | { readonly outcome: 'conflict'; readonly version: number }
  /** Not applied: no row matches `where`. */
  | { readonly outcome: 'missing' };

/**
 * `UPDATE table SET …, version = version + 1, last_fence_token = term, last_fence_lease = lease
 * WHERE key AND version = expected AND (last_fence_token IS NULL OR last_fence_token <= term) AND
 * (lease bound to this lease or none) AND term issued`, one statement. When it matches no row, the
 * row is read to say why: a newer term wrote it (StaleTermError, reported on path `sql`: the
 * elector or lock holding this token steps down), its version moved (`conflict`), or no such row
 * (`missing`). The term is checked first: a zombie learns it is one even when the version moved.
 */
export function fencedCompareAndSet<Db>(dialect: SqlDialect<Db>, db: Db, token: FencingToken, cas: FencedCompareAndSet): Promise<CompareAndSetResult> {
  // Timed for tenure_fenced_write_seconds{path="sql"}; the token is checked inside.
  return timeFencedWrite('sql', leaseLabel(token), () => fencedCompareAndSetOnce(dialect, db, token, cas));
}

async function fencedCompareAndSetOnce<Db>(dialect: SqlDialect<Db>, db: Db, token: FencingToken, cas: FencedCompareAndSet): Promise<CompareAndSetResult> {
  checkDialect('fencedCompareAndSet', dialect, db);
  checkToken('token', token);
  if (typeof cas !== 'object' || cas === null) throw new InvalidArgumentError('cas', 'expected { table, where, set, expectedVersion }');
  const p = prepare(dialect, cas.table, cas);
  const versionName = cas.versionColumn ?? 'version';
  const version = p.ident('versionColumn', versionName);
  const expected = cas.expectedVersion;
  if (typeof expected !== 'number' || !Number.isSafeInteger(expected) || expected < 0 || expected >= Number.MAX_SAFE_INTEGER) {
    throw new InvalidArgumentError('expectedVersion', `expected an integer in [0, ${Number.MAX_SAFE_INTEGER - 1}], got ${String(expected)}`);
  }
  const setEntries = checkRowValues('set', cas.set ?? {}, dialect.nulRefusal);
  const whereEntries = checkRowValues('where', cas.where, dialect.nulRefusal);
  checkSetColumns(setEntries, [p.tokenColumnName, p.leaseColumnName]);
  if (setEntries.some(([col]) => col === versionName)) throw new InvalidArgumentError(`set.${versionName}`, 'is the version column: fencedCompareAndSet bumps it itself');
  if (whereEntries.length === 0) throw new InvalidArgumentError('where', 'expected at least one column = value condition naming the row');
  const whereColumns = whereEntries.map(([col]) => p.ident('where', col));

  const params = new Params(dialect);
  const sets = setEntries.map(([col, v]) => `${p.ident('set', col)} = ${params.value(v)}`);
  // Assigned last (MySQL evaluates SET left to right; the others read the old row in SET too).
  sets.push(`${version} = ${version} + 1`);
  sets.push(`${p.tokenColumn} = ${params.term(token.term)}`);
  if (p.leaseColumn) sets.push(`${p.leaseColumn} = ${params.lease(token.lease)}`);
  const conds = whereEntries.map(([, v], i) => `${whereColumns[i]} = ${params.value(v)}`);
  conds.push(`${version} = ${params.add(expected)}`);
  conds.push(`(${p.tokenColumn} IS NULL OR ${p.tokenColumn} <= ${params.term(token.term)})`);
  if (p.leaseColumn) conds.push(`(${p.leaseColumn} IS NULL OR ${dialect.leaseEquals(p.leaseColumn, params.lease(token.lease))})`);
  const issued = issuedCheck(p, params, token);
  if (issued) conds.push(issued);
  const sql = `UPDATE ${p.table} SET ${sets.join(', ')} WHERE ${conds.join(' AND ')}`;
  const updated = await explained(p, () => dialect.update(db, sql, params.values));
  if (updated > 0) return { outcome: 'applied', version: expected + 1 };

  // Why not: read the row (the decision was the UPDATE's; this only names it).
  const read = new Params(dialect);
  const where = whereEntries.map(([, v], i) => `${whereColumns[i]} = ${read.value(v)}`).join(' AND ');
  const rows = await dialect.select(db, `SELECT ${version} AS version, ${p.tokenColumn} AS last, ${dialect.leaseRead(p.leaseColumn)} AS lease FROM ${p.table} WHERE ${where}`, read.values);
  if (rows.length === 0) return { outcome: 'missing' };
  for (const row of rows) {
    const lease = leaseText(row.lease);
    if (lease !== null && lease !== token.lease) throw new InvalidArgumentError('token.lease', `rows of ${cas.table} are fenced by lease ${lease}, not ${token.lease}`);
  }
  const last = rows.reduce((m, r) => Math.max(m, termOf(r.last) ?? 0), 0); // not Math.max(...): the rows can be many
  if (last > token.term) throw refuse(new StaleTermError(token.lease, token.term, last), 'sql', 'guard');
  const latest = await issuedTerm(p, db, token);
  if (latest !== undefined && token.term > latest) throw neverIssued(token, latest);
  if (latest !== undefined && p.current && latest > token.term) throw refuse(new StaleTermError(token.lease, token.term, latest), 'sql', 'guard');
  // The version moved (a version only grows: the UPDATE saw another one than `expected`).
  return { outcome: 'conflict', version: termOf(rows[0]?.version) ?? 0 };
}

// ---- applyOnce: idempotency keys -------------------------------------------------------------

/** A command's outcome as stored with its key: any JSON value (undefined is stored as null). */
export type StoredOutcome = string | number | boolean | null | readonly StoredOutcome[] | { readonly [key: string]: StoredOutcome };

export interface ApplyOnceOptions {
  /** The idempotency key: 1..200 characters, no control characters (the caller's, e.g. a request id). */
  readonly key: string;
  /** The table of keys (default `tenure_idempotency_keys`), made with createIdempotencyTable. */
  readonly table?: string;
}

export interface ApplyOnceResult<R> {
  /** True when this call applied the command; false when the key was already recorded (`result` is the first outcome). */
  readonly applied: boolean;
  readonly result: R;
}

/** The largest outcome stored with a key, as JSON text. */
export const OUTCOME_MAX_BYTES = 64 * 1024;

const KEYS_TABLE = 'tenure_idempotency_keys';

/** The key table's DDL, per dialect (the key is compared byte for byte). */
function keysDdl(name: 'postgres' | 'mysql' | 'sqlite', table: string): string {
  switch (name) {
    case 'postgres':
      return `CREATE TABLE IF NOT EXISTS ${table} (idem_key text COLLATE "C" PRIMARY KEY, outcome text, created_at timestamptz NOT NULL DEFAULT now())`;
    case 'mysql':
      return `CREATE TABLE IF NOT EXISTS ${table} (idem_key VARBINARY(800) NOT NULL PRIMARY KEY, outcome MEDIUMTEXT NULL, created_at TIMESTAMP(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3)) ENGINE=InnoDB`;
    case 'sqlite':
      return `CREATE TABLE IF NOT EXISTS ${table} (idem_key TEXT NOT NULL PRIMARY KEY COLLATE BINARY, outcome TEXT, created_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ','now')))`;
  }
}

/**
 * Create the table of idempotency keys if missing (call it once, at setup, outside the
 * transactions that use it: DDL commits a MySQL transaction). Safe to call again.
 */
export async function createIdempotencyTable<Db>(dialect: SqlDialect<Db>, db: Db, options: { table?: string } = {}): Promise<void> {
  checkDialect('createIdempotencyTable', dialect, db);
  const table = tableOf(dialect, 'table', options.table ?? KEYS_TABLE);
  await createIfMissing(dialect, db, keysDdl(dialect.name, table));
}

/** `CREATE TABLE IF NOT EXISTS`, where two first calls at once can still collide on PostgreSQL's catalog. */
export async function createIfMissing<Db>(dialect: SqlDialect<Db>, db: Db, ddl: string): Promise<void> {
  try {
    await dialect.update(db, ddl, []);
  } catch (err) {
    const code = (err as { code?: unknown }).code;
    if (dialect.name === 'postgres' && (code === '23505' || code === '42P07')) return; // created by the other caller
    throw err;
  }
}

/**
 * Apply `command` at most once for `key`, inside the caller's transaction `db` (a pg client in
 * BEGIN, a mysql2 connection in beginTransaction, a SQLite database inside its transaction).
 *
 * The key is inserted first (its unique constraint decides), then the command runs on the same
 * `db`, then its outcome is stored with the key, all in the caller's transaction: commit makes
 * them visible together, a rollback (the command threw) removes them together. A key already
 * recorded returns its stored outcome, `applied: false`, and the command is not run. A duplicate
 * sent at the same time waits on the key (the database's row lock) until the first transaction
 * ends: then it reads the outcome (first committed) or applies itself (first rolled back).
 *
 * Without a transaction (autocommit) the key would commit before the command: a crash between
 * them leaves a key with no outcome, which a repeat reports as an error rather than a result.
 *
 * RetryTransactionError (code `RETRY_TRANSACTION`) when a concurrent transaction got in the way
 * of the claim: under PostgreSQL's REPEATABLE READ or SERIALIZABLE, a duplicate committed after
 * this transaction's snapshot was taken (serialization failure); a deadlock or lock wait timeout
 * on the key; the claimed row removed before it could be read. Roll back and run the whole
 * transaction again: the retry reads the first outcome (or applies, if the first rolled back).
 */
export async function applyOnce<Db, R extends StoredOutcome | undefined>(
  dialect: SqlDialect<Db>,
  db: Db,
  options: ApplyOnceOptions,
  command: (db: Db) => Promise<R> | R,
): Promise<ApplyOnceResult<R>> {
  checkDialect('applyOnce', dialect, db);
  if (typeof options !== 'object' || options === null) throw new InvalidArgumentError('options', 'expected { key, table? }');
  const key = checkName('key', options.key);
  if (typeof command !== 'function') throw new InvalidArgumentError('command', 'expected a function (db) => outcome, run at most once per key');
  const tableName = options.table ?? KEYS_TABLE;
  const table = tableOf(dialect, 'table', tableName);
  const d = dialect;
  const p1 = d.placeholder(1);
  const keyParam = d.name === 'postgres' ? `${p1}::text` : p1;
  const missingHint = { table: tableName, hint: `no table ${tableName} of idempotency keys in this database: create it once with createIdempotencyTable(dialect, db${options.table ? `, { table: '${tableName}' }` : ''})` };
  const p = prepare(d, tableName, { leaseColumn: null, leaseTable: null });

  // Claim the key. PostgreSQL: a failed statement aborts the transaction, so DO NOTHING; MySQL:
  // the duplicate's error only undoes that statement (ON DUPLICATE KEY cannot tell "matched" from
  // "inserted" under mysql2's FOUND_ROWS), SQLite: DO NOTHING.
  // A concurrent transaction in the way (PostgreSQL above READ COMMITTED: the other claim is
  // committed but not in this snapshot, 40001; a deadlock; a lock wait timeout) is the caller's
  // transaction to run again, not a bad argument.
  const retry = (err: unknown, what: string): RetryTransactionError =>
    new RetryTransactionError(`applyOnce: key ${JSON.stringify(key)} ${what}: roll back and run the transaction again (nothing of it may be committed)`, err === undefined ? undefined : { cause: err });
  let claimed: boolean;
  try {
    if (d.name === 'mysql') {
      try {
        claimed = (await explained(p, () => d.update(db, `INSERT INTO ${table} (idem_key) VALUES (${p1})`, [key]), missingHint)) > 0;
      } catch (err) {
        if ((err as { errno?: unknown }).errno !== 1062 /* ER_DUP_ENTRY */) throw err;
        claimed = false;
      }
    } else {
      claimed = (await explained(p, () => d.update(db, `INSERT INTO ${table} (idem_key) VALUES (${keyParam}) ON CONFLICT (idem_key) DO NOTHING`, [key]), missingHint)) > 0;
    }
  } catch (err) {
    if (d.contended(err)) throw retry(err, `was claimed by a concurrent transaction this one conflicts with (${String((err as { code?: unknown }).code ?? (err as { errno?: unknown }).errno)})`);
    throw err;
  }

  if (!claimed) {
    // MySQL's plain SELECT reads the transaction's snapshot, which may predate the first claim's
    // commit (REPEATABLE READ): a locking read sees the latest committed row. PostgreSQL reads a
    // new snapshot per statement (READ COMMITTED), and under REPEATABLE READ its ON CONFLICT above
    // already failed with a serialization error when the row is not visible.
    const lock = d.name === 'mysql' ? ' LOCK IN SHARE MODE' : '';
    let rows: readonly Record<string, unknown>[];
    try {
      rows = await d.select(db, `SELECT outcome FROM ${table} WHERE idem_key = ${keyParam}${lock}`, [key]);
    } catch (err) {
      if (d.contended(err)) throw retry(err, `is held by a concurrent transaction this one conflicts with (${String((err as { code?: unknown }).code ?? (err as { errno?: unknown }).errno)})`);
      throw err;
    }
    if (rows.length === 0) {
      // The claim met a row that is gone by the time it is read (deleted and committed meanwhile).
      throw retry(undefined, 'was claimed by a transaction whose row this one no longer sees (removed meanwhile)');
    }
    const stored = rows[0]?.outcome;
    if (stored === null || stored === undefined) {
      throw new InvalidArgumentError(
        'key',
        `key ${JSON.stringify(key)} is recorded without an outcome: it was claimed outside a transaction and its command may or may not have run. Call applyOnce inside your transaction`,
      );
    }
    const text = Buffer.isBuffer(stored) ? stored.toString('utf8') : String(stored);
    return { applied: false, result: JSON.parse(text) as R };
  }

  const result = await command(db);
  let text: string;
  try {
    text = JSON.stringify(result === undefined ? null : result);
  } catch (err) {
    throw new InvalidArgumentError('result', `the command's outcome is not JSON (${(err as Error).message}); roll the transaction back`);
  }
  if (Buffer.byteLength(text) > OUTCOME_MAX_BYTES) {
    throw new InvalidArgumentError('result', `the command's outcome is ${Buffer.byteLength(text)} bytes as JSON, more than ${OUTCOME_MAX_BYTES}: store a reference to it; roll the transaction back`);
  }
  if (d.name === 'postgres' && text.includes('\\u0000')) {
    throw new InvalidArgumentError('result', 'the outcome holds NUL (U+0000), which PostgreSQL text cannot store; roll the transaction back');
  }
  await d.update(db, `UPDATE ${table} SET outcome = ${d.placeholder(1)} WHERE idem_key = ${d.name === 'postgres' ? '$2::text' : d.placeholder(2)}`, [text, key]);
  return { applied: true, result };
}
