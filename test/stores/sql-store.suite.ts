/**
 * The scenarios the SQL stores (PostgreSQL, MySQL/MariaDB) share beyond the contract suite, written
 * once and run per dialect from postgres-store.test.ts and mysql-store.test.ts: a server down at
 * start, the user's own pool, table prefixes, a schema created by many stores at once, a stalled
 * statement, a 10,000-lease renewal and fenced rows raced by writers of two terms. Each dialect
 * file keeps the scenarios only its store has.
 */
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { InvalidArgumentError, StaleTermError, StoreUnavailableError } from '../../src/core/index.js';
import type { FencingToken, Store } from '../../src/core/index.js';
import { openStore } from '../../src/open.js';
import { freePort } from '../fixtures/ports.js';
import type { TestDatabase } from './sql-servers.js';

/** What the shared scenarios need of a SQL store. */
export interface SqlStore extends Store {
  readonly endpoint: string;
  renewMany: NonNullable<Store['renewMany']>;
  migrate: NonNullable<Store['migrate']>;
}

/** The store's options the scenarios set. */
export interface SqlStoreOptions {
  url?: string;
  tablePrefix?: string;
  timeoutMs?: number;
}

/** A pool of the user's, as the scenarios use it: plain SQL, a row lock, fenced updates. */
export interface SqlTestPool<Pool> {
  /** The driver's pool itself, to hand to the store. */
  readonly pool: Pool;
  /** The rows of a statement without parameters. */
  rows(sql: string): Promise<Record<string, unknown>[]>;
  /** Another session takes the lease row `name` of `table` FOR UPDATE; the function returned lets it go. */
  lockRow(table: string, name: string): Promise<() => Promise<void>>;
  fencedUpdate(token: FencingToken, update: { table: string; set: Record<string, string>; where: Record<string, number> }): Promise<{ updated: number }>;
  end(): Promise<void>;
}

export interface SqlDialect<S extends SqlStore, Pool> {
  /** `postgres` or `mysql`: the store's kind, and the name in every test title. */
  readonly name: string;
  readonly port: number;
  readonly schemaVersion: number;
  createDatabase(): Promise<TestDatabase>;
  /** A store on `url`, or on the user's `pool`. */
  store(options: SqlStoreOptions & { pool?: Pool }): S;
  /** A URL of this dialect for the store's constructor, on a port where nothing listens. */
  urlOnPort(port: number): string;
  /** The same for openStore (it may carry the store's URL options). */
  openUrlOnPort(port: number): string;
  pool(url: string): SqlTestPool<Pool>;
  /** What `endpoint` is for a store on the shared server's pool. */
  readonly endpoint: RegExp | string;
  /** The dialect's identifier quote, for a table prefix that tries an injection. */
  readonly quote: string;
  /** The statement that inserts leases p/1..p/count of owner x~1 at term 1 into `table`, live for a minute. */
  seedLeasesSql(table: string, count: number): string;
  /** How the store renews a batch, for the measurement printed. */
  readonly renewManyShape: string;
  /** A table `name` with columns id (int key), state (text) and the fence columns. */
  fencedTableSql(name: string): string;
  /** A BIGINT as the driver returns it. */
  bigint(n: number): unknown;
}

export function sqlStoreSuite<S extends SqlStore, Pool>(d: SqlDialect<S, Pool>): void {
  describe(`${d.name} store: server down at start (shared SQL suite)`, () => {
    it('rejects with StoreUnavailableError naming host and port', async () => {
      const port = await freePort(); // nothing listens there
      const store = d.store({ url: d.urlOnPort(port), timeoutMs: 2000 });
      const err = await store.acquire('g', 'a~1', 1000).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(StoreUnavailableError);
      expect((err as Error).message).toContain(`127.0.0.1:${port}`);
      await expect(store.read('g')).rejects.toBeInstanceOf(StoreUnavailableError);
      await store.close();
    });

    it('does the same through openStore(url)', async () => {
      const port = await freePort();
      const store = await openStore(d.openUrlOnPort(port));
      expect(store.kind).toBe(d.name);
      await expect(store.read('g')).rejects.toThrow(new RegExp(`127\\.0\\.0\\.1:${port}`));
      await expect(store.list()).rejects.toThrow(new RegExp(`127\\.0\\.0\\.1:${port}`));
      await store.close();
    });
  });

  describe(`${d.name} store: on the shared server (shared SQL suite)`, () => {
    let db: TestDatabase;
    let user: SqlTestPool<Pool>;
    const stores: S[] = [];
    const open = (options: SqlStoreOptions & { pool?: Pool } = {}): S => {
      const s = options.pool ? d.store(options) : d.store({ url: db.url, ...options });
      stores.push(s);
      return s;
    };

    beforeAll(async () => {
      db = await d.createDatabase();
      user = d.pool(db.url);
    });
    afterEach(async () => {
      await Promise.all(stores.splice(0).map((s) => s.close()));
    });
    afterAll(async () => {
      await user.end();
      await db.drop();
    });

    it("accepts the user's own pool and leaves it open on close", async () => {
      const store = open({ pool: user.pool, tablePrefix: 'own_' });
      expect(store.endpoint).toMatch(d.endpoint);
      expect((await store.acquire('g', 'a~1', 5000)).acquired).toBe(true);
      await store.close();
      expect(await user.rows('SELECT COUNT(*) AS n FROM own_leases')).toEqual([{ n: d.bigint(1) }]);
    });

    it('keeps stores with different table prefixes apart and validates the prefix', async () => {
      const a = open({ tablePrefix: 'app_a_' });
      const b = open({ tablePrefix: 'app_b_' });
      await a.acquire('g', 'a~1', 5000);
      expect(await b.read('g')).toBeNull();
      expect((await b.acquire('g', 'b~1', 5000)).lease.term).toBe(1);
      for (const bad of ['', '1abc', 'a-b', `x${d.quote}; DROP TABLE y; --`, 'a'.repeat(41)]) {
        expect(() => d.store({ url: db.url, tablePrefix: bad })).toThrow(InvalidArgumentError);
      }
      const key = d.quote === '`' ? '`key`' : 'key';
      expect(await user.rows(`SELECT value FROM app_a_schema WHERE ${key} = 'version'`)).toEqual([{ value: String(d.schemaVersion) }]);
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
      const unlock = await user.lockRow('stall_leases', 'g');
      try {
        const err = await store.acquire('g', 'b~1', 5000).catch((e: unknown) => e);
        expect(err).toBeInstanceOf(StoreUnavailableError);
        expect((err as Error).message).toMatch(new RegExp(`127\\.0\\.0\\.1:${d.port}.*no answer within 300 ms; the outcome is unknown`));
      } finally {
        await unlock();
      }
      // The store is usable afterwards, and the term never went back.
      const after = await setup.acquire('g', 'c~1', 5000);
      // The stalled acquire may have landed after the lock was let go ("maybe"): either way term 2.
      expect(after.lease.term).toBe(2);
      expect(await store.read('g')).toMatchObject({ owner: after.lease.owner, term: 2 });
    });

    it('renews 10,000 leases in one statement and reports the lost ones', async () => {
      const store = open({ tablePrefix: 'many_', timeoutMs: 30_000 });
      await store.migrate();
      await user.rows(d.seedLeasesSql('many_leases', 10_000));
      await user.rows("UPDATE many_leases SET owner = 'y~1' WHERE name IN ('p/7', 'p/9999')");
      const batch = Array.from({ length: 10_000 }, (_, i) => ({ name: `p/${i + 1}`, term: 1 }));
      const t0 = performance.now();
      const results = await store.renewMany('x~1', batch, 30_000);
      const ms = performance.now() - t0;
      expect(results).toHaveLength(10_000);
      const lost = results.flatMap((r, i) => (r.renewed ? [] : [batch[i]!.name]));
      expect(lost).toEqual(['p/7', 'p/9999']);
      expect(results[6]!.lease).toMatchObject({ owner: 'y~1' });
      expect(results[0]!.lease).toMatchObject({ name: 'p/1', ttlMs: 30_000 });
      console.log(`${d.name} renewMany: 10,000 leases in ${d.renewManyShape}, ${ms.toFixed(1)} ms`);
    });

    it("fenced rows on the user's own table: when writers of two terms race, only the newer's writes land last and the row keeps the newest term", async () => {
      // Terms as the lease store issues them (tenure_leases, the default prefix's lease table).
      const issuer = open();
      for (let i = 0; ; i++) {
        const { lease: l } = await issuer.acquire('jobs', `issuer${i}~1`, 60_000);
        await issuer.release('jobs', l.owner, l.term);
        if (l.term >= 2) break;
      }
      await user.rows(d.fencedTableSql('jobs'));
      await user.rows("INSERT INTO jobs (id, state) VALUES (1, 'new')");
      const outcomes = await Promise.all(
        Array.from({ length: 40 }, (_, i) => {
          const term = (i % 2) + 1;
          return user.fencedUpdate({ lease: 'jobs', term }, { table: 'jobs', set: { state: `by ${term}` }, where: { id: 1 } }).then(
            () => `ok ${term}`,
            (e: unknown) => (e instanceof StaleTermError ? 'stale' : `error ${String(e)}`),
          );
        }),
      );
      expect(outcomes.filter((o) => o.startsWith('error'))).toEqual([]);
      expect(outcomes.filter((o) => o === 'ok 2')).toHaveLength(20);
      expect(await user.rows('SELECT state, last_fence_token FROM jobs WHERE id = 1')).toEqual([{ state: 'by 2', last_fence_token: d.bigint(2) }]);
    });
  });
}
