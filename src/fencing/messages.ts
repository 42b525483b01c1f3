/**
 * Fenced messages: the token rides in a message's metadata, and the consumer is where the write
 * lands, so the consumer is where the fence is checked.
 *
 * Publish side: every broker adapter (nats.ts, amqp.ts, mqtt.ts) puts the same two fields in the
 * message's metadata: `Fencing-Token: <group>#<term>` (the token of the current leadership, from
 * the token context, or one passed by hand) and `Fencing-Seq: <n>`, the publish's number within
 * that leadership in this process (1, 2, 3…), which lets a consumer on a broker without offsets
 * (RabbitMQ classic queues, MQTT) recognise a redelivery.
 *
 * Consumer side: a FencedConsumer keeps, per consumer and group, the highest term it has applied
 * together with the message's position (JetStream's stream sequence, or the Fencing-Seq) in a
 * small ledger (a SQL table on the application's own database), and reads and advances it in the
 * SAME transaction as the application's apply. A message whose term is below the highest is a
 * zombie's late publish: dropped, counted and refused (the elector in this process holding that
 * term steps down); a message at or below the recorded position was applied already: acknowledged
 * without applying it again; a message with no token, or a malformed one, is never applied. The
 * adapters acknowledge a message only after the apply's transaction committed.
 *
 * A check that is not in the apply's transaction is not fencing: a consumer that checks the term
 * first and writes afterwards can interleave with a redelivery or a second consumer.
 */
import { InvalidArgumentError, StaleTermError, TenureError, checkName, checkToken, makeToken, reportFencedWrite } from '../core/index.js';
import type { FencingToken } from '../core/index.js';
import { refuse, requireFence } from './context.js';
import type { SqlDialect } from './dialects.js';
import { FENCING_HEADER_MAX, FENCING_TOKEN_HEADER, formatFencingHeader, parseFencingHeader } from './http.js';
import { formatToken } from './token.js';

// The token travels under the HTTP header's name and in its form on every broker (NATS header,
// AMQP header, MQTT v5 user property): `group#term`, the group percent-encoded outside visible
// ASCII (formatFencingHeader), so one parser (parseFencingHeader) reads it everywhere.
/** The metadata key of the publish's number within its leadership (1, 2, 3… per process). */
export const FENCING_SEQ_HEADER = 'Fencing-Seq';

export const messageLimits = {
  /** The longest Fencing-Token value read (FENCING_HEADER_MAX: a 200-character group percent-encoded, `#`, 16 digits). */
  tokenHeaderMaxChars: FENCING_HEADER_MAX,
  /** The longest Fencing-Seq value read (a safe integer has at most 16 digits). */
  seqHeaderMaxChars: 16,
  /** Tokens whose publish counters are kept in one process (the oldest is forgotten first). */
  publishCountersMax: 1024,
} as const;

/** The metadata one fenced publish carries. */
export interface MessageFence {
  readonly token: FencingToken;
  /** `Fencing-Token` value: `<group>#<term>` (the group percent-encoded outside visible ASCII). */
  readonly tokenText: string;
  /** `Fencing-Seq` value: this publish's number within the token's leadership in this process. */
  readonly seq: number;
}

export interface FencedPublishOptions {
  /** The token to publish with; default: the token context's (requireFence), which throws NoTokenError outside a leadership. */
  readonly token?: FencingToken;
  /** The group the token must belong to (checked against the context's token). */
  readonly group?: string;
}

const publishCounters = new Map<string, number>();

/**
 * The fence of the next publish: the token (given, or the context's: NoTokenError outside a
 * leadership or after it ended; never unfenced) and its next sequence number in this process.
 */
export function nextMessageFence(what: string, options: FencedPublishOptions = {}): MessageFence {
  let token: FencingToken;
  if (options.token !== undefined) {
    const given = checkToken('token', options.token);
    token = makeToken(given.lease, given.term);
    if (options.group !== undefined && token.lease !== options.group) {
      throw new InvalidArgumentError('token', `is for group ${token.lease}, not ${options.group}`);
    }
  } else {
    token = requireFence(what, options.group).token;
  }
  const tokenText = formatFencingHeader(token);
  const seq = (publishCounters.get(tokenText) ?? 0) + 1;
  // Most recently used last, so the oldest leadership's counter is the one forgotten.
  publishCounters.delete(tokenText);
  publishCounters.set(tokenText, seq);
  if (publishCounters.size > messageLimits.publishCountersMax) {
    const oldest = publishCounters.keys().next().value;
    if (oldest !== undefined) publishCounters.delete(oldest);
  }
  return { token, tokenText, seq };
}

/** Where a message sits in its group's history: compared as (term, position). */
export interface MessageMark {
  readonly term: number;
  /** The broker's offset (JetStream stream sequence) or the publisher's Fencing-Seq. */
  readonly position: number;
}

/** What a consumer read from one message's metadata, as the broker adapter found it. */
export interface MessageMetadata {
  /** The Fencing-Token value; undefined when the message carries none. */
  readonly token: unknown;
  /** The message's position: a broker offset (number) or the Fencing-Seq value (text). */
  readonly position: unknown;
}

/** Why a message was not applied, in words a dead-letter reason can carry. */
export type MessageVerdict =
  | { readonly outcome: 'applied'; readonly token: FencingToken; readonly position: number }
  | { readonly outcome: 'duplicate'; readonly token: FencingToken; readonly position: number; readonly reason: string }
  | { readonly outcome: 'stale'; readonly token: FencingToken; readonly position: number; readonly reason: string; readonly error: StaleTermError }
  | { readonly outcome: 'invalid'; readonly reason: string; readonly error: InvalidArgumentError };

/** Whether the broker should be told the message is done with (acknowledged) or refused (terminated, dead-lettered). */
export function settles(verdict: MessageVerdict): 'ack' | 'reject' {
  return verdict.outcome === 'applied' || verdict.outcome === 'duplicate' ? 'ack' : 'reject';
}

function text(value: unknown): string | undefined {
  if (typeof value === 'string') return value;
  if (value instanceof Uint8Array) return Buffer.from(value).toString('utf8');
  return undefined;
}

function shown(value: string): string {
  return JSON.stringify(value.length > 40 ? `${value.slice(0, 40)}…` : value);
}

/**
 * Parse a message's fencing metadata for `group`; InvalidArgumentError naming what is wrong (no
 * token, a value too long, not `<group>#<term>`, a term outside [1, 2^53), another group's token, a
 * position that is not a whole number >= 1).
 */
export function readMessageFence(group: string, meta: MessageMetadata): { token: FencingToken; position: number } {
  if (meta.token === undefined || meta.token === null) {
    throw new InvalidArgumentError(FENCING_TOKEN_HEADER, `missing: a fenced consumer applies only messages published with a token (publish with tenure's fenced publish)`);
  }
  const tokenText = text(meta.token);
  if (tokenText === undefined) throw new InvalidArgumentError(FENCING_TOKEN_HEADER, `expected text <group>#<term>, got ${Array.isArray(meta.token) ? `${meta.token.length} values` : typeof meta.token}`);
  const parsed = parseFencingHeader([tokenText]);
  if (parsed.kind !== 'token') throw new InvalidArgumentError(FENCING_TOKEN_HEADER, parsed.kind === 'missing' ? 'missing' : parsed.detail);
  const token = parsed.token;
  if (token.lease !== group) throw new InvalidArgumentError(FENCING_TOKEN_HEADER, `is for group ${shown(token.lease)}, this consumer fences group ${shown(group)}`);
  let position: number;
  if (typeof meta.position === 'number') {
    position = meta.position;
  } else {
    const p = text(meta.position);
    if (p === undefined) throw new InvalidArgumentError(FENCING_SEQ_HEADER, `missing: a fenced publish numbers its messages (publish with tenure's fenced publish)`);
    if (p.length > messageLimits.seqHeaderMaxChars || !/^[1-9][0-9]*$/.test(p)) throw new InvalidArgumentError(FENCING_SEQ_HEADER, `expected a whole number >= 1, got ${shown(p)}`);
    position = Number(p);
  }
  if (!Number.isSafeInteger(position) || position < 1) throw new InvalidArgumentError(FENCING_SEQ_HEADER, `expected a whole number >= 1, got ${String(position)}`);
  return { token, position };
}

/**
 * Where a consumer keeps, per consumer name and group, the highest (term, position) it applied:
 * a transactional sink. `run` is one transaction holding the application's apply and the mark
 * together, so the two commit or roll back as one.
 */
export interface MessageLedger<Tx> {
  /**
   * One transaction: read the mark of (`consumer`, `group`) and lock it until the end (null when
   * none yet), call `step` with the transaction and the mark, record `advance` when `step` returns
   * one, commit. When anything throws, roll back and rethrow: neither the apply nor the mark stays.
   */
  run<T>(consumer: string, group: string, step: (tx: Tx, mark: MessageMark | null) => Promise<LedgerStep<T>>): Promise<T>;
  /** The latest term issued for `group`, when the ledger can see the lease table (undefined: not checked). */
  issued?(tx: Tx, group: string): Promise<number | null | undefined>;
  /**
   * Dedupe by id (FencedConsumer with `dedupe: 'id'`): one transaction for a batch of messages.
   * Read and lock the mark of (`consumer`, `group`) as `run` does, read which of `positions` are
   * recorded as applied, call `step`, record the positions it applied and the mark it returns,
   * commit; roll back and rethrow when anything throws.
   */
  runBatch?<T>(consumer: string, group: string, positions: readonly number[], step: (tx: Tx, state: LedgerBatchState) => Promise<LedgerBatchStep<T>>): Promise<T>;
  /**
   * Forget the applied positions of (`consumer`, `group`) at or below `upTo` (id dedupe only):
   * call it with a position the broker will never deliver again (JetStream: the consumer's
   * `ack_floor.stream_seq`). Resolves to the number forgotten.
   */
  forget?(consumer: string, group: string, upTo: number): Promise<number>;
}

/** What a batch step reads: the mark (locked until commit) and which of the batch's positions are already applied. */
export interface LedgerBatchState {
  readonly mark: MessageMark | null;
  readonly applied: ReadonlySet<number>;
}

/** What a batch step hands back: its value, the mark to record, and the positions it applied (recorded with the term each carried). */
export interface LedgerBatchStep<T> extends LedgerStep<T> {
  readonly recorded: readonly MessageMark[];
}

/** What a ledger step hands back: its value, and the mark to record (none: the mark stays). */
export interface LedgerStep<T> {
  readonly value: T;
  readonly advance?: MessageMark;
}

/**
 * A FencedConsumer refuses to handle a message because an earlier one failed to apply and has not
 * come back yet: applying a later message first would record a position past the failed one, and
 * its redelivery would then look applied. Not acknowledged: the broker redelivers it.
 */
export class ConsumerHaltedError extends TenureError {
  /** The message that failed: `<group>#<term>` and its position. */
  readonly waitingFor: { readonly token: string; readonly position: number };
  constructor(waitingFor: { token: string; position: number }, cause: unknown) {
    super(
      'CONSUMER_HALTED',
      `not handled: the message at position ${waitingFor.position} of ${waitingFor.token} failed to apply (${cause instanceof Error ? cause.message : String(cause)}); later messages wait for its redelivery, so that none is applied before it`,
      { cause },
    );
    this.waitingFor = waitingFor;
  }
}

/** Counts of a FencedConsumer's verdicts since it was made. */
export interface MessageCounts {
  applied: number;
  duplicate: number;
  stale: number;
  invalid: number;
}

export interface FencedConsumerOptions<Tx, M> {
  /** The group (lease) whose leader publishes these messages; another group's token is refused. */
  readonly group: string;
  /** This consumer's durable name in the ledger (one ordered consumer per name). */
  readonly consumer: string;
  readonly ledger: MessageLedger<Tx>;
  /** The application's write, inside the ledger's transaction (`tx`): write through `tx` only. */
  readonly apply: (tx: Tx, message: M, fence: { readonly token: FencingToken; readonly position: number }) => Promise<void>;
  /** Told of every message not applied (duplicate, stale, invalid), after it was counted. */
  readonly onSkip?: (verdict: Exclude<MessageVerdict, { outcome: 'applied' }>, message: M) => void;
  /**
   * How a redelivery is recognised. `position` (default): by its position at or below the last
   * applied one, which holds only when messages arrive in order, redeliveries included (one
   * outstanding on JetStream; any broker). `id`: by its position recorded as applied, in the same
   * transaction as the apply (the ledger's `runBatch`), so many messages may be in flight and
   * arrive in any order; for brokers whose position is a durable id of the message (JetStream's
   * stream sequence: FENCED_JETSTREAM_CONSUMER_BY_ID). The messages waiting while a transaction
   * runs are applied together in the next one (at most `maxBatch`), one commit for all.
   */
  readonly dedupe?: 'position' | 'id';
  /** With `dedupe: 'id'`, the most messages applied in one transaction (1..1000, default 100). */
  readonly maxBatch?: number;
}

/** The largest `maxBatch`: a batch's positions travel in one statement. */
const MAX_BATCH_LIMIT = 1000;

interface Pending<M> {
  readonly message: M;
  readonly meta: MessageMetadata;
  readonly resolve: (v: MessageVerdict) => void;
  readonly reject: (err: unknown) => void;
}

/**
 * The consumer side of fenced messages, broker-neutral: `handle` decides and applies one message
 * in one ledger transaction; a broker adapter acknowledges it only when the verdict `settles` as
 * `ack` (applied now, or applied before). Messages are handled one at a time, in arrival order.
 */
export class FencedConsumer<Tx, M = unknown> {
  readonly group: string;
  readonly consumer: string;
  readonly counts: MessageCounts = { applied: 0, duplicate: 0, stale: 0, invalid: 0 };
  /** How a redelivery is recognised (see FencedConsumerOptions.dedupe). */
  readonly dedupe: 'position' | 'id';
  /** With `dedupe: 'id'`, the most messages applied in one transaction. */
  readonly maxBatch: number;
  private readonly options: FencedConsumerOptions<Tx, M>;
  /** `dedupe: 'id'`: the messages waiting for the next batch, and whether a batch is running. */
  private pending: Pending<M>[] = [];
  private draining = false;
  private queue: Promise<unknown> = Promise.resolve();
  /** The message whose apply failed, until it is handled again: later messages are refused meanwhile. */
  private failed: { readonly token: string; readonly position: number; readonly error: unknown } | null = null;

  constructor(options: FencedConsumerOptions<Tx, M>) {
    if (typeof options !== 'object' || options === null) throw new InvalidArgumentError('options', 'expected { group, consumer, ledger, apply }');
    this.group = checkName('group', options.group);
    this.consumer = checkName('consumer', options.consumer);
    if (typeof options.ledger !== 'object' || options.ledger === null || typeof options.ledger.run !== 'function') {
      throw new InvalidArgumentError('ledger', 'expected a MessageLedger such as sqlMessageLedger(postgresDialect, client)');
    }
    if (typeof options.apply !== 'function') throw new InvalidArgumentError('apply', 'expected async (tx, message, fence) => { … }');
    const dedupe = options.dedupe ?? 'position';
    if (dedupe !== 'position' && dedupe !== 'id') throw new InvalidArgumentError('dedupe', `expected 'position' or 'id', got ${JSON.stringify(dedupe)}`);
    if (dedupe === 'id' && typeof options.ledger.runBatch !== 'function') {
      throw new InvalidArgumentError('ledger', "has no runBatch: dedupe 'id' needs a ledger that records applied ids (sqlMessageLedger, memoryMessageLedger)");
    }
    const maxBatch = options.maxBatch ?? 100;
    if (!Number.isSafeInteger(maxBatch) || maxBatch < 1 || maxBatch > MAX_BATCH_LIMIT) throw new InvalidArgumentError('maxBatch', `expected an integer in [1, ${MAX_BATCH_LIMIT}], got ${String(maxBatch)}`);
    this.dedupe = dedupe;
    this.maxBatch = maxBatch;
    this.options = options;
  }

  /**
   * Decide and apply one message. Resolves to its verdict (invalid metadata, a stale term and a
   * duplicate are verdicts, not errors); rejects when the apply or the ledger failed, and then
   * nothing was committed and the message must not be acknowledged. After such a failure every
   * later message is refused with ConsumerHaltedError (not applied, not to be acknowledged) until
   * the failed one is handled again: the brokers redeliver it first (JetStream after the nak,
   * RabbitMQ after the requeue, MQTT when the client reconnects its persistent session).
   */
  handle(message: M, meta: MessageMetadata): Promise<MessageVerdict> {
    if (this.dedupe === 'id') {
      return new Promise<MessageVerdict>((resolve, reject) => {
        this.pending.push({ message, meta, resolve, reject });
        if (!this.draining) void this.drain();
      });
    }
    const run = this.queue.then(
      () => this.handleNow(message, meta),
      () => this.handleNow(message, meta),
    );
    this.queue = run.catch(() => undefined);
    return run;
  }

  /**
   * Lift the halt after a failed apply without waiting for that message to come back (when it
   * will not: dead-lettered, expired, or handled elsewhere). Later messages are handled again.
   */
  resume(): void {
    this.failed = null;
  }

  private async handleNow(message: M, meta: MessageMetadata): Promise<MessageVerdict> {
    let fence: { token: FencingToken; position: number };
    try {
      fence = readMessageFence(this.group, meta);
    } catch (err) {
      if (!(err instanceof InvalidArgumentError)) throw err;
      return this.skip({ outcome: 'invalid', reason: err.message, error: err }, message);
    }
    const { ledger, apply } = this.options;
    const { token, position } = fence;
    const tokenText = formatToken(token);
    if (this.failed) {
      if (this.failed.token !== tokenText || this.failed.position !== position) throw new ConsumerHaltedError(this.failed, this.failed.error);
      this.failed = null; // the failed message is back: handle it, and what follows it
    }
    const start = performance.now();
    let verdict: MessageVerdict;
    try {
      verdict = await ledger.run(this.consumer, this.group, async (tx, mark): Promise<LedgerStep<MessageVerdict>> => {
        if (mark && token.term < mark.term) {
          const error = new StaleTermError(token.lease, token.term, mark.term);
          return { value: { outcome: 'stale', token, position, error, reason: `stale fencing token: term ${token.term} < ${mark.term} for group ${token.lease} (a deposed leader's late publish)` } };
        }
        if (mark && token.term === mark.term && position <= mark.position) {
          return { value: { outcome: 'duplicate', token, position, reason: `already applied: position ${position} <= ${mark.position} of term ${mark.term}` } };
        }
        if (ledger.issued) {
          const issued = await ledger.issued(tx, this.group);
          if (issued !== undefined && token.term > (issued ?? 0)) {
            const error = new InvalidArgumentError(FENCING_TOKEN_HEADER, `term ${token.term} was never issued for group ${token.lease} (latest ${issued ?? 0})`);
            return { value: { outcome: 'invalid', reason: error.message, error } };
          }
        }
        await apply(tx, message, fence);
        return { value: { outcome: 'applied', token, position }, advance: { term: token.term, position } };
      });
    } catch (err) {
      reportFencedWrite({ path: 'message', lease: this.group, ms: performance.now() - start, outcome: 'error' });
      this.failed = { token: tokenText, position, error: err };
      throw err;
    }
    reportFencedWrite({ path: 'message', lease: this.group, ms: performance.now() - start, outcome: verdict.outcome === 'stale' ? 'stale' : 'ok' });
    if (verdict.outcome === 'applied') {
      this.counts.applied++;
      return verdict;
    }
    if (verdict.outcome === 'stale') refuse(verdict.error, 'message', 'guard');
    return this.skip(verdict, message);
  }

  /** `dedupe: 'id'`: one batch transaction at a time, each taking what arrived meanwhile. */
  private async drain(): Promise<void> {
    this.draining = true;
    try {
      while (this.pending.length > 0) {
        const batch = this.pending.splice(0, this.maxBatch);
        try {
          await this.applyBatch(batch);
        } catch (err) {
          if (batch.length === 1) {
            batch[0]!.reject(err);
            continue;
          }
          // Nothing of the batch was committed: apply each alone, so that only the failing one fails.
          for (const item of batch) {
            try {
              await this.applyBatch([item]);
            } catch (one) {
              item.reject(one);
            }
          }
        }
      }
    } finally {
      this.draining = false;
    }
  }

  /**
   * One ledger transaction for `batch`: every message's verdict decided in it, against the locked
   * mark and the positions recorded as applied; the applied ones recorded with the mark; each
   * settled only after the commit. Throws (nothing settled, nothing committed) when an apply or
   * the ledger fails.
   */
  private async applyBatch(batch: readonly Pending<M>[]): Promise<void> {
    const { ledger, apply } = this.options;
    const valid: { item: Pending<M>; fence: { token: FencingToken; position: number } }[] = [];
    for (const item of batch) {
      try {
        valid.push({ item, fence: readMessageFence(this.group, item.meta) });
      } catch (err) {
        if (!(err instanceof InvalidArgumentError)) {
          item.reject(err);
          continue;
        }
        item.resolve(this.skip({ outcome: 'invalid', reason: err.message, error: err }, item.message));
      }
    }
    if (valid.length === 0) return;
    const start = performance.now();
    let verdicts: MessageVerdict[];
    try {
      verdicts = await ledger.runBatch!(
        this.consumer,
        this.group,
        valid.map((v) => v.fence.position),
        async (tx, { mark, applied }): Promise<LedgerBatchStep<MessageVerdict[]>> => {
          let term = mark?.term ?? 0;
          let position = mark?.position ?? 0;
          const recorded: MessageMark[] = [];
          const done = new Set<number>();
          // The group's latest issued term, read once per batch (only when a message raises the term).
          let issued: { readonly term: number | null | undefined } | null = null;
          const out: MessageVerdict[] = [];
          for (const { item, fence } of valid) {
            const { token, position: pos } = fence;
            if (applied.has(pos) || done.has(pos)) {
              out.push({ outcome: 'duplicate', token, position: pos, reason: `already applied: position ${pos} is recorded as applied` });
              continue;
            }
            if (token.term < term) {
              const error = new StaleTermError(token.lease, token.term, term);
              out.push({ outcome: 'stale', token, position: pos, error, reason: `stale fencing token: term ${token.term} < ${term} for group ${token.lease} (a deposed leader's late publish)` });
              continue;
            }
            if (ledger.issued && token.term > term) {
              issued ??= { term: await ledger.issued(tx, this.group) };
              const latest = issued.term;
              if (latest !== undefined && token.term > (latest ?? 0)) {
                const error = new InvalidArgumentError(FENCING_TOKEN_HEADER, `term ${token.term} was never issued for group ${token.lease} (latest ${latest ?? 0})`);
                out.push({ outcome: 'invalid', reason: error.message, error });
                continue;
              }
            }
            await apply(tx, item.message, fence);
            done.add(pos);
            recorded.push({ term: token.term, position: pos });
            term = token.term;
            position = Math.max(position, pos);
            out.push({ outcome: 'applied', token, position: pos });
          }
          return { value: out, recorded, ...(recorded.length > 0 ? { advance: { term, position } } : {}) };
        },
      );
    } catch (err) {
      reportFencedWrite({ path: 'message', lease: this.group, ms: performance.now() - start, outcome: 'error' });
      throw err;
    }
    const ms = performance.now() - start;
    valid.forEach(({ item }, i) => {
      const verdict = verdicts[i]!;
      reportFencedWrite({ path: 'message', lease: this.group, ms, outcome: verdict.outcome === 'stale' ? 'stale' : 'ok' });
      if (verdict.outcome === 'applied') {
        this.counts.applied++;
        item.resolve(verdict);
        return;
      }
      if (verdict.outcome === 'stale') refuse(verdict.error, 'message', 'guard');
      item.resolve(this.skip(verdict, item.message));
    });
  }

  private skip(verdict: Exclude<MessageVerdict, { outcome: 'applied' }>, message: M): MessageVerdict {
    this.counts[verdict.outcome]++;
    try {
      this.options.onSkip?.(verdict, message);
    } catch {
      // the caller's report is not the consumer's failure
    }
    return verdict;
  }
}

/**
 * A ledger in this process's memory, for applications whose applied state lives in the same
 * memory (tests, demos, an in-memory projection rebuilt from the stream at start): it is lost
 * with the process, exactly as that state is. Nothing is rolled back when the apply throws
 * halfway: only the mark is not advanced. Durable state needs `sqlMessageLedger`.
 */
export function memoryMessageLedger(): MessageLedger<null> {
  const marks = new Map<string, MessageMark>();
  const appliedIds = new Map<string, Set<number>>();
  const keyOf = (consumer: string, group: string): string => JSON.stringify([checkName('consumer', consumer), checkName('group', group)]);
  return {
    async run<T>(consumer: string, group: string, step: (tx: null, mark: MessageMark | null) => Promise<LedgerStep<T>>): Promise<T> {
      const key = keyOf(consumer, group);
      const { value, advance } = await step(null, marks.get(key) ?? null);
      if (advance) marks.set(key, { term: advance.term, position: advance.position });
      return value;
    },
    async runBatch<T>(consumer: string, group: string, positions: readonly number[], step: (tx: null, state: LedgerBatchState) => Promise<LedgerBatchStep<T>>): Promise<T> {
      const key = keyOf(consumer, group);
      const ids = appliedIds.get(key) ?? new Set<number>();
      const { value, advance, recorded } = await step(null, { mark: marks.get(key) ?? null, applied: new Set(positions.filter((p) => ids.has(p))) });
      for (const r of recorded) ids.add(r.position);
      appliedIds.set(key, ids);
      if (advance) marks.set(key, { term: advance.term, position: advance.position });
      return value;
    },
    async forget(consumer: string, group: string, upTo: number): Promise<number> {
      const ids = appliedIds.get(keyOf(consumer, group));
      let n = 0;
      for (const p of ids ?? []) if (p <= upTo && ids!.delete(p)) n++;
      return n;
    },
  };
}

// ---- The SQL ledger: one small table on the application's own database -------------------------

export interface SqlMessageLedgerOptions {
  /** The ledger table (default `tenure_message_fences`); `await ledger.createTable()` makes it. */
  readonly table?: string;
  /**
   * tenure's lease table in this database (e.g. `tenure_leases`), read in the same transaction so
   * that a forged future term cannot poison the ledger; default null (the leases live elsewhere:
   * then an unissued term is not detected).
   */
  readonly leaseTable?: string | null;
  /**
   * The table of applied positions for consumers with `dedupe: 'id'` (default: the ledger
   * table's name + `_applied`, so `tenure_message_fences_applied`); `createTable` makes it too.
   */
  readonly appliedTable?: string;
}

interface PgPoolLike {
  connect(): Promise<{ query: (text: string, values?: unknown[]) => Promise<unknown>; release: (err?: Error | boolean) => void }>;
  totalCount: number;
}
interface MysqlPoolLike {
  getConnection(): Promise<MysqlTxConnection & { release(): void }>;
}
interface MysqlTxConnection {
  beginTransaction(): Promise<void>;
  commit(): Promise<void>;
  rollback(): Promise<void>;
}

function isPgPool(db: unknown): db is PgPoolLike {
  return typeof db === 'object' && db !== null && typeof (db as { connect?: unknown }).connect === 'function' && typeof (db as { totalCount?: unknown }).totalCount === 'number';
}
function isMysqlPool(db: unknown): db is MysqlPoolLike {
  return typeof db === 'object' && db !== null && typeof (db as { getConnection?: unknown }).getConnection === 'function';
}
function isMysqlConnection(db: unknown): db is MysqlTxConnection {
  return typeof db === 'object' && db !== null && typeof (db as { beginTransaction?: unknown }).beginTransaction === 'function';
}

const IDENT = /^[A-Za-z_][A-Za-z0-9_$]*$/;

function tableIdent<Db>(d: SqlDialect<Db>, field: string, name: string): string {
  const parts = typeof name === 'string' ? name.split('.') : [];
  if (parts.length < 1 || parts.length > 2 || parts.some((p) => !IDENT.test(p) || p.length > d.identifierMax)) {
    throw new InvalidArgumentError(field, `expected TABLE or ${d.qualifier}.TABLE of [A-Za-z_][A-Za-z0-9_$]* (at most ${d.identifierMax} characters each), got ${JSON.stringify(name)}`);
  }
  return parts.map((p) => d.quote(p)).join('.');
}

function termValue(value: unknown): number {
  const n = typeof value === 'bigint' ? Number(value) : Number(value);
  if (!Number.isSafeInteger(n) || n < 0) throw new InvalidArgumentError('ledger', `holds ${String(value)}, not a whole number in [0, 2^53)`);
  return n;
}

/** A ledger in a SQL table, with its statements and its own transactions. */
export interface SqlMessageLedger<Db> extends MessageLedger<Db> {
  /** `CREATE TABLE IF NOT EXISTS` the ledger table. */
  createTable(): Promise<void>;
  /** The ledger table's DDL, for a migration of your own. */
  readonly ddl: string;
  /** The applied-positions table's DDL (`dedupe: 'id'`), for a migration of your own. */
  readonly appliedDdl: string;
}

/**
 * A MessageLedger in a table of the application's own database, in the application's own
 * transaction: `db` is a dedicated connection (pg Client, mysql2/promise Connection, a
 * better-sqlite3 or node:sqlite database) or a pool (pg Pool, mysql2/promise Pool: one
 * connection is taken per message and released after). The apply receives that connection as
 * `tx` and must write through it.
 */
export function sqlMessageLedger<Db>(dialect: SqlDialect<Db>, db: Db, options: SqlMessageLedgerOptions = {}): SqlMessageLedger<Db> {
  if (typeof dialect !== 'object' || dialect === null || typeof dialect.select !== 'function') {
    throw new InvalidArgumentError('dialect', 'expected postgresDialect, mysqlDialect or sqliteDialect from tenure/fencing');
  }
  if (typeof db !== 'object' || db === null) throw new InvalidArgumentError('db', `expected your ${dialect.name} connection, pool or database`);
  const d = dialect;
  const tableName = options.table ?? 'tenure_message_fences';
  const table = tableIdent(d, 'table', tableName);
  const applied = tableIdent(d, 'appliedTable', options.appliedTable ?? `${tableName}_applied`);
  const leaseTable = options.leaseTable === undefined || options.leaseTable === null ? null : tableIdent(d, 'leaseTable', options.leaseTable);
  const p = (i: number): string => d.placeholder(i);
  const key = d.name === 'mysql' ? 'VARBINARY(800)' : 'TEXT';
  const big = d.name === 'sqlite' ? 'INTEGER' : 'BIGINT';
  const ddl = `CREATE TABLE IF NOT EXISTS ${table} (consumer ${key} NOT NULL, lease ${key} NOT NULL, term ${big} NOT NULL, pos ${big} NOT NULL, PRIMARY KEY (consumer, lease))`;
  const appliedDdl = `CREATE TABLE IF NOT EXISTS ${applied} (consumer ${key} NOT NULL, lease ${key} NOT NULL, pos ${big} NOT NULL, term ${big} NOT NULL, PRIMARY KEY (consumer, lease, pos))`;
  const insertIgnore =
    d.name === 'postgres'
      ? `INSERT INTO ${table} (consumer, lease, term, pos) VALUES (${p(1)}, ${p(2)}, 0, 0) ON CONFLICT DO NOTHING`
      : d.name === 'mysql'
        ? `INSERT IGNORE INTO ${table} (consumer, lease, term, pos) VALUES (${p(1)}, ${p(2)}, 0, 0)`
        : `INSERT OR IGNORE INTO ${table} (consumer, lease, term, pos) VALUES (${p(1)}, ${p(2)}, 0, 0)`;
  // SQLite's BEGIN IMMEDIATE already holds the database's write lock: no row lock to ask for.
  const lock = d.name === 'sqlite' ? '' : ' FOR UPDATE';
  const selectMark = `SELECT term, pos FROM ${table} WHERE consumer = ${p(1)} AND lease = ${p(2)}${lock}`;
  const update = `UPDATE ${table} SET term = ${d.term(p(1))}, pos = ${d.term(p(2))} WHERE consumer = ${p(3)} AND lease = ${p(4)}`;
  const issuedSql = leaseTable ? `SELECT term FROM ${leaseTable} WHERE name = ${d.lease(p(1))}` : null;
  const raw = db as unknown;
  // PostgreSQL: text literals for the fused statements below (E'' escapes both ' and \, whatever
  // standard_conforming_strings says); the names are checked (no control characters, no NUL).
  const pgText = (v: string): string => `E'${v.replace(/\\/g, '\\\\').replace(/'/g, "''")}'`;
  const pgInt = (n: number): string => {
    if (!Number.isSafeInteger(n) || n < 0) throw new InvalidArgumentError('mark', `expected a whole number in [0, 2^53), got ${String(n)}`);
    return String(n);
  };
  /** A pg simple query of several statements: each one's rows. */
  const pgAll = async (conn: Db, sql: string): Promise<(readonly Record<string, unknown>[])[]> => {
    const res = (await (conn as unknown as { query(text: string): Promise<unknown> }).query(sql)) as { rows: Record<string, unknown>[] } | { rows: Record<string, unknown>[] }[];
    return Array.isArray(res) ? res.map((r) => r.rows ?? []) : [res.rows];
  };
  const positionsOf = (rows: readonly Record<string, unknown>[]): Set<number> => new Set(rows.map((r) => termValue(r.pos)));
  /** A pg simple query of several statements: the last one's rows. */
  const pgLast = async (conn: Db, sql: string): Promise<readonly Record<string, unknown>[]> => {
    const res = (await (conn as unknown as { query(text: string): Promise<unknown> }).query(sql)) as { rows: Record<string, unknown>[] } | { rows: Record<string, unknown>[] }[];
    return Array.isArray(res) ? (res[res.length - 1]?.rows ?? []) : res.rows;
  };

  async function begin(conn: Db): Promise<void> {
    const c = conn as unknown;
    if (d.name === 'mysql' && isMysqlConnection(c)) await c.beginTransaction();
    else await d.update(conn, d.name === 'sqlite' ? 'BEGIN IMMEDIATE' : 'BEGIN', []);
  }
  async function rollback(conn: Db): Promise<void> {
    const c = conn as unknown;
    try {
      if (d.name === 'mysql' && isMysqlConnection(c)) await c.rollback();
      else await d.update(conn, 'ROLLBACK', []);
    } catch {
      // the step's error is the one to report; the connection is released as broken
    }
  }
  async function commit(conn: Db): Promise<void> {
    const c = conn as unknown;
    if (d.name === 'mysql' && isMysqlConnection(c)) await c.commit();
    else await d.update(conn, 'COMMIT', []);
  }
  const markOf = (rows: readonly Record<string, unknown>[]): MessageMark | null => {
    const row = rows[0];
    if (!row) return null;
    const term = termValue(row.term);
    return term === 0 ? null : { term, position: termValue(row.pos) };
  };

  /** One message's transaction on one connection. PostgreSQL: three round trips with the apply's one. */
  async function runOn<T>(conn: Db, consumer: string, group: string, step: (tx: Db, mark: MessageMark | null) => Promise<LedgerStep<T>>): Promise<T> {
    const pg = d.name === 'postgres';
    let begun = false;
    try {
      // One statement on the common path (the row exists); the first message of a group makes
      // it, then locks it as every later message does. PostgreSQL sends BEGIN with it.
      let rows: readonly Record<string, unknown>[];
      if (pg) {
        begun = true; // a failure in the SELECT leaves the transaction open: roll it back
        rows = await pgLast(conn, `BEGIN; SELECT term, pos FROM ${table} WHERE consumer = ${pgText(consumer)} AND lease = ${pgText(group)} FOR UPDATE`);
      } else {
        await begin(conn);
        begun = true;
        rows = await d.select(conn, selectMark, [consumer, group]);
      }
      if (rows.length === 0) {
        await d.update(conn, insertIgnore, [consumer, group]);
        rows = await d.select(conn, selectMark, [consumer, group]);
      }
      const { value, advance } = await step(conn, markOf(rows));
      if (advance && pg) {
        await pgLast(conn, `UPDATE ${table} SET term = ${pgInt(advance.term)}, pos = ${pgInt(advance.position)} WHERE consumer = ${pgText(consumer)} AND lease = ${pgText(group)}; COMMIT`);
      } else {
        if (advance) await d.update(conn, update, [advance.term, advance.position, consumer, group]);
        await commit(conn);
      }
      return value;
    } catch (err) {
      if (begun) await rollback(conn);
      throw err;
    }
  }

  /**
   * One batch's transaction (`dedupe: 'id'`). PostgreSQL: two round trips with the applies' own
   * (BEGIN, the mark locked, the batch's applied positions read; then the positions recorded, the
   * mark advanced, COMMIT). The positions are read after the mark is locked: every batch of this
   * consumer and group records its positions under that lock, so none is missed.
   */
  async function runBatchOn<T>(conn: Db, consumer: string, group: string, positions: readonly number[], step: (tx: Db, state: LedgerBatchState) => Promise<LedgerBatchStep<T>>): Promise<T> {
    const pg = d.name === 'postgres';
    const mine = pg ? `consumer = ${pgText(consumer)} AND lease = ${pgText(group)}` : '';
    const idsSql = pg
      ? `SELECT pos FROM ${applied} WHERE ${mine} AND pos IN (${positions.map(pgInt).join(', ')})`
      : `SELECT pos FROM ${applied} WHERE consumer = ${p(1)} AND lease = ${p(2)} AND pos IN (${positions.map((_, i) => p(i + 3)).join(', ')})${d.name === 'mysql' ? ' LOCK IN SHARE MODE' : ''}`;
    const readIds = async (): Promise<Set<number>> => (pg ? positionsOf(await pgLast(conn, idsSql)) : positionsOf(await d.select(conn, idsSql, [consumer, group, ...positions])));
    let begun = false;
    try {
      let rows: readonly Record<string, unknown>[];
      let ids: Set<number>;
      if (pg) {
        begun = true;
        const res = await pgAll(conn, `BEGIN; SELECT term, pos FROM ${table} WHERE ${mine} FOR UPDATE; ${idsSql}`);
        rows = res[1] ?? [];
        ids = positionsOf(res[2] ?? []);
      } else {
        await begin(conn);
        begun = true;
        rows = await d.select(conn, selectMark, [consumer, group]);
        ids = rows.length === 0 ? new Set() : await readIds();
      }
      if (rows.length === 0) {
        // The first batch of this consumer and group: make the row, lock it, then read the positions under the lock.
        await d.update(conn, insertIgnore, [consumer, group]);
        rows = await d.select(conn, selectMark, [consumer, group]);
        ids = await readIds();
      }
      const { value, advance, recorded } = await step(conn, { mark: markOf(rows), applied: ids });
      if (pg) {
        const parts: string[] = [];
        if (recorded.length > 0) parts.push(`INSERT INTO ${applied} (consumer, lease, pos, term) VALUES ${recorded.map((r) => `(${pgText(consumer)}, ${pgText(group)}, ${pgInt(r.position)}, ${pgInt(r.term)})`).join(', ')}`);
        if (advance) parts.push(`UPDATE ${table} SET term = ${pgInt(advance.term)}, pos = ${pgInt(advance.position)} WHERE ${mine}`);
        parts.push('COMMIT');
        await pgLast(conn, parts.join('; '));
      } else {
        if (recorded.length > 0) {
          const values: unknown[] = [];
          const tuples = recorded.map((r) => {
            values.push(consumer, group, r.position, r.term);
            const n = values.length;
            return `(${p(n - 3)}, ${p(n - 2)}, ${d.term(p(n - 1))}, ${d.term(p(n))})`;
          });
          await d.update(conn, `INSERT INTO ${applied} (consumer, lease, pos, term) VALUES ${tuples.join(', ')}`, values);
        }
        if (advance) await d.update(conn, update, [advance.term, advance.position, consumer, group]);
        await commit(conn);
      }
      return value;
    } catch (err) {
      if (begun) await rollback(conn);
      throw err;
    }
  }

  /** Run `fn` on a connection of its own when `db` is a pool (released after; a failed pg client is not reused). */
  async function onConnection<T>(fn: (conn: Db) => Promise<T>): Promise<T> {
    if (d.name === 'postgres' && isPgPool(raw)) {
      const client = await raw.connect();
      let broken = false;
      try {
        return await fn(client as unknown as Db);
      } catch (err) {
        broken = true;
        throw err;
      } finally {
        client.release(broken);
      }
    }
    if (d.name === 'mysql' && isMysqlPool(raw)) {
      const conn = await raw.getConnection();
      try {
        return await fn(conn as unknown as Db);
      } finally {
        conn.release();
      }
    }
    return fn(db);
  }

  return {
    ddl,
    appliedDdl,
    async createTable() {
      await d.update(db, ddl, []);
      await d.update(db, appliedDdl, []);
    },
    async runBatch<T>(consumer: string, group: string, positions: readonly number[], step: (tx: Db, state: LedgerBatchState) => Promise<LedgerBatchStep<T>>): Promise<T> {
      checkName('consumer', consumer);
      checkName('group', group);
      if (!Array.isArray(positions) || positions.length === 0 || positions.length > MAX_BATCH_LIMIT) {
        throw new InvalidArgumentError('positions', `expected 1..${MAX_BATCH_LIMIT} positions, got ${Array.isArray(positions) ? positions.length : typeof positions}`);
      }
      for (const pos of positions) pgInt(pos);
      return onConnection((conn) => runBatchOn(conn, consumer, group, positions, step));
    },
    async forget(consumer: string, group: string, upTo: number): Promise<number> {
      checkName('consumer', consumer);
      checkName('group', group);
      pgInt(upTo);
      return d.update(db, `DELETE FROM ${applied} WHERE consumer = ${d.lease(p(1))} AND lease = ${d.lease(p(2))} AND pos <= ${d.term(p(3))}`, [consumer, group, upTo]);
    },
    async run<T>(consumer: string, group: string, step: (tx: Db, mark: MessageMark | null) => Promise<LedgerStep<T>>): Promise<T> {
      checkName('consumer', consumer);
      checkName('group', group);
      if (d.name === 'postgres' && isPgPool(raw)) {
        const client = await raw.connect();
        let broken = false;
        try {
          return await runOn(client as unknown as Db, consumer, group, step);
        } catch (err) {
          broken = true;
          throw err;
        } finally {
          // A client whose transaction failed may be mid-statement: do not hand it to the next user.
          client.release(broken);
        }
      }
      if (d.name === 'mysql' && isMysqlPool(raw)) {
        const conn = await raw.getConnection();
        try {
          return await runOn(conn as unknown as Db, consumer, group, step);
        } finally {
          conn.release();
        }
      }
      return runOn(db, consumer, group, step);
    },
    ...(issuedSql
      ? {
          async issued(tx: Db, group: string) {
            const rows = await d.select(tx, issuedSql, [group]);
            return rows[0] ? termValue(rows[0].term) : null;
          },
        }
      : {}),
  };
}
