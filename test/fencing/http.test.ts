/**
 * HTTP fencing on real servers: node:http, Express and Fastify in front of PostgreSQL, MySQL and
 * SQLite. The guard's check and the handler's write share one transaction; a stale token gets a
 * 409 problem and writes nothing; bad input gets a clear 400/428 problem and writes nothing;
 * leaders of adjacent terms racing on one row never leave the lower term's write on top.
 */
import { Registry } from 'prom-client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { StaleTermError } from '../../src/core/index.js';
import { FENCING_PROBLEMS, fencedFetch, formatFencingHeader, httpFence, runFenced } from '../../src/fencing/index.js';
import { collectMetrics } from '../../src/observe/index.js';
import { createAppTables, databases, frameworks, issue, send, startService } from './http-harness.js';
import type { AnyDb, Service } from './http-harness.js';

const GROUP = 'orders';
const header = (term: number | string, group = GROUP): Record<string, string> => ({ 'Fencing-Token': `${group}#${term}` });

describe.each(Object.keys(databases))('HTTP fencing guard on %s', (dbName) => {
  let db: AnyDb;
  const registry = new Registry();
  let stopMetrics: () => void = () => {};
  beforeAll(async () => {
    db = await databases[dbName]!();
    await createAppTables(db);
    await issue(db.store, GROUP, 40);
    stopMetrics = collectMetrics({}, { registry });
  });
  afterAll(async () => {
    stopMetrics();
    await db?.close();
  });
  const rejections = async (side: 'guard' | 'writer'): Promise<number> => {
    const m = new RegExp(`tenure_fenced_rejections_total\\{lease="${GROUP}",path="http",side="${side}"\\} (\\d+)`).exec(await registry.metrics());
    return m ? Number(m[1]) : 0;
  };
  const item = async (id: number): Promise<{ value: string; term: number } | undefined> => {
    const [row] = await db.rows(`SELECT value, term FROM items WHERE id = ${id}`);
    return row ? { value: String(row.value), term: Number(row.term) } : undefined;
  };
  const fenceTerm = async (): Promise<number | undefined> => {
    const [row] = await db.rows(`SELECT term FROM tenure_http_fences WHERE name = ${db.dialect.placeholder(1)}`, [GROUP]);
    return row ? Number(row.term) : undefined;
  };
  const writeCount = async (): Promise<number> => Number((await db.rows('SELECT count(*) AS n FROM writes'))[0]!.n);

  describe.each(frameworks)('through %s', (framework) => {
    let svc: Service;
    // Each framework gets its own item ids and terms, in increasing order across the suite.
    const base = { 'node:http': 0, express: 10, fastify: 20 }[framework];
    const id = 100 + base;
    beforeAll(async () => {
      svc = await startService(framework, db as never, GROUP);
    });
    afterAll(async () => {
      await svc?.close();
    });
    const put = (headers: Record<string, string | string[]>, value: string, itemId = id, route = 'items') =>
      send(`${svc.url}/${route}/${itemId}`, 'PUT', headers, JSON.stringify({ value }));

    it('applies a write whose term is current, refuses a lower one with 409 naming the group and terms, and writes nothing for it', async () => {
      const t = base + 3;
      const ok = await put(header(t), 'first');
      expect(ok.status, ok.text).toBe(200);
      expect(ok.json()).toEqual({ id, term: t });
      expect(await item(id)).toEqual({ value: 'first', term: t });
      // Same term again: still accepted (one leader makes many writes).
      expect((await put(header(t), 'second')).status).toBe(200);
      const newer = await put(header(t + 1), 'third');
      expect(newer.status).toBe(200);
      const before = await writeCount();
      const guardRejections = await rejections('guard');
      const stale = await put(header(t), 'zombie');
      expect(stale.status).toBe(409);
      expect(stale.contentType).toMatch(/^application\/problem\+json(;|$)/);
      expect(stale.json()).toMatchObject({ type: FENCING_PROBLEMS.stale, status: 409, title: 'Stale fencing token', group: GROUP, termReceived: t, highestAccepted: t + 1 });
      expect(String(stale.json().detail)).toMatch(/stale/);
      expect(await item(id)).toEqual({ value: 'third', term: t + 1 });
      expect(await writeCount()).toBe(before);
      expect(await fenceTerm()).toBe(t + 1);
      expect(await rejections('guard')).toBe(guardRejections + 1);
    });

    it('refuses bad input with a clear 400/428 problem and writes nothing', async () => {
      const t = base + 4;
      const before = await writeCount();
      const fenceBefore = await fenceTerm();
      const cases: [string, Record<string, string | string[]>, number, string, RegExp][] = [
        ['missing', {}, 428, FENCING_PROBLEMS.required, /send the header Fencing-Token/],
        ['garbled', { 'Fencing-Token': 'not a token' }, 400, FENCING_PROBLEMS.malformed, /GROUP#TERM/],
        ['no group', { 'Fencing-Token': '#5' }, 400, FENCING_PROBLEMS.malformed, /GROUP#TERM/],
        ['term -1', header(-1), 400, FENCING_PROBLEMS.malformed, /digits only/],
        ['term 0', header(0), 400, FENCING_PROBLEMS.malformed, /1\.\.9007199254740991/],
        ['term 1.5', header('1.5'), 400, FENCING_PROBLEMS.malformed, /digits only/],
        ['term 2^63', header('9223372036854775808'), 400, FENCING_PROBLEMS.malformed, /1\.\.9007199254740991/],
        ['term 2^53', header('9007199254740992'), 400, FENCING_PROBLEMS.malformed, /1\.\.9007199254740991/],
        ['leading zero', header('07'), 400, FENCING_PROBLEMS.malformed, /leading zeros/],
        ['bad escape', { 'Fencing-Token': `ord%E9rs#${t}` }, 400, FENCING_PROBLEMS.malformed, /percent-encoded/],
        ['another group', header(t, 'billing'), 400, FENCING_PROBLEMS.wrongGroup, /group "billing"; this route is fenced by group "orders"/],
        ['a group differing in case', header(t, 'Orders'), 400, FENCING_PROBLEMS.wrongGroup, /another|fenced by group/],
        ['huge', { 'Fencing-Token': `${'o'.repeat(8000)}#${t}` }, 400, FENCING_PROBLEMS.malformed, /at most 2417 allowed/],
        ['repeated', { 'Fencing-Token': [`${GROUP}#${t}`, `${GROUP}#${t}`] }, 400, FENCING_PROBLEMS.malformed, /came 2 times/],
        ['repeated, differing', { 'Fencing-Token': [`${GROUP}#${t}`, `${GROUP}#${t + 100}`] }, 400, FENCING_PROBLEMS.malformed, /came 2 times/],
        ['never issued', header(999), 400, FENCING_PROBLEMS.unissued, /term 999 was never issued for group orders \(latest 40\)/],
      ];
      for (const [what, headers, status, type, detail] of cases) {
        const res = await put(headers, `bad: ${what}`);
        expect(res.status, `${what}: ${res.text}`).toBe(status);
        expect(res.contentType, what).toMatch(/^application\/problem\+json(;|$)/);
        const body = res.json();
        expect(body, what).toMatchObject({ type, status, group: GROUP });
        expect(typeof body.title, what).toBe('string');
        expect(String(body.detail), what).toMatch(detail);
      }
      // A header beyond node's own limit (16 KiB) is refused by node:http itself, before any handler.
      expect((await put({ 'Fencing-Token': `${'o'.repeat(20_000)}#${t}` }, 'bad: over node limit').catch(() => ({ status: 431 }))).status).toBe(431);
      expect(await writeCount()).toBe(before);
      expect(await fenceTerm()).toBe(fenceBefore);
      expect(Number((await db.rows(`SELECT count(*) AS n FROM items WHERE value LIKE 'bad:%'`))[0]!.n)).toBe(0);
      // A route that does not require the token runs without one, unfenced, and is not refused.
      const optional = await put({}, 'free', id, 'optional');
      expect(optional.status).toBe(200);
      expect(optional.json()).toEqual({ unfenced: true });
    });

    it("passes any other error a handler throws on to the framework: a 500, not a problem", async () => {
      const res = await send(`${svc.url}/boom`, 'GET', {});
      expect(res.status).toBe(500);
      expect(res.contentType).not.toMatch(/problem/);
    });

    it('fencedFetch sends the context token; a 409 naming a higher term throws StaleTermError and is reported by the writer', async () => {
      const t = base + 6;
      const ok = await runFenced({ token: { lease: GROUP, term: t } }, () =>
        fencedFetch(`${svc.url}/items/${id + 1}`, { method: 'PUT', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ value: 'via fetch' }) }),
      );
      expect(ok.status).toBe(200);
      expect(await ok.json()).toEqual({ id: id + 1, term: t });
      expect((await put(header(t + 1), 'newer', id + 1)).status).toBe(200);
      const writer = await rejections('writer');
      const err = await runFenced({ token: { lease: GROUP, term: t } }, () =>
        fencedFetch(`${svc.url}/items/${id + 1}`, { method: 'PUT', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ value: 'late' }) }),
      ).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(StaleTermError);
      expect(err).toMatchObject({ lease: GROUP, term: t, currentTerm: t + 1 });
      expect(await rejections('writer')).toBe(writer + 1);
      expect(await item(id + 1)).toEqual({ value: 'newer', term: t + 1 });
    });
  });
});

describe.each(Object.keys(databases))('the HTTP guard on %s, used by hand', (dbName) => {
  let db: AnyDb;
  beforeAll(async () => {
    db = await databases[dbName]!();
  });
  afterAll(async () => {
    await db?.close();
  });

  it("refuses a pool or a connection outside a transaction, and begin() inlines an odd group name safely (PostgreSQL's one round trip)", async () => {
    const group = `o'd\\x"; DROP TABLE tenure_leases; --`;
    await issue(db.store, group, 2);
    const fence = httpFence({ dialect: db.dialect as never, group });
    await fence.ensureTable(db.pool as never);
    const admitted = fence.admit({ rawHeaders: ['Fencing-Token', formatFencingHeader({ lease: group, term: 2 })] });
    if (!('guard' in admitted) || !admitted.guard) throw new Error(`not admitted: ${JSON.stringify(admitted)}`);
    const guard = admitted.guard;
    if (db.name !== 'sqlite') await expect(guard.check(db.pool as never)).rejects.toThrow(/got a pool: a check in another transaction than the write's is not fencing/);
    else await expect(guard.check(db.pool as never)).rejects.toThrow(/not in a transaction/);
    // Twice: the first records the term (the raise path), the second is the steady state (BEGIN and the shared read together).
    for (let i = 0; i < 2; i++) await db.inBegunTx((tx) => guard.begin(tx as never), async () => undefined);
    const rows = await db.rows(`SELECT name, term FROM tenure_http_fences`);
    expect(rows.map((r) => ({ name: Buffer.isBuffer(r.name) ? r.name.toString('utf8') : r.name, term: Number(r.term) }))).toEqual([{ name: group, term: 2 }]);
    expect((await db.rows('SELECT count(*) AS n FROM tenure_leases')).length).toBe(1);
    // A lower term through begin() is refused in the steady state too.
    const old = fence.admit({ rawHeaders: ['Fencing-Token', formatFencingHeader({ lease: group, term: 1 })] });
    const oldGuard = 'guard' in old ? old.guard : null;
    await expect(db.inBegunTx((tx) => oldGuard!.begin(tx as never), async () => undefined)).rejects.toBeInstanceOf(StaleTermError);
    if (db.name === 'postgres') {
      // begin() prepares its check once per connection; a session that lost it (DISCARD ALL, a
      // pooler's other session) gets it prepared again, and the check still holds.
      const c = await (db.pool as unknown as { connect(): Promise<{ query(sql: string): Promise<unknown>; release(): void }> }).connect();
      try {
        await guard.begin(c as never);
        await c.query('COMMIT');
        await c.query('DEALLOCATE ALL');
        await guard.begin(c as never);
        await c.query('COMMIT');
        await c.query('DISCARD ALL');
        await expect(oldGuard!.begin(c as never)).rejects.toBeInstanceOf(StaleTermError);
        await c.query('ROLLBACK');
      } finally {
        c.release();
      }
    }
  });
});
