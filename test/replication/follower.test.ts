/**
 * Model B on real stores: a leader appends to a fenced stream, a Follower applies it to a
 * projection. The log is kept by every store tenure has (memory, SQLite, PostgreSQL, MySQL, Redis,
 * etcd); the projection lives in SQLite, PostgreSQL or MySQL through the built-in sinks.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type Database from 'better-sqlite3';
import { openTestSqlite } from '../fixtures/sqlite-compat.js';
import mysql from 'mysql2/promise';
import pg from 'pg';
import { afterEach, describe, expect, it } from 'vitest';
import { ApplyError, Follower, OffsetMismatchError, StaleTermError, StoreDataError, StoreUnavailableError, mysqlSink, postgresSink, sqliteSink } from '../../src/index.js';
import type { FencingToken, FollowerSink, Store, StreamEntry } from '../../src/index.js';
import { SqliteStore } from '../../src/stores/sqlite/index.js';
import { backends } from '../contract/backends.js';
import { createMysqlDatabase, createPostgresDatabase } from '../stores/sql-servers.js';

const cleanups: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

function tempDir(): string {
  const dir = mkdtempSync(join(tmpdir(), 'tenure-follow-'));
  cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

/** A projection: one row per applied entry (no unique key, so a duplicate would show as a second row). */
interface Projection<Tx> {
  readonly sink: FollowerSink<Tx>;
  apply(entry: StreamEntry, tx: Tx): Promise<void>;
  rows(): Promise<{ seq: number; payload: string }[]>;
  /** A second sink on the same database (another follower process would have its own connection). */
  another(): Promise<FollowerSink<Tx>>;
}

async function sqliteProjection(): Promise<Projection<Database.Database>> {
  const path = join(tempDir(), 'projection.db');
  const open = (): Database.Database => {
    const db = openTestSqlite(path);
    db.pragma('journal_mode = WAL');
    db.pragma('busy_timeout = 5000');
    cleanups.push(() => {
      db.close();
    });
    return db;
  };
  const db = open();
  db.exec('CREATE TABLE applied (seq INTEGER NOT NULL, payload TEXT NOT NULL)');
  return {
    sink: sqliteSink(db),
    apply: async (e, tx) => {
      tx.prepare('INSERT INTO applied (seq, payload) VALUES (?, ?)').run(e.seq, e.payload);
    },
    rows: async () => db.prepare('SELECT seq, payload FROM applied ORDER BY rowid').all() as { seq: number; payload: string }[],
    another: async () => sqliteSink(open()),
  };
}

async function postgresProjection(): Promise<Projection<pg.PoolClient>> {
  const db = await createPostgresDatabase();
  const pools: pg.Pool[] = [];
  const pool = (): pg.Pool => {
    const p = new pg.Pool({ connectionString: db.url, max: 3 });
    p.on('error', () => {}); // idle clients cut by DROP DATABASE at cleanup
    pools.push(p);
    return p;
  };
  cleanups.push(async () => {
    for (const p of pools) await p.end();
    await db.drop();
  });
  const main = pool();
  await main.query('CREATE TABLE applied (id bigserial PRIMARY KEY, seq bigint NOT NULL, payload text NOT NULL)');
  return {
    sink: postgresSink({ pool: main }),
    apply: async (e, tx) => {
      await tx.query('INSERT INTO applied (seq, payload) VALUES ($1, $2)', [e.seq, e.payload]);
    },
    rows: async () => (await main.query('SELECT seq::int AS seq, payload FROM applied ORDER BY id')).rows as { seq: number; payload: string }[],
    another: async () => postgresSink({ pool: pool() }),
  };
}

async function mysqlProjection(): Promise<Projection<mysql.PoolConnection>> {
  const db = await createMysqlDatabase();
  const pools: mysql.Pool[] = [];
  const pool = (): mysql.Pool => {
    const p = mysql.createPool({ uri: db.url, connectionLimit: 3 });
    pools.push(p);
    return p;
  };
  cleanups.push(async () => {
    for (const p of pools) await p.end();
    await db.drop();
  });
  const main = pool();
  await main.query('CREATE TABLE applied (id BIGINT AUTO_INCREMENT PRIMARY KEY, seq BIGINT NOT NULL, payload TEXT NOT NULL) ENGINE=InnoDB');
  return {
    sink: mysqlSink({ pool: main }),
    apply: async (e, tx) => {
      await tx.execute('INSERT INTO applied (seq, payload) VALUES (?, ?)', [e.seq, e.payload]);
    },
    rows: async () => ((await main.query('SELECT seq, payload FROM applied ORDER BY id'))[0] as { seq: number | string; payload: string }[]).map((r) => ({ seq: Number(r.seq), payload: r.payload })),
    another: async () => mysqlSink({ pool: pool() }),
  };
}

/** Take lease `name` as a fresh owner: a new term, the leader's token. */
async function lead(store: Store, name: string, owner: string): Promise<FencingToken> {
  const r = await store.acquire(name, owner, 60_000);
  if (!r.acquired) throw new Error(`${owner} did not acquire ${name}`);
  return { lease: name, term: r.lease.term };
}

async function appendMany(store: Store, token: FencingToken, stream: string, from: number, count: number): Promise<void> {
  for (let i = from; i < from + count; i++) await store.appendFenced(token, stream, `e${i}`);
}

/** Run a follower until it has applied `seq`, then stop it. */
async function followTo<Tx>(f: Follower<Tx>, seq: number, timeoutMs = 60_000): Promise<void> {
  const done = f.start();
  const deadline = Date.now() + timeoutMs;
  while (f.applied < seq) {
    if (Date.now() > deadline) throw new Error(`follower applied ${f.applied}, expected ${seq} within ${timeoutMs} ms`);
    await Promise.race([done, new Promise((r) => setTimeout(r, 10))]);
  }
  await f.stop();
  await done;
}

function expectExactly(rows: { seq: number; payload: string }[], n: number): void {
  expect(rows.map((r) => r.seq)).toEqual(Array.from({ length: n }, (_, i) => i + 1));
  expect(rows.map((r) => r.payload)).toEqual(Array.from({ length: n }, (_, i) => `e${i + 1}`));
}

describe.each(backends)('Follower over the $name store', (backend) => {
  async function openLog(): Promise<Store> {
    const { store, cleanup } = await backend.open();
    cleanups.push(cleanup);
    return store;
  }

  it('applies every entry once, in order, in batches, and resumes where it stopped after a long absence', { timeout: 120_000 }, async () => {
    const store = await openLog();
    const proj = await sqliteProjection();
    const token = await lead(store, 'g', 'leader-1');
    await appendMany(store, token, 's', 1, 250);
    const batches: number[] = [];
    const f1 = new Follower({ store, stream: 's', sink: proj.sink, apply: proj.apply, batchSize: 100, pollMs: 5 });
    f1.on('applied', (b) => batches.push(b.count));
    await followTo(f1, 250);
    expect(batches).toEqual([100, 100, 50]);
    expectExactly(await proj.rows(), 250);
    expect(f1.lag()).toMatchObject({ entries: 0, atLeast: false, behindMs: 0 });

    // A long absence: the leader writes 1,250 more while no follower runs.
    await appendMany(store, token, 's', 251, 1250);
    const f2 = new Follower({ store, stream: 's', sink: proj.sink, apply: proj.apply, batchSize: 500, pollMs: 5 });
    let firstLag: { entries: number; atLeast: boolean } | null = null;
    let appliedThen = 0;
    f2.once('applied', () => {
      firstLag = f2.lag();
      appliedThen = f2.applied;
    });
    await followTo(f2, 1500);
    // Mid catch-up: behind by at least what the last full page or the store's push showed, never
    // by more than the log holds (the head told by push is the log's: 1500).
    expect(firstLag).toEqual(expect.objectContaining({ atLeast: true }));
    expect(appliedThen).toBe(750); // 250 before, one batch of 500
    expect([0, 1500 - appliedThen]).toContain(firstLag!.entries);
    expectExactly(await proj.rows(), 1500);
  });

  it("a deposed leader's append is refused by the store, so no follower ever applies it", { timeout: 60_000 }, async () => {
    const store = await openLog();
    const proj = await sqliteProjection();
    const old = await lead(store, 'g', 'leader-1');
    await appendMany(store, old, 's', 1, 3);
    await store.release('g', 'leader-1', old.term);
    const next = await lead(store, 'g', 'leader-2');
    expect(next.term).toBeGreaterThan(old.term);
    await appendMany(store, next, 's', 4, 2);
    // The zombie wakes and writes with its old token.
    await expect(store.appendFenced(old, 's', 'zombie')).rejects.toBeInstanceOf(StaleTermError);
    const terms: number[] = [];
    await followTo(
      new Follower({ store, stream: 's', sink: proj.sink, apply: async (e, tx) => { terms.push(e.term); await proj.apply(e, tx); }, pollMs: 5 }),
      5,
    );
    expectExactly(await proj.rows(), 5);
    expect(terms).toEqual([old.term, old.term, old.term, next.term, next.term]);
  });

  it('an apply that throws stops the follower on that entry, rolls its batch back, and the next run starts there', { timeout: 60_000 }, async () => {
    const store = await openLog();
    const proj = await sqliteProjection();
    const token = await lead(store, 'g', 'leader-1');
    await appendMany(store, token, 's', 1, 30);
    const failed: { seq: number | null }[] = [];
    const f = new Follower({
      store,
      stream: 's',
      sink: proj.sink,
      batchSize: 10,
      pollMs: 5,
      apply: async (e, tx) => {
        if (e.seq === 17) throw new Error('cannot apply e17');
        await proj.apply(e, tx);
      },
    });
    f.on('failed', (x) => failed.push({ seq: x.seq }));
    const err = await f.start().then(() => null, (e: unknown) => e);
    expect(err).toBeInstanceOf(ApplyError);
    expect((err as ApplyError).seq).toBe(17);
    expect((err as Error).message).toContain('cannot apply e17');
    expect(failed).toEqual([{ seq: 17 }]);
    expect(f.applied).toBe(10);
    expectExactly(await proj.rows(), 10); // entries 11..16 of the failed batch were rolled back
    const again = new Follower({ store, stream: 's', sink: proj.sink, apply: proj.apply, batchSize: 10, pollMs: 5 });
    await followTo(again, 30);
    expectExactly(await proj.rows(), 30);
  });

  it('a saved offset beyond the end of the log is a clear error, and nothing is applied', { timeout: 60_000 }, async () => {
    const store = await openLog();
    const proj = await sqliteProjection();
    const token = await lead(store, 'g', 'leader-1');
    await appendMany(store, token, 's', 1, 5);
    await followTo(new Follower({ store, stream: 's', sink: proj.sink, apply: proj.apply, pollMs: 5 }), 5);
    // The same projection pointed at another (shorter) stream of the same name on a fresh store.
    const other = await openLog();
    const t2 = await lead(other, 'g', 'leader-1');
    await appendMany(other, t2, 's', 1, 2);
    const err = await new Follower({ store: other, stream: 's', sink: proj.sink, apply: proj.apply, pollMs: 5 }).start().then(() => null, (e: unknown) => e);
    expect(err).toBeInstanceOf(OffsetMismatchError);
    expect((err as Error).message).toMatch(/saved offset 5 is beyond the end of stream "s"/);
    expectExactly(await proj.rows(), 5);
  });
});

describe.each([
  { name: 'sqlite', make: sqliteProjection as () => Promise<Projection<unknown>> },
  { name: 'postgres', make: postgresProjection as () => Promise<Projection<unknown>> },
  { name: 'mysql', make: mysqlProjection as () => Promise<Projection<unknown>> },
])('the $name sink', ({ make }) => {
  async function log(): Promise<Store> {
    const store = new SqliteStore({ path: join(tempDir(), 'log.db') });
    cleanups.push(() => store.close());
    return store;
  }

  it('keeps the offset with the projection: stop and restart applies nothing twice', { timeout: 60_000 }, async () => {
    const store = await log();
    const proj = await make();
    const token = await lead(store, 'g', 'leader-1');
    await appendMany(store, token, 's', 1, 120);
    await followTo(new Follower({ store, stream: 's', sink: proj.sink, apply: proj.apply, batchSize: 50, pollMs: 5 }), 120);
    await appendMany(store, token, 's', 121, 30);
    await followTo(new Follower({ store, stream: 's', sink: await proj.another(), apply: proj.apply, batchSize: 50, pollMs: 5 }), 150);
    expectExactly(await proj.rows(), 150);
  });

  it('two followers of the same name never apply an entry twice: the offset is compare-and-set', { timeout: 60_000 }, async () => {
    const store = await log();
    const proj = await make();
    const token = await lead(store, 'g', 'leader-1');
    await appendMany(store, token, 's', 1, 200);
    const slow = (ms: number) => async (e: StreamEntry, tx: unknown) => {
      await new Promise((r) => setTimeout(r, ms));
      await proj.apply(e, tx);
    };
    const a = new Follower({ store, stream: 's', sink: proj.sink, apply: slow(1), batchSize: 20, pollMs: 5 });
    const b = new Follower({ store, stream: 's', sink: await proj.another(), apply: slow(1), batchSize: 20, pollMs: 5 });
    const results = await Promise.allSettled([a.start(), b.start(), (async () => {
      while (Math.max(a.applied, b.applied) < 200) await new Promise((r) => setTimeout(r, 20));
      await a.stop();
      await b.stop();
    })()]);
    const errors = results.filter((r) => r.status === 'rejected').map((r) => (r as PromiseRejectedResult).reason as unknown);
    for (const e of errors) expect(e).toBeInstanceOf(OffsetMismatchError);
    expectExactly(await proj.rows(), 200);
  });
});

describe('bad entries', () => {
  it('a corrupted entry (a term the store cannot decode) stops the follower before it, with StoreDataError', { timeout: 30_000 }, async () => {
    const dir = tempDir();
    const store = new SqliteStore({ path: join(dir, 'log.db') });
    cleanups.push(() => store.close());
    const proj = await sqliteProjection();
    const token = await lead(store, 'g', 'leader-1');
    await appendMany(store, token, 's', 1, 6);
    const raw = openTestSqlite(join(dir, 'log.db'));
    raw.pragma('busy_timeout = 5000');
    raw.prepare("UPDATE tenure_streams SET term = 'garbage' WHERE stream = 's' AND seq = 4").run();
    raw.close();
    const f = new Follower({ store, stream: 's', sink: proj.sink, apply: proj.apply, batchSize: 2, pollMs: 5 });
    const err = await f.start().then(() => null, (e: unknown) => e);
    expect(err).toBeInstanceOf(StoreDataError);
    expect(f.applied).toBe(2);
    expectExactly(await proj.rows(), 2);
  });

  it('applyBatch gets each batch whole; a throw stops the follower on the batch, rolled back', { timeout: 30_000 }, async () => {
    const store = new SqliteStore({ path: join(tempDir(), 'log.db') });
    cleanups.push(() => store.close());
    const proj = await sqliteProjection();
    const token = await lead(store, 'g', 'leader-1');
    await appendMany(store, token, 's', 1, 25);
    const sizes: number[] = [];
    const f = new Follower({
      store,
      stream: 's',
      sink: proj.sink,
      batchSize: 10,
      pollMs: 5,
      applyBatch: async (entries, tx) => {
        sizes.push(entries.length);
        for (const e of entries) await proj.apply(e, tx);
        if (entries.some((e) => e.seq === 17)) throw new Error('batch with e17 refused');
      },
    });
    const err = await f.start().then(() => null, (e: unknown) => e);
    expect(err).toBeInstanceOf(ApplyError);
    expect((err as ApplyError).seq).toBe(11);
    expect(sizes).toEqual([10, 10]);
    expectExactly(await proj.rows(), 10);
  });

  it('stops on its AbortSignal and on async disposal, reports lag, and a store failure is retried from the saved offset', { timeout: 30_000 }, async () => {
    const store = new SqliteStore({ path: join(tempDir(), 'log.db') });
    cleanups.push(() => store.close());
    const proj = await sqliteProjection();
    const token = await lead(store, 'g', 'leader-1');
    await appendMany(store, token, 's', 1, 5);
    const ac = new AbortController();
    const stopped: number[] = [];
    const f = new Follower({ store, stream: 's', sink: proj.sink, apply: proj.apply, pollMs: 5, signal: ac.signal });
    f.on('stopped', (x) => stopped.push(x.seq));
    expect(f.lag().atLeast).toBe(true); // nothing read yet
    const run = f.start();
    while (f.applied < 5) await new Promise((r) => setTimeout(r, 5));
    await new Promise((r) => setTimeout(r, 20));
    expect(f.lag()).toEqual({ entries: 0, atLeast: false, behindMs: 0, staleMs: expect.any(Number), ms: 0 });
    ac.abort();
    await run;
    expect(stopped).toEqual([5]);

    await appendMany(store, token, 's', 6, 3);
    {
      await using g = new Follower({ store, stream: 's', sink: proj.sink, apply: proj.apply, pollMs: 5 });
      void g.start();
      while (g.applied < 8) await new Promise((r) => setTimeout(r, 5));
    }
    expectExactly(await proj.rows(), 8);

    // A store that fails (a read that throws StoreUnavailableError twice) is retried, not fatal.
    let failing = 2;
    const flaky: Store = Object.create(store, {
      readStream: {
        value: async (...a: Parameters<Store['readStream']>) => {
          if (failing > 0) {
            failing -= 1;
            throw new StoreUnavailableError('store down for a moment');
          }
          return store.readStream(...a);
        },
      },
    }) as Store;
    await appendMany(store, token, 's', 9, 2);
    const retries: number[] = [];
    const h = new Follower({ store: flaky, stream: 's', sink: proj.sink, apply: proj.apply, pollMs: 5, retryMs: 5 });
    h.on('retry', (r) => retries.push(r.attempt));
    await followTo(h, 10);
    expect(retries).toEqual([1, 2]);
    expectExactly(await proj.rows(), 10);
  });

  it('refuses bad options with the field named', () => {
    const store = new SqliteStore({ path: join(tempDir(), 'log.db') });
    cleanups.push(() => store.close());
    const sink = sqliteSink(openTestSqlite(':memory:'));
    expect(() => new Follower({ store, stream: '', sink, apply: () => {} })).toThrow(/stream: must not be empty/);
    expect(() => new Follower({ store, stream: 's', sink })).toThrow(/apply: give exactly one of apply/);
    expect(() => new Follower({ store, stream: 's', sink, apply: () => {}, applyBatch: () => {} })).toThrow(/exactly one/);
    expect(() => new Follower({ store, stream: 's', sink, apply: () => {}, batchSize: 0 })).toThrow(/batchSize: expected a whole number in \[1, 10000\]/);
    expect(() => new Follower({ store, stream: 's', sink, apply: () => {}, pollMs: 0 })).toThrow(/pollMs/);
    expect(() => sqliteSink(openTestSqlite(':memory:'), { table: 'x; drop' })).toThrow(/table: expected an identifier/);
  });
});
