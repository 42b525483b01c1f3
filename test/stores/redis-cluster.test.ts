/**
 * The Redis store on a real Redis Cluster: three private masters (no persistence) joined with
 * `redis-cli --cluster create`, used through an ioredis Cluster client. Each store's keys share
 * one slot through the {hash tag} in its prefix, so the lifecycle is run once on a slot of every
 * master: acquire, renew, release, list, fenced append and read, a stale token refused; then push
 * through the Cluster's pub/sub to a watcher on another client.
 */
import { Cluster } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { InvalidArgumentError, StaleTermError } from '../../src/core/index.js';
import type { Lease } from '../../src/core/index.js';
import { RedisStore } from '../../src/stores/redis/index.js';
import { startCluster, waitUntil } from './redis-topologies.js';
import type { PrivateCluster } from './redis-topologies.js';

let cluster: PrivateCluster;
const clients: Cluster[] = [];
const stores: RedisStore[] = [];

function client(): Cluster {
  const c = new Cluster(cluster.startupNodes, { redisOptions: { maxRetriesPerRequest: 0 } });
  c.on('error', () => {});
  clients.push(c);
  return c;
}

function store(c: Cluster, keyPrefix: string): RedisStore {
  const s = new RedisStore({ client: c, keyPrefix, commandTimeoutMs: 3000 });
  stores.push(s);
  return s;
}

/** For each master (by port), a hash tag whose slot it serves. */
async function tagPerMaster(c: Cluster): Promise<Map<number, string>> {
  const slots = await c.cluster('SLOTS');
  const owner = (slot: number): number => Number(slots.find(([from, to]) => slot >= from && slot <= to)![2]![1]);
  const tags = new Map<number, string>();
  for (let i = 0; tags.size < cluster.nodes.length && i < 10_000; i++) {
    const tag = `cl${i}`;
    const port = owner(Number(await c.cluster('KEYSLOT', tag)));
    if (!tags.has(port)) tags.set(port, tag);
  }
  return tags;
}

beforeAll(async () => {
  cluster = await startCluster(3);
});

afterAll(async () => {
  for (const s of stores) await s.close();
  for (const c of clients) c.disconnect();
  await cluster?.stop();
});

describe('Redis store on a 3-master Cluster', () => {
  it('refuses a key prefix without a {hash tag}', () => {
    expect(() => new RedisStore({ client: client(), keyPrefix: 'no-tag:' })).toThrow(InvalidArgumentError);
  });

  it('acquires, renews, releases, lists and fences on a slot of every master', async () => {
    const c1 = client();
    const c2 = client();
    const tags = await tagPerMaster(c1);
    expect([...tags.keys()].sort()).toEqual(cluster.nodes.map((n) => n.port).sort());
    for (const [port, tag] of tags) {
      const a = store(c1, `{${tag}}:`);
      const b = store(c2, `{${tag}}:`);

      const first = await a.acquire('g', 'a~1', 5000, { url: 'http://a' });
      expect(first).toMatchObject({ acquired: true, lease: { owner: 'a~1', term: 1, meta: { url: 'http://a' }, ttlMs: 5000 } });
      expect(first.lease.remainingMs).toBeGreaterThan(0);
      expect(await b.acquire('g', 'b~1', 5000)).toMatchObject({ acquired: false, lease: { owner: 'a~1', term: 1 } });
      expect(await a.renew('g', 'a~1', 1, 8000)).toMatchObject({ renewed: true, lease: { owner: 'a~1', term: 1, ttlMs: 8000 } });
      expect((await b.renew('g', 'b~1', 1, 8000)).renewed).toBe(false);
      expect(await a.appendFenced({ lease: 'g', term: 1 }, 'log', 'one')).toBe(1);

      expect(await b.release('g', 'b~1', 1)).toBe(false); // not the holder
      expect(await a.release('g', 'a~1', 1)).toBe(true);
      expect(await b.read('g')).toBeNull();
      const second = await b.acquire('g', 'b~1', 5000);
      expect(second).toMatchObject({ acquired: true, lease: { owner: 'b~1', term: 2 } });
      expect(await b.appendFenced({ lease: 'g', term: 2 }, 'log', 'two')).toBe(2);
      // The old holder's token is stale now, whichever client sends it.
      await expect(a.appendFenced({ lease: 'g', term: 1 }, 'log', 'late')).rejects.toBeInstanceOf(StaleTermError);
      await expect(b.appendFenced({ lease: 'g', term: 1 }, 'log', 'late')).rejects.toBeInstanceOf(StaleTermError);
      expect((await a.readStream('log')).map((e) => [e.seq, e.term, e.payload])).toEqual([
        [1, 1, 'one'],
        [2, 2, 'two'],
      ]);
      await b.acquire('h', 'b~1', 5000);
      expect((await a.list()).map((l) => `${l.name}:${l.owner}@${l.term}`)).toEqual(['g:b~1@2', 'h:b~1@1']);
      expect(await a.renewMany('b~1', [{ name: 'g', term: 2 }, { name: 'h', term: 1 }], 6000)).toMatchObject([{ renewed: true }, { renewed: true }]);

      // Every key of the store is on the master that serves its tag.
      const onNode = await cluster.nodes.find((n) => n.port === port)!.admin((c) => c.exists(`{${tag}}:lease:g`, `{${tag}}:term:g`, `{${tag}}:fence:g`, `{${tag}}:stream:log`, `{${tag}}:names`));
      expect(onNode).toBe(5);
    }
  });

  it('pushes takeover and release to a watcher on another Cluster client', async () => {
    const a = store(client(), '{push}:');
    const b = store(client(), '{push}:');
    const seen: string[] = [];
    const stop = b.watch('g', (l: Lease | null) => seen.push(l ? `${l.owner}@${l.term}` : 'free'));
    await b.read('g'); // waits for the subscription to be in place
    const { lease } = await a.acquire('g', 'a~1', 5000);
    await a.renew('g', 'a~1', lease.term, 5000); // a renewal is not a change of holder
    await a.release('g', 'a~1', lease.term);
    await a.acquire('g', 'c~1', 5000);
    await waitUntil('the watcher saw three changes', async () => seen.length >= 3, 5000);
    expect(seen).toEqual(['a~1@1', 'free', 'c~1@2']);
    stop();
  });
});
