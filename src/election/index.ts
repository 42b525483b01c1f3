export { LeaderElector, maxTransferMs } from './leader-elector.js';
export type { LeaderElectorOptions, LeaderElectorEvents, ElectorHealth, LeaderContext, LeaderWork, DeposedReason, RunWhileLeaderOptions, ConfirmedLeadership, TransferOptions } from './leader-elector.js';
// Moved to core (used outside election too); re-exported here for compatibility.
export { TypedEmitter } from '../core/typed-emitter.js';
export { LeaseSet } from './lease-set.js';
export type { LeaseSetOptions, LeaseSetEvents, HeldLease, LeaseEndReason } from './lease-set.js';
export { GroupSet, GROUP_SET_DEFAULTS } from './group-set.js';
export type { GroupSetOptions, GroupSetEvents, GroupContext, GroupLossReason, GroupGained, GroupLost } from './group-set.js';
export { Partitions, assignShards, shardNames, partitionOwners, PARTITION_LIMITS } from './partitions.js';
export type { PartitionsOptions, PartitionsEvents, PartitionView, PartitionOwner, ShardContext, ShardGained, ShardLost } from './partitions.js';
