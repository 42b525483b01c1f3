/**
 * MySQL/MariaDB store beyond the contract suite, against the real server: the shared SQL scenarios
 * (sql-store.suite.ts: server down at start, the user's own pool, table prefixes, a stalled
 * statement, a 10,000-lease renewal, racing fenced writers) and MySQL's own: schema migrations,
 * names that differ only in trailing spaces, a leader whose store stalls, the polling watch (push
 * by wake locks: mysql-wake.test.ts),
 * remembered stream heads, and a private server killed (-9) and
 * restarted under a leader.
 */
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import mysql from 'mysql2/promise';
import { InvalidArgumentError, SeededRandom, StaleTermError } from '../../src/core/index.js';
import type { AcquireResult, Lease } from '../../src/core/index.js';
import { LeaderElector } from '../../src/election/index.js';
import { MysqlStore } from '../../src/stores/mysql/index.js';
import { fencedUpdate, mysqlDialect } from '../../src/fencing/index.js';
import type { MysqlPool } from '../../src/stores/mysql/index.js';
import { SCHEMA_VERSION } from '../../src/stores/mysql/sql.js';
import { createMysqlDatabase } from './sql-servers.js';
import { sqlStoreSuite } from './sql-store.suite.js';
import type { TestDatabase } from './sql-servers.js';
import { mysqlChaos } from '../chaos/stores/mysql.js';
import type { ChaosInstance } from '../chaos/stores/types.js';
import { leadThroughServerOutage, sleep, waitFor } from './restart-scenario.js';


sqlStoreSuite<MysqlStore, mysql.Pool>({
  name: 'mysql',
  port: 3306,
  schemaVersion: SCHEMA_VERSION,
  createDatabase: createMysqlDatabase,
  store: (options) => new MysqlStore(options),
  urlOnPort: (port) => `mysql://root@127.0.0.1:${port}/tenure`,
  openUrlOnPort: (port) => `mysql://root@127.0.0.1:${port}/tenure?prefix=x_`,
  pool: (url) => {
    const pool = mysql.createPool({ uri: url, connectionLimit: 4 });
    return {
      pool,
      rows: async (sql) => (await pool.query(sql))[0] as Record<string, unknown>[],
      lockRow: async (table, name) => {
        const blocker = await pool.getConnection();
        await blocker.query('START TRANSACTION');
        await blocker.query(`SELECT * FROM ${table} WHERE name = ? FOR UPDATE`, [name]);
        return async () => {
          await blocker.query('ROLLBACK');
          blocker.release();
        };
      },
      fencedUpdate: (token, update) => fencedUpdate(mysqlDialect, pool, token, update),
      end: () => pool.end(),
    };
  },
  endpoint: /^127\.0\.0\.1:3306$/,
  quote: '`',
  seedLeasesSql: (table, count) => {
    // Ten digits cross-joined four times: 1..10,000.
    if (count !== 10_000) throw new Error('seedLeasesSql: only 10,000');
    const digits = `(${Array.from({ length: 10 }, (_, d) => `SELECT ${d} AS d`).join(' UNION ALL ')})`;
    return `INSERT INTO ${table} (name, owner, term, expires_at, ttl_ms, meta)
       SELECT CONCAT('p/', a.d + 10 * b.d + 100 * c.d + 1000 * e.d + 1), 'x~1', 1, UTC_TIMESTAMP(6) + INTERVAL 1 MINUTE, 60000, '{}'
       FROM ${digits} a, ${digits} b, ${digits} c, ${digits} e`;
  },
  renewManyShape: 'one UPDATE plus one report SELECT',
  fencedTableSql: (name) => `CREATE TABLE ${name} (id INT PRIMARY KEY, state VARCHAR(20), last_fence_token BIGINT NULL, last_fence_lease VARBINARY(800) NULL)`,
  bigint: (n) => n,
});

// The user's own mysql2 pool fits the store's structural type (checked by the compiler).
const _poolFits = (p: mysql.Pool): MysqlPool => p;
void _poolFits;

/** A pool over `pool` that reports every statement the store sends, with the number of the connection it went on. */
function recordingPool(pool: mysql.Pool, record: (conn: number, sql: string) => void): MysqlPool {
  let conns = 0;
  const recording = {
    getConnection: async () => {
      const c = await pool.getConnection();
      const conn = ++conns;
      return new Proxy(c, {
        get(t, prop) {
          const v: unknown = Reflect.get(t, prop, t);
          if (typeof v !== 'function') return v;
          if (prop === 'execute' || prop === 'query') {
            return (sql: string | { sql: string }, ...rest: unknown[]) => {
              record(conn, typeof sql === 'string' ? sql : sql.sql);
              return (v as (...a: unknown[]) => unknown).call(t, sql, ...rest);
            };
          }
          return (v as (...a: unknown[]) => unknown).bind(t);
        },
      });
    },
    end: async () => {},
  };
  return recording as unknown as MysqlPool;
}

describe('mysql store: on the shared server', () => {
  let db: TestDatabase;
  let pool: mysql.Pool;
  const stores: MysqlStore[] = [];
  const open = (options: Partial<ConstructorParameters<typeof MysqlStore>[0]> = {}): MysqlStore => {
    const s = options.pool ? new MysqlStore(options) : new MysqlStore({ url: db.url, ...options });
    stores.push(s);
    return s;
  };

  beforeAll(async () => {
    db = await createMysqlDatabase();
    pool = mysql.createPool({ uri: db.url, connectionLimit: 4 });
  });
  afterEach(async () => {
    await Promise.all(stores.splice(0).map((s) => s.close()));
  });
  afterAll(async () => {
    await pool.end();
    await db.drop();
  });

  /**
   * What tenure with schema `version` left behind: a store on prefix `v<version>_` holding `g` as
   * a~1, then `procedure` dropped and the version row set back; and a store of today's tenure on it.
   */
  async function leftBy(version: number, procedure: string): Promise<{ old: MysqlStore; held: AcquireResult; store: MysqlStore }> {
    const prefix = `v${version}_`;
    const old = open({ tablePrefix: prefix });
    const held = await old.acquire('g', 'a~1', 60_000);
    await pool.query(`DROP PROCEDURE ${prefix}${procedure}`);
    await pool.query(`UPDATE ${prefix}schema SET value = ? WHERE \`key\` = 'version'`, [String(version)]);
    return { old, held, store: open({ tablePrefix: prefix }) };
  }

  it('migrates a version 5 schema (acquire as a four-statement transaction) in place: leases kept, acquire is one CALL', async () => {
    // Version 5 had no acquire procedure.
    const { held, store } = await leftBy(5, 'acquire');
    expect(await store.acquire('g', 'b~1', 60_000)).toMatchObject({ acquired: false, lease: { owner: 'a~1', term: held.lease.term } });
    expect(await store.acquire('g', 'a~1', 60_000, { k: 'v' })).toMatchObject({ acquired: true, lease: { owner: 'a~1', term: held.lease.term, meta: { k: 'v' } } });
    expect(await store.release('g', 'a~1', held.lease.term)).toBe(true);
    expect(await store.acquire('g', 'b~1', 60_000)).toMatchObject({ acquired: true, lease: { owner: 'b~1', term: held.lease.term + 1 } });
    const [procs] = await pool.query("SELECT COUNT(*) AS n FROM information_schema.ROUTINES WHERE ROUTINE_SCHEMA = DATABASE() AND ROUTINE_NAME = 'v5_acquire'");
    expect(procs).toEqual([{ n: 1 }]);
    const [v] = await pool.query("SELECT value FROM v5_schema WHERE `key` = 'version'");
    expect(v).toEqual([{ value: String(SCHEMA_VERSION) }]);
  });

  it('migrates a version 6 schema in place, and an acquire tells a win with no live hand-over hint (noTransferHint) from one with it', async () => {
    // Version 6's acquire procedure reported no `hinted` (dropped: the migration makes it again).
    const { held, store } = await leftBy(6, 'acquire');
    expect(await store.acquire('g', 'b~1', 60_000)).toMatchObject({ acquired: false, lease: { owner: 'a~1', term: held.lease.term } });
    const [v] = await pool.query("SELECT value FROM v6_schema WHERE `key` = 'version'");
    expect(v).toEqual([{ value: String(SCHEMA_VERSION) }]);
    // No hint: the win says so; a loss says nothing.
    expect(await store.release('g', 'a~1', held.lease.term)).toBe(true);
    const plain = await store.acquire('g', 'b~1', 60_000);
    expect(plain).toMatchObject({ acquired: true, lease: { owner: 'b~1', term: held.lease.term + 1 }, noTransferHint: true });
    expect((await store.acquire('g', 'c~1', 60_000)).noTransferHint).toBeUndefined();
    // A live hint (the leader takes it before it releases): the winner must read it.
    await store.acquire('g/transfer-to', 'b~1', 60_000, { to: 'c' });
    expect(await store.release('g', 'b~1', plain.lease.term)).toBe(true);
    const hinted = await store.acquire('g', 'd~1', 60_000);
    expect(hinted.acquired).toBe(true);
    expect(hinted.noTransferHint).toBeUndefined();
    // A released or lapsed hint is no hint.
    await store.release('g/transfer-to', 'b~1', 1);
    await store.release('g', 'd~1', hinted.lease.term);
    expect(await store.acquire('g', 'e~1', 60_000)).toMatchObject({ acquired: true, noTransferHint: true });
    // A renewal of one's own live lease (acquire again) reports it too: nothing to hand over.
    expect(await store.acquire('g', 'e~1', 60_000)).toMatchObject({ acquired: true, noTransferHint: true });
  });

  it('migrates a version 7 schema in place: the release procedure is made, and a release on the wake lock\'s session works at once', async () => {
    // Version 7 had no release procedure.
    const { old, held, store } = await leftBy(7, 'release_wake');
    const lost = await store.acquire('g', 'b~1', 60_000);
    expect(lost).toMatchObject({ acquired: false, lease: { owner: 'a~1', term: held.lease.term } });
    const [v] = await pool.query("SELECT value FROM v7_schema WHERE `key` = 'version'");
    expect(v).toEqual([{ value: String(SCHEMA_VERSION) }]);
    const [procs] = await pool.query("SELECT ROUTINE_NAME AS name FROM information_schema.ROUTINES WHERE ROUTINE_SCHEMA = DATABASE() AND ROUTINE_NAME = 'v7_release_wake'");
    expect(procs).toEqual([{ name: 'v7_release_wake' }]);
    expect(await old.release('g', 'a~1', held.lease.term)).toBe(true);
    const won = await store.acquire('g', 'b~1', 60_000);
    expect(won.acquired).toBe(true);
    await waitFor(() => store.wakeState().held.includes('g'), 10_000, 'wake lock held');
    expect(await store.release('g', 'b~1', won.lease.term)).toBe(true);
    expect(await store.read('g')).toBeNull();
  });

  it('migrates a version 4 schema (entries without append times) in place: old entries read with the migration time, new ones with the server clock of streamHead', async () => {
    const old = open({ tablePrefix: 'v4_' });
    const g = (await old.acquire('g', 'a~1', 60_000)).lease.term;
    expect(await old.appendFenced({ lease: 'g', term: g }, 's', 'one')).toBe(1);
    // Make it what tenure with schema version 4 left behind.
    await pool.query('ALTER TABLE v4_streams DROP COLUMN appended_at');
    await pool.query("UPDATE v4_schema SET value = '4' WHERE `key` = 'version'");
    const store = open({ tablePrefix: 'v4_' });
    const before = await store.streamHead('s'); // migrates
    expect(before.seq).toBe(1);
    const [one] = await store.readStream('s');
    expect(one!.appendedAt).toBeGreaterThan(0);
    expect(one!.appendedAt).toBeLessThanOrEqual(before.nowMs);
    expect(await store.appendFenced({ lease: 'g', term: g }, 's', 'two')).toBe(2);
    const after = await store.streamHead('s');
    const [, two] = await store.readStream('s');
    expect(two!.appendedAt).toBeGreaterThanOrEqual(before.nowMs);
    expect(two!.appendedAt).toBeLessThanOrEqual(after.nowMs);
    expect(after.seq).toBe(2);
    const [v] = await pool.query("SELECT value FROM v4_schema WHERE `key` = 'version'");
    expect(v).toEqual([{ value: String(SCHEMA_VERSION) }]);
  });

  it('migrates a version 3 schema in place: each stream belongs to the lease of its entry 1', async () => {
    const old = open({ tablePrefix: 'v3_' });
    const g = (await old.acquire('g', 'a~1', 60_000)).lease.term;
    const h = (await old.acquire('h', 'b~1', 60_000)).lease.term;
    expect(await old.appendFenced({ lease: 'g', term: g }, 's', 'one')).toBe(1);
    // Make it what tenure with schema version 3 left behind (its procedure reported no owner).
    await pool.query('DROP PROCEDURE v3_append');
    await pool.query("UPDATE v3_schema SET value = '3' WHERE `key` = 'version'");
    const store = open({ tablePrefix: 'v3_' });
    await expect(store.appendFenced({ lease: 'h', term: h }, 's', 'by h')).rejects.toThrow('stream s belongs to lease g, not h');
    expect(await store.appendFenced({ lease: 'g', term: g }, 's', 'two')).toBe(2);
    expect((await store.readStream('s')).map((e) => e.lease)).toEqual(['g', 'g']);
    const [v] = await pool.query("SELECT value FROM v3_schema WHERE `key` = 'version'");
    expect(v).toEqual([{ value: String(SCHEMA_VERSION) }]);
  });

  it('migrates a version 1 schema (no procedures) in place, keeping its data', async () => {
    const old = open({ tablePrefix: 'v1_' });
    const first = await old.acquire('g', 'a~1', 60_000);
    const token = { lease: 'g', term: first.lease.term };
    expect(await old.appendFenced(token, 's', 'one')).toBe(1);
    // Make it what tenure 0.1 left behind: the tables, version 1, no procedures.
    await pool.query('DROP PROCEDURE v1_append');
    await pool.query('DROP PROCEDURE v1_renew_many');
    await pool.query("UPDATE v1_schema SET value = '1' WHERE `key` = 'version'");
    const store = open({ tablePrefix: 'v1_' });
    expect(await store.appendFenced(token, 's', 'two')).toBe(2);
    expect((await store.renewMany('a~1', [{ name: 'g', term: token.term }], 60_000))[0]).toMatchObject({ renewed: true });
    expect((await store.readStream('s')).map((e) => e.payload)).toEqual(['one', 'two']);
    const [v] = await pool.query("SELECT value FROM v1_schema WHERE `key` = 'version'");
    expect(v).toEqual([{ value: String(SCHEMA_VERSION) }]);
    // A stale and an unissued term are still told apart by the procedure's report.
    await store.release('g', 'a~1', token.term);
    const next = await store.acquire('g', 'b~1', 60_000);
    expect(await store.appendFenced({ lease: 'g', term: next.lease.term }, 's', 'three')).toBe(3);
    await expect(store.appendFenced(token, 's', 'late')).rejects.toBeInstanceOf(StaleTermError);
    await expect(store.appendFenced({ lease: 'g', term: next.lease.term + 5 }, 's', 'x')).rejects.toBeInstanceOf(InvalidArgumentError);
  });

  it('treats names that differ only by trailing spaces or case as different leases', async () => {
    const store = open({ tablePrefix: 'names_' });
    expect((await store.acquire('g', 'a~1', 5000)).acquired).toBe(true);
    expect((await store.acquire('g ', 'b~1', 5000)).acquired).toBe(true);
    expect((await store.acquire('G', 'c~1', 5000)).acquired).toBe(true);
    expect((await store.acquire('grüße/ä', 'd~1', 5000)).acquired).toBe(true);
    expect((await store.list('grüße/')).map((l) => l.name)).toEqual(['grüße/ä']);
    expect((await store.read('g '))!.owner).toBe('b~1');
  });

  it('stops leader work at the local deadline when the store stalls, and the node recovers by itself', async () => {
    const store = open({ tablePrefix: 'lead_', timeoutMs: 3000 });
    const elector = new LeaderElector({ store, group: 'g', id: 'node', ttlMs: 1000 });
    let abortedAt: number | null = null;
    void elector.runWhileLeader(
      ({ signal }) =>
        new Promise<void>((resolve) =>
          signal.addEventListener('abort', () => {
            abortedAt ??= performance.now();
            resolve();
          }),
        ),
    );
    const blocker = await pool.getConnection();
    try {
      await waitFor(() => elector.isLeader, 10_000, 'first election');
      const first = elector.term!;
      // Another session locks the lease row: every renew now hangs in the server.
      await blocker.query('START TRANSACTION');
      await blocker.query("SELECT * FROM lead_leases WHERE name = 'g' FOR UPDATE");
      const stalledAt = performance.now();
      await waitFor(() => !elector.isLeader, 3000, 'leadership ends while renewals hang');
      expect(abortedAt).not.toBeNull();
      expect(abortedAt! - stalledAt).toBeLessThanOrEqual(1000);
      await blocker.query('ROLLBACK');
      await waitFor(() => elector.isLeader, 15_000, 're-election once the store answers again');
      expect(elector.term!).toBeGreaterThanOrEqual(first);
    } finally {
      await blocker.query('ROLLBACK').catch(() => {});
      blocker.release();
      await elector.stop();
    }
  });

  it('without wake locks has no push; with watchPollMs it sees another process release and take over', async () => {
    expect(open({ tablePrefix: 'poll_', wakeLocks: false }).watch).toBeUndefined();
    const watcher = open({ tablePrefix: 'poll_', wakeLocks: false, watchPollMs: 20 });
    const other = open({ tablePrefix: 'poll_' });
    const seen: (string | null)[] = [];
    const stop = watcher.watch!('g', (l: Lease | null) => seen.push(l ? `${l.owner}@${l.term}` : null));
    await other.acquire('g', 'a~1', 5000);
    await waitFor(() => seen.length === 1, 3000, 'holder seen');
    await other.release('g', 'a~1', 1);
    await waitFor(() => seen.length === 2, 3000, 'release seen');
    await other.acquire('g', 'b~1', 5000);
    await waitFor(() => seen.length === 3, 3000, 'new holder seen');
    expect(seen).toEqual(['a~1@1', null, 'b~1@2']);
    stop();
  });

  it('appends at the head it remembers, reading only the fence, and falls back when another writer moved the head or the fence', async () => {
    // Every statement the store sends, through a pool of the user's that records them.
    const sent: string[] = [];
    const a = open({ pool: recordingPool(pool, (_conn, sql) => sent.push(sql)), tablePrefix: 'heads_' });
    const b = open({ pool, tablePrefix: 'heads_' }); // another writer on the same tables
    const held = await a.acquire('w', 'a~1', 30_000);
    if (!held.acquired) throw new Error('not acquired');
    const token = { lease: 'w', term: held.lease.term };
    const written = new Map<number, string>();
    const append = async (s: MysqlStore, payload: string): Promise<number> => {
      const seq = await s.appendFenced(token, 'log', payload);
      expect(written.has(seq)).toBe(false);
      written.set(seq, payload);
      return seq;
    };

    expect(await append(a, 'a1')).toBe(1); // the first of a term: the general case
    sent.length = 0;
    expect(await append(a, 'a2')).toBe(2);
    expect(await append(a, 'a3')).toBe(3);
    // At the remembered head: one statement each, which reads no stream entry (no MAX(seq)).
    expect(sent).toHaveLength(2);
    expect(sent.every((q) => q.includes('INSERT') && !q.includes('MAX('))).toBe(true);

    // Another writer moves the head: a's next position is taken, and it falls back.
    expect(await append(b, 'b1')).toBe(4);
    expect(await append(a, 'a4')).toBe(5);
    // Both at once, many calls each: every seq once, 6..45, no gap.
    const seqs = await Promise.all(Array.from({ length: 40 }, (_, i) => append(i % 2 ? a : b, `c${i}`)));
    expect([...seqs].sort((x, y) => x - y)).toEqual(Array.from({ length: 40 }, (_, i) => i + 6));
    const entries = await b.readStream('log', { after: 0, limit: 100 });
    expect(entries.map((e) => e.seq)).toEqual(Array.from({ length: 45 }, (_, i) => i + 1));
    for (const e of entries) expect(e.payload).toBe(written.get(e.seq));

    // A new term raises the fence: a's remembered head finds no fence at its term, and the
    // general case refuses it with nothing written.
    expect(await a.release('w', 'a~1', token.term)).toBe(true);
    const next = await b.acquire('w', 'b~1', 30_000);
    if (!next.acquired) throw new Error('not acquired');
    expect(await b.appendFenced({ lease: 'w', term: next.lease.term }, 'log', 'new term')).toBe(46);
    await expect(a.appendFenced(token, 'log', 'stale')).rejects.toBeInstanceOf(StaleTermError);
    const after = await a.readStream('log', { after: 45, limit: 10 });
    expect(after.map((e) => [e.seq, e.payload])).toEqual([[46, 'new term']]);
  });

  it('returns read entries only once a commit after the read made them durable: the barrier flips its row on the same connection', async () => {
    // InnoDB shows a commit to other sessions before its redo log is flushed; the chaos suite saw
    // a follower apply an append that a kill -9 of the server then lost. The barrier is a write
    // committed on the reading connection after the read, so the log is flushed past the read.
    const sent: { conn: number; sql: string }[] = [];
    const writer = open({ pool, tablePrefix: 'durable_' });
    const reader = open({ pool: recordingPool(pool, (conn, sql) => sent.push({ conn, sql })), tablePrefix: 'durable_' });
    const barrier = async (): Promise<string | null> => {
      const [rows] = await pool.query("SELECT value FROM durable_schema WHERE `key` = 'durability-barrier'");
      return (rows as { value: string }[])[0]?.value ?? null;
    };
    expect(await reader.readStream('log', { after: 0, limit: 10 })).toEqual([]); // creates the tables
    const held = await writer.acquire('w', 'a~1', 30_000);
    if (!held.acquired) throw new Error('not acquired');
    await writer.appendFenced({ lease: 'w', term: held.lease.term }, 'log', 'one');

    // Nothing new to read: no barrier.
    const before = await barrier();
    sent.length = 0;
    expect(await reader.readStream('log', { after: 1, limit: 10 })).toEqual([]);
    expect(sent.some((q) => q.sql.includes('durability-barrier'))).toBe(false);
    expect(await barrier()).toBe(before);

    // Entries read: the barrier follows the read, on its connection, and its row changed.
    sent.length = 0;
    expect((await reader.readStream('log', { after: 0, limit: 10 })).map((e) => e.payload)).toEqual(['one']);
    const read = sent.findIndex((q) => q.sql.includes('SELECT') && q.sql.includes('durable_streams'));
    const flushed = sent.findIndex((q) => q.sql.includes('durability-barrier'));
    expect(read).toBeGreaterThanOrEqual(0);
    expect(flushed).toBeGreaterThan(read);
    expect(sent[flushed]!.conn).toBe(sent[read]!.conn);
    const flipped = await barrier();
    expect(flipped).not.toBeNull();
    expect(flipped).not.toBe(before);
    await reader.readStream('log', { after: 0, limit: 10 });
    expect(await barrier()).not.toBe(flipped); // each read with entries commits a change

    // readLast (a state cell's value) the same: after the read, on its connection; none for an empty stream.
    const last = await barrier();
    sent.length = 0;
    expect(await reader.readLast('empty')).toBeNull();
    expect(sent.some((q) => q.sql.includes('durability-barrier'))).toBe(false);
    sent.length = 0;
    expect((await reader.readLast('log'))?.payload).toBe('one');
    const lastRead = sent.findIndex((q) => q.sql.includes('SELECT') && q.sql.includes('durable_streams'));
    const lastFlushed = sent.findIndex((q) => q.sql.includes('durability-barrier'));
    expect(lastRead).toBeGreaterThanOrEqual(0);
    expect(lastFlushed).toBeGreaterThan(lastRead);
    expect(sent[lastFlushed]!.conn).toBe(sent[lastRead]!.conn);
    expect(await barrier()).not.toBe(last);
  });
});

describe.skipIf((mysqlChaos.unavailable?.() ?? null) !== null)('mysql store: a private server', () => {
  let dir: string | null = null;
  let inst: ChaosInstance | null = null;
  afterEach(async () => {
    await inst?.stop();
    inst = null;
    if (dir) rmSync(dir, { recursive: true, force: true });
    dir = null;
  });

  it('takes many never-acquired leases from parallel callers without a single deadlock', async () => {
    dir = mkdtempSync(join(tmpdir(), 'tenure-mysql-deadlock-'));
    const server = await mysqlChaos.start({ dir, random: new SeededRandom(1), log: () => {} });
    inst = server;
    const store = new MysqlStore({ url: server.url() });
    const admin = await mysql.createConnection({ uri: server.url() });
    try {
      await store.migrate();
      const deadlocks = async (): Promise<number> => {
        const [rows] = await admin.query("SHOW GLOBAL STATUS LIKE 'Innodb_deadlocks'");
        return Number((rows as { Value: string }[])[0]!.Value);
      };
      const before = await deadlocks();
      // Neighbouring new names, 8 callers at a time: what a node starting with many partitions does.
      const names = Array.from({ length: 400 }, (_, i) => `p-${String(i).padStart(4, '0')}`);
      let next = 0;
      const terms: number[] = [];
      await Promise.all(
        Array.from({ length: 8 }, async () => {
          while (next < names.length) {
            const r = await store.acquire(names[next++]!, 'node~1', 60_000);
            expect(r.acquired).toBe(true);
            terms.push(r.lease.term);
          }
        }),
      );
      expect(terms).toEqual(names.map(() => 1));
      // InnoDB counts a deadlock each time it picks a victim (which the store would retry): none may have been picked.
      expect((await deadlocks()) - before).toBe(0);
      expect((await store.list('p-')).map((l) => l.name)).toEqual(names);
    } finally {
      await admin.end();
      await store.close();
    }
  });

  it('stops leader work at the local deadline, recovers by itself, and the term never goes back', async () => {
    dir = mkdtempSync(join(tmpdir(), 'tenure-mysql-restart-'));
    const server = await mysqlChaos.start({ dir, random: new SeededRandom(1), log: () => {} });
    inst = server;
    const store = new MysqlStore({ url: server.url(), timeoutMs: 500 });
    // kill -9, down 1.5 s, started again: InnoDB crash recovery must bring back every acknowledged commit.
    let restarted: Promise<void> = Promise.resolve();
    try {
      await leadThroughServerOutage(store, {
        down: async () => {
          restarted = server.restart!(1500);
          await sleep(50);
        },
        up: () => restarted,
      });
    } finally {
      await restarted.catch(() => {});
      await store.close();
    }
  });
});
