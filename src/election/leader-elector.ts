/**
 * LeaderElector: campaigns for one group on any Store and keeps the lease alive while leading.
 *
 * This is the async shell around the pure state machine in elector-machine.ts: every decision
 * (when to acquire, renew, pause, end leadership, back off) is made by `step`; the shell performs
 * the effects (store calls, timers, the leader's signal and work, events) and feeds back answers.
 *
 * Timing contract (see core/timing.ts):
 *  - Leadership from an acquire or renew sent at time S ends locally at S + ttl - margin
 *    (safety rule 2). A timer fires at that instant and aborts the leader's signal whether or not
 *    the store ever answers; a reply that arrives after it is ignored (safety rule 3).
 *  - A candidate tries again when the holder's lease runs out as the store reported it (but at
 *    least once per TTL of its own, whatever the store says), or at once when the store pushes a
 *    release or names this node holder (a hand-over), so failover costs about TTL + one round trip.
 *  - The loop never dies. A store that is unreachable or slow (StoreUnavailableError) is retried
 *    every retryMs. Anything else (a StoreDataError for a row tenure cannot use, a store that
 *    throws a plain Error, a bug) is a fault: leadership ends as on resign (signal aborted, work
 *    settled, lease released), the fault is reported once as `store-error`, and the loop tries
 *    again after a back-off that doubles from retryMs up to the TTL.
 */
import { InvalidArgumentError, NotLeaderError, StoreUnavailableError, TransferError, checkMs, checkName, checkOwner, nodeIdOf, sleep, isLogger, limits, makeIncarnation, makeToken, leaderDeadline, resolveTiming, systemClock, systemRandom, encodeMeta, transferHintName, writeLog } from '../core/index.js';
import type { AcquireResult, Clock, FencingToken, Lease, LeaseMeta, LogFields, LogLevel, Logger, Random, RenewResult, Store, Timing, TimingOptions, Unsubscribe } from '../core/index.js';
import { hostname } from 'node:os';
import { initialState, step } from './elector-machine.js';
import type { CallError, DeposedReason, ElectorConfig, ElectorEffect, ElectorEvent, ElectorState } from './elector-machine.js';
import { ElectorTimers } from './elector-timers.js';
import { TypedEmitter } from '../core/typed-emitter.js';
import { onFencedRejection } from '../core/index.js';
import { runFenced } from '../fencing/context.js';

export interface LeaderElectorOptions extends TimingOptions {
  store: Store;
  /** The group (lease name) to lead. */
  group: string;
  /** Stable node id; a random suffix is added per instance (the incarnation). Default: hostname-pid. */
  id?: string;
  /** Published with the lease so followers can find the leader. */
  meta?: LeaseMeta;
  clock?: Clock;
  random?: Random;
  /**
   * Leader work that reports no progress (`ctx.progress()`) for this long is stalled: the
   * `stalled` event, `stalled` getter and health say so. ms, 0 (default) turns it off.
   */
  progressTimeoutMs?: number;
  /** A stalled leader steps down (signal aborted, lease released; `deposed` reason `stalled`). Default false. */
  stepDownOnStall?: boolean;
  /** A pino-compatible logger: one structured line per transition (see docs/operations.md). */
  logger?: Logger;
  /**
   * Lock-delay (as Consul's session lock-delay), ms, default 0: after an involuntary loss (this
   * node vanished, paused or was cut off, so its lease lapsed rather than being released) no
   * other owner can take the lease for this long. Done by asking the store for ttl + lockDelayMs
   * on every acquire and renew while this node's own deadline stays at ttl - margin: the store,
   * by its own clock (safety rule 1), keeps the lease lockDelayMs past the instant this node
   * stopped leading. A release (stop, resign) frees it at once. ttlMs + lockDelayMs <= 24 h.
   */
  lockDelayMs?: number;
  /**
   * Honour hand-over hints (see `transferTo`): after each win, one read of `GROUP/transfer-to`
   * decides whether the win is led. Default true; a Lock turns it off (nobody hands a lock over),
   * which saves that read on every acquisition, and `transferTo` is then refused.
   */
  transfers?: boolean;
}

export type { DeposedReason } from './elector-machine.js';

/** The longest hand-over bound `transferTo` takes (and the longest a candidate holds back for a hint), ms. */
export const maxTransferMs = 10 * 60 * 1000;

/** Options of `LeaderElector.transferTo`. */
export interface TransferOptions {
  /**
   * The bound, ms: other candidates hold back this long so that the named node wins; if it has
   * not taken over by then, anyone may (and transferTo rejects with TransferError 'timeout').
   * Default 3 × ttl (a candidate of a store without push notices a release within a TTL); at most 10 minutes.
   */
  readonly timeoutMs?: number;
  /** Stop waiting (the hint is withdrawn; leadership was already given up). */
  readonly signal?: AbortSignal;
}

export interface LeaderElectorEvents {
  elected: { term: number; token: FencingToken; deadlineInMs: number };
  deposed: { term: number; reason: DeposedReason; holder: Lease | null };
  'leader-changed': { owner: string | null; term: number; meta: LeaseMeta };
  renewed: { term: number; latencyMs: number };
  'renew-failed': { term: number; error: Error };
  'store-error': { operation: string; error: Error };
  'work-error': { term: number; error: Error };
  /** A renew failed as "maybe" (unreachable, timed out): still leader for `remainingMs`, the deadline unchanged. */
  suspended: { term: number; error: Error; remainingMs: number };
  /** A renew succeeded again before the deadline: same term, deadline moved on. */
  recovered: { term: number; suspendedMs: number; remainingMs: number };
  /** The leader work reported no progress for `sinceProgressMs` (>= progressTimeoutMs). */
  stalled: { term: number; sinceProgressMs: number; stepDown: boolean };
  /** A stalled leader's work reported progress again. */
  unstalled: { term: number; stalledMs: number };
  /** Every store call the elector made (acquire, renew, release, confirm): its latency and outcome. */
  'store-call': { operation: string; ms: number; outcome: 'ok' | 'error' | 'timeout' };
  stopped: Record<string, never>;
}

/** The elector's health, as `health()` and the /healthz handler report it. */
export interface ElectorHealth {
  /** False when this node leads and is suspended, stalled, or has not renewed for renewInterval + tolerance. */
  readonly ok: boolean;
  readonly group: string;
  readonly isLeader: boolean;
  readonly term: number | null;
  readonly suspended: boolean;
  readonly stalled: boolean;
  /** Time left on the leadership's validity (0 when not leader). */
  readonly remainingMs: number;
  readonly sinceRenewMs: number | null;
}

/** What leader work receives each time this node is elected. */
export interface LeaderContext {
  /** Aborts when leadership ends (deadline, lost, stop), before the lease could expire. */
  readonly signal: AbortSignal;
  readonly term: number;
  readonly token: FencingToken;
  /**
   * Time left on this leadership's validity, ms: from the send time of the last successful
   * acquire or renew, ttl minus margin (safety rule 2), never negative; 0 once it ended. Refuse
   * to start a step that cannot finish in it.
   */
  remainingMs(): number;
  /** Report that the work made progress (see `progressTimeoutMs`); a no-op when it is off or leadership ended. */
  progress(): void;
}

export type LeaderWork = (context: LeaderContext) => Promise<void> | void;

/** How `runWhileLeader` treats its work. */
export interface RunWhileLeaderOptions {
  /**
   * Task ends, leadership ends (default false). When the work settles (resolves or throws) while
   * its leadership still holds, the elector stops: it releases the lease at once (another node
   * takes over without waiting out the TTL) and campaigns no more, as `stop()` does (`deposed`
   * with reason `stopped`, the other works' signals aborted). `runWhileLeader` then resolves, or
   * rejects with the work's error. Work cut short because leadership ended first (its signal
   * aborted before it settled) did not end on its own: the elector campaigns on and runs it again
   * at the next election, as without this option.
   */
  readonly releaseOnEnd?: boolean;
}

/** A leadership confirmed by `confirmLeadership()`: the term and token the store still holds. */
export interface ConfirmedLeadership {
  readonly term: number;
  readonly token: FencingToken;
  /** Local monotonic instant (the elector's clock, ms) the confirming renew was sent. */
  readonly sentAt: number;
}

/** The shell's side of a leadership: what the machine cannot hold (signal, token, running work). */
interface Leadership {
  readonly term: number;
  readonly token: FencingToken;
  readonly controller: AbortController;
  readonly work: Set<Promise<void>>;
  /** The latest progress reported by the work and not yet given to the machine (local time), or null. */
  progressAt: number | null;
}

/** Drops the fenced-rejection listener of an elector collected without stop() (see start()). */
const unhearOnCollect = new FinalizationRegistry<() => void>((unhear) => unhear());

export class LeaderElector extends TypedEmitter<LeaderElectorEvents> {
  readonly group: string;
  /** This instance's incarnation id, used as the lease owner. */
  readonly owner: string;
  readonly timing: Timing;
  /** See LeaderElectorOptions.lockDelayMs (0: none). */
  readonly lockDelayMs: number;
  /** The TTL asked of the store: ttl + lockDelayMs (the local deadline still uses ttl). */
  private readonly storeTtlMs: number;
  /** The hand-over hint's lease (`GROUP/transfer-to`), or null when the group's name leaves no room for it. */
  private readonly transferName: string | null;
  private readonly store: Store;
  private readonly clock: Clock;
  private readonly meta: LeaseMeta;
  private readonly config: ElectorConfig;
  private readonly logger: Logger | undefined;
  private readonly works = new Set<WorkEntry>();
  /** The machine's state: every decision is made by `step` (elector-machine.ts). */
  private state: ElectorState = initialState();
  private leadership: Leadership | null = null;
  private started = false;
  private stopping = false;
  private readonly stopController = new AbortController();
  private unwatch: Unsubscribe | null = null;
  private unhearRejections: (() => void) | null = null;
  private readonly timers: ElectorTimers;
  /** The acquire in flight: its store promise (released if stop abandons a win) and settled() waiters. */
  private acquire: { id: number; pending: Promise<AcquireResult> } | null = null;
  /**
   * Acquires sent and not answered yet, those the loop gave up on (timed out) included: a timeout
   * is "maybe" (rule 3), and a store that retries a write (raft://, for its whole own timeout) can
   * apply one long after, when the name is free, granting a term nobody renews. stop() releases
   * such a win (abandonAcquires), as it does the acquire in flight.
   */
  private readonly unanswered = new Set<Promise<AcquireResult>>();
  /** Terms an answered acquire won that the loop has not led (yet): stop() releases those left. */
  private readonly wins = new Set<number>();
  private attempt: { promise: Promise<void>; settle: () => void } | null = null;
  private loopEnded: { promise: Promise<void>; resolve: () => void } = deferred();
  /** Async work started by effects (depose: settle, release) during the current dispatch. */
  private collected: Promise<void>[] | null = null;
  private dispatching = false;
  private readonly queue: { event: ElectorEvent; done: { promise: Promise<void>; resolve: () => void } }[] = [];

  constructor(options: LeaderElectorOptions) {
    super();
    this.group = checkName('group', options.group);
    const transfers = options.transfers ?? true;
    if (typeof transfers !== 'boolean') throw new InvalidArgumentError('transfers', `expected a boolean, got ${typeof transfers}`);
    this.transferName = transfers ? transferHintName(this.group) : null;
    this.store = options.store;
    this.clock = options.clock ?? systemClock;
    this.timers = new ElectorTimers(this.clock, (event) => {
      // The work's latest progress goes to the machine just before the progress timer that reads it.
      if (event.timer === 'progress') this.flushProgress();
      void this.dispatch(event);
    });
    const random = options.random ?? systemRandom;
    this.timing = resolveTiming(options);
    this.lockDelayMs = checkMs('lockDelayMs', options.lockDelayMs ?? 0, 0, limits.ttlMaxMs - this.timing.ttlMs);
    this.storeTtlMs = this.timing.ttlMs + this.lockDelayMs;
    this.meta = options.meta ?? {};
    encodeMeta('meta', this.meta);
    this.owner = makeIncarnation(options.id ?? defaultNodeId(), random);
    const progressTimeoutMs = checkMs('progressTimeoutMs', options.progressTimeoutMs ?? 0, 0, limits.ttlMaxMs);
    const stepDownOnStall = options.stepDownOnStall ?? false;
    if (typeof stepDownOnStall !== 'boolean') throw new InvalidArgumentError('stepDownOnStall', `expected a boolean, got ${typeof stepDownOnStall}`);
    if (options.logger !== undefined && !isLogger(options.logger)) throw new InvalidArgumentError('logger', 'expected a pino-compatible logger with debug, info, warn and error methods');
    this.logger = options.logger;
    this.config = { owner: this.owner, timing: this.timing, random, progressTimeoutMs, stepDownOnStall, transfers: this.transferName !== null };
  }

  /** True while this node holds leadership and its local deadline has not passed. */
  get isLeader(): boolean {
    return this.leadership !== null;
  }

  /** The term of the current leadership, or null when not leader. */
  get term(): number | null {
    return this.leadership?.term ?? null;
  }

  /** True while leader and the last renew failed as "maybe": leadership holds only until the deadline. */
  get suspended(): boolean {
    return this.leadership !== null && (this.state.leader?.suspendedAt ?? null) !== null;
  }

  /** True while leader and the work has reported no progress for progressTimeoutMs. */
  get stalled(): boolean {
    return this.leadership !== null && (this.state.leader?.stalled ?? false);
  }

  /**
   * Time left on the current leadership, ms: the last successful acquire or renew's send time +
   * ttl - margin (safety rule 2), minus now; never negative, 0 when not leader.
   */
  remainingMs(): number {
    const l = this.state.leader;
    return this.leadership && l ? Math.max(0, l.deadline - this.clock.now()) : 0;
  }

  /** The fencing token of the current leadership, or null when not leader. */
  get token(): FencingToken | null {
    return this.leadership?.token ?? null;
  }

  /** The current leadership's signal, or null when not leader. */
  get signal(): AbortSignal | null {
    return this.leadership?.controller.signal ?? null;
  }

  /** The fencing token of the current leadership; throws NotLeaderError when not leader. */
  requireToken(): FencingToken {
    if (!this.leadership) throw new NotLeaderError(`${this.owner} is not the leader of ${this.group}`);
    return this.leadership.token;
  }

  /** The current lease record from the store (null when no one leads). */
  leader(): Promise<Lease | null> {
    return this.store.read(this.group);
  }

  /**
   * Healthy unless this node is leader and it is suspended (a renew failed; it may lose the lease
   * at its deadline), stalled (its work reports no progress), or its last successful renew is
   * older than `toleranceMs` past the renew interval (a stuck leader, as in client-go's health
   * adaptor). A follower is always healthy: it holds nothing that could go wrong.
   */
  health(toleranceMs = this.timing.renewIntervalMs): ElectorHealth {
    const last = this.state.lastRenewAt;
    const since = last === null ? null : this.clock.now() - last;
    const isLeader = this.leadership !== null;
    const { suspended, stalled } = this;
    const fresh = since === null || since <= this.timing.renewIntervalMs + toleranceMs;
    const ok = !isLeader || (fresh && !suspended && !stalled);
    return { ok, group: this.group, isLeader, term: this.term, suspended, stalled, remainingMs: this.remainingMs(), sinceRenewMs: since };
  }

  /** Begin campaigning. Idempotent. */
  start(): void {
    if (this.started) return;
    if (this.stopping) throw new NotLeaderError(`elector for ${this.group} was stopped; make a new one`);
    this.started = true;
    // A stale rejection stops the writer: a fenced write refused anywhere in this process with
    // this leadership's token (stream, SQL, HTTP, message) ends the leadership at once.
    // The feed is process-wide and outlives any store: it holds this elector weakly, so one that
    // is dropped without stop() (its store and clock gone, as a crashed node in the simulator)
    // is not kept alive by it, and its listener goes when it is collected.
    const unhear = LeaderElector.hearRejections(new WeakRef(this));
    unhearOnCollect.register(this, unhear, this);
    this.unhearRejections = () => {
      unhear();
      unhearOnCollect.unregister(this);
    };
    try {
      if (this.store.watch) this.unwatch = this.store.watch(this.group, (lease) => this.dispatch({ type: 'push', lease }));
    } catch (err) {
      // Campaign without push (the loop polls); the store's failure is reported, not thrown.
      this.emit('store-error', { operation: 'watch', error: toError(err) });
    }
    this.dispatch({ type: 'start' });
  }

  /** The listener, made here so that its closure holds nothing but the weak reference. */
  private static hearRejections(self: WeakRef<LeaderElector>): () => void {
    return onFencedRejection(({ error }) => self.deref()?.heardRejection(error.lease, error.term));
  }

  /** A fenced write refused in this process: this leadership's own token ends it at once. */
  private heardRejection(lease: string, term: number): void {
    const l = this.leadership;
    if (l && lease === this.group && term === l.term) void this.dispatch({ type: 'fenced', term: l.term });
  }

  /**
   * Resolves once the acquire now on its way (if any) has been answered and acted on: by then
   * `elected` was emitted if it won. Resolves at once when no acquire is in flight. A lock's wait
   * uses it so that an attempt sent within the wait counts, however late its answer.
   */
  settled(): Promise<void> {
    return this.attempt?.promise ?? Promise.resolve();
  }

  /**
   * Run `fn` each time this node is elected, with a signal that aborts when leadership ends.
   * Starts campaigning if not started. Resolves when the elector is stopped.
   * If `fn` throws while still leader, the node resigns so another node can take over.
   * With `{ releaseOnEnd: true }`, `fn` ending while leader stops the elector (lease released at
   * once, no more campaigning) and the promise settles as `fn` did (see RunWhileLeaderOptions).
   */
  runWhileLeader(fn: LeaderWork, options: RunWhileLeaderOptions = {}): Promise<void> {
    if (typeof fn !== 'function') throw new InvalidArgumentError('fn', 'expected a function ({ signal, term, token }) => void | Promise<void>');
    if (typeof options !== 'object' || options === null) throw new InvalidArgumentError('options', 'expected an object');
    const releaseOnEnd = options.releaseOnEnd ?? false;
    if (typeof releaseOnEnd !== 'boolean') throw new InvalidArgumentError('releaseOnEnd', `expected a boolean, got ${typeof releaseOnEnd}`);
    const entry: WorkEntry = { fn, releaseOnEnd, error: null };
    // Listen before starting: a stop the work itself causes must not be missed.
    const stopped = new Promise<void>((resolve, reject) => this.once('stopped', () => (entry.error ? reject(entry.error) : resolve())));
    this.works.add(entry);
    if (this.leadership) this.startWork(this.leadership, entry);
    this.start();
    return stopped;
  }

  /**
   * Confirm, now, that this node still leads (ReadIndex-style, for a linearizable read): send a
   * renew (compare-and-set on owner and term) and resolve once the store has answered that it
   * still holds the lease with the current term. Call it after the request to be served arrived:
   * no newer leader existed when the store answered, so nothing was written that this leader has
   * not seen. The renew uses the elector's own TTL, so the store's expiry only moves forward.
   *
   * Rejects with NotLeaderError when not leader, when the store refuses the renew (deposed: the
   * lease expired or passed on), when it does not answer within `requestTimeoutMs` (partitioned:
   * the cause is the StoreUnavailableError), or when the answer came after the leadership ended
   * or later than the local deadline a renew sent then would give. The loop's own renewals and
   * deadline are left as they are; a refused confirmation is not acted on here, the loop's next
   * renew finds the loss.
   */
  async confirmLeadership(): Promise<ConfirmedLeadership> {
    const l = this.leadership;
    if (!l) throw new NotLeaderError(`${this.owner} is not the leader of ${this.group}`);
    const sentAt = this.clock.now();
    let result: RenewResult;
    try {
      result = await this.call('confirm', this.store.renew(this.group, this.owner, l.term, this.storeTtlMs));
    } catch (err) {
      throw new NotLeaderError(`leadership of ${this.group} term ${l.term} not confirmed: ${toError(err).message}`, { cause: err });
    }
    if (!result.renewed) {
      const holder = result.lease ? `${result.lease.owner} holds term ${result.lease.term}` : 'no one holds it';
      throw new NotLeaderError(`leadership of ${this.group} term ${l.term} not confirmed: the store refused the renew (${holder})`);
    }
    if (this.leadership !== l) throw new NotLeaderError(`leadership of ${this.group} term ${l.term} ended while it was being confirmed`);
    if (this.clock.now() >= leaderDeadline(sentAt, this.timing)) {
      throw new NotLeaderError(`leadership of ${this.group} term ${l.term} not confirmed: the renew's answer came after its own deadline`);
    }
    return { term: l.term, token: l.token, sentAt };
  }

  /**
   * Hand leadership to the node `nodeId` (its stable node id, or its incarnation id) and resolve
   * with its lease once it leads. The leader writes a hint (the lease `GROUP/transfer-to`, held by
   * it for `timeoutMs`, naming the node), then resigns. A candidate that wins the lease while the
   * hint names someone else does not lead: it gives the term back at once and holds back until the
   * hint lapses, so the named node wins. If the named node has not taken over within `timeoutMs`
   * (it is unknown, down, or not campaigning), the hint lapses, anyone may lead again, and this
   * rejects with TransferError (`reason: 'timeout'`): the group is never left leaderless beyond
   * the bound. Rejects at once with NotLeaderError when this node does not lead,
   * InvalidArgumentError for a bad id or this node's own, TransferError (`'busy'`) while an earlier
   * leader's hand-over hint is still live. The old leader campaigns on as a candidate afterwards.
   */
  async transferTo(nodeId: string, options: TransferOptions = {}): Promise<Lease> {
    const target = checkOwner('nodeId', nodeId);
    if (typeof options !== 'object' || options === null) throw new InvalidArgumentError('options', 'expected an object');
    const timeoutMs = checkMs('timeoutMs', options.timeoutMs ?? Math.min(3 * this.timing.ttlMs, maxTransferMs), 1, maxTransferMs);
    const { signal } = options;
    signal?.throwIfAborted();
    const hintName = this.transferName;
    if (hintName === null) throw new InvalidArgumentError('group', `${this.group} takes no hand-over: made with transfers: false, or too long to add /transfer-to for its hint`);
    const l = this.leadership;
    if (!l) throw new NotLeaderError(`${this.owner} is not the leader of ${this.group}: only the leader can hand it over`);
    if (this.isNamed(target)) throw new InvalidArgumentError('nodeId', `${target} is this node, which leads ${this.group} already`);
    const started = this.clock.now();
    const hint = await this.call('transfer', this.store.acquire(hintName, this.owner, timeoutMs, { to: target, from: this.owner, term: l.term }));
    if (!hint.acquired) {
      throw new TransferError(this.group, target, 'busy', `a hand-over of ${this.group} to ${hintTarget(hint.lease) ?? '?'} by ${hint.lease.owner} is under way for ${hint.lease.remainingMs} ms more`);
    }
    const withdraw = (): Promise<void> => this.store.release(hintName, this.owner, hint.lease.term).then(() => undefined, () => undefined);
    if (this.leadership !== l) {
      await withdraw();
      throw new NotLeaderError(`leadership of ${this.group} term ${l.term} ended before it could be handed over`);
    }
    await this.resign();
    const until = started + timeoutMs;
    try {
      for (;;) {
        let lease: Lease | null = null;
        try {
          lease = await this.store.read(this.group);
        } catch (err) {
          if (!(err instanceof StoreUnavailableError)) throw err;
        }
        if (lease && this.matches(lease.owner, target)) return lease;
        const left = until - this.clock.now();
        if (left <= 0) break;
        await sleep(this.clock, Math.min(left, this.timing.retryMs), signal);
      }
    } finally {
      // Taken over (the others cannot win while the named node holds the lease), timed out or
      // aborted: the hint has done its part either way.
      await withdraw();
    }
    throw new TransferError(this.group, target, 'timeout', `${target} did not take over ${this.group} within ${timeoutMs} ms (unknown, down or not campaigning); leadership passes to whoever campaigns`);
  }

  /** Whether `target` (a node id or an incarnation id) names the incarnation `owner`. */
  private matches(owner: string, target: string): boolean {
    return owner === target || nodeIdOf(owner) === target;
  }

  private isNamed(target: string): boolean {
    return this.matches(this.owner, target);
  }

  /**
   * How long an acquire's win must be held back: while a live hand-over hint names another node,
   * its time left by the store's clock (bounded), else 0. The hint is a preference, not a safety
   * matter: a hint that cannot be read lets the win be led.
   */
  private async holdBack(r: AcquireResult): Promise<number> {
    // Given over by a release that found no hint held (see AcquireResult.noTransferHint): none to read.
    if (!r.acquired || this.transferName === null || r.noTransferHint === true) return 0;
    let hint: Lease | null;
    try {
      hint = await this.store.read(this.transferName);
    } catch {
      return 0;
    }
    const to = hintTarget(hint);
    if (!hint || to === null || this.isNamed(to)) return 0;
    // At most one renew interval at a time, then an acquire reads the hint again: a leader may
    // meanwhile have replaced it with one that names this node (a hold-back for the old hint's
    // whole time kept the named node out past transferTo's bound).
    return Math.max(1, Math.min(Math.ceil(hint.remainingMs), maxTransferMs, this.timing.renewIntervalMs));
  }

  /**
   * Give up leadership now (release the lease so another node takes over at once) and wait one
   * renew interval before campaigning again.
   */
  async resign(): Promise<void> {
    await this.dispatch({ type: 'resign' });
  }

  /**
   * A fenced write carrying this leadership's token (of `term`) was refused as stale where it
   * landed, and this process learnt it some way tenure cannot see (a child process's exit code
   * 3, a reply of your own protocol): end the leadership at once, as a refusal reported through
   * tenure/fencing does (reason `fenced`). A term other than the current one changes nothing.
   */
  async reportFenced(term: number): Promise<void> {
    await this.dispatch({ type: 'fenced', term });
  }

  /** Stop campaigning, abort leader work, wait for it to settle, and release the lease. */
  async stop(): Promise<void> {
    if (this.stopping) {
      await this.loopEnded.promise;
      return;
    }
    this.stopping = true;
    if (!this.started) this.loopEnded.resolve();
    try {
      this.stopController.abort();
      const done = this.dispatch({ type: 'stop' });
      await Promise.all([done, this.loopEnded.promise]);
      await this.abandonAcquires();
    } finally {
      // The watch goes after the release, which is then on its way sooner (a hand-off waits on it).
      // A candidate that stops waiting withdraws, so no release hands it the lease (a store that
      // keeps waiters, PostgreSQL's hand-over, would otherwise until the last watcher goes).
      if (this.store.withdraw) await this.store.withdraw(this.group, this.owner).catch(() => {});
      try {
        this.unhearRejections?.();
        this.unhearRejections = null;
        this.unwatch?.();
      } finally {
        this.unwatch = null;
        this.emit('stopped', {});
      }
    }
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.stop();
  }

  // ---- the shell: feed events to the machine, perform its effects ------------------------

  /**
   * Step the machine and perform the effects. Returns when the async effects started by this
   * event (a depose's settling and release) are done. Events raised while effects are being
   * performed (a synchronous store answer, a push from inside a call) are queued, not nested.
   */
  private dispatch(event: ElectorEvent): Promise<void> {
    const done = deferred();
    this.queue.push({ event, done });
    if (this.dispatching) return done.promise;
    this.dispatching = true;
    try {
      for (let next = this.queue.shift(); next; next = this.queue.shift()) {
        const { state, effects } = step(this.config, this.state, next.event, this.clock.now());
        this.state = state;
        const collected: Promise<void>[] = [];
        this.collected = collected;
        const faults: Error[] = [];
        for (const effect of effects) {
          try {
            this.perform(effect);
          } catch (err) {
            faults.push(toError(err));
          }
        }
        this.collected = null;
        void Promise.all(collected).then(next.done.resolve, next.done.resolve);
        // A throwing listener or a bug: a fault, as the loop's own errors are.
        for (const error of faults) this.queue.push({ event: { type: 'fault', operation: 'loop', error }, done: deferred() });
      }
    } finally {
      this.collected = null;
      this.dispatching = false;
    }
    return done.promise;
  }

  private perform(e: ElectorEffect): void {
    switch (e.type) {
      case 'send-acquire':
        return this.sendAcquire(e.id);
      case 'send-renew': {
        const id = e.id;
        let pending: Promise<RenewResult>;
        try {
          pending = this.store.renew(this.group, this.owner, e.term, this.storeTtlMs);
        } catch (err) {
          pending = Promise.reject(toError(err));
        }
        this.call('renew', pending).then(
          (r) => void this.dispatch({ type: 'renew-ok', id, renewed: r.renewed, lease: r.lease }),
          (err: unknown) => void this.dispatch({ type: 'renew-failed', id, ...callError(err) }),
        );
        return;
      }
      case 'release':
        this.wins.delete(e.term);
        this.track(this.release(e.term));
        return;
      case 'read-hint': {
        const id = e.id;
        const name = this.transferName;
        const read = name === null ? Promise.resolve(null) : this.call('read-hint', Promise.resolve().then(() => this.store.read(name)));
        read.then(
          (hint) => void this.dispatch({ type: 'hint', id, to: hintTarget(hint) }),
          () => void this.dispatch({ type: 'hint', id, to: null }),
        );
        return;
      }
      case 'abandon-acquire':
        // The one in flight, and any the loop gave up on before it (see abandonAcquires).
        this.track(this.abandonAcquires());
        return;
      case 'set-timer':
      case 'cancel-timer':
        return this.timers.perform(e);
      case 'lead': {
        const l: Leadership = { term: e.term, token: makeToken(this.group, e.term), controller: new AbortController(), work: new Set(), progressAt: null };
        this.leadership = l;
        this.wins.delete(e.term); // its depose releases it
        this.log('info', 'elected', { term: l.term, remainingMs: e.deadlineInMs }, `elected leader of ${this.group} with term ${l.term}`);
        this.emit('elected', { term: l.term, token: l.token, deadlineInMs: e.deadlineInMs });
        for (const entry of this.works) this.startWork(l, entry);
        return;
      }
      case 'depose':
        this.track(this.depose(e));
        return;
      case 'late':
        this.log('info', 'lost', { term: e.term, reason: 'late' }, `won ${this.group} term ${e.term} too late to lead: the reply came after its deadline`);
        this.emit('deposed', { term: e.term, reason: 'late', holder: null });
        return;
      case 'settled': {
        const a = this.attempt;
        this.attempt = null;
        this.acquire = null;
        a?.settle();
        return;
      }
      case 'loop-ended':
        this.loopEnded.resolve();
        return;
      case 'leader-changed':
        this.log('debug', 'leader-changed', { term: e.term, leader: e.owner }, `${this.group} is led by ${e.owner ?? 'no one'} (term ${e.term})`);
        this.emit('leader-changed', { owner: e.owner, term: e.term, meta: e.meta });
        return;
      case 'renewed':
        this.emit('renewed', { term: e.term, latencyMs: e.latencyMs });
        return;
      case 'renew-failed':
        this.emit('renew-failed', { term: e.term, error: e.error });
        return;
      case 'store-error':
        this.log('error', 'store-error', { operation: e.operation, reason: e.error.message }, `${this.group}: store error in ${e.operation}`);
        this.emit('store-error', { operation: e.operation, error: e.error });
        return;
      case 'suspended': {
        const remainingMs = Math.max(0, e.deadline - this.clock.now());
        this.log('warn', 'suspended', { term: e.term, reason: e.error.message, remainingMs }, `leadership of ${this.group} term ${e.term} suspended: a renew failed, ${remainingMs} ms left`);
        this.emit('suspended', { term: e.term, error: e.error, remainingMs });
        return;
      }
      case 'recovered': {
        const remainingMs = this.remainingMs();
        this.log('info', 'recovered', { term: e.term, suspendedMs: e.suspendedMs, remainingMs }, `leadership of ${this.group} term ${e.term} recovered after ${e.suspendedMs} ms suspended`);
        this.emit('recovered', { term: e.term, suspendedMs: e.suspendedMs, remainingMs });
        return;
      }
      case 'stalled': {
        const stepDown = this.config.stepDownOnStall ?? false;
        this.log('warn', 'stalled', { term: e.term, sinceProgressMs: e.sinceProgressMs, stepDown }, `leader work of ${this.group} term ${e.term} made no progress for ${e.sinceProgressMs} ms${stepDown ? ': stepping down' : ''}`);
        this.emit('stalled', { term: e.term, sinceProgressMs: e.sinceProgressMs, stepDown });
        return;
      }
      case 'unstalled':
        this.log('info', 'unstalled', { term: e.term, stalledMs: e.stalledMs }, `leader work of ${this.group} term ${e.term} made progress again`);
        this.emit('unstalled', { term: e.term, stalledMs: e.stalledMs });
        return;
    }
  }

  /** One structured line for a transition, with the group, this incarnation and the fields given. */
  private log(level: LogLevel, event: string, fields: LogFields, message: string): void {
    writeLog(this.logger, level, { event, group: this.group, owner: this.owner, ...fields }, message);
  }

  private flushProgress(): void {
    const l = this.leadership;
    if (!l || l.progressAt === null) return;
    const at = l.progressAt;
    l.progressAt = null;
    void this.dispatch({ type: 'progress', term: l.term, at });
  }

  /**
   * Stopping: release every term an acquire of this elector may have won that the loop will not
   * hold (rule 3's "maybe": a timed-out acquire can land after stop). Waits for the unanswered ones
   * up to requestTimeoutMs, so a lock's release() frees the name at once in the usual case; one
   * answered later is released when it comes. A release names this incarnation and the term, so it
   * can free nothing but a lease this elector itself was granted.
   */
  private abandonAcquires(): Promise<void> {
    const releases: Promise<void>[] = [];
    for (const term of this.wins) {
      if (this.leadership?.term !== term) releases.push(this.release(term));
    }
    this.wins.clear();
    for (const pending of this.unanswered) {
      this.unanswered.delete(pending);
      releases.push(pending.then((r) => (r.acquired && this.leadership?.term !== r.lease.term ? this.release(r.lease.term) : undefined), () => {}));
    }
    if (releases.length === 0) return Promise.resolve();
    let cancel = (): void => {};
    return Promise.race([Promise.all(releases).then(() => {}), new Promise<void>((r) => (cancel = this.clock.setTimer(this.timing.requestTimeoutMs, r)))]).finally(() => cancel());
  }

  private track(p: Promise<void>): void {
    this.collected?.push(p);
  }

  private sendAcquire(id: number): void {
    let pending: Promise<AcquireResult>;
    try {
      pending = this.store.acquire(this.group, this.owner, this.storeTtlMs, this.meta);
    } catch (err) {
      // A store that throws rather than rejecting: the same fault, reported the same way.
      pending = Promise.reject(toError(err));
    }
    this.acquire = { id, pending };
    this.unanswered.add(pending);
    pending.then(
      (r) => {
        if (!this.unanswered.delete(pending)) return; // abandoned: abandonAcquires has it
        // Until the loop leads it: a win whose call timed out is renewed as its own by the loop's
        // next acquire, or released by stop().
        if (r.acquired && this.leadership?.term !== r.lease.term) this.wins.add(r.lease.term);
      },
      () => void this.unanswered.delete(pending),
    );
    const attempt = deferred();
    this.attempt = { promise: attempt.promise, settle: attempt.resolve };
    // A win is checked against a hand-over hint (one read, only when won) before it is acted on.
    const checked = pending.then(async (r) => ({ r, holdBackMs: await this.holdBack(r) }));
    this.call('acquire', checked).then(
      ({ r, holdBackMs }) => void this.dispatch({ type: 'acquire-ok', id, acquired: r.acquired, lease: r.lease, ...(holdBackMs > 0 ? { holdBackMs } : {}) }),
      (err: unknown) => void this.dispatch({ type: 'acquire-failed', id, ...callError(err) }),
    );
  }

  /** End leadership: abort the signal first, then tell listeners; then settle work, release, feed back. */
  private async depose(e: Extract<ElectorEffect, { type: 'depose' }>): Promise<void> {
    const l = this.leadership;
    if (!l || l.term !== e.term) return;
    this.leadership = null;
    l.controller.abort(new NotLeaderError(`leadership of ${this.group} term ${l.term} ended: ${e.reason}`));
    const [level, event] = deposedLine(e.reason);
    const holder = e.holder ? { holder: e.holder.owner, holderTerm: e.holder.term } : {};
    this.log(level, event, { term: l.term, reason: e.reason, ...holder }, `leadership of ${this.group} term ${l.term} ended: ${e.reason}`);
    try {
      this.emit('deposed', { term: l.term, reason: e.reason, holder: e.holder });
    } catch (err) {
      void this.dispatch({ type: 'fault', operation: 'loop', error: toError(err) });
    }
    if (e.settle) {
      // Let aborted work settle before the lease is released, but never past the old deadline:
      // after it the lease may pass on regardless.
      const left = e.deadline - this.clock.now();
      if (l.work.size > 0 && left > 0) {
        let cancel = (): void => {};
        await Promise.race([Promise.allSettled([...l.work]), new Promise<void>((r) => (cancel = this.clock.setTimer(left, r)))]);
        cancel();
      }
    }
    if (e.release) await this.release(l.term, e.deadline);
    if (e.after === 'wake') await this.dispatch({ type: 'wake' });
    else if (e.after === 'retired') await this.dispatch({ type: 'retired', term: l.term });
  }

  /**
   * Release `term`'s lease. With the leadership's `deadline`, wait for the answer until then (at
   * least requestTimeoutMs): a loaded store answers late, and stop() resolving before its release
   * landed would leave the name readable as held, a next holder refused. Past the deadline the
   * lease may lapse anyway, so a store that is down cannot hold stop() longer.
   */
  private async release(term: number, deadline?: number): Promise<void> {
    const timeoutMs = deadline === undefined ? this.timing.requestTimeoutMs : Math.max(this.timing.requestTimeoutMs, deadline - this.clock.now());
    try {
      await this.call('release', this.store.release(this.group, this.owner, term), timeoutMs);
    } catch (err) {
      await this.dispatch({ type: 'release-failed', term, error: toError(err) });
      return;
    }
    await this.dispatch({ type: 'release-ok', term });
  }

  private startWork(l: Leadership, entry: WorkEntry): void {
    const context: LeaderContext = {
      signal: l.controller.signal,
      term: l.term,
      token: l.token,
      remainingMs: () => (this.leadership === l ? this.remainingMs() : 0),
      progress: () => {
        if (this.leadership !== l || (this.config.progressTimeoutMs ?? 0) <= 0) return;
        // Work may report in a hot loop: keep the latest instant, given to the machine when its
        // progress timer fires (flushProgress); at once only when stalled, to clear it now.
        l.progressAt = this.clock.now();
        if (this.state.leader?.stalled) this.flushProgress();
      },
    };
    const p = (async () => {
      try {
        // The token flows with the work (timers, promises, jobs it starts): tenure/fencing's
        // helpers find it there, and refuse to write once the signal has aborted.
        await runFenced(context, () => entry.fn(context));
      } catch (err) {
        if (l.controller.signal.aborted) return; // work stopping because leadership ended is expected
        this.emit('work-error', { term: l.term, error: toError(err) });
        if (!entry.releaseOnEnd) {
          if (this.leadership === l) void this.dispatch({ type: 'work-failed', term: l.term });
          return;
        }
        entry.error = toError(err);
      }
      // Task ends, leadership ends: the work settled while its leadership held. stop() releases
      // the lease (after this promise, which it waits for, has settled) and ends the loop.
      if (entry.releaseOnEnd && !l.controller.signal.aborted) void this.stop();
    })();
    l.work.add(p);
    void p.finally(() => l.work.delete(p));
  }

  /**
   * Race a store call against the request timeout (a timeout is "maybe", safety rule 3) and
   * against stop(), which must not wait for a store that does not answer.
   */
  private call<T>(operation: string, promise: Promise<T>, timeoutMs = this.timing.requestTimeoutMs): Promise<T> {
    const started = this.clock.now();
    return new Promise<T>((resolve, reject) => {
      const stopped = this.stopController.signal;
      let reported = false;
      const report = (outcome: 'ok' | 'error' | 'timeout'): void => {
        if (reported) return;
        reported = true;
        try {
          this.emit('store-call', { operation, ms: this.clock.now() - started, outcome });
        } catch {
          // a metrics listener failing must not change the call's outcome
        }
      };
      const done = (): void => {
        cancel();
        stopped.removeEventListener('abort', onStop);
      };
      const onStop = (): void => {
        done();
        reject(new StoreUnavailableError(`${operation} of ${this.group} abandoned: elector stopped`));
      };
      const cancel = this.clock.setTimer(timeoutMs, () => {
        done();
        report('timeout');
        reject(new StoreUnavailableError(`${this.store.kind} store: no answer to ${operation} of ${this.group} within ${Math.round(timeoutMs)} ms`));
      });
      if (operation !== 'release') stopped.addEventListener('abort', onStop, { once: true });
      promise.then(
        (v) => {
          done();
          report('ok');
          resolve(v);
        },
        (err: unknown) => {
          done();
          report('error');
          reject(err as Error);
        },
      );
    });
  }
}

/** A work registered by runWhileLeader, with its options and the error it ended the elector with. */
interface WorkEntry {
  readonly fn: LeaderWork;
  readonly releaseOnEnd: boolean;
  error: Error | null;
}

/** How a deposition is logged: lost (the store or the clock took it), a stale rejection, or a step down. */
function deposedLine(reason: DeposedReason): [LogLevel, string] {
  switch (reason) {
    case 'deadline':
    case 'lost':
    case 'late':
    case 'error':
      return ['warn', 'lost'];
    case 'fenced':
      return ['warn', 'stale-rejection'];
    case 'stalled':
      return ['warn', 'stepped-down'];
    case 'resigned':
    case 'stopped':
      return ['info', 'stepped-down'];
  }
}

/** The node a hand-over hint names (its meta `to`, as transferTo writes it), or null for no hint or a hint not tenure's. */
function hintTarget(hint: Lease | null): string | null {
  const to = hint?.meta['to'];
  return typeof to === 'string' ? to : null;
}

function callError(err: unknown): CallError {
  const error = toError(err);
  return { error, unavailable: error instanceof StoreUnavailableError };
}

function deferred(): { promise: Promise<void>; resolve: () => void } {
  let resolve = (): void => {};
  const promise = new Promise<void>((r) => (resolve = r));
  return { promise, resolve };
}

function toError(err: unknown): Error {
  return err instanceof Error ? err : new Error(String(err));
}

function defaultNodeId(): string {
  return `${hostname()}-${process.pid}`;
}
