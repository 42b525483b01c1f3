/**
 * Fenced messages on MQTT v5, through the user's own `mqtt` v5 client: the token and the publish's
 * sequence ride as the user properties `Fencing-Token` and `Fencing-Seq` (MQTT 3.1.1 has no
 * metadata: a v3 client is refused). The consumer applies each QoS 1 message in the ledger's
 * transaction from the client's `customHandleAcks`, so the PUBACK leaves only after that
 * transaction committed; a refused message gets a PUBACK with reason 0x83 (implementation specific
 * error) and is never applied, and an apply that fails sends no PUBACK at all (the broker
 * redelivers it to the persistent session on reconnect).
 */
import { InvalidArgumentError } from '../core/index.js';
import { FENCING_TOKEN_HEADER } from './http.js';
import { FENCING_SEQ_HEADER, nextMessageFence, settles } from './messages.js';
import type { FencedConsumer, FencedPublishOptions, MessageFence, MessageVerdict } from './messages.js';

/** MQTT v5 publish options, as far as fencing touches them (the rest pass through). */
export interface MqttPublishOptions {
  qos?: 0 | 1 | 2;
  retain?: boolean;
  properties?: { userProperties?: Record<string, string | string[]>; [property: string]: unknown };
  [option: string]: unknown;
}

/** An mqtt v5 client (MqttClient), as far as a fenced publish uses it. */
export interface MqttPublisher {
  readonly options: { readonly protocolVersion?: number };
  publishAsync(topic: string, message: string | Buffer, options?: MqttPublishOptions): Promise<unknown>;
}

/** The PUBACK reason a refused message gets: 0x83, implementation specific error. */
export const MQTT_REFUSED_REASON = 0x83;

export interface FencedMqttPublishOptions extends FencedPublishOptions {
  /** Publish options of your own (default QoS 1; user properties are merged, the fencing ones win). */
  readonly publish?: MqttPublishOptions;
}

/**
 * `client.publishAsync(topic, payload)` at QoS 1 (unless told otherwise) with the token (the
 * context's, or `options.token`) in the user properties. Throws NoTokenError outside a leadership,
 * and InvalidArgumentError for a client not connected with `protocolVersion: 5`.
 */
export async function publishFencedMqtt(client: MqttPublisher, topic: string, payload: string | Buffer, options: FencedMqttPublishOptions = {}): Promise<MessageFence> {
  if (typeof client !== 'object' || client === null || typeof client.publishAsync !== 'function') throw new InvalidArgumentError('client', 'expected an mqtt v5 MqttClient');
  if (client.options?.protocolVersion !== 5) {
    throw new InvalidArgumentError('client', `user properties need MQTT v5: connect with { protocolVersion: 5 } (this client speaks ${String(client.options?.protocolVersion ?? 4)})`);
  }
  if (typeof topic !== 'string' || topic.length === 0) throw new InvalidArgumentError('topic', 'expected an MQTT topic');
  const fence = nextMessageFence('publishFencedMqtt', options);
  const own = options.publish ?? {};
  await client.publishAsync(topic, payload, {
    qos: 1,
    ...own,
    properties: {
      ...(own.properties ?? {}),
      userProperties: { ...(own.properties?.userProperties ?? {}), [FENCING_TOKEN_HEADER]: fence.tokenText, [FENCING_SEQ_HEADER]: String(fence.seq) },
    },
  });
  return fence;
}

/** A received MQTT publish packet, as far as a fenced consumer reads it. */
export interface MqttPacket {
  readonly topic: string;
  readonly payload: Buffer | string;
  readonly qos?: number;
  readonly properties?: { readonly userProperties?: Record<string, string | string[]> } | undefined;
}

/** mqtt's `customHandleAcks` option: called for every QoS 1 and 2 publish before its acknowledgement. */
export type MqttAckHandler<M extends MqttPacket = MqttPacket> = (topic: string, message: Buffer, packet: M, done: (error: Error | number, code?: number) => void) => void;

/**
 * The `customHandleAcks` for an mqtt v5 client that consumes through `consumer`: each QoS 1/2
 * message is decided and applied in the ledger's transaction before its PUBACK (reason 0 when
 * applied now or before; 0x83 when refused, never applied). An apply that fails sends no PUBACK
 * and emits the error on the client. `onVerdict` hears every verdict (and every failure).
 * Subscribe at QoS 1: QoS 0 messages are never passed to this handler.
 */
export function fencedMqttAcks<Tx, M extends MqttPacket = MqttPacket>(consumer: FencedConsumer<Tx, M>, onVerdict?: (verdict: MessageVerdict | Error, packet: M) => void): MqttAckHandler<M> {
  return (_topic, _message, packet, done) => {
    const props = packet.properties?.userProperties ?? {};
    consumer.handle(packet, { token: props[FENCING_TOKEN_HEADER], position: props[FENCING_SEQ_HEADER] }).then(
      (verdict) => {
        done(settles(verdict) === 'ack' ? 0 : MQTT_REFUSED_REASON);
        onVerdict?.(verdict, packet);
      },
      (err: unknown) => {
        const error = err instanceof Error ? err : new Error(String(err));
        done(error);
        onVerdict?.(error, packet);
      },
    );
  };
}
