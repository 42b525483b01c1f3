/**
 * Every statement the MySQL/MariaDB store sends, built once per table prefix. Identifiers come
 * only from the validated prefix; every value is a bind parameter (user text is never
 * interpolated). Time is the server's `UTC_TIMESTAMP(6)` (the same instant throughout one
 * statement, and independent of the session time zone), stored in DATETIME(6).
 *
 * Names are VARBINARY: compared byte for byte, with no trailing-space padding and no collation,
 * so `a` and `a ` are different leases, and `%`/`_` are plain characters.
 */
import { checkTablePrefix, transferHintSuffix } from '../../core/index.js';

/**
 * 1: the four tables.
 * 2: adds the stored procedures `<prefix>append` and `<prefix>renew_many`, so that a fenced
 *    append and a batched renewal are each one round trip. Migrating 1 -> 2 creates them; the
 *    tables are unchanged.
 * 3: a stream's next sequence number is the stream's highest seq + 1, read under lock in the
 *    statement that writes the entry (the `appendFast` statement, and the procedure for the
 *    first append of a term). The stream head table is no longer written. Migrating 2 -> 3
 *    replaces the procedure; the tables are unchanged (a v2 head always equals the stream's
 *    highest seq, so numbering goes on without a gap). A v2 client refuses a v3 schema.
 * 4: a stream belongs to one lease, the lease of its entry 1: the procedure refuses a token of
 *    another lease and reports entry 1's lease as `first` (a store remembers it, and takes the
 *    one-statement paths only for a stream it knows is the token's lease's). Migrating 3 -> 4
 *    replaces the procedure; the tables are unchanged.
 * 5: stream entries carry their append time: `appended_at TIMESTAMP(3)` set by its default,
 *    CURRENT_TIMESTAMP(3), the server's clock (stored in UTC whatever the session's time zone),
 *    so the append statements are unchanged. Migrating 4 -> 5 adds the column (`addAppendedAt`,
 *    run only when missing); entries already there get the migration's time.
 * 6: adds the stored procedures `<prefix>acquire`, so that an acquire is one round trip (it was
 *    four: begin, lock the row, write, commit), and `<prefix>wake_wait`, so that a waiter's wake
 *    and its read of the row are one (they were two). Migrating 5 -> 6 creates them; the tables
 *    are unchanged, and a v5 client's acquire transaction decides the same.
 * 7: `<prefix>acquire` also reports `hinted`: whether a live lease named `NAME/transfer-to` (the
 *    elector's hand-over hint, core's transferHintName) was there when it won, read inside its
 *    transaction, so that a winner with none skips its hint read (AcquireResult.noTransferHint).
 *    Migrating 6 -> 7 replaces the procedure; the tables are unchanged, and a v6 client ignores
 *    the new column.
 * 8: adds `<prefix>release_wake`: a release and the letting go of the lease's wake lock in one
 *    round trip, run on the session that holds the wake lock (wake.ts), so that waiters wake as
 *    the release commits, not one more round trip later. Migrating 7 -> 8 creates it; the tables
 *    are unchanged, and a v7 client's release (a statement, then RELEASE_LOCK) decides the same.
 */
export const SCHEMA_VERSION = 8;

/** A table prefix: letters, digits and underscores, starting with a letter or underscore, <= 40 chars. */
export const checkPrefix = checkTablePrefix;

/** Quote a validated identifier. */
export function ident(name: string): string {
  return `\`${name.replace(/`/g, '``')}\``;
}

const NOW = 'UTC_TIMESTAMP(6)';
const COLS = `name, owner, term, ttl_ms, meta, TIMESTAMPDIFF(MICROSECOND, ${NOW}, expires_at) AS remaining_us`;
const LIVE = `owner IS NOT NULL AND expires_at > ${NOW}`;
const TABLE_OPTS = 'ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin';
/** The batch of a renewMany as one JSON parameter: [{"n": name, "t": term}, …]. */
const batch = (param: string): string => `JSON_TABLE(${param}, '$[*]' COLUMNS (ord FOR ORDINALITY, n VARCHAR(200) PATH '$.n', t BIGINT PATH '$.t')) AS r`;

export interface MysqlSql {
  readonly lockName: string;
  readonly schemaTable: string;
  readonly schema: readonly string[];
  /** (name, owner, ttl µs, ttl ms, meta): one row, `acquired` 1, 0, or NULL (nothing written: see the procedure), and the lease's columns. */
  readonly acquire: string;
  readonly renew: string;
  readonly renewMany: string;
  readonly release: string;
  readonly readLive: string;
  readonly readAny: string;
  /**
   * A waiter's one CALL (wake lock, seconds, name): wait for the wake lock; when got, let it go at
   * once; then read the lease. One row: `got` (1, 0 on timeout, NULL when interrupted) and the
   * lease's columns, NULL when the name has no row.
   */
  readonly wakeWait: string;
  /**
   * A holder's release on the session holding the wake lock (name, owner, term, wake lock): the
   * release statement (committed on its own: the session is in autocommit), then RELEASE_LOCK.
   * One row: `released` (1 when the lease was released, else 0).
   */
  readonly releaseWake: string;
  readonly list: string;
  readonly appendFast: string;
  readonly appendAt: string;
  readonly append: string;
  readonly highest: string;
  readonly appendExpect: string;
  readonly lockFence: string;
  readonly issued: string;
  readonly insertFence: string;
  readonly raiseFence: string;
  readonly lockHead: string;
  readonly firstLease: string;
  readonly insertEntry: string;
  readonly readStream: string;
  readonly readLast: string;
  /** The streams table's name as information_schema spells it, and the statement adding `appended_at`. */
  readonly streamsTable: string;
  readonly addAppendedAt: string;
  readonly streamHead: string;
  /**
   * A write whose commit makes every commit before it durable (see MysqlStore.readStream): it
   * flips a row of the schema table, so InnoDB logs it and, with innodb_flush_log_at_trx_commit=1,
   * flushes the redo log up to it before answering.
   */
  readonly durabilityBarrier: string;
  /** `purge`: one DELETE per table of the names starting with ? (bytes compared, never a LIKE pattern). */
  readonly purge: readonly string[];
}

export function buildSql(prefix: string): MysqlSql {
  const schemaTable = ident(`${prefix}schema`);
  const L = ident(`${prefix}leases`);
  const F = ident(`${prefix}fences`);
  const H = ident(`${prefix}stream_heads`);
  const S = ident(`${prefix}streams`);
  const appendProc = ident(`${prefix}append`);
  const renewManyProc = ident(`${prefix}renew_many`);
  const acquireProc = ident(`${prefix}acquire`);
  const wakeWaitProc = ident(`${prefix}wake_wait`);
  const releaseWakeProc = ident(`${prefix}release_wake`);
  /** A release: compare-and-set on owner and term of a live lease (the values as given: placeholders or parameters). */
  const release = (name: string, owner: string, term: string): string => `UPDATE ${L} SET owner = NULL, expires_at = ${NOW} WHERE name = ${name} AND owner = ${owner} AND term = ${term} AND ${LIVE}`;
  const startsWith = (column: string): string => `LEFT(${column}, LENGTH(CAST(? AS BINARY))) = CAST(? AS BINARY)`;
  return {
    purge: [
      `DELETE FROM ${L} WHERE ${startsWith('name')}`,
      `DELETE FROM ${F} WHERE ${startsWith('name')}`,
      `DELETE FROM ${S} WHERE ${startsWith('stream')}`,
      `DELETE FROM ${H} WHERE ${startsWith('stream')}`,
    ],
    durabilityBarrier: `INSERT INTO ${schemaTable} (\`key\`, value) VALUES ('durability-barrier', '1') ON DUPLICATE KEY UPDATE value = IF(value = '1', '0', '1')`,
    lockName: `tenure:${prefix}`,
    schemaTable,
    schema: [
      `CREATE TABLE IF NOT EXISTS ${L} (
         name VARBINARY(800) NOT NULL PRIMARY KEY, owner VARBINARY(800) NULL, term BIGINT NOT NULL,
         expires_at DATETIME(6) NOT NULL, ttl_ms INT NOT NULL, meta TEXT NOT NULL) ${TABLE_OPTS}`,
      `CREATE TABLE IF NOT EXISTS ${F} (name VARBINARY(800) NOT NULL PRIMARY KEY, max_term BIGINT NOT NULL) ${TABLE_OPTS}`,
      // Written by schema v2 only (kept so that the tables of every version are the same).
      `CREATE TABLE IF NOT EXISTS ${H} (stream VARBINARY(800) NOT NULL PRIMARY KEY, last_seq BIGINT NOT NULL) ${TABLE_OPTS}`,
      `CREATE TABLE IF NOT EXISTS ${S} (
         stream VARBINARY(800) NOT NULL, seq BIGINT NOT NULL, lease VARBINARY(800) NOT NULL, term BIGINT NOT NULL,
         payload LONGTEXT NOT NULL, PRIMARY KEY (stream, seq)) ${TABLE_OPTS}`,
      // Fenced append, one transaction in one round trip. The fence row is locked FOR UPDATE
      // first: appends under one lease are serialized from there to COMMIT, and no higher term
      // can be accepted meanwhile. A term equal to the highest accepted needs nothing more (it
      // was issued when it was first accepted); a higher one must have been issued, and raises
      // the fence. Then the entry is written at the stream's highest seq + 1 (read FOR UPDATE;
      // two writers that still collide on a seq get a duplicate key, and the loser is retried). Any error rolls the whole transaction back
      // and is passed on (a deadlock victim is retried by the caller). A stream whose entry 1 was
      // written under another lease is refused and the transaction rolled back, fence and all (a
      // stream belongs to one lease; entry 1 never changes once written, and two first writers
      // collide on its key). Reports one row: seq (NULL when refused), highest (the fence after
      // the call), issued (read only when needed), first (the lease of entry 1, read only
      // with a good token).
      `DROP PROCEDURE IF EXISTS ${appendProc}`,
      `CREATE PROCEDURE ${appendProc}(IN p_lease VARBINARY(800), IN p_term BIGINT, IN p_stream VARBINARY(800), IN p_payload LONGTEXT)
       MODIFIES SQL DATA
       BEGIN
         DECLARE v_high BIGINT DEFAULT NULL;
         DECLARE v_issued BIGINT DEFAULT NULL;
         DECLARE v_seq BIGINT DEFAULT NULL;
         DECLARE v_first VARBINARY(800) DEFAULT NULL;
         DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN ROLLBACK; RESIGNAL; END;
         START TRANSACTION;
         SELECT MAX(max_term) INTO v_high FROM ${F} WHERE name = p_lease FOR UPDATE;
         IF v_high IS NULL OR v_high < p_term THEN
           SELECT COALESCE(MAX(term), 0) INTO v_issued FROM ${L} WHERE name = p_lease;
           IF p_term <= v_issued THEN
             IF v_high IS NULL THEN INSERT INTO ${F} (name, max_term) VALUES (p_lease, p_term);
             ELSE UPDATE ${F} SET max_term = p_term WHERE name = p_lease;
             END IF;
             SET v_high = p_term;
           END IF;
         END IF;
         IF v_high = p_term THEN
           SELECT COALESCE(MAX(seq), 0) + 1 INTO v_seq FROM ${S} WHERE stream = p_stream FOR UPDATE;
           -- Entry 1 is among the rows (or in the gap) the read above locked: no new lock here.
           SELECT MAX(lease) INTO v_first FROM ${S} WHERE stream = p_stream AND seq = 1 FOR UPDATE;
           IF v_first IS NULL OR v_first = p_lease THEN
             INSERT INTO ${S} (stream, seq, lease, term, payload) VALUES (p_stream, v_seq, p_lease, p_term, p_payload);
             SET v_first = p_lease;
           ELSE
             SET v_seq = NULL;
           END IF;
         END IF;
         -- A refused append leaves nothing behind, not even a raised fence.
         IF v_first IS NOT NULL AND v_seq IS NULL THEN ROLLBACK; ELSE COMMIT; END IF;
         SELECT v_seq AS seq, v_high AS highest, v_issued AS issued, v_first AS first;
       END`,
      // The whole batch in one round trip: one multi-row UPDATE renews every lease still held
      // by p_owner with its term and live; one SELECT then reports each lease of the batch in
      // order (MySQL has no UPDATE … RETURNING).
      `DROP PROCEDURE IF EXISTS ${renewManyProc}`,
      `CREATE PROCEDURE ${renewManyProc}(IN p_batch LONGTEXT, IN p_ttl_us BIGINT, IN p_ttl_ms INT, IN p_owner VARBINARY(800))
       MODIFIES SQL DATA
       BEGIN
         UPDATE ${L} AS l JOIN ${batch('p_batch')} ON l.name = r.n AND l.term = r.t
           SET l.expires_at = ${NOW} + INTERVAL p_ttl_us MICROSECOND, l.ttl_ms = p_ttl_ms
           WHERE l.owner = p_owner AND l.expires_at > ${NOW};
         SELECT r.ord, r.n, r.t, l.name, l.owner, l.term, l.ttl_ms, l.meta,
             TIMESTAMPDIFF(MICROSECOND, ${NOW}, l.expires_at) AS remaining_us,
             (l.owner IS NOT NULL AND l.expires_at > ${NOW}) AS live
           FROM ${batch('p_batch')} LEFT JOIN ${L} AS l ON l.name = r.n ORDER BY r.ord;
       END`,
      // Acquire, one transaction in one round trip, deciding as every store does (decideAcquire):
      // another owner's live lease is left as it is; the owner's own live lease is extended with
      // its term; a free, released or expired one goes to p_owner with term + 1. The row is locked
      // FOR UPDATE first. A name never acquired gets its free row (term 0) in a statement of its
      // own before the transaction, so that the lock is a row lock and never a gap lock (two
      // acquires of neighbouring new names would deadlock on each other's INSERT). A row whose
      // term tenure cannot bump (below 0, or 2^53 - 1 and beyond) is not written: `acquired` is
      // NULL and the caller reports the StoreDataError. The report is read inside the
      // transaction, so it is the state this call decided on and left; with it `hinted`, the
      // live hand-over hints `NAME/transfer-to` (0 or 1) read after the decision: a releaser
      // takes its hint before its release commits, so a win over a released lease sees it.
      // With none, the winner need not read it (AcquireResult.noTransferHint): a hint written
      // after the win can only be the winner's own or a deposed leader's late one.
      `DROP PROCEDURE IF EXISTS ${acquireProc}`,
      `CREATE PROCEDURE ${acquireProc}(IN p_name VARBINARY(800), IN p_owner VARBINARY(800), IN p_ttl_us BIGINT, IN p_ttl_ms INT, IN p_meta TEXT)
       MODIFIES SQL DATA
       BEGIN
         DECLARE v_owner VARBINARY(800) DEFAULT NULL;
         DECLARE v_term BIGINT DEFAULT NULL;
         DECLARE v_live INT DEFAULT NULL;
         DECLARE v_acquired INT DEFAULT NULL;
         DECLARE v_hinted INT DEFAULT NULL;
         DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN ROLLBACK; RESIGNAL; END;
         START TRANSACTION;
         SELECT MAX(owner), MAX(term), MAX(${LIVE}) INTO v_owner, v_term, v_live FROM ${L} WHERE name = p_name FOR UPDATE;
         IF v_term IS NULL THEN
           ROLLBACK;
           INSERT INTO ${L} (name, owner, term, expires_at, ttl_ms, meta) VALUES (p_name, NULL, 0, ${NOW}, 0, '{}') ON DUPLICATE KEY UPDATE name = name;
           START TRANSACTION;
           SELECT MAX(owner), MAX(term), MAX(${LIVE}) INTO v_owner, v_term, v_live FROM ${L} WHERE name = p_name FOR UPDATE;
         END IF;
         IF v_live = 1 AND v_owner <> p_owner THEN
           SET v_acquired = 0;
         ELSEIF v_live = 1 THEN
           UPDATE ${L} SET expires_at = ${NOW} + INTERVAL p_ttl_us MICROSECOND, ttl_ms = p_ttl_ms, meta = p_meta WHERE name = p_name;
           SET v_acquired = 1;
         ELSEIF v_term >= 0 AND v_term < ${Number.MAX_SAFE_INTEGER} THEN
           UPDATE ${L} SET owner = p_owner, term = v_term + 1, expires_at = ${NOW} + INTERVAL p_ttl_us MICROSECOND, ttl_ms = p_ttl_ms, meta = p_meta WHERE name = p_name;
           SET v_acquired = 1;
         END IF;
         -- A plain (consistent, non-locking) read: no lock, and no gap lock when there is no hint.
         SELECT COUNT(*) INTO v_hinted FROM ${L} WHERE name = CONCAT(p_name, '${transferHintSuffix}') AND ${LIVE};
         SELECT v_acquired AS acquired, v_hinted AS hinted, ${COLS} FROM ${L} WHERE name = p_name FOR UPDATE;
         COMMIT;
       END`,
      // A waiter's wait and read, one round trip (see wake.ts): the row is read by the server the
      // moment the wake lock is granted (the holder lets it go only after its release committed),
      // and the lock is let go at once, for the next waiter and the next holder.
      `DROP PROCEDURE IF EXISTS ${wakeWaitProc}`,
      `CREATE PROCEDURE ${wakeWaitProc}(IN p_lock VARCHAR(64), IN p_wait_s DOUBLE, IN p_name VARBINARY(800))
       READS SQL DATA
       BEGIN
         DECLARE v_got INT DEFAULT NULL;
         SET v_got = GET_LOCK(p_lock, p_wait_s);
         IF v_got = 1 THEN DO RELEASE_LOCK(p_lock); END IF;
         SELECT v_got AS got, ${COLS}, (${LIVE}) AS live FROM (SELECT 1 AS one) AS woken LEFT JOIN ${L} ON name = p_name;
       END`,
      // A holder's release and its wake lock's, one round trip (see wake.ts): each statement of a
      // procedure commits on its own in autocommit, so a waiter woken by the RELEASE_LOCK reads
      // the released row. The store calls it only with the owner and term its wake lock is for
      // (wake.ts, releaseHere); the lock is let go whether or not the row was still theirs to
      // release (a lease that lapsed and passed on is not this holder's either).
      `DROP PROCEDURE IF EXISTS ${releaseWakeProc}`,
      `CREATE PROCEDURE ${releaseWakeProc}(IN p_name VARBINARY(800), IN p_owner VARBINARY(800), IN p_term BIGINT, IN p_lock VARCHAR(64))
       MODIFIES SQL DATA
       BEGIN
         DECLARE v_released INT DEFAULT 0;
         ${release('p_name', 'p_owner', 'p_term')};
         SET v_released = ROW_COUNT();
         DO RELEASE_LOCK(p_lock);
         SELECT v_released AS released;
       END`,
    ],
    acquire: `CALL ${acquireProc}(?, ?, ?, ?, ?)`,
    releaseWake: `CALL ${releaseWakeProc}(?, ?, ?, ?)`,
    wakeWait: `CALL ${wakeWaitProc}(?, ?, ?) /* tenure wait */`,
    // Compare-and-set on owner and term of a live lease, one statement.
    renew: `UPDATE ${L} SET expires_at = ${NOW} + INTERVAL ? MICROSECOND, ttl_ms = ? WHERE name = ? AND owner = ? AND term = ? AND ${LIVE}`,
    // (batch JSON, ttl µs, ttl ms, owner); the batch is [{"n": name, "t": term}, …].
    renewMany: `CALL ${renewManyProc}(?, ?, ?, ?)`,
    release: release('?', '?', '?'),
    readLive: `SELECT ${COLS} FROM ${L} WHERE name = ? AND ${LIVE}`,
    readAny: `SELECT ${COLS}, (${LIVE}) AS live FROM ${L} WHERE name = ?`,
    // Prefix by bytes: LENGTH is the prefix's UTF-8 length, LEFT on VARBINARY counts bytes.
    list: `SELECT ${COLS} FROM ${L} WHERE ${LIVE} AND LEFT(name, LENGTH(?)) = ? ORDER BY name`,
    // Fenced append when the token's term is already the fence's (every append but the first of
    // a term), one statement: the fence row is read with a shared lock only if it holds exactly
    // that term (a locking read sees the latest commit, and a raise, which locks the row FOR
    // UPDATE, waits for this statement's transaction), and the entry is written at the stream's
    // highest seq + 1, which comes back as the insert id through LAST_INSERT_ID(expr). One row
    // affected means written; none means "not the fast case": CALL the procedure. Used only for a
    // stream the store knows belongs to the token's lease (entry 1 never changes once written).
    // (stream, stream, lease, term, payload, lease, term)
    appendFast: `
      INSERT INTO ${S} (stream, seq, lease, term, payload)
      SELECT ?, LAST_INSERT_ID(COALESCE((SELECT MAX(x.seq) FROM ${S} AS x WHERE x.stream = ?), 0) + 1), ?, ?, ?
      FROM ${F} AS f WHERE f.name = ? AND f.max_term = ? LOCK IN SHARE MODE`,
    // The same at a position the caller already knows (the stream head this store last wrote or
    // saw + 1), so that the statement reads only the fence row: the stream's primary key refuses
    // the position if anyone wrote it meanwhile (ER_DUP_ENTRY), and the caller falls back to
    // appendFast. (stream, seq, lease, term, payload, lease, term)
    appendAt: `
      INSERT INTO ${S} (stream, seq, lease, term, payload)
      SELECT ?, ?, ?, ?, ? FROM ${F} AS f WHERE f.name = ? AND f.max_term = ? LOCK IN SHARE MODE`,
    // (lease, term, stream, payload)
    append: `CALL ${appendProc}(?, ?, ?, ?)`,
    highest: `SELECT max_term FROM ${F} WHERE name = ?`,
    // Fenced append with an expected head E (the compare-and-set of a state cell), the usual case
    // in one statement: as appendAt at E + 1, and only when entry E exists under the token's lease
    // (E = 0: the stream is empty so far). Entries are never deleted, so "entry E exists and E + 1
    // is free" (the primary key refuses it otherwise) is "the head is E", and a stream that is
    // another lease's has no entry of this lease to find. No row, or ER_DUP_ENTRY, means "not the
    // usual case": the caller runs the transaction below, which tells why.
    // (stream, E + 1, lease, term, payload, lease, term, E, stream, E, lease)
    appendExpect: `
      INSERT INTO ${S} (stream, seq, lease, term, payload)
      SELECT ?, ?, ?, ?, ? FROM ${F} AS f WHERE f.name = ? AND f.max_term = ?
        AND (? = 0 OR EXISTS (SELECT 1 FROM ${S} AS x WHERE x.stream = ? AND x.seq = ? AND x.lease = ?))
      LOCK IN SHARE MODE`,
    // The general case of an append with an expected head, as one transaction (as the append
    // procedure, with the head compared before anything is written): lock the fence row, check
    // the term (and that it was issued), lock the stream's head, check the owner and the head,
    // then raise the fence and write the entry.
    lockFence: `SELECT max_term FROM ${F} WHERE name = ? FOR UPDATE`,
    issued: `SELECT COALESCE(MAX(term), 0) AS issued FROM ${L} WHERE name = ?`,
    insertFence: `INSERT INTO ${F} (name, max_term) VALUES (?, ?)`,
    raiseFence: `UPDATE ${F} SET max_term = ? WHERE name = ?`,
    lockHead: `SELECT COALESCE(MAX(seq), 0) AS head FROM ${S} WHERE stream = ? FOR UPDATE`,
    firstLease: `SELECT lease FROM ${S} WHERE stream = ? AND seq = 1 FOR UPDATE`,
    insertEntry: `INSERT INTO ${S} (stream, seq, lease, term, payload) VALUES (?, ?, ?, ?, ?)`,
    readStream: `SELECT seq, lease, term, payload, FLOOR(UNIX_TIMESTAMP(appended_at) * 1000) AS appended_at FROM ${S} WHERE stream = ? AND seq > ? ORDER BY seq LIMIT ?`,
    // The primary key (stream, seq) read backwards: one index probe.
    readLast: `SELECT seq, lease, term, payload, FLOOR(UNIX_TIMESTAMP(appended_at) * 1000) AS appended_at FROM ${S} WHERE stream = ? ORDER BY seq DESC LIMIT 1`,
    streamsTable: `${prefix}streams`,
    addAppendedAt: `ALTER TABLE ${S} ADD COLUMN appended_at TIMESTAMP(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3)`,
    // The head and the server's clock (that of appended_at) in one statement: ms since the epoch.
    streamHead: `SELECT COALESCE(MAX(seq), 0) AS seq, FLOOR(UNIX_TIMESTAMP(NOW(3)) * 1000) AS now_ms FROM ${S} WHERE stream = ?`,
  };
}
