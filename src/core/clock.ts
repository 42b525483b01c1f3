/**
 * Time is injected: a Clock gives a monotonic `now()` in ms and timers. The system clock uses
 * performance.now(); the virtual clock moves only when told to, for deterministic simulation.
 */

export interface Clock {
  /** Monotonic milliseconds; only differences are meaningful. */
  now(): number;
  /** Run `fn` after `ms` milliseconds; returns a function that cancels it. */
  setTimer(ms: number, fn: () => void): () => void;
}

/** Resolve after `ms` ms, or reject with the signal's reason when it aborts first. */
export function sleep(clock: Clock, ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) {
      reject(signal.reason);
      return;
    }
    const onAbort = (): void => {
      cancel();
      reject(signal?.reason);
    };
    const cancel = clock.setTimer(ms, () => {
      signal?.removeEventListener('abort', onAbort);
      resolve();
    });
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}

/**
 * The longest delay a timer is given, ms: 2^31 - 1, the most Node's setTimeout takes (a longer one
 * fires at once, with a TimeoutOverflowWarning). Delays computed from store data (a lease's time
 * left, which a tampered row or another client can make years long) are clamped to it, so a
 * timer fires early at worst and its owner looks again, never in a tight loop.
 */
export const MAX_TIMER_MS = 2 ** 31 - 1;

/** `ms` as a timer delay: within [0, MAX_TIMER_MS], 0 for NaN. */
export function timerDelay(ms: number): number {
  if (!(ms > 0)) return 0;
  return Math.min(ms, MAX_TIMER_MS);
}

class SystemClock implements Clock {
  now(): number {
    return performance.now();
  }
  setTimer(ms: number, fn: () => void): () => void {
    // The one place real timers are read: the system implementation of the Clock seam.
    // eslint-disable-next-line no-restricted-globals
    const handle = setTimeout(fn, timerDelay(ms));
    return () => clearTimeout(handle);
  }
}

export const systemClock: Clock = new SystemClock();

interface VirtualTimer {
  readonly at: number;
  readonly seq: number;
  readonly fn: () => void;
}

/**
 * A clock that only moves in `advance`/`runUntil`. Timers fire in (time, creation) order, so a
 * run is a pure function of its inputs. Between timers it lets pending promise callbacks run,
 * through the `flush` function it was given (the simulator passes one that yields a macrotask).
 */
export class VirtualClock implements Clock {
  private time: number;
  private seq = 0;
  private timers: VirtualTimer[] = [];

  constructor(startMs = 0) {
    this.time = startMs;
  }

  now(): number {
    return this.time;
  }

  setTimer(ms: number, fn: () => void): () => void {
    const timer: VirtualTimer = { at: this.time + Math.max(0, ms), seq: this.seq++, fn };
    // Binary insertion keeps timers sorted by (at, seq).
    let lo = 0;
    let hi = this.timers.length;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      const other = this.timers[mid]!;
      if (other.at < timer.at || (other.at === timer.at && other.seq < timer.seq)) lo = mid + 1;
      else hi = mid;
    }
    this.timers.splice(lo, 0, timer);
    return () => {
      const i = this.timers.indexOf(timer);
      if (i >= 0) this.timers.splice(i, 1);
    };
  }

  /** Number of timers waiting to fire. */
  get pending(): number {
    return this.timers.length;
  }

  /** Time of the next timer, or undefined when none is set. */
  nextAt(): number | undefined {
    return this.timers[0]?.at;
  }

  /**
   * Fire every timer due up to `untilMs`, in order, calling `flush` after each so that the
   * promise chains it started settle before the next one fires. Ends with now() = untilMs.
   */
  async runUntil(untilMs: number, flush: () => Promise<void>): Promise<void> {
    await flush();
    while (this.fireNext(untilMs)) await flush();
    if (untilMs > this.time) this.time = untilMs;
  }

  /**
   * The same without promises, for code that schedules everything through timers (the pure
   * elector machine's simulation): `each` runs after every timer and may return false to stop
   * there (now() then stays at that timer). Returns whether it reached `untilMs`.
   */
  runUntilSync(untilMs: number, each?: () => boolean): boolean {
    while (this.fireNext(untilMs)) if (each && !each()) return false;
    if (untilMs > this.time) this.time = untilMs;
    return true;
  }

  /** Fire the next timer due at or before `untilMs`; false when none is. */
  private fireNext(untilMs: number): boolean {
    const next = this.timers[0];
    if (next === undefined || next.at > untilMs) return false;
    this.timers.shift();
    if (next.at < this.time) throw new Error(`virtual time went back: ${next.at} < ${this.time}`);
    this.time = next.at;
    next.fn();
    return true;
  }
}
