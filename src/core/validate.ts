/**
 * Input checks shared by every store and layer. Each throws InvalidArgumentError naming the
 * field and the allowed range.
 */
import { InvalidArgumentError, StoreDataError } from './errors.js';
import type { FencingToken, LeaseMeta, RenewManyItem, StreamEntry } from './types.js';

export const limits = {
  nameMaxLength: 200,
  ownerMaxLength: 200,
  ttlMinMs: 10,
  ttlMaxMs: 24 * 60 * 60 * 1000,
  metaMaxBytes: 16 * 1024,
  payloadMaxBytes: 1024 * 1024,
  readLimitDefault: 1000,
  readLimitMax: 10_000,
} as const;

// eslint-disable-next-line no-control-regex
const CONTROL = /[\u0000-\u001f\u007f-\u009f]/;
/** With the u flag a surrogate pair is one code point, so this matches only a lone surrogate. */
const LONE_SURROGATE = /[\uD800-\uDFFF]/u;

function checkText(field: string, value: unknown, max: number): string {
  if (typeof value !== 'string') throw new InvalidArgumentError(field, `expected a string, got ${typeof value}`);
  if (value.length === 0) throw new InvalidArgumentError(field, 'must not be empty');
  if (value.length > max) throw new InvalidArgumentError(field, `must be at most ${max} characters, got ${value.length}`);
  if (CONTROL.test(value)) throw new InvalidArgumentError(field, 'must not contain control characters');
  // A lone surrogate has no UTF-8 form: PostgreSQL, MySQL and Redis would store it as U+FFFD, so
  // 'g\uD800', 'g\uDBFF' and 'g\uFFFD' would name one lease there and three in memory.
  if (LONE_SURROGATE.test(value)) throw new InvalidArgumentError(field, 'must be well-formed Unicode (a lone surrogate has no UTF-8 form)');
  return value;
}

/** A lease, group or stream name: 1..200 characters, well-formed UTF-16, no control characters. */
export function checkName(field: string, value: unknown): string {
  return checkText(field, value, limits.nameMaxLength);
}

/** An owner or node id: 1..200 characters, well-formed UTF-16, no control characters. */
export function checkOwner(field: string, value: unknown): string {
  return checkText(field, value, limits.ownerMaxLength);
}

/** An integer number of ms in [min, max]. */
export function checkMs(field: string, value: unknown, min: number, max: number): number {
  if (typeof value !== 'number' || !Number.isInteger(value)) {
    throw new InvalidArgumentError(field, `expected an integer number of ms in [${min}, ${max}], got ${String(value)}`);
  }
  if (value < min || value > max) {
    throw new InvalidArgumentError(field, `must be in [${min}, ${max}] ms, got ${value}`);
  }
  return value;
}

/** A lease TTL: an integer in [10 ms, 24 h]. */
export function checkTtl(field: string, value: unknown): number {
  return checkMs(field, value, limits.ttlMinMs, limits.ttlMaxMs);
}

/** A term: a positive safe integer. */
export function checkTerm(field: string, value: unknown): number {
  if (typeof value !== 'number' || !Number.isSafeInteger(value) || value < 1) {
    throw new InvalidArgumentError(field, `expected a positive integer term, got ${String(value)}`);
  }
  return value;
}

/**
 * A stream entry as a store read it back: its term is checked as `decodeTerm` checks a lease's
 * (an entry written by hand or by another program gets a StoreDataError, never a rounded term),
 * and its position must be a whole number >= 1.
 */
export function decodeStreamEntry(store: string, stream: string, row: { seq: unknown; lease: string; term: unknown; payload: string; appendedAt?: unknown }): StreamEntry {
  const seq = typeof row.seq === 'string' && /^[0-9]{1,16}$/.test(row.seq) ? Number(row.seq) : typeof row.seq === 'bigint' ? Number(row.seq) : row.seq;
  if (typeof seq !== 'number' || !Number.isSafeInteger(seq) || seq < 1) {
    throw new StoreDataError(`${store} store: stream ${JSON.stringify(stream)} holds an entry at position ${String(row.seq).slice(0, 40)}, which is not an integer in [1, ${Number.MAX_SAFE_INTEGER}]`);
  }
  return { stream, seq, lease: row.lease, term: decodeTerm(store, row.lease, row.term), payload: row.payload, appendedAt: decodeAppendedAt(row.appendedAt) };
}

/**
 * An entry's append time as a store gave it (a number, a bigint or a decimal string, ms since the
 * epoch, maybe with a fraction): whole ms, or 0 (unknown) for a missing or unusable value. It
 * only feeds lag reports, so a bad one is reported as unknown rather than failing the read.
 */
export function decodeAppendedAt(value: unknown): number {
  const n = typeof value === 'bigint' ? Number(value) : typeof value === 'string' && value !== '' ? Number(value) : value;
  if (typeof n !== 'number' || !Number.isFinite(n) || n <= 0 || n > Number.MAX_SAFE_INTEGER) return 0;
  return Math.floor(n);
}

/**
 * A term read back from a store (`value` as the driver gave it: a number, a bigint or a decimal
 * string). Only a non-negative safe integer is a term tenure can compare and bump exactly; anything
 * else (a term beyond 2^53 - 1, which a driver may already have rounded, a float, a word) is a
 * StoreDataError naming the store and the lease, never a number to do arithmetic on.
 */
export function decodeTerm(store: string, lease: string, value: unknown): number {
  let term: number | null = null;
  if (typeof value === 'number') term = value;
  else if (typeof value === 'bigint') term = value <= BigInt(Number.MAX_SAFE_INTEGER) && value >= 0n ? Number(value) : null;
  else if (typeof value === 'string' && /^[0-9]{1,16}$/.test(value)) term = Number(value);
  if (term === null || !Number.isSafeInteger(term) || term < 0) {
    const shown = typeof value === 'string' ? JSON.stringify(value.slice(0, 40)) : String(value);
    throw new StoreDataError(
      `${store} store: lease ${JSON.stringify(lease)} holds term ${shown}, which is not an integer in [0, ${Number.MAX_SAFE_INTEGER}]; ` +
        'tenure cannot order or bump it exactly (was the row written by hand or by another program?)',
    );
  }
  return term;
}

/** The term after `term` for a new holder; StoreDataError when it would leave the safe-integer range. */
export function nextTerm(lease: string, term: number): number {
  if (term >= Number.MAX_SAFE_INTEGER) {
    throw new StoreDataError(`lease ${JSON.stringify(lease)} is at term ${term}, the highest tenure can issue; no new term can be issued`);
  }
  return term + 1;
}

/**
 * The error for a lease whose store refused, in its own statement or script, to issue the term after
 * `value` (PostgreSQL and Redis bump terms server-side and write nothing past 2^53 - 1). Throws
 * decodeTerm's error instead when `value` itself is beyond the safe-integer range.
 */
export function termExhausted(store: string, lease: string, value: unknown): StoreDataError {
  const term = decodeTerm(store, lease, value);
  return new StoreDataError(
    `${store} store: lease ${JSON.stringify(lease)} is at term ${term}, the highest tenure can issue; no new term can be issued (nothing was written)`,
  );
}

/**
 * A renewMany batch: an array of distinct valid names with valid terms, of at most `max` items
 * when the store gives a bound (Redis renews a batch in one script).
 */
export function checkRenewItems(leases: readonly RenewManyItem[], max?: number): void {
  if (!Array.isArray(leases)) throw new InvalidArgumentError('leases', 'expected an array of { name, term }');
  if (max !== undefined && leases.length > max) throw new InvalidArgumentError('leases', `at most ${max} per call, got ${leases.length}`);
  const seen = new Set<string>();
  leases.forEach((l, i) => {
    checkName(`leases[${i}].name`, l?.name);
    checkTerm(`leases[${i}].term`, l?.term);
    if (seen.has(l.name)) throw new InvalidArgumentError(`leases[${i}].name`, `duplicate lease name '${l.name}'`);
    seen.add(l.name);
  });
}

export function checkToken(field: string, value: unknown): FencingToken {
  if (typeof value !== 'object' || value === null) throw new InvalidArgumentError(field, 'expected a fencing token { lease, term }');
  const token = value as Partial<FencingToken>;
  checkName(`${field}.lease`, token.lease);
  checkTerm(`${field}.term`, token.term);
  return token as FencingToken;
}

/** Serialize meta, enforcing that it is a JSON object of at most 16 KiB. */
export function encodeMeta(field: string, meta: LeaseMeta | undefined): string {
  if (meta === undefined) return '{}';
  if (typeof meta !== 'object' || meta === null || Array.isArray(meta)) {
    throw new InvalidArgumentError(field, 'expected a JSON object');
  }
  let text: string;
  try {
    text = JSON.stringify(meta);
  } catch (err) {
    throw new InvalidArgumentError(field, `not serializable as JSON (${(err as Error).message})`);
  }
  if (Buffer.byteLength(text) > limits.metaMaxBytes) {
    throw new InvalidArgumentError(field, `must be at most ${limits.metaMaxBytes} bytes as JSON`);
  }
  return text;
}

/** How many characters of a stored meta that is not a JSON object `decodeMeta` keeps, flagged. */
export const INVALID_META_CHARS = 64;

/**
 * Parse a stored meta. A stored text that is not a JSON object (written by another program, or
 * damaged) does not fail the read or list that met it: the lease is reported with the meta
 * `{ invalidMeta: <its first 64 characters> }`, so one bad row never hides the others.
 */
export function decodeMeta(text: string | null | undefined): LeaseMeta {
  if (!text || text === '{}') return {}; // the usual meta, without a parse
  try {
    const meta: unknown = JSON.parse(text);
    if (typeof meta === 'object' && meta !== null && !Array.isArray(meta)) return meta as LeaseMeta;
  } catch {
    // not JSON: flagged below
  }
  return { invalidMeta: text.slice(0, INVALID_META_CHARS) };
}

export function checkPayload(field: string, value: unknown): string {
  if (typeof value !== 'string') throw new InvalidArgumentError(field, `expected a string, got ${typeof value}`);
  // Stored as UTF-8 text by the SQL and Redis stores, which would turn a lone surrogate into U+FFFD.
  if (LONE_SURROGATE.test(value)) throw new InvalidArgumentError(field, 'must be well-formed Unicode (a lone surrogate has no UTF-8 form)');
  if (Buffer.byteLength(value) > limits.payloadMaxBytes) {
    throw new InvalidArgumentError(field, `must be at most ${limits.payloadMaxBytes} bytes`);
  }
  return value;
}

/** appendFenced's options: the expected head, a safe integer >= 0, or undefined when not given. */
export function checkAppendOptions(options: { expectSeq?: number } | undefined): number | undefined {
  if (options === undefined) return undefined;
  if (typeof options !== 'object' || options === null) throw new InvalidArgumentError('options', 'expected an object such as { expectSeq: 3 }');
  const expectSeq = options.expectSeq;
  if (expectSeq === undefined) return undefined;
  if (typeof expectSeq !== 'number' || !Number.isSafeInteger(expectSeq) || expectSeq < 0) {
    throw new InvalidArgumentError('expectSeq', `expected an integer >= 0 (the stream's current last seq, 0 when empty), got ${String(expectSeq)}`);
  }
  return expectSeq;
}

/** Normalize readStream options: after >= 0, 1 <= limit <= 10000. */
export function checkReadOptions(options: { after?: number; limit?: number } | undefined): { after: number; limit: number } {
  const after = options?.after ?? 0;
  const limit = options?.limit ?? limits.readLimitDefault;
  if (!Number.isSafeInteger(after) || after < 0) throw new InvalidArgumentError('after', `expected an integer >= 0, got ${String(after)}`);
  if (!Number.isSafeInteger(limit) || limit < 1 || limit > limits.readLimitMax) {
    throw new InvalidArgumentError('limit', `must be an integer in [1, ${limits.readLimitMax}], got ${String(limit)}`);
  }
  return { after, limit };
}

/**
 * Parse a duration: `1500`, `1500ms`, `10s`, `2m`, `1h`. Returns ms.
 * Throws InvalidArgumentError naming `field` on anything else.
 */
export function parseDuration(field: string, text: string): number {
  const m = /^(\d+(?:\.\d+)?)(ms|s|m|h)?$/.exec(text.trim());
  if (!m) throw new InvalidArgumentError(field, `expected a duration such as 1500, 1500ms, 10s or 2m, got '${text}'`);
  const factor = { ms: 1, s: 1000, m: 60_000, h: 3_600_000 }[(m[2] ?? 'ms') as 'ms' | 's' | 'm' | 'h'];
  const ms = Math.round(Number(m[1]) * factor);
  if (!Number.isSafeInteger(ms)) throw new InvalidArgumentError(field, `duration too large: '${text}'`);
  return ms;
}

/** The identifier pattern per maximum length, compiled once (fencedUpdate checks several per call). */
const identifierPatterns = new Map<number, RegExp>();

/**
 * An SQL identifier the SQL stores may quote into a statement (a table or column name, never
 * user data): a letter or underscore, then letters, digits, `_` or `$`, at most `maxLength`
 * characters (PostgreSQL 63, MySQL 64).
 */
export function checkSqlIdentifier(field: string, value: unknown, maxLength: number): string {
  let re = identifierPatterns.get(maxLength);
  if (!re) identifierPatterns.set(maxLength, (re = new RegExp(`^[A-Za-z_][A-Za-z0-9_$]{0,${maxLength - 1}}$`)));
  if (typeof value !== 'string' || !re.test(value)) {
    throw new InvalidArgumentError(field, `expected an SQL identifier matching ${re.source}, got ${JSON.stringify(value)}`);
  }
  return value;
}

const TABLE_PREFIX = /^[A-Za-z_][A-Za-z0-9_]{0,39}$/;

/** A table prefix for the SQL stores: letters, digits and underscores, not starting with a digit, <= 40 chars. */
export function checkTablePrefix(value: unknown): string {
  if (typeof value !== 'string' || !TABLE_PREFIX.test(value)) {
    throw new InvalidArgumentError('tablePrefix', `expected an SQL identifier prefix matching ${TABLE_PREFIX.source}, got ${JSON.stringify(value)}`);
  }
  return value;
}

/** The prefix of `Store.purge`: a non-empty name (an empty one would match everything). */
export function checkPurgePrefix(value: unknown): string {
  return checkName('prefix', value);
}

/** The suffix of a group's hand-over hint (transferHintName); SQL stores spell the name with it in their statements. */
export const transferHintSuffix = '/transfer-to';

/**
 * The name of a group's hand-over hint, `GROUP/transfer-to` (the lease `LeaderElector.transferTo`
 * writes, naming the node to hand over to), or null when that is longer than a lease name may be.
 * Stores that hand a lease over in a release check it is not held (see `AcquireResult.noTransferHint`).
 */
export function transferHintName(group: string): string | null {
  try {
    return checkName('group', `${group}${transferHintSuffix}`);
  } catch {
    return null;
  }
}
