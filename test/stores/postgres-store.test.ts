/**
 * PostgreSQL store beyond the contract suite, against real servers: failures (server down at
 * start, a stalled statement, a lost LISTEN connection, a server restart under a leader), the
 * user's own pool, table prefixes, and a 10,000-lease renewal.
 */
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import pg from 'pg';
import { InvalidArgumentError, StoreUnavailableError } from '../../src/core/index.js';
import type { Lease } from '../../src/core/index.js';
import { openStore } from '../../src/open.js';
import { PostgresStore } from '../../src/stores/postgres/index.js';
import { SCHEMA_VERSION } from '../../src/stores/postgres/sql.js';
import type { PgPool } from '../../src/stores/postgres/index.js';
import { PgInstance, freePort, pgBinariesAvailable } from './pg-instance.js';
import { createPostgresDatabase } from './sql-servers.js';
import type { TestDatabase } from './sql-servers.js';
import { leadThroughServerOutage, sleep, waitFor } from './restart-scenario.js';


// The user's own pg.Pool fits the store's structural type (checked by the compiler).
const _poolFits = (p: pg.Pool): PgPool => p;
void _poolFits;

describe('postgres store: server down at start', () => {
  it('rejects with StoreUnavailableError naming host and port, and recovers nothing it did not do', async () => {
    const port = await freePort(); // nothing listens there
    const store = new PostgresStore({ url: `postgres://postgres@127.0.0.1:${port}/tenure`, timeoutMs: 2000 });
    const err = await store.acquire('g', 'a~1', 1000).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(StoreUnavailableError);
    expect((err as Error).message).toContain(`127.0.0.1:${port}`);
    await expect(store.read('g')).rejects.toBeInstanceOf(StoreUnavailableError);
    await store.close();
  });

  it('does the same through openStore(url)', async () => {
    const port = await freePort();
    const store = await openStore(`postgresql://postgres@127.0.0.1:${port}/tenure`);
    expect(store.kind).toBe('postgres');
    await expect(store.list()).rejects.toThrow(new RegExp(`127\\.0\\.0\\.1:${port}`));
    await store.close();
  });
});

describe('postgres store: on the shared server', () => {
  let db: TestDatabase;
  let pool: pg.Pool;
  const stores: PostgresStore[] = [];
  const open = (options: Partial<ConstructorParameters<typeof PostgresStore>[0]> = {}): PostgresStore => {
    const s = options.pool ? new PostgresStore(options) : new PostgresStore({ url: db.url, ...options });
    stores.push(s);
    return s;
  };

  beforeAll(async () => {
    db = await createPostgresDatabase();
    pool = new pg.Pool({ connectionString: db.url, max: 4 });
    pool.on('error', () => {}); // its clients are cut when the database is dropped
  });
  afterEach(async () => {
    await Promise.all(stores.splice(0).map((s) => s.close()));
  });
  afterAll(async () => {
    await pool.end();
    await db.drop();
  });

  it("accepts the user's own pg.Pool and leaves it open on close", async () => {
    const store = open({ pool, tablePrefix: 'own_' });
    expect(store.endpoint).toMatch(/:5432$/);
    expect((await store.acquire('g', 'a~1', 5000)).acquired).toBe(true);
    await store.close();
    expect((await pool.query('SELECT count(*)::int AS n FROM own_leases')).rows[0]).toEqual({ n: 1 });
  });

  it('turns synchronous_commit off for the release transaction only, never for the connection', async () => {
    const one = new pg.Pool({ connectionString: db.url, max: 1 });
    try {
      const store = open({ pool: one, tablePrefix: 'sync_' });
      const { lease } = await store.acquire('g', 'a~1', 5000);
      expect(await store.release('g', 'a~1', lease.term)).toBe(true);
      expect(await store.read('g')).toBeNull();
      // The pool's only connection ran the release; the setting must be back to the server's.
      expect((await one.query('SHOW synchronous_commit')).rows[0]).toEqual({ synchronous_commit: 'on' });
      // And the next holder's acquire (a durable commit) gets the next term.
      expect((await store.acquire('g', 'b~1', 5000)).lease.term).toBe(lease.term + 1);
      await store.close();
    } finally {
      await one.end();
    }
  });

  it('keeps stores with different table prefixes apart and validates the prefix', async () => {
    const a = open({ tablePrefix: 'app_a_' });
    const b = open({ tablePrefix: 'app_b_' });
    await a.acquire('g', 'a~1', 5000);
    expect(await b.read('g')).toBeNull();
    expect((await b.acquire('g', 'b~1', 5000)).lease.term).toBe(1);
    for (const bad of ['', '1abc', 'a-b', 'x"; DROP TABLE y; --', 'a'.repeat(41)]) {
      expect(() => new PostgresStore({ url: db.url, tablePrefix: bad })).toThrow(InvalidArgumentError);
    }
    const v = await pool.query('SELECT value FROM app_a_schema WHERE key = $1', ['version']);
    expect(v.rows).toEqual([{ value: String(SCHEMA_VERSION) }]);
  });

  it('migrates a version 1 schema (name-only NOTIFY) in place, and pushes the state in the payload', async () => {
    const old = open({ tablePrefix: 'v1_' });
    await old.acquire('g', 'a~1', 60_000);
    // Make it what tenure 0.1 left behind: version 1, the trigger sending the bare name.
    await pool.query(`CREATE OR REPLACE FUNCTION v1_notify() RETURNS trigger LANGUAGE plpgsql AS $fn$
      BEGIN PERFORM pg_notify(TG_ARGV[0], NEW.name); RETURN NULL; END $fn$`);
    await pool.query("UPDATE v1_schema SET value = '1' WHERE key = 'version'");
    const watcher = open({ tablePrefix: 'v1_' });
    const other = open({ tablePrefix: 'v1_' });
    const seen: (string | null)[] = [];
    const stop = watcher.watch('g', (l: Lease | null) => seen.push(l ? `${l.owner}@${l.term}@${l.meta.role}` : null));
    await waitFor(() => seen.length === 1, 3000, 'current holder read after LISTEN');
    expect((await pool.query("SELECT value FROM v1_schema WHERE key = 'version'")).rows).toEqual([{ value: String(SCHEMA_VERSION) }]);
    await other.release('g', 'a~1', 1);
    await waitFor(() => seen.length === 2, 3000, 'release pushed');
    await other.acquire('g', 'b~1', 60_000, { role: 'x' });
    await waitFor(() => seen.length === 3, 3000, 'takeover pushed');
    expect(seen).toEqual(['a~1@1@undefined', null, 'b~1@2@x']);
    stop();
  });

  it('migrates a version 3 schema (stream heads without a lease) in place: each stream belongs to the lease of its entry 1', async () => {
    const old = open({ tablePrefix: 'v3_' });
    const g = (await old.acquire('g', 'a~1', 60_000)).lease.term;
    const h = (await old.acquire('h', 'b~1', 60_000)).lease.term;
    expect(await old.appendFenced({ lease: 'g', term: g }, 's', 'one')).toBe(1);
    expect(await old.appendFenced({ lease: 'h', term: h }, 't', 'uno')).toBe(1);
    // Make it what tenure with schema version 3 left behind.
    await pool.query('ALTER TABLE v3_stream_heads DROP COLUMN lease');
    await pool.query("UPDATE v3_schema SET value = '3' WHERE key = 'version'");
    const store = open({ tablePrefix: 'v3_' });
    await expect(store.appendFenced({ lease: 'h', term: h }, 's', 'by h')).rejects.toThrow('stream s belongs to lease g, not h');
    await expect(store.appendFenced({ lease: 'g', term: g }, 't', 'by g')).rejects.toThrow('stream t belongs to lease h, not g');
    expect(await store.appendFenced({ lease: 'g', term: g }, 's', 'two')).toBe(2);
    expect((await pool.query('SELECT stream, last_seq, lease FROM v3_stream_heads ORDER BY stream')).rows).toEqual([
      { stream: 's', last_seq: '2', lease: 'g' },
      { stream: 't', last_seq: '1', lease: 'h' },
    ]);
    expect((await pool.query("SELECT value FROM v3_schema WHERE key = 'version'")).rows).toEqual([{ value: String(SCHEMA_VERSION) }]);
  });

  it('refuses a payload with a NUL as bad input before sending it, writing nothing', async () => {
    const store = open({ tablePrefix: 'nul_' });
    const term = (await store.acquire('g', 'a~1', 60_000)).lease.term;
    const err = await store.appendFenced({ lease: 'g', term }, 's', 'a\u0000b').catch((e: unknown) => e);
    expect(err).toBeInstanceOf(InvalidArgumentError);
    expect((err as Error).message).toMatch(/^payload: must not contain NUL/);
    expect(await store.readStream('s')).toEqual([]);
    expect(await store.appendFenced({ lease: 'g', term }, 's', 'ok')).toBe(1);
  });

  it('creates the schema once when many stores start at the same moment', async () => {
    const many = Array.from({ length: 6 }, () => open({ tablePrefix: 'race_' }));
    const results = await Promise.all(many.map((s, i) => s.acquire('g', `n${i}~1`, 5000)));
    expect(results.filter((r) => r.acquired)).toHaveLength(1);
  });

  it('a statement that gets no answer in time is "maybe": StoreUnavailableError, never a result', async () => {
    const setup = open({ tablePrefix: 'stall_' });
    await setup.acquire('g', 'a~1', 50);
    const store = open({ tablePrefix: 'stall_', timeoutMs: 300 });
    // Another session holds the lease row locked, so the next acquire waits on it.
    const blocker = await pool.connect();
    try {
      await blocker.query('BEGIN');
      await blocker.query('SELECT * FROM stall_leases WHERE name = $1 FOR UPDATE', ['g']);
      const err = await store.acquire('g', 'b~1', 5000).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(StoreUnavailableError);
      expect((err as Error).message).toMatch(/127\.0\.0\.1:5432.*no answer within 300 ms; the outcome is unknown/);
    } finally {
      await blocker.query('ROLLBACK');
      blocker.release();
    }
    // The store is usable afterwards, and the term never went back.
    const after = await setup.acquire('g', 'c~1', 5000);
    // The stalled acquire may have landed after the lock was let go ("maybe"): either way term 2.
    expect(after.lease.term).toBe(2);
    expect(await store.read('g')).toMatchObject({ owner: after.lease.owner, term: 2 });
  });

  it('pushes a release made by another process, also after its LISTEN connection was cut', async () => {
    // The watcher has its own pool, so that its connections can be told apart and cut.
    const watcherPool = new pg.Pool({ connectionString: db.url, application_name: 'tenure-watcher' });
    watcherPool.on('error', () => {});
    const watcher = open({ pool: watcherPool, tablePrefix: 'push_', reconnectMs: 20 });
    const other = open({ tablePrefix: 'push_' });
    const seen: (string | null)[] = [];
    const stop = watcher.watch('g', (l: Lease | null) => seen.push(l ? `${l.owner}@${l.term}` : null));
    await sleep(200); // LISTEN established
    await other.acquire('g', 'a~1', 5000);
    await waitFor(() => seen.length === 1, 3000, 'takeover pushed');
    // Cut the LISTEN connection from the server side; the store reconnects by itself.
    const killed = await pool.query(
      "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database() AND application_name = 'tenure-watcher'",
    );
    expect(killed.rowCount).toBeGreaterThanOrEqual(1);
    await other.release('g', 'a~1', 1);
    await other.acquire('g', 'b~1', 5000);
    await waitFor(() => seen.length >= 2 && seen[seen.length - 1] === 'b~1@2', 5000, 'changes seen after reconnect');
    expect(seen[0]).toBe('a~1@1');
    stop();
    await watcher.close();
    await watcherPool.end();
  });

  it('renews 10,000 leases in one statement and reports the lost ones', async () => {
    const store = open({ tablePrefix: 'many_', timeoutMs: 30_000 });
    await store.migrate();
    await pool.query(
      `INSERT INTO many_leases (name, owner, term, expires_at, ttl_ms, meta)
       SELECT 'p/' || i, 'x~1', 1, now() + interval '1 minute', 60000, '{}' FROM generate_series(1, 10000) AS i`,
    );
    await pool.query(`UPDATE many_leases SET owner = 'y~1' WHERE name IN ('p/7', 'p/9999')`);
    const batch = Array.from({ length: 10_000 }, (_, i) => ({ name: `p/${i + 1}`, term: 1 }));
    const t0 = performance.now();
    const results = await store.renewMany('x~1', batch, 30_000);
    const ms = performance.now() - t0;
    expect(results).toHaveLength(10_000);
    const lost = results.flatMap((r, i) => (r.renewed ? [] : [batch[i]!.name]));
    expect(lost).toEqual(['p/7', 'p/9999']);
    expect(results[6]!.lease).toMatchObject({ owner: 'y~1' });
    expect(results[0]!.lease).toMatchObject({ name: 'p/1', ttlMs: 30_000 });
    console.log(`postgres renewMany: 10,000 leases in one statement, ${ms.toFixed(1)} ms`);
  });
});

describe.skipIf(!pgBinariesAvailable())('postgres store: server restarted while a node leads', () => {
  let inst: PgInstance | null = null;
  afterEach(async () => {
    await inst?.destroy();
    inst = null;
  });

  it('stops leader work at the local deadline, recovers by itself, and the term never goes back', async () => {
    const server = await PgInstance.create();
    inst = server;
    const store = new PostgresStore({ url: server.url, timeoutMs: 500, reconnectMs: 50 });
    try {
      await leadThroughServerOutage(store, {
        down: () => server.stop('immediate'),
        // The lease runs out by the server's clock too before the server is back.
        up: async () => {
          await sleep(800);
          await server.start();
        },
      });
    } finally {
      await store.close();
    }
  });
});
