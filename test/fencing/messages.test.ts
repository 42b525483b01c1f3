/**
 * The broker-neutral part of fenced messages: the metadata a fenced publish carries, how a
 * consumer reads it (bad input refused with one clear reason), and the consumer's ledger on each
 * SQL dialect (PostgreSQL, MySQL, SQLite): applied once, a redelivery acknowledged without a second
 * apply, a lower term dropped and reported, and an apply that fails leaves nothing recorded.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type Database from 'better-sqlite3';
import { openTestSqlite } from '../fixtures/sqlite-compat.js';
import mysql from 'mysql2/promise';
import pg from 'pg';
import { afterAll, describe, expect, it } from 'vitest';
import { InvalidArgumentError, NoTokenError, makeToken, onFencedRejection } from '../../src/core/index.js';
import type { FencedRejection } from '../../src/core/index.js';
import {
  ConsumerHaltedError,
  FencedConsumer,
  mysqlDialect,
  nextMessageFence,
  postgresDialect,
  readMessageFence,
  runFenced,
  sqlMessageLedger,
  memoryMessageLedger,
  sqliteDialect,
} from '../../src/fencing/index.js';
import type { MessageLedger } from '../../src/fencing/index.js';
import { createMysqlDatabase, createPostgresDatabase } from '../stores/sql-servers.js';
import { badTokens } from './message-fixtures.js';

describe('fenced message metadata', () => {
  it('a publish takes the context token and numbers its messages per leadership; outside a leadership it throws', () => {
    const token = makeToken('meta-ctx', 4);
    const fences = runFenced({ token }, () => [nextMessageFence('test'), nextMessageFence('test')]);
    expect(fences.map((f) => [f.tokenText, f.seq])).toEqual([
      ['meta-ctx#4', 1],
      ['meta-ctx#4', 2],
    ]);
    expect(nextMessageFence('test', { token: makeToken('meta-ctx', 5) })).toMatchObject({ tokenText: 'meta-ctx#5', seq: 1 });
    expect(() => nextMessageFence('publishFencedNats')).toThrow(NoTokenError);
    const ended = new AbortController();
    ended.abort();
    expect(() => runFenced({ token, signal: ended.signal }, () => nextMessageFence('publishFencedNats'))).toThrow(/has ended/);
    expect(() => nextMessageFence('test', { token, group: 'other' })).toThrow(InvalidArgumentError);
    expect(() => nextMessageFence('test', { token: null as unknown as typeof token })).toThrow(/token: expected a fencing token/);
    expect(() => nextMessageFence('test', { token: { lease: 'g', term: -1 } })).toThrow(/token.term: expected a positive integer term/);
  });

  it('bad metadata is refused with one clear reason', () => {
    for (const bad of badTokens('g')) {
      expect(() => readMessageFence('g', { token: bad.value, position: 1 }), bad.name).toThrow(bad.reason);
    }
    expect(() => readMessageFence('g', { token: undefined, position: 1 })).toThrow(/Fencing-Token: missing/);
    expect(() => readMessageFence('g', { token: ['g#1', 'g#2'], position: 1 })).toThrow(/expected text/);
    expect(() => readMessageFence('g', { token: 'g#1', position: undefined })).toThrow(/Fencing-Seq: missing/);
    expect(() => readMessageFence('g', { token: 'g#1', position: '-3' })).toThrow(/Fencing-Seq: expected a whole number/);
    expect(() => readMessageFence('g', { token: 'g#1', position: '99999999999999999' })).toThrow(/Fencing-Seq/);
    expect(readMessageFence('g', { token: Buffer.from('g#3'), position: '12' })).toEqual({ token: { lease: 'g', term: 3 }, position: 12 });
    expect(readMessageFence('a#b', { token: 'a#b#3', position: 1 }).token).toEqual({ lease: 'a#b', term: 3 });
    // The HTTP header's form everywhere: a group outside visible ASCII is percent-encoded.
    const fence = nextMessageFence('test', { token: makeToken('façade €', 2) });
    expect(fence.tokenText).toBe('fa%C3%A7ade%20%E2%82%AC#2');
    expect(readMessageFence('façade €', { token: fence.tokenText, position: 1 }).token).toEqual({ lease: 'façade €', term: 2 });
  });
});

interface LedgerHarness {
  ledger: MessageLedger<unknown>;
  /** A ledger that checks terms against the table `leases` (name, term) of the same database. */
  leasesLedger: MessageLedger<unknown>;
  exec(sql: string): Promise<void>;
  /** Insert into the application's table through the transaction's connection. */
  insert(tx: unknown, payload: string): Promise<void>;
  applied(): Promise<string[]>;
  close(): Promise<void>;
}

const dialects: Record<string, () => Promise<LedgerHarness>> = {
  postgres: async () => {
    const db = await createPostgresDatabase();
    const pool = new pg.Pool({ connectionString: db.url, max: 3 });
    pool.on('error', () => {});
    await pool.query('CREATE TABLE applied (id serial PRIMARY KEY, payload text)');
    const ledger = sqlMessageLedger(postgresDialect, pool);
    await ledger.createTable();
    return {
      ledger: ledger as MessageLedger<unknown>,
      leasesLedger: sqlMessageLedger(postgresDialect, pool, { table: 'fences_checked', leaseTable: 'leases' }) as MessageLedger<unknown>,
      exec: async (sql) => void (await pool.query(sql)),
      insert: async (tx, payload) => void (await (tx as pg.PoolClient).query('INSERT INTO applied (payload) VALUES ($1)', [payload])),
      applied: async () => (await pool.query<{ payload: string }>('SELECT payload FROM applied ORDER BY id')).rows.map((r) => r.payload),
      close: async () => {
        await pool.end();
        await db.drop();
      },
    };
  },
  mysql: async () => {
    const db = await createMysqlDatabase();
    const pool = mysql.createPool({ uri: db.url, connectionLimit: 3 });
    await pool.query('CREATE TABLE applied (id INT AUTO_INCREMENT PRIMARY KEY, payload TEXT)');
    const ledger = sqlMessageLedger(mysqlDialect, pool);
    await ledger.createTable();
    return {
      ledger: ledger as MessageLedger<unknown>,
      leasesLedger: sqlMessageLedger(mysqlDialect, pool, { table: 'fences_checked', leaseTable: 'leases' }) as MessageLedger<unknown>,
      exec: async (sql) => void (await pool.query(sql)),
      insert: async (tx, payload) => void (await (tx as mysql.PoolConnection).execute('INSERT INTO applied (payload) VALUES (?)', [payload])),
      applied: async () => ((await pool.query('SELECT payload FROM applied ORDER BY id'))[0] as { payload: string }[]).map((r) => r.payload),
      close: async () => {
        await pool.end();
        await db.drop();
      },
    };
  },
  sqlite: async () => {
    const dir = mkdtempSync(join(tmpdir(), 'tenure-msg-'));
    const db = openTestSqlite(join(dir, 'app.db'));
    db.exec('CREATE TABLE applied (id INTEGER PRIMARY KEY, payload TEXT)');
    const ledger = sqlMessageLedger(sqliteDialect, db);
    await ledger.createTable();
    return {
      ledger: ledger as MessageLedger<unknown>,
      leasesLedger: sqlMessageLedger(sqliteDialect, db, { table: 'fences_checked', leaseTable: 'leases' }) as MessageLedger<unknown>,
      exec: async (sql) => void db.exec(sql),
      insert: async (tx, payload) => void (tx as Database.Database).prepare('INSERT INTO applied (payload) VALUES (?)').run(payload),
      applied: async () => (db.prepare('SELECT payload FROM applied ORDER BY id').all() as { payload: string }[]).map((r) => r.payload),
      close: async () => {
        db.close();
        rmSync(dir, { recursive: true, force: true });
      },
    };
  },
};

const rejections: FencedRejection[] = [];
const stopListening = onFencedRejection((r) => rejections.push(r));
afterAll(() => stopListening());

describe.each(Object.keys(dialects))('message ledger on %s', (name) => {
  it('applies once, acknowledges a redelivery without applying it, drops a lower term, and records nothing when the apply fails', async () => {
    const h = await dialects[name]!();
    try {
      let failNext = false;
      // Quotes and backslashes in the names: the ledger's statements must hold them as text.
      const group = "ord'ers\\x";
      const consumer = new FencedConsumer<unknown, string>({
        group,
        consumer: "pro'jector\\",
        ledger: h.ledger,
        apply: async (tx, payload) => {
          await h.insert(tx, payload);
          if (failNext) throw new Error('apply failed after its insert');
        },
      });
      const at = (term: number, position: number) => ({ token: `${group}#${term}`, position: String(position) });
      expect((await consumer.handle('a', at(3, 1))).outcome).toBe('applied');
      expect((await consumer.handle('b', at(3, 2))).outcome).toBe('applied');
      expect(await consumer.handle('b again', at(3, 2))).toMatchObject({ outcome: 'duplicate', reason: /already applied: position 2 <= 2 of term 3/ });
      expect((await consumer.handle('c', at(4, 1))).outcome).toBe('applied');
      const before = rejections.length;
      const stale = await consumer.handle('zombie', at(3, 3));
      expect(stale).toMatchObject({ outcome: 'stale', reason: `stale fencing token: term 3 < 4 for group ${group} (a deposed leader's late publish)` });
      expect(rejections.slice(before)).toHaveLength(1);
      expect(rejections[before]).toMatchObject({ path: 'message', side: 'guard', error: { lease: group, term: 3, currentTerm: 4 } });
      expect((await consumer.handle('garbled', { token: `${group}#x`, position: '1' })).outcome).toBe('invalid');
      failNext = true;
      await expect(consumer.handle('d', at(4, 2))).rejects.toThrow(/apply failed/);
      failNext = false;
      // A later message waits for the failed one: applied first, it would make the failed one look applied.
      await expect(consumer.handle('e', at(4, 3))).rejects.toThrow(ConsumerHaltedError);
      await expect(consumer.handle('e', at(4, 3))).rejects.toThrow(/position 2 of .*#4 failed to apply \(apply failed after its insert\); later messages wait/);
      // The failed apply's insert and its mark were rolled back together: the message is new again.
      expect((await consumer.handle('d', at(4, 2))).outcome).toBe('applied');
      expect((await consumer.handle('e', at(4, 3))).outcome).toBe('applied');
      expect(await h.applied()).toEqual(['a', 'b', 'c', 'd', 'e']);
      expect(consumer.counts).toEqual({ applied: 5, duplicate: 1, stale: 1, invalid: 1 });
    } finally {
      await h.close();
    }
  });
});

describe.each(Object.keys(dialects))('message ledger deduping by id on %s', (name) => {
  it('many in flight are applied in batches, once each, in any order; a redelivery of an applied one is acknowledged without applying it; a lower term is dropped; a failing apply fails alone', async () => {
    const h = await dialects[name]!();
    try {
      const group = "ord'ers\\id";
      let failOn: string | null = null;
      let batches = 0;
      const runBatch = h.ledger.runBatch!.bind(h.ledger);
      const ledger: MessageLedger<unknown> = { run: h.ledger.run.bind(h.ledger), runBatch: (c, g, positions, step) => (batches++, runBatch(c, g, positions, step)) };
      const consumer = new FencedConsumer<unknown, string>({
        group,
        consumer: 'by-id',
        ledger,
        dedupe: 'id',
        maxBatch: 10,
        apply: async (tx, payload) => {
          await h.insert(tx, payload);
          if (payload === failOn) throw new Error(`apply of ${payload} failed after its insert`);
        },
      });
      const at = (term: number, position: number) => ({ token: `${group}#${term}`, position });
      const outcomes = async (list: [string, { token: string; position: number }][]) => (await Promise.all(list.map(([m, meta]) => consumer.handle(m, meta)))).map((v) => v.outcome);

      // Five in flight, out of stream order: all applied, in fewer transactions than messages.
      expect(await outcomes([5, 3, 1, 2, 4].map((p) => [`m${p}`, at(3, p)]))).toEqual(['applied', 'applied', 'applied', 'applied', 'applied']);
      expect(batches).toBeLessThan(5);
      // Redeliveries of applied ones (2, 4) in flight with new ones, and a second copy of 7 in the same batch.
      expect(
        await outcomes([
          ['m2 again', at(3, 2)],
          ['m6', at(3, 6)],
          ['m4 again', at(3, 4)],
          ['m7', at(3, 7)],
          ['m7 again', at(3, 7)],
        ]),
      ).toEqual(['duplicate', 'applied', 'duplicate', 'applied', 'duplicate']);
      // A new term, and a zombie's message of the old term behind it: dropped, counted, reported.
      const before = rejections.length;
      expect(
        await outcomes([
          ['m8', at(4, 8)],
          ['zombie', at(3, 9)],
          ['garbled', { token: `${group}#x`, position: 10 }],
        ]),
      ).toEqual(['applied', 'stale', 'invalid']);
      expect(rejections.slice(before)).toHaveLength(1);
      expect(rejections[before]).toMatchObject({ path: 'message', side: 'guard', error: { lease: group, term: 3, currentTerm: 4 } });
      // An apply failing in a batch fails alone: nothing of it is kept, the others are applied, its redelivery applies.
      failOn = 'm12';
      const settled = await Promise.allSettled(['m11', 'm12', 'm13'].map((m, i) => consumer.handle(m, at(4, 11 + i))));
      expect(settled.map((r) => r.status)).toEqual(['fulfilled', 'rejected', 'fulfilled']);
      expect((settled[1] as PromiseRejectedResult).reason).toMatchObject({ message: 'apply of m12 failed after its insert' });
      failOn = null;
      expect((await consumer.handle('m12', at(4, 12))).outcome).toBe('applied');
      expect((await consumer.handle('m12 again', at(4, 12))).outcome).toBe('duplicate');
      expect((await h.applied()).sort()).toEqual(['m1', 'm11', 'm12', 'm13', 'm2', 'm3', 'm4', 'm5', 'm6', 'm7', 'm8']);
      expect(consumer.counts).toEqual({ applied: 11, duplicate: 4, stale: 1, invalid: 1 });
      // Positions the broker will not deliver again can be forgotten; the others stay.
      expect(await h.ledger.forget!('by-id', group, 5)).toBe(5);
      expect((await consumer.handle('m6 again', at(4, 6))).outcome).toBe('duplicate');
    } finally {
      await h.close();
    }
  });
});

describe.each(Object.keys(dialects))('message ledger with the lease table on %s', (name) => {
  it('a term the lease store never issued is refused, so a forged term cannot poison the ledger', async () => {
    const h = await dialects[name]!();
    try {
      await h.exec('CREATE TABLE leases (name VARCHAR(200) PRIMARY KEY, term BIGINT NOT NULL)');
      await h.exec("INSERT INTO leases (name, term) VALUES ('orders', 3)");
      await (h.leasesLedger as unknown as { createTable(): Promise<void> }).createTable();
      const consumer = new FencedConsumer<unknown, string>({ group: 'orders', consumer: 'p', ledger: h.leasesLedger, apply: (tx, payload) => h.insert(tx, payload) });
      expect(await consumer.handle('forged', { token: 'orders#1000', position: '1' })).toMatchObject({ outcome: 'invalid', reason: /term 1000 was never issued for group orders \(latest 3\)/ });
      expect((await consumer.handle('real', { token: 'orders#3', position: '1' })).outcome).toBe('applied');
      expect(await h.applied()).toEqual(['real']);
      // Deduping by id: the same check, once per batch.
      const byId = new FencedConsumer<unknown, string>({ group: 'orders', consumer: 'q', ledger: h.leasesLedger, dedupe: 'id', apply: (tx, payload) => h.insert(tx, payload) });
      const verdicts = await Promise.all([byId.handle('real 2', { token: 'orders#3', position: 2 }), byId.handle('forged 2', { token: 'orders#1000', position: 3 })]);
      expect(verdicts[0]!.outcome).toBe('applied');
      expect(verdicts[1]).toMatchObject({ outcome: 'invalid', reason: /term 1000 was never issued for group orders \(latest 3\)/ });
      expect(await h.applied()).toEqual(['real', 'real 2']);
    } finally {
      await h.close();
    }
  });
});

describe('memory message ledger', () => {
  it('dedupes by id: applied once in any order, a redelivery acknowledged, a lower term dropped', async () => {
    const applied: string[] = [];
    const consumer = new FencedConsumer<null, string>({ group: 'demo', consumer: 'view', ledger: memoryMessageLedger(), dedupe: 'id', apply: async (_tx, payload) => void applied.push(payload) });
    const at = (term: number, position: number) => ({ token: `demo#${term}`, position });
    const first = await Promise.all([consumer.handle('b', at(1, 2)), consumer.handle('a', at(1, 1)), consumer.handle('b again', at(1, 2))]);
    expect(first.map((v) => v.outcome)).toEqual(['applied', 'applied', 'duplicate']);
    expect((await consumer.handle('c', at(2, 3))).outcome).toBe('applied');
    expect((await consumer.handle('a again', at(1, 1))).outcome).toBe('duplicate');
    expect((await consumer.handle('zombie', at(1, 4))).outcome).toBe('stale');
    expect(applied).toEqual(['b', 'a', 'c']);
    expect(() => new FencedConsumer({ group: 'demo', consumer: 'v', ledger: { run: memoryMessageLedger().run }, dedupe: 'id', apply: async () => {} })).toThrow(/has no runBatch/);
    expect(() => new FencedConsumer({ group: 'demo', consumer: 'v', ledger: memoryMessageLedger(), dedupe: 'id', maxBatch: 0, apply: async () => {} })).toThrow(/maxBatch: expected an integer in \[1, 1000\], got 0/);
  });

  it('applies once, drops a lower term and a redelivery, and does not advance when the apply throws', async () => {
    const applied: string[] = [];
    let fail = false;
    const consumer = new FencedConsumer<null, string>({
      group: 'demo',
      consumer: 'view',
      ledger: memoryMessageLedger(),
      apply: async (_tx, payload) => {
        if (fail) throw new Error('apply failed');
        applied.push(payload);
      },
    });
    const at = (term: number, position: number) => ({ token: `demo#${term}`, position });
    expect((await consumer.handle('a', at(1, 1))).outcome).toBe('applied');
    expect((await consumer.handle('a', at(1, 1))).outcome).toBe('duplicate');
    expect((await consumer.handle('b', at(2, 5))).outcome).toBe('applied');
    expect((await consumer.handle('zombie', at(1, 2))).outcome).toBe('stale');
    fail = true;
    await expect(consumer.handle('c', at(2, 6))).rejects.toThrow(/apply failed/);
    fail = false;
    await expect(consumer.handle('d', at(2, 7))).rejects.toThrow(ConsumerHaltedError);
    consumer.resume(); // 'c' will not come back: handle what follows
    expect((await consumer.handle('d', at(2, 7))).outcome).toBe('applied');
    expect(applied).toEqual(['a', 'b', 'd']);
  });
});
