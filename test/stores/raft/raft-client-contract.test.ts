import { afterAll } from 'vitest';
import { storeContract } from '../../contract/store.contract.js';
import { openStore } from '../../../src/open.js';
import { ServeCluster } from './serve-cluster.js';

// The whole Store contract through raft:// (openStore, as every command opens it) against a fresh
// cluster of three `tenure raft serve` processes per scenario: the contract's names isolate only
// within a fresh store. The next scenario's cluster starts while one runs, so process start-up and
// the election overlap the scenario instead of adding to it. (Two ahead was slower on 2 shared
// cores: 339 s against 256 s at load 16 to 21.)
const AHEAD = 1;
const ready: Promise<ServeCluster>[] = [];
const startOne = (): Promise<ServeCluster> => {
  const p = ServeCluster.start();
  p.catch(() => {}); // awaited by the scenario that takes it
  return p;
};

afterAll(async () => {
  const left = await Promise.all(ready.splice(0).map((p) => p.catch(() => undefined)));
  await Promise.all(left.map((c) => c?.close()));
});

storeContract({
  name: 'raft:// (3 tenure raft serve processes)',
  capabilities: { renewMany: true, watch: true, streamPush: true, streamClock: true },
  // Each call is a round trip to another process, then a quorum's fdatasyncs: a 100 ms lease
  // lapsed between two calls on this machine at a load of 16, and a 500 ms one between two
  // acquires at a load of 22. At 1000 ms, a lock's release under CI load (stop waits for it until
  // the lease's deadline, 600-900 ms away) once went unanswered in time, so the next acquire found
  // the name still held. Scenarios that wait for expiry use at least this TTL (as for etcd).
  minTtlMs: 2000,
  open: async () => {
    while (ready.length < AHEAD + 1) ready.push(startOne());
    const cluster = await ready.shift()!;
    const store = await openStore(cluster.url());
    return { store, cleanup: async () => { await store.close(); await cluster.close(); } };
  },
});
