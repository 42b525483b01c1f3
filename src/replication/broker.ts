/**
 * Model C - broker: the leader publishes its decisions to a message broker (NATS JetStream,
 * RabbitMQ streams) with its fencing token in each message's metadata, and followers consume
 * them, partition by partition, in order.
 *
 * The broker does not fence: it keeps whatever a deposed leader still publishes. So the follower
 * does, where the write lands (DESIGN rule 5): per partition it keeps a durable mark (the last
 * broker offset handled, the highest term seen there, how many zombie publishes it dropped) and
 * moves it in the SAME transaction as the apply (a PartitionSink: sqliteSink, postgresSink,
 * mysqlSink). A message at or below the mark's offset was handled already (a redelivery): it is
 * acknowledged, not applied again. A message whose term is below the partition's highest was
 * published by a leader that had been replaced (within one partition the broker's order is the
 * publish order, so a lower term after a higher one is a late publish): it is dropped, counted
 * in the mark, and reported. A message is acknowledged only after the transaction that handled
 * it committed.
 *
 * Why per partition and not per group: partitions are consumed independently, so partition A can
 * be far ahead of partition B; an honest message of term 4 still waiting in B must not be dropped
 * because A already saw term 5. A zombie's publish to a partition the new leader has not
 * published to yet cannot be told apart from an honest one by any consumer: the new leader
 * closes that window by publishing to every partition when it takes over (`openTerm`).
 *
 * A message the follower cannot read (no token, a malformed one, another group's, a payload that
 * is not UTF-8) and an apply that throws stop the follower ON that message: it is neither applied
 * nor skipped nor acknowledged, and the next run meets it again (InvalidMessageError, ApplyError).
 */
import { InvalidArgumentError, StaleTermError, TenureError, TypedEmitter, checkMs, checkName, limits } from '../core/index.js';
import type { FencingToken } from '../core/index.js';
import type { FollowerLag } from './follower.js';
import { refuse } from '../fencing/context.js';
import { readMessageFence } from '../fencing/messages.js';
import { ApplyError, InvalidMessageError, OffsetMismatchError } from './errors.js';
import type { PartitionMark, PartitionSink } from './sinks.js';

/** One of the leader's decisions as a follower applies it. */
export interface BrokerDecision {
  readonly partition: string;
  /** The broker's offset of the message in its partition (JetStream stream sequence, RabbitMQ stream offset). */
  readonly offset: number;
  /** The lease (group) and term of the token it was published with. */
  readonly lease: string;
  readonly term: number;
  readonly payload: string;
}

/** Apply one decision inside its batch's transaction `tx`. A throw stops the follower on that decision. */
export type ApplyDecisionFn<Tx> = (decision: BrokerDecision, tx: Tx) => void | Promise<void>;
/** Apply a batch of one partition's decisions (in order) inside its transaction. */
export type ApplyDecisionBatchFn<Tx> = (decisions: readonly BrokerDecision[], tx: Tx) => void | Promise<void>;

/** A message as a broker adapter hands it over, before the follower has looked at it. */
export interface BrokerDelivery {
  /** The broker's offset in the partition; strictly increasing within a subscription (gaps allowed). */
  readonly offset: number;
  /** The raw Fencing-Token metadata value (undefined when absent). */
  readonly token: unknown;
  readonly payload: Uint8Array | string;
  /**
   * Acknowledge it AND every earlier message of its subscription (cumulative: JetStream's
   * AckAll, AMQP's `multiple`). Called only after the transaction that handled them committed,
   * on the last message of each batch.
   */
  settle(): void;
}

/** One partition's messages after a given offset, in the broker's order. */
export interface BrokerSubscription {
  /**
   * Wait until at least one message is there (or `signal` aborts), then hand over those already
   * received, at most `max`. Rejects when the subscription failed or the broker ended it.
   */
  take(max: number, signal: AbortSignal): Promise<BrokerDelivery[]>;
  /** Stop receiving; messages received and not settled are given back to the broker. */
  close(): Promise<void>;
}

/** A broker as a follower reads it (natsDecisionSource, amqpDecisionSource, or your own). */
export interface BrokerSource {
  /** Short name for messages and offset rows ("nats:orders", "amqp:orders"). */
  readonly name: string;
  /** Deliver `partition`'s messages whose offset is above `after`, in order. */
  subscribe(partition: string, after: number): Promise<BrokerSubscription>;
  /**
   * Optional, for lag: how many messages `partition` holds after offset `after`, as the broker
   * counts them now; null when it cannot tell. Without it the follower's lag is unknown
   * (`atLeast` true, and never caught up).
   */
  pending?(partition: string, after: number): Promise<number | null>;
  /**
   * Optional: the offset of `partition`'s last message (0: none yet), null when it cannot tell.
   * With it the follower refuses a saved mark beyond the end (OffsetMismatchError) instead of
   * waiting there for messages that belong to another stream.
   */
  lastOffset?(partition: string): Promise<number | null>;
}

/** A broker as the leader publishes to it (natsDecisionPublisher, amqpDecisionPublisher). */
export interface BrokerPublisher {
  readonly name: string;
  /**
   * Publish one decision to `partition` with the token (options.token, or the token context's:
   * NoTokenError outside a leadership, never unfenced); resolves once the broker has stored it.
   */
  publish(partition: string, payload: string, options?: PublishDecisionOptions): Promise<void>;
  /** Publish a term marker (an empty message with the token) to `partition`: see openTerm. */
  publishMarker(partition: string, options?: PublishDecisionOptions): Promise<void>;
}

export interface PublishDecisionOptions {
  /** The token to publish with; default: the token context's (NoTokenError outside a leadership). */
  readonly token?: FencingToken;
}

/**
 * The payload of the marker `openTerm` publishes: empty, which no decision is (publish refuses an
 * empty payload). Followers handle it like any message (it raises the partition's term and moves
 * the mark) and do not apply it.
 */
export const TERM_MARKER_PAYLOAD = '';

/** A decision's payload: text of 1..1 MiB (empty is the term marker's). */
export function checkPayload(payload: unknown): string {
  if (typeof payload !== 'string' || payload.length === 0 || payload.length > 1 << 20) {
    throw new InvalidArgumentError('payload', `expected text of 1..${1 << 20} characters (empty is reserved for term markers), got ${typeof payload === 'string' ? `${payload.length} characters` : typeof payload}`);
  }
  return payload;
}

/**
 * The new leader's first act: publish an empty marker with its token to every partition, so that
 * in each of them a deposed leader's later publishes sit behind a higher term and are dropped.
 * Followers move their mark over a marker without calling apply.
 */
export async function openTerm(publisher: BrokerPublisher, partitions: readonly string[], options?: PublishDecisionOptions): Promise<void> {
  for (const p of checkPartitions(partitions)) await publisher.publishMarker(p, options);
}

const PARTITION = /^[A-Za-z0-9_-]{1,64}$/;

/** A partition name: 1..64 of letters, digits, `_` and `-` (it becomes part of a subject or queue name). */
export function checkPartition(value: unknown): string {
  if (typeof value !== 'string' || !PARTITION.test(value)) {
    throw new InvalidArgumentError('partition', `expected 1..64 letters, digits, _ or -, got ${typeof value === 'string' ? JSON.stringify(value.slice(0, 80)) : typeof value}`);
  }
  return value;
}

function checkPartitions(partitions: unknown): string[] {
  if (!Array.isArray(partitions) || partitions.length === 0 || partitions.length > 1024) {
    throw new InvalidArgumentError('partitions', 'expected 1..1024 partition names');
  }
  const list = partitions.map((p) => checkPartition(p));
  if (new Set(list).size !== list.length) throw new InvalidArgumentError('partitions', 'names must be distinct');
  return list;
}

/**
 * The partition of a decision key: FNV-1a of its UTF-8 bytes modulo the number of partitions.
 * Stable across processes and versions, so every publisher of a group routes a key the same way,
 * and the decisions about one key stay in order.
 */
export function partitionOf(key: string, partitions: readonly string[]): string {
  if (typeof key !== 'string') throw new InvalidArgumentError('key', 'expected a string');
  if (!Array.isArray(partitions) || partitions.length === 0) throw new InvalidArgumentError('partitions', 'expected at least one partition');
  let h = 0x811c9dc5;
  for (const b of Buffer.from(key, 'utf8')) {
    h ^= b;
    h = Math.imul(h, 0x01000193) >>> 0;
  }
  return partitions[h % partitions.length]!;
}

export interface BrokerFollowerOptions<Tx> {
  /** Where the leader's decisions are read (natsDecisionSource, amqpDecisionSource). */
  readonly source: BrokerSource;
  /** The group (lease) whose leader publishes; a token of another group stops the follower. */
  readonly group: string;
  /** The partitions to consume, each in its own order (all of them, for a full projection). */
  readonly partitions: readonly string[];
  /** Where the projection and the partition marks live (sqliteSink, postgresSink, mysqlSink, or your own). */
  readonly sink: PartitionSink<Tx>;
  /** Apply each decision. Give exactly one of `apply` and `applyBatch`. */
  readonly apply?: ApplyDecisionFn<Tx>;
  /** Apply each batch at once; a throw stops the follower on the batch's first decision. */
  readonly applyBatch?: ApplyDecisionBatchFn<Tx>;
  /** Names the mark rows, `<name>/<partition>` (default: the source's name). */
  readonly name?: string;
  /** Messages per transaction, at most: 1..10000 (default 100). */
  readonly batchSize?: number;
  /** First wait after a broker or sink failure, ms (doubles up to 5 s): 1..60000 (default 100). */
  readonly retryMs?: number;
  /** Consecutive failures of the broker or sink before the follower gives up: 0..1000 (default 20). */
  readonly maxRetries?: number;
  /**
   * Ask the broker how far behind each partition is (`measureLag()`, one `source.pending` call per
   * partition) this often while running, and emit `lag`, ms: 0 (never) or 10..3600000 (default 1000).
   */
  readonly lagEveryMs?: number;
  readonly signal?: AbortSignal;
}

/** What a BrokerFollower did in this run. */
export interface BrokerCounts {
  applied: number;
  /** Redeliveries of messages already handled: acknowledged, not applied again. */
  duplicate: number;
  /** Zombie publishes (a term below the partition's highest): dropped. */
  dropped: number;
  /** Term markers (openTerm): the mark moved, nothing applied. */
  markers: number;
}

export interface BrokerFollowerEvents {
  /** A batch of `partition` committed: offsets up to `to` handled, `count` decisions applied. */
  applied: { readonly partition: string; readonly to: number; readonly count: number; readonly ms: number };
  /** A zombie's publish dropped (its term below the partition's highest); the drop is committed with the mark. */
  dropped: { readonly partition: string; readonly offset: number; readonly term: number; readonly highest: number };
  /** A broker or sink call failed; the partition resubscribes from its saved mark after `delayMs`. */
  retry: { readonly partition: string; readonly error: Error; readonly attempt: number; readonly delayMs: number };
  /** The follower stopped on an error (ApplyError, InvalidMessageError, OffsetMismatchError, ...). */
  failed: { readonly error: Error; readonly partition: string; readonly offset: number | null };
  /** The lag was measured (every `lagEveryMs`, or by `measureLag()`): the whole follower's, and each partition's. */
  lag: { readonly lag: FollowerLag; readonly partitions: ReadonlyMap<string, FollowerLag> };
  stopped: Record<string, never>;
}

const DEFAULTS = { batchSize: 100, retryMs: 100, maxRetries: 20, lagEveryMs: 1000 } as const;

/** What the follower knows of one partition's lag. */
interface PartitionLag {
  /** Messages after the mark, as of the last measure less those handled since. */
  entries: number;
  /** False until a measure succeeded (or when the source cannot count). */
  exact: boolean;
  /** performance.now() when the last measure that found nothing unhandled was SENT; null until one did. */
  caughtUpAt: number | null;
  /** performance.now() at the start: `behindMs` counts from it until a measure found the partition caught up. */
  readonly startedAt: number;
  /** When the last measure was sent: everything published before then, it counted. */
  measuredAt: number;
  /** Messages handled so far (not redeliveries), to account for those handled during a measure. */
  handled: number;
}
const RETRY_MAX_MS = 5000;

function wholeNumber(field: string, value: unknown, min: number, max: number): number {
  if (typeof value !== 'number' || !Number.isInteger(value) || value < min || value > max) {
    throw new InvalidArgumentError(field, `expected a whole number in [${min}, ${max}], got ${String(value)}`);
  }
  return value;
}

class ApplyThrew {
  constructor(readonly offset: number, readonly error: unknown) {}
}

const utf8 = new TextDecoder('utf-8', { fatal: true });

/**
 * Consumes the leader's decisions from a broker, one loop per partition, and applies each exactly
 * once to a projection (see the file's comment for the rules).
 */
export class BrokerFollower<Tx> extends TypedEmitter<BrokerFollowerEvents> implements AsyncDisposable {
  readonly group: string;
  readonly name: string;
  readonly partitions: readonly string[];
  readonly counts: BrokerCounts = { applied: 0, duplicate: 0, dropped: 0, markers: 0 };
  private readonly source: BrokerSource;
  private readonly sink: PartitionSink<Tx>;
  private readonly applyFn: ApplyDecisionBatchFn<Tx>;
  private readonly batchSize: number;
  private readonly retryMs: number;
  private readonly maxRetries: number;
  private readonly stopper = new AbortController();
  private readonly current = new Map<string, PartitionMark>();
  private readonly lags = new Map<string, PartitionLag>();
  private readonly lagEveryMs: number;
  private running: Promise<void> | null = null;

  constructor(options: BrokerFollowerOptions<Tx>) {
    super();
    if (typeof options !== 'object' || options === null) throw new InvalidArgumentError('options', 'expected an object');
    if (typeof options.source?.subscribe !== 'function') throw new InvalidArgumentError('source', 'expected a BrokerSource (natsDecisionSource, amqpDecisionSource or your own)');
    if (typeof options.sink?.commitMark !== 'function' || typeof options.sink.loadMark !== 'function') {
      throw new InvalidArgumentError('sink', 'expected a PartitionSink (sqliteSink, postgresSink, mysqlSink or your own { loadMark, commitMark })');
    }
    const { apply, applyBatch } = options;
    if ((apply === undefined) === (applyBatch === undefined)) throw new InvalidArgumentError('apply', 'give exactly one of apply (decision, tx) and applyBatch (decisions, tx)');
    if (apply !== undefined && typeof apply !== 'function') throw new InvalidArgumentError('apply', 'expected a function (decision, tx) => void | Promise<void>');
    if (applyBatch !== undefined && typeof applyBatch !== 'function') throw new InvalidArgumentError('applyBatch', 'expected a function (decisions, tx) => void | Promise<void>');
    this.source = options.source;
    this.sink = options.sink;
    this.group = checkName('group', options.group);
    this.name = checkName('name', options.name ?? options.source.name);
    this.partitions = checkPartitions(options.partitions);
    // The mark rows' names (`<name>/<partition>`) must fit a name too: refused here, not mid-run.
    for (const p of this.partitions) checkName('name', this.markName(p));
    this.applyFn = applyBatch
      ? async (ds, tx) => {
          try {
            await applyBatch(ds, tx);
          } catch (err) {
            throw new ApplyThrew(ds[0]!.offset, err);
          }
        }
      : async (ds, tx) => {
          for (const d of ds) {
            try {
              await apply!(d, tx);
            } catch (err) {
              throw new ApplyThrew(d.offset, err);
            }
          }
        };
    this.batchSize = wholeNumber('batchSize', options.batchSize ?? DEFAULTS.batchSize, 1, limits.readLimitMax);
    this.retryMs = checkMs('retryMs', options.retryMs ?? DEFAULTS.retryMs, 1, 60_000);
    this.maxRetries = wholeNumber('maxRetries', options.maxRetries ?? DEFAULTS.maxRetries, 0, 1000);
    const lagEveryMs = options.lagEveryMs ?? DEFAULTS.lagEveryMs;
    this.lagEveryMs = lagEveryMs === 0 ? 0 : checkMs('lagEveryMs', lagEveryMs, 10, 3_600_000);
    const started = performance.now();
    for (const p of this.partitions) this.lags.set(p, { entries: 0, exact: false, caughtUpAt: null, startedAt: started, measuredAt: started, handled: 0 });
    const signal = options.signal;
    if (signal) {
      if (signal.aborted) this.stopper.abort();
      else signal.addEventListener('abort', () => this.stopper.abort(), { once: true });
    }
  }

  /** Each partition's mark as last loaded or committed by this follower. */
  marks(): ReadonlyMap<string, PartitionMark> {
    return new Map(this.current);
  }

  /**
   * How far behind the broker the follower is: for one partition, or for all (entries summed,
   * the longest `behindMs`). Same shape as a Model B follower's lag:
   * - `entries`: messages after the partition's mark, as the broker counted them at the last
   *   measure, less those handled since; `atLeast` until a measure succeeded (or when the
   *   source has no `pending`), and when messages came that the measure had not counted.
   * - `behindMs`: 0 when caught up; else the time since the last measure that found the
   *   partition caught up was SENT, on this process's monotonic clock (since start if never).
   *   So a caught-up partition's 0 is as of its last measure, up to `lagEveryMs` old.
   * - `staleMs`: that same time whether caught up or not: how stale the applied data may be;
   *   `Infinity` until a measure found the partition caught up (the data's age is unknown).
   * - `ms`: always null: neither broker gives a clock a client can read (JetStream stamps
   *   messages with the server's time but tells no "now" before NATS 2.10, RabbitMQ stamps
   *   nothing), and a publisher's or this host's clock must not be compared with it (rule 1).
   */
  lag(partition?: string): FollowerLag {
    const now = performance.now();
    const one = (l: PartitionLag): FollowerLag => {
      const caughtUp = l.exact && l.entries === 0;
      const since = l.caughtUpAt ?? l.startedAt;
      return { entries: l.entries, atLeast: !l.exact, behindMs: caughtUp ? 0 : now - since, staleMs: l.caughtUpAt === null ? Infinity : now - l.caughtUpAt, ms: null };
    };
    if (partition !== undefined) {
      const l = this.lags.get(partition);
      if (!l) throw new InvalidArgumentError('partition', `not a partition of this follower: ${JSON.stringify(partition)}`);
      return one(l);
    }
    let entries = 0;
    let atLeast = false;
    let behindMs = 0;
    let staleMs = 0;
    for (const l of this.lags.values()) {
      const x = one(l);
      entries += x.entries;
      atLeast ||= x.atLeast;
      behindMs = Math.max(behindMs, x.behindMs);
      staleMs = Math.max(staleMs, x.staleMs);
    }
    return { entries, atLeast, behindMs, staleMs, ms: null };
  }

  /**
   * Ask the broker now how many messages each partition holds after its mark (`source.pending`,
   * the partitions one after another), emit `lag`, and return the whole follower's lag. A
   * partition the source cannot count stays as it was; a broker error rejects (the follower
   * itself goes on).
   */
  async measureLag(): Promise<FollowerLag> {
    const pending = this.source.pending?.bind(this.source);
    if (pending) {
      for (const p of this.partitions) {
        const sentAt = performance.now();
        const l = this.lags.get(p)!;
        const handledBefore = l.handled;
        const after = this.current.get(p)?.offset ?? (await this.sink.loadMark(this.markName(p))).offset;
        const n = await pending(p, after);
        if (n === null) continue;
        // Handled during the call: some of them the broker counted, maybe not all (published after
        // its count), so the rest is exact only if none was handled meanwhile.
        const since = l.handled - handledBefore;
        l.entries = Math.max(0, n - since);
        l.exact = since === 0;
        l.measuredAt = sentAt;
        if (n === 0) {
          // Nothing after the mark at the broker's count, which came after the send: caught up as of the send.
          l.exact = true;
          l.caughtUpAt = sentAt;
        }
      }
    }
    const partitions = new Map(this.partitions.map((p) => [p, this.lag(p)] as const));
    const lag = this.lag();
    this.emit('lag', { lag, partitions });
    return lag;
  }

  /**
   * Start consuming every partition (once; later calls return the same promise). Resolves when
   * stopped; rejects with the first error that stopped a partition (the others are stopped too):
   * ApplyError (seq = the broker offset), InvalidMessageError, OffsetMismatchError, or the last
   * broker or sink error after `maxRetries` attempts.
   */
  start(): Promise<void> {
    this.running ??= this.run();
    return this.running;
  }

  async stop(): Promise<void> {
    this.stopper.abort();
    await this.running?.catch(() => {});
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.stop();
  }

  private async run(): Promise<void> {
    let first: { error: Error; partition: string; offset: number | null } | null = null;
    const stopMeasuring = this.measureEvery();
    await Promise.all(
      this.partitions.map((p) =>
        this.consume(p).catch((err: unknown) => {
          const error = err instanceof Error ? err : new Error(String(err));
          const offset = err instanceof InvalidMessageError ? err.offset : err instanceof ApplyError ? err.seq : null;
          if (!first) {
            first = { error, partition: p, offset };
            this.emit('failed', first);
          }
          this.stopper.abort();
        }),
      ),
    );
    stopMeasuring();
    if (first) throw (first as { error: Error }).error;
    this.emit('stopped', {});
  }

  /** Measure the lag every `lagEveryMs` while running, one measure at a time; failures wait for the next. */
  private measureEvery(): () => void {
    if (this.lagEveryMs === 0 || !this.source.pending) return () => {};
    let busy = false;
    const timer = setInterval(() => {
      if (busy || this.stopper.signal.aborted) return;
      busy = true;
      this.measureLag()
        .catch(() => {})
        .finally(() => (busy = false));
    }, this.lagEveryMs);
    timer.unref?.();
    return () => clearInterval(timer);
  }

  /** A saved mark beyond the partition's last message: the projection is of another log (checked where the source can tell). */
  private async checkMark(partition: string, mark: PartitionMark): Promise<void> {
    if (mark.offset === 0 || !this.source.lastOffset) return;
    const last = await this.source.lastOffset(partition);
    if (last !== null && mark.offset > last) {
      throw new OffsetMismatchError(
        this.markName(partition),
        mark.offset,
        `the saved mark is offset ${mark.offset}, beyond the end of ${this.source.name}/${partition} (last offset ${last}): the projection was built from another stream or broker, or the stream was reset`,
      );
    }
  }

  private markName(partition: string): string {
    return `${this.name}/${partition}`;
  }

  /** One partition: subscribe from its saved mark, handle batches; on a broker or sink failure, back off and start again from the saved mark. */
  private async consume(partition: string): Promise<void> {
    const signal = this.stopper.signal;
    let failures = 0;
    while (!signal.aborted) {
      let sub: BrokerSubscription | null = null;
      try {
        let mark = await this.sink.loadMark(this.markName(partition));
        this.current.set(partition, mark);
        await this.checkMark(partition, mark);
        sub = await this.source.subscribe(partition, mark.offset);
        while (!signal.aborted) {
          const batch = await sub.take(this.batchSize, signal);
          if (batch.length === 0) continue;
          mark = await this.handle(partition, mark, batch);
          failures = 0;
        }
      } catch (err) {
        if (err instanceof ApplyThrew) throw new ApplyError(`${this.source.name}/${partition}`, err.offset, err.error);
        if (err instanceof InvalidMessageError || err instanceof OffsetMismatchError) throw err;
        if (err instanceof TenureError && (err.code === 'INVALID_ARGUMENT' || err.code === 'CLOSED')) throw err;
        if (signal.aborted) break;
        failures += 1;
        if (failures > this.maxRetries) throw err;
        const delayMs = Math.min(RETRY_MAX_MS, this.retryMs * 2 ** Math.min(failures - 1, 16));
        this.emit('retry', { partition, error: err instanceof Error ? err : new Error(String(err)), attempt: failures, delayMs });
        await sleep(delayMs, signal);
      } finally {
        await sub?.close().catch(() => {});
      }
    }
  }

  /**
   * Handle one batch in one transaction: skip what the mark already covers, drop a lower term,
   * apply the rest, move the mark; settle the messages after the commit. A message that cannot be
   * read ends the batch before it: what precedes it is committed, then the follower stops on it.
   */
  private async handle(partition: string, mark: PartitionMark, batch: readonly BrokerDelivery[]): Promise<PartitionMark> {
    const started = performance.now();
    const handled: BrokerDelivery[] = [];
    const decisions: BrokerDecision[] = [];
    const drops: { offset: number; term: number; highest: number; error: StaleTermError }[] = [];
    let duplicates = 0;
    let markers = 0;
    let offset = mark.offset;
    let term = mark.term;
    let bad: InvalidMessageError | null = null;
    for (const d of batch) {
      if (!Number.isSafeInteger(d.offset) || d.offset < 1) {
        bad = new InvalidMessageError(partition, Number.isFinite(d.offset) ? d.offset : 0, `the broker gave offset ${String(d.offset)}, not a whole number >= 1`);
        break;
      }
      if (d.offset <= offset) {
        // Handled before (a redelivery, or a resubscription that starts a little early): ack it again.
        handled.push(d);
        duplicates++;
        continue;
      }
      let fence: ReturnType<typeof readMessageFence>;
      let payload: string;
      try {
        fence = readMessageFence(this.group, { token: d.token, position: d.offset });
        payload = typeof d.payload === 'string' ? d.payload : utf8.decode(d.payload);
      } catch (err) {
        if (err instanceof InvalidArgumentError) bad = new InvalidMessageError(partition, d.offset, err.message, err);
        else if (err instanceof TypeError) bad = new InvalidMessageError(partition, d.offset, 'its payload is not UTF-8 text', err);
        else throw err;
        break;
      }
      const t = fence.token.term;
      if (t < term) {
        drops.push({ offset: d.offset, term: t, highest: term, error: new StaleTermError(fence.token.lease, t, term) });
      } else {
        term = t;
        if (payload === TERM_MARKER_PAYLOAD) markers++;
        else decisions.push({ partition, offset: d.offset, lease: fence.token.lease, term: t, payload });
      }
      offset = d.offset;
      handled.push(d);
    }
    let next = mark;
    if (offset > mark.offset) {
      next = { offset, term, dropped: mark.dropped + drops.length };
      await this.sink.commitMark(this.markName(partition), mark.offset, next, async (tx) => {
        if (decisions.length > 0) await this.applyFn(decisions, tx);
      });
      this.current.set(partition, next);
      const l = this.lags.get(partition)!;
      const count = handled.length - duplicates;
      l.handled += count;
      if (count > l.entries) l.exact = false; // more came than the last measure counted
      l.entries = Math.max(0, l.entries - count);
      // Everything the last measure counted is handled: caught up as of when it was sent.
      if (l.entries === 0 && l.exact) l.caughtUpAt = l.measuredAt;
    }
    // One cumulative acknowledgement for the batch, after its commit.
    handled[handled.length - 1]?.settle();
    this.counts.applied += decisions.length;
    this.counts.duplicate += duplicates;
    this.counts.dropped += drops.length;
    this.counts.markers += markers;
    for (const drop of drops) {
      // The elector or lock in this process holding that term, if any, steps down.
      refuse(drop.error, 'message', 'guard');
      this.emit('dropped', { partition, offset: drop.offset, term: drop.term, highest: drop.highest });
    }
    if (offset > mark.offset) this.emit('applied', { partition, to: offset, count: decisions.length, ms: performance.now() - started });
    if (bad) throw bad;
    return next;
  }
}

function sleep(ms: number, signal: AbortSignal): Promise<void> {
  if (signal.aborted) return Promise.resolve();
  return new Promise((resolve) => {
    const done = (): void => {
      clearTimeout(timer);
      signal.removeEventListener('abort', done);
      resolve();
    };
    const timer = setTimeout(done, ms);
    signal.addEventListener('abort', done, { once: true });
  });
}

/**
 * A bounded queue between a broker client and a follower's loop (for the adapters in this
 * folder): `push` resolves when there is room again, so a pump awaiting it stops pulling from the
 * broker; `fail` ends it with an error that the next `take` rejects with.
 */
export class DeliveryInbox {
  private readonly items: BrokerDelivery[] = [];
  private failure: Error | null = null;
  private waiter: (() => void) | null = null;
  private roomWaiters: (() => void)[] = [];
  constructor(private readonly capacity: number) {}

  push(d: BrokerDelivery): Promise<void> {
    this.items.push(d);
    this.wake();
    if (this.items.length < this.capacity) return Promise.resolve();
    return new Promise((resolve) => this.roomWaiters.push(resolve));
  }

  fail(error: Error): void {
    this.failure ??= error;
    this.wake();
  }

  async take(max: number, signal: AbortSignal): Promise<BrokerDelivery[]> {
    while (this.items.length === 0) {
      if (this.failure) throw this.failure;
      if (signal.aborted) return [];
      await new Promise<void>((resolve) => {
        const done = (): void => {
          signal.removeEventListener('abort', done);
          this.waiter = null;
          resolve();
        };
        this.waiter = done;
        signal.addEventListener('abort', done, { once: true });
      });
    }
    const out = this.items.splice(0, max);
    if (this.items.length < this.capacity) {
      const room = this.roomWaiters;
      this.roomWaiters = [];
      for (const r of room) r();
    }
    return out;
  }

  private wake(): void {
    this.waiter?.();
  }
}
