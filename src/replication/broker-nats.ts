/**
 * Model C on NATS JetStream: one stream holds a group's decisions, one subject per partition
 * (`<prefix>.<partition>`). The leader publishes with publishFencedJetStream (the token in the
 * `Fencing-Token` header); a follower reads each partition through a consumer of its own, made
 * for that subscription: filtered on the partition's subject, starting at the stream sequence
 * after its mark, cumulative acknowledgements (AckAll: one per batch, sent after its commit), at
 * most `prefetch` unacknowledged. JetStream stream sequences are the offsets: increasing within a subject, with
 * gaps where other partitions' messages sit.
 *
 * Why the consumer sequence is checked: JetStream numbers every delivery of a consumer (1, 2,
 * 3…, redeliveries included). A jump means a delivery never reached this client (a reconnect
 * lost it in flight); the server would redeliver it later, after messages behind it, and the
 * mark would already cover it. So a jump ends the subscription, and the follower starts a new
 * one from its mark: no message is applied out of order or taken for a duplicate. (The client's
 * ordered consumer does the same, but needs nats-server 2.10; this works from 2.9.)
 *
 * Nothing here imports `nats`: the connection and its JetStream clients are the caller's.
 */
import { InvalidArgumentError, checkName } from '../core/index.js';
import { FENCING_TOKEN_HEADER } from '../fencing/http.js';
import { publishFencedJetStream } from '../fencing/nats.js';
import type { JetStreamPublisher, NatsHeaders } from '../fencing/nats.js';
import { DeliveryInbox, TERM_MARKER_PAYLOAD, checkPartition, checkPayload } from './broker.js';
import type { BrokerDelivery, BrokerPublisher, BrokerSource, BrokerSubscription } from './broker.js';

/** A JetStream message as the follower reads it (nats v2 `JsMsg`). */
export interface NatsDecisionMessage {
  /** The stream sequence: the offset. */
  readonly seq: number;
  readonly headers?: NatsHeaders;
  readonly data: Uint8Array;
  /** `deliverySequence`: the consumer's number for this delivery, counting redeliveries. */
  readonly info: { readonly deliverySequence: number };
  ack(): void;
}

/** The messages of a consume() (nats v2 `ConsumerMessages`). */
export interface NatsDecisionMessages extends AsyncIterable<NatsDecisionMessage> {
  close(): Promise<void | Error>;
}

/**
 * A consumer's settings as the follower sets them (nats v2 `ConsumerConfig`; `deliver_policy` and
 * `ack_policy` are nats' enums, whose values are these strings; durations in ns).
 */
export interface NatsDecisionConsumerConfig {
  readonly filter_subject?: string;
  readonly deliver_policy?: unknown;
  readonly opt_start_seq?: number;
  readonly ack_policy?: unknown;
  readonly max_ack_pending?: number;
  readonly inactive_threshold?: number;
}

/** The JetStream clients (nats v2 `JetStreamClient` and `JetStreamManager`), as far as the follower uses them. */
export interface NatsDecisionClient {
  readonly js: {
    readonly consumers: {
      get(stream: string, name?: string | Record<string, unknown>): Promise<{ consume(options?: { max_messages?: number; expires?: number; abort_on_missing_resource?: boolean }): Promise<NatsDecisionMessages> }>;
    };
  };
  readonly jsm: {
    /** For the end check (a saved mark beyond a partition's last message); JetStreamManager has it. */
    readonly streams?: {
      getMessage(stream: string, query: { last_by_subj: string }): Promise<{ readonly seq: number }>;
    };
    readonly consumers: {
      /** `num_pending` (messages matching the filter after the start, not yet delivered) serves the lag. */
      add(stream: string, config: NatsDecisionConsumerConfig): Promise<{ readonly name: string; readonly num_pending?: number }>;
      delete(stream: string, consumer: string): Promise<boolean>;
    };
  };
}

/** A JetStream manager (nats v2 `JetStreamManager`), as far as creating the decisions' stream needs. */
export interface NatsDecisionManager {
  readonly streams: {
    add(config: { name: string; subjects: string[] }): Promise<unknown>;
  };
}

export interface NatsDecisionOptions {
  /** The JetStream stream that holds the group's decisions. */
  readonly stream: string;
  /** The subjects' prefix: partition P is subject `<prefix>.<P>` (default: the stream's name). */
  readonly prefix?: string;
}

export interface NatsDecisionSourceOptions extends NatsDecisionOptions {
  /** Messages held by the client per partition ahead of the apply: 1..10000 (default 256). */
  readonly prefetch?: number;
}

const SUBJECT_PREFIX = /^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*$/;

function names(options: NatsDecisionOptions): { stream: string; prefix: string } {
  if (typeof options !== 'object' || options === null) throw new InvalidArgumentError('options', 'expected { stream, prefix? }');
  const stream = checkName('stream', options.stream);
  if (!/^[A-Za-z0-9_-]{1,200}$/.test(stream)) throw new InvalidArgumentError('stream', `expected a JetStream stream name of letters, digits, _ and -, got ${JSON.stringify(stream)}`);
  const prefix = options.prefix ?? stream;
  if (typeof prefix !== 'string' || prefix.length > 200 || !SUBJECT_PREFIX.test(prefix)) {
    throw new InvalidArgumentError('prefix', `expected subject tokens of letters, digits, _ and - joined by dots, got ${JSON.stringify(prefix)}`);
  }
  return { stream, prefix };
}

/** Create (or confirm) the stream holding the decisions, with subjects `<prefix>.*`. */
export async function ensureNatsDecisionStream(jsm: NatsDecisionManager, options: NatsDecisionOptions): Promise<void> {
  const { stream, prefix } = names(options);
  await jsm.streams.add({ name: stream, subjects: [`${prefix}.*`] });
}

/** The leader's side: each decision published to `<prefix>.<partition>` with publishFencedJetStream. */
export function natsDecisionPublisher(js: JetStreamPublisher, options: NatsDecisionOptions): BrokerPublisher {
  const { stream, prefix } = names(options);
  return {
    name: `nats:${stream}`,
    async publish(partition, payload, publishOptions = {}) {
      await publishFencedJetStream(js, `${prefix}.${checkPartition(partition)}`, checkPayload(payload), publishOptions.token ? { token: publishOptions.token } : {});
    },
    async publishMarker(partition, publishOptions = {}) {
      await publishFencedJetStream(js, `${prefix}.${checkPartition(partition)}`, TERM_MARKER_PAYLOAD, publishOptions.token ? { token: publishOptions.token } : {});
    },
  };
}

/** Idle time after which the server deletes a subscription's consumer left behind by a crashed follower, ns. */
const CONSUMER_INACTIVE_NS = 60_000_000_000;
/** How long one pull of a subscription waits on the server, ms (its idle heartbeats come at half this). */
const PULL_EXPIRES_MS = 5_000;
/** A lag probe's consumer is deleted at once; if the delete is lost, the server drops it after this. */
const PROBE_INACTIVE_NS = 10_000_000_000;

/** The followers' side: each partition read by a consumer of its own on `<prefix>.<partition>`, acknowledged after the commit. */
export function natsDecisionSource(client: NatsDecisionClient, options: NatsDecisionSourceOptions): BrokerSource {
  const { stream, prefix } = names(options);
  const prefetch = options.prefetch ?? 256;
  if (!Number.isInteger(prefetch) || prefetch < 1 || prefetch > 10_000) throw new InvalidArgumentError('prefetch', `expected a whole number in [1, 10000], got ${String(prefetch)}`);
  if (typeof client?.js?.consumers?.get !== 'function' || typeof client.jsm?.consumers?.add !== 'function') {
    throw new InvalidArgumentError('client', 'expected { js: nc.jetstream(), jsm: await nc.jetstreamManager() }');
  }
  return {
    name: `nats:${stream}`,
    async pending(partition, after) {
      // A consumer that delivers nothing, made only to have the server count the partition's
      // messages after the mark (its num_pending at creation: exact, as of the server's answer).
      const probe = await client.jsm.consumers.add(stream, {
        filter_subject: `${prefix}.${checkPartition(partition)}`,
        ...(after > 0 ? { deliver_policy: 'by_start_sequence', opt_start_seq: after + 1 } : { deliver_policy: 'all' }),
        ack_policy: 'none',
        inactive_threshold: PROBE_INACTIVE_NS,
      });
      await client.jsm.consumers.delete(stream, probe.name).catch(() => false); // else it expires by itself
      return typeof probe.num_pending === 'number' ? probe.num_pending : null;
    },
    async lastOffset(partition) {
      if (typeof client.jsm.streams?.getMessage !== 'function') return null;
      try {
        return (await client.jsm.streams.getMessage(stream, { last_by_subj: `${prefix}.${checkPartition(partition)}` })).seq;
      } catch (err) {
        // The server's answer for a subject with no message (code 10037, "no message found").
        if (/no message found/i.test(err instanceof Error ? err.message : String(err))) return 0;
        throw err;
      }
    },
    async subscribe(partition, after): Promise<BrokerSubscription> {
      const subject = `${prefix}.${checkPartition(partition)}`;
      const info = await client.jsm.consumers.add(stream, {
        filter_subject: subject,
        ...(after > 0 ? { deliver_policy: 'by_start_sequence', opt_start_seq: after + 1 } : { deliver_policy: 'all' }),
        // Cumulative: the follower acknowledges the last message of each committed batch.
        ack_policy: 'all',
        max_ack_pending: prefetch,
        inactive_threshold: CONSUMER_INACTIVE_NS,
      });
      // A consumer deleted on the server ends the subscription with an error (the follower then
      // subscribes again from its mark): without abort_on_missing_resource nats.js waits on it
      // silently. Pulls of 5 s (heartbeats every 2.5 s), not nats.js's 30 s: a pull lost in
      // flight is noticed by its missing heartbeats, and asked again, within seconds.
      const messages = await (await client.js.consumers.get(stream, info.name)).consume({ max_messages: prefetch, expires: PULL_EXPIRES_MS, abort_on_missing_resource: true });
      const inbox = new DeliveryInbox(prefetch);
      let closed = false;
      // The pump waits for room in the inbox before taking the next message: the client pulls
      // more from the server only as the iterator advances, so memory stays bounded.
      void (async () => {
        let delivered = 0;
        try {
          for await (const m of messages) {
            if (m.info.deliverySequence !== delivered + 1) {
              throw new Error(`NATS: consumer of ${subject} delivered #${m.info.deliverySequence} after #${delivered}: a delivery was lost in flight; subscribing again from the mark`);
            }
            delivered = m.info.deliverySequence;
            const delivery: BrokerDelivery = {
              offset: m.seq,
              token: tokenHeader(m.headers),
              payload: m.data,
              settle: () => m.ack(),
            };
            await inbox.push(delivery);
          }
          if (!closed) inbox.fail(new Error(`NATS: the consumer of ${subject} on stream ${stream} ended`));
        } catch (err) {
          inbox.fail(err instanceof Error ? err : new Error(String(err)));
        }
      })();
      return {
        take: (max, signal) => inbox.take(max, signal),
        close: async () => {
          closed = true;
          await messages.close();
          await client.jsm.consumers.delete(stream, info.name).catch(() => false);
        },
      };
    },
  };
}

/** The Fencing-Token header: undefined when absent, every value when repeated (refused as such). */
function tokenHeader(h: NatsHeaders | undefined): string | string[] | undefined {
  if (!h || !h.has(FENCING_TOKEN_HEADER)) return undefined;
  const all = h.values(FENCING_TOKEN_HEADER);
  return all.length === 1 ? all[0] : all;
}
