/**
 * The fault policy of one run: per-call delays and lost replies drawn from the run's generator,
 * and the outage windows of its plan. After `faultsUntilMs` only a small baseline latency remains.
 */
import { randomInt } from '../../src/core/index.js';
import type { Random, VirtualClock } from '../../src/core/index.js';
import type { CallFate, FaultPolicy, StoreOp } from './faulty-store.js';
import type { SimPlan } from './plan.js';

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

  fate(_node: string, _op: StoreOp): CallFate {
    if (!this.active) return { requestDelayMs: this.baseline(), replyDelayMs: this.baseline(), lostReply: false };
    return {
      requestDelayMs: this.delay(),
      replyDelayMs: this.delay(),
      lostReply: this.plan.lostChance > 0 && this.random.next() < this.plan.lostChance,
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
