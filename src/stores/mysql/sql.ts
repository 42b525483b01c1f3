/**
 * Every statement the MySQL/MariaDB store sends, built once per table prefix. Identifiers come
 * only from the validated prefix; every value is a bind parameter (user text is never
 * interpolated). Time is the server's `UTC_TIMESTAMP(6)` (the same instant throughout one
 * statement, and independent of the session time zone), stored in DATETIME(6).
 *
 * Names are VARBINARY: compared byte for byte, with no trailing-space padding and no collation,
 * so `a` and `a ` are different leases, and `%`/`_` are plain characters.
 */
import { InvalidArgumentError } from '../../core/index.js';

export const SCHEMA_VERSION = 1;

const PREFIX = /^[A-Za-z_][A-Za-z0-9_]{0,39}$/;

/** A table prefix: letters, digits and underscores, starting with a letter or underscore, <= 40 chars. */
export function checkPrefix(prefix: unknown): string {
  if (typeof prefix !== 'string' || !PREFIX.test(prefix)) {
    throw new InvalidArgumentError('tablePrefix', `expected an SQL identifier prefix matching ${PREFIX.source}, got ${JSON.stringify(prefix)}`);
  }
  return prefix;
}

/** Quote a validated identifier. */
export function ident(name: string): string {
  return `\`${name.replace(/`/g, '``')}\``;
}

const NOW = 'UTC_TIMESTAMP(6)';
const COLS = `name, owner, term, ttl_ms, meta, TIMESTAMPDIFF(MICROSECOND, ${NOW}, expires_at) AS remaining_us`;
const LIVE = `owner IS NOT NULL AND expires_at > ${NOW}`;
const TABLE_OPTS = 'ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin';
/** The batch of a renewMany as one JSON parameter: [{"n": name, "t": term}, …]. */
const BATCH = `JSON_TABLE(?, '$[*]' COLUMNS (ord FOR ORDINALITY, n VARCHAR(200) PATH '$.n', t BIGINT PATH '$.t')) AS r`;

export interface MysqlSql {
  readonly lockName: string;
  readonly schemaTable: string;
  readonly schema: readonly string[];
  readonly lockRow: string;
  readonly insertLease: string;
  readonly updateLease: string;
  readonly renew: string;
  readonly renewMany: string;
  readonly renewManyReport: string;
  readonly release: string;
  readonly readLive: string;
  readonly readAny: string;
  readonly list: string;
  readonly lockFence: string;
  readonly issued: string;
  readonly insertFence: string;
  readonly raiseFence: string;
  readonly bumpHead: string;
  readonly insertEntry: string;
  readonly highest: string;
  readonly readStream: string;
}

export function buildSql(prefix: string): MysqlSql {
  const schemaTable = ident(`${prefix}schema`);
  const L = ident(`${prefix}leases`);
  const F = ident(`${prefix}fences`);
  const H = ident(`${prefix}stream_heads`);
  const S = ident(`${prefix}streams`);
  return {
    lockName: `tenure:${prefix}`,
    schemaTable,
    schema: [
      `CREATE TABLE IF NOT EXISTS ${L} (
         name VARBINARY(800) NOT NULL PRIMARY KEY, owner VARBINARY(800) NULL, term BIGINT NOT NULL,
         expires_at DATETIME(6) NOT NULL, ttl_ms INT NOT NULL, meta TEXT NOT NULL) ${TABLE_OPTS}`,
      `CREATE TABLE IF NOT EXISTS ${F} (name VARBINARY(800) NOT NULL PRIMARY KEY, max_term BIGINT NOT NULL) ${TABLE_OPTS}`,
      `CREATE TABLE IF NOT EXISTS ${H} (stream VARBINARY(800) NOT NULL PRIMARY KEY, last_seq BIGINT NOT NULL) ${TABLE_OPTS}`,
      `CREATE TABLE IF NOT EXISTS ${S} (
         stream VARBINARY(800) NOT NULL, seq BIGINT NOT NULL, lease VARBINARY(800) NOT NULL, term BIGINT NOT NULL,
         payload LONGTEXT NOT NULL, PRIMARY KEY (stream, seq)) ${TABLE_OPTS}`,
    ],
    lockRow: `SELECT ${COLS} FROM ${L} WHERE name = ? FOR UPDATE`,
    insertLease: `INSERT INTO ${L} (name, owner, term, expires_at, ttl_ms, meta) VALUES (?, ?, ?, ${NOW} + INTERVAL ? MICROSECOND, ?, ?)`,
    updateLease: `UPDATE ${L} SET owner = ?, term = ?, expires_at = ${NOW} + INTERVAL ? MICROSECOND, ttl_ms = ?, meta = ? WHERE name = ?`,
    // Compare-and-set on owner and term of a live lease, one statement.
    renew: `UPDATE ${L} SET expires_at = ${NOW} + INTERVAL ? MICROSECOND, ttl_ms = ? WHERE name = ? AND owner = ? AND term = ? AND ${LIVE}`,
    // The whole batch in one statement: (owner, ttl µs, ttl ms, batch JSON).
    renewMany: `UPDATE ${L} AS l JOIN ${BATCH} ON l.name = r.n AND l.term = r.t
      SET l.expires_at = ${NOW} + INTERVAL ? MICROSECOND, l.ttl_ms = ? WHERE l.owner = ? AND l.expires_at > ${NOW}`,
    renewManyReport: `SELECT r.ord, r.n, r.t, l.name, l.owner, l.term, l.ttl_ms, l.meta,
        TIMESTAMPDIFF(MICROSECOND, ${NOW}, l.expires_at) AS remaining_us,
        (l.owner IS NOT NULL AND l.expires_at > ${NOW}) AS live
      FROM ${BATCH} LEFT JOIN ${L} AS l ON l.name = r.n ORDER BY r.ord`,
    release: `UPDATE ${L} SET owner = NULL, expires_at = ${NOW} WHERE name = ? AND owner = ? AND term = ? AND ${LIVE}`,
    readLive: `SELECT ${COLS} FROM ${L} WHERE name = ? AND ${LIVE}`,
    readAny: `SELECT ${COLS}, (${LIVE}) AS live FROM ${L} WHERE name = ?`,
    // Prefix by bytes: LENGTH is the prefix's UTF-8 length, LEFT on VARBINARY counts bytes.
    list: `SELECT ${COLS} FROM ${L} WHERE ${LIVE} AND LEFT(name, LENGTH(?)) = ? ORDER BY name`,
    lockFence: `SELECT max_term FROM ${F} WHERE name = ? FOR UPDATE`,
    issued: `SELECT term FROM ${L} WHERE name = ?`,
    insertFence: `INSERT INTO ${F} (name, max_term) VALUES (?, ?)`,
    raiseFence: `UPDATE ${F} SET max_term = ? WHERE name = ?`,
    // The new last_seq comes back as the statement's insert id (LAST_INSERT_ID(expr)).
    bumpHead: `INSERT INTO ${H} (stream, last_seq) VALUES (?, LAST_INSERT_ID(1)) ON DUPLICATE KEY UPDATE last_seq = LAST_INSERT_ID(last_seq + 1)`,
    insertEntry: `INSERT INTO ${S} (stream, seq, lease, term, payload) VALUES (?, ?, ?, ?, ?)`,
    highest: `SELECT max_term FROM ${F} WHERE name = ?`,
    readStream: `SELECT seq, lease, term, payload FROM ${S} WHERE stream = ? AND seq > ? ORDER BY seq LIMIT ?`,
  };
}
