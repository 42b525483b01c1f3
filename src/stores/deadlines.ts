/**
 * Command timeouts without a timer per call. Every call of one store has the same timeout, so
 * deadlines come due in the order the calls were sent: they wait in a FIFO queue, and a single
 * timer is armed for the oldest one that is still open. A call that settles just marks its entry
 * done (replies on one connection come back in order, so the queue's head is usually the one
 * settling and the queue stays short). While calls are open the timer keeps the process alive, as
 * a pending call's own timer would; when none is open it does not.
 */
export interface Deadline {
  /** When the call times out, on the monotonic clock of `performance.now()`. */
  readonly at: number;
  /** Open until settled or expired; only an open entry may settle. */
  open: boolean;
  readonly onExpire: () => void;
}

export class Deadlines {
  private queue: Deadline[] = [];
  private head = 0;
  private timer: NodeJS.Timeout | null = null;
  private refed = false;
  /** Entries still open: calls sent and not yet answered. */
  pending = 0;

  constructor(private readonly timeoutMs: number) {}

  /** Start the clock for one call; `onExpire` runs once if it has not settled within the timeout. */
  add(onExpire: () => void): Deadline {
    const entry: Deadline = { at: performance.now() + this.timeoutMs, open: true, onExpire };
    this.queue.push(entry);
    this.pending++;
    if (this.timer === null) {
      this.timer = setTimeout(this.fire, this.timeoutMs);
      this.refed = true;
    } else if (!this.refed) {
      this.timer.ref();
      this.refed = true;
    }
    return entry;
  }

  /** Close `entry`; false when it had already expired (or settled), so its caller was answered. */
  settle(entry: Deadline): boolean {
    if (!entry.open) return false;
    entry.open = false;
    this.pending--;
    this.drop();
    return true;
  }

  /** Drop settled entries from the head; with none open, let the process exit. */
  private drop(): void {
    const q = this.queue;
    while (this.head < q.length && !q[this.head]!.open) this.head++;
    if (this.head === q.length) {
      q.length = 0;
      this.head = 0;
      if (this.refed && this.timer) {
        this.timer.unref();
        this.refed = false;
      }
    } else if (this.head > 1024 && this.head * 2 > q.length) {
      this.queue = q.slice(this.head);
      this.head = 0;
    }
  }

  private readonly fire = (): void => {
    this.timer = null;
    this.refed = false;
    const now = performance.now();
    const q = this.queue;
    // Timers may fire up to a millisecond early by this clock: anything due within 1 ms expires.
    while (this.head < q.length && (!q[this.head]!.open || q[this.head]!.at - now < 1)) {
      const e = q[this.head++]!;
      if (e.open) {
        e.open = false;
        this.pending--;
        e.onExpire();
      }
    }
    this.drop();
    if (this.head < this.queue.length) {
      this.timer = setTimeout(this.fire, Math.max(1, Math.ceil(this.queue[this.head]!.at - now)));
      this.refed = true;
    }
  };
}
