import mysql from 'mysql2/promise';
import pg from 'pg';
import { Registry } from 'prom-client';
import { describe, expect, it } from 'vitest';
import { LeaderElector, StaleTermError, collectMetrics, openStore } from '../../src/index.js';
import { fencedUpdate, mysqlDialect, postgresDialect } from '../../src/fencing/index.js';
import type { FencedUpdate } from '../../src/fencing/index.js';
import type { FencingToken } from '../../src/core/index.js';
import { MysqlStore } from '../../src/stores/mysql/index.js';
import { PostgresStore } from '../../src/stores/postgres/index.js';
import { createMysqlDatabase, createPostgresDatabase } from '../stores/sql-servers.js';

describe('metrics through prom-client', () => {
  it('publishes is_leader, term, renew latency, leadership changes and fenced rejections', async () => {
    const store = await openStore('memory:');
    const registry = new Registry();
    const elector = new LeaderElector({ store, group: 'billing', id: 'a', ttlMs: 300 });
    const stop = collectMetrics({ elector, store }, { registry });
    const elected = new Promise((r) => elector.once('elected', r));
    elector.start();
    await elected;
    await new Promise((r) => elector.once('renewed', r));
    const metrics = await registry.metrics();
    expect(metrics).toMatch(/tenure_is_leader\{group="billing"\} 1/);
    expect(metrics).toMatch(/tenure_term\{group="billing"\} 1/);
    expect(metrics).toMatch(/tenure_renew_latency_seconds_count\{group="billing"\} [1-9]/);
    expect(metrics).toMatch(/tenure_leadership_changes_total\{group="billing"\} 1/);

    await elector.stop();
    await store.acquire('billing', 'b~1', 5000);
    await store.appendFenced({ lease: 'billing', term: 2 }, 's', 'x');
    await expect(store.appendFenced({ lease: 'billing', term: 1 }, 's', 'y')).rejects.toBeInstanceOf(StaleTermError);
    const after = await registry.metrics();
    expect(after).toMatch(/tenure_is_leader\{group="billing"\} 0/);
    expect(after).toMatch(/tenure_leadership_changes_total\{group="billing"\} 2/);
    expect(after).toMatch(/tenure_fenced_rejections_total\{lease="billing",path="stream",side="guard"\} 1/);
    stop();
    await store.close();
  });
});

describe('tenure_fenced_rejections_total counts every stale refusal', () => {
  const pgFencedUpdate = (db: pg.Pool, token: FencingToken, update: FencedUpdate) => fencedUpdate(postgresDialect, db, token, update);
  const myFencedUpdate = (db: mysql.Pool, token: FencingToken, update: FencedUpdate) => fencedUpdate(mysqlDialect, db, token, update);
  it('counts fencedUpdate refusals on PostgreSQL and MySQL, appendFenced on a bare store, once per registry', async () => {
    const registry = new Registry();
    const stopA = collectMetrics({}, { registry });
    const stopB = collectMetrics({}, { registry }); // a second caller on one registry must not count twice
    const count = async (lease: string): Promise<number> => {
      // Summed over the paths (sql for fencedUpdate, stream for appendFenced).
      const re = new RegExp(`tenure_fenced_rejections_total\\{lease="${lease}",path="(?:sql|stream)",side="guard"\\} (\\d+)`, 'g');
      return [...(await registry.metrics()).matchAll(re)].reduce((sum, m) => sum + Number(m[1]), 0);
    };
    // fencedUpdate on PostgreSQL: a row written by term 2 refuses term 1.
    const pgDb = await createPostgresDatabase();
    const pgPool = new pg.Pool({ connectionString: pgDb.url });
    pgPool.on('error', () => {}); // its idle clients are cut when the database is dropped
    const pgStore = new PostgresStore({ pool: pgPool });
    const mysqlDb = await createMysqlDatabase();
    const myPool = mysql.createPool({ uri: mysqlDb.url });
    const myStore = new MysqlStore({ pool: myPool });
    try {
      for (const store of [pgStore, myStore]) {
        for (const owner of ['a~1', 'b~1']) {
          const { lease } = await store.acquire('rows', owner, 60_000);
          await store.release('rows', owner, lease.term);
        }
      }
      await pgPool.query('CREATE TABLE t (id int PRIMARY KEY, v text, last_fence_token bigint, last_fence_lease text)');
      await pgPool.query("INSERT INTO t (id, v) VALUES (1, 'x')");
      await pgFencedUpdate(pgPool, { lease: 'rows', term: 2 }, { table: 't', set: { v: 'new' }, where: { id: 1 } });
      await expect(pgFencedUpdate(pgPool, { lease: 'rows', term: 1 }, { table: 't', set: { v: 'old' }, where: { id: 1 } })).rejects.toBeInstanceOf(StaleTermError);
      expect(await count('rows')).toBe(1);
      await myPool.query('CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(9), last_fence_token BIGINT NULL, last_fence_lease VARBINARY(800) NULL)');
      await myPool.query("INSERT INTO t (id, v) VALUES (1, 'x')");
      await myFencedUpdate(myPool, { lease: 'rows', term: 2 }, { table: 't', set: { v: 'new' }, where: { id: 1 } });
      await expect(myFencedUpdate(myPool, { lease: 'rows', term: 1 }, { table: 't', set: { v: 'old' }, where: { id: 1 } })).rejects.toBeInstanceOf(StaleTermError);
      expect(await count('rows')).toBe(2);
      // appendFenced on a store used bare (not through openStore's wrapper).
      await pgStore.appendFenced({ lease: 'rows', term: 2 }, 's', 'x');
      await expect(pgStore.appendFenced({ lease: 'rows', term: 1 }, 's', 'y')).rejects.toBeInstanceOf(StaleTermError);
      expect(await count('rows')).toBe(3);
      // Not counted: bad input is not a stale refusal.
      await expect(pgFencedUpdate(pgPool, { lease: 'rows', term: 9 }, { table: 't', set: { v: 'forged' }, where: { id: 1 } })).rejects.toThrow(/never issued/);
      expect(await count('rows')).toBe(3);
      stopA();
      await expect(pgStore.appendFenced({ lease: 'rows', term: 1 }, 's', 'y')).rejects.toBeInstanceOf(StaleTermError);
      expect(await count('rows')).toBe(4); // B still collects
      stopB();
      await expect(pgStore.appendFenced({ lease: 'rows', term: 1 }, 's', 'y')).rejects.toBeInstanceOf(StaleTermError);
      expect(await count('rows')).toBe(4);
    } finally {
      await pgStore.close();
      await myStore.close();
      await pgPool.end();
      await myPool.end();
      await pgDb.drop();
      await mysqlDb.drop();
    }
  });
});
