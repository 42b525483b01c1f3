/**
 * `tenure/zookeeper`: the ZooKeeper store (`zk://host:port[,host:port…][/chroot]`).
 */
export { ZookeeperStore, type ZookeeperStoreOptions } from './zookeeper-store.js';
export { Layout as ZookeeperLayout, encodeName as encodeZookeeperName } from './layout.js';
