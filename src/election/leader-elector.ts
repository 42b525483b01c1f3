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
import { NotLeaderError, StoreUnavailableError, checkName, makeIncarnation, makeToken, resolveTiming, systemClock, systemRandom, encodeMeta } from '../core/index.js';
import type { AcquireResult, Clock, FencingToken, Lease, LeaseMeta, Random, RenewResult, Store, Timing, TimingOptions, Unsubscribe } from '../core/index.js';
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
}

export type { DeposedReason } from './elector-machine.js';

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

/** The shell's side of a leadership: what the machine cannot hold (signal, token, running work). */
interface Leadership {
  readonly term: number;
  readonly token: FencingToken;
  readonly controller: AbortController;
  readonly work: Set<Promise<void>>;
}

export class LeaderElector extends TypedEmitter<LeaderElectorEvents> {
  readonly group: string;
  /** This instance's incarnation id, used as the lease owner. */
  readonly owner: string;
  readonly timing: Timing;
  private readonly store: Store;
  private readonly clock: Clock;
  private readonly meta: LeaseMeta;
  private readonly config: ElectorConfig;
  private readonly works = new Set<LeaderWork>();
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
  private attempt: { promise: Promise<void>; settle: () => void } | null = null;
  private loopEnded: { promise: Promise<void>; resolve: () => void } = deferred();
  /** Async work started by effects (depose: settle, release) during the current dispatch. */
  private collected: Promise<void>[] | null = null;
  private dispatching = false;
  private readonly queue: { event: ElectorEvent; done: { promise: Promise<void>; resolve: () => void } }[] = [];

  constructor(options: LeaderElectorOptions) {
    super();
    this.group = checkName('group', options.group);
    this.store = options.store;
    this.clock = options.clock ?? systemClock;
    this.timers = new ElectorTimers(this.clock, (event) => void this.dispatch(event));
    const random = options.random ?? systemRandom;
    this.timing = resolveTiming(options);
    this.meta = options.meta ?? {};
    encodeMeta('meta', this.meta);
    this.owner = makeIncarnation(options.id ?? defaultNodeId(), random);
    this.config = { owner: this.owner, timing: this.timing, random };
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
    const last = this.state.lastRenewAt;
    const since = last === null ? null : this.clock.now() - last;
    const ok = !this.leadership || since === null || since <= this.timing.renewIntervalMs + toleranceMs;
    return { ok, isLeader: this.leadership !== null, sinceRenewMs: since };
  }

  /** Begin campaigning. Idempotent. */
  start(): void {
    if (this.started) return;
    if (this.stopping) throw new NotLeaderError(`elector for ${this.group} was stopped; make a new one`);
    this.started = true;
    // A stale rejection stops the writer: a fenced write refused anywhere in this process with
    // this leadership's token (stream, SQL, HTTP, message) ends the leadership at once.
    this.unhearRejections = onFencedRejection(({ error }) => {
      const l = this.leadership;
      if (l && error.lease === this.group && error.term === l.term) void this.dispatch({ type: 'fenced', term: l.term });
    });
    try {
      if (this.store.watch) this.unwatch = this.store.watch(this.group, (lease) => this.dispatch({ type: 'push', lease }));
    } catch (err) {
      // Campaign without push (the loop polls); the store's failure is reported, not thrown.
      this.emit('store-error', { operation: 'watch', error: toError(err) });
    }
    this.dispatch({ type: 'start' });
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
    } finally {
      // The watch goes after the release, which is then on its way sooner (a hand-off waits on it).
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
          pending = this.store.renew(this.group, this.owner, e.term, this.timing.ttlMs);
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
        this.track(this.release(e.term));
        return;
      case 'abandon-acquire': {
        const a = this.acquire;
        if (a && a.id === e.id) void a.pending.then((r) => (r.acquired ? this.release(r.lease.term) : undefined), () => {});
        return;
      }
      case 'set-timer':
      case 'cancel-timer':
        return this.timers.perform(e);
      case 'lead': {
        const l: Leadership = { term: e.term, token: makeToken(this.group, e.term), controller: new AbortController(), work: new Set() };
        this.leadership = l;
        this.emit('elected', { term: l.term, token: l.token, deadlineInMs: e.deadlineInMs });
        for (const fn of this.works) this.startWork(l, fn);
        return;
      }
      case 'depose':
        this.track(this.depose(e));
        return;
      case 'late':
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
        this.emit('leader-changed', { owner: e.owner, term: e.term, meta: e.meta });
        return;
      case 'renewed':
        this.emit('renewed', { term: e.term, latencyMs: e.latencyMs });
        return;
      case 'renew-failed':
        this.emit('renew-failed', { term: e.term, error: e.error });
        return;
      case 'store-error':
        this.emit('store-error', { operation: e.operation, error: e.error });
        return;
    }
  }

  private track(p: Promise<void>): void {
    this.collected?.push(p);
  }

  private sendAcquire(id: number): void {
    let pending: Promise<AcquireResult>;
    try {
      pending = this.store.acquire(this.group, this.owner, this.timing.ttlMs, this.meta);
    } catch (err) {
      // A store that throws rather than rejecting: the same fault, reported the same way.
      pending = Promise.reject(toError(err));
    }
    this.acquire = { id, pending };
    const attempt = deferred();
    this.attempt = { promise: attempt.promise, settle: attempt.resolve };
    this.call('acquire', pending).then(
      (r) => void this.dispatch({ type: 'acquire-ok', id, acquired: r.acquired, lease: r.lease }),
      (err: unknown) => void this.dispatch({ type: 'acquire-failed', id, ...callError(err) }),
    );
  }

  /** End leadership: abort the signal first, then tell listeners; then settle work, release, feed back. */
  private async depose(e: Extract<ElectorEffect, { type: 'depose' }>): Promise<void> {
    const l = this.leadership;
    if (!l || l.term !== e.term) return;
    this.leadership = null;
    l.controller.abort(new NotLeaderError(`leadership of ${this.group} term ${l.term} ended: ${e.reason}`));
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
    if (e.release) await this.release(l.term);
    if (e.after === 'wake') await this.dispatch({ type: 'wake' });
    else if (e.after === 'retired') await this.dispatch({ type: 'retired', term: l.term });
  }

  private async release(term: number): Promise<void> {
    try {
      await this.call('release', this.store.release(this.group, this.owner, term));
    } catch (err) {
      await this.dispatch({ type: 'release-failed', term, error: toError(err) });
      return;
    }
    await this.dispatch({ type: 'release-ok', term });
  }

  private startWork(l: Leadership, fn: LeaderWork): void {
    const context: LeaderContext = { signal: l.controller.signal, term: l.term, token: l.token };
    const p = (async () => {
      try {
        // The token flows with the work (timers, promises, jobs it starts): tenure/fencing's
        // helpers find it there, and refuse to write once the signal has aborted.
        await runFenced(context, () => fn(context));
      } catch (err) {
        if (l.controller.signal.aborted) return; // work stopping because leadership ended is expected
        this.emit('work-error', { term: l.term, error: err as Error });
        if (this.leadership === l) void this.dispatch({ type: 'work-failed', term: l.term });
      }
    })();
    l.work.add(p);
    void p.finally(() => l.work.delete(p));
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
