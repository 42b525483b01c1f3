/**
 * One node's view of time in the simulation: its own monotonic clock (offset from the others,
 * optionally running at a different rate) and the gate through which every input reaches the
 * node's process — timers, store replies, watch pushes.
 *
 * Pausing the gate models a stalled process (GC pause, SIGSTOP, a VM migration): nothing the
 * node wrote runs while it is paused, its timers come due but do not fire, replies that arrive
 * wait. On resume they are delivered late, one macrotask each, as an event loop would after a
 * stall. Crashing the gate drops everything for good.
 */
import type { Clock, VirtualClock } from '../../src/core/index.js';

/**
 * The order in which a resumed process handles the inputs that queued up while it was stalled:
 * `arrival` in the order they came, `timers-first` like Node's event loop (the timers phase runs
 * every expired timer before the poll phase delivers I/O).
 */
export type ResumeOrder = 'arrival' | 'timers-first';

interface Held {
  readonly kind: 'timer' | 'io';
  readonly fn: () => void;
}

export interface NodeClockOptions {
  /** What this node's clock reads at virtual time 0. Clocks of different nodes disagree; only durations matter. */
  readonly offsetMs?: number;
  /** Local ms per virtual ms. Below 1 the node's clock runs slow. Default 1. */
  readonly rate?: number;
}

export class NodeClock implements Clock {
  readonly offsetMs: number;
  readonly rate: number;
  /** Bumped on every pause, so the checker can tell whether a node stalled during an interval. */
  pauseCount = 0;
  private paused = false;
  private crashed = false;
  private held: Held[] = [];

  constructor(
    private readonly base: VirtualClock,
    options: NodeClockOptions = {},
  ) {
    this.offsetMs = options.offsetMs ?? 0;
    this.rate = options.rate ?? 1;
  }

  now(): number {
    return this.offsetMs + this.base.now() * this.rate;
  }

  /** The virtual instant at which this clock reads `localMs`. */
  toVirtual(localMs: number): number {
    return (localMs - this.offsetMs) / this.rate;
  }

  setTimer(ms: number, fn: () => void): () => void {
    let cancelled = false;
    const cancelBase = this.base.setTimer(Math.max(0, ms) / this.rate, () =>
      this.deliver('timer', () => {
        if (!cancelled) fn();
      }),
    );
    return () => {
      cancelled = true;
      cancelBase();
    };
  }

  /** Run `fn` in this node's process now, or hold it until the node resumes. */
  deliver(kind: 'timer' | 'io', fn: () => void): void {
    if (this.crashed) return;
    if (this.paused) this.held.push({ kind, fn });
    else fn();
  }

  get isPaused(): boolean {
    return this.paused;
  }

  get isCrashed(): boolean {
    return this.crashed;
  }

  pause(): void {
    if (this.crashed || this.paused) return;
    this.paused = true;
    this.pauseCount++;
  }

  resume(order: ResumeOrder): void {
    if (!this.paused) return;
    this.paused = false;
    const held = this.held;
    this.held = [];
    const ordered = order === 'arrival' ? held : [...held.filter((h) => h.kind === 'timer'), ...held.filter((h) => h.kind === 'io')];
    // One virtual timer each, all at this instant, so promise chains settle between them.
    for (const h of ordered) this.base.setTimer(0, () => this.deliver(h.kind, h.fn));
  }

  /** The process is gone: nothing it scheduled or was sent ever runs again. */
  crash(): void {
    this.crashed = true;
    this.held = [];
  }
}
