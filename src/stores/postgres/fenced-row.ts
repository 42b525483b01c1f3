/**
 * Fencing for the user's own tables: the `last_fence_token` pattern. Each guarded row keeps the
 * highest term that has written it; an update applies only if that term is <= the token's, and
 * records the token's term, in the SAME statement (safety rule 5). A stale writer's update
 * matches no row, and is reported as StaleTermError.
 */
import { InvalidArgumentError, StaleTermError, checkSqlIdentifier, checkToken } from '../../core/index.js';
import type { FencingToken } from '../../core/index.js';
import type { PgQueryable } from './driver.js';
import { ident } from './sql.js';

export interface FencedUpdate {
  /** The table, `accounts` or `billing.accounts` (identifiers only, never user data). */
  readonly table: string;
  /** Columns to set and their values (values are bind parameters). */
  readonly set: Readonly<Record<string, unknown>>;
  /** Equality conditions naming the row(s), ANDed (at least one). */
  readonly where: Readonly<Record<string, unknown>>;
  /** The bigint column holding the last term that wrote the row (default `last_fence_token`). */
  readonly tokenColumn?: string;
}

export interface FencedUpdateResult {
  /** Rows updated; 0 when no row matched `where` (a stale token throws instead). */
  readonly updated: number;
}

function checkIdent(field: string, value: string): string {
  return checkSqlIdentifier(field, value, 63);
}

function tableName(table: string): string {
  const parts = typeof table === 'string' ? table.split('.') : [];
  if (parts.length < 1 || parts.length > 2) throw new InvalidArgumentError('table', `expected TABLE or SCHEMA.TABLE, got ${JSON.stringify(table)}`);
  return parts.map((p) => ident(checkIdent('table', p))).join('.');
}

/**
 * `UPDATE table SET …, last_fence_token = term WHERE … AND (last_fence_token IS NULL OR
 * last_fence_token <= term)` as one statement on `db` (a pg Pool, Client, or a client inside the
 * caller's own transaction). Rejects with StaleTermError when the row has seen a newer term.
 */
export async function fencedUpdate(db: PgQueryable, token: FencingToken, update: FencedUpdate): Promise<FencedUpdateResult> {
  checkToken('token', token);
  const table = tableName(update.table);
  const tokenColumn = ident(checkIdent('tokenColumn', update.tokenColumn ?? 'last_fence_token'));
  const setEntries = Object.entries(update.set ?? {});
  const whereEntries = Object.entries(update.where ?? {});
  if (whereEntries.length === 0) throw new InvalidArgumentError('where', 'expected at least one column = value condition');
  const values: unknown[] = [];
  const param = (v: unknown): string => {
    values.push(v);
    return `$${values.length}`;
  };
  const term = param(token.term);
  const sets = setEntries.map(([col, v]) => `${ident(checkIdent('set', col))} = ${param(v)}`);
  sets.push(`${tokenColumn} = ${term}::bigint`);
  const conds = whereEntries.map(([col, v]) => `${ident(checkIdent('where', col))} = ${param(v)}`);
  const where = conds.join(' AND ');
  const r = await db.query(
    `UPDATE ${table} SET ${sets.join(', ')} WHERE ${where} AND (${tokenColumn} IS NULL OR ${tokenColumn} <= ${term}::bigint)`,
    values,
  );
  const updated = r.rowCount ?? 0;
  if (updated > 0) return { updated };
  // Nothing matched: either no such row, or a newer term has written it. Only the report reads
  // again; the decision was made in the UPDATE itself.
  const whereValues = whereEntries.map(([, v]) => v);
  const selectWhere = whereEntries.map(([col], i) => `${ident(col)} = $${i + 1}`).join(' AND ');
  const seen = await db.query(`SELECT max(${tokenColumn}) AS last FROM ${table} WHERE ${selectWhere}`, whereValues);
  const last = seen.rows[0]?.last;
  if (last !== null && last !== undefined && Number(last) > token.term) throw new StaleTermError(token.lease, token.term, Number(last));
  return { updated: 0 };
}
