/**
 * Database commands on the real servers (PostgreSQL, MariaDB) and SQLite files: fencedInsert,
 * fencedCompareAndSet (stale term vs version conflict vs no row), applyOnce (at most once per key,
 * in the caller's transaction, duplicates racing), the SQL epoch store as the table of issued
 * terms, leaders of adjacent epochs racing on one row, and bad input writing nothing.
 */
import { Registry } from 'prom-client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { InvalidArgumentError, RetryTransactionError, StaleTermError, StoreDataError } from '../../src/core/index.js';
import {
  applyOnce,
  createEpochStore,
  createIdempotencyTable,
  fencedCompareAndSet,
  fencedInsert,
  fencedUpdate,
} from '../../src/fencing/index.js';
import type { EpochStore, FencingToken } from '../../src/fencing/index.js';
import { collectMetrics } from '../../src/observe/index.js';
import { sqlHarnesses } from './sql-harness.js';
import type { SqlHarness } from './sql-harness.js';

const harnesses = sqlHarnesses();

it('runs at least one SQLite driver on this Node', () => {
  expect(Object.keys(harnesses).filter((k) => k.startsWith('sqlite'))).not.toEqual([]);
});

describe.each(Object.keys(harnesses))('database commands: %s', (name) => {
  let h: SqlHarness;
  let epochs: EpochStore;
  const registry = new Registry();
  let stopMetrics: () => void = () => {};
  beforeAll(async () => {
    h = await harnesses[name]!();
    epochs = createEpochStore({ dialect: h.dialect, db: h.db });
    stopMetrics = collectMetrics({}, { registry });
  });
  afterAll(async () => {
    stopMetrics();
    await h?.close();
  });
  const rejections = async (lease: string): Promise<number> => {
    const m = new RegExp(`tenure_fenced_rejections_total\\{lease="${lease}",path="sql",side="guard"\\} (\\d+)`).exec(await registry.metrics());
    return m ? Number(m[1]) : 0;
  };
  /** Epochs 1..n of `group`, issued by the epoch store in this database. */
  const bumpTo = async (group: string, n: number): Promise<FencingToken[]> => {
    const tokens: FencingToken[] = [];
    while ((await epochs.current(group)) < n) tokens.push(epochs.token(group, await epochs.bump(group)));
    return tokens;
  };
  const E = { leaseTable: 'tenure_epochs' } as const;
  const fenceCols = (): string => `last_fence_token ${h.types.token}, last_fence_lease ${h.types.lease}`;

  it('epoch store: bumps one by one from 1, concurrent bumps never repeat, current reads the last', async () => {
    expect(await epochs.current('fresh')).toBe(0);
    expect(await epochs.bump('fresh')).toBe(1);
    expect(await epochs.bump('fresh')).toBe(2);
    const many = await Promise.all(Array.from({ length: 30 }, () => epochs.bump('fresh')));
    expect(new Set(many).size).toBe(30);
    expect(Math.max(...many)).toBe(32);
    expect(await epochs.current('fresh')).toBe(32);
    expect(await epochs.current('other')).toBe(0);
    expect(epochs.token('fresh', 3)).toEqual({ lease: 'epoch:fresh', term: 3 });
    for (const bad of ['', 'a\u0000b', 'x'.repeat(195), 42]) {
      await expect(epochs.bump(bad as string)).rejects.toBeInstanceOf(InvalidArgumentError);
    }
    expect(await h.rows("SELECT count(*) AS n FROM tenure_epochs WHERE name <> 'epoch:fresh'")).toEqual([{ n: 0 }]);
    // A term beyond what tenure can order exactly, written by hand: a StoreDataError, not a rounded number.
    await h.exec("INSERT INTO tenure_epochs (name, term) VALUES ('epoch:tampered', 9007199254740993)");
    await expect(epochs.current('tampered')).rejects.toBeInstanceOf(StoreDataError);
  });

  it('fencedInsert records the token on the new row; later updates are fenced by it; an unissued term writes nothing', async () => {
    await h.exec(`CREATE TABLE orders (id ${h.types.int} PRIMARY KEY, item ${h.types.text}, ${fenceCols()})`);
    const [t1, t2] = await bumpTo('shop', 2);
    expect(await fencedInsert(h.dialect, h.db, t2!, { table: 'orders', values: { id: 1, item: 'book' }, ...E })).toEqual({ inserted: 1 });
    expect(await h.rows('SELECT id, item, last_fence_token, last_fence_lease FROM orders')).toEqual([{ id: 1, item: 'book', last_fence_token: 2, last_fence_lease: 'epoch:shop' }]);
    // The row is fenced from its first write: the older epoch cannot update it.
    await expect(fencedUpdate(h.dialect, h.db, t1!, { table: 'orders', set: { item: 'zombie' }, where: { id: 1 }, ...E })).rejects.toBeInstanceOf(StaleTermError);
    // A term never issued (a forged token) inserts nothing.
    const forged = await fencedInsert(h.dialect, h.db, { lease: 'epoch:shop', term: 3 }, { table: 'orders', values: { id: 2, item: 'forged' }, ...E }).catch((e: unknown) => e);
    expect(forged).toBeInstanceOf(InvalidArgumentError);
    expect((forged as Error).message).toBe('token.term: term 3 was never issued for lease epoch:shop (latest 2)');
    // Without the issued check (leaseTable: null) and unbound rows, it inserts.
    expect(await fencedInsert(h.dialect, h.db, t1!, { table: 'orders', values: { id: 3, item: 'x' }, leaseTable: null })).toEqual({ inserted: 1 });
    await expect(fencedInsert(h.dialect, h.db, t2!, { table: 'orders', values: { id: 4, last_fence_token: 9 }, ...E })).rejects.toThrow(/^values\.last_fence_token: /);
    expect(await h.rows('SELECT id FROM orders ORDER BY id')).toEqual([{ id: 1 }, { id: 3 }]);
  });

  it('fencedCompareAndSet: applied, version conflict, missing row and stale term are told apart; a stale term is refused first', async () => {
    await h.exec(`CREATE TABLE docs (id ${h.types.int} PRIMARY KEY, body ${h.types.text}, version ${h.types.int} NOT NULL DEFAULT 0, ${fenceCols()})`);
    await h.exec("INSERT INTO docs (id, body) VALUES (1, 'v0')");
    const [t1, t2, t3] = await bumpTo('docs', 3);
    const cas = (token: FencingToken, expectedVersion: number, body: string, id = 1) =>
      fencedCompareAndSet(h.dialect, h.db, token, { table: 'docs', where: { id }, set: { body }, expectedVersion, ...E });
    expect(await cas(t2!, 0, 'v1')).toEqual({ outcome: 'applied', version: 1 });
    expect(await cas(t2!, 0, 'again')).toEqual({ outcome: 'conflict', version: 1 });
    expect(await cas(t2!, 1, 'v2')).toEqual({ outcome: 'applied', version: 2 });
    expect(await cas(t2!, 0, 'nobody', 99)).toEqual({ outcome: 'missing' });
    const before = await rejections('epoch:docs');
    // The older epoch with the right version: stale, refused, counted on path sql.
    const stale = await cas(t1!, 2, 'zombie').catch((e: unknown) => e);
    expect(stale).toBeInstanceOf(StaleTermError);
    expect(stale).toMatchObject({ lease: 'epoch:docs', term: 1, currentTerm: 2 });
    // Stale AND a wrong version: still stale (a zombie must learn it is one).
    await expect(cas(t1!, 0, 'zombie')).rejects.toBeInstanceOf(StaleTermError);
    expect(await rejections('epoch:docs')).toBe(before + 2);
    // A newer epoch takes over with the version it read.
    expect(await cas(t3!, 2, 'v3')).toEqual({ outcome: 'applied', version: 3 });
    await expect(cas(t2!, 3, 'late')).rejects.toBeInstanceOf(StaleTermError);
    expect(await h.rows('SELECT body, version, last_fence_token, last_fence_lease FROM docs')).toEqual([{ body: 'v3', version: 3, last_fence_token: 3, last_fence_lease: 'epoch:docs' }]);
    // Another group's token (issued to it) on this group's row: bad input, nothing written.
    const [other] = await bumpTo('elsewhere', 5);
    const foreign = await fencedCompareAndSet(h.dialect, h.db, { lease: 'epoch:elsewhere', term: 5 }, { table: 'docs', where: { id: 1 }, set: { body: 'x' }, expectedVersion: 3, ...E }).catch((e: unknown) => e);
    expect(other).toBeDefined();
    expect(foreign).toBeInstanceOf(InvalidArgumentError);
    expect((foreign as Error).message).toBe('token.lease: rows of docs are fenced by lease epoch:docs, not epoch:elsewhere');
    for (const bad of [-1, 1.5, Number.MAX_SAFE_INTEGER, Number.NaN]) {
      await expect(cas(t3!, bad, 'bad')).rejects.toThrow(/^expectedVersion: /);
    }
    await expect(fencedCompareAndSet(h.dialect, h.db, t3!, { table: 'docs', where: { id: 1 }, set: { version: 7 }, expectedVersion: 3, ...E })).rejects.toThrow(/^set\.version: /);
    expect(await h.rows('SELECT body, version, last_fence_token FROM docs')).toEqual([{ body: 'v3', version: 3, last_fence_token: 3 }]);
  });

  it("termCheck 'current': once a newer epoch is bumped, the older one is refused everywhere, even on rows the newer one has not written", async () => {
    await h.exec(`CREATE TABLE strict (id ${h.types.int} PRIMARY KEY, v ${h.types.text}, version ${h.types.int} NOT NULL DEFAULT 0, ${fenceCols()})`);
    await h.exec("INSERT INTO strict (id, v) VALUES (1, 'untouched'), (2, 'untouched')");
    const [t1, t2] = await bumpTo('strict', 2);
    const S = { leaseTable: 'tenure_epochs', termCheck: 'current' } as const;
    // 'issued' (the default) lets the deposed epoch 1 write a row epoch 2 has not written yet…
    expect(await fencedUpdate(h.dialect, h.db, t1!, { table: 'strict', set: { v: 'by 1' }, where: { id: 2 }, ...E })).toEqual({ updated: 1 });
    // …'current' does not, on any command.
    const before = await rejections('epoch:strict');
    const refusals = await Promise.all([
      fencedUpdate(h.dialect, h.db, t1!, { table: 'strict', set: { v: 'zombie' }, where: { id: 1 }, ...S }).catch((e: unknown) => e),
      fencedCompareAndSet(h.dialect, h.db, t1!, { table: 'strict', set: { v: 'zombie' }, where: { id: 1 }, expectedVersion: 0, ...S }).catch((e: unknown) => e),
      fencedInsert(h.dialect, h.db, t1!, { table: 'strict', values: { id: 3, v: 'zombie' }, ...S }).catch((e: unknown) => e),
    ]);
    for (const r of refusals) expect(r).toMatchObject({ name: 'StaleTermError', lease: 'epoch:strict', term: 1, currentTerm: 2 });
    expect(await rejections('epoch:strict')).toBe(before + 3);
    expect(await fencedUpdate(h.dialect, h.db, t2!, { table: 'strict', set: { v: 'by 2' }, where: { id: 1 }, ...S })).toEqual({ updated: 1 });
    expect(await fencedInsert(h.dialect, h.db, t2!, { table: 'strict', values: { id: 3, v: 'by 2' }, ...S })).toEqual({ inserted: 1 });
    expect(await h.rows('SELECT id, v, last_fence_token FROM strict ORDER BY id')).toEqual([
      { id: 1, v: 'by 2', last_fence_token: 2 },
      { id: 2, v: 'by 1', last_fence_token: 1 },
      { id: 3, v: 'by 2', last_fence_token: 2 },
    ]);
    await expect(fencedUpdate(h.dialect, h.db, t2!, { table: 'strict', set: { v: 'x' }, where: { id: 1 }, leaseTable: null, termCheck: 'current' })).rejects.toThrow(/^termCheck: /);
    await expect(fencedInsert(h.dialect, h.db, t2!, { table: 'strict', values: { id: 4 }, ...E, termCheck: 'latest' as 'current' })).rejects.toThrow(/^termCheck: /);
  });

  it('bad tokens (term -1, 0, 2^63, NaN, a string, NUL or a huge lease) get one clear InvalidArgumentError and write nothing', async () => {
    await h.exec(`CREATE TABLE guarded (id ${h.types.int} PRIMARY KEY, v ${h.types.text}, version ${h.types.int} NOT NULL DEFAULT 0, ${fenceCols()})`);
    await h.exec("INSERT INTO guarded (id, v) VALUES (1, 'keep')");
    await bumpTo('guard', 1);
    const bad: unknown[] = [
      { lease: 'epoch:guard', term: -1 },
      { lease: 'epoch:guard', term: 0 },
      { lease: 'epoch:guard', term: 2 ** 63 },
      { lease: 'epoch:guard', term: Number.NaN },
      { lease: 'epoch:guard', term: '1' },
      { lease: 'epoch:gu\u0000ard', term: 1 },
      { lease: 'g'.repeat(10_000), term: 1 },
      null,
      'epoch:guard#1',
    ];
    for (const token of bad) {
      const t = token as FencingToken;
      const outcomes = await Promise.all([
        fencedUpdate(h.dialect, h.db, t, { table: 'guarded', set: { v: 'bad' }, where: { id: 1 }, ...E }).catch((e: unknown) => e),
        fencedInsert(h.dialect, h.db, t, { table: 'guarded', values: { id: 2, v: 'bad' }, ...E }).catch((e: unknown) => e),
        fencedCompareAndSet(h.dialect, h.db, t, { table: 'guarded', where: { id: 1 }, set: { v: 'bad' }, expectedVersion: 0, ...E }).catch((e: unknown) => e),
      ]);
      for (const o of outcomes) {
        expect(o, JSON.stringify(token)?.slice(0, 60)).toBeInstanceOf(InvalidArgumentError);
        expect((o as Error).message).toMatch(/^token(\.lease|\.term)?: /);
      }
    }
    expect(await h.rows('SELECT id, v, version, last_fence_token FROM guarded')).toEqual([{ id: 1, v: 'keep', version: 0, last_fence_token: null }]);
    expect(await rejections('epoch:guard')).toBe(0);
  });

  it('applyOnce: a command with a key is applied once in the caller transaction; a repeat returns the first outcome', async () => {
    await createIdempotencyTable(h.dialect, h.db);
    await createIdempotencyTable(h.dialect, h.db); // again: no error
    await h.exec(`CREATE TABLE wallet (id ${h.types.int} PRIMARY KEY, balance ${h.types.int} NOT NULL, version ${h.types.int} NOT NULL DEFAULT 0, ${fenceCols()})`);
    await h.exec('INSERT INTO wallet (id, balance) VALUES (1, 100)');
    const [token] = await bumpTo('wallet', 1);
    let runs = 0;
    const pay = async (key: string, amount: number) => {
      const tx = await h.begin();
      try {
        const out = await applyOnce(h.dialect, tx.db, { key }, async (db) => {
          runs++;
          const [row] = await h.dialect.select(db, 'SELECT balance, version FROM wallet WHERE id = 1', []);
          const balance = Number(row!.balance) - amount;
          const r = await fencedCompareAndSet(h.dialect, db, token!, { table: 'wallet', where: { id: 1 }, set: { balance }, expectedVersion: Number(row!.version), ...E });
          return { balance, outcome: r.outcome };
        });
        await tx.commit();
        return out;
      } catch (err) {
        await tx.rollback();
        throw err;
      }
    };
    expect(await pay('req-1', 30)).toEqual({ applied: true, result: { balance: 70, outcome: 'applied' } });
    expect(await pay('req-1', 30)).toEqual({ applied: false, result: { balance: 70, outcome: 'applied' } });
    expect(await pay('req-1', 999)).toEqual({ applied: false, result: { balance: 70, outcome: 'applied' } });
    expect(runs).toBe(1);
    // Keys are compared byte for byte.
    expect((await pay('REQ-1', 10)).applied).toBe(true);
    expect(await h.rows('SELECT balance FROM wallet')).toEqual([{ balance: 60 }]);

    // A command that throws: the caller rolls back, the key is not recorded, a retry applies.
    const tx = await h.begin();
    await expect(applyOnce(h.dialect, tx.db, { key: 'req-2' }, () => Promise.reject(new Error('boom')))).rejects.toThrow('boom');
    await tx.rollback();
    expect((await pay('req-2', 5)).applied).toBe(true);
    expect(await h.rows('SELECT balance FROM wallet')).toEqual([{ balance: 55 }]);

    // Bad keys and outcomes: one clear error, nothing recorded.
    const keys = await h.rows('SELECT count(*) AS n FROM tenure_idempotency_keys');
    for (const key of ['', 'k\u0000', 'k'.repeat(201), 'x'.repeat(1_000_000), 7]) {
      const t = await h.begin();
      await expect(applyOnce(h.dialect, t.db, { key: key as string }, () => 1)).rejects.toThrow(/^key: /);
      await t.rollback();
    }
    const t2 = await h.begin();
    await expect(applyOnce(h.dialect, t2.db, { key: 'huge' }, () => 'x'.repeat(70_000))).rejects.toThrow(/^result: /);
    await t2.rollback();
    await expect(applyOnce(h.dialect, h.db, { key: 'k', table: 'x; DROP TABLE wallet' }, () => 1)).rejects.toThrow(/^table: /);
    await expect(applyOnce(h.dialect, h.db, { key: 'k', table: 'no_such_keys' }, () => 1)).rejects.toThrow(/^table: no table no_such_keys of idempotency keys/);
    expect(await h.rows('SELECT count(*) AS n FROM tenure_idempotency_keys')).toEqual(keys);
    expect(runs).toBe(3);
  });

  it('applyOnce: concurrent duplicates race on the key; exactly one applies, the others return its outcome', async (ctx) => {
    if (!h.concurrentTx) ctx.skip();
    await createIdempotencyTable(h.dialect, h.db);
    await h.exec(`CREATE TABLE counter (id ${h.types.int} PRIMARY KEY, n ${h.types.int} NOT NULL)`);
    await h.exec('INSERT INTO counter (id, n) VALUES (1, 0)');
    for (let round = 0; round < 10; round++) {
      const key = `dup-${round}`;
      const outs = await Promise.all(
        Array.from({ length: 6 }, async (_, i) => {
          const tx = await h.begin();
          try {
            const out = await applyOnce(h.dialect, tx.db, { key }, async (db) => {
              await h.dialect.update(db, 'UPDATE counter SET n = n + 1 WHERE id = 1', []);
              await new Promise((r) => setTimeout(r, 5)); // hold the key a moment: the duplicates wait on it
              return { by: i };
            });
            await tx.commit();
            return out;
          } catch (err) {
            await tx.rollback();
            throw err;
          }
        }),
      );
      expect(outs.filter((o) => o.applied)).toHaveLength(1);
      const first = outs.find((o) => o.applied)!.result;
      for (const o of outs) expect(o.result).toEqual(first);
    }
    expect(await h.rows('SELECT n FROM counter')).toEqual([{ n: 10 }]);
  });

  it('applyOnce: a transaction whose snapshot predates the first commit still returns the first outcome', async (ctx) => {
    if (!h.concurrentTx) ctx.skip();
    await createIdempotencyTable(h.dialect, h.db);
    const late = await h.begin();
    await h.dialect.select(late.db, 'SELECT count(*) AS n FROM tenure_idempotency_keys', []); // its snapshot (MySQL REPEATABLE READ) starts here
    const first = await h.begin();
    expect(await applyOnce(h.dialect, first.db, { key: 'snap' }, () => ({ by: 'first' }))).toEqual({ applied: true, result: { by: 'first' } });
    await first.commit();
    let ran = false;
    const out = await applyOnce(h.dialect, late.db, { key: 'snap' }, () => {
      ran = true;
      return { by: 'late' };
    });
    await late.commit();
    expect(out).toEqual({ applied: false, result: { by: 'first' } });
    expect(ran).toBe(false);
  });

  it('applyOnce: a concurrent claim this transaction cannot see, or a claimed key removed before it is read, is RetryTransactionError; the retried transaction returns the first outcome', async (ctx) => {
    if (h.name !== 'postgres') ctx.skip();
    await createIdempotencyTable(h.dialect, h.db);
    let ran = false;
    const command = (): { by: string } => {
      ran = true;
      return { by: 'late' };
    };
    // REPEATABLE READ: the duplicate's claim committed after this transaction's snapshot was taken.
    const late = await h.begin();
    await h.dialect.select(late.db, 'SET TRANSACTION ISOLATION LEVEL REPEATABLE READ', []);
    await h.dialect.select(late.db, 'SELECT count(*) AS n FROM tenure_idempotency_keys', []); // its snapshot starts here
    const first = await h.begin();
    await applyOnce(h.dialect, first.db, { key: 'rr' }, () => ({ by: 'first' }));
    await first.commit();
    const err = await applyOnce(h.dialect, late.db, { key: 'rr' }, command).catch((e: unknown) => e);
    await late.rollback();
    expect(err).toBeInstanceOf(RetryTransactionError);
    expect(err).toMatchObject({ code: 'RETRY_TRANSACTION', message: /^applyOnce: key "rr" was claimed by a concurrent transaction this one conflicts with \(40001\): roll back and run the transaction again/ });
    const retried = await h.begin();
    expect(await applyOnce(h.dialect, retried.db, { key: 'rr' }, command)).toEqual({ applied: false, result: { by: 'first' } });
    await retried.commit();

    // READ COMMITTED: the key's row is deleted (and committed) between the claim and its read.
    const owner = await h.begin();
    await applyOnce(h.dialect, owner.db, { key: 'gone' }, () => ({ by: 'first' }));
    await owner.commit();
    const tx = await h.begin();
    const c = tx.db as unknown as { query(text: unknown, values?: unknown[]): Promise<unknown> };
    const racing = {
      query: async (text: unknown, values?: unknown[]) => {
        const res = await c.query(text, values);
        if (typeof text === 'object' && text !== null && /^INSERT INTO/.test((text as { text: string }).text)) await h.exec("DELETE FROM tenure_idempotency_keys WHERE idem_key = 'gone'");
        return res;
      },
    };
    const gone = await applyOnce(h.dialect, racing as typeof tx.db, { key: 'gone' }, command).catch((e: unknown) => e);
    await tx.rollback();
    expect(gone).toBeInstanceOf(RetryTransactionError);
    expect(gone).toMatchObject({ code: 'RETRY_TRANSACTION', message: /^applyOnce: key "gone" was claimed by a transaction whose row this one no longer sees \(removed meanwhile\)/ });
    expect(ran).toBe(false);
  });

  it('leaders of adjacent epochs racing on one row never leave the lower epoch on top (many rounds)', async () => {
    await h.exec(`CREATE TABLE race (id ${h.types.int} PRIMARY KEY, state ${h.types.text}, version ${h.types.int} NOT NULL DEFAULT 0, ${fenceCols()})`);
    await h.exec("INSERT INTO race (id, state) VALUES (1, 'new')");
    const rounds = h.concurrentTx ? 60 : 30;
    let staleSeen = 0;
    for (let round = 0; round < rounds; round++) {
      const older = epochs.token('race', await epochs.bump('race'));
      const newer = epochs.token('race', await epochs.bump('race'));
      // Each leader writes several times, plain fenced updates and compare-and-sets, interleaved.
      // Odd rounds check the term against the current epoch: the older leader is refused at once.
      const check = round % 2 === 1 ? ({ leaseTable: 'tenure_epochs', termCheck: 'current' } as const) : E;
      const writer = async (token: FencingToken): Promise<string[]> => {
        const outcomes: string[] = [];
        for (let i = 0; i < 4; i++) {
          try {
            if (i % 2 === 0) {
              await fencedUpdate(h.dialect, h.db, token, { table: 'race', set: { state: `by ${token.term}` }, where: { id: 1 }, ...check });
              outcomes.push('ok');
            } else {
              const [row] = await h.dialect.select(h.db, 'SELECT version FROM race WHERE id = 1', []);
              const r = await fencedCompareAndSet(h.dialect, h.db, token, { table: 'race', where: { id: 1 }, set: { state: `by ${token.term}` }, expectedVersion: Number(row!.version), ...check });
              outcomes.push(r.outcome);
            }
          } catch (err) {
            if (!(err instanceof StaleTermError)) throw err;
            outcomes.push('stale');
          }
        }
        return outcomes;
      };
      const [olderOut, newerOut] = await Promise.all([writer(older), writer(newer)]);
      if (round % 2 === 1) expect(olderOut).toEqual(['stale', 'stale', 'stale', 'stale']);
      staleSeen += newerOut.filter((o) => o === 'stale').length;
      const [row] = await h.rows('SELECT state, last_fence_token FROM race');
      // The newer leader's plain updates always land: its write is on top, with its epoch.
      expect(row).toEqual({ state: `by ${newer.term}`, last_fence_token: newer.term });
    }
    expect(staleSeen).toBe(0); // the newer epoch is never refused
  });
});
