/**
 * The worker's lease `<group>/workers/<nodeId>`, kept alive with the Store's acquire and renew: a
 * live lease is how the leader knows a worker is alive, and its term names the incarnation the
 * leader gives items to. (replication/ uses core/ only, so this is a small keeper of its own, not
 * a LeaderElector; it follows the same timing rules.)
 *
 *  - rule 2: a lease from an acquire or renew sent at S is held locally until S + ttl - margin; a
 *    timer aborts its signal then, whether or not the store answers;
 *  - rule 3: a call with no answer within `requestTimeoutMs` changes nothing (the deadline stands);
 *    the next acquire reconciles (the same owner holding it live gets the same term back);
 *  - rule 6: renew and release are compare-and-set on owner and term (the store's own calls).
 */
import { StoreUnavailableError, candidateDelay, leaderDeadline, makeToken, sleep } from '../core/index.js';
import type { Clock, FencingToken, LeaseMeta, Random, Store, Timing } from '../core/index.js';

/** One holding of the lease: from the acquire that took it to the moment it ended locally. */
export interface HeldWorkerLease {
  readonly term: number;
  readonly token: FencingToken;
  /** Aborts when the holding ends: deadline passed, renewal refused, or stop. */
  readonly signal: AbortSignal;
}

export interface WorkerLeaseOptions {
  readonly store: Store;
  readonly name: string;
  /** The incarnation id (node id + per-process suffix). */
  readonly owner: string;
  readonly meta: LeaseMeta;
  readonly timing: Timing;
  readonly clock: Clock;
  readonly random: Random;
}

/**
 * Hold the lease until `stop` aborts: take it (waiting for a previous incarnation's to run out),
 * renew it, take it again after losing it. `onHeld` is called at the start of each holding.
 * Resolves after `stop`, once the lease is released (best effort: a release that fails leaves
 * the lease to expire).
 */
export async function keepWorkerLease(o: WorkerLeaseOptions, stop: AbortSignal, onHeld: (held: HeldWorkerLease) => void): Promise<void> {
  const { store, name, owner, timing, clock } = o;
  const call = <T>(what: string, promise: Promise<T>): Promise<T> =>
    new Promise<T>((resolve, reject) => {
      const cancel = clock.setTimer(timing.requestTimeoutMs, () => reject(new StoreUnavailableError(`${store.kind} store: no answer to ${what} of ${name} within ${timing.requestTimeoutMs} ms`)));
      promise.then(
        (v) => {
          cancel();
          resolve(v);
        },
        (err: unknown) => {
          cancel();
          reject(err as Error);
        },
      );
    });
  const pause = (ms: number): Promise<void> => sleep(clock, ms, stop).catch(() => {});

  while (!stop.aborted) {
    const sentAt = clock.now();
    let term: number;
    try {
      const r = await call('acquire', store.acquire(name, owner, timing.ttlMs, o.meta));
      if (!r.acquired) {
        await pause(candidateDelay(r.lease.remainingMs, timing, o.random));
        continue;
      }
      term = r.lease.term;
    } catch {
      await pause(timing.retryMs);
      continue;
    }
    const controller = new AbortController();
    let cancelDeadline = clock.setTimer(leaderDeadline(sentAt, timing) - clock.now(), () => controller.abort());
    const onStop = (): void => controller.abort();
    stop.addEventListener('abort', onStop, { once: true });
    if (stop.aborted) controller.abort();
    onHeld({ term, token: makeToken(name, term), signal: controller.signal });
    while (!controller.signal.aborted) {
      await sleep(clock, timing.renewIntervalMs, controller.signal).catch(() => {});
      if (controller.signal.aborted) break;
      const renewSentAt = clock.now();
      try {
        const r = await call('renew', store.renew(name, owner, term, timing.ttlMs));
        if (!r.renewed) controller.abort();
        else if (!controller.signal.aborted) {
          cancelDeadline();
          cancelDeadline = clock.setTimer(leaderDeadline(renewSentAt, timing) - clock.now(), () => controller.abort());
        }
      } catch {
        // Maybe renewed, maybe not: the deadline of the last sure renewal stands.
      }
    }
    cancelDeadline();
    stop.removeEventListener('abort', onStop);
    if (stop.aborted) {
      await call('release', store.release(name, owner, term)).catch(() => false);
      return;
    }
  }
}
