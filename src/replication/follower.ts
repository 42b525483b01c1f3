/**
 * Follower: tails a fenced stream (the leader's log) and applies each entry to the follower's own
 * projection exactly once. Each batch and the offset it moves to are one transaction of the sink,
 * so a follower killed at any instant resumes from the last committed batch: no entry applied
 * twice, none skipped.
 *
 * While the log has more it reads page after page at once; when it has caught up it waits for the
 * store's push (`Store.watchStream`: PostgreSQL NOTIFY, Redis PUBLISH, an etcd watch, SQLite's
 * data version) and reads at once when told of a new head. The poll every `pollMs` stays as the
 * fallback (a store without push, such as MySQL, or a push lost with its connection).
 * It reads at most one page ahead: while a full page is applied, the next one is read, so memory
 * is bounded by two pages of `batchSize` entries whatever the leader's rate.
 */
import { InvalidArgumentError, StoreDataError, TenureError, TypedEmitter, checkMs, checkName, limits } from '../core/index.js';
import type { Store, StreamEntry, Unsubscribe } from '../core/index.js';
import { ApplyError, OffsetMismatchError } from './errors.js';
import type { FollowerSink } from './sinks.js';

/** Apply one entry to the projection, inside the batch's transaction `tx`. A throw stops the follower on that entry. */
export type ApplyFn<Tx> = (entry: StreamEntry, tx: Tx) => void | Promise<void>;
/** Apply a whole batch (consecutive entries, in order) inside its transaction: one multi-row statement instead of one per entry. */
export type ApplyBatchFn<Tx> = (entries: readonly StreamEntry[], tx: Tx) => void | Promise<void>;

export interface FollowerOptions<Tx> {
  readonly store: Store;
  /** The fenced stream to tail. */
  readonly stream: string;
  /** Where the projection and the offset live (sqliteSink, postgresSink, mysqlSink, or your own). */
  readonly sink: FollowerSink<Tx>;
  /** Apply each entry. Give exactly one of `apply` and `applyBatch`. */
  readonly apply?: ApplyFn<Tx>;
  /** Apply each batch at once; a throw stops the follower on the batch's first entry. */
  readonly applyBatch?: ApplyBatchFn<Tx>;
  /** Names the offset row (default: the stream). Two followers of one stream into one sink need two names. */
  readonly name?: string;
  /** Entries per transaction, at most: 1..10000 (default 500). Also the read page size. */
  readonly batchSize?: number;
  /** Wait between reads once caught up, ms: 1..60000 (default 50). `wake()` and the store's push cut it short. */
  readonly pollMs?: number;
  /**
   * Listen to the store's push for the stream (`Store.watchStream`) where it has one (default
   * true). False: poll only.
   */
  readonly push?: boolean;
  /**
   * Measure the lag in ms on the store's clock (`measureLag()`) this often while running, and emit
   * `lag`, ms: 0 (never) or 10..3600000 (default 1000). Each measure is one or two store reads.
   */
  readonly lagEveryMs?: number;
  /** First wait after a store or sink failure, ms (doubles up to 5 s): 1..60000 (default 100). */
  readonly retryMs?: number;
  /** Consecutive failures of the store or sink before the follower gives up: 0..1000 (default 20). */
  readonly maxRetries?: number;
  /** Stop when this aborts (the batch in flight is finished or rolled back first). */
  readonly signal?: AbortSignal;
}

/** How far behind the log the follower is. */
export interface FollowerLag {
  /** Entries in the log after the last applied one, as of the last read. */
  readonly entries: number;
  /** True when the last read filled a page: the log holds at least `entries` more, maybe more. */
  readonly atLeast: boolean;
  /**
   * How long the follower has been behind, ms, on this process's monotonic clock: 0 when the last
   * read found the end of the log with everything applied, else the time since that last
   * happened (since start if it never did).
   */
  readonly behindMs: number;
  /**
   * How stale the applied data may be, ms, on this process's monotonic clock: the time since the
   * last read that found the end of the log was SENT, and `Infinity` until one did (a follower
   * restarted on an old projection cannot bound its staleness before it has read to the end;
   * "since start" let a chaos run route reads to such a follower, seconds stale). Unlike `behindMs`
   * it is not 0 when caught up: "caught up" is as of that read, and a read that stalls (a store
   * member down, a cut connection) must not leave the follower looking fresh. A LagAdvert
   * publishes it as `lagMs`.
   */
  readonly staleMs: number;
  /**
   * Age of the oldest entry not yet applied, ms, both instants on the STORE's clock: the store's
   * time (`Store.streamHead`) minus that entry's `appendedAt` (safety rule 1: never a local wall
   * clock). 0 when caught up. As of the last `measureLag()` (run every `lagEveryMs`), and 0 as
   * soon as a read finds everything applied. Null when not known: never measured, a store with
   * no readable clock (etcd), or an entry without an append time.
   */
  readonly ms: number | null;
}

export interface FollowerEvents {
  /** A batch committed: entries `from`..`to` applied, the offset is now `to`. */
  applied: { readonly from: number; readonly to: number; readonly count: number; readonly ms: number };
  /** A read found nothing after the applied offset. Emitted on reaching the end, not on every idle poll. */
  'caught-up': { readonly seq: number };
  /** The lag was measured (every `lagEveryMs`, or by `measureLag()`): entries behind and ms on the store's clock. */
  lag: FollowerLag;
  /** A store or sink call failed; the follower waits `delayMs` and goes on from its saved offset. */
  retry: { readonly error: Error; readonly attempt: number; readonly delayMs: number };
  /** The follower stopped on an error (ApplyError, OffsetMismatchError, StoreDataError, ...). */
  failed: { readonly error: Error; readonly seq: number | null };
  /** The follower stopped; `seq` is the last applied entry. */
  stopped: { readonly seq: number };
}

const DEFAULTS = { batchSize: 500, pollMs: 50, retryMs: 100, maxRetries: 20, lagEveryMs: 1000 } as const;
const RETRY_MAX_MS = 5000;

function positiveInt(field: string, value: unknown, min: number, max: number): number {
  if (typeof value !== 'number' || !Number.isInteger(value) || value < min || value > max) {
    throw new InvalidArgumentError(field, `expected a whole number in [${min}, ${max}], got ${String(value)}`);
  }
  return value;
}

/** Marks an error thrown by the user's apply, so it is told apart from the sink's own failures. */
class ApplyThrew {
  constructor(readonly seq: number, readonly error: unknown) {}
}

export class Follower<Tx> extends TypedEmitter<FollowerEvents> implements AsyncDisposable {
  readonly stream: string;
  readonly name: string;
  private readonly store: Store;
  private readonly sink: FollowerSink<Tx>;
  private readonly applyFn: ApplyBatchFn<Tx>;
  private readonly batchSize: number;
  private readonly pollMs: number;
  private readonly retryMs: number;
  private readonly maxRetries: number;
  private readonly stopper = new AbortController();
  private running: Promise<void> | null = null;
  private appliedSeq = 0;
  private headSeq = 0;
  private headExact = false;
  private readonly createdAt = performance.now();
  /** When the last read that found the end of the log was sent; null until one did. */
  private caughtUpAt: number | null = null;
  private wakeUp: (() => void) | null = null;
  private woken = false;
  /** True while waiting for new entries (not while backing off after a failure). */
  private idling = false;
  private readonly push: boolean;
  private readonly lagEveryMs: number;
  private lagMs: number | null = null;

  constructor(options: FollowerOptions<Tx>) {
    super();
    if (typeof options !== 'object' || options === null) throw new InvalidArgumentError('options', 'expected an object');
    if (typeof options.store?.readStream !== 'function') throw new InvalidArgumentError('store', 'expected a Store');
    if (typeof options.sink?.commit !== 'function' || typeof options.sink.load !== 'function') {
      throw new InvalidArgumentError('sink', 'expected a FollowerSink (sqliteSink, postgresSink, mysqlSink or your own { load, commit })');
    }
    const { apply, applyBatch } = options;
    if ((apply === undefined) === (applyBatch === undefined)) {
      throw new InvalidArgumentError('apply', 'give exactly one of apply (entry, tx) and applyBatch (entries, tx)');
    }
    if (apply !== undefined && typeof apply !== 'function') throw new InvalidArgumentError('apply', 'expected a function (entry, tx) => void | Promise<void>');
    if (applyBatch !== undefined && typeof applyBatch !== 'function') throw new InvalidArgumentError('applyBatch', 'expected a function (entries, tx) => void | Promise<void>');
    this.store = options.store;
    this.stream = checkName('stream', options.stream);
    this.name = checkName('name', options.name ?? options.stream);
    this.sink = options.sink;
    this.applyFn = applyBatch
      ? async (entries, tx) => {
          try {
            await applyBatch(entries, tx);
          } catch (err) {
            throw new ApplyThrew(entries[0]!.seq, err);
          }
        }
      : async (entries, tx) => {
          for (const e of entries) {
            try {
              await apply!(e, tx);
            } catch (err) {
              throw new ApplyThrew(e.seq, err);
            }
          }
        };
    this.batchSize = positiveInt('batchSize', options.batchSize ?? DEFAULTS.batchSize, 1, limits.readLimitMax);
    this.pollMs = checkMs('pollMs', options.pollMs ?? DEFAULTS.pollMs, 1, 60_000);
    this.retryMs = checkMs('retryMs', options.retryMs ?? DEFAULTS.retryMs, 1, 60_000);
    this.maxRetries = positiveInt('maxRetries', options.maxRetries ?? DEFAULTS.maxRetries, 0, 1000);
    if (options.push !== undefined && typeof options.push !== 'boolean') throw new InvalidArgumentError('push', `expected true or false, got ${String(options.push)}`);
    this.push = options.push ?? true;
    const lagEveryMs = options.lagEveryMs ?? DEFAULTS.lagEveryMs;
    this.lagEveryMs = lagEveryMs === 0 ? 0 : checkMs('lagEveryMs', lagEveryMs, 10, 3_600_000);
    const signal = options.signal;
    if (signal) {
      if (signal.aborted) this.stopper.abort();
      else signal.addEventListener('abort', () => this.stopper.abort(), { once: true });
    }
    this.stopper.signal.addEventListener('abort', () => this.wake(), { once: true });
  }

  /** The last entry applied (committed with its offset), 0 before the first. */
  get applied(): number {
    return this.appliedSeq;
  }

  lag(): FollowerLag {
    const entries = Math.max(0, this.headSeq - this.appliedSeq);
    const caughtUp = entries === 0 && this.headExact;
    const now = performance.now();
    const staleMs = this.caughtUpAt === null ? Infinity : now - this.caughtUpAt;
    return { entries, atLeast: !this.headExact, behindMs: caughtUp ? 0 : now - (this.caughtUpAt ?? this.createdAt), staleMs, ms: caughtUp ? 0 : this.lagMs };
  }

  /**
   * Measure the lag now: the stream's head and the store's time in one read (`Store.streamHead`),
   * then the append time of the oldest entry not applied. Both instants come from the store's
   * clock, so `ms` is right whatever this host's clock says. On a store without `streamHead`
   * the entries come from the last read and `ms` is null. Emits `lag`; rejects with the store's
   * error (the follower itself goes on).
   */
  async measureLag(): Promise<FollowerLag> {
    const streamHead = this.store.streamHead;
    if (typeof streamHead === 'function') {
      const applied = this.appliedSeq;
      const head = await streamHead.call(this.store, this.stream);
      if (head.seq >= this.headSeq) {
        this.headSeq = head.seq;
        this.headExact = true;
      }
      if (head.seq <= applied) this.lagMs = 0;
      else {
        const [oldest] = await this.store.readStream(this.stream, { after: applied, limit: 1 });
        // appendedAt 0: an entry written before the store recorded append times.
        this.lagMs = oldest && oldest.appendedAt > 0 ? Math.max(0, head.nowMs - oldest.appendedAt) : null;
      }
    }
    const lag = this.lag();
    this.emit('lag', lag);
    return lag;
  }

  /**
   * Start tailing (once; later calls return the same promise). Resolves when stopped (stop(),
   * the signal, disposal); rejects with the error that stopped it: ApplyError (the entry is not
   * applied and not skipped: the next run starts with it), OffsetMismatchError, StoreDataError
   * (an entry the store cannot decode, a gap or a term going back), or the last store or sink
   * error after `maxRetries` attempts.
   */
  start(): Promise<void> {
    this.running ??= this.run();
    return this.running;
  }

  /** Read now instead of waiting out the poll interval (call it when you know the leader appended). */
  wake(): void {
    this.woken = true;
    this.wakeUp?.();
  }

  /** Stop after the batch in flight; resolves when stopped (whether the run ended well or not). */
  async stop(): Promise<void> {
    this.stopper.abort();
    await this.running?.catch(() => {});
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.stop();
  }

  private get stopped(): boolean {
    return this.stopper.signal.aborted;
  }

  /** Subscribe to the store's push for the stream: a new head wakes an idle follower at once. */
  private listen(): Unsubscribe | null {
    if (!this.push || typeof this.store.watchStream !== 'function') return null;
    try {
      return this.store.watchStream(this.stream, (head) => {
        if (typeof head !== 'number' || !Number.isSafeInteger(head)) return;
        if (head >= this.headSeq) {
          this.headSeq = head;
          this.headExact = true;
        }
        if (head <= this.appliedSeq) return;
        // Read again at once if idle; if a read is in flight, the next idle turn does not wait.
        this.woken = true;
        if (this.idling) this.wakeUp?.();
      });
    } catch {
      return null; // no push (a closed store says so on the first read): poll
    }
  }

  /** Measure the lag every `lagEveryMs` while running, one measure at a time. */
  private measureEvery(): () => void {
    if (this.lagEveryMs === 0) return () => {};
    let busy = false;
    const timer = setInterval(() => {
      if (busy || this.stopped) return;
      busy = true;
      this.measureLag()
        .catch(() => {}) // a store failure shows on the follower's own reads
        .finally(() => (busy = false));
    }, this.lagEveryMs);
    timer.unref();
    return () => clearInterval(timer);
  }

  private async run(): Promise<void> {
    const unwatch = this.listen();
    const stopMeasuring = this.measureEvery();
    try {
      await this.follow();
    } finally {
      stopMeasuring();
      unwatch?.();
    }
  }

  private async follow(): Promise<void> {
    let failures = 0;
    let loaded = false;
    let lastTerm = 0;
    let announcedCaughtUp = false;
    // The next page, read while the current one is applied: one page ahead at most.
    let next: Promise<StreamEntry[]> | null = null;
    let nextSentAt = 0;
    try {
      while (!this.stopped) {
        try {
          if (!loaded) {
            this.appliedSeq = await this.sink.load(this.name);
            this.headSeq = Math.max(this.headSeq, this.appliedSeq);
            lastTerm = await this.checkOffset(this.appliedSeq);
            loaded = true;
          }
          // "Caught up" holds as of when the read was SENT (as a lease's deadline counts from the
          // request, rule 2): whatever a slow answer took, entries committed after that may be missing.
          const readSentAt = next ? nextSentAt : performance.now();
          const entries = await (next ?? this.store.readStream(this.stream, { after: this.appliedSeq, limit: this.batchSize }));
          next = null;
          failures = 0;
          if (entries.length === 0) {
            this.headSeq = Math.max(this.headSeq, this.appliedSeq);
            this.headExact = true;
            this.caughtUpAt = readSentAt;
            if (this.headSeq === this.appliedSeq) this.lagMs = 0;
            if (!announcedCaughtUp) this.emit('caught-up', { seq: this.appliedSeq });
            announcedCaughtUp = true;
            await this.idle();
            continue;
          }
          announcedCaughtUp = false;
          lastTerm = this.checkPage(entries, lastTerm);
          const last = entries[entries.length - 1]!;
          this.headSeq = Math.max(this.headSeq, last.seq);
          this.headExact = entries.length < this.batchSize;
          if (!this.headExact) {
            nextSentAt = performance.now();
            next = this.store.readStream(this.stream, { after: last.seq, limit: this.batchSize });
            next.catch(() => {}); // awaited (and reported) on the next turn, or dropped on stop
          }
          const started = performance.now();
          const from = this.appliedSeq;
          await this.sink.commit(this.name, from, last.seq, async (tx) => {
            await this.applyFn(entries, tx);
          });
          this.appliedSeq = last.seq;
          if (this.headExact) this.caughtUpAt = readSentAt;
          this.emit('applied', { from: from + 1, to: last.seq, count: entries.length, ms: performance.now() - started });
        } catch (err) {
          if (err instanceof ApplyThrew) throw new ApplyError(this.stream, err.seq, err.error);
          if (err instanceof OffsetMismatchError || err instanceof StoreDataError) throw err;
          if (err instanceof TenureError && (err.code === 'INVALID_ARGUMENT' || err.code === 'CLOSED')) throw err;
          // A store or sink failure: the commit may or may not have happened, so load the offset again.
          next = null;
          failures += 1;
          if (failures > this.maxRetries) throw err;
          loaded = false;
          const delayMs = Math.min(RETRY_MAX_MS, this.retryMs * 2 ** Math.min(failures - 1, 16));
          this.emit('retry', { error: err instanceof Error ? err : new Error(String(err)), attempt: failures, delayMs });
          await this.sleep(delayMs);
        }
      }
    } catch (err) {
      const error = err instanceof Error ? err : new Error(String(err));
      this.emit('failed', { error, seq: err instanceof ApplyError ? err.seq : null });
      throw error;
    }
    this.emit('stopped', { seq: this.appliedSeq });
  }

  /**
   * The saved offset must name an entry of the log (or be 0): a projection ahead of the log was
   * made from another log. Returns that entry's term, the floor for the terms that follow.
   */
  private async checkOffset(offset: number): Promise<number> {
    if (offset === 0) return 0;
    const [entry] = await this.store.readStream(this.stream, { after: offset - 1, limit: 1 });
    if (entry?.seq !== offset) {
      throw new OffsetMismatchError(
        this.name,
        offset,
        `its saved offset ${offset} is beyond the end of stream ${JSON.stringify(this.stream)} (the stream has no entry ${offset}): ` +
          'the projection was made from another stream or store, or the log was reset',
      );
    }
    return entry.term;
  }

  /** A page must continue the applied offset without a gap, and terms never go back (fencing). */
  private checkPage(entries: readonly StreamEntry[], lastTerm: number): number {
    let expect = this.appliedSeq + 1;
    let term = lastTerm;
    for (const e of entries) {
      if (e.seq !== expect) {
        throw new StoreDataError(`stream ${JSON.stringify(this.stream)}: expected entry ${expect} after ${expect - 1}, the store returned ${e.seq}`);
      }
      if (e.term < term) {
        throw new StoreDataError(`stream ${JSON.stringify(this.stream)}: entry ${e.seq} has term ${e.term}, lower than the term ${term} before it (the log is not fenced)`);
      }
      term = e.term;
      expect += 1;
    }
    return term;
  }

  private async idle(): Promise<void> {
    if (this.woken) {
      this.woken = false;
      return;
    }
    this.idling = true;
    try {
      await this.sleep(this.pollMs);
    } finally {
      this.idling = false;
    }
  }

  private sleep(ms: number): Promise<void> {
    if (this.stopped) return Promise.resolve();
    return new Promise((resolve) => {
      const timer = setTimeout(done, ms);
      function done(): void {
        clearTimeout(timer);
        resolve();
      }
      this.wakeUp = () => {
        this.wakeUp = null;
        this.woken = false;
        done();
      };
    });
  }
}
