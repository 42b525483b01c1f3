/**
 * The ZooKeeper store's hand-off path (a release seen by a watch, then the waiting candidate's
 * acquire) answers in fewer round trips: the watch reads the listing and the term counter
 * together after the holder's node goes, an acquire that follows a watch's recent sight of a free
 * name takes it in one multi conditional on the counter it saw, and the listings after that multi
 * (ours leads? a hand-over hint held?) ride behind it. These tests hold the shortcuts to the
 * answers the long path gives: terms only go up, a counter moved by others is noticed, a hint
 * held is reported (no `noTransferHint`), and a holder that came in the gap is told.
 */
import { randomBytes } from 'node:crypto';
import { afterEach, describe, expect, it } from 'vitest';
import { transferHintName } from '../../src/index.js';
import type { AcquireResult, Lease } from '../../src/index.js';
import { ZookeeperStore } from '../../src/stores/zookeeper/index.js';
import { sortCandidates } from '../../src/stores/zookeeper/layout.js';
import { ZkSession } from '../../src/stores/zookeeper/session.js';
import { sharedZookeeper, zookeeperInstalled } from '../fixtures/zookeeper.js';

const toClose: { close(): unknown }[] = [];
afterEach(async () => {
  for (const s of toClose.splice(0)) await s.close();
});

async function stores(n: number): Promise<ZookeeperStore[]> {
  const server = await sharedZookeeper();
  const chroot = `/handoff-${randomBytes(5).toString('hex')}`;
  const made = Array.from({ length: n }, () => new ZookeeperStore({ hosts: [server.host], chroot, requestTimeoutMs: 5000 }));
  toClose.push(...made);
  return made;
}

/** Acquire `name` for `owner`, waiting out each refusal's remaining time, until it is taken. */
async function acquireOnceFree(store: ZookeeperStore, name: string, owner: string, ttlMs: number): Promise<AcquireResult> {
  let r = await store.acquire(name, owner, ttlMs);
  while (!r.acquired) {
    await new Promise((res) => setTimeout(res, Math.max(5, r.lease.remainingMs)));
    r = await store.acquire(name, owner, ttlMs);
  }
  return r;
}

async function admin(): Promise<ZkSession> {
  const server = await sharedZookeeper();
  const s = await ZkSession.open({ hosts: server.host, sessionTimeoutMs: 10_000, requestTimeoutMs: 5000 });
  toClose.push(s);
  return s;
}

/** The store's sights of free names (private): set one to stage a guess that raced another acquire. */
const sights = (s: ZookeeperStore): Map<string, { term: number; version: number; at: number }> => (s as unknown as { knownFree: Map<string, { term: number; version: number; at: number }> }).knownFree;

async function until<T>(what: string, fn: () => T | undefined): Promise<T> {
  const start = Date.now();
  for (;;) {
    const v = fn();
    if (v !== undefined) return v;
    if (Date.now() - start > 10_000) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 5));
  }
}

/** A watch on `name` through `store`, keeping what it told. */
function watching(store: ZookeeperStore, name: string): { told: (Lease | null)[]; stop: () => void } {
  const told: (Lease | null)[] = [];
  const stop = store.watch(name, (l) => told.push(l));
  return { told, stop };
}

describe.skipIf(!zookeeperInstalled())('ZooKeeper hand-off path', () => {
  it('a win tells noTransferHint only when no hand-over hint is held: a held hint leaves it unsaid, its release brings it back', async () => {
    const [a, b, c] = await stores(3);
    const hint = transferHintName('g')!;
    expect(await a!.acquire('g', 'a~1', 5000)).toMatchObject({ acquired: true, lease: { term: 1 }, noTransferHint: true });
    expect(await a!.release('g', 'a~1', 1)).toBe(true);
    // A hint held (as transferTo writes it before the leader lets go) is never hidden.
    const h = await a!.acquire(hint, 'a~1', 5000, { to: 'c', from: 'a~1', term: 2 });
    expect(h.acquired).toBe(true);
    const won = await b!.acquire('g', 'b~1', 5000);
    expect(won).toMatchObject({ acquired: true, lease: { owner: 'b~1', term: 2 } });
    expect(won.noTransferHint).toBeUndefined();
    expect(await b!.release('g', 'b~1', 2)).toBe(true);
    expect(await a!.release(hint, 'a~1', h.lease.term)).toBe(true);
    expect(await c!.acquire('g', 'c~1', 5000)).toMatchObject({ acquired: true, lease: { owner: 'c~1', term: 3 }, noTransferHint: true });
    // A live renewal of one's own is no new win: nothing said.
    expect((await c!.acquire('g', 'c~1', 5000)).noTransferHint).toBeUndefined();
  });

  it('an acquire after a watch saw the name free, when others took and let go of it since, still gets the next term (the counter moved: read again)', async () => {
    const [a, b, c] = await stores(3);
    const w = watching(b!, 'g');
    expect(await a!.acquire('g', 'a~1', 5000)).toMatchObject({ acquired: true, lease: { term: 1 } });
    await until('the holder told', () => (w.told.at(-1)?.owner === 'a~1' ? true : undefined));
    expect(await a!.release('g', 'a~1', 1)).toBe(true);
    await until('the release told', () => (w.told.at(-1) === null ? true : undefined));
    // b's watch saw it free at term 1 and then stops (it sees nothing more); c takes and lets go
    // of it twice before b asks.
    w.stop();
    for (const term of [2, 3]) {
      expect(await c!.acquire('g', 'c~1', 5000)).toMatchObject({ acquired: true, lease: { term } });
      expect(await c!.release('g', 'c~1', term)).toBe(true);
    }
    expect(await b!.acquire('g', 'b~1', 5000)).toMatchObject({ acquired: true, lease: { owner: 'b~1', term: 4 } });
    expect(await c!.read('g')).toMatchObject({ owner: 'b~1', term: 4 });
  });

  it('an acquire after a watch saw the name free, when another holds it now, is refused with that holder, and the name keeps one holder', async () => {
    const [a, b, c] = await stores(3);
    const w = watching(b!, 'g');
    expect(await a!.acquire('g', 'a~1', 5000)).toMatchObject({ acquired: true });
    await until('the holder told', () => (w.told.at(-1)?.owner === 'a~1' ? true : undefined));
    expect(await a!.release('g', 'a~1', 1)).toBe(true);
    await until('the release told', () => (w.told.at(-1) === null ? true : undefined));
    w.stop(); // b's last sight: free at term 1
    expect(await c!.acquire('g', 'c~1', 5000)).toMatchObject({ acquired: true, lease: { term: 2 } });
    const refused = await b!.acquire('g', 'b~1', 5000);
    expect(refused).toMatchObject({ acquired: false, lease: { owner: 'c~1', term: 2 } });
    expect(await a!.read('g')).toMatchObject({ owner: 'c~1', term: 2 });
  });

  it('a holder whose node is removed by hand (no release): the watcher is told free, and its acquire still waits out the TTL before term + 1', async () => {
    const [a, b] = await stores(2);
    const TTL = 1000;
    const w = watching(b!, 'g');
    expect(await a!.acquire('g', 'a~1', TTL)).toMatchObject({ acquired: true, lease: { term: 1 } });
    await until('the holder told', () => (w.told.at(-1)?.owner === 'a~1' ? true : undefined));
    const seenAt = performance.now();
    const z = await admin();
    const dir = a!.layout.lease('g');
    const [node] = sortCandidates(await z.getChildren(dir));
    await z.remove(`${dir}/${node}`, -1);
    await until('free told', () => (w.told.at(-1) === null ? true : undefined));
    // a may still believe it leads until its deadline: the guess (no release moved the counter) loses.
    const early = await b!.acquire('g', 'b~1', TTL);
    expect(early).toMatchObject({ acquired: false, lease: { term: 1 } });
    expect(early.lease.remainingMs).toBeGreaterThan(0);
    const won = await acquireOnceFree(b!, 'g', 'b~1', TTL);
    expect(performance.now() - seenAt).toBeGreaterThanOrEqual(TTL - 5);
    expect(won.lease.term).toBe(2);
    w.stop();
  });

  it('a guess at the counter that another acquire moved by one (the same next term) loses: the read before its multi shows no release, its node is removed', async () => {
    const [a, b, c] = await stores(3);
    expect(await a!.acquire('g', 'a~1', 5000)).toMatchObject({ acquired: true, lease: { term: 1 } });
    expect(await a!.release('g', 'a~1', 1)).toBe(true);
    // The counter now reads "1 released"; c takes term 2 (one more move of the counter).
    expect(await c!.acquire('g', 'c~1', 5000)).toMatchObject({ acquired: true, lease: { term: 2 } });
    const z = await admin();
    const counter = await z.getData(b!.layout.term('g'));
    expect(counter.data.toString()).toBe('2');
    // b guesses as a watch told of a's node going would: term 1, the version one release after it.
    sights(b!).set('g', { term: 1, version: counter.stat.version, at: performance.now() });
    const r = await b!.acquire('g', 'b~1', 5000);
    expect(r).toMatchObject({ acquired: false, lease: { owner: 'c~1', term: 2 } });
    // One holder, the counter still at 2, and b's node gone.
    expect(await a!.read('g')).toMatchObject({ owner: 'c~1', term: 2 });
    expect((await z.getData(b!.layout.term('g'))).data.toString()).toBe('2');
    expect(sortCandidates(await z.getChildren(b!.layout.lease('g')))).toHaveLength(1);
    expect(await c!.renew('g', 'c~1', 2, 5000)).toMatchObject({ renewed: true });
    expect(await c!.release('g', 'c~1', 2)).toBe(true);
    expect(await b!.acquire('g', 'b~1', 5000)).toMatchObject({ acquired: true, lease: { term: 3 } });
  });

  it('a guess that met another acquire whose node was then removed by hand is undone: no second holder of that term, and the TTL wait is kept', async () => {
    const [a, b, c] = await stores(3);
    const TTL = 300;
    const z = await admin();
    const dir = a!.layout.lease('g');
    const removeHolder = async (): Promise<void> => {
      const [node] = sortCandidates(await z.getChildren(dir));
      await z.remove(`${dir}/${node}`, -1);
    };
    expect(await a!.acquire('g', 'a~1', TTL)).toMatchObject({ acquired: true, lease: { term: 1 } });
    const atOne = await z.getData(a!.layout.term('g'));
    await removeHolder(); // a vanished: no release, the counter still "1"
    const c2 = await acquireOnceFree(c!, 'g', 'c~1', TTL);
    expect(c2.lease.term).toBe(2);
    await removeHolder(); // c vanished too: the counter reads "2", one move after "1"
    // b guesses as a watch that saw a's node go would: a release moved the counter by one.
    sights(b!).set('g', { term: 1, version: atOne.stat.version + 1, at: performance.now() });
    const r = await b!.acquire('g', 'b~1', TTL);
    // c may still believe it leads term 2: b neither takes term 2 again nor skips c's TTL.
    expect(r.acquired).toBe(false);
    expect(r.lease.term).toBe(2);
    expect(sortCandidates(await z.getChildren(dir))).toHaveLength(0);
    const won = await acquireOnceFree(b!, 'g', 'b~1', TTL);
    expect(won.lease.term).toBe(3);
  });

  it('a watch whose holder goes and is replaced at once tells the new holder (with a free instant before it), never the old one again', async () => {
    const [a, b, c] = await stores(3);
    for (let round = 0; round < 5; round++) {
      const name = `g${round}`;
      const w = watching(b!, name);
      expect(await a!.acquire(name, 'a~1', 5000)).toMatchObject({ acquired: true, lease: { term: 1 } });
      await until('the holder told', () => (w.told.at(-1)?.owner === 'a~1' ? true : undefined));
      // The release and the next acquire back to back: the watch's read after the deletion may find c already.
      await Promise.all([a!.release(name, 'a~1', 1), c!.acquire(name, 'c~1', 5000).then(async (r) => r.acquired || (await c!.acquire(name, 'c~1', 5000)).acquired)]);
      expect(await c!.read(name)).toMatchObject({ owner: 'c~1', term: 2 });
      await until('the new holder told', () => (w.told.at(-1)?.owner === 'c~1' ? true : undefined));
      const afterA = w.told.slice(w.told.findIndex((l) => l?.owner === 'a~1') + 1);
      expect(afterA.some((l) => l?.owner === 'a~1')).toBe(false);
      expect(afterA).toContain(null); // the free instant between two terms is told
      w.stop();
    }
  });
});
