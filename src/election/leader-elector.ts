/**
 * LeaderElector: campaigns for one group on any Store and keeps the lease alive while leading.
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
import {
  NotLeaderError,
  StoreUnavailableError,
  checkName,
  candidateDelay,
  leaderDeadline,
  makeIncarnation,
  makeToken,
  resolveTiming,
  systemClock,
  systemRandom,
  encodeMeta,
} from '../core/index.js';
import type { AcquireResult, Clock, FencingToken, Lease, LeaseMeta, Random, Store, Timing, TimingOptions, Unsubscribe } from '../core/index.js';
import { hostname } from 'node:os';
import { TypedEmitter } from '../core/typed-emitter.js';

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
}

/** Why leadership ended. */
export type DeposedReason =
  | 'deadline' // the local deadline passed without a successful renew (store slow or unreachable)
  | 'lost' // the store refused the renew: the lease expired or another owner holds it
  | 'stopped' // stop() was called
  | 'resigned' // resign() was called, or the leader work failed
  | 'late' // the acquire reply came after its own deadline had already passed
  | 'error'; // an unexpected error in the store or the elector (reported as `store-error`)

export interface LeaderElectorEvents {
  elected: { term: number; token: FencingToken; deadlineInMs: number };
  deposed: { term: number; reason: DeposedReason; holder: Lease | null };
  'leader-changed': { owner: string | null; term: number; meta: LeaseMeta };
  renewed: { term: number; latencyMs: number };
  'renew-failed': { term: number; error: Error };
  'store-error': { operation: string; error: Error };
  'work-error': { term: number; error: Error };
  stopped: Record<string, never>;
}

/** What leader work receives each time this node is elected. */
export interface LeaderContext {
  /** Aborts when leadership ends (deadline, lost, stop), before the lease could expire. */
  readonly signal: AbortSignal;
  readonly term: number;
  readonly token: FencingToken;
}

export type LeaderWork = (context: LeaderContext) => Promise<void> | void;

interface Leadership {
  readonly term: number;
  readonly token: FencingToken;
  readonly controller: AbortController;
  /** Local monotonic instant at which leadership ends unless renewed. */
  deadline: number;
  cancelDeadline: () => void;
  readonly work: Set<Promise<void>>;
}

export class LeaderElector extends TypedEmitter<LeaderElectorEvents> {
  readonly group: string;
  /** This instance's incarnation id, used as the lease owner. */
  readonly owner: string;
  readonly timing: Timing;
  private readonly store: Store;
  private readonly clock: Clock;
  private readonly random: Random;
  private readonly meta: LeaseMeta;
  private readonly works = new Set<LeaderWork>();
  private leadership: Leadership | null = null;
  private knownLeader: { owner: string | null; term: number } = { owner: null, term: 0 };
  private loop: Promise<void> | null = null;
  private stopping = false;
  private readonly stopController = new AbortController();
  private wakeUp: (() => void) | null = null;
  private unwatch: Unsubscribe | null = null;
  private resignUntil = 0;
  /**
   * The highest term this incarnation gave up (resign, stop). Never lead it again: re-acquiring
   * our own live lease keeps its term, so a release of that term still in flight (or not yet sent)
   * would free the lease under the new leadership while another node takes the next term.
   */
  private retiredTerm = 0;
  private lastRenewAt: number | null = null;
  /** An acquire is on its way; a push meanwhile sets `pushedWhileAcquiring` (see tryAgain). */
  private acquiring = false;
  private pushedWhileAcquiring = false;
  /** Settles when the acquire in flight (if any) has been answered and acted on. */
  private attempt: Promise<void> | null = null;
  /** Consecutive faults (see `onFault`); 0 after any store call answers normally. */
  private faults = 0;
  /** The message of the last fault reported in the current run of faults: a repeat is not reported again. */
  private lastFault: string | null = null;

  constructor(options: LeaderElectorOptions) {
    super();
    this.group = checkName('group', options.group);
    this.store = options.store;
    this.clock = options.clock ?? systemClock;
    this.random = options.random ?? systemRandom;
    this.timing = resolveTiming(options);
    this.meta = options.meta ?? {};
    encodeMeta('meta', this.meta);
    this.owner = makeIncarnation(options.id ?? defaultNodeId(), this.random);
  }

  /** True while this node holds leadership and its local deadline has not passed. */
  get isLeader(): boolean {
    return this.leadership !== null;
  }

  /** The term of the current leadership, or null when not leader. */
  get term(): number | null {
    return this.leadership?.term ?? null;
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
   * Healthy unless this node is leader and its last successful renew is older than
   * `toleranceMs` past the renew interval (a stuck leader, as in client-go's health adaptor).
   */
  health(toleranceMs = this.timing.renewIntervalMs): { ok: boolean; isLeader: boolean; sinceRenewMs: number | null } {
    const since = this.lastRenewAt === null ? null : this.clock.now() - this.lastRenewAt;
    const ok = !this.leadership || since === null || since <= this.timing.renewIntervalMs + toleranceMs;
    return { ok, isLeader: this.leadership !== null, sinceRenewMs: since };
  }

  /** Begin campaigning. Idempotent. */
  start(): void {
    if (this.loop) return;
    if (this.stopping) throw new NotLeaderError(`elector for ${this.group} was stopped; make a new one`);
    try {
      if (this.store.watch) this.unwatch = this.store.watch(this.group, (lease) => this.onPush(lease));
    } catch (err) {
      // Campaign without push (the loop polls); the store's failure is reported, not thrown.
      this.emit('store-error', { operation: 'watch', error: toError(err) });
    }
    this.loop = this.run();
  }

  /**
   * Resolves once the acquire now on its way (if any) has been answered and acted on: by then
   * `elected` was emitted if it won. Resolves at once when no acquire is in flight. A lock's wait
   * uses it so that an attempt sent within the wait counts, however late its answer.
   */
  settled(): Promise<void> {
    return this.attempt ?? Promise.resolve();
  }

  /**
   * Run `fn` each time this node is elected, with a signal that aborts when leadership ends.
   * Starts campaigning if not started. Resolves when the elector is stopped.
   * If `fn` throws while still leader, the node resigns so another node can take over.
   */
  runWhileLeader(fn: LeaderWork): Promise<void> {
    this.works.add(fn);
    if (this.leadership) this.startWork(this.leadership, fn);
    this.start();
    return new Promise((resolve) => this.once('stopped', () => resolve()));
  }

  /**
   * Give up leadership now (release the lease so another node takes over at once) and wait one
   * renew interval before campaigning again.
   */
  async resign(): Promise<void> {
    const l = this.leadership;
    if (!l) return;
    this.resignUntil = this.clock.now() + this.timing.renewIntervalMs;
    this.retiredTerm = Math.max(this.retiredTerm, l.term);
    await this.endLeadership(l, 'resigned', null);
    await this.releaseQuietly(l.term);
    this.wake();
  }

  /** Stop campaigning, abort leader work, wait for it to settle, and release the lease. */
  async stop(): Promise<void> {
    if (this.stopping) {
      await this.loop;
      return;
    }
    this.stopping = true;
    this.stopController.abort();
    try {
      const l = this.leadership;
      if (l) await this.endLeadership(l, 'stopped', null);
      this.wake();
      await this.loop;
      if (l) await this.releaseQuietly(l.term);
    } finally {
      // The watch goes after the release, which is then on its way sooner (a hand-off waits on it).
      try {
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

  // ---- the loop -------------------------------------------------------------------------

  private async run(): Promise<void> {
    while (!this.stopping) {
      try {
        const l = this.leadership;
        if (l) await this.leadTurn(l);
        else await this.campaignTurn();
      } catch (err) {
        // Not a store error the turns handle: a bug, a throwing listener, or a store that broke
        // its contract. The loop goes on (a loop that died would hold leadership with no renewals
        // and never campaign again).
        await this.onFault('loop', toError(err));
      }
    }
  }

  /**
   * A fault: end leadership as a resign does (signal aborted, work settled, lease released so
   * another node need not wait out the TTL), report it unless it repeats the last one, and back
   * off (retryMs doubling up to the TTL) before the loop tries again.
   */
  private async onFault(operation: string, error: Error): Promise<void> {
    this.faults++;
    if (error.message !== this.lastFault) {
      this.lastFault = error.message;
      this.emit('store-error', { operation, error });
    }
    const l = this.leadership;
    if (l) {
      this.retiredTerm = Math.max(this.retiredTerm, l.term);
      await this.endLeadership(l, 'error', null);
      await this.releaseQuietly(l.term);
    }
    const backoff = Math.min(this.timing.retryMs * 2 ** Math.min(this.faults - 1, 30), Math.max(this.timing.ttlMs, this.timing.retryMs));
    await this.pause(backoff);
  }

  /** A store call answered normally: the next fault starts a new run (reported, short back-off). */
  private noFault(): void {
    this.faults = 0;
    this.lastFault = null;
  }

  private async campaignTurn(): Promise<void> {
    const waitResign = this.resignUntil - this.clock.now();
    if (waitResign > 0) {
      await this.pause(waitResign);
      return;
    }
    let settle = (): void => {};
    const attempt = new Promise<void>((resolve) => (settle = resolve));
    this.attempt = attempt;
    try {
      await this.acquireOnce(attempt, settle);
    } finally {
      if (this.attempt === attempt) this.attempt = null;
      settle();
    }
  }

  /** One acquire and what follows from its answer; `settle` is called once that is decided. */
  private async acquireOnce(attempt: Promise<void>, settle: () => void): Promise<void> {
    const sentAt = this.clock.now();
    let pending: Promise<AcquireResult>;
    try {
      pending = this.store.acquire(this.group, this.owner, this.timing.ttlMs, this.meta);
    } catch (err) {
      // A store that throws rather than rejecting: the same fault, reported the same way.
      pending = Promise.reject(toError(err));
    }
    let result: AcquireResult;
    this.acquiring = true;
    this.pushedWhileAcquiring = false;
    try {
      result = await this.call('acquire', pending);
    } catch (err) {
      this.acquiring = false;
      if (this.stopping) {
        // stop() did not wait for this call; if it lands as a win later, give the lease back.
        void pending.then((r) => (r.acquired ? this.releaseQuietly(r.lease.term) : undefined), () => {});
        return;
      }
      const error = toError(err);
      if (!(error instanceof StoreUnavailableError)) {
        // Not "maybe" (rule 3) but an answer that will not change by asking again at once: a row
        // tenure cannot use, a store that broke its contract.
        if (this.attempt === attempt) this.attempt = null;
        settle();
        await this.onFault('acquire', error);
        return;
      }
      this.emit('store-error', { operation: 'acquire', error });
      if (this.attempt === attempt) this.attempt = null;
      settle();
      await this.pause(this.timing.retryMs);
      return;
    }
    this.acquiring = false;
    if (this.stopping) {
      if (result.acquired) await this.releaseQuietly(result.lease.term);
      return;
    }
    this.noFault();
    this.observe(result.lease);
    if (result.acquired && result.lease.term > this.retiredTerm) {
      this.becomeLeader(result.lease, sentAt);
      return;
    }
    if (this.attempt === attempt) this.attempt = null;
    settle();
    // Not acquired, or only our retired term back: wait until it lapses (or its release lands),
    // unless the store pushed a release or a hand-over to us while the acquire was on its way.
    if (this.pushedWhileAcquiring && !(result.acquired && result.lease.term <= this.retiredTerm)) return;
    await this.pause(candidateDelay(result.lease.remainingMs, this.timing, this.random));
  }

  private becomeLeader(lease: Lease, sentAt: number): void {
    const deadline = leaderDeadline(sentAt, this.timing);
    const now = this.clock.now();
    if (deadline <= now) {
      // The reply came after its own deadline: we may hold the lease, but must not act on it.
      this.emit('deposed', { term: lease.term, reason: 'late', holder: null });
      return;
    }
    const token = makeToken(this.group, lease.term);
    const l: Leadership = {
      term: lease.term,
      token,
      controller: new AbortController(),
      deadline,
      cancelDeadline: () => {},
      work: new Set(),
    };
    l.cancelDeadline = this.clock.setTimer(deadline - now, () => void this.onDeadline(l));
    this.leadership = l;
    this.lastRenewAt = sentAt;
    this.emit('elected', { term: l.term, token, deadlineInMs: deadline - now });
    for (const fn of this.works) this.startWork(l, fn);
  }

  private async leadTurn(l: Leadership): Promise<void> {
    // Renew on the interval, but early enough to leave one retry before the deadline. After a
    // failure, retry every retryMs (never a zero wait: a store failing at once must not spin).
    const untilDeadline = l.deadline - this.clock.now();
    const wait = this.renewFailing
      ? this.timing.retryMs
      : Math.max(0, Math.min(this.timing.renewIntervalMs, untilDeadline - this.timing.retryMs));
    await this.pause(wait);
    if (this.leadership !== l || this.stopping) return;
    const sentAt = this.clock.now();
    let result;
    try {
      result = await this.call('renew', this.store.renew(this.group, this.owner, l.term, this.timing.ttlMs));
    } catch (err) {
      if (this.leadership !== l) return;
      const error = toError(err);
      if (!(error instanceof StoreUnavailableError) && !this.stopping) {
        await this.onFault('renew', error); // not "maybe": no use renewing until the deadline
        return;
      }
      this.renewFailing = true;
      this.emit('renew-failed', { term: l.term, error });
      return;
    }
    if (this.leadership !== l) return; // deposed while waiting: a late reply changes nothing
    if (!result.renewed) {
      this.renewFailing = false;
      if (result.lease) this.observe(result.lease);
      await this.endLeadership(l, 'lost', result.lease);
      return;
    }
    this.renewFailing = false;
    const deadline = leaderDeadline(sentAt, this.timing);
    // Invariant: a deadline only moves forward, because it is computed from a later send time.
    if (deadline < l.deadline) throw new Error(`deadline went back for ${this.group}: ${deadline} < ${l.deadline}`);
    this.noFault();
    l.cancelDeadline();
    l.deadline = deadline;
    l.cancelDeadline = this.clock.setTimer(deadline - this.clock.now(), () => void this.onDeadline(l));
    this.lastRenewAt = sentAt;
    this.emit('renewed', { term: l.term, latencyMs: this.clock.now() - sentAt });
  }

  private renewFailing = false;

  private async onDeadline(l: Leadership): Promise<void> {
    if (this.leadership !== l) return;
    await this.endLeadership(l, 'deadline', null);
    this.wake();
  }

  /** End leadership locally: abort the signal first, then tell listeners. Waits for leader work only on stop/resign. */
  private async endLeadership(l: Leadership, reason: DeposedReason, holder: Lease | null): Promise<void> {
    if (this.leadership !== l) return;
    this.leadership = null;
    this.renewFailing = false;
    l.cancelDeadline();
    l.controller.abort(new NotLeaderError(`leadership of ${this.group} term ${l.term} ended: ${reason}`));
    this.emit('deposed', { term: l.term, reason, holder });
    if (reason === 'stopped' || reason === 'resigned' || reason === 'error') {
      // Let aborted work settle before the lease is released, but never past the old deadline:
      // after it the lease may pass on regardless.
      const left = l.deadline - this.clock.now();
      if (l.work.size > 0 && left > 0) {
        let cancel = (): void => {};
        await Promise.race([Promise.allSettled([...l.work]), new Promise<void>((r) => (cancel = this.clock.setTimer(left, r)))]);
        cancel();
      }
    }
  }

  private startWork(l: Leadership, fn: LeaderWork): void {
    const context: LeaderContext = { signal: l.controller.signal, term: l.term, token: l.token };
    const p = (async () => {
      try {
        await fn(context);
      } catch (err) {
        if (l.controller.signal.aborted) return; // work stopping because leadership ended is expected
        this.emit('work-error', { term: l.term, error: err as Error });
        if (this.leadership === l) void this.resign();
      }
    })();
    l.work.add(p);
    void p.finally(() => l.work.delete(p));
  }

  private onPush(lease: Lease | null): void {
    if (lease && lease.owner === this.owner) {
      // The store names this node holder without a win of ours (a release handed the lease
      // over): try now, an acquire of our own live lease confirms it.
      if (!this.leadership) this.tryAgain();
      return;
    }
    if (lease) this.observe(lease);
    else {
      this.observe(null);
      if (!this.leadership) this.tryAgain();
    }
  }

  /** Campaign again at once: end the pause, or, with an acquire in flight, skip the next one. */
  private tryAgain(): void {
    if (this.acquiring) this.pushedWhileAcquiring = true;
    else this.wake();
  }

  private observe(lease: Lease | null): void {
    const owner = lease?.owner ?? null;
    const term = lease?.term ?? this.knownLeader.term;
    if (owner === this.knownLeader.owner && term === this.knownLeader.term) return;
    this.knownLeader = { owner, term };
    this.emit('leader-changed', { owner, term, meta: lease?.meta ?? {} });
  }

  private async releaseQuietly(term: number): Promise<void> {
    this.retiredTerm = Math.max(this.retiredTerm, term);
    try {
      await this.call('release', this.store.release(this.group, this.owner, term));
      this.observe(null);
    } catch (err) {
      // The lease then simply expires at its TTL; nothing is unsafe. The fault that ended the
      // leadership, met again by its release, was reported already.
      const error = toError(err);
      if (error.message !== this.lastFault) this.emit('store-error', { operation: 'release', error });
    }
  }

  /**
   * Race a store call against the request timeout (a timeout is "maybe", safety rule 3) and
   * against stop(), which must not wait for a store that does not answer.
   */
  private call<T>(operation: string, promise: Promise<T>): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      const stopped = this.stopController.signal;
      const done = (): void => {
        cancel();
        stopped.removeEventListener('abort', onStop);
      };
      const onStop = (): void => {
        done();
        reject(new StoreUnavailableError(`${operation} of ${this.group} abandoned: elector stopped`));
      };
      const cancel = this.clock.setTimer(this.timing.requestTimeoutMs, () => {
        done();
        reject(new StoreUnavailableError(`${this.store.kind} store: no answer to ${operation} of ${this.group} within ${this.timing.requestTimeoutMs} ms`));
      });
      if (operation !== 'release') stopped.addEventListener('abort', onStop, { once: true });
      promise.then(
        (v) => {
          done();
          resolve(v);
        },
        (err: unknown) => {
          done();
          reject(err as Error);
        },
      );
    });
  }

  /** Sleep up to `ms`, returning early when woken (push, stop, deadline). */
  private pause(ms: number): Promise<void> {
    if (this.stopping) return Promise.resolve();
    return new Promise((resolve) => {
      const done = (): void => {
        cancel();
        if (this.wakeUp === done) this.wakeUp = null;
        resolve();
      };
      const cancel = this.clock.setTimer(ms, done);
      this.wakeUp = done;
    });
  }

  private wake(): void {
    this.wakeUp?.();
  }
}

function toError(err: unknown): Error {
  return err instanceof Error ? err : new Error(String(err));
}

function defaultNodeId(): string {
  return `${hostname()}-${process.pid}`;
}
