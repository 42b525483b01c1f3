/**
 * The etcd backend as the contract suite runs it: one private etcd per test process, a fresh
 * random namespace per store.
 */
import { randomBytes } from 'node:crypto';
import type { Backend } from '../contract/backends.js';
import { EtcdStore } from '../../src/stores/etcd/index.js';
import { sharedEtcd } from './etcd-harness.js';

export const etcdBackend: Backend = {
  name: 'etcd',
  capabilities: {
    renewMany: 'not implemented: an etcd lease is kept alive by its own keepalive, so the store renews one by one', watch: true,
    streamPush: true,
    streamClock: 'etcd has no clock a client can read: entries carry the appending client\'s wall clock, and lag in ms is not measured',
  },
  // etcd leases are whole seconds, 1 s at least (with the harness's election timeout), and its
  // lessor deletes expired leases' keys on a 500 ms cycle, then commits the revoke through raft.
  minTtlMs: 1000,
  expiryLagMs: 900,
  open: async () => {
    const cluster = await sharedEtcd();
    const namespace = `contract-${randomBytes(6).toString('hex')}/`;
    const store = new EtcdStore({ hosts: cluster.hosts, namespace });
    const admin = new EtcdStore({ hosts: cluster.hosts });
    return {
      store,
      cleanup: async () => {
        await store.close();
        await admin.client.delete().prefix(namespace);
        await admin.close();
      },
    };
  },
};
