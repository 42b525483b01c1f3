/**
 * Leader election on the ZooKeeper store: graceful handoff and crash failover with campaigner
 * processes on one private ZooKeeper (test/fixtures/zookeeper.ts: tickTime 100 ms,
 * minSessionTimeout 200 ms), a fresh chroot per run.
 *
 * Handoff is pushed: the stopping leader's release removes its node, and the waiting candidates'
 * data watch on that node fires. Crash failover is ZooKeeper's: the dead leader's session expires
 * a session timeout (the TTL) after the last request the server heard, on ZooKeeper's tick-sized
 * expiry buckets, then the node goes and the watch fires. The goal is stated on that floor.
 */
import { randomBytes } from 'node:crypto';
import { electionBenchmark } from './election.js';
import type { Benchmark } from './lib/types.js';
import { startZookeeper } from '../test/fixtures/zookeeper.js';
import type { ZookeeperServer } from '../test/fixtures/zookeeper.js';

const TTL_MS = 1500;
let server: Promise<ZookeeperServer> | null = null;

async function freshZookeeper(): Promise<{ storeArg: string; cleanup: () => Promise<void> }> {
  server ??= startZookeeper();
  const s = await server;
  return { storeArg: `${s.url}/bench-${randomBytes(4).toString('hex')}`, cleanup: async () => {} };
}

export const zookeeperBenchmarks: readonly Benchmark[] = [
  electionBenchmark({
    name: 'zookeeper-election',
    target: 'zookeeper',
    tags: ['zookeeper', 'zk'],
    ttlMs: TTL_MS,
    nodes: 3,
    prepare: freshZookeeper,
    handoffGoal: { stat: 'p50', max: 10, label: '10 ms (ZooKeeper watch push)' },
    // ZooKeeper decides expiry: the session timeout (= TTL here) on 100 ms tick buckets, + 30 ms.
    crashGoal: { stat: 'p50', max: TTL_MS + 100 + 30, label: 'session timeout (TTL) + one tick + 30 ms' },
  }),
];
