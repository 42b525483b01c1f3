/**
 * Store.purge(prefix) on every store that has it (memory, SQLite, PostgreSQL, MySQL, Redis, etcd, ZooKeeper, Azure Blob, the
 * Raft store embedded and through raft://): it deletes
 * the leases, fences and streams whose names start with the prefix, and nothing else: not a name
 * that merely contains it, not one that differs in one character, and `%` / `_` in the prefix are
 * plain characters, never LIKE patterns. A purged name starts again at term 1.
 */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { InvalidArgumentError } from '../../src/core/index.js';
import type { Store } from '../../src/core/index.js';
import { openStore } from '../../src/open.js';
import { backends } from '../contract/backends.js';
import type { Backend } from '../contract/backends.js';
import { RaftCluster } from './raft/raft-cluster.js';
import { ServeCluster } from './raft/serve-cluster.js';

const raftBackends: Pick<Backend, 'name' | 'open'>[] = [
  {
    name: 'raft (embedded, 3 nodes)',
    open: async () => {
      const cluster = await RaftCluster.start();
      cluster.stores.get(1)!.campaign();
      const store = await cluster.leader();
      return { store, cleanup: () => cluster.close() };
    },
  },
  {
    // What `tenure chaos --store raft://…` opens: the client store, its purge one write to the cluster.
    name: 'raft:// (3 tenure raft serve processes)',
    open: async () => {
      const cluster = await ServeCluster.start();
      const store = await openStore(cluster.url());
      return { store, cleanup: async () => { await store.close(); await cluster.close(); } };
    },
  },
];

const purging: Pick<Backend, 'name' | 'open'>[] = [
  ...backends.filter((b) => ['memory', 'sqlite', 'postgres', 'mysql', 'redis', 'etcd', 'zookeeper', 'azblob'].includes(b.name)),
  ...raftBackends,
];

for (const backend of purging) {
  describe(`Store.purge on ${backend.name}`, () => {
    let store: Store;
    let cleanup: () => Promise<void>;
    beforeEach(async () => {
      ({ store, cleanup } = await backend.open());
    });
    afterEach(async () => {
      await cleanup();
    });

    /** A live lease `name` with one entry in stream `name.log`. */
    async function make(name: string): Promise<void> {
      const got = await store.acquire(name, 'o~1', 60_000);
      if (!got.acquired) throw new Error(`${name} not acquired`);
      await store.appendFenced({ lease: name, term: got.lease.term }, `${name}.log`, `entry of ${name}`);
    }

    it('deletes exactly the names under the prefix', async () => {
      expect(typeof store.purge).toBe('function');
      const inside = ['run-1/g0', 'run-1/g1'];
      const outside = ['run-10/g0', 'run-2/g0', 'x/run-1/g0', 'run-1', 'run%1/g0', 'runx1/g0'];
      for (const n of [...inside, ...outside]) await make(n);
      const purged = await store.purge!('run-1/');
      // two leases, two fences, two stream entries (plus heads on stores that keep them)
      expect(purged).toBeGreaterThanOrEqual(6);
      for (const n of inside) {
        expect(await store.read(n)).toBeNull();
        expect(await store.readStream(`${n}.log`, { after: 0 })).toEqual([]);
      }
      for (const n of outside) {
        expect((await store.read(n))?.owner).toBe('o~1');
        expect((await store.readStream(`${n}.log`, { after: 0 })).map((e) => e.payload)).toEqual([`entry of ${n}`]);
      }
      expect((await store.list('run-1/')).length).toBe(0);
      // A purged name is new again: term 1, and its stream starts at seq 1.
      const again = await store.acquire('run-1/g0', 'o~2', 60_000);
      expect(again.acquired && again.lease.term).toBe(1);
      expect(await store.appendFenced({ lease: 'run-1/g0', term: 1 }, 'run-1/g0.log', 'new')).toBe(1);
      expect(await store.purge!('nothing-here/')).toBe(0);
    });

    it('treats % and _ as plain characters, and refuses an empty prefix', async () => {
      for (const n of ['a%/g', 'ab/g', 'a_/g', 'aX/g']) await make(n);
      await store.purge!('a%');
      await store.purge!('a_');
      expect(await store.read('a%/g')).toBeNull();
      expect(await store.read('a_/g')).toBeNull();
      expect((await store.read('ab/g'))?.owner).toBe('o~1');
      expect((await store.read('aX/g'))?.owner).toBe('o~1');
      await expect(store.purge!('')).rejects.toThrow(InvalidArgumentError);
      expect((await store.read('ab/g'))?.owner).toBe('o~1');
    });
  });
}
