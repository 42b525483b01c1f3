/**
 * The resource of `tenure demo --via sql|http|nats|amqp|mqtt`: one row in a SQLite file, and the
 * row's own history. Each write that lands on the row (a fenced UPDATE, the HTTP handler's write
 * in the guard's transaction, the consumer's apply) is recorded by a trigger in the same statement,
 * in the order the database applied it. The demo checks that history, not what the writers say:
 * a lower term's write applied after a higher term's is a violation, whoever believed what.
 */
import { openDatabase } from '../stores/sqlite/driver.js';
import type { SqliteDatabase } from '../stores/sqlite/driver.js';

/** The fenced row: `value` is the last write's payload, the fence columns are fencedUpdate's defaults. */
export const LEDGER_TABLE = 'demo_row';
/** The key of the one row the demo writes. */
export const LEDGER_ROW = 'demo';

/** A write as the resource applied it: its place in the history, its term and its payload. */
export interface AppliedWrite {
  readonly seq: number;
  readonly term: number;
  readonly payload: string;
}

const SCHEMA = `
  CREATE TABLE IF NOT EXISTS ${LEDGER_TABLE} (
    id TEXT PRIMARY KEY, value TEXT, last_fence_token INTEGER, last_fence_lease TEXT);
  CREATE TABLE IF NOT EXISTS demo_history (
    seq INTEGER PRIMARY KEY, term INTEGER NOT NULL, payload TEXT NOT NULL);
  CREATE TRIGGER IF NOT EXISTS demo_row_history AFTER UPDATE ON ${LEDGER_TABLE}
  BEGIN
    INSERT INTO demo_history (term, payload) VALUES (NEW.last_fence_token, NEW.value);
  END;
  INSERT OR IGNORE INTO ${LEDGER_TABLE} (id) VALUES ('${LEDGER_ROW}');`;

/** Open the SQLite file `path` (created if missing) with the row and its history in place. */
export function openLedger(path: string, busyTimeoutMs: number): SqliteDatabase {
  const { db } = openDatabase(path);
  try {
    db.exec(`PRAGMA busy_timeout = ${Math.max(0, Math.round(busyTimeoutMs))}`);
    db.exec('PRAGMA journal_mode = WAL');
    db.exec(`BEGIN IMMEDIATE; ${SCHEMA} COMMIT;`);
  } catch (err) {
    try {
      db.exec('ROLLBACK');
    } catch {
      // no transaction open
    }
    db.close();
    throw err;
  }
  return db;
}

/** The history after `after`, in the order the writes were applied, at most `limit` of them. */
export function readLedger(db: SqliteDatabase, after: number, limit: number): AppliedWrite[] {
  return db
    .prepare('SELECT seq, term, payload FROM demo_history WHERE seq > ? ORDER BY seq LIMIT ?')
    .all(after, limit)
    .map((row) => ({ seq: Number(row.seq), term: Number(row.term), payload: String(row.payload) }));
}
