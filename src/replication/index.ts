/**
 * Replication: the leader's fenced log, tailed by followers that apply it to their own projection.
 */
export { Follower } from './follower.js';
export type { ApplyBatchFn, ApplyFn, FollowerEvents, FollowerLag, FollowerOptions } from './follower.js';
export { ApplyError, OffsetMismatchError } from './errors.js';
export { mysqlSink, postgresSink, sqliteSink } from './sinks.js';
export type { FollowerSink, MysqlSinkConnection, MysqlSinkPool, PgSinkClient, PgSinkPool, SinkOptions, SqliteSinkDatabase } from './sinks.js';
