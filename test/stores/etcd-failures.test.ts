/**
 * etcd failing under tenure: unreachable, a leader whose keepalives stop, a cluster member dying
 * under the client, and a watch whose resume revision was compacted away.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { LeaderElector, StoreUnavailableError } from '../../src/index.js';
import { openStore } from '../../src/open.js';
import { EtcdElection, EtcdStore } from '../../src/stores/etcd/index.js';
import type { Lease } from '../../src/core/index.js';
import { startEtcd, sleep, unique, waitUntil } from './etcd-harness.js';
import type { EtcdCluster } from './etcd-harness.js';
import { freePort as unusedPort } from '../fixtures/ports.js';

describe('etcd unreachable', () => {
  it('rejects every call with StoreUnavailableError, promptly', async () => {
    const port = await unusedPort();
    const store = await openStore(`etcd://127.0.0.1:${port}`);
    const t0 = Date.now();
    await expect(store.acquire('g', 'a~1', 2000)).rejects.toBeInstanceOf(StoreUnavailableError);
    await expect(store.read('g')).rejects.toBeInstanceOf(StoreUnavailableError);
    await expect(store.appendFenced({ lease: 'g', term: 1 }, 's', 'x')).rejects.toBeInstanceOf(StoreUnavailableError);
    expect(Date.now() - t0).toBeLessThan(20_000);
    await store.close();
  });
});

describe('one member', () => {
  let cluster: EtcdCluster;
  beforeAll(async () => {
    cluster = await startEtcd(1);
  });
  afterAll(async () => {
    await cluster?.stop();
  });

  it('a leader whose keepalives stop is deposed at its deadline (LeaderElector over EtcdStore)', async () => {
    const store = new EtcdStore({ hosts: cluster.hosts, requestTimeoutMs: 500 });
    const elector = new LeaderElector({ store, group: unique('deadline'), ttlMs: 2000, marginMs: 200, requestTimeoutMs: 300 });
    let lastSuccessAt = 0;
    elector.on('elected', () => (lastSuccessAt = performance.now()));
    elector.on('renewed', ({ latencyMs }) => (lastSuccessAt = performance.now() - latencyMs));
    const elected = new Promise<void>((r) => elector.once('elected', () => r()));
    elector.start();
    await elected;
    await sleep(800); // a renewal or two
    const deposed = new Promise<{ reason: string; at: number }>((r) => elector.once('deposed', ({ reason }) => r({ reason, at: performance.now() })));
    const member = cluster.members[0]!;
    cluster.pause(member); // etcd stops answering: no keepalive lands any more
    try {
      const { reason, at } = await deposed;
      expect(reason).toBe('deadline');
      // Deadline = send time of the last successful renew + ttl - margin (1800 ms).
      expect(at - lastSuccessAt).toBeLessThanOrEqual(1800 + 50);
      expect(at - lastSuccessAt).toBeGreaterThanOrEqual(1800 - 400);
      expect(elector.isLeader).toBe(false);
    } finally {
      cluster.resume(member);
    }
    await elector.stop();
    await store.close();
  });

  it('an EtcdElection whose session keepalives stop ends leadership at the session deadline', async () => {
    const election = new EtcdElection({ hosts: cluster.hosts, name: unique('session'), ttlMs: 2000, marginMs: 200, requestTimeoutMs: 300 });
    const leadership = await election.campaign('x');
    const t0 = performance.now();
    const member = cluster.members[0]!;
    cluster.pause(member);
    try {
      await waitUntil(() => leadership.signal.aborted, 5000);
      expect(performance.now() - t0).toBeLessThanOrEqual(1800 + 50);
      expect(leadership.signal.reason).toBeInstanceOf(StoreUnavailableError);
    } finally {
      cluster.resume(member);
    }
    await election.close();
  });

  it('recovers a store watch whose resume revision was compacted', async () => {
    const store = new EtcdStore({ hosts: cluster.hosts });
    const other = new EtcdStore({ hosts: cluster.hosts });
    const name = unique('compact');
    const conn = store.connection;
    const range = conn.range.bind(conn);
    let compacted = false;
    // Between the watch's snapshot and its watch starting, the lease changes hands and etcd
    // compacts past the snapshot: the watch from snapshot + 1 is cancelled by etcd.
    conn.range = async (what, request) => {
      const result = await range(what, request);
      if (what === 'watch snapshot' && !compacted) {
        compacted = true;
        await other.acquire(name, 'a~1', 5000);
        for (let i = 0; i < 5; i++) await other.client.put(`${name}-noise`).value(String(i));
        const head = await other.client.get(`${name}-noise`).exec();
        await other.client.kv.compact({ revision: head.header.revision, physical: true });
      }
      return result;
    };
    const seen: (string | null)[] = [];
    const stop = store.watch(name, (lease: Lease | null) => seen.push(lease ? `${lease.owner}@${lease.term}` : null));
    await waitUntil(() => seen.includes('a~1@1'));
    await other.release(name, 'a~1', 1);
    await waitUntil(() => seen.at(-1) === null);
    await other.acquire(name, 'b~1', 5000);
    await waitUntil(() => seen.at(-1) === 'b~1@2');
    expect(compacted).toBe(true);
    expect(seen).toEqual(['a~1@1', null, 'b~1@2']);
    stop();
    await store.close();
    await other.close();
  });

  it('recovers a campaign waiting on a predecessor whose watch revision was compacted', async () => {
    const name = unique('compact-wait');
    const first = new EtcdElection({ hosts: cluster.hosts, name, ttlMs: 5000 });
    await first.campaign('first');
    const second = new EtcdElection({ hosts: cluster.hosts, name, ttlMs: 5000 });
    const conn = second.connection;
    const range = conn.range.bind(conn);
    let compacted = false;
    conn.range = async (what, request) => {
      const result = await range(what, request);
      if (what === 'wait for turn' && !compacted) {
        compacted = true;
        for (let i = 0; i < 5; i++) await first.connection.client.put(`${name}-noise`).value(String(i));
        const head = await first.connection.client.get(`${name}-noise`).exec();
        await first.connection.client.kv.compact({ revision: head.header.revision, physical: true });
      }
      return result;
    };
    let led = false;
    const campaign = second.campaign('second').then((l) => {
      led = true;
      return l;
    });
    await waitUntil(() => compacted);
    await sleep(300);
    expect(led).toBe(false);
    await first.resign();
    const l = await campaign;
    expect(await second.leader()).toMatchObject({ value: 'second', revision: l.revision });
    await first.close();
    await second.close();
  });
});

describe('three members', () => {
  let cluster: EtcdCluster;
  beforeAll(async () => {
    cluster = await startEtcd(3);
  });
  afterAll(async () => {
    await cluster?.stop();
  });

  it('killing the member the client talks to: the client moves on and the election goes on', async () => {
    const group = unique('failover');
    const storeA = new EtcdStore({ hosts: cluster.hosts, requestTimeoutMs: 1000 });
    const storeB = new EtcdStore({ hosts: cluster.hosts, requestTimeoutMs: 1000 });
    const a = new LeaderElector({ store: storeA, group, id: 'a', ttlMs: 3000 });
    const b = new LeaderElector({ store: storeB, group, id: 'b', ttlMs: 3000 });
    const aElected = new Promise<void>((r) => a.once('elected', () => r()));
    a.start();
    await aElected;
    b.start();
    await sleep(200);
    expect(b.isLeader).toBe(false);

    // Which member answers A's client? Kill that one.
    const members = await storeA.client.cluster.memberList({});
    const answer = await storeA.client.kv.range({ key: Buffer.from(group) });
    const talking = members.members.find((m) => m.ID === answer.header.member_id);
    const victim = cluster.members.find((m) => talking?.clientURLs.some((u) => u.includes(m.host)));
    expect(victim).toBeDefined();
    let renewalsAfter = 0;
    a.on('renewed', () => renewalsAfter++);
    let deposedA = false;
    a.on('deposed', () => (deposedA = true));
    // Never two leaders: checked at every election from here on.
    let twoLeaders = false;
    const checkOne = (): void => {
      if (a.isLeader && b.isLeader) twoLeaders = true;
    };
    a.on('elected', checkOne);
    b.on('elected', checkOne);
    await cluster.kill(victim!);

    // A keeps leading through the other members; or, at worst (its renewals outlasted its
    // deadline while the client moved on and the cluster re-elected), it stepped down and a
    // node leads again once A's etcd lease is gone.
    await waitUntil(() => renewalsAfter >= 2 || deposedA, 15_000);
    await waitUntil(() => a.isLeader || b.isLeader, 15_000);
    expect(twoLeaders).toBe(false);
    expect(a.isLeader && b.isLeader).toBe(false);

    // The election goes on: A steps down, B leads, through the surviving members.
    const bElected = b.isLeader ? Promise.resolve() : new Promise<void>((r) => b.once('elected', () => r()));
    await a.stop();
    await bElected;
    expect(await storeB.read(group)).toMatchObject({ owner: b.owner });
    await b.stop();
    await storeA.close();
    await storeB.close();
  });
});
