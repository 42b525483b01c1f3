/**
 * Every statement the PostgreSQL store sends, built once per table prefix. Identifiers come only
 * from the validated prefix; every value is a bind parameter (user text is never interpolated).
 * Time is always the server's: `now()` is the start of the statement's transaction, and every
 * statement here runs in its own short transaction, so one statement sees one instant.
 */
import { checkTablePrefix, transferHintSuffix } from '../../core/index.js';

/**
 * 1: tables and a NOTIFY trigger whose payload is the lease name.
 * 2: the payload is JSON carrying the new state (see `notifyFn` below), so a watcher needs no
 *    read after a NOTIFY. Migrating 1 -> 2 replaces the trigger function; the tables are unchanged.
 * 3: hand-over on release. A `waiters` table (a candidate that waits on push keeps a reservation
 *    there, refreshed by its own acquires), a ticket sequence, a `handed` column on leases (the
 *    ticket of the reservation a release handed the lease to) and `h` in the NOTIFY payload.
 *    Migrating 2 -> 3 adds them; existing rows are unchanged.
 * 4: a stream belongs to one lease. The stream head records the lease of the stream's first
 *    entry, and the append statements write only under that lease. Migrating 3 -> 4 adds the
 *    `lease` column to the heads and fills it from each stream's entry 1. A head left without
 *    one (written by a version 3 node during a rolling upgrade) is taken by the next append.
 * 5: stream entries carry their append time (`appended_at`, the server's `clock_timestamp()`,
 *    set by the column's default, so the append statements are unchanged), and a statement
 *    trigger NOTIFYs `<prefix>streams` with `{s: stream, q: highest seq written}` in the append's
 *    own transaction (delivered at commit), for `watchStream`. Migrating 4 -> 5 adds both;
 *    entries written before carry the migration's time.
 */
export const SCHEMA_VERSION = 5;

/**
 * A release hands over only to a reservation with at least the waiter's TTL and this much more
 * left by the server's clock (one that is about to lapse belongs to a waiter that stopped asking).
 */
export const HANDOVER_SLACK_MS = 50;

/** Payloads longer than this (a large meta) carry only the name; the watcher then reads the row. */
export const NOTIFY_MAX_BYTES = 7900;

/** A table prefix: letters, digits and underscores, starting with a letter or underscore, <= 40 chars. */
export const checkPrefix = checkTablePrefix;

/** Quote a validated identifier. */
export function ident(name: string): string {
  return `"${name.replace(/"/g, '""')}"`;
}

/** Milliseconds left until `expr`, by the server's clock, never negative. */
const remaining = (expr: string): string => `GREATEST(0, EXTRACT(EPOCH FROM (${expr} - now())) * 1000)::float8`;
const LEASE_COLS = 'name, owner, term, ttl_ms, meta';
/** The highest term tenure issues (2^53 - 1): no statement bumps a term from it or beyond. */
const MAX_TERM = String(Number.MAX_SAFE_INTEGER);

export interface PgSql {
  readonly channel: string;
  /** The channel the stream trigger NOTIFYs (see schema 5). */
  readonly streamChannel: string;
  readonly lockKey: string;
  readonly schemaTable: string;
  readonly schema: readonly string[];
  readonly acquire: string;
  readonly renew: string;
  readonly renewMany: string;
  readonly release: string;
  readonly leave: string;
  readonly read: string;
  readonly readAny: string;
  readonly list: string;
  readonly appendFast: string;
  readonly append: string;
  readonly highest: string;
  readonly streamLease: string;
  readonly streamHead: string;
  readonly readStream: string;
  readonly readLast: string;
  /** `purge`: one DELETE per table of the names starting with $1 (a prefix compared as text, never a LIKE pattern). */
  readonly purge: readonly string[];
}

/** A timestamptz as float8 ms since the epoch (see readStream for why date_part). */
function epochMs(expr: string): string {
  return `(date_part('epoch', ${expr}) * 1000)`;
}

/** A bigint column as JSON: a number when it is an integer in [min, 2^53 - 1], else its text. */
function safeJsonInt(column: string, min: number): string {
  return `CASE WHEN ${column} BETWEEN ${min} AND ${Number.MAX_SAFE_INTEGER} THEN to_json(${column}) ELSE to_json(${column}::text) END`;
}

export function buildSql(prefix: string): PgSql {
  const schemaTable = ident(`${prefix}schema`);
  const L = ident(`${prefix}leases`);
  const F = ident(`${prefix}fences`);
  const H = ident(`${prefix}stream_heads`);
  const W = ident(`${prefix}waiters`);
  const tickets = ident(`${prefix}tickets`);
  const S = ident(`${prefix}streams`);
  const channel = `${prefix}leases`;
  const streamChannel = `${prefix}streams`;
  const notifyFn = ident(`${prefix}notify`);
  const streamNotifyFn = ident(`${prefix}stream_notify`);
  const live = (t: string): string => `${t}.owner IS NOT NULL AND ${t}.expires_at > now()`;
  const otherLive = `(${live('l')} AND l.owner <> excluded.owner)`;
  const expiry = (param: string): string => `now() + ${param}::int * interval '1 millisecond'`;
  // A stream head the token's lease ($1) may bump: its own, or one a version 3 node left without a lease.
  const ownHead = '(h.lease = $1 OR h.lease IS NULL)';
  // The compare-and-set on the stream head ($5, NULL when not asked): a new head (the stream's
  // first entry) only when 0 is expected, an existing one only when it holds exactly $5. The
  // insert is tried whenever the snapshot has a head, so that the ON CONFLICT arm can evaluate
  // `headOk` on the head row's latest version, under its row lock. (A head created after the
  // snapshot makes a refusal with no reason found; the caller tries again.)
  const newHeadOk = `($5::bigint IS NULL OR $5::bigint = 0 OR EXISTS (SELECT 1 FROM ${H} WHERE stream = $3))`;
  const headOk = '($5::bigint IS NULL OR h.last_seq = $5::bigint)';
  const startsWith = (column: string): string => `left(${column}, char_length($1::text)) = $1::text`;
  return {
    purge: [
      `DELETE FROM ${W} WHERE ${startsWith('name')}`,
      `DELETE FROM ${L} WHERE ${startsWith('name')}`,
      `DELETE FROM ${F} WHERE ${startsWith('name')}`,
      `DELETE FROM ${S} WHERE ${startsWith('stream')}`,
      `DELETE FROM ${H} WHERE ${startsWith('stream')}`,
    ],
    channel,
    streamChannel,
    lockKey: `tenure:${prefix}`,
    schemaTable,
    schema: [
      `CREATE TABLE IF NOT EXISTS ${L} (
         name text PRIMARY KEY, owner text, term bigint NOT NULL CHECK (term >= 0),
         expires_at timestamptz NOT NULL, ttl_ms integer NOT NULL, meta text NOT NULL)`,
      // Version 3: the reservation ticket a release handed the lease over with (NULL otherwise).
      `ALTER TABLE ${L} ADD COLUMN IF NOT EXISTS handed bigint`,
      // A candidate waiting for a name on push: the lease a release would hand it (owner, ttl,
      // meta) and until when its reservation holds, by the server's clock. `ticket` names each
      // refresh, so the waiter knows which of its own acquires set the expiry it is handed.
      `CREATE TABLE IF NOT EXISTS ${W} (
         name text NOT NULL, owner text NOT NULL, ttl_ms integer NOT NULL, meta text NOT NULL,
         expires_at timestamptz NOT NULL, ticket bigint NOT NULL, PRIMARY KEY (name, owner))`,
      `CREATE SEQUENCE IF NOT EXISTS ${tickets}`,
      `CREATE TABLE IF NOT EXISTS ${F} (name text PRIMARY KEY, max_term bigint NOT NULL)`,
      `CREATE TABLE IF NOT EXISTS ${H} (stream text PRIMARY KEY, last_seq bigint NOT NULL)`,
      `CREATE TABLE IF NOT EXISTS ${S} (
         stream text NOT NULL, seq bigint NOT NULL, lease text NOT NULL, term bigint NOT NULL,
         payload text NOT NULL, PRIMARY KEY (stream, seq))`,
      // Version 4: the lease a stream belongs to (that of its entry 1).
      `ALTER TABLE ${H} ADD COLUMN IF NOT EXISTS lease text`,
      `UPDATE ${H} AS h SET lease = s.lease FROM ${S} AS s WHERE h.lease IS NULL AND s.stream = h.stream AND s.seq = 1`,
      // Push: a change of holder or term (never a plain renewal) notifies the channel with what a
      // watcher needs, as JSON: {n: name, t: term} once released (or not live); {n, t, o: owner,
      // ttl, m: meta, r: remaining ms by the server's clock} for a live holder, plus h: ticket
      // when a release handed it over; only {n} when that would not fit a NOTIFY payload (then
      // the watcher reads the row).
      `CREATE OR REPLACE FUNCTION ${notifyFn}() RETURNS trigger LANGUAGE plpgsql AS $fn$
       DECLARE p text;
       BEGIN
         IF NEW.owner IS NULL OR NEW.expires_at <= now() THEN
           p := json_build_object('n', NEW.name, 't', NEW.term)::text;
         ELSE
           p := json_build_object('n', NEW.name, 't', NEW.term, 'o', NEW.owner, 'ttl', NEW.ttl_ms, 'm', NEW.meta,
                  'r', ${remaining('NEW.expires_at')}, 'h', NEW.handed)::text;
           IF octet_length(p) > ${NOTIFY_MAX_BYTES} THEN p := json_build_object('n', NEW.name)::text; END IF;
         END IF;
         PERFORM pg_notify(TG_ARGV[0], p);
         RETURN NULL;
       END $fn$`,
      `DROP TRIGGER IF EXISTS ${ident(`${prefix}leases_insert`)} ON ${L}`,
      `CREATE TRIGGER ${ident(`${prefix}leases_insert`)} AFTER INSERT ON ${L}
       FOR EACH ROW EXECUTE FUNCTION ${notifyFn}('${channel}')`,
      `DROP TRIGGER IF EXISTS ${ident(`${prefix}leases_update`)} ON ${L}`,
      `CREATE TRIGGER ${ident(`${prefix}leases_update`)} AFTER UPDATE ON ${L}
       FOR EACH ROW WHEN (OLD.owner IS DISTINCT FROM NEW.owner OR OLD.term IS DISTINCT FROM NEW.term)
       EXECUTE FUNCTION ${notifyFn}('${channel}')`,
      // Version 5: append times by the server's clock. A volatile default fills the rows already
      // there with the migration's time (the table is rewritten once).
      `ALTER TABLE ${S} ADD COLUMN IF NOT EXISTS appended_at timestamptz NOT NULL DEFAULT clock_timestamp()`,
      // Push for streams: one NOTIFY per stream and statement with the highest seq it wrote, sent
      // at commit (never for a rolled-back append); a bulk insert of many entries is one NOTIFY.
      `CREATE OR REPLACE FUNCTION ${streamNotifyFn}() RETURNS trigger LANGUAGE plpgsql AS $fn$
       BEGIN
         PERFORM pg_notify(TG_ARGV[0], json_build_object('s', stream, 'q', max(seq))::text) FROM new_rows GROUP BY stream;
         RETURN NULL;
       END $fn$`,
      `DROP TRIGGER IF EXISTS ${ident(`${prefix}streams_insert`)} ON ${S}`,
      `CREATE TRIGGER ${ident(`${prefix}streams_insert`)} AFTER INSERT ON ${S}
       REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION ${streamNotifyFn}('${streamChannel}')`,
    ],
    // One statement. A free, released or expired lease goes to $2 with term + 1; a live lease of
    // $2 is extended with the same term; another owner's live lease is left as it is (the row is
    // rewritten unchanged so that RETURNING always reports the holder in this same round trip).
    // With $5 > 0 (the caller waits on push), a lost acquire also keeps $2's reservation (see
    // `release`) until now + $3 + $5 ms, under a new ticket; a won one drops it. Reservations of
    // the name that have lapsed are cleared on the way. A lease that is not live at term 2^53 - 1
    // or above is not updated at all (no term beyond it is ever issued): the statement writes
    // nothing and returns the row's term with `acquired` NULL, which the store reports as
    // StoreDataError.
    acquire: `
      WITH a AS (
        INSERT INTO ${L} AS l (name, owner, term, expires_at, ttl_ms, meta)
        VALUES ($1, $2, 1, ${expiry('$3')}, $3::int, $4)
        ON CONFLICT (name) DO UPDATE SET
          owner      = CASE WHEN ${otherLive} THEN l.owner ELSE excluded.owner END,
          term       = CASE WHEN ${live('l')} THEN l.term ELSE l.term + 1 END,
          expires_at = CASE WHEN ${otherLive} THEN l.expires_at ELSE excluded.expires_at END,
          ttl_ms     = CASE WHEN ${otherLive} THEN l.ttl_ms ELSE excluded.ttl_ms END,
          meta       = CASE WHEN ${otherLive} THEN l.meta ELSE excluded.meta END,
          handed     = CASE WHEN ${otherLive} THEN l.handed END
        WHERE ${live('l')} OR l.term < ${MAX_TERM}
        RETURNING ${LEASE_COLS}, owner = $2 AS acquired, ${remaining('expires_at')} AS remaining_ms),
      reserved AS (
        INSERT INTO ${W} AS w (name, owner, ttl_ms, meta, expires_at, ticket)
        SELECT $1, $2, $3::int, $4, now() + ($3::int + $5::int) * interval '1 millisecond', nextval('${tickets}')
        FROM a WHERE NOT a.acquired AND $5::int > 0
        ON CONFLICT (name, owner) DO UPDATE SET ttl_ms = excluded.ttl_ms, meta = excluded.meta,
          expires_at = GREATEST(w.expires_at, excluded.expires_at), ticket = excluded.ticket
        RETURNING ticket),
      cleared AS (
        DELETE FROM ${W} AS w WHERE w.name = $1 AND EXISTS (SELECT 1 FROM a)
          AND CASE WHEN (SELECT acquired FROM a) THEN w.owner = $2 ELSE w.owner <> $2 AND w.expires_at <= now() END)
      SELECT a.*, (SELECT ticket FROM reserved) AS ticket FROM a
      UNION ALL
      SELECT l.name, NULL, l.term, NULL, NULL, NULL, NULL, NULL FROM ${L} AS l WHERE l.name = $1 AND NOT EXISTS (SELECT 1 FROM a)`,
    // Compare-and-set on owner and term of a live lease; when it fails, the live holder (if any).
    renew: `
      WITH u AS (
        UPDATE ${L} AS l SET expires_at = ${expiry('$4')}, ttl_ms = $4::int
        WHERE l.name = $1 AND l.owner = $2 AND l.term = $3::bigint AND l.expires_at > now()
        RETURNING ${LEASE_COLS}, expires_at)
      SELECT true AS renewed, ${LEASE_COLS}, ${remaining('expires_at')} AS remaining_ms FROM u
      UNION ALL
      SELECT false, ${LEASE_COLS}, ${remaining('expires_at')} FROM ${L} AS c
      WHERE c.name = $1 AND ${live('c')} AND NOT EXISTS (SELECT 1 FROM u)`,
    // $1 owner, $2 names, $3 terms, $4 ttl. One statement for the whole batch.
    renewMany: `
      WITH req AS (
        SELECT r.name, r.term, r.ord FROM unnest($2::text[], $3::bigint[]) WITH ORDINALITY AS r(name, term, ord)),
      u AS (
        UPDATE ${L} AS l SET expires_at = ${expiry('$4')}, ttl_ms = $4::int
        FROM req WHERE l.name = req.name AND l.term = req.term AND l.owner = $1 AND l.expires_at > now()
        RETURNING l.name, l.owner, l.term, l.ttl_ms, l.meta, l.expires_at)
      SELECT req.name, u.name IS NOT NULL AS renewed,
        COALESCE(u.owner, c.owner) AS owner, COALESCE(u.term, c.term) AS term,
        COALESCE(u.ttl_ms, c.ttl_ms) AS ttl_ms, COALESCE(u.meta, c.meta) AS meta,
        ${remaining('COALESCE(u.expires_at, c.expires_at)')} AS remaining_ms
      FROM req
      LEFT JOIN u ON u.name = req.name
      LEFT JOIN ${L} AS c ON u.name IS NULL AND c.name = req.name AND ${live('c')}
      ORDER BY req.ord`,
    // Release, handing the lease over ($4) when a candidate waits: the reservation with the latest
    // expiry (the most recent waiter) that has at least its TTL + HANDOVER_SLACK_MS left gets the
    // lease with term + 1, its ttl and meta, and the reservation's expiry, which the waiter knows
    // a lower bound of (its own acquire that set it was sent before); `handed` names the ticket.
    // The lease row is locked first (as in `acquire`, so the two never deadlock); the reservation
    // is read from the statement's snapshot, a consistent (expiry, ticket) pair even if a refresh
    // commits meanwhile. With no waiter the lease is freed. A plain release commits without
    // waiting for its WAL flush (synchronous_commit off for this transaction only): it is the
    // handoff's critical path, and losing it in a server crash is safe — the lease then simply
    // expires at its TTL — while the next holder's acquire, a normal synchronous commit, flushes
    // the WAL up to and including it. A hand-over issues a term, so it commits as configured.
    // At term 2^53 - 1 nothing is handed over (there is no next term): the lease is freed, and the
    // waiter's own acquire then reports the StoreDataError. Nor while a live hand-over hint
    // `NAME/transfer-to` is held (the elector's transferTo, core's transferHintName): that
    // release frees the lease for the named node to take, and a hand-over thus tells its claimer
    // that no hint was held (AcquireResult.noTransferHint). The hint is taken before the release
    // is sent, so this statement's snapshot sees it.
    release: `
      WITH w AS (
        SELECT owner, ttl_ms, meta, expires_at, ticket FROM ${W}
        WHERE $4::boolean AND $3::bigint < ${MAX_TERM} AND name = $1 AND owner <> $2 AND expires_at > now() + (ttl_ms + ${HANDOVER_SLACK_MS}) * interval '1 millisecond'
          AND NOT EXISTS (SELECT 1 FROM ${L} AS hint WHERE hint.name = $1 || '${transferHintSuffix}' AND ${live('hint')})
        ORDER BY expires_at DESC LIMIT 1),
      sync AS (
        SELECT set_config('synchronous_commit',
          CASE WHEN EXISTS (SELECT 1 FROM w) THEN current_setting('synchronous_commit') ELSE 'off' END, true)),
      u AS (
        UPDATE ${L} AS l SET
          owner = (SELECT owner FROM w),
          term = l.term + CASE WHEN EXISTS (SELECT 1 FROM w) THEN 1 ELSE 0 END,
          expires_at = COALESCE((SELECT expires_at FROM w), now()),
          ttl_ms = COALESCE((SELECT ttl_ms FROM w), l.ttl_ms),
          meta = COALESCE((SELECT meta FROM w), l.meta),
          handed = (SELECT ticket FROM w)
        WHERE l.name = $1 AND l.owner = $2 AND l.term = $3::bigint AND l.expires_at > now()
          AND EXISTS (SELECT 1 FROM sync)
        RETURNING ${LEASE_COLS}, handed, ${remaining('expires_at')} AS remaining_ms),
      gone AS (DELETE FROM ${W} WHERE name = $1 AND owner = (SELECT owner FROM u))
      SELECT * FROM u`,
    // Candidates that stop waiting ($1 names, $2 owners, $3 the tickets of their reservations
    // not taken up; one row per ticket): their reservations go, and a lease handed over with one
    // of those tickets is freed. A compare-and-set on the hand-over itself (rule 6): a ticket
    // names one reservation refresh, and a lease taken up no longer carries it (an acquire that
    // extends it clears `handed`, and the caller leaves out the tickets of a lease it claimed);
    // the lease row lock orders this against such an acquire.
    leave: `
      WITH left_ AS (SELECT * FROM unnest($1::text[], $2::text[], $3::bigint[]) AS p(name, owner, ticket)),
      gone AS (DELETE FROM ${W} AS w USING left_ WHERE w.name = left_.name AND w.owner = left_.owner)
      UPDATE ${L} AS l SET owner = NULL, expires_at = now(), handed = NULL
      FROM left_ WHERE l.name = left_.name AND l.owner = left_.owner AND l.handed = left_.ticket AND l.expires_at > now()`,
    read: `SELECT ${LEASE_COLS}, ${remaining('expires_at')} AS remaining_ms FROM ${L} AS l WHERE l.name = $1 AND ${live('l')}`,
    readAny: `SELECT ${LEASE_COLS}, ${live('l')} AS live, ${remaining('expires_at')} AS remaining_ms FROM ${L} AS l WHERE l.name = $1`,
    // Prefix by equality on the leading characters, so % and _ in user text are plain characters.
    list: `
      SELECT ${LEASE_COLS}, ${remaining('expires_at')} AS remaining_ms FROM ${L} AS l
      WHERE ${live('l')} AND left(l.name, char_length($1::text)) = $1::text
      ORDER BY l.name COLLATE "C"`,
    // Fenced append when the term is already the highest accepted for the lease (every append but
    // the first of a term), one statement: lock the fence row only if it holds exactly $2 (FOR NO
    // KEY UPDATE: in READ COMMITTED a concurrent raise is waited for and the condition re-checked
    // on the row's latest version), so from here to COMMIT no higher term can be accepted; then
    // bump the stream head and write. No row back means "not the fast case" (or the head is not
    // the expected $5): run `append`, which tells which.
    // The head is bumped only when the stream belongs to the token's lease: ON CONFLICT DO UPDATE
    // locks the head row and evaluates its WHERE on the row's latest version, so of two first
    // appends under different leases the second sees the first's head and writes nothing.
    appendFast: `
      WITH fence AS (SELECT 1 FROM ${F} WHERE name = $1 AND max_term = $2::bigint FOR NO KEY UPDATE),
      head AS (
        INSERT INTO ${H} AS h (stream, last_seq, lease) SELECT $3, 1, $1 FROM fence WHERE ${newHeadOk}
        ON CONFLICT (stream) DO UPDATE SET last_seq = h.last_seq + 1, lease = $1 WHERE ${ownHead} AND ${headOk}
        RETURNING last_seq)
      INSERT INTO ${S} (stream, seq, lease, term, payload) SELECT $3, last_seq, $1, $2::bigint, $4 FROM head
      RETURNING seq`,
    // Fenced append, the general case, one statement. $1 lease, $2 term, $3 stream, $4 payload,
    // $5 the expected head or NULL (a refusal for the head raises no fence, by the statement's
    // snapshot; a head moved after it can still leave the fence raised to this issued term).
    // `fence` locks the lease's fence row (FOR NO KEY UPDATE: in READ COMMITTED this waits for a
    // concurrent raise and returns the latest version), so from here to COMMIT no higher term can
    // be accepted. Usually the row already holds $2 and nothing else is needed (no fence write).
    // Otherwise `raised` inserts or raises it, only when the term was issued and is >= the highest
    // accepted (ON CONFLICT covers a row inserted concurrently). The stream head is bumped and the
    // entry written only when one of the two said yes. On refusal, `issued` and `highest` let the
    // caller tell a stale term from one never issued.
    append: `
      WITH fence AS (SELECT max_term FROM ${F} WHERE name = $1 FOR NO KEY UPDATE),
      raised AS (
        INSERT INTO ${F} AS f (name, max_term)
        SELECT $1, $2::bigint
        WHERE NOT EXISTS (SELECT 1 FROM fence WHERE max_term >= $2::bigint)
          AND $2::bigint <= COALESCE((SELECT term FROM ${L} WHERE name = $1), 0)
          AND NOT EXISTS (SELECT 1 FROM ${H} WHERE stream = $3 AND lease <> $1)
          AND ($5::bigint IS NULL OR COALESCE((SELECT last_seq FROM ${H} WHERE stream = $3), 0) = $5::bigint)
        ON CONFLICT (name) DO UPDATE SET max_term = excluded.max_term WHERE f.max_term <= excluded.max_term
        RETURNING max_term),
      ok AS (SELECT 1 FROM fence WHERE max_term = $2::bigint UNION ALL SELECT 1 FROM raised),
      head AS (
        INSERT INTO ${H} AS h (stream, last_seq, lease) SELECT $3, 1, $1 FROM ok WHERE ${newHeadOk}
        ON CONFLICT (stream) DO UPDATE SET last_seq = h.last_seq + 1, lease = $1 WHERE ${ownHead} AND ${headOk}
        RETURNING last_seq),
      entry AS (
        INSERT INTO ${S} (stream, seq, lease, term, payload) SELECT $3, last_seq, $1, $2::bigint, $4 FROM head
        RETURNING seq)
      SELECT e.seq,
        CASE WHEN e.seq IS NULL THEN (SELECT term FROM ${L} WHERE name = $1) END AS issued,
        CASE WHEN e.seq IS NULL THEN (SELECT max_term FROM fence) END AS highest
      FROM (SELECT (SELECT seq FROM entry) AS seq) AS e`,
    highest: `SELECT max_term FROM ${F} WHERE name = $1`,
    // The lease a stream belongs to (none for a stream never written).
    streamLease: `SELECT lease FROM ${H} WHERE stream = $1`,
    // A stream's seqs are 1..head without gaps (an append takes head + 1 in its own transaction;
    // only purge deletes, a whole stream), so the page is exactly (after, after + limit]. The upper
    // bound keeps the read at `limit` rows whatever plan is chosen: with the statistics of a
    // table that has just grown (autoanalyze not yet run) the planner took a bitmap scan of every
    // row past `after` and a sort, 15-45 ms a page over 100,000 entries, for the custom plans of
    // a connection's first executions (bench follow, catch-up).
    //
    // The page comes back as ONE json text, `[[seq, lease, term, payload, appended_at], ...]`:
    // the driver then parses one value instead of five per row (JSON.parse is native), which took
    // a catch-up's reading from about 3.5 to about 1.3 µs of this process's CPU per entry
    // (scratch probe, 100,000 entries). seq and term are JSON numbers only where they are safe
    // integers (JSON.parse would round a larger one silently); any other value comes as its text,
    // which decoding refuses exactly as it refuses the driver's int8 text.
    //
    // Times as ms since the epoch come from date_part (float8), not EXTRACT: since PostgreSQL 14
    // EXTRACT returns numeric, and its numeric arithmetic took a page of 1,000 entries from 2.5 to
    // 3.4 ms of the server's CPU (backend CPU from /proc over 400 pages, scratch probe). The two
    // differ by at most 0.25 µs; readLast and streamHead use the same expression, so the clock
    // that appendedAt and a head's now are read on stays one.
    readStream: `SELECT coalesce(json_agg(json_build_array(${safeJsonInt('seq', 1)}, lease, ${safeJsonInt('term', 0)}, payload, ${epochMs('appended_at')}) ORDER BY seq), '[]')::text AS page FROM (SELECT seq, lease, term, payload, appended_at FROM ${S} WHERE stream = $1 AND seq > $2::bigint AND seq <= $2::bigint + $3::int ORDER BY seq LIMIT $3::int) AS p`,
    // The primary key (stream, seq) read backwards: one index probe.
    readLast: `SELECT seq, lease, term, payload, ${epochMs('appended_at')} AS appended_at FROM ${S} WHERE stream = $1 ORDER BY seq DESC LIMIT 1`,
    // The head (as committed now; 0 for a stream never written) and the server's clock (the clock
    // of appended_at) in one statement.
    streamHead: `SELECT COALESCE((SELECT last_seq FROM ${H} WHERE stream = $1), 0) AS seq, ${epochMs('clock_timestamp()')} AS now_ms`,
  };
}
