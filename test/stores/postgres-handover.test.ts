/**
 * PostgreSQL hand-over on release: a candidate that waits on push keeps a reservation (refreshed
 * by its own lost acquires), and the holder's release gives it the lease in the same statement
 * (next term, the reservation's expiry), which the waiter then claims with no statement when the
 * NOTIFY names it. These tests check outcomes (who holds, which term, which statements were sent),
 * never how fast.
 */
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import pg from 'pg';
import { InvalidArgumentError, LeaderElector } from '../../src/index.js';
import { openStore, parseStoreUrl } from '../../src/open.js';
import type { Lease } from '../../src/core/index.js';
import { PostgresStore } from '../../src/stores/postgres/index.js';
import { buildSql } from '../../src/stores/postgres/sql.js';
import { createPostgresDatabase } from './sql-servers.js';
import type { TestDatabase } from './sql-servers.js';
import { sleep, waitFor } from './restart-scenario.js';

let db: TestDatabase;
let admin: pg.Pool;
const stores: PostgresStore[] = [];
const pools: pg.Pool[] = [];
let seq = 0;

/** A store on its own pool, counting the connections it checks out (one per statement it sends). */
function open(options: { handOver?: boolean } = {}): { store: PostgresStore; checkouts: () => number } {
  const pool = new pg.Pool({ connectionString: db.url, max: 2 });
  pool.on('error', () => {});
  let n = 0;
  pool.on('acquire', () => n++);
  pools.push(pool);
  const store = new PostgresStore({ pool, tablePrefix: 'ho_', ...options });
  stores.push(store);
  return { store, checkouts: () => n };
}

/** Watch `name`, recording every holder pushed as `owner@term` (or null); resolves once LISTEN is up. */
async function record(s: PostgresStore, name: string): Promise<{ seen: (string | null)[]; stop: () => void }> {
  const seen: (string | null)[] = [];
  const stop = s.watch(name, (lease: Lease | null) => seen.push(lease ? `${lease.owner}@${lease.term}` : null));
  // The watch reads the name once LISTEN is in place; a marker row tells when that has happened.
  const probe = `${name}.probe`;
  const probeSeen: string[] = [];
  const stopProbe = s.watch(probe, (l) => void (l && probeSeen.push(l.owner)));
  const { store: other } = open();
  for (let i = 0; probeSeen.length === 0; i++) {
    if (i > 100) throw new Error('LISTEN did not come up');
    await other.acquire(probe, `probe~${i}`, 200);
    await sleep(30);
  }
  stopProbe();
  return { seen, stop };
}

async function waiters(name: string): Promise<string[]> {
  const r = await admin.query('SELECT owner FROM ho_waiters WHERE name = $1 ORDER BY owner', [name]);
  return r.rows.map((row: { owner: string }) => row.owner);
}

async function row(name: string): Promise<{ owner: string | null; term: string }> {
  return (await admin.query('SELECT owner, term FROM ho_leases WHERE name = $1', [name])).rows[0];
}

const unique = (what: string): string => `${what}-${++seq}`;

beforeAll(async () => {
  db = await createPostgresDatabase();
  admin = new pg.Pool({ connectionString: db.url, max: 2 });
  admin.on('error', () => {});
});
afterEach(async () => {
  await Promise.all(stores.splice(0).map((s) => s.close()));
  await Promise.all(pools.splice(0).map((p) => p.end()));
});
afterAll(async () => {
  await admin?.end();
  await db?.drop();
});

describe('PostgresStore hand-over on release', () => {
  it('gives the lease to the waiting candidate in the release statement: next term, no free moment, claimed with no statement', async () => {
    const name = unique('handover');
    const { store: a } = open();
    const { store: b, checkouts: bSent } = open();
    const { store: c } = open();
    const wa = await record(a, name);
    expect(await a.acquire(name, 'a~1', 2000)).toMatchObject({ acquired: true, lease: { term: 1 } });
    const wb = await record(b, name);
    const wc = await record(c, name);
    await waitFor(() => wc.seen.includes('a~1@1'), 3000, 'c sees a');
    expect(await b.acquire(name, 'b~1', 2000, { role: 'b' })).toMatchObject({ acquired: false, lease: { owner: 'a~1' } });
    expect(await waiters(name)).toEqual(['b~1']);

    expect(await a.release(name, 'a~1', 1)).toBe(true);
    expect(await row(name)).toEqual({ owner: 'b~1', term: '2' });
    expect(await waiters(name)).toEqual([]);
    expect(wa.seen).toEqual(['a~1@1', 'b~1@2']); // the releaser's own watch is told at once
    await waitFor(() => wb.seen.includes('b~1@2') && wc.seen.includes('b~1@2'), 3000, 'hand-over pushed');
    expect(wc.seen).not.toContain(null); // never free: nobody else could take it meanwhile

    const before = bSent();
    const claimed = await b.acquire(name, 'b~1', 2000, { role: 'b' });
    expect(claimed).toMatchObject({ acquired: true, lease: { owner: 'b~1', term: 2, meta: { role: 'b' }, ttlMs: 2000 } });
    expect(claimed.lease.remainingMs).toBeGreaterThanOrEqual(2000);
    expect(claimed.noTransferHint).toBe(true); // handed over only with no hint held: none to read
    expect(bSent()).toBe(before); // claimed without a statement
    expect(await b.renew(name, 'b~1', 2, 2000)).toMatchObject({ renewed: true });
    expect(await c.acquire(name, 'c~1', 2000)).toMatchObject({ acquired: false, lease: { owner: 'b~1', term: 2 } });
    // A second acquire is a statement again (one claim per hand-over): it extends b's own lease.
    expect(await b.acquire(name, 'b~1', 2000, { role: 'b' })).toMatchObject({ acquired: true, lease: { term: 2 } });
    expect(bSent()).toBe(before + 2);
    for (const w of [wa, wb, wc]) w.stop();
  });

  it('frees the lease instead while a hand-over hint NAME/transfer-to is held, so the named node can take it; a lapsed or released hint no longer stops a hand-over', async () => {
    const name = unique('hinted');
    const { store: a } = open();
    const { store: b } = open();
    const wb = await record(b, name);
    expect(await a.acquire(name, 'a~1', 2000)).toMatchObject({ acquired: true, lease: { term: 1 } });
    await waitFor(() => wb.seen.includes('a~1@1'), 3000, 'b sees a');
    expect(await b.acquire(name, 'b~1', 2000)).toMatchObject({ acquired: false });
    expect(await waiters(name)).toEqual(['b~1']);
    // The leader names another node (as transferTo does) and releases.
    expect(await a.acquire(`${name}/transfer-to`, 'a~1', 2000, { to: 'c' })).toMatchObject({ acquired: true });
    expect(await a.release(name, 'a~1', 1)).toBe(true);
    expect(await row(name)).toEqual({ owner: null, term: '1' }); // freed, not handed to b
    // Whoever wins it must read the hint: an acquire through the server says nothing of it.
    await waitFor(() => wb.seen.includes(null), 3000, 'release pushed');
    const won = await b.acquire(name, 'b~1', 2000);
    expect(won).toMatchObject({ acquired: true, lease: { owner: 'b~1', term: 2 } });
    expect(won.noTransferHint).toBeUndefined();
    // The hint released: the next release hands over again.
    expect(await a.release(`${name}/transfer-to`, 'a~1', 1)).toBe(true);
    const { store: c } = open();
    const wc = await record(c, name);
    expect(await c.acquire(name, 'c~1', 2000)).toMatchObject({ acquired: false });
    expect(await b.release(name, 'b~1', 2)).toBe(true);
    expect(await row(name)).toEqual({ owner: 'c~1', term: '3' });
    await waitFor(() => wc.seen.includes('c~1@3'), 3000, 'hand-over pushed');
    expect(await c.acquire(name, 'c~1', 2000)).toMatchObject({ acquired: true, lease: { term: 3 }, noTransferHint: true });
    wb.stop();
    wc.stop();
  });

  it('frees the lease when nobody waits, when the waiter stopped watching, or when its reservation is about to lapse', async () => {
    const { store: a } = open();
    const { store: b } = open();

    // Nobody waits (b lost an acquire without watching: no reservation).
    const n1 = unique('nobody');
    await a.acquire(n1, 'a~1', 2000);
    expect(await b.acquire(n1, 'b~1', 2000)).toMatchObject({ acquired: false });
    expect(await waiters(n1)).toEqual([]);
    expect(await a.release(n1, 'a~1', 1)).toBe(true);
    expect(await b.read(n1)).toBeNull();
    expect(await row(n1)).toEqual({ owner: null, term: '1' });

    // The waiter stopped watching: it left the waiting room.
    const n2 = unique('left');
    await a.acquire(n2, 'a~1', 2000);
    const wb = await record(b, n2);
    await b.acquire(n2, 'b~1', 2000);
    expect(await waiters(n2)).toEqual(['b~1']);
    wb.stop();
    await waitFor(async () => (await waiters(n2)).length === 0, 3000, 'b leaves the waiting room');
    expect(await a.release(n2, 'a~1', 1)).toBe(true);
    expect(await b.read(n2)).toBeNull();

    // The waiter's reservation (TTL 300 ms + 300 ms) has less than its TTL + 50 ms left.
    const n3 = unique('lapsing');
    await a.acquire(n3, 'a~1', 2000);
    const wb3 = await record(b, n3);
    await b.acquire(n3, 'b~1', 300);
    expect(await waiters(n3)).toEqual(['b~1']);
    await sleep(300);
    expect(await a.release(n3, 'a~1', 1)).toBe(true);
    expect(await b.read(n3)).toBeNull();
    wb3.stop();
  });

  it('hands over to the most recently refreshed waiter, never back to the releaser', async () => {
    const name = unique('freshest');
    const { store: a } = open();
    const { store: b } = open();
    const { store: c } = open();
    const wa = await record(a, name);
    const wb = await record(b, name);
    const wc = await record(c, name);
    await a.acquire(name, 'a~1', 2000);
    await b.acquire(name, 'b~1', 2000);
    await sleep(20);
    await c.acquire(name, 'c~1', 2000);
    // a itself once waited for this name (a stale reservation of the releaser's own owner).
    await admin.query("INSERT INTO ho_waiters (name, owner, ttl_ms, meta, expires_at, ticket) VALUES ($1, 'a~1', 2000, '{}', now() + interval '1 hour', 0)", [name]);
    expect(await waiters(name)).toEqual(['a~1', 'b~1', 'c~1']);
    expect(await a.release(name, 'a~1', 1)).toBe(true);
    expect(await row(name)).toEqual({ owner: 'c~1', term: '2' });
    expect(await waiters(name)).toEqual(['a~1', 'b~1']);
    // b still waits: when c releases, b gets it (a's reservation, fresher than any, is gone by then).
    await admin.query("DELETE FROM ho_waiters WHERE name = $1 AND owner = 'a~1'", [name]);
    await waitFor(() => wc.seen.includes('c~1@2'), 3000, 'c told');
    expect(await c.acquire(name, 'c~1', 2000)).toMatchObject({ acquired: true, lease: { term: 2 } });
    expect(await c.release(name, 'c~1', 2)).toBe(true);
    expect(await row(name)).toEqual({ owner: 'b~1', term: '3' });
    for (const w of [wa, wb, wc]) w.stop();
  });

  it('claims through the server when the claim does not match the reservation or comes too late, and still leads with the handed term', async () => {
    const { store: a } = open();
    const { store: b, checkouts: bSent } = open();

    // Another meta than the reservation's: the acquire statement decides (it extends b's own lease).
    const n1 = unique('meta');
    await a.acquire(n1, 'a~1', 2000);
    const w1 = await record(b, n1);
    await b.acquire(n1, 'b~1', 2000, { v: '1' });
    await a.release(n1, 'a~1', 1);
    await waitFor(() => w1.seen.includes('b~1@2'), 3000, 'hand-over pushed');
    let before = bSent();
    expect(await b.acquire(n1, 'b~1', 2000, { v: '2' })).toMatchObject({ acquired: true, lease: { term: 2, meta: { v: '2' } } });
    expect(bSent()).toBe(before + 1);
    w1.stop();

    // Too late: the reservation (TTL 1 s + 1 s from b's acquire) no longer has the TTL + 50 ms left.
    const n2 = unique('late');
    await a.acquire(n2, 'a~1', 2000);
    const w2 = await record(b, n2);
    const reservedAt = performance.now();
    await b.acquire(n2, 'b~1', 1000);
    await a.release(n2, 'a~1', 1);
    expect(await row(n2)).toEqual({ owner: 'b~1', term: '2' });
    await waitFor(() => w2.seen.includes('b~1@2'), 3000, 'hand-over pushed');
    await sleep(1000 - (performance.now() - reservedAt));
    before = bSent();
    const late = await b.acquire(n2, 'b~1', 1000);
    expect(bSent()).toBe(before + 1);
    // Either the handed lease was still live (extended, term 2) or it had lapsed (taken anew, term 3).
    expect(late.acquired).toBe(true);
    expect([2, 3]).toContain(late.lease.term);
    w2.stop();
  });

  it('a store with handOver: false neither waits nor hands over', async () => {
    const name = unique('off');
    const { store: a } = open({ handOver: false });
    const { store: b } = open({ handOver: false });
    const { store: c } = open();
    const wb = await record(b, name);
    const wc = await record(c, name);
    await c.acquire(name, 'c~1', 2000);
    await b.acquire(name, 'b~1', 2000);
    expect(await waiters(name)).toEqual([]);
    expect(await c.release(name, 'c~1', 1)).toBe(true);
    expect(await row(name)).toEqual({ owner: null, term: '1' });
    // And a store that does not hand over frees the lease even with a waiter in line.
    await a.acquire(name, 'a~1', 2000);
    await c.acquire(name, 'c~1', 2000);
    expect(await waiters(name)).toEqual(['c~1']);
    expect(await a.release(name, 'a~1', 2)).toBe(true);
    expect(await row(name)).toEqual({ owner: null, term: '2' });
    wb.stop();
    wc.stop();
  });

  it('commits a hand-over as the server is configured (it issues a term), and only a release that frees the lease without waiting for the WAL flush', async () => {
    const { store: a } = open();
    const { store: b } = open();
    const release = buildSql('ho_').release;
    /** Run the store's release statement in a transaction, and read the commit setting it leaves for that transaction. */
    const releaseIn = async (name: string, owner: string, term: number): Promise<{ handedTo: string | null; syncCommit: string }> => {
      const c = await admin.connect();
      try {
        await c.query('BEGIN');
        const r = await c.query(release, [name, owner, term, true]);
        const sync = await c.query('SHOW synchronous_commit');
        await c.query('ROLLBACK');
        return { handedTo: r.rows[0].owner, syncCommit: sync.rows[0].synchronous_commit };
      } finally {
        c.release();
      }
    };
    const name = unique('durable');
    await a.acquire(name, 'a~1', 2000);
    expect(await releaseIn(name, 'a~1', 1)).toEqual({ handedTo: null, syncCommit: 'off' });
    const wb = await record(b, name);
    await b.acquire(name, 'b~1', 2000);
    expect(await releaseIn(name, 'a~1', 1)).toEqual({ handedTo: 'b~1', syncCommit: 'on' });
    wb.stop();
  });

  it('a waiter that stops watching frees a lease handed to it that it never took up, and keeps one it claimed', async () => {
    const { store: a } = open();
    const { store: b } = open();
    const { store: c } = open();

    // Handed to b, and b stops watching before it claims: the lease is freed, and the next holder gets a later term.
    const n1 = unique('unclaimed');
    await a.acquire(n1, 'a~1', 2000);
    const w1 = await record(b, n1);
    await b.acquire(n1, 'b~1', 2000);
    await a.release(n1, 'a~1', 1);
    expect(await row(n1)).toEqual({ owner: 'b~1', term: '2' });
    w1.stop();
    await waitFor(async () => (await row(n1)).owner === null, 3000, 'the unclaimed lease freed');
    expect(await row(n1)).toEqual({ owner: null, term: '2' });
    expect(await c.acquire(n1, 'c~1', 2000)).toMatchObject({ acquired: true, lease: { term: 3 } });

    // Freed only by the ticket of the hand-over: a lease of b's that carries no ticket of b's stays.
    const n0 = unique('other-ticket');
    await a.acquire(n0, 'a~1', 2000);
    const w0 = await record(b, n0);
    await b.acquire(n0, 'b~1', 2000);
    await admin.query("UPDATE ho_leases SET owner = 'b~1', term = term + 1, handed = -1 WHERE name = $1", [n0]);
    w0.stop();
    await waitFor(async () => (await waiters(n0)).length === 0, 3000, 'b leaves the waiting room');
    expect(await row(n0)).toEqual({ owner: 'b~1', term: '2' });

    // Claimed, then the watch stops (as a leader that closes its watch while still leading): b keeps it.
    const n2 = unique('claimed');
    await a.acquire(n2, 'a~1', 2000);
    const w2 = await record(b, n2);
    await b.acquire(n2, 'b~1', 2000);
    await a.release(n2, 'a~1', 1);
    await waitFor(() => w2.seen.includes('b~1@2'), 3000, 'hand-over pushed');
    expect(await b.acquire(n2, 'b~1', 2000)).toMatchObject({ acquired: true, lease: { term: 2 } });
    w2.stop();
    await sleep(200);
    expect(await row(n2)).toEqual({ owner: 'b~1', term: '2' });
    expect(await b.renew(n2, 'b~1', 2, 2000)).toMatchObject({ renewed: true });
  });

  it('takes handover=on|off from a postgres:// URL, and refuses it elsewhere or with another value', async () => {
    expect(parseStoreUrl('postgres://u@h:5432/db?prefix=p_&handover=off&sslmode=disable')).toEqual({
      kind: 'postgres',
      url: 'postgres://u@h:5432/db?sslmode=disable',
      tablePrefix: 'p_',
      handOver: false,
    });
    expect(parseStoreUrl('postgres://u@h/db?handover=on')).toMatchObject({ handOver: true });
    expect(parseStoreUrl('postgres://u@h/db')).not.toHaveProperty('handOver');
    expect(() => parseStoreUrl('postgres://u@h/db?handover=yes')).toThrow(InvalidArgumentError);
    expect(() => parseStoreUrl('mysql://u@h/db?handover=off')).toThrow(/postgres:\/\/ stores only/);
    // Opened from such a URL, a waiting candidate keeps no reservation.
    const url = new URL(db.url);
    url.searchParams.set('prefix', 'ho_');
    url.searchParams.set('handover', 'off');
    const off = await openStore(url.toString());
    const { store: a } = open();
    const name = unique('url-off');
    await a.acquire(name, 'a~1', 2000);
    const stop = off.watch!(name, () => {});
    expect(await off.acquire(name, 'b~1', 2000)).toMatchObject({ acquired: false });
    expect(await waiters(name)).toEqual([]);
    stop();
    await off.close();
  });

  it('close() leaves the waiting room', async () => {
    const name = unique('close');
    const { store: a } = open();
    const { store: b } = open();
    await a.acquire(name, 'a~1', 2000);
    await record(b, name);
    await b.acquire(name, 'b~1', 2000);
    expect(await waiters(name)).toEqual(['b~1']);
    await b.close();
    expect(await waiters(name)).toEqual([]);
    expect(await a.release(name, 'a~1', 1)).toBe(true);
    expect(await row(name)).toEqual({ owner: null, term: '1' });
  });
});

describe('LeaderElector on PostgreSQL with hand-over', () => {
  it('stop() hands leadership to the waiting elector: next term, at no moment without a leader', async () => {
    const group = unique('elector');
    const { store: a } = open();
    const { store: b } = open();
    const { store: c } = open();
    const wc = await record(c, group);
    const ea = new LeaderElector({ store: a, group, id: 'a', ttlMs: 2000 });
    const eb = new LeaderElector({ store: b, group, id: 'b', ttlMs: 2000 });
    const elected: { node: string; term: number }[] = [];
    ea.on('elected', (e) => elected.push({ node: 'a', term: e.term }));
    eb.on('elected', (e) => elected.push({ node: 'b', term: e.term }));
    ea.start();
    await waitFor(() => elected.length === 1, 5000, 'a elected');
    eb.start();
    await waitFor(async () => (await waiters(group)).length === 1, 5000, 'b waits in the waiting room');
    await ea.stop();
    await waitFor(() => elected.length === 2, 5000, 'b elected');
    expect(elected).toEqual([{ node: 'a', term: 1 }, { node: 'b', term: 2 }]);
    expect(wc.seen).not.toContain(null);
    expect(await row(group)).toMatchObject({ term: '2' });
    await eb.stop();
    wc.stop();
  });
});
