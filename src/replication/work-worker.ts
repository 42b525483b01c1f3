/**
 * Worker: the follower's half of "the leader directs work". It holds the lease
 * `<group>/workers/<nodeId>` (kept alive with acquire and renew, work-lease.ts: a live lease is how
 * the leader knows it is alive), reads the group's assignment stream, runs `handler` on each attempt
 * given to it, and appends each answer to its own result stream with its lease's token.
 *
 * It acts only on an assignment whose term is the group lease's current term (a deposed leader's
 * assignment is ignored even before the store starts refusing its appends) and that was made for
 * its own current lease term (after losing its lease it is a new incarnation to the leader, which
 * has given its items to others). A handler's signal aborts when its attempt is revoked, when the
 * group's leader changes, when the worker's lease ends, and on stop.
 */
import { InvalidArgumentError, StaleTermError, StoreDataError, StoreUnavailableError, TypedEmitter, checkMs, makeIncarnation, resolveTiming, systemClock, systemRandom } from '../core/index.js';
import type { Clock, FencingToken, JsonValue, Random, Store, Timing, TimingOptions } from '../core/index.js';
import { keepWorkerLease } from './work-lease.js';
import type { HeldWorkerLease } from './work-lease.js';
import { PollTicker, wakeOnAppend, WORK_DEFAULTS, WORK_LIMITS, VALUE_MAX_BYTES, checkWorkerNames, decodeAssignments, encodeJson, encodeResult, streamHead, workNames } from './work.js';
import type { AssignRecord, ResultRecord, WorkNames } from './work.js';

/** What a handler gets besides the item's input. */
export interface WorkContext {
  readonly job: string;
  readonly item: string;
  /** The attempt, 1-based: above 1 when another worker had the item before. */
  readonly attempt: number;
  /** The leader term of the assignment. */
  readonly term: number;
  /** Aborts when the attempt is revoked (timed out), the group's leader changes, this worker's lease ends, or on stop. */
  readonly signal: AbortSignal;
}

/**
 * Do one item: return its output (JSON, at most ~1 MiB as text; nothing is sent as null) or
 * throw (the leader gives the item to another attempt; an output that is not JSON counts as a throw). A handler that finishes after its signal aborted still has its
 * output sent; the leader ignores it if the attempt was superseded.
 */
export type WorkHandler<I extends JsonValue = JsonValue, O extends JsonValue = JsonValue> = (input: I, context: WorkContext) => O | void | Promise<O | void>;

export interface WorkerOptions<I extends JsonValue = JsonValue, O extends JsonValue = JsonValue> extends TimingOptions {
  readonly store: Store;
  /** The leader's group (lease name): the worker reads `<group>/assignments`. */
  readonly group: string;
  /** This worker's stable id: its lease is `<group>/workers/<nodeId>`, its results `<group>/results/<nodeId>`. */
  readonly nodeId: string;
  readonly handler: WorkHandler<I, O>;
  /** Items the leader gives it at once, 1..1000 (default 1); published in its lease meta. */
  readonly concurrency?: number;
  /** Wait between reads of the assignment stream, ms: 1..60000 (default 100). */
  readonly pollMs?: number;
  /** Stop when this aborts (as `stop()`). */
  readonly signal?: AbortSignal;
  readonly clock?: Clock;
  readonly random?: Random;
}

export type WorkDropReason = 'aborted' | 'refused' | 'unavailable';

export interface WorkerEvents {
  /** This worker holds its lease (term `term`): the leader can give it items. */
  joined: { readonly term: number };
  /** Its lease ended (stop, deadline, lost): the leader gives its items to others. */
  left: { readonly term: number };
  started: { readonly job: string; readonly item: string; readonly attempt: number; readonly term: number };
  /** The attempt's answer is in the result stream at `seq`. */
  answered: { readonly job: string; readonly item: string; readonly attempt: number; readonly term: number; readonly ok: boolean; readonly seq: number };
  /**
   * No answer was written: the handler threw after its signal aborted (`aborted`), the store
   * refused the append because a newer incarnation holds the lease (`refused`), or it stayed
   * unreachable (`unavailable`).
   */
  dropped: { readonly job: string; readonly item: string; readonly attempt: number; readonly reason: WorkDropReason; readonly error?: Error };
  /** An assignment for this node that it does not act on: from a leader that is not the current one, or for an earlier lease term of its own. */
  ignored: { readonly job: string; readonly item: string; readonly attempt: number; readonly reason: 'other-term' | 'other-incarnation' };
  /** A read failed (StoreUnavailableError); the next poll tries again. */
  retry: { readonly error: Error };
  /** The worker stopped on an error (a garbage row in the assignment stream, ...). */
  failed: { readonly error: Error };
  stopped: Record<string, never>;
}

const PAGE = 1000;
const APPEND_TRIES = 3;

interface Running {
  readonly controller: AbortController;
  readonly leaderTerm: number;
}

export class Worker<I extends JsonValue = JsonValue, O extends JsonValue = JsonValue> extends TypedEmitter<WorkerEvents> implements AsyncDisposable {
  readonly group: string;
  readonly nodeId: string;
  private readonly store: Store;
  private readonly names: WorkNames;
  private readonly handler: WorkHandler<I, O>;
  private readonly pollMs: number;
  private readonly clock: Clock;
  /** This instance's incarnation id, the owner of its lease. */
  readonly owner: string;
  private readonly timing: Timing;
  private readonly random: Random;
  private readonly concurrency: number;
  private held: HeldWorkerLease | null = null;
  private readonly stopper = new AbortController();
  private readonly inflight = new Map<string, Running>();
  private readonly settling = new Set<Promise<void>>();
  private running: Promise<void> | null = null;
  /** The assignment stream is read after this seq. */
  private offset = 0;
  /** The serve loop of the current lease term; the next waits for it, so two never read at once. */
  private serving: Promise<void> = Promise.resolve();
  private fatal: Error | null = null;

  constructor(options: WorkerOptions<I, O>) {
    super();
    if (typeof options !== 'object' || options === null) throw new InvalidArgumentError('options', 'expected an object');
    if (typeof options.store?.appendFenced !== 'function') throw new InvalidArgumentError('store', 'expected a Store');
    if (typeof options.handler !== 'function') throw new InvalidArgumentError('handler', 'expected a function (input, { signal, item, attempt }) => output');
    this.store = options.store;
    this.names = workNames(options.group);
    checkWorkerNames(this.names, options.nodeId);
    this.group = options.group;
    this.nodeId = options.nodeId;
    this.handler = options.handler;
    const concurrency = options.concurrency ?? WORK_DEFAULTS.workerConcurrency;
    if (typeof concurrency !== 'number' || !Number.isInteger(concurrency) || concurrency < 1 || concurrency > WORK_LIMITS.concurrency) {
      throw new InvalidArgumentError('concurrency', `expected a whole number in [1, ${WORK_LIMITS.concurrency}], got ${String(concurrency)}`);
    }
    this.pollMs = checkMs('pollMs', options.pollMs ?? WORK_DEFAULTS.pollMs, 1, 60_000);
    this.clock = options.clock ?? systemClock;
    this.concurrency = concurrency;
    this.timing = resolveTiming(options);
    this.random = options.random ?? systemRandom;
    this.owner = makeIncarnation(this.nodeId, this.random);
    const signal = options.signal;
    if (signal) {
      if (signal.aborted) this.stopper.abort();
      else signal.addEventListener('abort', () => this.stopper.abort(), { once: true });
    }
  }

  /** This worker's lease term while it holds it, else null. */
  get term(): number | null {
    return this.held && !this.held.signal.aborted ? this.held.term : null;
  }

  /**
   * Start (once; later calls return the same promise). Resolves when stopped (stop(), the signal,
   * disposal); rejects with the error that stopped it: StoreDataError for a row in the assignment
   * stream that is not a work record (one clear error naming the stream and seq).
   */
  start(): Promise<void> {
    this.running ??= this.run();
    return this.running;
  }

  /** Stop: abort running handlers, wait for them (their answers are still sent), release the lease. */
  async stop(): Promise<void> {
    this.stopper.abort();
    await this.running?.catch(() => {});
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.stop();
  }

  private async run(): Promise<void> {
    const stopped = this.stopper.signal;
    const ticker = new PollTicker(this.clock, this.pollMs, stopped);
    try {
      // Skip the past: anything for this worker is appended after its lease is taken, so after this head.
      while (!stopped.aborted) {
        try {
          this.offset = await streamHead(this.store, this.names.assignments);
          break;
        } catch (err) {
          if (!(err instanceof StoreUnavailableError)) throw err;
          this.emit('retry', { error: err });
          await ticker.next();
        }
      }
      if (!stopped.aborted) await this.work(stopped);
    } catch (err) {
      this.fatal ??= err instanceof Error ? err : new Error(String(err));
    }
    if (this.fatal) {
      this.emit('failed', { error: this.fatal });
      throw this.fatal;
    }
    this.emit('stopped', {});
  }

  /** Hold the lease and serve each holding until stopped; the lease is released only after the handlers have settled and their answers are sent. */
  private async work(stopped: AbortSignal): Promise<void> {
    const release = new AbortController();
    const keeping = keepWorkerLease(
      { store: this.store, name: this.names.workerLease(this.nodeId), owner: this.owner, meta: { concurrency: this.concurrency }, timing: this.timing, clock: this.clock, random: this.random },
      release.signal,
      (held) => {
        this.held = held;
        this.emit('joined', { term: held.term });
        held.signal.addEventListener('abort', () => this.emit('left', { term: held.term }), { once: true });
        // The serve loop of the previous holding may still be finishing a read: the next waits for it.
        this.serving = this.serving.catch(() => {}).then(() => this.serve(held));
      },
    );
    try {
      if (!stopped.aborted) await new Promise<void>((resolve) => stopped.addEventListener('abort', () => resolve(), { once: true }));
    } finally {
      // No handler starts once the serve loop has seen the stop; then the running ones are aborted and awaited.
      await this.serving.catch(() => {});
      for (const r of this.inflight.values()) r.controller.abort(new Error('worker stopping'));
      await Promise.all([...this.settling]);
      release.abort();
      await keeping;
    }
  }

  /** While this lease term lasts: follow the group's leader and read what it assigns. */
  private async serve({ signal, term, token }: HeldWorkerLease): Promise<void> {
    const ticker = new PollTicker(this.clock, this.pollMs, signal);
    // The leader's assignments are read as soon as the store tells of one (push), else each poll.
    const unwatch = wakeOnAppend(this.store, this.names.assignments, ticker);
    // stop() ends the wait at once, not after up to pollMs (the ticker hears only the lease's signal).
    const onStop = (): void => ticker.wake();
    this.stopper.signal.addEventListener('abort', onStop, { once: true });
    const onLost = (): void => {
      for (const r of this.inflight.values()) r.controller.abort(new Error(`worker lease ${this.names.workerLease(this.nodeId)} (term ${term}) ended`));
    };
    signal.addEventListener('abort', onLost, { once: true });
    try {
      while (!signal.aborted && !this.stopper.signal.aborted) {
        try {
          const lease = await this.store.read(this.group);
          const leaderTerm = lease?.term ?? null;
          for (const r of this.inflight.values()) {
            if (r.leaderTerm !== leaderTerm) r.controller.abort(new Error(`the leader of ${this.group} changed (term ${leaderTerm ?? 'none'})`));
          }
          if (leaderTerm !== null && (await this.readAssignments(leaderTerm, term, token, signal))) ticker.wake();
        } catch (err) {
          if (!(err instanceof StoreUnavailableError)) {
            this.fatal ??= err instanceof Error ? err : new Error(String(err));
            this.stopper.abort();
            return;
          }
          this.emit('retry', { error: err });
        }
        await ticker.next();
      }
    } finally {
      unwatch();
      this.stopper.signal.removeEventListener('abort', onStop);
      signal.removeEventListener('abort', onLost);
    }
  }

  /** Read new assignments and start this worker's. True when it stopped at a newer leader's entry (read the lease again at once). */
  private async readAssignments(leaderTerm: number, term: number, token: FencingToken, leaseSignal: AbortSignal): Promise<boolean> {
    for (;;) {
      const entries = await this.store.readStream(this.names.assignments, { after: this.offset, limit: PAGE });
      for (const entry of entries) {
        // A newer leader wrote it after the lease was read: keep it for the next look at the lease.
        if (entry.term > leaderTerm) return true;
        const records = decodeAssignments(entry, this.group);
        this.offset = entry.seq;
        for (const record of records) {
          if (record.worker !== this.nodeId) continue;
          const key = `${record.job}\u0000${record.item}\u0000${record.attempt}`;
          if (record.kind === 'revoke') {
            this.inflight.get(key)?.controller.abort(new Error(`attempt ${record.attempt} of ${record.item} was revoked by the leader`));
            continue;
          }
          const at = { job: record.job, item: record.item, attempt: record.attempt };
          if (entry.term < leaderTerm) this.emit('ignored', { ...at, reason: 'other-term' });
          else if (record.workerTerm !== term) this.emit('ignored', { ...at, reason: 'other-incarnation' });
          else if (!this.inflight.has(key) && !leaseSignal.aborted && !this.stopper.signal.aborted) this.begin(key, record, entry.term, token);
        }
      }
      if (entries.length < PAGE) return false;
    }
  }

  private begin(key: string, record: AssignRecord, leaderTerm: number, token: FencingToken): void {
    const controller = new AbortController();
    this.inflight.set(key, { controller, leaderTerm });
    const context: WorkContext = { job: record.job, item: record.item, attempt: record.attempt, term: leaderTerm, signal: controller.signal };
    this.emit('started', { job: record.job, item: record.item, attempt: record.attempt, term: leaderTerm });
    const p = (async () => {
      const answer = { job: record.job, item: record.item, attempt: record.attempt, term: leaderTerm };
      let result: ResultRecord;
      try {
        // A handler run for its effects returns nothing: its answer is null.
        const output: unknown = (await this.handler(record.input as I, context)) ?? null;
        encodeJson('output', output, VALUE_MAX_BYTES);
        result = { ...answer, ok: true, output: output as JsonValue };
      } catch (err) {
        if (controller.signal.aborted) {
          this.emit('dropped', { job: record.job, item: record.item, attempt: record.attempt, reason: 'aborted', error: toError(err) });
          return;
        }
        result = { ...answer, ok: false, error: toError(err).message.slice(0, 4000) };
      }
      await this.answer(result, token);
    })();
    this.settling.add(p);
    void p.finally(() => {
      this.settling.delete(p);
      if (this.inflight.get(key)?.controller === controller) this.inflight.delete(key);
    });
  }

  /** Append the answer under the lease term the attempt was given under; a "maybe" is tried again (a duplicate is ignored by the leader). */
  private async answer(result: ResultRecord, token: FencingToken): Promise<void> {
    const at = { job: result.job, item: result.item, attempt: result.attempt };
    for (let attempt = 1; ; attempt++) {
      try {
        const seq = await this.store.appendFenced(token, this.names.results(this.nodeId), encodeResult(result));
        this.emit('answered', { ...at, term: result.term, ok: result.ok, seq });
        return;
      } catch (err) {
        if (err instanceof StaleTermError) {
          this.emit('dropped', { ...at, reason: 'refused', error: err });
          return;
        }
        if (!(err instanceof StoreUnavailableError) || attempt >= APPEND_TRIES) {
          this.emit('dropped', { ...at, reason: 'unavailable', error: toError(err) });
          if (err instanceof StoreDataError) {
            this.fatal ??= err;
            this.stopper.abort();
          }
          return;
        }
        await new Promise<void>((resolve) => this.clock.setTimer(this.pollMs, resolve));
      }
    }
  }
}

function toError(err: unknown): Error {
  return err instanceof Error ? err : new Error(String(err));
}
