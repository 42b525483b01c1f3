/**
 * Fenced messages on RabbitMQ (AMQP 0-9-1), through the user's own `amqplib` channel: the token
 * and the publish's sequence ride as the AMQP headers `Fencing-Token` and `Fencing-Seq` (and the
 * message id is `<group>#<term>/<seq>`); a consumer applies each message once, in the ledger's
 * transaction, by (term, Fencing-Seq), and acknowledges it only after that transaction committed.
 * A refused message is nack'ed without requeue: RabbitMQ dead-letters it when the queue has a
 * dead-letter exchange, and drops it otherwise.
 */
import { InvalidArgumentError } from '../core/index.js';
import { FENCING_TOKEN_HEADER } from './http.js';
import { FENCING_SEQ_HEADER, nextMessageFence, settles } from './messages.js';
import type { FencedConsumer, FencedPublishOptions, MessageFence, MessageVerdict } from './messages.js';

/** amqplib's publish options, as far as fencing touches them (the rest pass through). */
export interface AmqpPublishOptions {
  headers?: Record<string, unknown>;
  messageId?: string;
  [option: string]: unknown;
}

/** An amqplib Channel or ConfirmChannel, as far as fencing uses it. */
export interface AmqpChannel {
  publish(exchange: string, routingKey: string, content: Buffer, options?: AmqpPublishOptions): boolean;
}

/** A delivered amqplib message, as far as a fenced consumer reads it. */
export interface AmqpMessage {
  readonly content: Buffer;
  readonly properties: { readonly headers?: Record<string, unknown> | undefined; readonly messageId?: unknown };
}

/** An amqplib channel a consumer settles its deliveries on. */
export interface AmqpConsumerChannel<M extends AmqpMessage = AmqpMessage> {
  ack(message: M): void;
  nack(message: M, allUpTo?: boolean, requeue?: boolean): void;
}

export interface FencedAmqpPublishOptions extends FencedPublishOptions {
  /** amqplib publish options of your own (headers are merged; the fencing headers win). */
  readonly publish?: AmqpPublishOptions;
}

/**
 * `channel.publish(exchange, routingKey, content)` with the token (the context's, or
 * `options.token`) in the headers; returns amqplib's flow-control boolean and the fence. Throws
 * NoTokenError outside a leadership: never publishes unfenced. On a ConfirmChannel, await
 * `channel.waitForConfirms()` to know the broker has it.
 */
export function publishFencedAmqp(channel: AmqpChannel, exchange: string, routingKey: string, content: Buffer, options: FencedAmqpPublishOptions = {}): { readonly sent: boolean; readonly fence: MessageFence } {
  if (typeof exchange !== 'string') throw new InvalidArgumentError('exchange', "expected an exchange name ('' for the default exchange)");
  if (typeof routingKey !== 'string') throw new InvalidArgumentError('routingKey', 'expected a routing key (the queue name on the default exchange)');
  if (!Buffer.isBuffer(content)) throw new InvalidArgumentError('content', 'expected a Buffer');
  const fence = nextMessageFence('publishFencedAmqp', options);
  const own = options.publish ?? {};
  const sent = channel.publish(exchange, routingKey, content, {
    ...own,
    messageId: own.messageId ?? `${fence.tokenText}/${fence.seq}`,
    headers: { ...(own.headers ?? {}), [FENCING_TOKEN_HEADER]: fence.tokenText, [FENCING_SEQ_HEADER]: String(fence.seq) },
  });
  return { sent, fence };
}

/**
 * Decide, apply (in the ledger's transaction) and settle one delivery: acked when applied now or
 * before (a redelivery), nack'ed without requeue when refused (dead-lettered if the queue has a
 * dead-letter exchange). When the apply or the ledger fails, nothing was committed: the delivery
 * is nack'ed with requeue and the error rethrown.
 */
export async function handleAmqpMessage<Tx, M extends AmqpMessage>(consumer: FencedConsumer<Tx, M>, channel: AmqpConsumerChannel<M>, msg: M): Promise<MessageVerdict> {
  const headers = msg.properties.headers ?? {};
  let verdict: MessageVerdict;
  try {
    verdict = await consumer.handle(msg, { token: headers[FENCING_TOKEN_HEADER], position: headers[FENCING_SEQ_HEADER] });
  } catch (err) {
    channel.nack(msg, false, true);
    throw err;
  }
  if (settles(verdict) === 'ack') channel.ack(msg);
  else channel.nack(msg, false, false);
  return verdict;
}
