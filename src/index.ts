/**
 * tenure: leader election, leases, fencing tokens and distributed locks.
 */
export * from './core/index.js';
export * from './election/index.js';
export * from './locks/index.js';
export { openStore, parseStoreUrl, TenureStore, DEFAULT_STORE_URL } from './open.js';
export type { StoreOptions } from './open.js';
export { MemoryStore } from './stores/memory/index.js';
export { fencedUpdate, postgresDialect, mysqlDialect, sqliteDialect, formatToken, parseToken, runFenced, currentToken, requireFence } from './fencing/index.js';
export type { FencedUpdate, FencedUpdateResult, SqlDialect, RowValue, FenceScope } from './fencing/index.js';
export { fencedFetch, fencingHeaders, httpFence } from './fencing/index.js';
export type { HttpFence, HttpFenceOptions, HttpFenceGuard } from './fencing/index.js';
export { collectMetrics, healthHandler, healthReport, lockHealth, metricsHandler, dashboardHandler, DashboardSource } from './observe/index.js';
export type { GroupHealth, HealthHandlerOptions, HealthReport, HealthSubject, HttpHandler, LockHealth, LagSource, MetricSources, MetricsOptions, DashboardHandler, DashboardOptions, DashboardSnapshot, DashboardSourceOptions, DashboardUpdate, FollowerView, GroupView, StoreStatus } from './observe/index.js';
export type { TenureStoreEvents } from './open.js';
export { Follower, ApplyError, OffsetMismatchError, InvalidMessageError, BrokerFollower, StateCell, sqliteSink, postgresSink, mysqlSink, LagAdvert, LAG_UNKNOWN_MS, ReadRouter, followerLeasePrefix } from './replication/index.js';
export type { ApplyBatchFn, ApplyFn, FollowerEvents, FollowerLag, FollowerOptions, FollowerSink, SinkOptions, BrokerDecision, BrokerFollowerOptions, PartitionMark, PartitionSink } from './replication/index.js';
export type { FollowerAdvert, LagAdvertOptions, LagAdvertEvents, ReadRouterOptions, RouteOptions, ReadTarget, FollowerTarget, LeaderTarget, RoutedRead, ReadFn } from './replication/index.js';
export type { CellFollowOptions, CellSubscribeOptions, CellUpdateOptions, CellVersion, CellWriteOptions, StateCellOptions } from './replication/index.js';
export { WorkCoordinator, Worker, WorkFailedError, WORK_DEFAULTS, WORK_LIMITS } from './replication/index.js';
export type { ItemResult, RunOptions, WorkContext, WorkCoordinatorEvents, WorkCoordinatorOptions, WorkerEvents, WorkerOptions, WorkHandler, WorkItem, WorkReport } from './replication/index.js';
