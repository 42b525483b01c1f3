/**
 * `tenure/etcd`: the etcd store and, beside it, Go-compatible `EtcdElection`, `EtcdMutex` and
 * `EtcdSession`.
 *
 * Why Election and Mutex live with the store and not in `election/` or `locks/`: they are not
 * built on the Store interface but on etcd's key layout, and that layout is shared. A tenure
 * lease named N, Go's `concurrency.Election`/`concurrency.Mutex` on N and `etcdctl elect N` /
 * `etcdctl lock N` are all the same keys `N/<etcd lease id, lowercase hex>`, and the lowest
 * create revision holds them all (`keys.ts`). Keeping that compatible needs one `KeyLayout`, one
 * connection (raw txn, lease, watch) and one queue protocol (`candidacy.ts`, `candidate-watch.ts`)
 * for the three; outside this folder they would have to reach into the store's internals, or the
 * layout would be written twice and could drift from Go's. The higher layers (`LeaderElector`,
 * `Lock`) still see etcd only through `EtcdStore`, which implements Store.
 *
 * The store itself is split by concern: `etcd-store.ts` (the Store calls), `handover.ts` (the
 * waiting room a release hands over to) and `spare-leases.ts` (leases waiting candidates keep
 * ready).
 */
export { EtcdStore, type EtcdStoreOptions } from './etcd-store.js';
export { EtcdConnection, type EtcdConnectionOptions } from './connection.js';
export { EtcdSession, type EtcdSessionOptions } from './session.js';
export { EtcdElection, type EtcdElectionOptions, type EtcdCandidate, type EtcdLeadership } from './election.js';
export { EtcdMutex, type EtcdMutexOptions, type EtcdLockHandle } from './mutex.js';
