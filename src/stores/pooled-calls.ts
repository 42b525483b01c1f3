/**
 * The calls of a store that works on pooled connections (PostgreSQL, MySQL): check a connection
 * out, make sure the schema is in place (once per store; a failed attempt is made again by the
 * next call), run the call, hand the connection back, all within the store's timeout on one
 * shared timer (see Deadlines). A call that gets no answer in time rejects at once with the
 * store's timeout error and its connection is dropped, not pooled: its statement may still commit,
 * so the outcome is unknown (safety rule 3).
 */
import { Deadlines } from './deadlines.js';

export interface PooledCallsOptions<C> {
  readonly timeoutMs: number;
  /** Check a connection out of the pool. */
  checkout(): Promise<C>;
  /** Give `c` back to its pool, or drop it (`destroy`) when it may be broken or still busy. */
  handBack(c: C, destroy: boolean): void;
  /** Whether the connection of a call that failed with `err` must be dropped rather than pooled. */
  dropAfter(err: unknown): boolean;
  /** Create or upgrade the schema, on `c`. */
  prepare(c: C): Promise<void>;
  /** The error of a call that got no answer in time. */
  timedOut(operation: string): Error;
  /** The error a failure of a call is reported as. */
  failed(operation: string, err: unknown): Error;
}

export class PooledCalls<C> {
  private readonly deadlines: Deadlines;
  private prepared: Promise<void> | null = null;
  /** The schema is known to be in place (`prepared` has resolved). */
  private ready = false;

  constructor(private readonly options: PooledCallsOptions<C>) {
    this.deadlines = new Deadlines(options.timeoutMs);
  }

  /** Make sure the schema is in place, on `c`: done once, shared by concurrent callers, tried again after a failure. */
  prepare(c: C): Promise<void> {
    if (!this.prepared) {
      const p = this.options.prepare(c);
      this.prepared = p;
      p.then(
        () => {
          if (this.prepared === p) this.ready = true;
        },
        () => {
          if (this.prepared === p) this.prepared = null;
        },
      );
    }
    return this.prepared;
  }

  /** Run `fn` on a pooled connection, after `prepare`, within the timeout. */
  run<T>(operation: string, fn: (c: C) => Promise<T>): Promise<T> {
    const o = this.options;
    return new Promise<T>((resolve, reject) => {
      let held: C | null = null;
      const handBack = (c: C, destroy: boolean): void => {
        if (held !== c) return; // already handed back
        held = null;
        o.handBack(c, destroy);
      };
      const deadline = this.deadlines.add(() => {
        if (held !== null) handBack(held, true);
        reject(o.timedOut(operation));
      });
      const failed = (err: unknown): void => {
        if (this.deadlines.settle(deadline)) reject(o.failed(operation, err));
      };
      o.checkout().then((c) => {
        if (!deadline.open) {
          o.handBack(c, true); // the call timed out while it waited for a connection
          return;
        }
        held = c;
        const call = (): Promise<T> => {
          try {
            return fn(c);
          } catch (err) {
            return Promise.reject(err); // a driver that throws instead of rejecting
          }
        };
        (this.ready ? call() : this.prepare(c).then(call)).then(
          (value) => {
            handBack(c, false);
            if (this.deadlines.settle(deadline)) resolve(value);
          },
          (err: unknown) => {
            handBack(c, o.dropAfter(err));
            failed(err);
          },
        );
      }, failed);
    });
  }
}
