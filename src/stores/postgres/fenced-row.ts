/**
 * Fencing for the user's own tables: the `last_fence_token` pattern. Each guarded row keeps the
 * highest term that has written it and the lease that term belongs to; an update applies only if
 * the row is the token's lease's (or not bound yet), its term is <= the token's, and the term was
 * issued by the lease store (when its table is in the same database), and records the token's
 * lease and term, in the SAME statement (safety rule 5). A refused update matches no row, and is
 * reported as StaleTermError (a newer term wrote the row) or InvalidArgumentError (another
 * lease's row, or a term never issued).
 */
import { InvalidArgumentError, checkSqlIdentifier, checkToken } from '../../core/index.js';
import type { FencingToken } from '../../core/index.js';
import { checkRowValues, checkSetColumns, rowRefusal, termOf } from '../fenced-rows.js';
import type { RowFence, RowValue } from '../fenced-rows.js';
import type { PgQueryable } from './driver.js';
import { ident } from './sql.js';

export interface FencedUpdate {
  /** The table, `accounts` or `billing.accounts` (identifiers only, never user data). */
  readonly table: string;
  /** Columns to set and their values (bind parameters: string, finite number, bigint, boolean, Date, Buffer or null). */
  readonly set: Readonly<Record<string, RowValue>>;
  /** Equality conditions naming the row(s), ANDed (at least one). */
  readonly where: Readonly<Record<string, RowValue>>;
  /** The bigint column holding the last term that wrote the row (default `last_fence_token`). */
  readonly tokenColumn?: string;
  /**
   * The text column binding the row to the lease whose terms fence it (default
   * `last_fence_lease`). A row bound to one lease refuses every other lease's token. `null`: rows
   * are not bound (then use one lease's terms per table: terms of different leases do not compare).
   */
  readonly leaseColumn?: string | null;
  /**
   * tenure's lease table in this database (default `tenure_leases`, the store's with the default
   * table prefix), read in the same statement to check that the token's term was issued, so a
   * forged term cannot poison a row. `null` when the leases live in another database or store:
   * then an unissued term is not detected.
   */
  readonly leaseTable?: string | null;
}

export interface FencedUpdateResult {
  /** Rows updated; 0 when no row matched `where` (a refused token throws instead). */
  readonly updated: number;
}

function checkIdent(field: string, value: string): string {
  return checkSqlIdentifier(field, value, 63);
}

function tableName(field: string, table: string): string {
  const parts = typeof table === 'string' ? table.split('.') : [];
  if (parts.length < 1 || parts.length > 2) throw new InvalidArgumentError(field, `expected TABLE or SCHEMA.TABLE, got ${JSON.stringify(table)}`);
  return parts.map((p) => ident(checkIdent(field, p))).join('.');
}

/**
 * `UPDATE table SET …, last_fence_token = term, last_fence_lease = lease WHERE … AND
 * (last_fence_token IS NULL OR last_fence_token <= term) AND (last_fence_lease IS NULL OR
 * last_fence_lease = lease) AND term <= (the lease's latest term in tenure_leases)` as one
 * statement on `db` (a pg Pool, Client, or a client inside the caller's own transaction).
 */
export async function fencedUpdate(db: PgQueryable, token: FencingToken, update: FencedUpdate): Promise<FencedUpdateResult> {
  checkToken('token', token);
  if (typeof update !== 'object' || update === null) throw new InvalidArgumentError('update', 'expected { table, set, where }');
  const table = tableName('table', update.table);
  const tokenColumn = ident(checkIdent('tokenColumn', update.tokenColumn ?? 'last_fence_token'));
  const leaseColumnName = update.leaseColumn === undefined ? 'last_fence_lease' : update.leaseColumn;
  const leaseColumn = leaseColumnName === null ? null : ident(checkIdent('leaseColumn', leaseColumnName));
  const leaseTableName = update.leaseTable === undefined ? 'tenure_leases' : update.leaseTable;
  const leaseTable = leaseTableName === null ? null : tableName('leaseTable', leaseTableName);
  const setEntries = checkRowValues('set', update.set ?? {}, true);
  const whereEntries = checkRowValues('where', update.where, true);
  checkSetColumns(setEntries, [update.tokenColumn ?? 'last_fence_token', leaseColumnName]);
  if (whereEntries.length === 0) throw new InvalidArgumentError('where', 'expected at least one column = value condition');
  const values: unknown[] = [];
  const param = (v: unknown): string => {
    values.push(v);
    return `$${values.length}`;
  };
  const term = `${param(token.term)}::bigint`;
  const lease = leaseColumn || leaseTable ? `${param(token.lease)}::text` : '';
  const sets = setEntries.map(([col, v]) => `${ident(checkIdent('set', col))} = ${param(v)}`);
  sets.push(`${tokenColumn} = ${term}`);
  if (leaseColumn) sets.push(`${leaseColumn} = ${lease}`);
  const conds = whereEntries.map(([col, v]) => `${ident(checkIdent('where', col))} = ${param(v)}`);
  conds.push(`(${tokenColumn} IS NULL OR ${tokenColumn} <= ${term})`);
  if (leaseColumn) conds.push(`(${leaseColumn} IS NULL OR ${leaseColumn} = ${lease})`);
  if (leaseTable) conds.push(`${term} <= (SELECT l.term FROM ${leaseTable} AS l WHERE l.name = ${lease})`);
  const r = await run(() => db.query(`UPDATE ${table} SET ${sets.join(', ')} WHERE ${conds.join(' AND ')}`, values), leaseColumnName, leaseTableName);
  const updated = r.rowCount ?? 0;
  if (updated > 0) return { updated };
  // Nothing matched: no such row, or the update was refused. Only the report reads again; the
  // decision was made in the UPDATE itself.
  const whereValues = whereEntries.map(([, v]) => v);
  const selectWhere = whereEntries.map(([col], i) => `${ident(col)} = $${i + 1}`).join(' AND ');
  const seen = await db.query(
    `SELECT ${leaseColumn ?? 'NULL::text'} AS lease, max(${tokenColumn}) AS last FROM ${table} WHERE ${selectWhere} GROUP BY 1`,
    whereValues,
  );
  const rows: RowFence[] = seen.rows.map((row) => ({ lease: typeof row.lease === 'string' ? row.lease : null, last: termOf(row.last) }));
  let issued: number | null | undefined;
  if (leaseTable && rows.length > 0) {
    const l = await db.query(`SELECT term FROM ${leaseTable} WHERE name = $1`, [token.lease]);
    issued = termOf(l.rows[0]?.term);
  }
  const refusal = rowRefusal(token, update.table, rows, issued);
  if (refusal) throw refusal;
  return { updated: 0 };
}

/** A missing lease column or lease table is the caller's setup, told as such. */
async function run<T>(fn: () => Promise<T>, leaseColumn: string | null, leaseTable: string | null): Promise<T> {
  try {
    return await fn();
  } catch (err) {
    const e = err as { code?: unknown; message?: unknown };
    const message = typeof e.message === 'string' ? e.message : '';
    if (e.code === '42703' && leaseColumn !== null && message.includes(`"${leaseColumn}"`)) {
      throw new InvalidArgumentError(
        'leaseColumn',
        `the table has no column ${leaseColumn}: add it (ALTER TABLE … ADD COLUMN ${leaseColumn} text), or pass leaseColumn: null to leave rows unbound`,
      );
    }
    if (e.code === '42P01' && leaseTable !== null && message.includes(`"${leaseTable.split('.').pop()}"`)) {
      throw new InvalidArgumentError(
        'leaseTable',
        `no lease table ${leaseTable} in this database: name the store's (its table prefix + leases), or pass leaseTable: null when the leases live elsewhere (an unissued term is then not detected)`,
      );
    }
    throw err;
  }
}
