/**
 * Replication: the leader's fenced log, tailed by followers that apply it to their own projection
 * (Model B), the leader's shared state cell, read or followed by everyone (Model A), the leader's
 * decisions followed through a broker (Model C), reads routed by lag, and work the leader hands out.
 */
export { Follower } from './follower.js';
export type { ApplyBatchFn, ApplyFn, FollowerEvents, FollowerLag, FollowerOptions } from './follower.js';
export { ApplyError, InvalidMessageError, OffsetMismatchError } from './errors.js';
export { BrokerFollower, TERM_MARKER_PAYLOAD, checkPartition, openTerm, partitionOf } from './broker.js';
export type {
  ApplyDecisionBatchFn,
  ApplyDecisionFn,
  BrokerCounts,
  BrokerDecision,
  BrokerDelivery,
  BrokerFollowerEvents,
  BrokerFollowerOptions,
  BrokerPublisher,
  BrokerSource,
  BrokerSubscription,
  PublishDecisionOptions,
} from './broker.js';
export { ensureNatsDecisionStream, natsDecisionPublisher, natsDecisionSource } from './broker-nats.js';
export type { NatsDecisionClient, NatsDecisionManager, NatsDecisionMessage, NatsDecisionMessages, NatsDecisionOptions, NatsDecisionConsumerConfig, NatsDecisionSourceOptions } from './broker-nats.js';
export { amqpDecisionPublisher, amqpDecisionSource, declareAmqpDecisionQueues } from './broker-amqp.js';
export type {
  AmqpDecisionAdminChannel,
  AmqpDecisionChannel,
  AmqpDecisionConfirmChannel,
  AmqpDecisionConnection,
  AmqpDecisionMessage,
  AmqpDecisionOptions,
  AmqpDecisionSourceOptions,
} from './broker-amqp.js';
export { mysqlSink, postgresSink, sqliteSink } from './sinks.js';
export { LAG_UNKNOWN_MS, LagAdvert, followerLeasePrefix } from './lag-advert.js';
export type { AdvertisedFollower, FollowerAdvert, LagAdvertEvents, LagAdvertOptions } from './lag-advert.js';
export { ReadRouter } from './read-router.js';
export type { FollowerTarget, LeaderTarget, LocalLeader, ReadFn, ReadRouterOptions, ReadTarget, RouteOptions, RoutedRead } from './read-router.js';
export { StateCell } from './state-cell.js';
export type { CellFollowOptions, CellSubscribeOptions, CellUpdateOptions, CellVersion, CellWriteOptions, StateCellOptions } from './state-cell.js';
export { WorkCoordinator } from './work-coordinator.js';
export type { ItemResult, IgnoreReason, LeadershipSource, ReassignReason, RunOptions, WorkCoordinatorEvents, WorkCoordinatorOptions, WorkItem, WorkReport } from './work-coordinator.js';
export { Worker } from './work-worker.js';
export type { WorkContext, WorkDropReason, WorkerEvents, WorkerOptions, WorkHandler } from './work-worker.js';
export { WORK_DEFAULTS, WORK_LIMITS } from './work.js';
export { WorkFailedError } from './errors.js';
export type { FollowerSink, PartitionMark, PartitionSink, MysqlSinkConnection, MysqlSinkPool, PgSinkClient, PgSinkPool, SinkOptions, SqliteSinkDatabase } from './sinks.js';
