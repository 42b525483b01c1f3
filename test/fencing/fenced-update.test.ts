/**
 * fencedUpdate on the user's own table, one suite run per SQL dialect (PostgreSQL, MySQL,
 * SQLite) on real servers / files: the order of terms, forged terms and other leases refused,
 * odd values refused, a missing lease column or table explained, racing writers, and every stale
 * refusal counted in tenure_fenced_rejections_total.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import mysql from 'mysql2/promise';
import pg from 'pg';
import { Registry } from 'prom-client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { InvalidArgumentError, StaleTermError } from '../../src/core/index.js';
import type { Store } from '../../src/core/index.js';
import { fencedUpdate, mysqlDialect, postgresDialect, sqliteDialect } from '../../src/fencing/index.js';
import type { FencedUpdate, FencedUpdateResult, FencingToken } from '../../src/fencing/index.js';
import { collectMetrics } from '../../src/observe/index.js';
import { MysqlStore } from '../../src/stores/mysql/index.js';
import { PostgresStore } from '../../src/stores/postgres/index.js';
import { SqliteStore } from '../../src/stores/sqlite/index.js';
import type { SqliteDatabase } from '../../src/fencing/index.js';
import { createMysqlDatabase, createPostgresDatabase } from '../stores/sql-servers.js';

/** One dialect on a fresh database of its own. */
interface Harness {
  /** The lease store writing tenure_leases in the same database. */
  readonly store: Store;
  /** `TABLE` qualified by the schema / database it lives in. */
  qualified(table: string): string;
  /** Column types: an int, a short text, the token column, the lease column, a case-insensitive text. */
  readonly types: { int: string; bool: string; text: string; token: string; lease: string; ciText: string };
  /** Whether the dialect refuses U+0000 in a string. */
  readonly refusesNul: boolean;
  exec(sql: string): Promise<void>;
  /** Rows, with terms as numbers and bytes as text. */
  rows(sql: string): Promise<Record<string, unknown>[]>;
  update(token: FencingToken, update: FencedUpdate): Promise<FencedUpdateResult>;
  close(): Promise<void>;
}

function normal(row: Record<string, unknown>): Record<string, unknown> {
  return Object.fromEntries(
    Object.entries(row).map(([k, v]) => [k, Buffer.isBuffer(v) ? v.toString('utf8') : k === 'last_fence_token' && v !== null ? Number(v) : v]),
  );
}

const dialects: Record<string, () => Promise<Harness>> = {
  postgres: async () => {
    const db = await createPostgresDatabase();
    const pool = new pg.Pool({ connectionString: db.url, max: 4 });
    pool.on('error', () => {}); // its clients are cut when the database is dropped
    const store = new PostgresStore({ pool });
    return {
      store,
      qualified: (t) => `public.${t}`,
      types: { int: 'int', bool: 'boolean', text: 'text', token: 'bigint', lease: 'text', ciText: 'text' },
      refusesNul: true,
      exec: async (sql) => void (await pool.query(sql)),
      rows: async (sql) => (await pool.query(sql)).rows.map(normal),
      update: (token, update) => fencedUpdate(postgresDialect, pool, token, update),
      close: async () => {
        await store.close();
        await pool.end();
        await db.drop();
      },
    };
  },
  mysql: async () => {
    const db = await createMysqlDatabase();
    const pool = mysql.createPool({ uri: db.url, connectionLimit: 4 });
    const store = new MysqlStore({ pool });
    return {
      store,
      qualified: (t) => `${db.name}.${t}`,
      types: { int: 'INT', bool: 'BOOLEAN', text: 'VARCHAR(40) NULL', token: 'BIGINT NULL', lease: 'VARBINARY(800) NULL', ciText: 'VARCHAR(200) COLLATE utf8mb4_general_ci NULL' },
      refusesNul: false,
      exec: async (sql) => void (await pool.query(sql)),
      rows: async (sql) => ((await pool.query(sql))[0] as Record<string, unknown>[]).map(normal),
      update: (token, update) => fencedUpdate(mysqlDialect, pool, token, update),
      close: async () => {
        await store.close();
        await pool.end();
        await db.drop();
      },
    };
  },
};

/**
 * better-sqlite3, when its native binding loads on this Node (CI builds it for Node 20; on Node 24
 * the store and this suite use node:sqlite below). Every Node runs at least one of the two.
 */
const betterSqliteLoads = ((): boolean => {
  try {
    new Database(':memory:').close();
    return true;
  } catch {
    return false;
  }
})();
if (betterSqliteLoads) {
  dialects['sqlite (better-sqlite3)'] = () =>
    sqliteHarness((path) => {
      const db = new Database(path);
      db.pragma('busy_timeout = 5000');
      return db;
    });
}

/** node:sqlite (Node >= 22.5), when this Node has it. */
type DatabaseSync = new (path: string, options?: { timeout?: number }) => SqliteDatabase & { exec(sql: string): void; close(): void };
const nodeSqlite = ((): DatabaseSync | null => {
  try {
    return (createRequire(import.meta.url)('node:sqlite') as { DatabaseSync: DatabaseSync }).DatabaseSync;
  } catch {
    return null;
  }
})();
if (nodeSqlite) dialects['sqlite (node:sqlite)'] = () => sqliteHarness((path) => new nodeSqlite(path, { timeout: 5000 }));

it('runs the SQLite dialect on at least one driver on this Node', () => {
  expect(Object.keys(dialects).filter((k) => k.startsWith('sqlite'))).not.toEqual([]);
});

/** The user's own handle on the SqliteStore's file. */
async function sqliteHarness(openDb: (path: string) => SqliteDatabase & { exec(sql: string): unknown; close(): unknown }): Promise<Harness> {
  const dir = mkdtempSync(join(tmpdir(), 'tenure-fenced-'));
  const path = join(dir, 'app.db');
  const store = new SqliteStore({ path });
  await store.list(); // creates tenure_leases
  const db = openDb(path);
  return {
    store,
    qualified: (t) => `main.${t}`,
    types: { int: 'INTEGER', bool: 'INTEGER', text: 'TEXT', token: 'INTEGER', lease: 'TEXT', ciText: 'TEXT COLLATE NOCASE' },
    refusesNul: false,
    exec: async (sql) => void db.exec(sql),
    rows: async (sql) => (db.prepare(sql).all() as Record<string, unknown>[]).map(normal),
    update: (token, update) => fencedUpdate(sqliteDialect, db, token, update),
    close: async () => {
      db.close();
      await store.close();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

describe.each(Object.keys(dialects))("fencedUpdate on the user's own table: %s", (name) => {
  let h: Harness;
  const registry = new Registry();
  let stopMetrics: () => void = () => {};
  beforeAll(async () => {
    h = await dialects[name]!();
    stopMetrics = collectMetrics({}, { registry });
  });
  afterAll(async () => {
    stopMetrics();
    await h?.close();
  });
  const rejections = async (lease: string): Promise<number> => {
    const m = new RegExp(`tenure_fenced_rejections_total\\{lease="${lease}",path="(?:sql|stream)",side="guard"\\} (\\d+)`).exec(await registry.metrics());
    return m ? Number(m[1]) : 0;
  };
  // Terms as the lease store issues them: fencedUpdate checks a token's term against
  // tenure_leases (the default prefix's lease table) in the same statement.
  const issue = async (lease: string, upTo: number): Promise<void> => {
    for (let i = 0; ; i++) {
      const { lease: l } = await h.store.acquire(lease, `issuer${i}~1`, 60_000);
      await h.store.release(lease, l.owner, l.term);
      if (l.term >= upTo) return;
    }
  };
  const table = (name: string, cols: string): Promise<void> => {
    const { token, lease } = h.types;
    return h.exec(`CREATE TABLE ${name} (id ${h.types.int} PRIMARY KEY, ${cols}, last_fence_token ${token}, last_fence_lease ${lease})`);
  };

  it('applies an update only for a term >= the last one that wrote the row, in the same statement', async () => {
    await issue('billing', 5);
    await table('accounts', `balance ${h.types.int} NOT NULL`);
    await h.exec('INSERT INTO accounts (id, balance) VALUES (1, 100), (2, 0)');
    const t = (term: number) => ({ lease: 'billing', term });
    expect(await h.update(t(3), { table: 'accounts', set: { balance: 90 }, where: { id: 1 } })).toEqual({ updated: 1 });
    // The same values again still count the row (matched, not changed).
    expect(await h.update(t(3), { table: 'accounts', set: { balance: 90 }, where: { id: 1 } })).toEqual({ updated: 1 });
    const err = await h.update(t(2), { table: 'accounts', set: { balance: 0 }, where: { id: 1 } }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(StaleTermError);
    expect(err).toMatchObject({ lease: 'billing', term: 2, currentTerm: 3 });
    expect(await rejections('billing')).toBe(1);
    expect(await h.update(t(4), { table: h.qualified('accounts'), set: { balance: 70 }, where: { id: 1 } })).toEqual({ updated: 1 });
    expect(await h.update(t(1), { table: 'accounts', set: { balance: 5 }, where: { id: 99 } })).toEqual({ updated: 0 });
    expect(await h.rows('SELECT id, balance, last_fence_token, last_fence_lease FROM accounts ORDER BY id')).toEqual([
      { id: 1, balance: 70, last_fence_token: 4, last_fence_lease: 'billing' },
      { id: 2, balance: 0, last_fence_token: null, last_fence_lease: null },
    ]);
    await expect(h.update(t(5), { table: 'accounts; DROP TABLE x', set: { balance: 1 }, where: { id: 1 } })).rejects.toBeInstanceOf(InvalidArgumentError);
    await expect(h.update(t(5), { table: 'accounts', set: { 'balance = 0 --': 1 }, where: { id: 1 } })).rejects.toBeInstanceOf(InvalidArgumentError);
    await expect(h.update(t(5), { table: 'accounts', set: { balance: 1 }, where: {} })).rejects.toBeInstanceOf(InvalidArgumentError);
    // The statement is compiled once per shape: a name that only differs by a control character
    // from one already compiled is not mistaken for it, and is refused.
    await expect(h.update(t(5), { table: 'accounts', set: { 'balance\u0001': 1 }, where: { id: 1 } })).rejects.toBeInstanceOf(InvalidArgumentError);
    await expect(h.update(t(5), { table: 'accounts\u0001', set: { balance: 1 }, where: { id: 1 } })).rejects.toBeInstanceOf(InvalidArgumentError);
    await expect(h.update(t(5), { table: 'accounts', set: { balance: 1 }, where: { id: 1 }, tokenColumn: undefined, leaseColumn: 'last_fence_lease\u0004' })).rejects.toBeInstanceOf(InvalidArgumentError);
    expect(await h.rows('SELECT id, balance FROM accounts ORDER BY id')).toEqual([
      { id: 1, balance: 70 },
      { id: 2, balance: 0 },
    ]);
    expect(await rejections('billing')).toBe(1);
  });

  it('cannot be poisoned by a forged token: a term never issued, or another lease, is refused and writes nothing', async () => {
    await issue('payroll', 2);
    await issue('Payroll', 3);
    // A case-insensitive lease column (where the dialect has one): still compared byte for byte.
    await h.exec(
      `CREATE TABLE ledger (id ${h.types.int} PRIMARY KEY, note ${h.types.text}, last_fence_token ${h.types.token}, last_fence_lease ${h.types.ciText})`,
    );
    await h.exec("INSERT INTO ledger (id, note) VALUES (1, 'new')");
    const update = (note: string) => ({ table: 'ledger', set: { note }, where: { id: 1 } });
    // A term nobody issued, of a lease that does not exist and of the real one.
    for (const forged of [{ lease: 'anything', term: 2 ** 52 }, { lease: 'payroll', term: 2 ** 52 }, { lease: 'payroll', term: 3 }]) {
      const err = await h.update(forged, update('forged')).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(InvalidArgumentError);
      expect((err as Error).message).toBe(`token.term: term ${forged.term} was never issued for lease ${forged.lease} (latest ${forged.lease === 'payroll' ? 2 : 0})`);
    }
    // The real leader still writes, and binds the row to its lease.
    expect(await h.update({ lease: 'payroll', term: 2 }, update('by payroll'))).toEqual({ updated: 1 });
    // Another lease's token (differing only in case), with a term that lease was issued and that is
    // above the row's, is refused: only the lease binding stops it.
    const err = await h.update({ lease: 'Payroll', term: 3 }, update('by Payroll')).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(InvalidArgumentError);
    expect((err as Error).message).toBe('token.lease: rows of ledger are fenced by lease payroll, not Payroll');
    expect(await h.rows('SELECT note, last_fence_token, last_fence_lease FROM ledger')).toEqual([
      { note: 'by payroll', last_fence_token: 2, last_fence_lease: 'payroll' },
    ]);
    expect(await h.update({ lease: 'payroll', term: 2 }, update('again'))).toEqual({ updated: 1 });
    // Bad input, not stale refusals: none counted.
    expect(await rejections('payroll')).toBe(0);
    expect(await rejections('Payroll')).toBe(0);
  });

  it('refuses odd values (undefined, objects, NaN, functions, NUL where text cannot hold it) as bad input, writing nothing', async () => {
    await issue('vals', 1);
    await table('vals', `v ${h.types.text}`);
    await h.exec("INSERT INTO vals (id, v) VALUES (1, 'keep')");
    const token = { lease: 'vals', term: 1 };
    const bad: [string, unknown][] = [
      ['undefined', undefined],
      ['an object', { a: 1 }],
      ['an array', [1, 2]],
      ['NaN', Number.NaN],
      ['Infinity', Number.POSITIVE_INFINITY],
      ['a function', () => 1],
      ['an invalid Date', new Date(Number.NaN)],
      ...(h.refusesNul ? ([['a NUL', 'a\u0000b']] as [string, unknown][]) : []),
    ];
    for (const [what, value] of bad) {
      const set = await h.update(token, { table: 'vals', set: { v: value as string }, where: { id: 1 } }).catch((e: unknown) => e);
      expect(set, what).toBeInstanceOf(InvalidArgumentError);
      expect((set as Error).message, what).toMatch(/^set\.v: /);
      const where = await h.update(token, { table: 'vals', set: { v: 'x' }, where: { id: value as string } }).catch((e: unknown) => e);
      expect(where, what).toBeInstanceOf(InvalidArgumentError);
      expect((where as Error).message, what).toMatch(/^where\.id: /);
    }
    await expect(h.update(token, { table: 'vals', set: { last_fence_token: 9 }, where: { id: 1 } })).rejects.toThrow(/^set\.last_fence_token: /);
    await expect(h.update(token, { table: 'vals', set: { last_fence_lease: 'x' }, where: { id: 1 } })).rejects.toThrow(/^set\.last_fence_lease: /);
    expect(await h.rows('SELECT v, last_fence_token FROM vals')).toEqual([{ v: 'keep', last_fence_token: null }]);
    // Good values still go through.
    expect(await h.update(token, { table: 'vals', set: { v: 'ok' }, where: { id: 1, v: 'keep' } })).toEqual({ updated: 1 });
    expect(await h.update(token, { table: 'vals', set: { v: null }, where: { id: 1n } })).toEqual({ updated: 1 });
    expect(await rejections('vals')).toBe(0);
  });

  it('says what to do when the lease column or the lease table is missing, and lets both checks be turned off', async () => {
    await h.exec(`CREATE TABLE legacy (id ${h.types.int} PRIMARY KEY, v ${h.types.text}, last_fence_token ${h.types.token})`);
    await h.exec("INSERT INTO legacy (id, v) VALUES (1, 'old')");
    const err = await h.update({ lease: 'billing', term: 1 }, { table: 'legacy', set: { v: 'x' }, where: { id: 1 } }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(InvalidArgumentError);
    expect((err as Error).message).toMatch(/^leaseColumn: the table has no column last_fence_lease: add it \(ALTER TABLE … ADD COLUMN last_fence_lease /);
    const noTable = await h
      .update({ lease: 'billing', term: 1 }, { table: 'legacy', set: { v: 'x' }, where: { id: 1 }, leaseColumn: null, leaseTable: 'nowhere_leases' })
      .catch((e: unknown) => e);
    expect(noTable).toBeInstanceOf(InvalidArgumentError);
    expect((noTable as Error).message).toMatch(/^leaseTable: no lease table nowhere_leases in this database/);
    expect(await h.rows('SELECT v, last_fence_token FROM legacy')).toEqual([{ v: 'old', last_fence_token: null }]);
    // Unbound rows, leases elsewhere: only the order of terms is checked (documented).
    const unchecked = { table: 'legacy', where: { id: 1 }, leaseColumn: null, leaseTable: null };
    expect(await h.update({ lease: 'elsewhere', term: 7 }, { ...unchecked, set: { v: 'x' } })).toEqual({ updated: 1 });
    await expect(h.update({ lease: 'elsewhere', term: 6 }, { ...unchecked, set: { v: 'y' } })).rejects.toBeInstanceOf(StaleTermError);
    expect(await rejections('elsewhere')).toBe(1);
  });

  it('refuses the call of the per-store fencedUpdate (no dialect) and a missing db with one clear error', async () => {
    const update = { table: 'accounts', set: { balance: 1 }, where: { id: 1 } };
    const call = fencedUpdate as (...args: unknown[]) => Promise<unknown>;
    await expect(call({ query: () => null, execute: () => null, prepare: () => null }, { lease: 'billing', term: 1 }, update)).rejects.toThrow(
      /^dialect: expected postgresDialect, mysqlDialect or sqliteDialect from tenure\/fencing/,
    );
    const dialect = { postgres: postgresDialect, mysql: mysqlDialect }[name] ?? sqliteDialect;
    await expect(call(dialect, undefined, { lease: 'billing', term: 1 }, update)).rejects.toThrow(/^db: expected your \w+ client, pool or database$/);
  });

  it('binds booleans, dates, bigints and bytes', async () => {
    await issue('kinds', 1);
    await table('kinds', `b ${h.types.bool}, n ${h.types.token}, at ${h.types.text}`);
    await h.exec('INSERT INTO kinds (id) VALUES (1)');
    const token = { lease: 'kinds', term: 1 };
    expect(await h.update(token, { table: 'kinds', set: { b: true, n: 2n ** 40n }, where: { id: 1 } })).toEqual({ updated: 1 });
    expect(await h.update(token, { table: 'kinds', set: { b: false }, where: { id: 1, b: true } })).toEqual({ updated: 1 });
    expect(await h.update(token, { table: 'kinds', set: { at: new Date(0) }, where: { id: 1 } })).toEqual({ updated: 1 });
    expect(await h.update(token, { table: 'kinds', set: { at: Buffer.from('bytes') }, where: { id: 1 } })).toEqual({ updated: 1 });
    const [row] = await h.rows('SELECT b, n FROM kinds');
    expect({ b: Number(row!.b), n: Number(row!.n) }).toEqual({ b: 0, n: 2 ** 40 });
  });

  it('lets only one of two racing writers with different terms win, and never the older after the newer', async () => {
    await issue('jobs', 2);
    await table('jobs', `state ${h.types.text}`);
    await h.exec("INSERT INTO jobs (id, state) VALUES (1, 'new')");
    const outcomes = await Promise.all(
      Array.from({ length: 40 }, (_, i) => {
        const term = (i % 2) + 1;
        return h.update({ lease: 'jobs', term }, { table: 'jobs', set: { state: `by ${term}` }, where: { id: 1 } }).then(
          () => `ok ${term}`,
          (e: unknown) => (e instanceof StaleTermError ? 'stale' : `error ${String(e)}`),
        );
      }),
    );
    expect(outcomes.filter((o) => o.startsWith('error'))).toEqual([]);
    expect(outcomes.filter((o) => o === 'ok 2')).toHaveLength(20);
    expect(await h.rows('SELECT state, last_fence_token FROM jobs WHERE id = 1')).toEqual([{ state: 'by 2', last_fence_token: 2 }]);
    expect(await rejections('jobs')).toBe(outcomes.filter((o) => o === 'stale').length);
  });
});
