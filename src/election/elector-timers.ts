/**
 * The elector machine's timers on a Clock, for a shell that runs the machine: performs its
 * `set-timer` and `cancel-timer` effects and feeds each firing back as a `timer` event.
 * LeaderElector uses it, and so does the simulation that steps the machine directly.
 */
import type { Clock } from '../core/index.js';
import type { ElectorEffect, ElectorEvent, TimerName } from './elector-machine.js';

export type TimerEvent = Extract<ElectorEvent, { type: 'timer' }>;

export class ElectorTimers {
  private readonly cancels: Record<TimerName, (() => void) | null> = { loop: null, deadline: null, progress: null };

  constructor(
    private readonly clock: Clock,
    private readonly fire: (event: TimerEvent) => void,
  ) {}

  /** `set-timer` replaces the timer set before (if any) with one that fires `ms` from now; `cancel-timer` cancels it. */
  perform(effect: Extract<ElectorEffect, { type: 'set-timer' | 'cancel-timer' }>): void {
    const { timer } = effect;
    this.cancels[timer]?.();
    this.cancels[timer] = null;
    if (effect.type === 'cancel-timer') return;
    const { id } = effect;
    this.cancels[timer] = this.clock.setTimer(effect.ms, () => {
      this.cancels[timer] = null;
      this.fire({ type: 'timer', timer, id });
    });
  }

  isSet(timer: TimerName): boolean {
    return this.cancels[timer] !== null;
  }
}
