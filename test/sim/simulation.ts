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
import { History, check } from './checker.js';
import type { AppendOutcome, AppendRecord, Violation } from './checker.js';
import { FaultSchedule } from './faults.js';
import { FaultyStore, UnfencedStreams } from './faulty-store.js';
import type { StreamBackend } from './faulty-store.js';
import { NodeClock } from './node-clock.js';
import { makePlan } from './plan.js';
import type { SimPlan, Variant } from './plan.js';
import { Trace, formatTime } from './trace.js';

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

interface Incarnation {
  /** n2, or n2#2 for the node's second process after a crash. */
  readonly label: string;
  readonly slot: string;
  readonly clock: NodeClock;
  readonly store: FaultyStore;
  readonly electors: LeaderElector[];
  /** Pause windows currently open on this process (they may overlap). */
  pauseDepth: number;
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
  const memory = new MemoryStore({ clock });
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
    const stream = `stream-${group}`;
    let n = 0; // across leaderships: one owner may lead the same term twice (re-acquired while still live)
    return async ({ signal, term, token }: LeaderContext) => {
      while (!signal.aborted) {
        if (faults.active && plan.workErrorChance > 0 && random.next() < plan.workErrorChance) {
          trace.add(inc.label, `${group}: leader work fails (simulated)`);
          throw new Error('simulated failure in leader work');
        }
        const lead = history.current(elector);
        if (!lead || lead.term !== term) {
          history.violate(`${inc.label} ${group}: leader work of term ${term} writes while not leading it (rule 7)`);
        } else if (clock.now() >= lead.end) {
          // Only a stall can get here: the node's held timers fire on resume before its deadline timer does.
          history.lateSends++;
          if (inc.clock.pauseCount === lead.pauseMark && clock.now() > lead.timerAt) {
            history.violate(`${inc.label} ${group}: leader work writes after its deadline ${formatTime(lead.end)} without having stalled`);
          }
        }
        const payload = `${elector.owner}/${term}/${++n}`;
        const record: AppendRecord = { node: inc.label, owner: elector.owner, group, stream, term, payload, sentAt: clock.now(), appliedAt: null, outcome: null, lateSeq: null };
        history.beginAppend(record);
        const outcome = await appendOnce(inc, token, stream, payload, elector.timing.requestTimeoutMs, signal, record);
        record.outcome = outcome;
        trace.add(inc.label, `${group}: append ${payload} ${outcome.kind === 'ok' ? `ok seq ${outcome.seq}` : outcome.kind === 'ambiguous' ? `ambiguous (${outcome.why})` : outcome.kind}`);
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
      rate: variant === 'slow-clock' && slot === 'n1' ? 0.75 : 1,
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
      // Safety rule 2, from the node's own clock: the deadline is the send time + ttl - margin.
      const deadlineFromSend = (sentLocalMs: number): number => nodeClock.toVirtual(sentLocalMs + ttlMs - marginMs);
      elector.on('elected', ({ term, deadlineInMs }) => {
        trace.add(label, `${group}: ELECTED term ${term}, leads for ${deadlineInMs} ms (${elector.owner})`);
        history.elected(elector, label, elector.owner, group, term, nodeClock.toVirtual(nodeClock.now() + deadlineInMs), nodeClock.pauseCount);
      });
      elector.on('renewed', ({ term, latencyMs }) => {
        const deadline = deadlineFromSend(nodeClock.now() - latencyMs);
        trace.add(label, `${group}: renewed term ${term} (latency ${latencyMs} ms), leads until ${formatTime(deadline)}`);
        history.renewed(elector, label, term, deadline, nodeClock.pauseCount);
      });
      elector.on('deposed', ({ term, reason, holder }) => {
        trace.add(label, `${group}: DEPOSED from term ${term}: ${reason}${holder ? ` (holder ${holder.owner} term ${holder.term})` : ''}`);
        history.deposed(elector, label, term, reason, nodeClock.pauseCount);
        if (reason === 'resigned') history.resigned(label, elector.owner, group, term);
      });
      elector.on('renew-failed', ({ term, error }) => trace.add(label, `${group}: renew of term ${term} failed: ${error.message}`));
      elector.on('store-error', ({ operation, error }) => {
        trace.add(label, `${group}: store error in ${operation}: ${error.message}`);
        if (operation === 'loop') history.violate(`${label} ${group}: the elector's loop died: ${error.message}`);
      });
      elector.on('work-error', ({ term, error }) => trace.add(label, `${group}: work of term ${term} failed: ${error.message}`));
      elector.on('leader-changed', ({ owner, term }) => trace.add(label, `${group}: sees leader ${owner ?? 'none'} term ${term}`));
      inc.electors.push(elector);
      void elector.runWhileLeader(leaderWork(inc, elector, group));
    }
  };

  plan.nodes.forEach((slot, i) => clock.setTimer(plan.startAtMs[i]!, () => startNode(slot)));
  for (const p of plan.pauses) {
    clock.setTimer(p.startMs, () => {
      const inc = live.get(p.node);
      if (!inc) return;
      if (inc.pauseDepth++ === 0) trace.add(inc.label, `process STALLS (until ${p.endMs})`);
      inc.clock.pause();
      clock.setTimer(p.endMs - p.startMs, () => {
        if (--inc.pauseDepth > 0 || !inc.clock.isPaused) return;
        trace.add(inc.label, `process RESUMES (${p.resumeOrder})`);
        inc.clock.resume(p.resumeOrder);
      });
    });
  }
  for (const c of plan.crashes) {
    clock.setTimer(c.atMs, () => {
      const inc = live.get(c.node);
      if (!inc) return;
      trace.add(inc.label, `process CRASHES (restart in ${c.restartAfterMs} ms)`);
      inc.clock.crash();
      live.delete(c.node);
      clock.setTimer(c.restartAfterMs, () => startNode(c.node));
    });
  }
  clock.setTimer(plan.faultsUntilMs, () => {
    trace.add('sim', 'faults end');
    for (const inc of live.values()) {
      inc.pauseDepth = 0;
      if (inc.clock.isPaused) {
        trace.add(inc.label, 'process RESUMES (timers-first)');
        inc.clock.resume('timers-first');
      }
    }
  });

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
  const violations = [...history.violations, ...check({ plan, history, streams: read, stopAtMs })].sort((a, b) => a.at - b.at);

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
