/**
 * Fenced messages on NATS (core NATS and JetStream), through the user's own `nats` v2 connection:
 * the token and the publish's sequence ride as the headers `Fencing-Token` and `Fencing-Seq`; a
 * JetStream consumer applies each message once, in the ledger's transaction, by its stream
 * sequence, and acknowledges it only after that transaction committed.
 *
 * Nothing here imports `nats` at load time: the connection is the caller's, and the one function
 * needed to make a header set (`headers()`) is loaded from the installed `nats` on first publish.
 */
import { InvalidArgumentError } from '../core/index.js';
import { loadDriver } from '../core/driver.js';
import { FENCING_TOKEN_HEADER } from './http.js';
import { FENCING_SEQ_HEADER, nextMessageFence, settles } from './messages.js';
import type { FencedConsumer, FencedPublishOptions, MessageFence, MessageVerdict } from './messages.js';

/** A NATS header set (nats v2 `MsgHdrs`), as far as fencing uses it. */
export interface NatsHeaders {
  get(key: string): string;
  set(key: string, value: string): void;
  has(key: string): boolean;
  values(key: string): string[];
}

/** A core NATS connection (nats v2 `NatsConnection`), as far as a fenced publish uses it. */
export interface NatsPublisher {
  publish(subject: string, payload?: Uint8Array | string, options?: { headers?: NatsHeaders }): void;
}

/** A JetStream client (nats v2 `JetStreamClient`), as far as a fenced publish uses it. */
export interface JetStreamPublisher {
  publish(subject: string, payload?: Uint8Array | string, options?: { headers?: NatsHeaders }): Promise<{ readonly stream: string; readonly seq: number; readonly duplicate: boolean }>;
}

/** A core NATS message (nats v2 `Msg`), as far as a fenced consumer reads it. */
export interface NatsMessage {
  readonly headers?: NatsHeaders;
}

/** A JetStream message (nats v2 `JsMsg`), as far as a fenced consumer reads and settles it. */
export interface JetStreamMessage {
  readonly headers?: NatsHeaders;
  /** The stream sequence: the message's durable offset. */
  readonly seq: number;
  ack(): void;
  nak(millis?: number): void;
  term(reason?: string): void;
}

export interface FencedNatsPublishOptions extends FencedPublishOptions {
  /** Headers of your own to send along; the fencing headers are set on this set (made when absent). */
  readonly headers?: NatsHeaders;
}

let natsModule: { headers(): NatsHeaders } | undefined;

function fencedHeaders(fence: MessageFence, given: NatsHeaders | undefined): NatsHeaders {
  natsModule ??= loadDriver<{ headers(): NatsHeaders }>('nats', 'fenced NATS messages');
  const h = given ?? natsModule.headers();
  h.set(FENCING_TOKEN_HEADER, fence.tokenText);
  h.set(FENCING_SEQ_HEADER, String(fence.seq));
  return h;
}

function checkSubject(subject: unknown): void {
  if (typeof subject !== 'string' || subject.length === 0) throw new InvalidArgumentError('subject', 'expected a NATS subject');
}

/**
 * Publish on core NATS with the token (the context's, or `options.token`) in the headers. Throws
 * NoTokenError outside a leadership: never publishes unfenced. Core NATS does not redeliver, so a
 * core consumer only needs the term check (handleNatsMessage); use JetStream for durable work.
 */
export function publishFencedNats(nc: NatsPublisher, subject: string, payload?: Uint8Array | string, options: FencedNatsPublishOptions = {}): MessageFence {
  checkSubject(subject);
  const fence = nextMessageFence('publishFencedNats', options);
  nc.publish(subject, payload, { headers: fencedHeaders(fence, options.headers) });
  return fence;
}

/**
 * Publish to JetStream with the token (the context's, or `options.token`) in the headers; resolves
 * to the stream's acknowledgement. Throws NoTokenError outside a leadership.
 */
export async function publishFencedJetStream(js: JetStreamPublisher, subject: string, payload?: Uint8Array | string, options: FencedNatsPublishOptions = {}): Promise<{ readonly stream: string; readonly seq: number; readonly duplicate: boolean; readonly fence: MessageFence }> {
  checkSubject(subject);
  const fence = nextMessageFence('publishFencedJetStream', options);
  const ack = await js.publish(subject, payload, { headers: fencedHeaders(fence, options.headers) });
  return { stream: ack.stream, seq: ack.seq, duplicate: ack.duplicate, fence };
}

/**
 * The JetStream consumer settings a fenced consumer needs (spread them into
 * `jsm.consumers.add(stream, { durable_name, ...FENCED_JETSTREAM_CONSUMER })`): explicit acks,
 * and one message outstanding at a time. The ledger recognises a redelivery by its stream
 * sequence being at or below the last applied one, which holds only when messages are applied in
 * stream order; with more than one outstanding, JetStream may redeliver a later message before an
 * earlier one after a crash, and the earlier one, never applied, would look applied.
 */
export const FENCED_JETSTREAM_CONSUMER = Object.freeze({ ack_policy: 'explicit', max_ack_pending: 1 } as const);

/**
 * The JetStream consumer settings for a FencedConsumer with `dedupe: 'id'`: explicit acks and up
 * to 256 messages outstanding. The ledger records each applied message's stream sequence in the
 * apply's transaction, so a redelivery is recognised by its own sequence, whatever arrived
 * before it, and the messages that arrive while one transaction runs are applied together in the
 * next. Messages may then apply out of stream order after a redelivery (the term check still
 * holds: a message below the highest applied term is never applied).
 */
export const FENCED_JETSTREAM_CONSUMER_BY_ID = Object.freeze({ ack_policy: 'explicit', max_ack_pending: 256 } as const);

/** A header's value: undefined when absent, an array when repeated (refused as such). */
function header(h: NatsHeaders | undefined, key: string): string | string[] | undefined {
  if (!h || !h.has(key)) return undefined;
  const all = h.values(key);
  return all.length === 1 ? all[0] : all;
}

/** The longest reason a JetStream `term` carries (it travels in the ack subject's payload). */
const REASON_MAX = 200;

export interface FencedJetStreamOptions {
  /**
   * Send the refusal's reason with the `+TERM` (the server's MSG_TERMINATED advisory carries it).
   * Needs nats-server 2.10.4 or later: an older server ignores a `+TERM` with a reason and
   * redelivers the message. Default false: the reason is in the verdict (and `onSkip`).
   */
  readonly termReason?: boolean;
}

/**
 * Decide, apply (in the ledger's transaction) and settle one JetStream message: acknowledged when
 * applied now or before (a redelivery), terminated (`+TERM`: never redelivered) when refused (a
 * stale term, no token, a malformed one). When the apply or the ledger fails, nothing was
 * committed: the message is nak'ed (redelivered later) and the error is rethrown.
 */
export async function handleJetStreamMessage<Tx, M extends JetStreamMessage>(consumer: FencedConsumer<Tx, M>, msg: M, options: FencedJetStreamOptions = {}): Promise<MessageVerdict> {
  let verdict: MessageVerdict;
  try {
    verdict = await consumer.handle(msg, { token: header(msg.headers, FENCING_TOKEN_HEADER), position: msg.seq });
  } catch (err) {
    msg.nak();
    throw err;
  }
  if (settles(verdict) === 'ack') msg.ack();
  else if (options.termReason) msg.term(`tenure: ${'reason' in verdict ? verdict.reason : verdict.outcome}`.slice(0, REASON_MAX));
  else msg.term();
  return verdict;
}

export interface ConsumeFencedJetStreamOptions<M> extends FencedJetStreamOptions {
  /** Stop (the message in hand nak'ed) when this aborts. */
  readonly signal?: AbortSignal;
  /** Told of each message's verdict after it was settled (acknowledged or terminated). */
  readonly onSettled?: (verdict: MessageVerdict, message: M) => void;
}

/**
 * Consume a JetStream consumer's messages (`await (await js.consumers.get(stream, durable)).consume({
 * abort_on_missing_resource: true })`: without that option, nats.js keeps waiting, silently, on a
 * consumer deleted on the server) through `consumer` until the iterator ends or `signal` aborts: one at a time (`dedupe:
 * 'position'`), or with up to twice the consumer's `maxBatch` handed to it at once (`dedupe:
 * 'id'`: it applies them in batches). An apply that throws stops the loop (its message nak'ed)
 * with that error, once the messages already handed over are settled.
 */
export async function consumeFencedJetStream<Tx, M extends JetStreamMessage>(messages: AsyncIterable<M>, consumer: FencedConsumer<Tx, M>, options: ConsumeFencedJetStreamOptions<M> = {}): Promise<void> {
  const settled = (verdict: MessageVerdict, msg: M): void => {
    try {
      options.onSettled?.(verdict, msg);
    } catch {
      // the caller's report is not the consumer's failure
    }
  };
  if (consumer.dedupe !== 'id') {
    for await (const msg of messages) {
      if (options.signal?.aborted) {
        msg.nak();
        return;
      }
      settled(await handleJetStreamMessage(consumer, msg, options), msg);
    }
    return;
  }
  const limit = consumer.maxBatch * 2;
  const inFlight = new Set<Promise<void>>();
  let failure: { readonly error: unknown } | null = null;
  for await (const msg of messages) {
    if (failure || options.signal?.aborted) {
      msg.nak();
      break;
    }
    const p: Promise<void> = handleJetStreamMessage(consumer, msg, options).then(
      (verdict) => settled(verdict, msg),
      (error: unknown) => void (failure ??= { error }),
    );
    inFlight.add(p);
    void p.finally(() => inFlight.delete(p));
    if (inFlight.size >= limit) await Promise.race(inFlight);
  }
  await Promise.all(inFlight);
  if (failure) throw (failure as { readonly error: unknown }).error;
}

/**
 * Decide and apply one core NATS message (no acknowledgement, no redelivery); its position is the
 * publisher's Fencing-Seq. Rejects when the apply failed.
 */
export function handleNatsMessage<Tx, M extends NatsMessage>(consumer: FencedConsumer<Tx, M>, msg: M): Promise<MessageVerdict> {
  return consumer.handle(msg, { token: header(msg.headers, FENCING_TOKEN_HEADER), position: header(msg.headers, FENCING_SEQ_HEADER) });
}
