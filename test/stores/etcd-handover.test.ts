/**
 * Hand-over on release (issue 14): a tenure candidate that waits on a watch registers in the
 * name's waiting room, and the holder's release gives it the lease in the same txn (next term,
 * the waiter's own lease), which the waiter then claims with a keepalive. These tests check the
 * outcomes: who holds, with which term, on which lease; never how fast.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { LeaderElector } from '../../src/index.js';
import type { Lease } from '../../src/core/index.js';
import { EtcdStore } from '../../src/stores/etcd/index.js';
import { candidateKeys, startEtcd, unique, waitUntil } from './etcd-harness.js';
import type { EtcdCluster } from './etcd-harness.js';
import { etcdctl } from './etcdctl.js';

let cluster: EtcdCluster;
let admin: EtcdStore;
const stores: EtcdStore[] = [];

function store(): EtcdStore {
  const s = new EtcdStore({ hosts: cluster.hosts });
  stores.push(s);
  return s;
}

const candidates = (name: string): ReturnType<typeof candidateKeys> => candidateKeys(admin, name);

/** The waiting-room keys of a name (`\0tenure/wait/NAME\0<lease hex>`). */
async function waiters(name: string): Promise<string[]> {
  const res = await admin.client.getAll().prefix(`\u0000tenure/wait/${name}\u0000`).exec();
  return res.kvs.map((kv) => kv.key.toString().split('\u0000').pop()!);
}

async function counter(name: string): Promise<number> {
  return Number((await admin.client.get(`\u0000tenure/term/${name}`).string()) ?? 0);
}

/** Watch `name` on `s`, recording every holder the watch reports as `owner@term` (or null). */
function record(s: EtcdStore, name: string): { seen: (string | null)[]; stop: () => void } {
  const seen: (string | null)[] = [];
  const stop = s.watch(name, (lease: Lease | null) => seen.push(lease ? `${lease.owner}@${lease.term}` : null));
  return { seen, stop };
}

/** Two stores watching `name`: a holds it (term 1), b lost an acquire and waits in the waiting room. */
async function holderAndWaiter(name: string): Promise<{ a: EtcdStore; b: EtcdStore; wa: ReturnType<typeof record>; wb: ReturnType<typeof record> }> {
  const a = store();
  const b = store();
  const wa = record(a, name);
  await a.acquire(name, 'a~1', 2000);
  const wb = record(b, name);
  await b.acquire(name, 'b~1', 2000);
  await waitUntil(async () => (await waiters(name)).length === 1);
  return { a, b, wa, wb };
}

beforeAll(async () => {
  cluster = await startEtcd(1);
  admin = new EtcdStore({ hosts: cluster.hosts });
});
afterAll(async () => {
  for (const s of stores) await s.close().catch(() => {});
  await admin?.close();
  await cluster?.stop();
});

describe('EtcdStore hand-over on release', () => {
  it('gives the lease to the waiting candidate in the release txn: next term, its own lease, no free moment', async () => {
    const name = unique('handover');
    const a = store();
    const b = store();
    const c = store();
    const wa = record(a, name); // the holder watches (as LeaderElector does): it learns who waits
    expect(await a.acquire(name, 'a~1', 2000)).toMatchObject({ acquired: true, lease: { term: 1 } });
    const wb = record(b, name);
    const wc = record(c, name);
    expect(await b.acquire(name, 'b~1', 2000)).toMatchObject({ acquired: false, lease: { owner: 'a~1' } });
    await waitUntil(async () => (await waiters(name)).length === 1); // b waits in the waiting room
    const [bLease] = await waiters(name);
    await waitUntil(() => wc.seen.includes('a~1@1'));

    expect(await a.release(name, 'a~1', 1)).toBe(true);
    await waitUntil(() => wb.seen.includes('b~1@2') && wc.seen.includes('b~1@2'));
    // Nobody saw the name free: a release and the take-over were one step.
    expect(wc.seen).toEqual(['a~1@1', 'b~1@2']);
    const [holder, ...rest] = await candidates(name);
    expect(rest).toEqual([]);
    // noHint: the txn found no hand-over hint (NAME/transfer-to) held.
    expect(JSON.parse(holder!.value)).toMatchObject({ owner: 'b~1', term: 2, noHint: true });
    expect(holder).toMatchObject({ key: `${name}/${bLease}`, leaseHex: bLease }); // on b's own lease, named as Go names it
    expect(await waiters(name)).toEqual([]); // b left the waiting room in the same txn
    expect(await counter(name)).toBe(2);

    // b claims it: its acquire gets term 2 (the term the release issued), and it is b's to renew and release.
    // The claim says no hint was held, so an elector need not read one.
    expect(await b.acquire(name, 'b~1', 2000)).toMatchObject({ acquired: true, lease: { owner: 'b~1', term: 2 }, noTransferHint: true });
    expect(await c.acquire(name, 'c~1', 2000)).toMatchObject({ acquired: false, lease: { owner: 'b~1', term: 2 } });
    expect(await b.renew(name, 'b~1', 2, 2000)).toMatchObject({ renewed: true });
    expect(await a.release(name, 'a~1', 1)).toBe(false); // the old holder's retried release deletes nothing
    // c now waits; b's release hands over to c in turn.
    await waitUntil(async () => (await waiters(name)).length === 1);
    expect(await b.release(name, 'b~1', 2)).toBe(true);
    await waitUntil(() => wc.seen.includes('c~1@3'));
    expect(await c.acquire(name, 'c~1', 2000)).toMatchObject({ acquired: true, lease: { owner: 'c~1', term: 3 } });
    expect(await counter(name)).toBe(3);
    expect(wb.seen).toEqual(['a~1@1', 'b~1@2', 'c~1@3']);
    wa.stop();
    wb.stop();
    wc.stop();
  });

  it('hands over to a waiter the holder has not heard of: the plain release fails on the waiting room and reads it', async () => {
    const name = unique('unheard');
    const a = store();
    const b = store();
    const c = store();
    // a holds but does not watch, so it follows no waiting room: it learns of b only from its release.
    expect(await a.acquire(name, 'a~1', 2000)).toMatchObject({ acquired: true, lease: { term: 1 } });
    const wb = record(b, name);
    expect(await b.acquire(name, 'b~1', 2000)).toMatchObject({ acquired: false, lease: { owner: 'a~1' } });
    await waitUntil(async () => (await waiters(name)).length === 1);
    const wc = record(c, name);
    await waitUntil(() => wc.seen.includes('a~1@1'));

    expect(await a.release(name, 'a~1', 1)).toBe(true);
    await waitUntil(() => wb.seen.includes('b~1@2') && wc.seen.includes('b~1@2'));
    expect(wc.seen).toEqual(['a~1@1', 'b~1@2']); // nobody saw the name free
    expect(await waiters(name)).toEqual([]);
    expect(await counter(name)).toBe(2);
    expect(await b.acquire(name, 'b~1', 2000)).toMatchObject({ acquired: true, lease: { owner: 'b~1', term: 2 } });
    expect(await a.release(name, 'a~1', 1)).toBe(false);
    wb.stop();
    wc.stop();
  });

  it('never hands over while the hand-over hint NAME/transfer-to is held: a plain release, and the winner is told nothing of hints', async () => {
    const name = unique('hinted');
    // A hint older than the holder's key (an earlier leader's, still held), so the check that
    // the holder's key is the newest under NAME/ does not stop the hand-over: the hint check must.
    expect(await admin.acquire(`${name}/transfer-to`, 'x~1', 5000, { to: 'c' })).toMatchObject({ acquired: true });
    const { a, b, wa, wb } = await holderAndWaiter(name);
    await waitUntil(() => wa.seen.includes('a~1@1'));
    expect(await a.release(name, 'a~1', 1)).toBe(true);
    await waitUntil(() => wb.seen.includes(null));
    expect(wb.seen).toEqual(['a~1@1', null]); // the name was free: nothing handed over
    expect(await counter(name)).toBe(1);
    const won = await b.acquire(name, 'b~1', 2000);
    expect(won).toMatchObject({ acquired: true, lease: { owner: 'b~1', term: 2 } });
    expect(won.noTransferHint).toBeUndefined();
    wa.stop();
    wb.stop();
  });

  it('warms the hand-over txn once, a little after it first holds a name it watches, and writes nothing', async () => {
    const name = unique('warm');
    const a = store();
    const sent: { what: string; succeeded: boolean }[] = [];
    const txn = a.connection.txn.bind(a.connection);
    a.connection.txn = async (what, compare, success, failure) => {
      const res = await txn(what, compare, success, failure);
      sent.push({ what, succeeded: res.succeeded });
      return res;
    };
    const wa = record(a, name);
    expect(await a.acquire(name, 'a~1', 2000)).toMatchObject({ acquired: true });
    expect(await a.acquire(`${name}-2`, 'a~1', 2000)).toMatchObject({ acquired: true }); // not watched: no warm-up for it
    const revision = Number((await admin.client.get('x').exec()).header.revision);
    await waitUntil(() => sent.some((t) => t.what.startsWith('warm ')));
    await new Promise((r) => setTimeout(r, 400));
    expect(sent.filter((t) => t.what.startsWith('warm '))).toEqual([{ what: `warm ${name}`, succeeded: false }]);
    expect(Number((await admin.client.get('x').exec()).header.revision)).toBe(revision); // nothing written
    expect((await candidates(name)).map((c) => JSON.parse(c.value).owner)).toEqual(['a~1']);
    expect(await counter(name)).toBe(1);
    wa.stop();
  });

  it('a waiter that stops watching leaves the waiting room, and the release is a plain one', async () => {
    const name = unique('leave');
    const { a, b, wa, wb } = await holderAndWaiter(name);
    wb.stop();
    await waitUntil(async () => (await waiters(name)).length === 0);
    expect(await a.release(name, 'a~1', 1)).toBe(true);
    expect(await candidates(name)).toEqual([]);
    expect(await counter(name)).toBe(1);
    expect(await b.acquire(name, 'b~1', 2000)).toMatchObject({ acquired: true, lease: { term: 2 } });
    wa.stop();
  });

  it('never hands over past a Go candidate in line: etcdctl, queued behind the holder, leads next', async () => {
    const name = unique('line');
    const { a, b, wa, wb } = await holderAndWaiter(name);
    const ctl = etcdctl(cluster.hosts, ['elect', name, 'go']);
    await waitUntil(async () => (await candidates(name)).length === 2);
    expect(await a.release(name, 'a~1', 1)).toBe(true);
    await ctl.waitFor('go');
    const [holder, ...rest] = await candidates(name);
    expect(holder!.value).toBe('go');
    expect(rest).toEqual([]);
    expect(await b.acquire(name, 'b~1', 2000)).toMatchObject({ acquired: false, lease: { meta: { value: 'go' } } });
    await ctl.stop();
    await waitUntil(async () => (await b.acquire(name, 'b~1', 2000)).acquired);
    expect((await b.read(name))?.term).toBe(2);
    wa.stop();
    wb.stop();
  });

  it('a waiter handed the lease that never claims it lets it expire; the next candidate takes the next term', async () => {
    const name = unique('unclaimed');
    const a = store();
    const b = store();
    const c = store();
    const wa = record(a, name);
    await a.acquire(name, 'a~1', 1000);
    const wb = record(b, name); // b waits, but will never call acquire again
    await b.acquire(name, 'b~1', 1000);
    await waitUntil(async () => (await waiters(name)).length === 1);
    const wc = record(c, name);
    await waitUntil(() => wc.seen.includes('a~1@1'));
    expect(await a.release(name, 'a~1', 1)).toBe(true);
    await waitUntil(() => wc.seen.includes('b~1@2'));
    // Nobody keeps b's lease alive once it holds the name: etcd expires it, c's watch hears it.
    await waitUntil(() => wc.seen[wc.seen.length - 1] === null, 8000);
    expect(await c.acquire(name, 'c~1', 1000)).toMatchObject({ acquired: true, lease: { owner: 'c~1', term: 3 } });
    wa.stop();
    wb.stop();
    wc.stop();
  });
});

describe('LeaderElector over EtcdStore: the queued candidate takes over on release', () => {
  it('hands leadership on at each stop to a waiting elector, with a higher term each time', async () => {
    const group = unique('electors');
    const electors = ['n1', 'n2', 'n3'].map((id) => new LeaderElector({ store: store(), group, id, ttlMs: 2000 }));
    for (const e of electors) e.start();
    const terms: number[] = [];
    let running = electors;
    for (let round = 0; round < 2; round++) {
      await waitUntil(() => running.filter((e) => e.isLeader).length === 1);
      const leader = running.find((e) => e.isLeader)!;
      terms.push(leader.term!);
      // Every other elector waits in the waiting room before the leader goes.
      await waitUntil(async () => (await waiters(group)).length === running.length - 1);
      running = running.filter((e) => e !== leader);
      const next = Promise.race(running.map((e) => new Promise<LeaderElector>((r) => e.once('elected', () => r(e)))));
      await leader.stop();
      const elected = await next;
      expect(elected.term).toBe(terms[terms.length - 1]! + 1); // handed over: exactly the next term
      expect(running.filter((e) => e.isLeader)).toEqual([elected]);
      expect((await candidates(group)).map((c) => JSON.parse(c.value).owner)).toEqual([elected.owner]);
    }
    for (const e of running) await e.stop();
  });

  it('transferTo a node that is not the oldest waiter: the hint stops the hand-over and the named node leads; a plain hand-over reads no hint', async () => {
    const group = unique('transfer');
    const hintReads = new Map<string, number>();
    /** An EtcdStore whose reads of the hint are counted per node. */
    const counted = (id: string): EtcdStore =>
      new Proxy(store(), {
        get(target, prop, receiver) {
          if (prop === 'read') {
            return (name: string) => {
              if (name === `${group}/transfer-to`) hintReads.set(id, (hintReads.get(id) ?? 0) + 1);
              return target.read(name);
            };
          }
          const v = Reflect.get(target, prop, receiver) as unknown;
          return typeof v === 'function' ? (v as (...a: unknown[]) => unknown).bind(target) : v;
        },
      });
    const [n1, n2, n3] = ['n1', 'n2', 'n3'].map((id) => new LeaderElector({ store: counted(id), group, id, ttlMs: 2000 }));
    n1!.start();
    await waitUntil(() => n1!.isLeader);
    n2!.start();
    await waitUntil(async () => (await waiters(group)).length === 1);
    n3!.start();
    await waitUntil(async () => (await waiters(group)).length === 2);
    // n2 waits longest: a release would hand over to it, but the hint names n3.
    const lease = await n1!.transferTo('n3');
    expect(lease.owner).toBe(n3!.owner);
    expect(n3!.isLeader).toBe(true);
    expect(n2!.isLeader).toBe(false);
    expect(lease.term).toBeGreaterThanOrEqual(2);
    // A plain stop now hands over to a waiter, which leads without reading the hint.
    await waitUntil(async () => (await waiters(group)).length === 2);
    const before = new Map(hintReads);
    const next = Promise.race([n1!, n2!].map((e) => new Promise<LeaderElector>((r) => e.once('elected', () => r(e)))));
    await n3!.stop();
    const elected = await next;
    expect(elected.term).toBe(lease.term + 1); // handed over: exactly the next term
    const id = elected === n1 ? 'n1' : 'n2';
    expect(hintReads.get(id) ?? 0).toBe(before.get(id) ?? 0);
    for (const e of [n1!, n2!]) await e.stop();
  });
});
