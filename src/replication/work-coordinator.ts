/**
 * WorkCoordinator: the leader's half of "the leader directs work". It splits a job into items,
 * gives each to a live worker (a live lease `<group>/workers/<nodeId>`), collects the results and
 * returns them once every item is done, each exactly once.
 *
 * An item is given again (a new attempt, to another worker where there is one) when
 *  - its worker's lease ends or passes to another incarnation (the worker died),
 *  - no result came within `itemTimeoutMs` (the worker stalled; it gets no new items until it
 *    answers something or its lease changes), or
 *  - the handler threw on the worker (up to `maxAttempts` in all, then the job fails).
 * A result counts only if it answers the item's current attempt, of this job, from this leader's
 * term, written under the worker lease term the attempt was given to; anything else (a stalled
 * worker's late answer, a deposed leader's job) is ignored and reported as `ignored`.
 *
 * Every assignment is a fenced append under the leader's token: once a newer leader has written,
 * the store refuses the old one's appends (StaleTermError, and the run rejects with it); before
 * that, workers ignore them because their term is not the group lease's current term.
 */
import { InvalidArgumentError, NotLeaderError, StoreUnavailableError, TypedEmitter, checkMs, checkName, checkToken, randomSuffix, systemClock, systemRandom } from '../core/index.js';
import type { Clock, FencingToken, JsonValue, Lease, Random, Store } from '../core/index.js';
import { WorkFailedError } from './errors.js';
import { PollTicker, wakeOnAppend, VALUE_MAX_BYTES, WORK_DEFAULTS, WORK_LIMITS, anySignal, decodeResult, encodeAssignments, encodeJson, encodeRevoke, streamHead, workNames } from './work.js';
import type { WorkNames } from './work.js';

/** One item of a job: a unique id (1..200 characters) and the JSON its worker's handler gets. */
export interface WorkItem<I extends JsonValue = JsonValue> {
  readonly id: string;
  readonly input: I;
}

/** The accepted result of one item. */
export interface ItemResult<O extends JsonValue = JsonValue> {
  readonly id: string;
  /** What the handler returned (as JSON: the coordinator cannot check it is an `O`). */
  readonly output: O;
  /** The node id of the worker whose result was accepted. */
  readonly worker: string;
  /** The attempt that was accepted, 1-based. */
  readonly attempt: number;
}

/** What `run` resolves with: every item's one accepted result. */
export interface WorkReport<O extends JsonValue = JsonValue> {
  /** This run's job id (in every assignment and result of the run). */
  readonly job: string;
  /** The leader term the job ran under. */
  readonly term: number;
  /** One result per item, by item id, in the order the items were given. */
  readonly results: ReadonlyMap<string, ItemResult<O>>;
  /** Attempts given again (worker lost, timed out, handler threw). */
  readonly reassigned: number;
  /** Results read and not counted (late, superseded, another job's or term's, duplicates). */
  readonly ignored: number;
}

/** The leader side of an elector, as the coordinator uses it (a LeaderElector fits). */
export interface LeadershipSource {
  readonly group: string;
  readonly token: FencingToken | null;
  readonly signal: AbortSignal | null;
}

export interface WorkCoordinatorOptions {
  readonly store: Store;
  /** The leader's token (from `runWhileLeader`, a lock, ...). Give `token` or `elector`. */
  readonly token?: FencingToken;
  /** Or an elector: each run takes its current token and stops when that leadership ends. */
  readonly elector?: LeadershipSource;
  /** The group (the leader's lease name): default the token's lease or the elector's group; must equal it. */
  readonly group?: string;
  /** Wait between rounds of reads, ms: 1..60000 (default 100). */
  readonly pollMs?: number;
  /** Consecutive rounds that fail with StoreUnavailableError before the run gives up: 0..1000 (default 20). */
  readonly maxRetries?: number;
  readonly clock?: Clock;
  readonly random?: Random;
}

export interface RunOptions<I extends JsonValue = JsonValue> {
  /** The job: 1..100000 items with distinct ids. */
  readonly items: readonly WorkItem<I>[];
  /** An attempt with no result after this long is given to another worker, ms: 1..86400000 (default 30000). */
  readonly itemTimeoutMs?: number;
  /** Attempts per item (worker lost, timed out or handler threw) before the job fails, 1..100 (default 5). */
  readonly maxAttempts?: number;
  /** Stop the run (it rejects with the signal's reason); assignments already made are not undone. */
  readonly signal?: AbortSignal;
}

/** Why an attempt was given back: its worker's lease ended or changed hands, no answer in time, or the handler threw. */
export type ReassignReason = 'worker-lost' | 'timeout' | 'failed';
/**
 * Why a result did not count: it answers another run (`other-job`) or another leader term
 * (`other-term`); an attempt given back since (`superseded`: the worker died, stalled or was
 * revoked); it was written under another lease term of the worker than the attempt was given to
 * (`worker-term`); or the same attempt's answer came twice (`duplicate`).
 */
export type IgnoreReason = 'other-job' | 'other-term' | 'superseded' | 'worker-term' | 'duplicate';

export interface WorkCoordinatorEvents {
  assigned: { readonly item: string; readonly attempt: number; readonly worker: string };
  completed: { readonly item: string; readonly attempt: number; readonly worker: string };
  reassigned: { readonly item: string; readonly attempt: number; readonly worker: string; readonly reason: ReassignReason; readonly error?: string };
  /** A result that did not count: the attempt it answers is not the item's current one, or it is another run's. */
  ignored: { readonly item: string; readonly attempt: number; readonly worker: string; readonly reason: IgnoreReason };
  /** A round failed with StoreUnavailableError; the next one tries again. */
  retry: { readonly error: Error; readonly attempt: number };
}

/** Result pages read from one worker's stream per round, at most (1000 entries each). */
const PAGES_PER_ROUND = 10;
const PAGE = 1000;

function wholeNumber(field: string, value: unknown, min: number, max: number): number {
  if (typeof value !== 'number' || !Number.isInteger(value) || value < min || value > max) {
    throw new InvalidArgumentError(field, `expected a whole number in [${min}, ${max}], got ${String(value)}`);
  }
  return value;
}

interface ItemState {
  readonly id: string;
  readonly input: string;
  status: 'pending' | 'assigned' | 'done';
  /** The current attempt's number (0 before the first). */
  attempt: number;
  /** Attempts that count against maxAttempts (a failed append does not). */
  tries: number;
  worker: string | null;
  workerTerm: number;
  assignedAt: number;
  lastWorker: string | null;
  lastError: string | null;
}

interface LiveWorker {
  readonly term: number;
  readonly capacity: number;
}

interface WorkerState {
  offset: number;
  inflight: number;
  lastAssignedAt: number;
  /**
   * An item timed out on it: under that lease term it gets nothing new until it answers or one
   * more item timeout has passed (so a worker that hangs with its lease live is tried again later).
   */
  stalled: { readonly term: number; readonly until: number } | null;
}

export class WorkCoordinator extends TypedEmitter<WorkCoordinatorEvents> {
  readonly group: string;
  private readonly store: Store;
  private readonly names: WorkNames;
  private readonly fixedToken: FencingToken | null;
  private readonly elector: LeadershipSource | null;
  private readonly pollMs: number;
  private readonly maxRetries: number;
  private readonly clock: Clock;
  private readonly random: Random;
  /** Per worker node id: where its result stream was read up to, kept across runs. */
  private readonly workers = new Map<string, WorkerState>();
  private running = false;

  constructor(options: WorkCoordinatorOptions) {
    super();
    if (typeof options !== 'object' || options === null) throw new InvalidArgumentError('options', 'expected an object');
    if (typeof options.store?.appendFenced !== 'function') throw new InvalidArgumentError('store', 'expected a Store');
    if ((options.token === undefined) === (options.elector === undefined)) {
      throw new InvalidArgumentError('token', 'give exactly one of token (the leader\'s fencing token) and elector');
    }
    this.store = options.store;
    this.fixedToken = options.token === undefined ? null : checkToken('token', options.token);
    this.elector = options.elector ?? null;
    const leaseName = this.fixedToken?.lease ?? checkName('elector.group', this.elector?.group);
    const group = options.group === undefined ? leaseName : checkName('group', options.group);
    if (group !== leaseName) throw new InvalidArgumentError('group', `must be the leader's lease ${JSON.stringify(leaseName)}, got ${JSON.stringify(group)}`);
    this.group = group;
    this.names = workNames(group);
    this.pollMs = checkMs('pollMs', options.pollMs ?? WORK_DEFAULTS.pollMs, 1, 60_000);
    this.maxRetries = wholeNumber('maxRetries', options.maxRetries ?? WORK_DEFAULTS.maxRetries, 0, 1000);
    this.clock = options.clock ?? systemClock;
    this.random = options.random ?? systemRandom;
  }

  /**
   * Run one job to the end: resolves with every item's accepted result once all are done.
   * Rejects with InvalidArgumentError (bad items or options, nothing written), NotLeaderError (the
   * group lease is no longer this token's, or the elector's leadership ended), StaleTermError (an
   * assignment refused by the store: a newer leader wrote), WorkFailedError (an item used up its
   * attempts), StoreDataError (a garbage row in a result stream), the last StoreUnavailableError
   * after `maxRetries` failed rounds in a row, or the signal's reason. One run at a time.
   */
  async run<O extends JsonValue = JsonValue, I extends JsonValue = JsonValue>(options: RunOptions<I>): Promise<WorkReport<O>> {
    if (typeof options !== 'object' || options === null) throw new InvalidArgumentError('options', 'expected { items, itemTimeoutMs?, maxAttempts?, signal? }');
    const items = checkItems(options.items);
    const itemTimeoutMs = checkMs('itemTimeoutMs', options.itemTimeoutMs ?? WORK_DEFAULTS.itemTimeoutMs, 1, 86_400_000);
    const maxAttempts = wholeNumber('maxAttempts', options.maxAttempts ?? WORK_DEFAULTS.maxAttempts, 1, WORK_LIMITS.maxAttempts);
    if (this.running) throw new InvalidArgumentError('run', 'this coordinator is already running a job; make another or wait');
    let token: FencingToken;
    let leadership: AbortSignal | null = null;
    if (this.fixedToken) token = this.fixedToken;
    else {
      const t = this.elector!.token;
      leadership = this.elector!.signal;
      if (!t || !leadership || leadership.aborted) throw new NotLeaderError(`not the leader of ${this.group}: no job can be run`);
      token = t;
    }
    options.signal?.throwIfAborted();
    const stop = anySignal([options.signal, leadership]);
    this.running = true;
    try {
      const context: JobContext = {
        store: this.store,
        names: this.names,
        pollMs: this.pollMs,
        maxRetries: this.maxRetries,
        clock: this.clock,
        workers: this.workers,
        emit: (event, payload) => this.emit(event, payload),
      };
      const jobId = randomSuffix(this.random, 16);
      const job = new Job(context, jobId, token, items, itemTimeoutMs, maxAttempts, stop.signal, leadership);
      return (await job.run()) as WorkReport<O>;
    } finally {
      stop.dispose();
      this.running = false;
    }
  }
}

/** What a Job uses from its coordinator (the offsets of result streams outlive a run). */
interface JobContext {
  readonly store: Store;
  readonly names: WorkNames;
  readonly pollMs: number;
  readonly maxRetries: number;
  readonly clock: Clock;
  readonly workers: Map<string, WorkerState>;
  readonly emit: <K extends keyof WorkCoordinatorEvents & string>(event: K, payload: WorkCoordinatorEvents[K]) => void;
}

function checkItems(items: unknown): { id: string; input: string }[] {
  if (!Array.isArray(items)) throw new InvalidArgumentError('items', 'expected an array of { id, input }');
  if (items.length === 0) throw new InvalidArgumentError('items', 'a job needs at least one item, got none');
  if (items.length > WORK_LIMITS.items) throw new InvalidArgumentError('items', `at most ${WORK_LIMITS.items} per job, got ${items.length}`);
  const seen = new Set<string>();
  return items.map((item: unknown, i) => {
    if (typeof item !== 'object' || item === null) throw new InvalidArgumentError(`items[${i}]`, 'expected { id, input }');
    const { id, input } = item as { id?: unknown; input?: unknown };
    checkName(`items[${i}].id`, id);
    if (seen.has(id as string)) throw new InvalidArgumentError(`items[${i}].id`, `duplicate item id ${JSON.stringify(id)}`);
    seen.add(id as string);
    return { id: id as string, input: encodeJson(`items[${i}].input`, input, VALUE_MAX_BYTES) };
  });
}

/** One run of a job: the items' states and the rounds of reading, checking and assigning. */
class Job {
  private readonly items = new Map<string, ItemState>();
  /** Items waiting for a worker, in the order they will be given (attempts given again first). */
  private pending: string[] = [];
  private readonly results = new Map<string, ItemResult>();
  private reassigned = 0;
  private ignored = 0;

  constructor(
    private readonly x: JobContext,
    private readonly job: string,
    private readonly token: FencingToken,
    items: readonly { id: string; input: string }[],
    private readonly itemTimeoutMs: number,
    private readonly maxAttempts: number,
    private readonly signal: AbortSignal,
    private readonly leadership: AbortSignal | null,
  ) {
    for (const { id, input } of items) {
      this.items.set(id, { id, input, status: 'pending', attempt: 0, tries: 0, worker: null, workerTerm: 0, assignedAt: 0, lastWorker: null, lastError: null });
      this.pending.push(id);
    }
  }

  async run(): Promise<WorkReport> {
    const ticker = new PollTicker(this.x.clock, this.x.pollMs, this.signal);
    this.ticker = ticker;
    try {
      return await this.rounds(ticker);
    } finally {
      for (const unwatch of this.unwatch.values()) unwatch();
      this.unwatch.clear();
    }
  }

  /** A live worker's answers are read as soon as the store tells of one (push), else each round. */
  private readonly unwatch = new Map<string, () => void>();
  private ticker: PollTicker | null = null;

  private async rounds(ticker: PollTicker): Promise<WorkReport> {
    let failures = 0;
    for (;;) {
      this.checkSignal();
      try {
        if (await this.round()) break;
        failures = 0;
      } catch (err) {
        this.checkSignal();
        if (!(err instanceof StoreUnavailableError)) throw err;
        failures += 1;
        if (failures > this.x.maxRetries) throw err;
        this.x.emit('retry', { error: err, attempt: failures });
      }
      await ticker.next();
    }
    const ordered = new Map<string, ItemResult>();
    for (const id of this.items.keys()) ordered.set(id, this.results.get(id)!);
    return { job: this.job, term: this.token.term, results: ordered, reassigned: this.reassigned, ignored: this.ignored };
  }

  private checkSignal(): void {
    if (!this.signal.aborted) return;
    if (this.leadership?.aborted) throw new NotLeaderError(`leadership of ${this.x.names.group} (term ${this.token.term}) ended during job ${this.job}`);
    throw this.signal.reason;
  }

  /** One round: still leader? who is live? what came back? what is lost? give out what waits. True when all are done. */
  private async round(): Promise<boolean> {
    const { store, names } = this.x;
    const lease = await store.read(names.group);
    this.checkLeader(lease);
    const live = await this.liveWorkers();
    for (const nodeId of live.keys()) {
      // The head is found before this worker is given anything, so every answer to this run lies after it.
      if (!this.x.workers.has(nodeId)) {
        const offset = await streamHead(store, names.results(nodeId));
        this.x.workers.set(nodeId, { offset, inflight: 0, lastAssignedAt: -Infinity, stalled: null });
      }
      if (!this.unwatch.has(nodeId) && this.ticker) this.unwatch.set(nodeId, wakeOnAppend(store, names.results(nodeId), this.ticker));
    }
    for (const w of this.x.workers.values()) w.inflight = 0;
    for (const item of this.items.values()) if (item.status === 'assigned') this.x.workers.get(item.worker!)!.inflight += 1;
    await this.readResults();
    if (this.results.size === this.items.size) return true;
    await this.takeBack(live);
    await this.assign(live);
    return false;
  }

  private checkLeader(lease: Lease | null): void {
    if (lease?.term === this.token.term) return;
    const now = lease ? `held at term ${lease.term} by ${lease.owner}` : 'free (expired or released)';
    throw new NotLeaderError(`the group lease ${this.x.names.group} is ${now}, not at this leader's term ${this.token.term}: job ${this.job} stops`);
  }

  private async liveWorkers(): Promise<Map<string, LiveWorker>> {
    const prefix = this.x.names.workersPrefix;
    const live = new Map<string, LiveWorker>();
    for (const lease of await this.x.store.list(prefix)) {
      if (!lease.name.startsWith(prefix)) continue;
      const nodeId = lease.name.slice(prefix.length);
      const c = lease.meta.concurrency;
      const capacity = typeof c === 'number' && Number.isInteger(c) && c >= 1 && c <= WORK_LIMITS.concurrency ? c : WORK_DEFAULTS.workerConcurrency;
      live.set(nodeId, { term: lease.term, capacity });
    }
    return live;
  }

  private async readResults(): Promise<void> {
    const { store, names } = this.x;
    for (const [nodeId, w] of this.x.workers) {
      for (let page = 0; page < PAGES_PER_ROUND; page++) {
        const entries = await store.readStream(names.results(nodeId), { after: w.offset, limit: PAGE });
        for (const entry of entries) {
          const r = decodeResult(entry, names.workerLease(nodeId));
          w.offset = entry.seq;
          w.stalled = null; // it answers again
          this.onResult(nodeId, entry.term, r);
        }
        if (entries.length < PAGE) break;
      }
    }
  }

  private onResult(nodeId: string, workerTerm: number, r: ReturnType<typeof decodeResult>): void {
    const item = this.items.get(r.item);
    const ignore = (reason: IgnoreReason): void => {
      this.ignored += 1;
      this.x.emit('ignored', { item: r.item, attempt: r.attempt, worker: nodeId, reason });
    };
    if (r.job !== this.job || item === undefined) return ignore('other-job');
    if (r.term !== this.token.term) return ignore('other-term');
    // Attempt numbers are never reused for an item: another number is an attempt given back since.
    if (r.attempt !== item.attempt) return ignore('superseded');
    if (item.status === 'done') return ignore('duplicate'); // the same answer sent twice (a retried append)
    if (item.status !== 'assigned' || item.worker !== nodeId) return ignore('superseded');
    if (workerTerm !== item.workerTerm) return ignore('worker-term');
    this.x.workers.get(nodeId)!.inflight -= 1;
    if (r.ok) {
      item.status = 'done';
      this.results.set(item.id, { id: item.id, output: r.output, worker: nodeId, attempt: r.attempt });
      this.x.emit('completed', { item: item.id, attempt: r.attempt, worker: nodeId });
      return;
    }
    item.lastError = r.error;
    this.giveBack(item, 'failed', r.error);
  }

  /** The attempt ends without a result: the item waits for another worker, or the job fails. */
  private giveBack(item: ItemState, reason: ReassignReason, error?: string): void {
    const worker = item.worker!;
    item.status = 'pending';
    item.lastWorker = worker;
    item.worker = null;
    if (item.tries >= this.maxAttempts) {
      const done = new Map<string, unknown>();
      for (const [id, r] of this.results) done.set(id, r.output);
      throw new WorkFailedError(item.id, item.tries, item.lastError, done);
    }
    this.reassigned += 1;
    this.pending.unshift(item.id);
    this.x.emit('reassigned', { item: item.id, attempt: item.attempt, worker, reason, ...(error === undefined ? {} : { error }) });
  }

  /** Attempts whose worker is gone (lease ended or taken by another incarnation) or silent too long. */
  private async takeBack(live: Map<string, LiveWorker>): Promise<void> {
    const now = this.x.clock.now();
    for (const item of this.items.values()) {
      if (item.status !== 'assigned') continue;
      const worker = item.worker!;
      const w = this.x.workers.get(worker)!;
      if (live.get(worker)?.term !== item.workerTerm) {
        w.inflight -= 1;
        this.giveBack(item, 'worker-lost');
      } else if (now - item.assignedAt >= this.itemTimeoutMs) {
        w.inflight -= 1;
        w.stalled = { term: item.workerTerm, until: now + this.itemTimeoutMs };
        const attempt = item.attempt;
        this.giveBack(item, 'timeout');
        // Tell the worker to stop (a courtesy: its late answer is ignored anyway).
        await this.x.store.appendFenced(this.token, this.x.names.assignments, encodeRevoke({ job: this.job, item: item.id, attempt, worker }));
      }
    }
  }

  /** Give waiting items to workers with room, least loaded first, then append each worker's share as one entry. */
  private async assign(live: Map<string, LiveWorker>): Promise<void> {
    const now = this.x.clock.now();
    const candidates = [...live].filter(([nodeId, l]) => {
      const s = this.x.workers.get(nodeId)!.stalled;
      return s === null || s.term !== l.term || now >= s.until;
    });
    const shares = new Map<string, { term: number; items: ItemState[] }>();
    while (this.pending.length > 0) {
      const item = this.items.get(this.pending[0]!)!;
      let best: { nodeId: string; term: number; w: WorkerState } | null = null;
      let bestKey: [number, number, number] | null = null;
      for (const [nodeId, l] of candidates) {
        const w = this.x.workers.get(nodeId)!;
        if (w.inflight >= l.capacity) continue;
        const key: [number, number, number] = [w.inflight, nodeId === item.lastWorker ? 1 : 0, w.lastAssignedAt];
        if (bestKey === null || key[0] < bestKey[0] || (key[0] === bestKey[0] && (key[1] < bestKey[1] || (key[1] === bestKey[1] && key[2] < bestKey[2])))) {
          best = { nodeId, term: l.term, w };
          bestKey = key;
        }
      }
      if (best === null) break; // every live worker is busy (or there is none): wait for the next round
      this.pending.shift();
      item.attempt += 1;
      item.status = 'assigned';
      item.worker = best.nodeId;
      item.workerTerm = best.term;
      item.assignedAt = now;
      best.w.inflight += 1;
      best.w.lastAssignedAt = now;
      const share = shares.get(best.nodeId) ?? { term: best.term, items: [] };
      share.items.push(item);
      shares.set(best.nodeId, share);
    }
    const sent = new Set<ItemState>();
    try {
      for (const [worker, share] of shares) {
        const entries = encodeAssignments(
          { job: this.job, worker, workerTerm: share.term },
          share.items.map((it) => ({ item: it.id, attempt: it.attempt, inputJson: it.input })),
        );
        for (const entry of entries) {
          await this.x.store.appendFenced(this.token, this.x.names.assignments, entry.text);
          for (const { item } of entry.items) {
            const it = this.items.get(item)!;
            it.tries += 1;
            sent.add(it);
            this.x.emit('assigned', { item, attempt: it.attempt, worker });
          }
        }
      }
    } catch (err) {
      // The entry that failed may have been written: its attempt numbers are spent (a late answer
      // to them is superseded), but they do not count against maxAttempts. It and everything not
      // yet appended wait for the next round, first in line.
      const unsent = [...shares.values()].flatMap((s) => s.items).filter((it) => !sent.has(it));
      for (const it of unsent.reverse()) {
        this.x.workers.get(it.worker!)!.inflight -= 1;
        it.status = 'pending';
        it.worker = null;
        this.pending.unshift(it.id);
      }
      throw err;
    }
  }

}
