/**
 * tenure and etcd's own recipes in one election: the real `etcdctl elect` / `etcdctl lock`
 * (Go's concurrency.Election and concurrency.Mutex) against EtcdElection, EtcdMutex, and the
 * LeaderElector / Lock over EtcdStore.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { LeaderElector, LockTimeoutError } from '../../src/index.js';
import { openStore } from '../../src/open.js';
import type { TenureStore } from '../../src/open.js';
import { EtcdElection, EtcdMutex, EtcdStore } from '../../src/stores/etcd/index.js';
import { candidateKeys, startEtcd, sleep, unique, waitUntil } from './etcd-harness.js';
import type { EtcdCluster } from './etcd-harness.js';
import { etcdctl } from './etcdctl.js';

let cluster: EtcdCluster;
let admin: EtcdStore;

/** The candidate keys of a name, as etcd holds them: key, lease (hex) and create revision. */
const candidates = (name: string): ReturnType<typeof candidateKeys> => candidateKeys(admin, name);

beforeAll(async () => {
  cluster = await startEtcd(1);
  admin = new EtcdStore({ hosts: cluster.hosts });
});
afterAll(async () => {
  await admin?.close();
  await cluster?.stop();
});

describe('EtcdElection and etcdctl elect', () => {
  it('writes the key Go writes: <name>/<lease id in lowercase hex>, under that lease', async () => {
    const name = unique('keys');
    const election = new EtcdElection({ hosts: cluster.hosts, name, ttlMs: 5000 });
    await election.campaign('tenure-node');
    const [c] = await candidates(name);
    expect(c).toMatchObject({ key: `${name}/${c!.leaseHex}`, value: 'tenure-node' });
    expect(c!.leaseHex).toMatch(/^[0-9a-f]+$/);
    const ctl = etcdctl(cluster.hosts, ['elect', '-l', name]);
    await ctl.waitFor(`${name}/${c!.leaseHex}\ntenure-node`); // Go's Observe sees tenure as leader
    await ctl.stop();
    await election.close();
    expect(await candidates(name)).toEqual([]);
  });

  it('has one leader between a tenure node and etcdctl, and hands off both ways', async () => {
    const name = unique('shared');
    const tenure = new EtcdElection({ hosts: cluster.hosts, name, ttlMs: 5000 });
    const first = await tenure.campaign('tenure');
    expect(await tenure.leader()).toMatchObject({ value: 'tenure', revision: first.revision });

    // etcdctl joins and waits behind tenure: no churn when a newer node joins.
    const ctl = etcdctl(cluster.hosts, ['elect', name, 'from-etcdctl']);
    await waitUntil(async () => (await candidates(name)).length === 2);
    await sleep(300);
    expect(ctl.output()).toBe('');
    expect(first.signal.aborted).toBe(false);

    // tenure -> etcdctl
    await tenure.resign();
    expect(first.signal.aborted).toBe(true);
    await ctl.waitFor('from-etcdctl');
    expect(await tenure.leader()).toMatchObject({ value: 'from-etcdctl' });

    // tenure waits behind etcdctl; etcdctl -> tenure when it resigns
    let led = false;
    const campaign = tenure.campaign('tenure-again').then((l) => {
      led = true;
      return l;
    });
    await waitUntil(async () => (await candidates(name)).length === 2);
    await sleep(300);
    expect(led).toBe(false);
    await ctl.stop();
    const second = await campaign;
    expect(await tenure.leader()).toMatchObject({ value: 'tenure-again', revision: second.revision });
    // The fencing term is the leader key's create revision: it only goes up.
    expect(second.token.term).toBeGreaterThan(first.token.term);
    await tenure.close();
  });

  it('keeps its place in line: when the leader leaves, the next older candidate leads, not tenure', async () => {
    const name = unique('line');
    const ctlA = etcdctl(cluster.hosts, ['elect', name, 'a']);
    await ctlA.waitFor('\na\n');
    const ctlB = etcdctl(cluster.hosts, ['elect', name, 'b']);
    await waitUntil(async () => (await candidates(name)).length === 2);
    const tenure = new EtcdElection({ hosts: cluster.hosts, name, ttlMs: 5000 });
    let led = false;
    const campaign = tenure.campaign('c').then(() => (led = true));
    await waitUntil(async () => (await candidates(name)).length === 3);
    // The leader leaves: B (next in line) leads, tenure keeps waiting for B.
    await ctlA.stop();
    await ctlB.waitFor('\nb\n');
    await sleep(200);
    expect(led).toBe(false);
    await ctlB.stop();
    await campaign;
    expect(await tenure.leader()).toMatchObject({ value: 'c' });
    await tenure.close();
  });

  it('proclaims a new value and resigns only its own key', async () => {
    const name = unique('proclaim');
    const tenure = new EtcdElection({ hosts: cluster.hosts, name, ttlMs: 5000 });
    const l = await tenure.campaign('v1');
    const observed: (string | null)[] = [];
    const stop = tenure.observe((leader) => observed.push(leader?.value ?? null));
    await waitUntil(() => observed.length === 1);
    await tenure.proclaim('v2');
    await waitUntil(() => observed.length === 2);
    expect(observed).toEqual(['v1', 'v2']);
    expect((await candidates(name))[0]).toMatchObject({ value: 'v2', rev: l.revision });
    // Someone deletes our key (an operator); a newer candidate leads. Our resign must not touch it.
    await admin.client.delete().key(l.key);
    await waitUntil(() => l.signal.aborted);
    const ctl = etcdctl(cluster.hosts, ['elect', name, 'newer']);
    await ctl.waitFor('newer');
    await tenure.resign();
    expect((await candidates(name)).map((c) => c.value)).toEqual(['newer']);
    await waitUntil(() => observed.at(-1) === 'newer');
    stop();
    await ctl.stop();
    await tenure.close();
  });
});

describe('EtcdMutex and etcdctl lock', () => {
  it('excludes etcdctl lock and is excluded by it, both ways', async () => {
    const name = unique('mutex');
    const ctl = etcdctl(cluster.hosts, ['lock', name]);
    await ctl.waitFor(`${name}/`);
    const mutex = new EtcdMutex({ hosts: cluster.hosts, name, ttlMs: 5000 });
    expect(await mutex.tryLock()).toBeNull();
    await expect(mutex.lock({ waitMs: 300 })).rejects.toBeInstanceOf(LockTimeoutError);
    expect(await candidates(name)).toHaveLength(1); // the timed-out waiter withdrew its key
    const pending = mutex.lock();
    await waitUntil(async () => (await candidates(name)).length === 2);
    await ctl.stop();
    const handle = await pending;
    expect(handle.key).toBe((await candidates(name))[0]!.key);

    const ctl2 = etcdctl(cluster.hosts, ['lock', name]);
    await waitUntil(async () => (await candidates(name)).length === 2);
    await sleep(200);
    expect(ctl2.output()).toBe('');
    await handle.unlock();
    expect(handle.signal.aborted).toBe(true);
    await ctl2.waitFor(`${name}/`);
    await handle.unlock(); // a retried unlock never deletes the newer holder's key
    expect(await candidates(name)).toHaveLength(1);
    await ctl2.stop();
    await mutex.close();
  });
});

describe('LeaderElector and Lock over EtcdStore, beside etcdctl', () => {
  let store: TenureStore;
  beforeAll(async () => {
    store = await openStore(cluster.url);
  });
  afterAll(async () => {
    await store?.close();
  });

  it('a tenure group G and `etcdctl elect G` share one leader, handing off both ways', async () => {
    const group = unique('group');
    const ctl = etcdctl(cluster.hosts, ['elect', group, 'go-service']);
    await ctl.waitFor('go-service');
    const elector = new LeaderElector({ store, group, id: 'tenure-node', ttlMs: 2000 });
    const changes: (string | null)[] = [];
    elector.on('leader-changed', ({ owner }) => changes.push(owner));
    elector.start();
    await waitUntil(() => changes.length > 0);
    expect(changes[0]).toMatch(/^etcd:[0-9a-f]+$/);
    expect(await store.read(group)).toMatchObject({ meta: { value: 'go-service' } });
    await sleep(300);
    expect(elector.isLeader).toBe(false);

    // etcdctl -> tenure: it resigns, the watch pushes, tenure takes it.
    const elected = new Promise<number>((r) => elector.once('elected', ({ term }) => r(term)));
    const t0 = Date.now();
    await ctl.stop();
    await elected;
    expect(Date.now() - t0).toBeLessThan(1000);
    expect(await store.read(group)).toMatchObject({ owner: elector.owner });

    // tenure -> etcdctl: a Go candidate queues behind tenure and leads once tenure releases.
    const ctl2 = etcdctl(cluster.hosts, ['elect', group, 'go-again']);
    await waitUntil(async () => (await candidates(group)).length === 2);
    await sleep(300);
    expect(ctl2.output()).toBe('');
    expect(elector.isLeader).toBe(true);
    await elector.stop();
    await ctl2.waitFor('go-again');
    await ctl2.stop();
  });

  it('store.lock(NAME) and `etcdctl lock NAME` exclude each other', async () => {
    const name = unique('lock');
    const ctl = etcdctl(cluster.hosts, ['lock', name]);
    await ctl.waitFor(`${name}/`);
    await expect(store.lock(name, { ttlMs: 2000 }).acquire({ waitMs: 500 })).rejects.toBeInstanceOf(LockTimeoutError);
    const pending = store.lock(name, { ttlMs: 2000 }).acquire({ waitMs: 5000 });
    await sleep(100);
    await ctl.stop();
    const handle = await pending;
    const ctl2 = etcdctl(cluster.hosts, ['lock', name]);
    await waitUntil(async () => (await candidates(name)).length === 2);
    await sleep(200);
    expect(ctl2.output()).toBe('');
    await handle.release();
    await ctl2.waitFor(`${name}/`);
    await ctl2.stop();
  });
});
