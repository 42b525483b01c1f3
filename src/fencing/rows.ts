/**
 * What `fencedUpdate` does the same in every SQL dialect: the checks of the caller's values, and
 * the reading of why an UPDATE that matched no row refused (the refusal itself is decided in the
 * UPDATE, safety rule 5; this only names it).
 */
import { InvalidArgumentError, StaleTermError, reportStale } from '../core/index.js';
import type { FencingToken } from '../core/index.js';

/** A column value `fencedUpdate` passes to the driver as a bind parameter. */
export type RowValue = string | number | bigint | boolean | Date | Buffer | Uint8Array | null;
/** A RowValue as checked: bytes always a Buffer. */
export type CheckedRowValue = Exclude<RowValue, Uint8Array> | Buffer;

/**
 * Every value of `set` or `where` is a plain SQL value: a string, a finite number, a bigint, a
 * boolean, a valid Date, bytes, or null. Anything else (undefined, an object, an array, NaN, a
 * function) is refused instead of being turned into NULL or text by the driver. With
 * `nulRefusal` (PostgreSQL, whose text cannot hold it), a string must not contain U+0000.
 */
export function checkRowValues(field: string, values: unknown, nulRefusal: string | null): [string, CheckedRowValue][] {
  if (typeof values !== 'object' || values === null || Array.isArray(values)) {
    throw new InvalidArgumentError(field, 'expected an object of column = value');
  }
  return Object.entries(values).map(([column, value]): [string, CheckedRowValue] => {
    const where = `${field}.${column}`;
    if (value === null || typeof value === 'boolean' || typeof value === 'bigint') return [column, value];
    if (typeof value === 'string') {
      if (nulRefusal !== null && value.includes('\u0000')) throw new InvalidArgumentError(where, `must not contain NUL (U+0000): ${nulRefusal}`);
      return [column, value];
    }
    if (typeof value === 'number') {
      if (!Number.isFinite(value)) throw new InvalidArgumentError(where, `expected a finite number, got ${String(value)}`);
      return [column, value];
    }
    if (value instanceof Date) {
      if (Number.isNaN(value.getTime())) throw new InvalidArgumentError(where, 'expected a valid Date, got an invalid one');
      return [column, value];
    }
    if (value instanceof Uint8Array) return [column, Buffer.isBuffer(value) ? value : Buffer.from(value)];
    const kind = value === undefined ? 'undefined' : Array.isArray(value) ? 'an array' : typeof value === 'object' ? 'an object' : typeof value;
    throw new InvalidArgumentError(where, `expected a string, finite number, bigint, boolean, Date, Buffer or null, got ${kind} (pass JSON as JSON.stringify(value))`);
  });
}

/** What the rows named by `where` hold, grouped by the lease bound to them. */
export interface RowFence {
  /** The lease the rows are bound to (null: not bound yet, or rows not bound at all). */
  readonly lease: string | null;
  /** The highest term that wrote them (null: never written fenced). */
  readonly last: number | null;
}

/**
 * Why an UPDATE that matched no row refused, or null when no row matched `where` at all (or the
 * rows changed since): a row bound to another lease (bad input), a row a newer term has written
 * (StaleTermError, reported), or a term the lease store never issued (bad input). `issued` is the
 * lease's latest term, or undefined when the lease table is not checked.
 */
export function rowRefusal(token: FencingToken, table: string, rows: readonly RowFence[], issued: number | null | undefined, current = false): Error | null {
  if (rows.length === 0) return null;
  const foreign = rows.find((r) => r.lease !== null && r.lease !== token.lease);
  if (foreign) {
    return new InvalidArgumentError('token.lease', `rows of ${table} are fenced by lease ${foreign.lease}, not ${token.lease}`);
  }
  const last = rows.reduce((m, r) => Math.max(m, r.last ?? 0), 0); // not Math.max(...): a fenced batch may match 100,000s of rows
  if (last > token.term) return reportStale(new StaleTermError(token.lease, token.term, last), { table });
  if (issued !== undefined && token.term > (issued ?? 0)) {
    return new InvalidArgumentError('token.term', `term ${token.term} was never issued for lease ${token.lease} (latest ${issued ?? 0})`);
  }
  // termCheck 'current': a term below the latest issued one is stale even where it wrote last.
  if (current && issued !== undefined && (issued ?? 0) > token.term) return reportStale(new StaleTermError(token.lease, token.term, issued ?? 0), { table });
  return null;
}

/** A term read back from a bigint column (a string from pg, a number from mysql2). */
export function termOf(value: unknown): number | null {
  if (value === null || value === undefined) return null;
  return Number(value);
}

/** `set` must not write the fencing columns themselves: fencedUpdate writes them. */
export function checkSetColumns(set: readonly [string, unknown][], reserved: readonly (string | null)[]): void {
  for (const [column] of set) {
    if (reserved.includes(column)) throw new InvalidArgumentError(`set.${column}`, 'is written by fencedUpdate itself (the token column or the lease column)');
  }
}

/** Checks `termCheck`. */
export function checkTermCheck(value: unknown, leaseTable: string | null): 'issued' | 'current' {
  if (value === undefined) return 'issued';
  if (value !== 'issued' && value !== 'current') throw new InvalidArgumentError('termCheck', `expected 'issued' or 'current', got ${JSON.stringify(value)}`);
  if (value === 'current' && leaseTable === null) throw new InvalidArgumentError('termCheck', "'current' needs the table of terms (leaseTable) in this database");
  return value;
}
