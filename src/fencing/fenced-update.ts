/**
 * Fencing for the user's own tables: the `last_fence_token` pattern, one implementation for every
 * SQL dialect. Each guarded row keeps the highest term that has written it and the lease that
 * term belongs to; an update applies only if the row is the token's lease's (or not bound yet),
 * its term is <= the token's, and the term was issued by the lease store (when its table is in
 * the same database), and records the token's lease and term, in the SAME statement (safety rule
 * 5). A refused update matches no row, and is reported as StaleTermError (a newer term wrote the
 * row) or InvalidArgumentError (another lease's row, or a term never issued).
 */
import { InvalidArgumentError, checkSqlIdentifier, checkToken } from '../core/index.js';
import type { FencingToken } from '../core/index.js';
import type { SqlDialect } from './dialects.js';
import { checkRowValues, checkSetColumns, checkTermCheck, rowRefusal, termOf } from './rows.js';
import type { RowFence, RowValue } from './rows.js';
import { leaseLabel, timeFencedWrite } from './context.js';

export interface FencedUpdate {
  /** The table, `accounts` or `schema.accounts` (identifiers only, never user data). */
  readonly table: string;
  /** Columns to set and their values (bind parameters: string, finite number, bigint, boolean, Date, Buffer or null). */
  readonly set: Readonly<Record<string, RowValue>>;
  /** Equality conditions naming the row(s), ANDed (at least one). */
  readonly where: Readonly<Record<string, RowValue>>;
  /** The integer column holding the last term that wrote the row (default `last_fence_token`). */
  readonly tokenColumn?: string;
  /**
   * The column binding the row to the lease whose terms fence it (default `last_fence_lease`;
   * compared byte for byte whatever its collation). A row bound to one lease refuses every other
   * lease's token. `null`: rows are not bound (then use one lease's terms per table: terms of
   * different leases do not compare).
   */
  readonly leaseColumn?: string | null;
  /**
   * tenure's lease table in this database (default `tenure_leases`, the store's with the default
   * table prefix), read in the same statement to check that the token's term was issued, so a
   * forged term cannot poison a row. `null` when the leases live in another database or store:
   * then an unissued term is not detected.
   */
  readonly leaseTable?: string | null;
  /**
   * `issued` (default): a term up to the latest in `leaseTable` is accepted; `current`: only the
   * latest (with an epoch table in this database, a deposed leader is refused at once, even on
   * rows its successor has not written yet).
   */
  readonly termCheck?: 'issued' | 'current';
}

export interface FencedUpdateResult {
  /** Rows matched and updated; 0 when no row matched `where` (a refused token throws instead). */
  readonly updated: number;
}

/**
 * `UPDATE table SET …, last_fence_token = term, last_fence_lease = lease WHERE … AND
 * (last_fence_token IS NULL OR last_fence_token <= term) AND (last_fence_lease IS NULL OR
 * last_fence_lease = lease) AND term <= (the lease's latest term in tenure_leases)` as one
 * statement on `db`, the caller's own client of `dialect` (postgresDialect with a pg Pool or
 * Client, mysqlDialect with a mysql2/promise Pool or Connection, sqliteDialect with a
 * better-sqlite3 or node:sqlite database), also inside the caller's own transaction.
 */
export function fencedUpdate<Db>(dialect: SqlDialect<Db>, db: Db, token: FencingToken, update: FencedUpdate): Promise<FencedUpdateResult> {
  // Timed for tenure_fenced_write_seconds{path="sql"}; the token is checked inside.
  return timeFencedWrite('sql', leaseLabel(token), () => fencedUpdateOnce(dialect, db, token, update));
}

/**
 * One fenced UPDATE's statement, compiled from its shape (the table, the fencing columns, the
 * lease table, termCheck, and the names of the `set` and `where` columns): the identifiers are
 * checked and quoted once per shape, not on every call. The values are checked on every call.
 */
interface CompiledUpdate {
  readonly sql: string;
  readonly table: string;
  readonly tokenColumn: string;
  readonly leaseColumn: string | null;
  readonly leaseColumnName: string | null;
  readonly leaseTable: string | null;
  readonly leaseTableName: string | null;
  readonly current: boolean;
  readonly setColumns: readonly string[];
  readonly whereColumns: readonly string[];
  /** The refusal report's SELECT of the rows named by `where` (placeholders: the where values). */
  readonly seenSql: string;
}

/** Compiled statements per dialect, keyed by shape; bounded (cleared when full: the shapes are few). */
const compiledUpdates = new WeakMap<object, Map<string, CompiledUpdate>>();
const COMPILED_MAX = 1000;

function compileUpdate<Db>(d: SqlDialect<Db>, update: FencedUpdate, setNames: readonly string[], whereNames: readonly string[]): CompiledUpdate {
  const ident = (field: string, value: string): string => d.quote(checkSqlIdentifier(field, value, d.identifierMax));
  const tableName = (field: string, table: string): string => {
    const parts = typeof table === 'string' ? table.split('.') : [];
    if (parts.length < 1 || parts.length > 2) throw new InvalidArgumentError(field, `expected TABLE or ${d.qualifier}.TABLE, got ${JSON.stringify(table)}`);
    return parts.map((p) => ident(field, p)).join('.');
  };
  const table = tableName('table', update.table);
  const tokenColumnName = update.tokenColumn ?? 'last_fence_token';
  const tokenColumn = ident('tokenColumn', tokenColumnName);
  const leaseColumnName = update.leaseColumn === undefined ? 'last_fence_lease' : update.leaseColumn;
  const leaseColumn = leaseColumnName === null ? null : ident('leaseColumn', leaseColumnName);
  const leaseTableName = update.leaseTable === undefined ? 'tenure_leases' : update.leaseTable;
  const leaseTable = leaseTableName === null ? null : tableName('leaseTable', leaseTableName);
  const current = checkTermCheck(update.termCheck, leaseTableName) === 'current';
  checkSetColumns(
    setNames.map((c) => [c, null]),
    [tokenColumnName, leaseColumnName],
  );
  if (whereNames.length === 0) throw new InvalidArgumentError('where', 'expected at least one column = value condition');
  const whereColumns = whereNames.map((col) => ident('where', col));
  const setColumns = setNames.map((col) => ident('set', col));

  // Placeholders in the order of the text: MySQL and SQLite bind `?` by position. The token and
  // lease columns are assigned last (MySQL evaluates SET left to right), and every dialect
  // evaluates WHERE on the row's previous values. The values follow the same order (updateValues).
  let n = 0;
  const param = (): string => d.placeholder(++n);
  const sets = setColumns.map((c) => `${c} = ${param()}`);
  sets.push(`${tokenColumn} = ${d.term(param())}`);
  if (leaseColumn) sets.push(`${leaseColumn} = ${d.lease(param())}`);
  const conds = whereColumns.map((c) => `${c} = ${param()}`);
  conds.push(`(${tokenColumn} IS NULL OR ${tokenColumn} <= ${d.term(param())})`);
  if (leaseColumn) conds.push(`(${leaseColumn} IS NULL OR ${d.leaseEquals(leaseColumn, d.lease(param()))})`);
  if (leaseTable) conds.push(`${d.term(param())} ${current ? '=' : '<='} (SELECT l.term FROM ${leaseTable} AS l WHERE l.name = ${d.lease(param())})`);
  const sql = `UPDATE ${table} SET ${sets.join(', ')} WHERE ${conds.join(' AND ')}`;
  const seenWhere = whereColumns.map((c, i) => `${c} = ${d.placeholder(i + 1)}`).join(' AND ');
  const seenSql = `SELECT ${d.leaseRead(leaseColumn)} AS lease, max(${tokenColumn}) AS last FROM ${table} WHERE ${seenWhere} GROUP BY 1`;
  return { sql, table, tokenColumn, leaseColumn, leaseColumnName, leaseTable, leaseTableName, current, setColumns, whereColumns, seenSql };
}

/**
 * The shape of an update as one string: every option that changes the statement's text, joined
 * by U+0001, with undefined (the default) and null (none) told apart. Null (not cached) when a
 * part is not a string or holds U+0001 itself, so no two shapes share a key; such a part is
 * refused by compileUpdate anyway.
 */
function shapeKey(update: FencedUpdate, setNames: readonly string[], whereNames: readonly string[]): string | null {
  let key = '';
  for (const v of [update.table, update.tokenColumn, update.leaseColumn, update.leaseTable, update.termCheck] as unknown[]) {
    if (v === undefined) key += '\u0002\u0001';
    else if (v === null) key += '\u0003\u0001';
    else if (typeof v === 'string' && !v.includes('\u0001')) key += `${v}\u0001`;
    else return null;
  }
  key += '\u0004';
  for (const name of setNames) {
    if (name.includes('\u0001')) return null;
    key += `${name}\u0001`;
  }
  key += '\u0004';
  for (const name of whereNames) {
    if (name.includes('\u0001')) return null;
    key += `${name}\u0001`;
  }
  return key;
}

async function fencedUpdateOnce<Db>(dialect: SqlDialect<Db>, db: Db, token: FencingToken, update: FencedUpdate): Promise<FencedUpdateResult> {
  if (typeof dialect !== 'object' || dialect === null || typeof dialect.update !== 'function') {
    throw new InvalidArgumentError('dialect', 'expected postgresDialect, mysqlDialect or sqliteDialect from tenure/fencing: fencedUpdate(dialect, db, token, update)');
  }
  if (typeof db !== 'object' || db === null) throw new InvalidArgumentError('db', `expected your ${dialect.name} client, pool or database`);
  checkToken('token', token);
  if (typeof update !== 'object' || update === null) throw new InvalidArgumentError('update', 'expected { table, set, where }');
  const d = dialect;
  const setEntries = checkRowValues('set', update.set ?? {}, d.nulRefusal);
  const whereEntries = checkRowValues('where', update.where, d.nulRefusal);
  const setNames = setEntries.map(([col]) => col);
  const whereNames = whereEntries.map(([col]) => col);
  const shape = shapeKey(update, setNames, whereNames);
  let byShape = compiledUpdates.get(d);
  if (!byShape) compiledUpdates.set(d, (byShape = new Map()));
  let c = shape === null ? undefined : byShape.get(shape);
  if (!c) {
    c = compileUpdate(d, update, setNames, whereNames);
    if (shape !== null) {
      if (byShape.size >= COMPILED_MAX) byShape.clear();
      byShape.set(shape, c);
    }
  }

  const values: unknown[] = [];
  for (const [, v] of setEntries) values.push(d.bind(v));
  values.push(token.term);
  if (c.leaseColumn) values.push(token.lease);
  for (const [, v] of whereEntries) values.push(d.bind(v));
  values.push(token.term);
  if (c.leaseColumn) values.push(token.lease);
  if (c.leaseTable) values.push(token.term, token.lease);
  const updated = await explained(d, () => d.update(db, c.sql, values), c.leaseColumnName, c.leaseTableName);
  if (updated > 0) return { updated };

  // Nothing matched: no such row, or the update was refused. Only the report reads again; the
  // decision was made in the UPDATE itself.
  const seen = await d.select(db, c.seenSql, whereEntries.map(([, v]) => d.bind(v)));
  const rows: RowFence[] = seen.map((row) => ({ lease: leaseText(row.lease), last: termOf(row.last) }));
  let issued: number | null | undefined;
  if (c.leaseTable && rows.length > 0) {
    const l = await d.select(db, `SELECT term FROM ${c.leaseTable} WHERE name = ${d.lease(d.placeholder(1))}`, [token.lease]);
    issued = termOf(l[0]?.term);
  }
  const refusal = rowRefusal(token, update.table, rows, issued, c.current);
  if (refusal) throw refusal;
  return { updated: 0 };
}

/** A lease read back: text, or bytes (MySQL's binary comparison reads it as such). */
function leaseText(value: unknown): string | null {
  if (value === null || value === undefined) return null;
  return Buffer.isBuffer(value) ? value.toString('utf8') : String(value);
}

/** A missing lease column or lease table is the caller's setup, told as such. */
async function explained<T, Db>(d: SqlDialect<Db>, fn: () => Promise<T>, leaseColumn: string | null, leaseTable: string | null): Promise<T> {
  try {
    return await fn();
  } catch (err) {
    const missing = d.missing(err);
    const last = (name: string): string => name.split('.').pop() ?? name;
    if (missing?.kind === 'column' && leaseColumn !== null && last(missing.name) === leaseColumn) {
      throw new InvalidArgumentError(
        'leaseColumn',
        `the table has no column ${leaseColumn}: add it (ALTER TABLE … ADD COLUMN ${leaseColumn} ${d.leaseColumnType}), or pass leaseColumn: null to leave rows unbound`,
      );
    }
    if (missing?.kind === 'table' && leaseTable !== null && last(missing.name) === last(leaseTable)) {
      throw new InvalidArgumentError(
        'leaseTable',
        `no lease table ${leaseTable} in this database: name the store's (its table prefix + leases), or pass leaseTable: null when the leases live elsewhere (an unissued term is then not detected)`,
      );
    }
    throw err;
  }
}
