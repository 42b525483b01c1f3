/**
 * The ZooKeeper store under bad input and faults, on a private server (test/fixtures/zookeeper.ts):
 * a holder's znode removed by hand, a holder's session expired by the server while it was cut off
 * (through a fault proxy), a holder's session moved to another connection and closed there, a
 * reply torn by a cut connection, the server restarted under a holder; each gives a clear outcome (a
 * refused renew, StaleTermError for the old token) and never a second leader. Also: a node that
 * is not tenure's in the candidates (a Curator-style latch made by another client) leads, and
 * tenure does not take the name from it.
 */
import { randomBytes } from 'node:crypto';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { LeaderElector, StaleTermError, StoreUnavailableError, openStore } from '../../src/index.js';
import { ZookeeperLayout, ZookeeperStore } from '../../src/stores/zookeeper/index.js';
import { ZkSession, statLong } from '../../src/stores/zookeeper/session.js';
import { loadZookeeper } from '../../src/stores/zookeeper/driver.js';
import { sortCandidates } from '../../src/stores/zookeeper/layout.js';
import { FaultProxy } from '../chaos/proxy/index.js';
import { usePrivateZookeeper } from '../fixtures/zookeeper.js';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

const zk = usePrivateZookeeper({ beforeAll, afterAll, afterEach });
const { toClose } = zk;

function chroot(): string {
  return `/faults-${randomBytes(5).toString('hex')}`;
}

function store(root: string, host = zk.server.host, requestTimeoutMs = 2000): ZookeeperStore {
  const s = new ZookeeperStore({ hosts: [host], chroot: root, requestTimeoutMs });
  toClose.push(s);
  return s;
}

async function admin(): Promise<ZkSession> {
  const s = await ZkSession.open({ hosts: zk.server.host, sessionTimeoutMs: 10_000, requestTimeoutMs: 5000 });
  toClose.push(s);
  return s;
}

async function waitFor<T>(what: string, fn: () => T | undefined | Promise<T | undefined>, timeoutMs = 10_000): Promise<T> {
  const start = Date.now();
  for (;;) {
    const v = await fn();
    if (v !== undefined && v !== false) return v;
    if (Date.now() - start > timeoutMs) throw new Error(`timed out waiting for ${what}`);
    await sleep(10);
  }
}

describe('ZooKeeper store: bad input and faults', () => {
  it('a holder whose znode is removed by hand loses the lease: its renew is refused, the next holder waits out its TTL and gets term + 1, its old token is stale', async () => {
    const root = chroot();
    const a = store(root);
    const b = store(root);
    const TTL = 1000;
    expect(await a.acquire('g', 'a~1', TTL)).toMatchObject({ acquired: true, lease: { term: 1 } });
    await a.appendFenced({ lease: 'g', term: 1 }, 's', 'a1');
    expect(await b.read('g')).toMatchObject({ owner: 'a~1', term: 1 }); // b has seen a's last renewal
    const seenAt = performance.now();
    const z = await admin();
    const dir = a.layout.lease('g');
    const [node] = sortCandidates(await z.getChildren(dir));
    await z.remove(`${dir}/${node}`, -1);

    expect(await b.read('g')).toBeNull();
    // a may still believe it leads until its deadline: b does not take the name before that.
    const early = await b.acquire('g', 'b~1', TTL);
    expect(early).toMatchObject({ acquired: false, lease: { owner: 'a~1', term: 1 } });
    expect(early.lease.remainingMs).toBeGreaterThan(0);
    expect(await a.renew('g', 'a~1', 1, TTL)).toEqual({ renewed: false, lease: null });
    const won = await waitFor('b takes over', async () => {
      const r = await b.acquire('g', 'b~1', 5000);
      return r.acquired ? r : undefined;
    });
    expect(performance.now() - seenAt).toBeGreaterThanOrEqual(TTL);
    expect(won.lease).toMatchObject({ owner: 'b~1', term: 2 });
    // The old holder cannot take it back or renew, and its token is fenced out once term 2 wrote.
    expect(await a.acquire('g', 'a~1', 5000)).toMatchObject({ acquired: false, lease: { owner: 'b~1', term: 2 } });
    expect((await a.renew('g', 'a~1', 1, 5000)).renewed).toBe(false);
    await b.appendFenced({ lease: 'g', term: 2 }, 's', 'b1');
    const err = await a.appendFenced({ lease: 'g', term: 1 }, 's', 'a2').catch((e: unknown) => e);
    expect(err).toBeInstanceOf(StaleTermError);
    expect((err as StaleTermError).currentTerm).toBe(2);
    expect((await b.readStream('s')).map((e) => `${e.term}:${e.payload}`)).toEqual(['1:a1', '2:b1']);
    expect((await z.getChildren(dir)).length).toBe(1);
  });

  it('a store that never saw the vanished holder waits a TTL of its own from first seeing the name vacant', async () => {
    const root = chroot();
    const a = store(root);
    await a.acquire('g', 'a~1', 5000);
    const z = await admin();
    const dir = a.layout.lease('g');
    const [node] = sortCandidates(await z.getChildren(dir));
    await z.remove(`${dir}/${node}`, -1);
    const c = store(root);
    const first = performance.now();
    expect(await c.acquire('g', 'c~1', 800)).toMatchObject({ acquired: false, lease: { owner: 'zookeeper:vanished', term: 1 } });
    const won = await waitFor('c takes over', async () => {
      const r = await c.acquire('g', 'c~1', 800);
      return r.acquired ? r : undefined;
    });
    expect(performance.now() - first).toBeGreaterThanOrEqual(800);
    expect(won.lease.term).toBe(2);
  });

  it('an elector whose znode is removed by hand is deposed; a leader of term 2 follows; never two leaders', async () => {
    const root = chroot();
    const url = `${zk.server.url}${root}`;
    const sa = await openStore(url);
    const sb = await openStore(url);
    toClose.push(sa, sb);
    const ea = new LeaderElector({ store: sa, group: 'jobs', id: 'a', ttlMs: 1000 });
    const eb = new LeaderElector({ store: sb, group: 'jobs', id: 'b', ttlMs: 1000 });
    toClose.push({ close: () => ea.stop() }, { close: () => eb.stop() });
    let both = 0;
    const sampler = setInterval(() => {
      if (ea.isLeader && eb.isLeader) both++;
    }, 2);
    try {
      await ea.start();
      await waitFor('a leads', () => ea.isLeader || undefined);
      await eb.start();
      await sleep(300);
      expect(eb.isLeader).toBe(false);
      const deposed = new Promise<{ reason: string }>((r) => ea.once('deposed', (e) => r(e as { reason: string })));
      const z = await admin();
      const dir = new ZookeeperLayout(root).lease('jobs');
      const [node] = sortCandidates(await z.getChildren(dir));
      await z.remove(`${dir}/${node}`, -1);
      expect((await deposed).reason).toBe('lost');
      // Either may win the free name (the deposed one campaigns again too), with the next term.
      const next = await waitFor('a leader of term 2', () => (ea.isLeader ? ea : eb.isLeader ? eb : undefined));
      expect(next.term).toBe(2);
      const lease = await sb.read('jobs');
      expect(lease).toMatchObject({ term: 2 });
    } finally {
      clearInterval(sampler);
    }
    expect(both).toBe(0);
  });

  it('a holder cut off until the server expires its session: the other store takes term + 1 no sooner than the TTL, the old holder learns it lost and is fenced', async () => {
    const root = chroot();
    const proxy = await FaultProxy.start({ target: { host: '127.0.0.1', port: zk.server.port } });
    toClose.push(proxy);
    const a = store(root, `127.0.0.1:${proxy.endpoint.port}`, 500);
    const b = store(root);
    const TTL = 600;
    const sentAt = performance.now();
    expect(await a.acquire('g', 'a~1', TTL)).toMatchObject({ acquired: true, lease: { term: 1 } });
    await proxy.blackhole({ discard: true });
    // Still held while the session lives: nobody else gets it before the TTL has passed.
    expect(await b.acquire('g', 'b~1', 5000)).toMatchObject({ acquired: false, lease: { owner: 'a~1' } });
    const taken = await waitFor('b takes over', async () => ((await b.acquire('g', 'b~1', 5000)).acquired ? performance.now() : undefined));
    expect(taken - sentAt).toBeGreaterThanOrEqual(TTL);
    expect(await b.read('g')).toMatchObject({ owner: 'b~1', term: 2 });
    await b.appendFenced({ lease: 'g', term: 2 }, 's', 'b1');
    // The old holder's local deadline passed long ago; cut off, its renew is refused or unknown.
    const cutRenew = await a.renew('g', 'a~1', 1, TTL).catch((e: unknown) => e);
    expect(cutRenew instanceof Error || (cutRenew as { renewed: boolean }).renewed === false).toBe(true);
    await proxy.heal();
    // Healed: its session is gone for good; it cannot renew, and its token is stale.
    expect((await a.renew('g', 'a~1', 1, TTL)).renewed).toBe(false);
    await expect(a.appendFenced({ lease: 'g', term: 1 }, 's', 'a-late')).rejects.toBeInstanceOf(StaleTermError);
    expect(await a.read('g')).toMatchObject({ owner: 'b~1', term: 2 });
    expect((await b.readStream('s')).map((e) => e.payload)).toEqual(['b1']);
  });

  it('a server restart under a holder: the lease is kept or lost with its session, never shared, and terms never go back', { timeout: 90_000 }, async () => {
    const root = chroot();
    // What this test checks comes after the restart, where every call is retried for 40 s. The
    // set-up's first fenced append is retried too: its fence read timed out in CI at 1 s and
    // again at 2 s (the default), queued on the server behind other work while the suite's other
    // files loaded the machine. A timed-out append may have been written ("maybe", rule 3): the
    // stream is read before trying again, so 'one' is entry 1 exactly once.
    // The calls after the restart wait up to 10 s for an answer (the store's default is 5 s, this
    // file's 2 s): a restarted server's first answers came later than 2 s in CI (a getData of the
    // fence, the JVM cold, the machine's 2 cores busy with the suite's other files). What is
    // checked is who holds the lease and which terms are written, not how fast.
    const a = store(root, zk.server.host, 10_000);
    const TTL = 3000;
    expect(await a.acquire('g', 'a~1', TTL)).toMatchObject({ acquired: true, lease: { term: 1 } });
    await waitFor('the set-up append', async () => {
      try {
        if ((await a.readStream('s')).length > 0) return true;
        return (await a.appendFenced({ lease: 'g', term: 1 }, 's', 'one')) === 1;
      } catch (err) {
        if (err instanceof StoreUnavailableError) return undefined;
        throw err;
      }
    }, 20_000);
    expect((await a.readStream('s')).map((e) => e.payload)).toEqual(['one']);
    await zk.server.restart();
    // Back within the session timeout, the session (and the node) is resumed and renews; a client
    // that cannot get back within it ends the session here as the server does (Curator's LOST).
    const r = await waitFor('an answer after the restart', async () => {
      try {
        return await a.renew('g', 'a~1', 1, TTL);
      } catch {
        return undefined;
      }
    }, 40_000);
    // Every call after the restart is asked again while it has no answer (StoreUnavailableError):
    // in CI a fence read on a control session the restart had ended waited out its whole 10 s.
    // An append is asked again only once a read shows it was not written (it may have been).
    const answered = <T>(what: string, fn: () => Promise<T>): Promise<T> =>
      waitFor(what, async () => {
        try {
          return { v: await fn() };
        } catch (err) {
          if (err instanceof StoreUnavailableError) return undefined;
          throw err;
        }
      }, 40_000).then((x) => x.v);
    const appendOnce = (s: ZookeeperStore, term: number, payload: string): Promise<number> =>
      answered(`the append of ${payload}`, async () => {
        const had = (await s.readStream('s')).find((e) => e.payload === payload);
        return had ? had.seq : s.appendFenced({ lease: 'g', term }, 's', payload);
      });
    const b = store(root, zk.server.host, 10_000);
    if (r.renewed) {
      expect(r.lease).toMatchObject({ owner: 'a~1', term: 1 });
      expect(await answered('b refused', () => b.acquire('g', 'b~1', 5000))).toMatchObject({ acquired: false, lease: { owner: 'a~1', term: 1 } });
      expect(await appendOnce(a, 1, 'two')).toBe(2);
      // A release asked again after a lost answer finds it done (false): what counts is that a holds it no more.
      await answered('the release', () => a.release('g', 'a~1', 1));
      const after = await answered('a read', () => b.read('g'));
      expect(after === null || after.owner !== 'a~1').toBe(true);
    } else {
      expect(r.lease === null || r.lease.owner !== 'a~1').toBe(true);
    }
    const next = await waitFor('the next holder', async () => {
      const x = await answered('an acquire', () => b.acquire('g', 'b~1', 5000));
      return x.acquired ? x : undefined;
    }, 40_000);
    expect(next.lease.term).toBe(2);
    await appendOnce(b, 2, 'b');
    const late = await answered('the late append', () => a.appendFenced({ lease: 'g', term: 1 }, 's', 'late').then(() => 'written', (err: unknown) => (err instanceof StaleTermError ? 'stale' : Promise.reject(err))));
    expect(late).toBe('stale');
    const terms = (await answered('the stream', () => b.readStream('s'))).map((e) => e.term);
    expect([...terms].sort()).toEqual(terms);
  });

  it('a holder\'s session moved to another connection (a client presenting its id and password) and closed there: the holder loses, the next holder waits out the TTL and gets term + 1, the old token is stale', async () => {
    const root = chroot();
    const a = store(root);
    const b = store(root);
    const TTL = 1000;
    expect(await a.acquire('g', 'a~1', TTL)).toMatchObject({ acquired: true, lease: { term: 1 } });
    const renewedAt = performance.now();
    expect((await a.renew('g', 'a~1', 1, TTL)).renewed).toBe(true);
    // The holder's session, as the server knows it: the owner of its candidate node.
    const held = (a as unknown as { held: Map<string, { session: ZkSession }> }).held.get('g')!.session;
    const z = await admin();
    const dir = a.layout.lease('g');
    const [node] = sortCandidates(await z.getChildren(dir));
    const { stat } = await z.getData(`${dir}/${node}`);
    const id = held.client.getSessionId();
    expect(id.equals(stat.ephemeralOwner)).toBe(true);
    // An intruder takes the session over (the server moves it to the intruder's connection) and ends it.
    const driver = loadZookeeper();
    const intruder = driver.createClient(zk.server.host, { sessionTimeout: 10_000, sessionId: id, sessionPassword: held.client.getSessionPassword(), retries: 0 } as Parameters<typeof driver.createClient>[1]);
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error('the intruder got no session')), 5000);
      intruder.once('connected', () => {
        clearTimeout(timer);
        resolve();
      });
      intruder.connect();
    });
    expect(intruder.getSessionId().equals(id)).toBe(true);
    intruder.close();
    await waitFor('the holder\'s node is gone', async () => ((await z.exists(`${dir}/${node}`)) === null ? true : undefined));
    // The holder learns it: its renew is refused (never "renewed"), at most unknown while its client reconnects.
    await waitFor('a is told', async () => {
      const r = await a.renew('g', 'a~1', 1, TTL).catch(() => undefined);
      return r?.renewed === false ? true : undefined;
    });
    // No second leader before a's TTL from its last renewal has passed; then b gets term 2.
    const won = await waitFor('b takes over', async () => {
      const r = await b.acquire('g', 'b~1', TTL);
      return r.acquired ? { r, at: performance.now() } : undefined;
    });
    expect(won.at - renewedAt).toBeGreaterThanOrEqual(TTL);
    expect(won.r.lease.term).toBe(2);
    await b.appendFenced({ lease: 'g', term: 2 }, 's', 'b1');
    await expect(a.appendFenced({ lease: 'g', term: 1 }, 's', 'a-late')).rejects.toBeInstanceOf(StaleTermError);
    expect((await b.readStream('s')).map((e) => e.payload)).toEqual(['b1']);
  });

  it('a reply torn by a cut connection fails its request as unavailable; the session reconnects and reads the next replies right, at every cut point', async () => {
    // node-zookeeper-client kept the half frame and glued it in front of the next connection's
    // connect response: the client then hung in CONNECTING or threw from its socket handler and
    // ended the process (chaos suite, seed 2 with connection faults).
    const proxy = await FaultProxy.start({ target: { host: '127.0.0.1', port: zk.server.port } });
    toClose.push(proxy);
    const path = `${chroot()}-torn`;
    const z = await admin();
    const data = Buffer.from('tenure '.repeat(40));
    await z.ensure(path);
    await z.setData(path, data, -1);
    const s = await ZkSession.open({ hosts: `127.0.0.1:${proxy.endpoint.port}`, sessionTimeoutMs: 10_000, requestTimeoutMs: 5000 });
    toClose.push(s);
    const whole = (await s.getData(path)).data;
    expect(whole.equals(data)).toBe(true);
    // The reply is about 4 + 16 + 4 + 280 + 68 bytes: cut in its length, header, data and stat.
    for (const keep of [2, 4, 10, 60, 300, 360, 368]) {
      expect(await proxy.tear(keep)).toBe(1);
      await expect(s.getData(path)).rejects.toBeInstanceOf(StoreUnavailableError);
      const again = await s.getData(path);
      expect(again.data.equals(data), `after a tear at byte ${keep}`).toBe(true);
      expect(s.ended).toBe(false);
    }
    expect(proxy.getStats().accepted).toBe(8);
  });

  it('a foreign candidate (a Curator-style latch node) that leads is reported, and tenure never takes the name from it', async () => {
    const root = chroot();
    const a = store(root);
    const foreign = await ZkSession.open({ hosts: zk.server.host, sessionTimeoutMs: 10_000, requestTimeoutMs: 5000 });
    toClose.push(foreign);
    const dir = a.layout.lease('g');
    await foreign.ensure(dir);
    await foreign.multi([{ op: 'create', path: `${dir}/_c_${randomBytes(8).toString('hex')}-latch-`, data: Buffer.from('curator-participant'), mode: 'ephemeral-sequential' }]);
    const r = await a.acquire('g', 'a~1', 5000);
    expect(r.acquired).toBe(false);
    expect(r.lease.owner).toBe('zookeeper:curator-participant');
    expect(await a.read('g')).toMatchObject({ owner: 'zookeeper:curator-participant' });
    // The latch goes away (its session closes): tenure may lead now.
    foreign.close();
    await waitFor('free', async () => ((await a.acquire('g', 'a~1', 5000)).acquired ? true : undefined));
    expect(await a.read('g')).toMatchObject({ owner: 'a~1', term: 1 });
  });

  it('stream entries carry the server\'s creation time, and streamHead reads the same clock', async () => {
    const a = store(chroot());
    await a.acquire('g', 'a~1', 5000);
    const before = await a.streamHead('s');
    await a.appendFenced({ lease: 'g', term: 1 }, 's', 'x');
    const after = await a.streamHead('s');
    const [e] = await a.readStream('s');
    expect(e!.appendedAt).toBeGreaterThanOrEqual(before.nowMs);
    expect(e!.appendedAt).toBeLessThanOrEqual(after.nowMs);
    expect(statLong(Buffer.from([0, 0, 0, 0, 0, 0, 1, 0]))).toBe(256);
  });

  it('refuses a TTL longer than the server grants a session, naming the limit', async () => {
    const a = store(chroot());
    await expect(a.acquire('g', 'a~1', 120_000)).rejects.toThrow(/ttlMs: 120000 ms is longer than the longest session the ZooKeeper server grants \(60000 ms/);
    expect(await a.read('g')).toBeNull();
  });
});
