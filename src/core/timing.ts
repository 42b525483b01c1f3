/**
 * Election timing: defaults, the relations between the durations, and the pure decisions the
 * elector loop takes from them (safety rule 2 lives in `leaderDeadline`).
 */
import { InvalidArgumentError } from './errors.js';
import type { Random } from './random.js';
import { checkMs, checkTtl, limits } from './validate.js';

export interface TimingOptions {
  /** Lease time to live, ms. Default 10000. */
  ttlMs?: number;
  /** Time between renewals while leading, ms. Default ttl / 3. Must be < ttl - margin. */
  renewIntervalMs?: number;
  /** Leadership ends locally this long before the lease could expire, ms. Default ttl / 10. */
  marginMs?: number;
  /** Wait after a failed store call before the next attempt, ms. Default min(ttl / 10, 500). */
  retryMs?: number;
  /**
   * A store call with no answer after this long counts as failed (outcome unknown), ms. Default
   * renewInterval. A leader's release (stop, resign) waits longer, until its lease's deadline.
   */
  requestTimeoutMs?: number;
}

export type Timing = Required<TimingOptions>;

/** The one default lease TTL (10 s) of every layer: elector, lock, Redlock, etcd session, CLI. */
export const timingDefaults = { ttlMs: 10_000 } as const;

/** Fill defaults and check the relations; errors name the fields and the allowed ranges. */
export function resolveTiming(options: TimingOptions): Timing {
  const ttlMs = checkTtl('ttlMs', options.ttlMs ?? timingDefaults.ttlMs);
  const marginMs = checkMs('marginMs', options.marginMs ?? Math.floor(ttlMs / 10), 0, ttlMs - 1);
  const renewIntervalMs = checkMs('renewIntervalMs', options.renewIntervalMs ?? Math.max(1, Math.floor(ttlMs / 3)), 1, limits.ttlMaxMs);
  if (renewIntervalMs >= ttlMs - marginMs) {
    throw new InvalidArgumentError(
      'renewIntervalMs',
      `must be < ttlMs - marginMs = ${ttlMs - marginMs} so the leader renews before its deadline, got ${renewIntervalMs}`,
    );
  }
  const retryMs = checkMs('retryMs', options.retryMs ?? Math.max(1, Math.min(Math.floor(ttlMs / 10), 500)), 1, ttlMs);
  const requestTimeoutMs = checkMs('requestTimeoutMs', options.requestTimeoutMs ?? renewIntervalMs, 1, limits.ttlMaxMs);
  return { ttlMs, marginMs, renewIntervalMs, retryMs, requestTimeoutMs };
}

/**
 * Safety rule 2: leadership from a successful acquire or renew *sent* at `sentAtMs` ends locally
 * at sentAt + ttl - margin, however late the reply came. The store's own expiry starts no earlier
 * than it received the request, so this instant is never after the store lets another owner in.
 */
export function leaderDeadline(sentAtMs: number, timing: Timing): number {
  return sentAtMs + timing.ttlMs - timing.marginMs;
}

/**
 * When a candidate that lost an acquire should try again: just after the holder's lease runs out
 * as the store reported it, with a little jitter so candidates do not arrive in lockstep, but at
 * most one TTL (the candidate's own) from now: a time left the store reports is data, and a
 * tampered row or another client's lease can make it years long. Push (watch) may wake it earlier.
 */
export function candidateDelay(remainingMs: number, timing: Timing, random: Random): number {
  const jitter = Math.floor(random.next() * Math.min(20, Math.max(1, timing.ttlMs / 50)));
  const left = remainingMs > 1 ? Math.min(Math.ceil(remainingMs), timing.ttlMs) : 1;
  return left + 1 + jitter;
}
