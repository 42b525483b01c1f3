/**
 * PostgreSQL store beyond the contract suite, against real servers: the shared SQL scenarios
 * (sql-store.suite.ts: server down at start, the user's own pool, table prefixes, a stalled
 * statement, a 10,000-lease renewal, racing fenced writers) and PostgreSQL's own: a lost LISTEN
 * connection, a server restart under a leader, schema migrations.
 */
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import pg from 'pg';
import { InvalidArgumentError, StoreDataError } from '../../src/core/index.js';
import type { Lease } from '../../src/core/index.js';
import { PostgresStore } from '../../src/stores/postgres/index.js';
import { fencedUpdate, postgresDialect } from '../../src/fencing/index.js';
import { SCHEMA_VERSION, buildSql } from '../../src/stores/postgres/sql.js';
import type { PgPool } from '../../src/stores/postgres/index.js';
import { PgInstance, pgBinariesAvailable } from './pg-instance.js';
import { createPostgresDatabase } from './sql-servers.js';
import { sqlStoreSuite } from './sql-store.suite.js';
import type { TestDatabase } from './sql-servers.js';
import { leadThroughServerOutage, sleep, waitFor } from './restart-scenario.js';


sqlStoreSuite<PostgresStore, pg.Pool>({
  name: 'postgres',
  port: 5432,
  schemaVersion: SCHEMA_VERSION,
  createDatabase: createPostgresDatabase,
  store: (options) => new PostgresStore(options),
  urlOnPort: (port) => `postgres://postgres@127.0.0.1:${port}/tenure`,
  openUrlOnPort: (port) => `postgresql://postgres@127.0.0.1:${port}/tenure`,
  pool: (url) => {
    const pool = new pg.Pool({ connectionString: url, max: 4 });
    pool.on('error', () => {}); // its clients are cut when the database is dropped
    return {
      pool,
      rows: async (sql) => (await pool.query(sql)).rows as Record<string, unknown>[],
      lockRow: async (table, name) => {
        const blocker = await pool.connect();
        await blocker.query('BEGIN');
        await blocker.query(`SELECT * FROM ${table} WHERE name = $1 FOR UPDATE`, [name]);
        return async () => {
          await blocker.query('ROLLBACK');
          blocker.release();
        };
      },
      fencedUpdate: (token, update) => fencedUpdate(postgresDialect, pool, token, update),
      end: () => pool.end(),
    };
  },
  endpoint: /:5432$/,
  quote: '"',
  seedLeasesSql: (table, count) =>
    `INSERT INTO ${table} (name, owner, term, expires_at, ttl_ms, meta)
     SELECT 'p/' || i, 'x~1', 1, now() + interval '1 minute', 60000, '{}' FROM generate_series(1, ${count}) AS i`,
  renewManyShape: 'one statement',
  fencedTableSql: (name) => `CREATE TABLE ${name} (id int PRIMARY KEY, state text, last_fence_token bigint, last_fence_lease text)`,
  bigint: (n) => String(n),
});

// The user's own pg.Pool fits the store's structural type (checked by the compiler).
const _poolFits = (p: pg.Pool): PgPool => p;
void _poolFits;

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

  it('turns synchronous_commit off for the release transaction only, never for the connection', async () => {
    const one = new pg.Pool({ connectionString: db.url, max: 1 });
    one.on('error', () => {}); // its idle clients are cut when the database is dropped
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

  it('reads a page of a stream by touching at most that many rows, whatever plan the statistics of a table that just grew lead to', async () => {
    const store = open({ tablePrefix: 'page_' });
    const { lease } = await store.acquire('g', 'a~1', 60_000);
    await store.appendFenced({ lease: 'g', term: lease.term }, 's', 'entry 1');
    // 50,000 more entries straight into the table (no autoanalyze has run: the planner guesses).
    await pool.query(
      `INSERT INTO page_streams (stream, seq, lease, term, payload) SELECT 's', g, 'g', $1, 'entry ' || g FROM generate_series(2, 50000) AS g`,
      [lease.term],
    );
    await pool.query(`UPDATE page_stream_heads SET last_seq = 50000 WHERE stream = 's'`);
    const text = buildSql('page_').readStream;
    for (const after of [0, 25_000]) {
      const r = await pool.query(`EXPLAIN (ANALYZE, FORMAT JSON) ${text}`, ['s', after, 100]);
      const rows: number[] = [];
      const walk = (node: Record<string, unknown>): void => {
        rows.push(Number(node['Actual Rows']));
        for (const child of (node.Plans as Record<string, unknown>[] | undefined) ?? []) walk(child);
      };
      walk((r.rows[0]['QUERY PLAN'] as { Plan: Record<string, unknown> }[])[0]!.Plan);
      expect(Math.max(...rows), `rows per plan node after ${after}: ${rows.join(', ')}`).toBeLessThanOrEqual(100);
    }
    const page = await store.readStream('s', { after: 25_000, limit: 100 });
    expect(page.map((e) => e.seq)).toEqual(Array.from({ length: 100 }, (_, i) => 25_001 + i));
    expect(await store.readStream('s', { after: 49_990, limit: 100 })).toHaveLength(10);
  });

  it('reads a page as one json text: payloads of every shape come back exactly, and a position or term beyond 2^53 - 1 is refused, not rounded', async () => {
    const store = open({ tablePrefix: 'json_' });
    const { lease } = await store.acquire('g', 'a~1', 60_000);
    const shapes = ['', 'plain', 'quote \' " and \\ backslash', 'ünïcödé ✓ 𝄞 🎉', 'control \u0001\u001f\t\n\r', '{"json":[1,2,{"a":null}]}', '\\u0000 not a nul', 'x'.repeat(5000)];
    for (const payload of shapes) await store.appendFenced({ lease: 'g', term: lease.term }, 's', payload);
    const page = await store.readStream('s', { limit: 100 });
    expect(page.map((e) => e.payload)).toEqual(shapes);
    expect(page.map((e) => e.seq)).toEqual(shapes.map((_, i) => i + 1));
    expect(page.every((e) => e.term === lease.term && e.lease === 'g' && e.appendedAt > 1_700_000_000_000)).toBe(true);
    // Each entry of the page equals the same entry read alone (readLast reads columns, not json).
    expect(page.at(-1)).toEqual(await store.readLast('s'));
    expect(await store.readStream('s', { after: shapes.length, limit: 10 })).toEqual([]);
    // A position beyond 2^53 - 1 (the page is (after, after + limit]: read where the row now is).
    await pool.query(`UPDATE json_streams SET seq = 9007199254740993 WHERE stream = 's' AND seq = 3`);
    const far = await store.readStream('s', { after: 9_007_199_254_740_990, limit: 10 }).catch((e: unknown) => e);
    expect(far).toBeInstanceOf(StoreDataError);
    expect((far as Error).message).toContain('position 9007199254740993');
    await pool.query(`UPDATE json_streams SET seq = 3 WHERE stream = 's' AND seq = 9007199254740993`);
    for (const term of ['9007199254740993', '-1']) {
      await pool.query(`UPDATE json_streams SET term = ${term} WHERE stream = 's' AND seq = 3`);
      const err = await store.readStream('s', { limit: 100 }).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(StoreDataError);
      expect((err as Error).message).toContain(`postgres store: lease "g" holds term "${term}"`);
    }
    await pool.query(`UPDATE json_streams SET term = $1 WHERE stream = 's' AND seq = 3`, [lease.term]);
    expect((await store.readStream('s', { limit: 100 })).map((e) => e.payload)).toEqual(shapes);
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

  it('migrates a version 4 schema (entries without append times, no stream NOTIFY) in place: old entries read with the migration time, new appends are pushed to another store', async () => {
    const old = open({ tablePrefix: 'v4_' });
    const g = (await old.acquire('g', 'a~1', 60_000)).lease.term;
    expect(await old.appendFenced({ lease: 'g', term: g }, 's', 'one')).toBe(1);
    // Make it what tenure with schema version 4 left behind.
    await pool.query('DROP TRIGGER v4_streams_insert ON v4_streams');
    await pool.query('ALTER TABLE v4_streams DROP COLUMN appended_at');
    await pool.query("UPDATE v4_schema SET value = '4' WHERE key = 'version'");
    const writer = open({ tablePrefix: 'v4_' });
    const watcher = open({ tablePrefix: 'v4_' });
    const before = await writer.streamHead('s'); // migrates
    expect(before.seq).toBe(1);
    const [entry] = await writer.readStream('s');
    expect(entry).toMatchObject({ seq: 1, payload: 'one' });
    expect(entry!.appendedAt).toBeGreaterThan(0);
    expect(entry!.appendedAt).toBeLessThanOrEqual(before.nowMs);
    const heads: number[] = [];
    const stop = watcher.watchStream('s', (h) => heads.push(h));
    await waitFor(() => heads.includes(1), 3000, 'head told after LISTEN');
    expect(await writer.appendFenced({ lease: 'g', term: g }, 's', 'two')).toBe(2);
    await waitFor(() => heads.includes(2), 3000, 'append pushed through NOTIFY to another store object');
    expect((await pool.query("SELECT value FROM v4_schema WHERE key = 'version'")).rows).toEqual([{ value: String(SCHEMA_VERSION) }]);
    stop();
  });

  it('tells a stream watcher the current head after its LISTEN connection is lost, so appends made while it was down are not missed', async () => {
    const writer = open({ tablePrefix: 'relisten_' });
    const watcher = open({ tablePrefix: 'relisten_', reconnectMs: 1000 });
    const g = (await writer.acquire('g', 'a~1', 60_000)).lease.term;
    const heads: number[] = [];
    const stop = watcher.watchStream('s', (h) => heads.push(h));
    await writer.appendFenced({ lease: 'g', term: g }, 's', 'one');
    await waitFor(() => heads.includes(1), 3000, 'first append pushed');
    // Cut the LISTEN connection from the server's side; append once it is gone, before the
    // watcher reconnects (1 s later): no NOTIFY can reach it.
    const listening = "FROM pg_stat_activity WHERE datname = current_database() AND query LIKE 'LISTEN%'";
    await pool.query(`SELECT pg_terminate_backend(pid) ${listening}`);
    for (let i = 0; i < 100 && (await pool.query(`SELECT 1 ${listening}`)).rows.length > 0; i++) await sleep(10);
    expect((await pool.query(`SELECT 1 ${listening}`)).rows).toEqual([]);
    await writer.appendFenced({ lease: 'g', term: g }, 's', 'two');
    await waitFor(() => heads.includes(2), 5000, 'head read again after the reconnect');
    stop();
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
