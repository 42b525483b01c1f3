/**
 * The elector's decisions as a pure state machine: `step(state, event, now) -> { state, effects }`.
 *
 * No I/O, no timers, no clock, no globals: the shell (LeaderElector) performs the effects (store
 * calls, timers, the leader's signal, events) and feeds back what happened as events. Randomness
 * is injected in the config, as in the Raft core. The machine mirrors one campaign loop that does
 * one thing at a time (`loop`): pause, acquire, renew, or wait for a fault's retirement.
 *
 * Timing contract (safety rules 2, 3, 6, 7 in DESIGN.md):
 *  - Leadership from an acquire or renew sent at S ends at S + ttl - margin (`deadline` timer),
 *    whatever the store answers later; a reply for a loop step no longer current is ignored.
 *  - A timed-out or unreachable call is "maybe": never acted on as a win.
 *  - Release carries the term it releases; a term given up (resign, stop, fault) is never led again.
 *  - Ending leadership is one `depose` effect: the shell aborts the signal before anything else.
 *
 * Health (issue 25): a leader whose renew failed as "maybe" (unreachable, timed out) is
 * `suspended` until a renew succeeds (`recovered`, same term) or its deadline passes (`depose`
 * reason `deadline`: lost). Suspension never moves the deadline. With `progressTimeoutMs`, a
 * leader whose work reported no `progress` for that long is `stalled` (and, with
 * `stepDownOnStall`, resigns with reason `stalled`) until it reports progress again.
 */
import { candidateDelay, leaderDeadline, nodeIdOf } from '../core/index.js';
import type { Lease, LeaseMeta, Random, Timing } from '../core/index.js';

export interface ElectorConfig {
  readonly owner: string;
  readonly timing: Timing;
  readonly random: Random;
  /** Leader work with no `progress` event for this long is stalled, ms; 0 or absent: never. */
  readonly progressTimeoutMs?: number;
  /** A stalled leader resigns (reason `stalled`). Default false: stalled is only reported. */
  readonly stepDownOnStall?: boolean;
  /**
   * Hand-over hints are in use (LeaderElector.transferTo): a release pushed while this node holds
   * back (after a resign, or for a hand-over to another node) is checked against the hint
   * (`read-hint`), so a hand-over naming this node is not kept waiting. Default false.
   */
  readonly transfers?: boolean;
}

/** Why leadership ended. */
export type DeposedReason =
  | 'deadline' // the local deadline passed without a successful renew (store slow or unreachable)
  | 'lost' // the store refused the renew: the lease expired or another owner holds it
  | 'stopped' // stop() was called
  | 'resigned' // resign() was called, or the leader work failed
  | 'late' // the acquire reply came after its own deadline had already passed
  | 'fenced' // a fenced write with this leadership's token was refused as stale: a newer term exists
  | 'stalled' // the leader work reported no progress for progressTimeoutMs and stepDownOnStall is set
  | 'error'; // an unexpected error in the store or the elector (reported as `store-error`)

export type TimerName = 'loop' | 'deadline' | 'progress';

/** What the campaign loop is doing now. */
export type LoopState =
  | { readonly kind: 'idle' } // not started
  | { readonly kind: 'pause'; readonly timer: number }
  | { readonly kind: 'acquire'; readonly id: number; readonly sentAt: number; readonly pushed: boolean }
  | { readonly kind: 'renew'; readonly id: number; readonly sentAt: number; readonly term: number }
  | { readonly kind: 'retire'; readonly term: number; readonly backoffMs: number } // a fault's depose + release under way
  | { readonly kind: 'ended' };

export interface LeaderState {
  readonly term: number;
  /** Local instant at which leadership ends unless renewed. */
  readonly deadline: number;
  /**
   * When the first of the renews failing as "maybe" since the last success failed (local time),
   * or null: the leader is suspended (still leader until `deadline`; retries every retryMs).
   */
  readonly suspendedAt: number | null;
  /** When the leader work last reported progress (or leadership began), local time. */
  readonly progressAt: number;
  /** No progress for progressTimeoutMs: reported once, cleared by the next progress. */
  readonly stalled: boolean;
}

export interface ElectorState {
  readonly stopping: boolean;
  readonly loop: LoopState;
  readonly leader: LeaderState | null;
  readonly known: { readonly owner: string | null; readonly term: number };
  /** The highest term this incarnation gave up: never led again. */
  readonly retiredTerm: number;
  /** No campaign before this instant (after a resign, or while a hand-over to another node is under way). */
  readonly resignUntil: number;
  /** The id of the `read-hint` in flight, or null. */
  readonly hintRead: number | null;
  readonly lastRenewAt: number | null;
  /** Consecutive faults; 0 after any store call answers normally. */
  readonly faults: number;
  /** The message of the last fault reported in the current run of faults. */
  readonly lastFault: string | null;
  /** Ids of calls and timers; a reply or a timer with an older id is stale. */
  readonly nextId: number;
  readonly timers: { readonly loop: number | null; readonly deadline: number | null; readonly progress: number | null };
}

/** A store call's failure: `unavailable` (slow, unreachable, timed out) is "maybe"; anything else is a fault. */
export interface CallError {
  readonly error: Error;
  readonly unavailable: boolean;
}

export type ElectorEvent =
  | { readonly type: 'start' }
  | { readonly type: 'stop' }
  | { readonly type: 'resign' }
  | { readonly type: 'work-failed'; readonly term: number }
  /** A fenced write carrying this term's token was refused as stale (on any path): step down at once. */
  | { readonly type: 'fenced'; readonly term: number }
  | { readonly type: 'wake' }
  /**
   * The leader work of `term` made progress (LeaderContext.progress()), at local time `at` (default:
   * the event's time; never later). The shell may report only the latest progress, just before the
   * progress timer fires, so that work reporting in a hot loop costs a field write per report.
   */
  | { readonly type: 'progress'; readonly term: number; readonly at?: number }
  | { readonly type: 'push'; readonly lease: Lease | null }
  | { readonly type: 'timer'; readonly timer: TimerName; readonly id: number }
  /**
   * An acquire's answer. `holdBackMs` > 0 (with `acquired`): a hand-over to another node is under
   * way (a live `GROUP/transfer-to` hint names someone else, see LeaderElector.transferTo), so this
   * win is not led: the term is given up (released) and no campaign starts for that long.
   */
  | { readonly type: 'acquire-ok'; readonly id: number; readonly acquired: boolean; readonly lease: Lease; readonly holdBackMs?: number }
  /** A `read-hint`'s answer: the node id (or incarnation) the live hand-over hint names, or null (none, or the read failed). */
  | { readonly type: 'hint'; readonly id: number; readonly to: string | null }
  | ({ readonly type: 'acquire-failed'; readonly id: number } & CallError)
  | { readonly type: 'renew-ok'; readonly id: number; readonly renewed: boolean; readonly lease: Lease | null }
  | ({ readonly type: 'renew-failed'; readonly id: number } & CallError)
  | { readonly type: 'release-ok'; readonly term: number }
  | { readonly type: 'release-failed'; readonly term: number; readonly error: Error }
  /** A fault's depose (work settled, lease released) is done. */
  | { readonly type: 'retired'; readonly term: number }
  /** An unexpected error in the shell (a throwing listener, a bug): a fault like a store's. */
  | { readonly type: 'fault'; readonly operation: string; readonly error: Error };

export type ElectorEffect =
  | { readonly type: 'send-acquire'; readonly id: number }
  | { readonly type: 'send-renew'; readonly id: number; readonly term: number }
  /** Read the hand-over hint (GROUP/transfer-to) and answer with a `hint` event of this id. */
  | { readonly type: 'read-hint'; readonly id: number }
  /** stop() came with an acquire in flight: if it turns out a win, release it. */
  | { readonly type: 'abandon-acquire'; readonly id: number }
  /**
   * An acquire handed back a term this incarnation gave up (its release failed, was lost, or has
   * not landed yet): release it again rather than sit on it, so the group need not wait out the TTL.
   */
  | { readonly type: 'release'; readonly term: number }
  | { readonly type: 'set-timer'; readonly timer: TimerName; readonly id: number; readonly ms: number }
  | { readonly type: 'cancel-timer'; readonly timer: TimerName }
  /** Become leader: make the signal and token, start the work, emit `elected`. */
  | { readonly type: 'lead'; readonly term: number; readonly deadline: number; readonly deadlineInMs: number }
  /**
   * End leadership: abort the signal, emit `deposed`; then, when `settle`, wait for the work (never
   * past `deadline`); then release when `release`; then feed back `retired` or `wake` per `after`.
   */
  | {
      readonly type: 'depose';
      readonly term: number;
      readonly reason: DeposedReason;
      readonly holder: Lease | null;
      readonly deadline: number;
      readonly settle: boolean;
      readonly release: boolean;
      readonly after: 'none' | 'wake' | 'retired';
    }
  /** `deposed` without a leadership: an acquire won too late to be acted on. */
  | { readonly type: 'late'; readonly term: number }
  /** The acquire in flight has been answered and acted on (settled() resolves). */
  | { readonly type: 'settled' }
  | { readonly type: 'loop-ended' }
  | { readonly type: 'leader-changed'; readonly owner: string | null; readonly term: number; readonly meta: LeaseMeta }
  | { readonly type: 'renewed'; readonly term: number; readonly latencyMs: number }
  | { readonly type: 'renew-failed'; readonly term: number; readonly error: Error }
  /** A renew failed as "maybe": still leader until `deadline`, but suspended (work should not start what it cannot finish). */
  | { readonly type: 'suspended'; readonly term: number; readonly deadline: number; readonly error: Error }
  /** A renew succeeded again before the deadline: same term, no longer suspended. */
  | { readonly type: 'recovered'; readonly term: number; readonly suspendedMs: number }
  /** The leader work reported no progress for `sinceProgressMs` (>= progressTimeoutMs). */
  | { readonly type: 'stalled'; readonly term: number; readonly sinceProgressMs: number }
  /** A stalled leader's work reported progress again. */
  | { readonly type: 'unstalled'; readonly term: number; readonly stalledMs: number }
  | { readonly type: 'store-error'; readonly operation: string; readonly error: Error };

export interface StepResult {
  readonly state: ElectorState;
  readonly effects: ElectorEffect[];
}

export function initialState(): ElectorState {
  return {
    stopping: false,
    loop: { kind: 'idle' },
    leader: null,
    known: { owner: null, term: 0 },
    retiredTerm: 0,
    resignUntil: 0,
    hintRead: null,
    lastRenewAt: null,
    faults: 0,
    lastFault: null,
    nextId: 1,
    timers: { loop: null, deadline: null, progress: null },
  };
}

type Mutable<T> = { -readonly [K in keyof T]: T[K] };
type MutableState = Omit<Mutable<ElectorState>, 'timers'> & { timers: Mutable<ElectorState['timers']> };

/** One step of the machine. `now` is the local monotonic time of the event. */
export function step(config: ElectorConfig, state: ElectorState, event: ElectorEvent, now: number): StepResult {
  const s = new Step(config, state, now);
  s.handle(event);
  return { state: s.state, effects: s.effects };
}

class Step {
  readonly effects: ElectorEffect[] = [];
  readonly state: MutableState;

  constructor(
    private readonly config: ElectorConfig,
    state: ElectorState,
    private readonly now: number,
  ) {
    this.state = { ...state, timers: { ...state.timers } };
  }

  private get timing(): Timing {
    return this.config.timing;
  }

  handle(e: ElectorEvent): void {
    const s = this.state;
    // Leadership ends at its deadline (rule 2), whether or not the deadline timer has fired: a
    // process resumed from a pause handles whatever comes first (a renew answer, a stale
    // refusal of its own write, a push) as an event after the deadline, not as a leader.
    if (s.leader && this.now >= s.leader.deadline && !(e.type === 'timer' && e.timer === 'deadline')) this.onDeadline();
    switch (e.type) {
      case 'start':
        if (s.loop.kind !== 'idle' || s.stopping) return;
        this.turn();
        return;
      case 'stop':
        this.onStop();
        return;
      case 'resign':
        this.resign();
        return;
      case 'work-failed':
        if (s.leader && s.leader.term === e.term) this.resign();
        return;
      case 'fenced':
        if (s.leader && s.leader.term === e.term) this.resign('fenced');
        return;
      case 'wake':
        this.wake();
        return;
      case 'progress':
        if (s.leader && s.leader.term === e.term) this.onProgress(s.leader, Math.min(e.at ?? this.now, this.now));
        return;
      case 'push':
        this.onPush(e.lease);
        return;
      case 'hint':
        if (s.hintRead !== e.id) return;
        s.hintRead = null;
        this.onHint(e.to);
        return;
      case 'timer':
        if (s.timers[e.timer] !== e.id) return; // cancelled or replaced
        s.timers[e.timer] = null;
        if (e.timer === 'deadline') this.onDeadline();
        else if (e.timer === 'progress') this.onProgressTimer();
        else if (s.loop.kind === 'pause' && s.loop.timer === e.id) this.afterPause();
        return;
      case 'acquire-ok':
      case 'acquire-failed':
        if (s.loop.kind !== 'acquire' || s.loop.id !== e.id) return; // stale (stop abandoned it)
        if (e.type === 'acquire-ok') this.onAcquired(s.loop, e.acquired, e.lease, e.holdBackMs ?? 0);
        else this.onAcquireFailed(e);
        return;
      case 'renew-ok':
      case 'renew-failed':
        if (s.loop.kind !== 'renew' || s.loop.id !== e.id) return;
        this.onRenewAnswer(s.loop, e);
        return;
      case 'release-ok':
        this.observe(null);
        return;
      case 'release-failed':
        // The lease then simply expires at its TTL. A fault met again by its release was reported.
        if (e.error.message !== s.lastFault) this.effects.push({ type: 'store-error', operation: 'release', error: e.error });
        return;
      case 'retired':
        if (s.loop.kind !== 'retire' || s.loop.term !== e.term) return;
        this.pause(s.loop.backoffMs);
        return;
      case 'fault':
        if (s.loop.kind === 'idle' || s.loop.kind === 'ended') return;
        if (s.loop.kind === 'acquire') this.effects.push({ type: 'settled' }); // its answer will be ignored
        this.onFault(e.operation, e.error);
        return;
    }
  }

  // ---- the loop -----------------------------------------------------------------------

  /** The loop's next step: renew after a wait when leading, else campaign. */
  private turn(): void {
    const s = this.state;
    if (s.stopping) return this.endLoop();
    const l = s.leader;
    if (l) {
      // Renew on the interval, but early enough to leave one retry before the deadline. After a
      // failure, retry every retryMs (never a zero wait: a store failing at once must not spin).
      const untilDeadline = l.deadline - this.now;
      const wait = l.suspendedAt !== null ? this.timing.retryMs : Math.max(0, Math.min(this.timing.renewIntervalMs, untilDeadline - this.timing.retryMs));
      return this.pause(wait);
    }
    const waitResign = s.resignUntil - this.now;
    if (waitResign > 0) return this.pause(waitResign);
    s.hintRead = null; // a hint read still unanswered has nothing left to end (its answer is ignored)
    const id = this.id();
    s.loop = { kind: 'acquire', id, sentAt: this.now, pushed: false };
    this.effects.push({ type: 'send-acquire', id });
  }

  private afterPause(): void {
    const s = this.state;
    const l = s.leader;
    if (l && !s.stopping) {
      const id = this.id();
      s.loop = { kind: 'renew', id, sentAt: this.now, term: l.term };
      this.effects.push({ type: 'send-renew', id, term: l.term });
      return;
    }
    this.turn();
  }

  private pause(ms: number): void {
    const s = this.state;
    if (s.stopping) return this.endLoop();
    const id = this.setTimer('loop', ms);
    s.loop = { kind: 'pause', timer: id };
  }

  /** End the current pause early (push, deadline, resign's release). */
  private wake(): void {
    const s = this.state;
    if (s.loop.kind !== 'pause') return;
    this.cancelTimer('loop');
    this.afterPause();
  }

  private endLoop(): void {
    const s = this.state;
    if (s.loop.kind === 'ended') return;
    if (s.timers.loop !== null) this.cancelTimer('loop');
    s.loop = { kind: 'ended' };
    this.effects.push({ type: 'loop-ended' });
  }

  // ---- answers ------------------------------------------------------------------------

  private onAcquired(loop: Extract<LoopState, { kind: 'acquire' }>, acquired: boolean, lease: Lease, holdBackMs: number): void {
    const s = this.state;
    this.noFault();
    this.observe(lease);
    if (acquired && lease.term > s.retiredTerm && holdBackMs > 0) {
      // Won while a hand-over to another node is under way: never lead this term, give it back
      // (its release wakes the named node) and campaign no more until the hand-over's bound.
      s.retiredTerm = lease.term;
      s.resignUntil = Math.max(s.resignUntil, this.now + holdBackMs);
      this.effects.push({ type: 'release', term: lease.term }, { type: 'settled' });
      return this.turn();
    }
    if (acquired && lease.term > s.retiredTerm) {
      this.becomeLeader(lease.term, loop.sentAt);
      this.effects.push({ type: 'settled' });
      return this.turn();
    }
    this.effects.push({ type: 'settled' });
    // Only our retired term back: this acquire renewed a lease we will not lead (the loop would
    // keep renewing it so, and a clock running a little fast keeps it alive for good, the group
    // leaderless): release it; the release's push wakes the others.
    const retired = acquired && lease.term <= s.retiredTerm;
    if (retired) this.effects.push({ type: 'release', term: lease.term });
    // Not acquired, or our retired term: wait until it lapses (or a release lands), unless the
    // store pushed a release or a hand-over to us while the acquire was on its way.
    if (loop.pushed && !retired) return this.turn();
    this.pause(candidateDelay(lease.remainingMs, this.timing, this.config.random));
  }

  private onAcquireFailed(e: CallError): void {
    this.effects.push({ type: 'settled' });
    if (!e.unavailable) {
      // Not "maybe" (rule 3) but an answer that will not change by asking again at once.
      return this.onFault('acquire', e.error);
    }
    this.effects.push({ type: 'store-error', operation: 'acquire', error: e.error });
    this.pause(this.timing.retryMs);
  }

  private becomeLeader(term: number, sentAt: number): void {
    const s = this.state;
    const deadline = leaderDeadline(sentAt, this.timing);
    if (deadline <= this.now) {
      // The reply came after its own deadline: we may hold the lease, but must not act on it.
      this.effects.push({ type: 'late', term });
      return;
    }
    s.leader = { term, deadline, suspendedAt: null, progressAt: this.now, stalled: false };
    s.lastRenewAt = sentAt;
    this.setTimer('deadline', deadline - this.now);
    this.effects.push({ type: 'lead', term, deadline, deadlineInMs: deadline - this.now });
    const progressMs = this.config.progressTimeoutMs ?? 0;
    if (progressMs > 0) this.setTimer('progress', progressMs);
  }

  private onRenewAnswer(loop: Extract<LoopState, { kind: 'renew' }>, e: Extract<ElectorEvent, { type: 'renew-ok' | 'renew-failed' }>): void {
    const s = this.state;
    const l = s.leader;
    // Deposed meanwhile (also by a deadline that passed while the answer was on its way, ended by
    // handle() before this answer): a late reply changes nothing, neither renewed nor recovered.
    if (!l || l.term !== loop.term) return this.turn();
    if (e.type === 'renew-failed') {
      if (!e.unavailable) return this.onFault('renew', e.error); // not "maybe": no use renewing until the deadline
      this.effects.push({ type: 'renew-failed', term: l.term, error: e.error });
      if (l.suspendedAt === null) {
        // Suspended, not lost: the deadline stays where the last success put it (rule 2).
        s.leader = { ...l, suspendedAt: this.now };
        this.effects.push({ type: 'suspended', term: l.term, deadline: l.deadline, error: e.error });
      }
      return this.turn();
    }
    if (!e.renewed) {
      if (e.lease) this.observe(e.lease);
      this.depose('lost', e.lease, false, false, 'none');
      return this.turn();
    }
    const deadline = leaderDeadline(loop.sentAt, this.timing);
    // Invariant: a deadline only moves forward, because it is computed from a later send time.
    if (deadline < l.deadline) return this.onFault('loop', new Error(`deadline went back: ${deadline} < ${l.deadline}`));
    this.noFault();
    s.leader = { ...l, deadline, suspendedAt: null };
    this.setTimer('deadline', deadline - this.now);
    s.lastRenewAt = loop.sentAt;
    this.effects.push({ type: 'renewed', term: l.term, latencyMs: this.now - loop.sentAt });
    if (l.suspendedAt !== null) this.effects.push({ type: 'recovered', term: l.term, suspendedMs: this.now - l.suspendedAt });
    this.turn();
  }

  private onDeadline(): void {
    if (!this.state.leader) return;
    this.depose('deadline', null, false, false, 'none');
    this.wake();
  }

  // ---- progress -----------------------------------------------------------------------

  private onProgress(l: LeaderState, at: number): void {
    const s = this.state;
    if (at <= l.progressAt) return; // an older report: progress time only moves forward
    s.leader = { ...l, progressAt: at, stalled: false };
    if (!l.stalled) return; // the progress timer is still set and finds the new instant when it fires
    this.effects.push({ type: 'unstalled', term: l.term, stalledMs: at - l.progressAt - (this.config.progressTimeoutMs ?? 0) });
    this.setTimer('progress', this.config.progressTimeoutMs ?? 0);
  }

  /**
   * The progress timer is set once per timeout, not per progress report (work may report in a hot
   * loop): when it fires, progress since it was set moves it on; none makes the leader stalled.
   */
  private onProgressTimer(): void {
    const s = this.state;
    const l = s.leader;
    const timeout = this.config.progressTimeoutMs ?? 0;
    if (!l || l.stalled || timeout <= 0) return;
    const due = l.progressAt + timeout;
    if (due > this.now) {
      this.setTimer('progress', due - this.now);
      return;
    }
    s.leader = { ...l, stalled: true };
    this.effects.push({ type: 'stalled', term: l.term, sinceProgressMs: this.now - l.progressAt });
    if (this.config.stepDownOnStall) this.resign('stalled');
  }

  // ---- leaving ------------------------------------------------------------------------

  private resign(reason: 'resigned' | 'fenced' | 'stalled' = 'resigned'): void {
    const s = this.state;
    if (!s.leader) return;
    s.resignUntil = this.now + this.timing.renewIntervalMs;
    this.depose(reason, null, true, true, 'wake');
  }

  private onStop(): void {
    const s = this.state;
    if (s.stopping) return;
    s.stopping = true;
    if (s.leader) this.depose('stopped', null, true, true, 'none');
    switch (s.loop.kind) {
      case 'acquire':
        this.effects.push({ type: 'abandon-acquire', id: s.loop.id }, { type: 'settled' });
        return this.endLoop();
      case 'retire':
        return; // ends when the fault's release is done
      default:
        return this.endLoop();
    }
  }

  /**
   * A fault: end leadership as a resign does (signal aborted, work settled, lease released so
   * another node need not wait out the TTL), report it unless it repeats the last one, and back
   * off (retryMs doubling up to the TTL) before the loop tries again.
   */
  private onFault(operation: string, error: Error): void {
    const s = this.state;
    s.faults++;
    if (error.message !== s.lastFault) {
      s.lastFault = error.message;
      this.effects.push({ type: 'store-error', operation, error });
    }
    const backoffMs = Math.min(this.timing.retryMs * 2 ** Math.min(s.faults - 1, 30), Math.max(this.timing.ttlMs, this.timing.retryMs));
    const l = s.leader;
    if (l) {
      if (s.timers.loop !== null) this.cancelTimer('loop');
      s.loop = { kind: 'retire', term: l.term, backoffMs };
      this.depose('error', null, true, true, 'retired');
      return;
    }
    this.pause(backoffMs);
  }

  private depose(reason: DeposedReason, holder: Lease | null, settle: boolean, release: boolean, after: 'none' | 'wake' | 'retired'): void {
    const s = this.state;
    const l = s.leader;
    if (!l) return;
    s.leader = null;
    this.cancelTimer('deadline');
    this.cancelTimer('progress');
    if (release) s.retiredTerm = Math.max(s.retiredTerm, l.term);
    this.effects.push({ type: 'depose', term: l.term, reason, holder, deadline: l.deadline, settle, release, after });
  }

  // ---- small helpers ------------------------------------------------------------------

  private onPush(lease: Lease | null): void {
    const s = this.state;
    if (lease && lease.owner === this.config.owner) {
      // The store names this node holder without a win of ours (a release handed the lease
      // over): try now, an acquire of our own live lease confirms it.
      if (!s.leader) this.tryAgain();
      return;
    }
    this.observe(lease);
    if (!lease && !s.leader) {
      // Released while this node holds back: the release may be a hand-over naming this node
      // (transferTo), which the hold-back must not keep waiting. Read the hint (onHint).
      if (this.config.transfers && s.resignUntil > this.now && s.hintRead === null && !s.stopping) {
        const id = this.id();
        s.hintRead = id;
        this.effects.push({ type: 'read-hint', id });
      }
      this.tryAgain();
    }
  }

  /**
   * The hint read after a release pushed during a hold-back: one that names this node ends the
   * hold-back and campaigns at once (the leader asked for this node; a resign's wait is for
   * others to take over, and here this node is the one asked to). Any other answer: hold back on.
   */
  private onHint(to: string | null): void {
    const s = this.state;
    if (to === null || s.leader || s.stopping || s.resignUntil <= this.now) return;
    if (to !== this.config.owner && to !== nodeIdOf(this.config.owner)) return;
    s.resignUntil = this.now;
    this.tryAgain();
  }

  /** Campaign again at once: end the pause, or, with an acquire in flight, skip the next pause. */
  private tryAgain(): void {
    const s = this.state;
    if (s.loop.kind === 'acquire') s.loop = { ...s.loop, pushed: true };
    else this.wake();
  }

  private observe(lease: Lease | null): void {
    const s = this.state;
    const owner = lease?.owner ?? null;
    const term = lease?.term ?? s.known.term;
    if (owner === s.known.owner && term === s.known.term) return;
    s.known = { owner, term };
    this.effects.push({ type: 'leader-changed', owner, term, meta: lease?.meta ?? {} });
  }

  private noFault(): void {
    this.state.faults = 0;
    this.state.lastFault = null;
  }

  private id(): number {
    return this.state.nextId++;
  }

  private setTimer(timer: TimerName, ms: number): number {
    const id = this.id();
    this.state.timers[timer] = id;
    this.effects.push({ type: 'set-timer', timer, id, ms });
    return id;
  }

  private cancelTimer(timer: TimerName): void {
    if (this.state.timers[timer] === null) return;
    this.state.timers[timer] = null;
    this.effects.push({ type: 'cancel-timer', timer });
  }
}
