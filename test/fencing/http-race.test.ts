/**
 * HTTP fencing under contention and with a real elector: leaders of adjacent terms racing on one
 * row never leave the lower term's write on top (PostgreSQL, MySQL, SQLite), and a leader whose
 * fenced request is refused steps down at once.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { StaleTermError } from '../../src/core/index.js';
import { LeaderElector } from '../../src/election/index.js';
import { fencedFetch } from '../../src/fencing/index.js';
import { createAppTables, databases, issue, send, startService } from './http-harness.js';
import type { AnyDb, RawResponse, Service } from './http-harness.js';

const GROUP = 'ledger';

describe.each(Object.keys(databases))('racing leaders of adjacent terms over HTTP on %s', (dbName) => {
  let db: AnyDb;
  let svc: Service;
  beforeAll(async () => {
    db = await databases[dbName]!();
    await createAppTables(db);
    await issue(db.store, GROUP, 12);
    svc = await startService('node:http', db as never, GROUP);
  });
  afterAll(async () => {
    await svc?.close();
    await db?.close();
  });

  it('never leaves a lower term on top of a higher one, and applies writes in term order', { timeout: 60_000 }, async () => {
    const put = (term: number, value: string): Promise<RawResponse> => send(`${svc.url}/items/1`, 'PUT', { 'Fencing-Token': `${GROUP}#${term}` }, JSON.stringify({ value }));
    const outcomes: Record<number, number> = {};
    for (let old = 2; old <= 10; old += 2) {
      const next = old + 1;
      expect((await put(old, `settle ${old}`)).status).toBe(200);
      // 30 requests of each term, interleaved, all in flight at once.
      const sent = Array.from({ length: 60 }, (_, i) => (i % 2 === 0 ? old : next));
      const answers = await Promise.all(sent.map((term, i) => put(term, `t${term}-${i}`).then((r) => ({ term, r }))));
      for (const { term, r } of answers) {
        outcomes[r.status] = (outcomes[r.status] ?? 0) + 1;
        if (term === next) expect([200, 503], r.text).toContain(r.status); // 503: a contended first record of the new term; nothing written
        else expect([200, 409, 503], r.text).toContain(r.status);
        if (r.status === 409) expect(r.json()).toMatchObject({ group: GROUP, termReceived: old, highestAccepted: next });
      }
      expect(answers.some(({ term, r }) => term === next && r.status === 200)).toBe(true);
      const [row] = await db.rows('SELECT value, term FROM items WHERE id = 1');
      expect(Number(row!.term)).toBe(next);
    }
    // Applied writes in the order they were made: the terms never go down.
    const writes = await db.rows('SELECT seq, term, value FROM writes WHERE item = 1 ORDER BY seq');
    for (let i = 1; i < writes.length; i++) {
      if (Number(writes[i]!.term) < Number(writes[i - 1]!.term)) {
        throw new Error(`a write of term ${String(writes[i]!.term)} (${String(writes[i]!.value)}) was applied after one of term ${String(writes[i - 1]!.term)}`);
      }
    }
    // The row holds the last applied write.
    const [row] = await db.rows('SELECT value, term FROM items WHERE id = 1');
    expect(String(row!.value)).toBe(String(writes.at(-1)!.value));
    expect(outcomes[200]).toBeGreaterThan(150);
    console.info(`http race on ${dbName}: ${JSON.stringify(outcomes)}`);
  });

  it("a new term's first writes all at once, on a group not yet in the fence table: each applied, or refused as busy (503) with nothing written", { timeout: 60_000 }, async () => {
    const group = 'fresh-group';
    await issue(db.store, group, 3);
    const fresh = await startService('node:http', db as never, group);
    try {
      const before = Number((await db.rows('SELECT count(*) AS n FROM writes WHERE item = 2')).at(0)!.n);
      const answers = await Promise.all(Array.from({ length: 30 }, (_, i) => send(`${fresh.url}/items/2`, 'PUT', { 'Fencing-Token': `${group}#3` }, JSON.stringify({ value: `first-${i}` }))));
      const ok = answers.filter((r) => r.status === 200).length;
      for (const r of answers) {
        expect([200, 503], r.text).toContain(r.status);
        if (r.status === 503) expect(r.json()).toMatchObject({ type: 'urn:tenure:problem:fence-busy', status: 503, group });
      }
      expect(ok).toBeGreaterThan(0);
      expect(Number((await db.rows('SELECT count(*) AS n FROM writes WHERE item = 2')).at(0)!.n)).toBe(before + ok);
      const [row] = await db.rows(`SELECT term FROM tenure_http_fences WHERE name = ${db.dialect.placeholder(1)}`, [group]);
      expect(Number(row!.term)).toBe(3);
      console.info(`first writes on ${dbName}: ${ok} applied, ${30 - ok} busy`);
    } finally {
      await fresh.close();
    }
  });
});

describe('a leader whose fenced HTTP write is refused steps down', () => {
  let db: AnyDb;
  let svc: Service;
  beforeAll(async () => {
    db = await databases.postgres!();
    await createAppTables(db);
    svc = await startService('express', db as never, GROUP);
  });
  afterAll(async () => {
    await svc?.close();
    await db?.close();
  });

  it('at once, with reason fenced, and its StaleTermError reaches the work', { timeout: 30_000 }, async () => {
    const elector = new LeaderElector({ store: db.store, group: GROUP, ttlMs: 5000 });
    const deposed = new Promise<{ term: number; reason: string }>((resolve) => elector.once('deposed', ({ term, reason }) => resolve({ term, reason })));
    const work = new Promise<{ first: number; late: unknown; term: number }>((resolve) => {
      void elector.runWhileLeader(async ({ term }) => {
        const body = (value: string) => ({ method: 'PUT', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ value }) });
        const first = (await fencedFetch(`${svc.url}/items/7`, body('leader'))).status;
        // A newer leader's write lands at the service (its term recorded by the guard, as its own request would).
        await db.exec(`UPDATE tenure_http_fences SET term = term + 1 WHERE name = '${GROUP}'`);
        const late = await fencedFetch(`${svc.url}/items/7`, body('deposed')).catch((e: unknown) => e);
        resolve({ first, late, term });
      });
    });
    const { first, late, term } = await work;
    expect(first).toBe(200);
    expect(late).toBeInstanceOf(StaleTermError);
    expect(late).toMatchObject({ lease: GROUP, term, currentTerm: term + 1 });
    expect(await deposed).toEqual({ term, reason: 'fenced' });
    expect(elector.isLeader).toBe(false);
    const [row] = await db.rows('SELECT value, term FROM items WHERE id = 7');
    expect(row).toEqual({ value: 'leader', term: String(term) });
    await elector.stop();
  });
});
