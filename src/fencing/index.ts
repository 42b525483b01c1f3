/**
 * `tenure/fencing`: everything a fenced write needs, in one place.
 *
 * - the fencing token, its text form `LEASE#TERM` and the fence decision (defined in `core/`,
 *   where the stores can reach them, and re-exported here);
 * - the token context (`runFenced`, `currentToken`, `requireFence`): the token flows with the
 *   leader's work, and a fenced helper called outside a leadership throws, never writes unfenced;
 * - `fencedUpdate`, the fenced row on the user's own SQL table, for PostgreSQL, MySQL and SQLite,
 *   built on a small dialect object (`postgresDialect`, `mysqlDialect`, `sqliteDialect`);
 * - the helpers that carry a token to the resource it guards: HTTP, messages, SQL commands.
 *
 * This folder imports only `core/`; the drivers are the caller's, passed in.
 */
export * from './token.js';
export { runFenced, currentFence, currentToken, requireFence, refuse, timeFencedWrite, type FenceScope } from './context.js';
export { fencedUpdate, type FencedUpdate, type FencedUpdateResult } from './fenced-update.js';
export { postgresDialect, mysqlDialect, sqliteDialect } from './dialects.js';
export type { SqlDialect, MissingObject, PgQueryable, MysqlExecutor, SqliteDatabase } from './dialects.js';
export type { RowValue } from './rows.js';
export {
  FENCING_TOKEN_HEADER,
  FENCING_SEQ_HEADER,
  messageLimits,
  nextMessageFence,
  readMessageFence,
  settles,
  FencedConsumer,
  sqlMessageLedger,
  type MessageFence,
  type FencedPublishOptions,
  type MessageMark,
  type MessageMetadata,
  type MessageVerdict,
  type MessageLedger,
  type MessageCounts,
  type FencedConsumerOptions,
  type SqlMessageLedger,
  type SqlMessageLedgerOptions,
} from './messages.js';
export { publishFencedNats, publishFencedJetStream, handleJetStreamMessage, consumeFencedJetStream, handleNatsMessage } from './nats.js';
export type { NatsHeaders, NatsPublisher, JetStreamPublisher, NatsMessage, JetStreamMessage, FencedNatsPublishOptions } from './nats.js';
export { publishFencedAmqp, handleAmqpMessage } from './amqp.js';
export type { AmqpChannel, AmqpMessage, AmqpConsumerChannel, AmqpPublishOptions, FencedAmqpPublishOptions } from './amqp.js';
export { publishFencedMqtt, fencedMqttAcks, MQTT_REFUSED_REASON } from './mqtt.js';
export type { MqttPublisher, MqttPublishOptions, MqttPacket, MqttAckHandler, FencedMqttPublishOptions } from './mqtt.js';
