/**
 * `tenure/fencing`: everything a fenced write needs, in one place.
 *
 * - the fencing token, its text form `LEASE#TERM` and the fence decision (defined in `core/`,
 *   where the stores can reach them, and re-exported here);
 * - the token context (`runFenced`, `currentToken`, `requireFence`): the token flows with the
 *   leader's work, and a fenced helper called outside a leadership throws, never writes unfenced;
 * - `fencedUpdate`, the fenced row on the user's own SQL table, for PostgreSQL, MySQL and SQLite,
 *   built on a small dialect object (`postgresDialect`, `mysqlDialect`, `sqliteDialect`);
 * - HTTP: `fencedFetch` / `fencingHeaders` on the client, `httpFence` (node:http, Express, Fastify
 *   middleware and a guard checking the term in the handler's own transaction) on the server;
 * - the helpers that carry a token to the resource it guards: messages, SQL commands.
 *
 * This folder imports only `core/`; the drivers are the caller's, passed in.
 */
export * from './token.js';
export { runFenced, currentFence, currentToken, requireFence, refuse, timeFencedWrite, type FenceScope } from './context.js';
export { fencedUpdate, type FencedUpdate, type FencedUpdateResult } from './fenced-update.js';
export { postgresDialect, mysqlDialect, sqliteDialect } from './dialects.js';
export type { SqlDialect, MissingObject, PgQueryable, MysqlExecutor, SqliteDatabase } from './dialects.js';
export type { RowValue } from './rows.js';
export { fencedInsert, fencedCompareAndSet, applyOnce, createIdempotencyTable, OUTCOME_MAX_BYTES } from './sql-commands.js';
export type { FenceColumns, FencedInsert, FencedInsertResult, FencedCompareAndSet, CompareAndSetResult, ApplyOnceOptions, ApplyOnceResult, StoredOutcome } from './sql-commands.js';
export { createEpochStore, epochLease, withEpoch } from './epoch.js';
export type { EpochStore, EpochStoreOptions, SqlEpochOptions, RedisEpochOptions, RedisEpochClient, EtcdEpochOptions, EtcdEpochClient, EpochElector, EpochContext, EpochLeadership } from './epoch.js';
export { fencedFetch, fencingHeaders, checkFencedResponse, formatFencingHeader, parseFencingHeader, FENCING_TOKEN_HEADER, FENCING_HEADER_MAX, FENCING_PROBLEMS } from './http.js';
export type { FencingProblem, FencingHeader, FencedRequestInit } from './http.js';
export { httpFence, HttpFence } from './http-guard.js';
export type { HttpFenceOptions, HttpFenceGuard, Fenced, FencedRequestHead, ProblemResponse, FastifyLike, FastifyRequestLike, FastifyReplyLike, FastifyFencePlugin } from './http-guard.js';
export {
  FENCING_SEQ_HEADER,
  messageLimits,
  nextMessageFence,
  readMessageFence,
  settles,
  FencedConsumer,
  ConsumerHaltedError,
  sqlMessageLedger,
  memoryMessageLedger,
  type MessageFence,
  type FencedPublishOptions,
  type MessageMark,
  type MessageMetadata,
  type MessageVerdict,
  type MessageLedger,
  type LedgerStep,
  type LedgerBatchState,
  type LedgerBatchStep,
  type MessageCounts,
  type FencedConsumerOptions,
  type SqlMessageLedger,
  type SqlMessageLedgerOptions,
} from './messages.js';
export { FENCED_JETSTREAM_CONSUMER, FENCED_JETSTREAM_CONSUMER_BY_ID, publishFencedNats, publishFencedJetStream, handleJetStreamMessage, consumeFencedJetStream, handleNatsMessage } from './nats.js';
export type { NatsHeaders, NatsPublisher, JetStreamPublisher, NatsMessage, JetStreamMessage, FencedNatsPublishOptions, FencedJetStreamOptions, ConsumeFencedJetStreamOptions } from './nats.js';
export { publishFencedAmqp, handleAmqpMessage } from './amqp.js';
export type { AmqpChannel, AmqpMessage, AmqpConsumerChannel, AmqpPublishOptions, FencedAmqpPublishOptions } from './amqp.js';
export { publishFencedMqtt, fencedMqttAcks, MQTT_REFUSED_REASON } from './mqtt.js';
export type { MqttPublisher, MqttPublishOptions, MqttPacket, MqttAckHandler, FencedMqttPublishOptions } from './mqtt.js';
