/**
 * One seeded run: the real LeaderElector on every node, the real MemoryStore behind a faulty
 * network, all on one VirtualClock. `runSeed(seed)` is a pure function of its arguments: same
 * seed, same trace, same verdict.
 */
import { SeededRandom, StaleTermError, StoreUnavailableError, VirtualClock, randomInt, sleep } from '../../src/core/index.js';
import type { FencingToken, StreamEntry } from '../../src/core/index.js';
import { LeaderElector } from '../../src/election/index.js';
import type { LeaderContext, LeaderWork } from '../../src/election/index.js';
import { MemoryStore } from '../../src/stores/memory/index.js';
import { History, check, describeAppend } from './checker.js';
import type { AppendOutcome, AppendRecord, Violation } from './checker.js';
import { ElectorRecorder } from './elector-events.js';
import { FaultSchedule, scheduleProcessFaults } from './faults.js';
import type { LiveProcess } from './faults.js';
import { FaultyStore, UnfencedStreams } from './faulty-store.js';
import type { StreamBackend } from './faulty-store.js';
import { NodeClock } from './node-clock.js';
import { makePlan } from './plan.js';
import type { SimPlan, Variant } from './plan.js';
import { Trace } from './trace.js';

export interface SimStats {
  readonly elections: number;
  readonly appendsOk: number;
  readonly appendsStale: number;
  readonly appendsAmbiguous: number;
  /** Appends a stalled leader sent after its deadline had passed; fencing must refuse them. */
  readonly lateSends: number;
  readonly traceEvents: number;
}

export interface SimResult {
  readonly seed: number;
  readonly plan: SimPlan;
  /** Sorted by the instant each became true. */
  readonly violations: readonly Violation[];
  readonly trace: Trace;
  readonly stats: SimStats;
}

interface Incarnation extends LiveProcess {
  readonly slot: string;
  readonly store: FaultyStore;
  readonly electors: LeaderElector[];
}

/** Let every promise chain started by the last timer settle before the next fires. */
const flush = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));

export interface SimOptions {
  /** A deliberately broken variant, to prove the checker fails (default `none`: the real system). */
  readonly variant?: Variant;
  /** The elector class to run (default the real LeaderElector); lets a test run an older or altered copy. */
  readonly Elector?: typeof LeaderElector;
}

export async function runSeed(seed: number, options: SimOptions = {}): Promise<SimResult> {
  const variant = options.variant ?? 'none';
  const Elector = options.Elector ?? LeaderElector;
  const plan = makePlan(seed, variant);
  const clock = new VirtualClock(0);
  const trace = new Trace(clock);
  const history = new History(clock);
  const memory = new MemoryStore({ clock, reportRejections: false });
  const streams: StreamBackend = variant === 'unfenced' ? new UnfencedStreams() : memory;
  // Chance during the run (delays, lost replies, work failures, clock offsets): its own stream, from the same seed.
  const random = new SeededRandom((seed ^ 0x2545f491) >>> 0);
  const faults = new FaultSchedule(plan, random, clock);
  const live = new Map<string, Incarnation>();
  const generation = new Map<string, number>();

  const appendOnce = (inc: Incarnation, token: FencingToken, stream: string, payload: string, timeoutMs: number, signal: AbortSignal, record: AppendRecord): Promise<AppendOutcome> =>
    new Promise((resolve) => {
      let settled = false;
      const finish = (outcome: AppendOutcome): void => {
        if (settled) return;
        settled = true;
        cancel();
        signal.removeEventListener('abort', onAbort);
        resolve(outcome);
      };
      const cancel = inc.clock.setTimer(timeoutMs, () => finish({ kind: 'ambiguous', why: `no answer in ${timeoutMs} ms` }));
      const onAbort = (): void => finish({ kind: 'ambiguous', why: 'leadership ended while waiting' });
      signal.addEventListener('abort', onAbort, { once: true });
      inc.store.appendFenced(token, stream, payload).then(
        (seq) => {
          if (settled) record.lateSeq = seq;
          finish({ kind: 'ok', seq });
        },
        (err: unknown) => {
          if (err instanceof StaleTermError) finish({ kind: 'stale' });
          else if (err instanceof StoreUnavailableError) finish({ kind: 'ambiguous', why: err.message });
          else finish({ kind: 'error', message: String(err) });
        },
      );
    });

  /** The leader work of the issue: append a fenced entry every few ms until the signal aborts. */
  const leaderWork = (inc: Incarnation, elector: LeaderElector, group: string): LeaderWork => {
    let n = 0; // across leaderships: one owner may lead the same term twice (re-acquired while still live)
    return async ({ signal, term, token }: LeaderContext) => {
      while (!signal.aborted) {
        if (faults.active && plan.workErrorChance > 0 && random.next() < plan.workErrorChance) {
          trace.add(inc.label, `${group}: leader work fails (simulated)`);
          throw new Error('simulated failure in leader work');
        }
        const record = history.beginAppend(elector, { node: inc.label, owner: elector.owner, group, term, payload: `${elector.owner}/${term}/${++n}` }, inc.clock.pauseCount);
        const outcome = await appendOnce(inc, token, record.stream, record.payload, elector.timing.requestTimeoutMs, signal, record);
        record.outcome = outcome;
        trace.add(inc.label, describeAppend(group, record.payload, outcome));
        try {
          await sleep(inc.clock, randomInt(random, plan.appendEveryMs[0], plan.appendEveryMs[1] + 1), signal);
        } catch {
          return; // leadership ended
        }
      }
    };
  };

  const startNode = (slot: string): void => {
    const gen = (generation.get(slot) ?? 0) + 1;
    generation.set(slot, gen);
    const label = gen === 1 ? slot : `${slot}#${gen}`;
    const nodeClock = new NodeClock(clock, {
      offsetMs: randomInt(random, 0, 1_000_000),
      rate: plan.clockRates[plan.nodes.indexOf(slot)] ?? 1,
    });
    const store = new FaultyStore({
      node: label,
      memory,
      streams,
      base: clock,
      clock: nodeClock,
      faults,
      trace,
      fakeAckStale: variant === 'fake-ack',
      onRelease: (name, owner, term) => history.releaseSent(owner, name, term),
      onAppendApplied: (payload) => history.appendApplied(payload),
    });
    const inc: Incarnation = { label, slot, clock: nodeClock, store, electors: [], pauseDepth: 0 };
    live.set(slot, inc);
    trace.add(label, `process starts (clock offset ${nodeClock.offsetMs} ms${nodeClock.rate !== 1 ? `, rate ${nodeClock.rate}` : ''})`);
    for (const group of plan.groups) {
      const elector = new Elector({
        ...plan.timingOptions,
        store,
        group,
        id: slot,
        clock: nodeClock,
        random: new SeededRandom(randomInt(random, 0, 0x7fffffff)),
      });
      const { ttlMs, marginMs } = elector.timing;
      const events = new ElectorRecorder(trace, history, elector, label, group, elector.owner, nodeClock);
      elector.on('elected', ({ term, deadlineInMs }) => events.elected(term, deadlineInMs));
      // Safety rule 2, from the node's own clock: the deadline is the send time + ttl - margin.
      elector.on('renewed', ({ term, latencyMs }) => events.renewed(term, latencyMs, nodeClock.now() - latencyMs + ttlMs - marginMs));
      elector.on('deposed', ({ term, reason, holder }) => events.deposed(term, reason, holder));
      elector.on('renew-failed', ({ term, error }) => events.renewFailed(term, error));
      elector.on('suspended', ({ term }) => events.suspended(term));
      elector.on('recovered', ({ term, suspendedMs }) => events.recovered(term, suspendedMs));
      elector.on('store-error', ({ operation, error }) => events.storeError(operation, error));
      elector.on('work-error', ({ term, error }) => events.workError(term, error));
      elector.on('leader-changed', ({ owner, term }) => events.leaderChanged(owner, term));
      inc.electors.push(elector);
      void elector.runWhileLeader(leaderWork(inc, elector, group));
    }
  };

  plan.nodes.forEach((slot, i) => clock.setTimer(plan.startAtMs[i]!, () => startNode(slot)));
  scheduleProcessFaults(plan, clock, trace, live, startNode);

  await clock.runUntil(plan.durationMs, flush);

  const stopAtMs = clock.now();
  trace.add('sim', 'stopping every node');
  let stopping = 0;
  for (const inc of live.values()) {
    for (const elector of inc.electors) {
      stopping++;
      elector.stop().then(
        () => stopping--,
        (err: unknown) => history.violate(`${inc.label} ${elector.group}: stop() failed: ${String(err)}`),
      );
    }
  }
  const stopBudgetMs = plan.timing.ttlMs + 2 * plan.timing.requestTimeoutMs + 100;
  await clock.runUntil(stopAtMs + stopBudgetMs, flush);
  if (stopping > 0) history.violate(`${stopping} electors did not finish stop() within ${stopBudgetMs} ms`);

  const read = new Map<string, StreamEntry[]>();
  for (const group of plan.groups) read.set(`stream-${group}`, await readAll(streams, `stream-${group}`));
  return result(seed, plan, trace, history, check({ plan, history, streams: read, stopAtMs }));
}

/** The run's verdict and counts, once it is over: `found` are the violations `check` found at the end. */
export function result(seed: number, plan: SimPlan, trace: Trace, history: History, found: readonly Violation[]): SimResult {
  const violations = [...history.violations, ...found].sort((a, b) => a.at - b.at);
  let appendsOk = 0;
  let appendsStale = 0;
  let appendsAmbiguous = 0;
  for (const a of history.appends) {
    if (a.outcome?.kind === 'ok') appendsOk++;
    else if (a.outcome?.kind === 'stale') appendsStale++;
    else if (a.outcome?.kind === 'ambiguous') appendsAmbiguous++;
  }
  return {
    seed,
    plan,
    violations,
    trace,
    stats: {
      elections: history.leaderships.length,
      appendsOk,
      appendsStale,
      appendsAmbiguous,
      lateSends: history.lateSends,
      traceEvents: trace.events.length,
    },
  };
}


async function readAll(streams: StreamBackend, stream: string): Promise<StreamEntry[]> {
  const out: StreamEntry[] = [];
  for (;;) {
    const page = await streams.readStream(stream, { after: out.length, limit: 10_000 });
    out.push(...page);
    if (page.length < 10_000) return out;
  }
}
