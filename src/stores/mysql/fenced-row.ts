/**
 * Fencing for the user's own tables: the `last_fence_token` pattern. Each guarded row keeps the
 * highest term that has written it; an update applies only if that term is <= the token's, and
 * records the token's term, in the SAME statement (safety rule 5). A stale writer's update
 * matches no row, and is reported as StaleTermError.
 *
 * The row count relies on mysql2's default FOUND_ROWS flag (matched rows, not changed rows).
 */
import { InvalidArgumentError, StaleTermError, checkSqlIdentifier, checkToken } from '../../core/index.js';
import type { FencingToken } from '../../core/index.js';
import type { MysqlExecutor, MysqlValue } from './driver.js';
import { ident } from './sql.js';

export interface FencedUpdate {
  /** The table, `accounts` or `billing.accounts` (identifiers only, never user data). */
  readonly table: string;
  /** Columns to set and their values (values are bind parameters). */
  readonly set: Readonly<Record<string, MysqlValue>>;
  /** Equality conditions naming the row(s), ANDed (at least one). */
  readonly where: Readonly<Record<string, MysqlValue>>;
  /** The BIGINT column holding the last term that wrote the row (default `last_fence_token`). */
  readonly tokenColumn?: string;
}

export interface FencedUpdateResult {
  /** Rows matched and updated; 0 when no row matched `where` (a stale token throws instead). */
  readonly updated: number;
}

function checkIdent(field: string, value: string): string {
  return checkSqlIdentifier(field, value, 64);
}

function tableName(table: string): string {
  const parts = typeof table === 'string' ? table.split('.') : [];
  if (parts.length < 1 || parts.length > 2) throw new InvalidArgumentError('table', `expected TABLE or DATABASE.TABLE, got ${JSON.stringify(table)}`);
  return parts.map((p) => ident(checkIdent('table', p))).join('.');
}

/**
 * `UPDATE table SET …, last_fence_token = term WHERE … AND (last_fence_token IS NULL OR
 * last_fence_token <= term)` as one statement on `db` (a mysql2/promise Pool or Connection, also
 * inside the caller's own transaction). Rejects with StaleTermError when the row has seen a newer term.
 */
export async function fencedUpdate(db: MysqlExecutor, token: FencingToken, update: FencedUpdate): Promise<FencedUpdateResult> {
  checkToken('token', token);
  const table = tableName(update.table);
  const tokenColumn = ident(checkIdent('tokenColumn', update.tokenColumn ?? 'last_fence_token'));
  const setEntries = Object.entries(update.set ?? {});
  const whereEntries = Object.entries(update.where ?? {});
  if (whereEntries.length === 0) throw new InvalidArgumentError('where', 'expected at least one column = value condition');
  // MySQL evaluates SET left to right, so the token column is assigned last, and the WHERE
  // (evaluated before any assignment) sees the row's previous token.
  const sets = setEntries.map(([col]) => `${ident(checkIdent('set', col))} = ?`);
  sets.push(`${tokenColumn} = ?`);
  const where = whereEntries.map(([col]) => `${ident(checkIdent('where', col))} = ?`).join(' AND ');
  const whereValues = whereEntries.map(([, v]) => v);
  const [result] = await db.execute(
    `UPDATE ${table} SET ${sets.join(', ')} WHERE ${where} AND (${tokenColumn} IS NULL OR ${tokenColumn} <= ?)`,
    [...setEntries.map(([, v]) => v), token.term, ...whereValues, token.term],
  );
  const updated = Number((result as { affectedRows?: unknown }).affectedRows ?? 0);
  if (updated > 0) return { updated };
  // Nothing matched: either no such row, or a newer term has written it. Only the report reads
  // again; the decision was made in the UPDATE itself.
  const [rows] = await db.execute(`SELECT MAX(${tokenColumn}) AS last FROM ${table} WHERE ${where}`, whereValues);
  const last = (rows as Record<string, unknown>[])[0]?.last;
  if (last !== null && last !== undefined && Number(last) > token.term) throw new StaleTermError(token.lease, token.term, Number(last));
  return { updated: 0 };
}
