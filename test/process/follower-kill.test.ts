/**
 * Exactly-once across kill -9: a follower process (test/fixtures/follower.ts) applies a fenced
 * stream to a projection while the leader (this process) keeps appending. The follower is
 * SIGKILLed again and again: in the middle of a batch's apply, after the apply and before the
 * commit that saves the offset, and at random instants; each time a new process resumes. At the
 * end the projection holds every entry exactly once, in order. The log is on SQLite, PostgreSQL,
 * MySQL (projection in the same database) and Redis (projection in a SQLite file).
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { openTestSqlite } from '../fixtures/sqlite-compat.js';
import mysql from 'mysql2/promise';
import pg from 'pg';
import { afterEach, describe, expect, it } from 'vitest';
import { openStore } from '../../src/index.js';
import type { FencingToken, TenureStore } from '../../src/index.js';
import { FixtureProcess, delay, killAll, num } from '../fixtures/harness.js';
import { randomBytes } from 'node:crypto';
import { Redis } from 'ioredis';
import { createMysqlDatabase, createPostgresDatabase } from '../stores/sql-servers.js';
import { deleteKeys, testRedisUrl } from '../stores/redis-backend.js';

const STREAM = 'orders';
const TOTAL = 900;
const KILLS = 9;
const WAIT_MS = 30_000;

const procs: FixtureProcess[] = [];
const cleanups: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  await killAll(procs.splice(0));
  for (const c of cleanups.splice(0).reverse()) await c();
});

interface Setup {
  storeUrl: string;
  projection: string;
  rows(): Promise<number[]>;
}

function sqliteRows(projection: string): () => Promise<number[]> {
  return async () => {
    const db = openTestSqlite(projection, { readonly: true });
    try {
      return (db.prepare('SELECT seq FROM applied ORDER BY rowid').all() as { seq: number }[]).map((r) => r.seq);
    } finally {
      db.close();
    }
  };
}

const setups: Record<'sqlite' | 'postgres' | 'mysql' | 'redis', () => Promise<Setup & { projectionKind?: string }>> = {
  // The log on Redis, the projection in a SQLite file.
  redis: async () => {
    const dir = mkdtempSync(join(tmpdir(), 'tenure-follow-kill-'));
    const keyPrefix = `{tenure-test-${randomBytes(6).toString('hex')}}:`;
    cleanups.push(async () => {
      rmSync(dir, { recursive: true, force: true });
      const admin = new Redis(testRedisUrl);
      try {
        await deleteKeys(admin, keyPrefix);
      } finally {
        admin.disconnect();
      }
    });
    const url = new URL(testRedisUrl);
    url.searchParams.set('prefix', keyPrefix);
    const projection = join(dir, 'projection.db');
    return { storeUrl: url.toString(), projection, projectionKind: 'sqlite', rows: sqliteRows(projection) };
  },
  sqlite: async () => {
    const dir = mkdtempSync(join(tmpdir(), 'tenure-follow-kill-'));
    cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
    const projection = join(dir, 'projection.db');
    return {
      storeUrl: `sqlite:${join(dir, 'log.db')}`,
      projection,
      rows: async () => {
        const db = openTestSqlite(projection, { readonly: true });
        try {
          return (db.prepare('SELECT seq FROM applied ORDER BY rowid').all() as { seq: number }[]).map((r) => r.seq);
        } finally {
          db.close();
        }
      },
    };
  },
  postgres: async () => {
    const db = await createPostgresDatabase();
    cleanups.push(() => db.drop());
    return {
      storeUrl: db.url,
      projection: db.url,
      rows: async () => {
        const c = new pg.Client({ connectionString: db.url });
        await c.connect();
        try {
          return (await c.query('SELECT seq::int AS seq FROM applied ORDER BY id')).rows.map((r: { seq: number }) => r.seq);
        } finally {
          await c.end();
        }
      },
    };
  },
  mysql: async () => {
    const db = await createMysqlDatabase();
    cleanups.push(() => db.drop());
    return {
      storeUrl: db.url,
      projection: db.url,
      rows: async () => {
        const c = await mysql.createConnection({ uri: db.url });
        try {
          const [rows] = await c.query('SELECT seq FROM applied ORDER BY id');
          return (rows as { seq: number | string }[]).map((r) => Number(r.seq));
        } finally {
          await c.end();
        }
      },
    };
  },
};

describe.each(['sqlite', 'postgres', 'mysql', 'redis'] as const)('a follower killed with SIGKILL on %s', (kind) => {
  it('resumes without a duplicate or a gap, whether killed mid-apply, between apply and offset save, or at random', { timeout: 240_000 }, async () => {
    const setup = await setups[kind]();
    const store: TenureStore = await openStore(setup.storeUrl);
    cleanups.push(() => store.close());
    const lease = await store.acquire('orders-leader', 'leader-1', 600_000);
    const token: FencingToken = { lease: 'orders-leader', term: lease.lease.term };
    let appended = 0;
    const append = async (n: number): Promise<void> => {
      for (let i = 0; i < n; i++) appended = await store.appendFenced(token, STREAM, `order ${appended + 1}`);
    };
    await append(TOTAL / 2);
    // The leader keeps writing while followers come and go.
    const writer = (async () => {
      while (appended < TOTAL) {
        await append(5);
        await delay(10);
      }
    })();

    const spawn = (): FixtureProcess => {
      const p = new FixtureProcess(`follower-${procs.length}`, 'follower', [setup.storeUrl, STREAM, setup.projectionKind ?? kind, setup.projection, '--hold-ms', '40', '--batch', '40']);
      procs.push(p);
      return p;
    };
    const modes = ['in-apply', 'batch-applied', 'random'] as const;
    const landed: Record<string, number> = { 'in-apply': 0, 'batch-applied': 0, random: 0 };
    for (let k = 0; k < KILLS; k++) {
      const mode = modes[k % modes.length]!;
      const p = spawn();
      await p.waitFor('ready', WAIT_MS);
      if (mode === 'random') await delay(20 + Math.floor(Math.random() * 200));
      else await p.waitFor(mode, WAIT_MS);
      p.child.kill('SIGKILL');
      const exit = await p.exited;
      expect(exit.signal).toBe('SIGKILL');
      landed[mode] = (landed[mode] ?? 0) + 1;
      expect(p.all('failed')).toEqual([]);
    }
    await writer;
    const last = spawn();
    await last.waitFor('committed', WAIT_MS * 2, (e) => num(e, 'to') === TOTAL);
    last.child.kill('SIGTERM');
    expect((await last.exited).code).toBe(0);

    const seqs = await setup.rows();
    expect(seqs.length).toBe(TOTAL);
    expect(seqs).toEqual(Array.from({ length: TOTAL }, (_, i) => i + 1));
    expect(landed).toEqual({ 'in-apply': 3, 'batch-applied': 3, random: 3 });
    // Each resumed process started from a committed offset: none re-applied a committed batch.
    const committed = procs.flatMap((p) => p.all('committed').map((e) => [num(e, 'from'), num(e, 'to')] as const)).sort((a, b) => a[0] - b[0]);
    for (let i = 1; i < committed.length; i++) expect(committed[i]![0]).toBeGreaterThan(committed[i - 1]![1]);
  });
});
