/**
 * Model C on RabbitMQ streams, over AMQP 0-9-1: one stream queue per partition (`<prefix>.<P>`,
 * declared with `x-queue-type: stream`). The leader publishes with publishFencedAmqp (the token
 * in the `Fencing-Token` header) on a confirm channel, and a publish resolves once the broker
 * confirmed it. A follower consumes each partition's queue on its own channel with a prefetch
 * (stream queues require one) from the offset after its mark (`x-stream-offset`); each message
 * carries its offset in the `x-stream-offset` header, and is acknowledged (cumulatively, the last
 * of each batch with `multiple`) only after the transaction that handled it committed (the acknowledgement gives the prefetch credit back; a
 * stream keeps its messages whatever the consumer acknowledges).
 *
 * Stream queues need RabbitMQ 3.9 or later with the `stream_queue` feature flag enabled.
 * Nothing here imports `amqplib`: the connection and channels are the caller's.
 */
import { InvalidArgumentError } from '../core/index.js';
import { FENCING_TOKEN_HEADER } from '../fencing/http.js';
import { publishFencedAmqp } from '../fencing/amqp.js';
import type { AmqpPublishOptions } from '../fencing/amqp.js';
import { DeliveryInbox, TERM_MARKER_PAYLOAD, checkPartition, checkPayload } from './broker.js';
import type { BrokerPublisher, BrokerSource, BrokerSubscription, PublishDecisionOptions } from './broker.js';

/** A delivered amqplib message, as far as the follower reads it. */
export interface AmqpDecisionMessage {
  readonly content: Buffer;
  readonly properties: { readonly headers?: Record<string, unknown> | undefined };
}

/** An amqplib Channel, as far as a follower uses it. */
export interface AmqpDecisionChannel<M extends AmqpDecisionMessage = AmqpDecisionMessage> {
  prefetch(count: number, global?: boolean): Promise<unknown>;
  consume(queue: string, onMessage: (msg: M | null) => void, options?: { noAck?: boolean; arguments?: Record<string, unknown> }): Promise<{ consumerTag: string }>;
  ack(message: M, allUpTo?: boolean): void;
  close(): Promise<void>;
  on(event: 'error' | 'close', listener: (err?: unknown) => void): unknown;
}

/** An amqplib ConfirmChannel, as far as the leader uses it. */
export interface AmqpDecisionConfirmChannel {
  publish(exchange: string, routingKey: string, content: Buffer, options: AmqpPublishOptions, callback: (err: unknown) => void): boolean;
}

/** An amqplib Channel, as far as declaring the stream queues needs. */
export interface AmqpDecisionAdminChannel {
  assertQueue(queue: string, options: { durable: boolean; arguments: Record<string, unknown> }): Promise<unknown>;
}

/** An amqplib Connection, as far as a follower opens its channels. */
export interface AmqpDecisionConnection<M extends AmqpDecisionMessage = AmqpDecisionMessage> {
  createChannel(): Promise<AmqpDecisionChannel<M>>;
}

export interface AmqpDecisionOptions {
  /** The queues' prefix: partition P is the stream queue `<prefix>.<P>`. */
  readonly prefix: string;
}

export interface AmqpDecisionSourceOptions extends AmqpDecisionOptions {
  /** The consumer's prefetch per partition (messages delivered and not yet acknowledged): 1..10000 (default 256). */
  readonly prefetch?: number;
}

function prefixOf(options: AmqpDecisionOptions): string {
  if (typeof options !== 'object' || options === null) throw new InvalidArgumentError('options', 'expected { prefix }');
  const { prefix } = options;
  if (typeof prefix !== 'string' || !/^[A-Za-z0-9_.-]{1,180}$/.test(prefix)) {
    throw new InvalidArgumentError('prefix', `expected 1..180 letters, digits, _, - and dots, got ${JSON.stringify(prefix)}`);
  }
  return prefix;
}

/** Declare one durable stream queue per partition (`x-queue-type: stream`); `maxLengthBytes` sets the stream's retention. */
export async function declareAmqpDecisionQueues(channel: AmqpDecisionAdminChannel, options: AmqpDecisionOptions & { readonly partitions: readonly string[]; readonly maxLengthBytes?: number }): Promise<void> {
  const prefix = prefixOf(options);
  if (!Array.isArray(options.partitions) || options.partitions.length === 0) throw new InvalidArgumentError('partitions', 'expected at least one partition');
  for (const p of options.partitions) {
    await channel.assertQueue(`${prefix}.${checkPartition(p)}`, {
      durable: true,
      arguments: { 'x-queue-type': 'stream', ...(options.maxLengthBytes !== undefined ? { 'x-max-length-bytes': options.maxLengthBytes } : {}) },
    });
  }
}

/** The leader's side: each decision published to the partition's stream queue (default exchange), resolved on the broker's confirm. */
export function amqpDecisionPublisher(channel: AmqpDecisionConfirmChannel, options: AmqpDecisionOptions): BrokerPublisher {
  const prefix = prefixOf(options);
  const send = (partition: string, payload: string, publishOptions: PublishDecisionOptions): Promise<void> =>
    new Promise<void>((resolve, reject) => {
      // publishFencedAmqp throws NoTokenError outside a leadership: the executor turns it into the rejection.
      publishFencedAmqp(
        { publish: (exchange, routingKey, content, o) => channel.publish(exchange, routingKey, content, o ?? {}, (err) => (err ? reject(err instanceof Error ? err : new Error(String(err))) : resolve())) },
        '',
        `${prefix}.${checkPartition(partition)}`,
        Buffer.from(payload, 'utf8'),
        { ...(publishOptions.token ? { token: publishOptions.token } : {}), publish: { persistent: true } },
      );
    });
  return {
    name: `amqp:${prefix}`,
    publish: async (partition, payload, publishOptions = {}) => send(partition, checkPayload(payload), publishOptions),
    publishMarker: async (partition, publishOptions = {}) => send(partition, TERM_MARKER_PAYLOAD, publishOptions),
  };
}

/** The followers' side: each partition's stream queue consumed on its own channel from the offset after the mark. */
export function amqpDecisionSource<M extends AmqpDecisionMessage>(connection: AmqpDecisionConnection<M>, options: AmqpDecisionSourceOptions): BrokerSource {
  const prefix = prefixOf(options);
  const prefetch = options.prefetch ?? 256;
  if (!Number.isInteger(prefetch) || prefetch < 1 || prefetch > 10_000) throw new InvalidArgumentError('prefetch', `expected a whole number in [1, 10000], got ${String(prefetch)}`);
  return {
    name: `amqp:${prefix}`,
    async subscribe(partition, after): Promise<BrokerSubscription> {
      const queue = `${prefix}.${checkPartition(partition)}`;
      const channel = await connection.createChannel();
      // The prefetch bounds what is delivered ahead of the apply: the inbox never holds more.
      const inbox = new DeliveryInbox(prefetch + 1);
      let closed = false;
      channel.on('error', (err) => inbox.fail(err instanceof Error ? err : new Error(String(err))));
      channel.on('close', () => {
        if (!closed) inbox.fail(new Error(`AMQP: the channel consuming ${queue} closed`));
      });
      try {
        await channel.prefetch(prefetch);
        await channel.consume(
          queue,
          (msg) => {
            if (msg === null) {
              inbox.fail(new Error(`AMQP: the broker cancelled the consumer of ${queue}`));
              return;
            }
            const headers = msg.properties.headers ?? {};
            const raw = headers['x-stream-offset'];
            void inbox.push({
              // A stream offset counts from 0; the follower's offsets from 1 (0 is "nothing handled").
              offset: typeof raw === 'number' ? raw + 1 : Number.NaN,
              token: headers[FENCING_TOKEN_HEADER],
              payload: msg.content,
              settle: () => {
                try {
                  channel.ack(msg, true); // this one and every earlier delivery of the channel
                } catch {
                  // The channel closed after the commit: the broker redelivers, the mark skips it.
                }
              },
            });
          },
          { noAck: false, arguments: { 'x-stream-offset': after > 0 ? after : 'first' } },
        );
      } catch (err) {
        closed = true;
        await channel.close().catch(() => {});
        throw err;
      }
      return {
        take: (max, signal) => inbox.take(max, signal),
        close: async () => {
          closed = true;
          await channel.close().catch(() => {});
        },
      };
    },
  };
}
