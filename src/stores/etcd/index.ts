export { EtcdStore, type EtcdStoreOptions } from './etcd-store.js';
export { EtcdConnection, type EtcdConnectionOptions } from './connection.js';
export { EtcdSession, type EtcdSessionOptions } from './session.js';
export { EtcdElection, type EtcdElectionOptions, type EtcdCandidate, type EtcdLeadership } from './election.js';
export { EtcdMutex, type EtcdMutexOptions, type EtcdLockHandle } from './mutex.js';
