/**
 * Looking at a SQLite database file from outside the store, with the store's own driver: is some
 * process holding the write lock, and is the file sound.
 */
import { openDatabase } from '../../src/stores/sqlite/driver.js';
import type { SqliteDatabase, SqlRow } from '../../src/stores/sqlite/driver.js';
import { delay } from '../fixtures/harness.js';

export function isBusyError(err: unknown): boolean {
  if (!(err instanceof Error)) return false;
  const code = (err as Error & { code?: unknown; errcode?: unknown }).code;
  const errcode = (err as Error & { errcode?: unknown }).errcode;
  // better-sqlite3: code SQLITE_BUSY; node:sqlite: errcode 5 (SQLITE_BUSY) with a "database is locked" message.
  return (typeof code === 'string' && code.startsWith('SQLITE_BUSY')) || errcode === 5 || /database is locked|SQLITE_BUSY/i.test(err.message);
}

/** A raw connection that never waits for locks (busy_timeout 0). */
export class RawDb {
  readonly db: SqliteDatabase;
  constructor(path: string) {
    this.db = openDatabase(path).db;
    this.db.exec('PRAGMA busy_timeout = 0');
  }

  /** Try to take the write lock once; true if it was free (it is released again at once). */
  tryWriteLock(): boolean {
    try {
      this.db.exec('BEGIN IMMEDIATE');
    } catch (err) {
      if (isBusyError(err)) return false;
      throw err;
    }
    this.db.exec('ROLLBACK');
    return true;
  }

  /**
   * True when the write lock stays taken for `attempts` tries `everyMs` apart. A live process
   * holds it for milliseconds per transaction; only a stopped (or stalled) one holds it that long.
   */
  async writeLockStuck(attempts = 12, everyMs = 25): Promise<boolean> {
    for (let i = 0; i < attempts; i++) {
      if (this.tryWriteLock()) return false;
      await delay(everyMs);
    }
    return true;
  }

  all(sql: string, ...params: (string | number)[]): SqlRow[] {
    return this.db.prepare(sql).all(...params);
  }

  integrity(): string {
    const rows = this.db.prepare('PRAGMA integrity_check').all();
    return rows.map((r) => String(Object.values(r)[0])).join('; ');
  }

  close(): void {
    this.db.close();
  }
}
