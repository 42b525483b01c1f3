/**
 * The ZooKeeper backend as the contract suite runs it: one private server per test process, a
 * fresh random chroot per store.
 */
import { randomBytes } from 'node:crypto';
import type { Backend } from '../contract/backends.js';
import { ZookeeperStore } from '../../src/stores/zookeeper/index.js';
import { sharedZookeeper } from '../fixtures/zookeeper.js';

export const zookeeperBackend: Backend = {
  name: 'zookeeper',
  capabilities: {
    renewMany: 'not implemented: each lease is its own znode, renewed with its own versioned set',
    watch: true,
    streamPush: true,
    streamClock: true,
  },
  // A lease lives in a session whose timeout is at least the server's minSessionTimeout (200 ms in
  // the private server, 2 ticks in general): a holder's node outlives a shorter TTL when the holder
  // is gone, since ZooKeeper, not the client, decides when the session has expired.
  minTtlMs: 200,
  open: async () => {
    const server = await sharedZookeeper();
    const chroot = `/contract-${randomBytes(6).toString('hex')}`;
    const store = new ZookeeperStore({ hosts: [server.host], chroot });
    return { store, cleanup: async () => { await store.close(); } };
  },
};
