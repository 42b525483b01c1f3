/**
 * The few calls tenure needs from SQLite, served by `node:sqlite` where the runtime has it
 * (Node >= 22.5) and by `better-sqlite3` otherwise. Only positional `?` parameters are used, which
 * both drivers bind the same way.
 */
import { createRequire } from 'node:module';
import { DriverMissingError } from '../../core/index.js';

export type SqlValue = string | number | bigint | null;
export type SqlRow = Record<string, SqlValue>;

export interface SqliteStatement {
  run(...params: SqlValue[]): { changes: number | bigint };
  get(...params: SqlValue[]): SqlRow | undefined;
  all(...params: SqlValue[]): SqlRow[];
}

export interface SqliteDatabase {
  exec(sql: string): void;
  prepare(sql: string): SqliteStatement;
  close(): void;
}

export type SqliteDriverName = 'node:sqlite' | 'better-sqlite3';

const require = createRequire(import.meta.url);

interface NodeSqliteModule {
  DatabaseSync: new (path: string) => SqliteDatabase;
}
type BetterSqliteCtor = new (path: string) => SqliteDatabase;

function loadNodeSqlite(): NodeSqliteModule | null {
  try {
    // node:sqlite prints an ExperimentalWarning on some Node versions; silence only that one.
    const emitWarning = process.emitWarning;
    process.emitWarning = ((warning: string | Error, ...rest: unknown[]) => {
      const text = typeof warning === 'string' ? warning : warning.message;
      if (/SQLite/i.test(text)) return;
      (emitWarning as (...args: unknown[]) => void).call(process, warning, ...rest);
    }) as typeof process.emitWarning;
    try {
      return require('node:sqlite') as NodeSqliteModule;
    } finally {
      process.emitWarning = emitWarning;
    }
  } catch {
    return null;
  }
}

/** Open `path` with the preferred available driver (or the one named). */
export function openDatabase(path: string, prefer?: SqliteDriverName): { db: SqliteDatabase; driver: SqliteDriverName } {
  if (prefer !== 'better-sqlite3') {
    const mod = loadNodeSqlite();
    if (mod) return { db: new mod.DatabaseSync(path), driver: 'node:sqlite' };
    if (prefer === 'node:sqlite') throw new DriverMissingError('node:sqlite (Node >= 22.5)', 'sqlite');
  }
  let Ctor: BetterSqliteCtor;
  try {
    Ctor = require('better-sqlite3') as BetterSqliteCtor;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'MODULE_NOT_FOUND') throw new DriverMissingError('better-sqlite3', 'sqlite');
    throw err;
  }
  return { db: new Ctor(path), driver: 'better-sqlite3' };
}
