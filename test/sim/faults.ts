/**
 * The fault policy of one run: per-call delays and lost replies drawn from the run's generator,
 * and the outage windows of its plan. After `faultsUntilMs` only a small baseline latency remains.
 */
import { randomInt } from '../../src/core/index.js';
import type { Random, VirtualClock } from '../../src/core/index.js';
import type { CallFate, FaultPolicy, StoreOp } from './faulty-store.js';
import type { NodeClock } from './node-clock.js';
import type { SimPlan } from './plan.js';
import type { Trace } from './trace.js';

export class FaultSchedule implements FaultPolicy {
  constructor(
    private readonly plan: SimPlan,
    private readonly random: Random,
    private readonly clock: VirtualClock,
  ) {}

  /** True until the plan's faults end. */
  get active(): boolean {
    return this.clock.now() < this.plan.faultsUntilMs;
  }

  fate(_node: string, op: StoreOp): CallFate {
    if (!this.active) return { requestDelayMs: this.baseline(), replyDelayMs: this.baseline(), lostReply: false };
    return {
      requestDelayMs: this.delay(),
      replyDelayMs: this.delay(),
      lostReply: this.plan.lostChance > 0 && this.random.next() < this.plan.lostChance,
      lostRequest: this.plan.lostRequestChance > 0 && op !== 'watch' && this.random.next() < this.plan.lostRequestChance,
    };
  }

  outage(node: string): 'reject' | 'hang' | null {
    if (!this.active) return null;
    const now = this.clock.now();
    for (const w of this.plan.outages) {
      if (w.startMs <= now && now < w.endMs && (w.node === null || w.node === node)) return w.mode;
    }
    return null;
  }

  /** 0–2 ms (half the time 0), the latency of a healthy local network. */
  private baseline(): number {
    return this.random.next() < 0.5 ? 0 : randomInt(this.random, 1, 3);
  }

  /** Mostly baseline; sometimes a heavy-tailed delay up to the plan's maximum (which may exceed the TTL). */
  private delay(): number {
    if (this.plan.delayChance > 0 && this.random.next() < this.plan.delayChance) {
      return 1 + Math.floor(this.random.next() ** 3 * this.plan.maxDelayMs);
    }
    return this.baseline();
  }
}

/** A running process of a node, as the plan's pauses and crashes see it. */
export interface LiveProcess {
  /** n2, or n2#2 for the node's second process after a crash. */
  readonly label: string;
  readonly clock: NodeClock;
  /** Pause windows currently open on this process (they may overlap). */
  pauseDepth: number;
}

/**
 * Set the timers of the plan's process faults: stalls (the node's gate held, then resumed in the
 * window's order), crashes (the gate dropped for good, `restart` called later for a new
 * incarnation) and, at the end of faults, every stalled process resumed. `live` maps each node
 * to its running process; crashes remove it and `restart` is expected to put the new one back.
 */
export function scheduleProcessFaults(plan: SimPlan, clock: VirtualClock, trace: Trace, live: Map<string, LiveProcess>, restart: (node: string) => void): void {
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
      clock.setTimer(c.restartAfterMs, () => restart(c.node));
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
}
