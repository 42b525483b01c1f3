/**
 * Where a follower keeps its projection and its applied offset: one transaction holds both, so a
 * follower killed at any instant either applied a batch and moved its offset, or did neither.
 *
 * The databases are the caller's: nothing here imports a driver, each handle is described by the
 * few calls made on it. A sink keeps its offsets in one small table (default
 * `tenure_follower_offsets`: name, seq), created on first use.
 */
import { InvalidArgumentError, checkName } from '../core/index.js';
import { OffsetMismatchError } from './errors.js';

/**
 * A transactional home for a projection. Implement it for any database that has transactions;
 * the built-in ones are `sqliteSink`, `postgresSink` and `mysqlSink`.
 */
export interface FollowerSink<Tx> {
  /** Short name for messages ("sqlite", "postgres", ...). */
  readonly kind: string;
  /** The last applied seq of follower `name` (0 when it never applied), creating what it needs. */
  load(name: string): Promise<number>;
  /**
   * In ONE transaction: move the offset of `name` from `from` to `to` (compare-and-set: reject with
   * OffsetMismatchError, nothing committed, when it is not at `from`) and run `work(tx)`. Commit
   * only when both succeeded; otherwise roll back and reject with `work`'s error (or the
   * database's). A rejection from the commit itself is "maybe": the follower loads the offset
   * again before going on.
   */
  commit(name: string, from: number, to: number, work: (tx: Tx) => Promise<void>): Promise<void>;
}

/**
 * Where a broker follower (Model C) stands in one partition: the last broker offset it handled,
 * the highest fencing term it has seen there, and how many late publishes of a lower term (a
 * deposed leader's) it dropped. The three move together, in the transaction of the apply.
 */
export interface PartitionMark {
  /** The broker's offset of the last message handled (applied or dropped), 0 before the first. */
  readonly offset: number;
  /** The highest term seen in the partition, 0 before the first message. */
  readonly term: number;
  /** Messages dropped because their term was below `term` (zombie publishes), since the start. */
  readonly dropped: number;
}

/**
 * A transactional home for a broker follower's projection and its per-partition marks. The
 * built-in sinks (sqliteSink, postgresSink, mysqlSink) are both a FollowerSink and a
 * PartitionSink; implement it for a database of your own.
 */
export interface PartitionSink<Tx> {
  readonly kind: string;
  /** The mark of `name` (a follower's partition), all zero when it never handled one, creating what it needs. */
  loadMark(name: string): Promise<PartitionMark>;
  /**
   * In ONE transaction: move the mark of `name` from offset `from` to `to` (compare-and-set on the
   * offset: OffsetMismatchError, nothing committed, when it is not at `from`) and run `work(tx)`.
   * Commit only when both succeeded; otherwise roll back and reject with `work`'s error (or the
   * database's). A rejection from the commit itself is "maybe": load the mark again.
   */
  commitMark(name: string, from: number, to: PartitionMark, work: (tx: Tx) => Promise<void>): Promise<void>;
}

export interface SinkOptions {
  /** The offsets table (default `tenure_follower_offsets`): letters, digits and `_`, at most 63. */
  readonly table?: string;
  /** The broker followers' partition marks table (default `tenure_partition_offsets`), same rules. */
  readonly marksTable?: string;
}

const DEFAULT_TABLE = 'tenure_follower_offsets';
const DEFAULT_MARKS_TABLE = 'tenure_partition_offsets';

function marksTableName(options: SinkOptions | undefined): string {
  return tableName({ table: options?.marksTable ?? DEFAULT_MARKS_TABLE }, 'marksTable');
}

function markOf(row: { seq: unknown; term: unknown; dropped: unknown } | undefined): PartitionMark {
  return row ? { offset: seqOf(row.seq), term: seqOf(row.term), dropped: seqOf(row.dropped) } : { offset: 0, term: 0, dropped: 0 };
}

function checkMark(from: number, to: PartitionMark): void {
  for (const [field, v] of [['offset', to.offset], ['term', to.term], ['dropped', to.dropped]] as const) {
    if (!Number.isSafeInteger(v) || v < 0) throw new InvalidArgumentError(field, `expected a whole number >= 0, got ${String(v)}`);
  }
  if (to.offset <= from) throw new InvalidArgumentError('offset', `a mark only moves forward: ${from} -> ${to.offset}`);
}

function tableName(options: SinkOptions | undefined, field = 'table'): string {
  const table = options?.table ?? DEFAULT_TABLE;
  if (typeof table !== 'string' || !/^[A-Za-z_][A-Za-z0-9_]{0,62}$/.test(table)) {
    throw new InvalidArgumentError(field, `expected an identifier of letters, digits and _ (at most 63), got ${JSON.stringify(table)}`);
  }
  return table;
}

function conflict(name: string, from: number, found: number | null): OffsetMismatchError {
  return new OffsetMismatchError(
    name,
    from,
    found === null
      ? `its offset row is gone (expected seq ${from})`
      : `its offset moved to ${found} while this follower was applying from ${from}: another follower with the same name is running`,
  );
}

function seqOf(value: unknown): number {
  const n = typeof value === 'bigint' ? Number(value) : Number(value);
  if (!Number.isSafeInteger(n) || n < 0) throw new InvalidArgumentError('offset', `the offsets table holds ${String(value)}, not a whole number >= 0`);
  return n;
}

/**
 * Runs transactions on one connection one after another. A broker follower commits its partitions
 * concurrently; on a single connection (SQLite's, or a given pg client or mysql connection) their
 * BEGIN … COMMIT must not interleave.
 */
function serializer(): <T>(fn: () => Promise<T>) => Promise<T> {
  let tail: Promise<unknown> = Promise.resolve();
  return <T>(fn: () => Promise<T>): Promise<T> => {
    const run = tail.then(fn, fn);
    tail = run.catch(() => undefined);
    return run;
  };
}

async function rollbackQuietly(rollback: () => unknown): Promise<void> {
  try {
    await rollback();
  } catch {
    // The work's (or the commit's) error is the one to report; a failed rollback is rolled back by
    // the database when the connection goes.
  }
}

// --- SQLite -------------------------------------------------------------------------------------

/** A better-sqlite3 Database or a node:sqlite DatabaseSync. */
export interface SqliteSinkDatabase {
  exec(sql: string): unknown;
  prepare(sql: string): {
    run(...params: unknown[]): { changes: number | bigint };
    get(...params: unknown[]): unknown;
  };
}

/**
 * A SQLite projection (better-sqlite3 or node:sqlite). `apply` gets `db` itself and runs its
 * statements inside the follower's `BEGIN IMMEDIATE` transaction. Nothing else may use `db`
 * while a batch is applied (SQLite has one transaction per connection).
 */
export function sqliteSink<Db extends SqliteSinkDatabase>(db: Db, options?: SinkOptions): FollowerSink<Db> & PartitionSink<Db> {
  const t = `"${tableName(options)}"`;
  const m = `"${marksTableName(options)}"`;
  const serial = serializer();
  let ready = false;
  const setup = (): void => {
    if (ready) return;
    db.exec(`CREATE TABLE IF NOT EXISTS ${t} (name TEXT PRIMARY KEY, seq INTEGER NOT NULL)`);
    db.exec(`CREATE TABLE IF NOT EXISTS ${m} (name TEXT PRIMARY KEY, seq INTEGER NOT NULL, term INTEGER NOT NULL, dropped INTEGER NOT NULL)`);
    ready = true;
  };
  return {
    kind: 'sqlite',
    async loadMark(name) {
      checkName('name', name);
      setup();
      db.prepare(`INSERT OR IGNORE INTO ${m} (name, seq, term, dropped) VALUES (?, 0, 0, 0)`).run(name);
      return markOf(db.prepare(`SELECT seq, term, dropped FROM ${m} WHERE name = ?`).get(name) as { seq: unknown; term: unknown; dropped: unknown } | undefined);
    },
    async commitMark(name, from, to, work) {
      checkMark(from, to);
      setup();
      await serial(async () => {
        db.exec('BEGIN IMMEDIATE');
        try {
          const moved = db.prepare(`UPDATE ${m} SET seq = ?, term = ?, dropped = ? WHERE name = ? AND seq = ?`).run(to.offset, to.term, to.dropped, name, from);
          if (Number(moved.changes) !== 1) {
            const row = db.prepare(`SELECT seq FROM ${m} WHERE name = ?`).get(name) as { seq: unknown } | undefined;
            throw conflict(name, from, row ? seqOf(row.seq) : null);
          }
          await work(db);
          db.exec('COMMIT');
        } catch (err) {
          await rollbackQuietly(() => db.exec('ROLLBACK'));
          throw err;
        }
      });
    },
    async load(name) {
      checkName('name', name);
      setup();
      db.prepare(`INSERT OR IGNORE INTO ${t} (name, seq) VALUES (?, 0)`).run(name);
      const row = db.prepare(`SELECT seq FROM ${t} WHERE name = ?`).get(name) as { seq: unknown } | undefined;
      return seqOf(row?.seq ?? 0);
    },
    async commit(name, from, to, work) {
      setup();
      await serial(async () => {
        db.exec('BEGIN IMMEDIATE');
        try {
          const moved = db.prepare(`UPDATE ${t} SET seq = ? WHERE name = ? AND seq = ?`).run(to, name, from);
          if (Number(moved.changes) !== 1) {
            const row = db.prepare(`SELECT seq FROM ${t} WHERE name = ?`).get(name) as { seq: unknown } | undefined;
            throw conflict(name, from, row ? seqOf(row.seq) : null);
          }
          await work(db);
          db.exec('COMMIT');
        } catch (err) {
          await rollbackQuietly(() => db.exec('ROLLBACK'));
          throw err;
        }
      });
    },
  };
}

// --- PostgreSQL ---------------------------------------------------------------------------------

/** A pg Client or PoolClient. */
export interface PgSinkClient {
  query(text: string, values?: unknown[]): Promise<{ rowCount: number | null; rows: Record<string, unknown>[] }>;
}

/** A pg Pool: each batch checks out one client for its transaction. */
export interface PgSinkPool<C extends PgSinkClient = PgSinkClient> {
  connect(): Promise<C & { release(err?: Error | boolean): void }>;
}

/**
 * A PostgreSQL projection (pg). Pass `{ pool }` (each batch checks a client out for its
 * transaction) or `{ client }` (used for every batch; nothing else may use it meanwhile).
 * `apply` gets the client holding the transaction.
 */
export function postgresSink<C extends PgSinkClient>(db: { pool: PgSinkPool<C> } | { client: C }, options?: SinkOptions): FollowerSink<C> & PartitionSink<C> {
  const t = `"${tableName(options)}"`;
  const m = `"${marksTableName(options)}"`;
  const borrow = async (): Promise<{ c: C; done: (err?: Error) => void }> => {
    if ('pool' in db) {
      const c = await db.pool.connect();
      return { c, done: (err) => c.release(err ?? false) };
    }
    return { c: db.client, done: () => {} };
  };
  let ready = false;
  const setup = async (c: PgSinkClient): Promise<void> => {
    if (ready) return;
    try {
      await c.query(`CREATE TABLE IF NOT EXISTS ${t} (name text PRIMARY KEY, seq bigint NOT NULL)`);
    } catch (err) {
      // Two followers creating the table at once: the loser's catalog insert collides; the table exists.
      const code = (err as { code?: unknown }).code;
      if (code !== '23505' && code !== '42P07') throw err;
    }
    try {
      await c.query(`CREATE TABLE IF NOT EXISTS ${m} (name text PRIMARY KEY, seq bigint NOT NULL, term bigint NOT NULL, dropped bigint NOT NULL)`);
    } catch (err) {
      const code = (err as { code?: unknown }).code;
      if (code !== '23505' && code !== '42P07') throw err;
    }
    ready = true;
  };
  /** One transaction on a borrowed client: `move` (the compare-and-set) then `work`; the pool drops a client whose transaction failed. */
  // One given client: its transactions one after another. A pool: one client per transaction.
  const serial = 'pool' in db ? <T>(fn: () => Promise<T>) => fn() : serializer();
  const transact = (name: string, from: number, move: (c: C) => Promise<{ rowCount: number | null }>, current: string, work: (tx: C) => Promise<void>): Promise<void> => serial(() => transactNow(name, from, move, current, work));
  const transactNow = async (name: string, from: number, move: (c: C) => Promise<{ rowCount: number | null }>, current: string, work: (tx: C) => Promise<void>): Promise<void> => {
    const { c, done } = await borrow();
    let broken: Error | undefined;
    try {
      await setup(c);
      await c.query('BEGIN');
      try {
        const moved = await move(c);
        if (moved.rowCount !== 1) {
          const r = await c.query(current, [name]);
          throw conflict(name, from, r.rows[0] ? seqOf(r.rows[0].seq) : null);
        }
        await work(c);
        await c.query('COMMIT');
      } catch (err) {
        await rollbackQuietly(() => c.query('ROLLBACK'));
        throw err;
      }
    } catch (err) {
      // A connection whose COMMIT failed may be in any state: the pool drops it.
      if (!(err instanceof OffsetMismatchError)) broken = err instanceof Error ? err : new Error(String(err));
      throw err;
    } finally {
      done(broken);
    }
  };
  return {
    kind: 'postgres',
    async loadMark(name) {
      checkName('name', name);
      const { c, done } = await borrow();
      try {
        await setup(c);
        await c.query(`INSERT INTO ${m} (name, seq, term, dropped) VALUES ($1, 0, 0, 0) ON CONFLICT (name) DO NOTHING`, [name]);
        const r = await c.query(`SELECT seq, term, dropped FROM ${m} WHERE name = $1`, [name]);
        done();
        return markOf(r.rows[0] as { seq: unknown; term: unknown; dropped: unknown } | undefined);
      } catch (err) {
        done(err instanceof Error ? err : undefined);
        throw err;
      }
    },
    async commitMark(name, from, to, work) {
      checkMark(from, to);
      await transact(name, from, (c) => c.query(`UPDATE ${m} SET seq = $1, term = $2, dropped = $3 WHERE name = $4 AND seq = $5`, [to.offset, to.term, to.dropped, name, from]), `SELECT seq FROM ${m} WHERE name = $1`, work);
    },
    async load(name) {
      checkName('name', name);
      const { c, done } = await borrow();
      try {
        await setup(c);
        await c.query(`INSERT INTO ${t} (name, seq) VALUES ($1, 0) ON CONFLICT (name) DO NOTHING`, [name]);
        const r = await c.query(`SELECT seq FROM ${t} WHERE name = $1`, [name]);
        done();
        return seqOf(r.rows[0]?.seq ?? 0);
      } catch (err) {
        done(err instanceof Error ? err : undefined);
        throw err;
      }
    },
    async commit(name, from, to, work) {
      await transact(name, from, (c) => c.query(`UPDATE ${t} SET seq = $1 WHERE name = $2 AND seq = $3`, [to, name, from]), `SELECT seq FROM ${t} WHERE name = $1`, work);
    },
  };
}

// --- MySQL / MariaDB ----------------------------------------------------------------------------

/** A mysql2/promise Connection or PoolConnection. */
export interface MysqlSinkConnection {
  execute(sql: string, values?: (string | number)[]): Promise<[unknown, unknown]>;
  query(sql: string): Promise<[unknown, unknown]>;
}

/** A mysql2/promise Pool: each batch takes one connection for its transaction. */
export interface MysqlSinkPool<C extends MysqlSinkConnection = MysqlSinkConnection> {
  getConnection(): Promise<C & { release(): void; destroy(): void }>;
}

/**
 * A MySQL or MariaDB projection (mysql2/promise; InnoDB tables, or the projection is not
 * transactional). Pass `{ pool }` or `{ connection }`; `apply` gets the connection holding the
 * transaction.
 */
export function mysqlSink<C extends MysqlSinkConnection>(db: { pool: MysqlSinkPool<C> } | { connection: C }, options?: SinkOptions): FollowerSink<C> & PartitionSink<C> {
  const t = `\`${tableName(options)}\``;
  const m = `\`${marksTableName(options)}\``;
  const borrow = async (): Promise<{ c: C; done: (broken: boolean) => void }> => {
    if ('pool' in db) {
      const c = await db.pool.getConnection();
      return { c, done: (broken) => (broken ? c.destroy() : c.release()) };
    }
    return { c: db.connection, done: () => {} };
  };
  let ready = false;
  const setup = async (c: MysqlSinkConnection): Promise<void> => {
    if (ready) return;
    // VARBINARY: names compare byte for byte, whatever the server's collation.
    await c.query(`CREATE TABLE IF NOT EXISTS ${t} (name VARBINARY(800) PRIMARY KEY, seq BIGINT NOT NULL) ENGINE=InnoDB`);
    await c.query(`CREATE TABLE IF NOT EXISTS ${m} (name VARBINARY(800) PRIMARY KEY, seq BIGINT NOT NULL, term BIGINT NOT NULL, dropped BIGINT NOT NULL) ENGINE=InnoDB`);
    ready = true;
  };
  /** One transaction on a borrowed connection: `move` (the compare-and-set) then `work`; a connection whose transaction failed is destroyed. */
  // One given connection: its transactions one after another. A pool: one connection per transaction.
  const serial = 'pool' in db ? <T>(fn: () => Promise<T>) => fn() : serializer();
  const transact = (name: string, from: number, move: (c: C) => Promise<[unknown, unknown]>, current: string, work: (tx: C) => Promise<void>): Promise<void> => serial(() => transactNow(name, from, move, current, work));
  const transactNow = async (name: string, from: number, move: (c: C) => Promise<[unknown, unknown]>, current: string, work: (tx: C) => Promise<void>): Promise<void> => {
    const { c, done } = await borrow();
    let broken = true;
    try {
      await setup(c);
      await c.query('START TRANSACTION');
      try {
        const [moved] = await move(c);
        if (Number((moved as { affectedRows?: unknown }).affectedRows ?? 0) !== 1) {
          const [rows] = await c.execute(current, [name]);
          const row = (rows as { seq: unknown }[])[0];
          throw conflict(name, from, row ? seqOf(row.seq) : null);
        }
        await work(c);
        await c.query('COMMIT');
      } catch (err) {
        await rollbackQuietly(() => c.query('ROLLBACK'));
        if (err instanceof OffsetMismatchError) broken = false;
        throw err;
      }
      broken = false;
    } finally {
      done(broken);
    }
  };
  return {
    kind: 'mysql',
    async loadMark(name) {
      checkName('name', name);
      const { c, done } = await borrow();
      let broken = true;
      try {
        await setup(c);
        await c.execute(`INSERT IGNORE INTO ${m} (name, seq, term, dropped) VALUES (?, 0, 0, 0)`, [name]);
        const [rows] = await c.execute(`SELECT seq, term, dropped FROM ${m} WHERE name = ?`, [name]);
        broken = false;
        return markOf((rows as { seq: unknown; term: unknown; dropped: unknown }[])[0]);
      } finally {
        done(broken);
      }
    },
    async commitMark(name, from, to, work) {
      checkMark(from, to);
      await transact(name, from, (c) => c.execute(`UPDATE ${m} SET seq = ?, term = ?, dropped = ? WHERE name = ? AND seq = ?`, [to.offset, to.term, to.dropped, name, from]), `SELECT seq FROM ${m} WHERE name = ?`, work);
    },
    async load(name) {
      checkName('name', name);
      const { c, done } = await borrow();
      let broken = true;
      try {
        await setup(c);
        await c.execute(`INSERT IGNORE INTO ${t} (name, seq) VALUES (?, 0)`, [name]);
        const [rows] = await c.execute(`SELECT seq FROM ${t} WHERE name = ?`, [name]);
        broken = false;
        return seqOf((rows as { seq: unknown }[])[0]?.seq ?? 0);
      } finally {
        done(broken);
      }
    },
    async commit(name, from, to, work) {
      await transact(name, from, (c) => c.execute(`UPDATE ${t} SET seq = ? WHERE name = ? AND seq = ?`, [to, name, from]), `SELECT seq FROM ${t} WHERE name = ?`, work);
    },
  };
}
