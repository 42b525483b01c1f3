/**
 * One seeded run of the pure elector machine (src/election/elector-machine.ts), stepped directly:
 * no LeaderElector, no promises. Each node runs one machine per group; this file is its shell,
 * performing the machine's effects the way LeaderElector does (store calls raced against the
 * request timeout, timers, leadership and its work, depose's release and feedback, stop's
 * abandoned calls) on one VirtualClock, through the shared faulty network (Wire) to a model
 * lease store built from the core's lease decisions (model-store.ts).
 *
 * Beyond the shell simulation's faults it loses requests, drifts clocks within the bound the
 * margin absorbs, fails lease calls with store data errors, makes listeners throw, and hands the
 * machine answers that come after their call timed out or was abandoned (they must change
 * nothing). On each `lead` and `renewed` it checks rule 2 from the shell's side (a won acquire or
 * renew whose send time bounds the deadline), and whenever a machine has nothing left to do that
 * shell and machine agree on leadership and timers, that the leader's term is above the retired
 * one, and that the loop waits on something that will wake it (a stalled machine is a failure,
 * as is a run whose events never let virtual time move on). The checker of the shell simulation
 * (checker.ts) judges the run as a whole: overlapping leaderships, terms, fencing, liveness.
 */
import { SeededRandom, StaleTermError, StoreDataError, StoreUnavailableError, VirtualClock, makeIncarnation, makeToken, nodeIdOf, randomInt } from '../../src/core/index.js';
import type { AcquireResult, Random, RenewResult, Timing } from '../../src/core/index.js';
import { initialState, step } from '../../src/election/elector-machine.js';
import type { ElectorConfig, ElectorEffect, ElectorEvent, ElectorState } from '../../src/election/elector-machine.js';
import { ElectorTimers } from '../../src/election/elector-timers.js';
import { History, check, describeAppend } from './checker.js';
import type { AppendOutcome } from './checker.js';
import { ElectorRecorder } from './elector-events.js';
import { FaultSchedule, scheduleProcessFaults } from './faults.js';
import type { LiveProcess } from './faults.js';
import { Wire, describeAcquire, describeRenew } from './faulty-store.js';
import type { Outcome, StoreOp } from './faulty-store.js';
import { ModelStore } from './model-store.js';
import { NodeClock } from './node-clock.js';
import { makePlan } from './plan.js';
import type { SimPlan, Variant } from './plan.js';
import { result } from './simulation.js';
import type { SimResult } from './simulation.js';
import { Trace } from './trace.js';

export interface MachineSimOptions {
  /** A deliberately broken variant, to prove the checker fails (default `none`: the real system). */
  readonly variant?: Variant;
  /** The machine's step (default the real one); lets a test run a broken copy. */
  readonly step?: typeof step;
}

/** A run whose timers exceed this many, or which fires this many at one instant, has stalled. */
const MAX_TIMERS = 5_000_000;
const MAX_AT_ONE_INSTANT = 100_000;

/** What every machine of one run shares. */
interface World {
  readonly plan: SimPlan;
  readonly timing: Timing;
  readonly clock: VirtualClock;
  readonly trace: Trace;
  readonly history: History;
  readonly store: ModelStore;
  readonly random: Random;
  readonly faults: FaultSchedule;
  readonly step: typeof step;
}

interface Process extends LiveProcess {
  readonly wire: Wire;
  readonly machines: Machine[];
}

export function runMachineSeed(seed: number, options: MachineSimOptions = {}): SimResult {
  const variant = options.variant ?? 'none';
  const plan = makePlan(seed, variant, 'machine');
  const clock = new VirtualClock(0);
  const trace = new Trace(clock);
  const history = new History(clock);
  // Chance during the run (delays, losses, work failures, clock offsets): its own stream, from the same seed.
  const random = new SeededRandom((seed ^ 0x2545f491) >>> 0);
  const faults = new FaultSchedule(plan, random, clock);
  const world: World = { plan, timing: plan.timing, clock, trace, history, store: new ModelStore(clock, variant), random, faults, step: options.step ?? step };
  const live = new Map<string, Process>();
  const generation = new Map<string, number>();

  const startNode = (slot: string): void => {
    const gen = (generation.get(slot) ?? 0) + 1;
    generation.set(slot, gen);
    const label = gen === 1 ? slot : `${slot}#${gen}`;
    const nodeClock = new NodeClock(clock, { offsetMs: randomInt(random, 0, 1_000_000), rate: plan.clockRates[plan.nodes.indexOf(slot)] ?? 1 });
    const wire = new Wire({ node: label, base: clock, clock: nodeClock, faults, trace });
    const p: Process = { label, clock: nodeClock, wire, machines: [], pauseDepth: 0 };
    live.set(slot, p);
    trace.add(label, `process starts (clock offset ${nodeClock.offsetMs} ms${nodeClock.rate !== 1 ? `, rate ${nodeClock.rate}` : ''})`);
    for (const group of plan.groups) {
      const m = new Machine(world, p, slot, group, new SeededRandom(randomInt(random, 0, 0x7fffffff)));
      p.machines.push(m);
      m.start();
    }
  };
  plan.nodes.forEach((slot, i) => clock.setTimer(plan.startAtMs[i]!, () => startNode(slot)));
  scheduleProcessFaults(plan, clock, trace, live, startNode);

  let fired = 0;
  let instant = -1;
  let atInstant = 0;
  const guard = (): boolean => {
    atInstant = clock.now() === instant ? atInstant + 1 : 0;
    instant = clock.now();
    if (++fired <= MAX_TIMERS && atInstant < MAX_AT_ONE_INSTANT) return true;
    history.violate(`stalled: ${fired} events, the last ${atInstant} of them at one instant; virtual time no longer moves on`);
    return false;
  };

  let stopAtMs = plan.durationMs;
  if (clock.runUntilSync(plan.durationMs, guard)) {
    stopAtMs = clock.now();
    trace.add('sim', 'stopping every node');
    const machines = [...live.values()].flatMap((p) => p.machines);
    for (const m of machines) m.stop();
    const stopBudgetMs = plan.timing.ttlMs + 2 * plan.timing.requestTimeoutMs + 100;
    if (clock.runUntilSync(stopAtMs + stopBudgetMs, guard)) {
      const stuck = machines.filter((m) => !m.stopped).length;
      if (stuck > 0) history.violate(`${stuck} machines did not finish stopping within ${stopBudgetMs} ms`);
    }
  }
  return result(seed, plan, trace, history, check({ plan, history, streams: world.store.streams, stopAtMs }));
}

/** A store call the machine waits for: answered, timed out, or abandoned by stop. */
interface PendingCall {
  readonly op: 'acquire' | 'renew';
  readonly cancelTimeout: () => void;
}

/** The shell's side of one leadership: what a signal and running work are in LeaderElector. */
interface Leadership {
  readonly term: number;
  aborted: boolean;
  /** Ends what the work is doing now (waits for an append, or sleeps) when leadership ends. */
  interrupt: (() => void) | null;
}

/** One elector: the machine's state, and the shell that performs its effects. */
class Machine {
  private state: ElectorState = initialState();
  private readonly config: ElectorConfig;
  private readonly random: Random;
  private readonly events: ElectorRecorder;
  private readonly timers: ElectorTimers;
  private readonly calls = new Map<number, PendingCall>();
  /** Local send time of every acquire and renew, by id. */
  private readonly sentAt = new Map<number, number>();
  private readonly abandoned = new Set<number>();
  private leadership: Leadership | null = null;
  /** Depose effects whose settle, release and feedback are still under way. */
  private chains = 0;
  private loopEnded = false;
  private readonly queue: ElectorEvent[] = [];
  private dispatching = false;
  /** Rule 2 for the leadership held: send time + ttl − margin of the call that won or renewed it. */
  private bound = -Infinity;
  private appends = 0;
  private readonly reported = new Set<string>();

  constructor(
    private readonly w: World,
    private readonly p: Process,
    slot: string,
    readonly group: string,
    random: Random,
  ) {
    const owner = makeIncarnation(slot, random);
    // Hand-over hints on, as LeaderElector's default: a release pushed during a hold-back makes the
    // machine read the hint (see 'read-hint' below).
    this.config = { owner, timing: w.timing, random, transfers: true };
    this.random = random;
    this.events = new ElectorRecorder(w.trace, w.history, this, p.label, group, owner, p.clock);
    this.timers = new ElectorTimers(p.clock, (event) => this.dispatch(event));
  }

  get stopped(): boolean {
    return this.loopEnded && this.chains === 0;
  }

  start(): void {
    this.w.store.watch(this.group, (lease) => this.p.wire.push(this.group, lease, (pushed) => this.dispatch({ type: 'push', lease: pushed })));
    this.dispatch({ type: 'start' });
  }

  /** As LeaderElector.stop(): the machine hears `stop`, then the failure of every call it was waiting for. */
  stop(): void {
    this.dispatch({ type: 'stop' });
    for (const [id, call] of this.calls) {
      call.cancelTimeout();
      this.calls.delete(id);
      this.answer(id, call.op, { ok: false, error: new StoreUnavailableError(`${call.op} of ${this.group} abandoned: elector stopped`) });
    }
  }

  private get owner(): string {
    return this.config.owner;
  }

  private now(): number {
    return this.p.clock.now();
  }

  // ---- stepping ---------------------------------------------------------------------------

  /** Events raised while effects are performed (an answer at zero latency) queue, as in LeaderElector. */
  private dispatch(event: ElectorEvent): void {
    this.queue.push(event);
    if (this.dispatching) return;
    this.dispatching = true;
    try {
      for (let e = this.queue.shift(); e; e = this.queue.shift()) {
        const { state, effects } = this.w.step(this.config, this.state, e, this.now());
        this.state = state;
        for (const effect of effects) this.perform(effect, e);
      }
    } finally {
      this.dispatching = false;
    }
    this.checkQuiet();
  }

  private perform(e: ElectorEffect, cause: ElectorEvent): void {
    const t = this.w.timing;
    switch (e.type) {
      case 'send-acquire':
        return this.send(e.id, 'acquire', `acquire ${this.group}`, () => this.w.store.acquire(this.group, this.owner, t.ttlMs), describeAcquire);
      case 'send-renew':
        return this.send(e.id, 'renew', `renew ${this.group} term ${e.term}`, () => this.w.store.renew(this.group, this.owner, e.term, t.ttlMs), describeRenew);
      case 'abandon-acquire':
        this.abandoned.add(e.id);
        return;
      case 'release':
        this.release(e.term, () => {});
        return;
      case 'read-hint':
        return this.readHint(e.id);
      case 'set-timer':
      case 'cancel-timer':
        return this.timers.perform(e);
      case 'lead': {
        // Rule 2, checked from what this shell saw: a won acquire, sent at a known instant.
        const won = cause.type === 'acquire-ok' && cause.acquired && cause.lease.owner === this.owner && cause.lease.term === e.term;
        if (!won) this.violate(`led term ${e.term} on ${cause.type}, not on an acquire of that term won by ${this.owner}`);
        this.bound = won ? (this.sentAt.get(cause.id) ?? -Infinity) + t.ttlMs - t.marginMs : -Infinity;
        if (e.deadline > this.bound) this.violate(`led term ${e.term} until ${e.deadline}, past send time + ttl − margin = ${this.bound} (rule 2)`);
        const l: Leadership = { term: e.term, aborted: false, interrupt: null };
        this.leadership = l;
        this.events.elected(e.term, e.deadlineInMs);
        this.work(l);
        return;
      }
      case 'renewed': {
        const ok = cause.type === 'renew-ok' && cause.renewed;
        this.bound = ok ? (this.sentAt.get(cause.id) ?? -Infinity) + t.ttlMs - t.marginMs : -Infinity;
        const deadline = this.state.leader?.deadline ?? -Infinity;
        if (!ok || deadline > this.bound) this.violate(`renewed term ${e.term} until ${deadline} on ${cause.type}, rule 2 allows ${this.bound}`);
        this.events.renewed(e.term, e.latencyMs, deadline);
        return;
      }
      case 'depose':
        return this.depose(e);
      case 'late':
        this.events.deposed(e.term, 'late', null);
        return;
      case 'settled':
        return;
      case 'loop-ended':
        this.loopEnded = true;
        return;
      case 'leader-changed': {
        this.events.leaderChanged(e.owner, e.term);
        const { plan, faults, random } = this.w;
        if (faults.active && plan.listenerFaultChance > 0 && random.next() < plan.listenerFaultChance) {
          // As LeaderElector does when performing an effect throws: a fault, fed back after the step.
          this.events.add('a leader-changed listener throws (simulated)');
          this.dispatch({ type: 'fault', operation: 'listener', error: new Error('simulated: a listener threw') });
        }
        return;
      }
      case 'renew-failed':
        this.events.renewFailed(e.term, e.error);
        return;
      case 'suspended':
        this.events.suspended(e.term);
        return;
      case 'recovered':
        this.events.recovered(e.term, e.suspendedMs);
        return;
      case 'stalled':
      case 'unstalled':
        return; // the simulation's work reports no progress and sets no progressTimeoutMs
      case 'store-error':
        this.events.storeError(e.operation, e.error);
        return;
    }
  }

  /**
   * The hand-over hint's read, raced against the request timeout (no answer: none). The simulation
   * takes no hints, so the store's answer is drawn: half the time a hint naming this node (as a
   * transferTo to it would leave), which ends the machine's hold-back and lets it campaign at once.
   */
  private readHint(id: number): void {
    let done = false;
    const finish = (to: string | null): void => {
      if (done) return;
      done = true;
      cancel();
      this.dispatch({ type: 'hint', id, to });
    };
    const cancel = this.p.clock.setTimer(this.w.timing.requestTimeoutMs, () => finish(null));
    const named = this.random.next() < 0.5 ? nodeIdOf(this.owner) : null;
    this.p.wire.call<string | null>(
      'read',
      `read hint of ${this.group}`,
      (settle) => settle(attempt(() => this.storeFault('read') ?? named)),
      (to) => (to === null ? 'no hint' : `hint names ${to}`),
      (outcome) => finish(outcome.ok ? outcome.value : null),
    );
  }

  /** An acquire or renew, raced against the request timeout; its answer is fed back even when late. */
  private send<T extends AcquireResult | RenewResult>(id: number, op: 'acquire' | 'renew', what: string, apply: () => T, describe: (answer: T) => string): void {
    const t = this.w.timing;
    this.sentAt.set(id, this.now());
    const cancelTimeout = this.p.clock.setTimer(t.requestTimeoutMs, () => {
      if (!this.calls.delete(id)) return;
      this.answer(id, op, { ok: false, error: new StoreUnavailableError(`sim store: no answer to ${op} of ${this.group} within ${t.requestTimeoutMs} ms`) });
    });
    this.calls.set(id, { op, cancelTimeout });
    this.p.wire.call(op, what, (settle) => settle(attempt(() => this.storeFault(op) ?? apply())), describe, (outcome) => {
      const pending = this.calls.get(id);
      if (pending) {
        pending.cancelTimeout();
        this.calls.delete(id);
      } else {
        this.events.add(`late answer to ${op} #${id} (the call had ended): fed to the machine, which must ignore it`);
        if (this.abandoned.delete(id) && outcome.ok && 'acquired' in outcome.value && outcome.value.acquired) {
          this.release(outcome.value.lease.term, () => {}); // stop abandoned a win: give it back
        }
      }
      this.answer(id, op, outcome);
    });
  }

  private answer(id: number, op: 'acquire' | 'renew', outcome: Outcome<AcquireResult | RenewResult>): void {
    if (!outcome.ok) {
      const unavailable = outcome.error instanceof StoreUnavailableError;
      this.dispatch(op === 'acquire' ? { type: 'acquire-failed', id, error: outcome.error, unavailable } : { type: 'renew-failed', id, error: outcome.error, unavailable });
      return;
    }
    const v = outcome.value;
    if ('acquired' in v) this.dispatch({ type: 'acquire-ok', id, acquired: v.acquired, lease: v.lease });
    else if ('renewed' in v) this.dispatch({ type: 'renew-ok', id, renewed: v.renewed, lease: v.lease });
  }

  /** As LeaderElector's depose: end the leadership (work interrupted), settle, release, feed back. */
  private depose(e: Extract<ElectorEffect, { type: 'depose' }>): void {
    const l = this.leadership;
    if (!l || l.term !== e.term) return; // as LeaderElector: nothing to end, nothing follows
    this.leadership = null;
    l.aborted = true;
    l.interrupt?.();
    this.events.deposed(e.term, e.reason, e.holder);
    // The work settles at once: interrupted above (an append in flight is then ambiguous).
    this.chains++;
    const then = (): void => {
      this.chains--;
      if (e.after === 'wake') this.dispatch({ type: 'wake' });
      else if (e.after === 'retired') this.dispatch({ type: 'retired', term: e.term });
    };
    if (e.release) this.release(e.term, then, e.deadline);
    else then();
  }

  /**
   * A release, raced against the request timeout, or as LeaderElector for a depose's release, the
   * leadership's deadline when later (stop does not abandon it); then `then`.
   */
  private release(term: number, then: () => void, deadline?: number): void {
    const t = this.w.timing;
    const timeoutMs = deadline === undefined ? t.requestTimeoutMs : Math.max(t.requestTimeoutMs, deadline - this.p.clock.now());
    this.w.history.releaseSent(this.owner, this.group, term);
    let done = false;
    const finish = (event: ElectorEvent): void => {
      if (done) return;
      done = true;
      cancel();
      this.dispatch(event);
      then();
    };
    const cancel = this.p.clock.setTimer(timeoutMs, () =>
      finish({ type: 'release-failed', term, error: new StoreUnavailableError(`sim store: no answer to release of ${this.group} within ${Math.round(timeoutMs)} ms`) }),
    );
    this.p.wire.call('release', `release ${this.group} term ${term}`, (settle) => settle(attempt(() => this.storeFault('release') ?? this.w.store.release(this.group, this.owner, term))), (r) => (r ? 'released' : 'not held'), (outcome) =>
      finish(outcome.ok ? { type: 'release-ok', term } : { type: 'release-failed', term, error: outcome.error }),
    );
  }

  /** Now and then, while faults last, the store fails a lease call with an error that is not "maybe" (nothing applied). */
  private storeFault(op: StoreOp): undefined {
    const { plan, faults, random } = this.w;
    if (faults.active && plan.storeErrorChance > 0 && random.next() < plan.storeErrorChance) {
      throw new StoreDataError(`sim: ${op} of ${this.group} met a row it cannot read (simulated)`);
    }
    return undefined;
  }

  // ---- leader work: a fenced append every few ms while leading ------------------------------

  private work(l: Leadership): void {
    const { plan, random, faults, history, store } = this.w;
    if (l.aborted) return;
    if (faults.active && plan.workErrorChance > 0 && random.next() < plan.workErrorChance) {
      this.events.add('leader work fails (simulated)');
      this.events.workError(l.term, new Error('simulated failure in leader work'));
      if (this.leadership === l) this.dispatch({ type: 'work-failed', term: l.term });
      return;
    }
    const record = history.beginAppend(this, { node: this.p.label, owner: this.owner, group: this.group, term: l.term, payload: `${this.owner}/${l.term}/${++this.appends}` }, this.p.clock.pauseCount);
    let settled = false;
    const finish = (outcome: AppendOutcome): void => {
      if (settled) return;
      settled = true;
      cancel();
      l.interrupt = null;
      record.outcome = outcome;
      this.w.trace.add(this.p.label, describeAppend(this.group, record.payload, outcome));
      if (l.aborted) return;
      const cancelSleep = this.p.clock.setTimer(randomInt(random, plan.appendEveryMs[0], plan.appendEveryMs[1] + 1), () => {
        l.interrupt = null;
        this.work(l);
      });
      l.interrupt = cancelSleep;
    };
    const timeoutMs = this.w.timing.requestTimeoutMs;
    const cancel = this.p.clock.setTimer(timeoutMs, () => finish({ kind: 'ambiguous', why: `no answer in ${timeoutMs} ms` }));
    l.interrupt = () => finish({ kind: 'ambiguous', why: 'leadership ended while waiting' });
    const apply = (): number => {
      try {
        return store.appendFenced(makeToken(this.group, l.term), record.stream, record.payload);
      } finally {
        history.appendApplied(record.payload);
      }
    };
    this.p.wire.call<number>('append', `append ${record.stream} ${record.payload} term ${l.term}`, (settle) => settle(attempt(apply)), (seq) => `seq ${seq}`, (outcome) => {
      if (outcome.ok) {
        if (settled) record.lateSeq = outcome.value;
        finish({ kind: 'ok', seq: outcome.value });
      } else if (outcome.error instanceof StaleTermError) {
        finish({ kind: 'stale' });
        // As LeaderElector hears a refusal of its leadership's token: step down at once.
        if (this.leadership?.term === l.term) this.dispatch({ type: 'fenced', term: l.term });
      } else if (outcome.error instanceof StoreUnavailableError) finish({ kind: 'ambiguous', why: outcome.error.message });
      else finish({ kind: 'error', message: String(outcome.error) });
    });
  }

  // ---- what must hold whenever the machine has nothing left to do ---------------------------

  private checkQuiet(): void {
    if (this.p.clock.isCrashed) return;
    const s = this.state;
    const l = s.leader;
    const loop = s.loop;
    if ((l === null) !== (this.leadership === null)) this.violate(`machine ${l ? `leads term ${l.term}` : 'leads nothing'} but the shell ${this.leadership ? `leads term ${this.leadership.term}` : 'leads nothing'}`);
    if (l) {
      if (l.term <= s.retiredTerm) this.violate(`leads term ${l.term}, not above its retired term ${s.retiredTerm}`);
      if (s.timers.deadline === null) this.violate(`leads term ${l.term} with no deadline timer`);
      if (l.deadline > this.bound) this.violate(`leads term ${l.term} until ${l.deadline}, past ${this.bound} (rule 2)`);
    }
    for (const timer of ['loop', 'deadline'] as const) {
      if ((s.timers[timer] !== null) !== this.timers.isSet(timer)) this.violate(`the machine's ${timer} timer is ${s.timers[timer] ?? 'unset'} but the shell's is ${this.timers.isSet(timer) ? 'set' : 'unset'}`);
    }
    if (loop.kind === 'ended' && !s.stopping) this.violate('the loop ended without stop');
    // Stalled: the loop waits for something that will never come.
    const waits =
      loop.kind === 'pause'
        ? s.timers.loop === loop.timer
        : loop.kind === 'acquire' || loop.kind === 'renew'
          ? this.calls.has(loop.id)
          : loop.kind === 'retire'
            ? this.chains > 0
            : true;
    if (!waits) this.violate(`stalled: the loop waits in ${loop.kind} with nothing to wake it`);
  }

  private violate(message: string): void {
    if (this.reported.has(message)) return;
    this.reported.add(message);
    this.w.history.violate(`${this.p.label} ${this.group}: ${message}`);
  }
}

function attempt<T>(fn: () => T): Outcome<T> {
  try {
    return { ok: true, value: fn() };
  } catch (err) {
    return { ok: false, error: err as Error };
  }
}
