/**
 * Every store the chaos suite runs against. A store joins by one line in `chaosBackends`: an
 * entry (in test/chaos/stores/NAME.ts) that says which faults it supports and how to start a
 * private instance, build its URL (possibly through the fault proxies), slow it, restart it, and
 * kill and restart its members.
 *
 * `memory` is not here: it lives inside one process, and the chaos suite is about many processes
 * sharing one store (it runs in the contract suite and the simulator instead).
 */
import type { ChaosBackend } from './stores/types.js';
import { etcdChaos } from './stores/etcd.js';
import { mysqlChaos } from './stores/mysql.js';
import { postgresChaos } from './stores/postgres.js';
import { raftChaos } from './stores/raft.js';
import { redisChaos } from './stores/redis.js';
import { redlockChaos } from './stores/redlock.js';
import { sqliteChaos } from './stores/sqlite.js';
import { zookeeperChaos } from './stores/zookeeper.js';
import { azureChaos } from './stores/azure.js';

export type { ChaosBackend, ChaosInstance, ChaosStartContext, ChaosWorkload, FaultKind } from './stores/types.js';

export const chaosBackends: readonly ChaosBackend[] = [
  sqliteChaos,
  redisChaos,
  postgresChaos,
  mysqlChaos,
  etcdChaos,
  redlockChaos,
  raftChaos,
  zookeeperChaos,
  azureChaos,
];

export function chaosBackend(name: string): ChaosBackend | undefined {
  return chaosBackends.find((b) => b.name === name);
}
