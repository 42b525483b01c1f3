/**
 * The token context: the fencing token of the current leadership flows with the work through
 * AsyncLocalStorage, so that work started inside `runWhileLeader` or `lock.using` (timers,
 * promises, queued jobs started from it) sees the same token without passing it by hand, and work
 * started outside any leadership sees none.
 *
 * The fenced helpers (HTTP, messages, SQL commands) call `requireFence()`: with no token in the
 * context, or once the leadership that issued it has ended (its signal aborted), they throw
 * NoTokenError and never write unfenced.
 *
 * A context token is a convenience, not the fence: the fence is the check where the write lands
 * (the store, the guarded table, the HTTP guard in the server's transaction, the consumer).
 */
import { AsyncLocalStorage } from 'node:async_hooks';
import { InvalidArgumentError, NoTokenError, checkToken, reportFencedWrite, reportStale } from '../core/index.js';
import type { FencedPath, FencingToken, StaleTermError } from '../core/index.js';

/** A leadership as the fenced helpers see it: its token, and the signal that aborts when it ends. */
export interface FenceScope {
  readonly token: FencingToken;
  /** Aborts when the leadership ends. Optional for a token passed by hand (then never aborted). */
  readonly signal?: AbortSignal;
}

const storage = new AsyncLocalStorage<FenceScope>();

/**
 * Run `fn` with `scope` as its fencing context (and everything `fn` starts: timers, promises,
 * jobs). `runWhileLeader` and `lock.using` do this for you; use it with a lock handle from
 * `acquire()` (`runFenced(handle, () => …)`) or a token you received.
 */
export function runFenced<T>(scope: FenceScope, fn: () => T): T {
  if (typeof scope !== 'object' || scope === null) throw new InvalidArgumentError('scope', 'expected { token, signal? } (a LeaderContext or a lock handle)');
  checkToken('token', scope.token);
  if (typeof fn !== 'function') throw new InvalidArgumentError('fn', 'expected a function to run with the token');
  const frozen: FenceScope = Object.freeze(scope.signal ? { token: scope.token, signal: scope.signal } : { token: scope.token });
  return storage.run(frozen, fn);
}

/** The fencing context of the running code, if any (even if its leadership has ended). */
export function currentFence(): FenceScope | undefined {
  return storage.getStore();
}

/** The token of the running code's leadership, if any and if that leadership has not ended. */
export function currentToken(): FencingToken | undefined {
  const scope = storage.getStore();
  return scope && !scope.signal?.aborted ? scope.token : undefined;
}

/**
 * The running code's fencing context, or NoTokenError: `what` names the helper that needed it
 * (e.g. `fencedFetch`). A context whose leadership ended fails too: a deposed leader's late work
 * must not even try (the write's own check would refuse it; this saves the round trip).
 */
export function requireFence(what: string, group?: string): FenceScope {
  const scope = storage.getStore();
  if (!scope) {
    throw new NoTokenError(`${what}: no fencing token here. Call it inside elector.runWhileLeader(…), lock.using(…) or runFenced(handle, …); it never writes unfenced`);
  }
  if (scope.signal?.aborted) {
    throw new NoTokenError(`${what}: the leadership of ${scope.token.lease} term ${scope.token.term} has ended; its work must stop`);
  }
  if (group !== undefined && scope.token.lease !== group) {
    throw new NoTokenError(`${what}: the token in this context is for group ${scope.token.lease}, not ${group}`);
  }
  return scope;
}

/**
 * A fenced write's refusal, reported once with its path: counted, and the elector or lock in this
 * process that holds that token steps down at once. Returns the error for `throw`.
 */
export function refuse(error: StaleTermError, path: FencedPath, side: 'guard' | 'writer' = 'guard'): StaleTermError {
  return reportStale(error, { path, side });
}

/** The lease of a token for a metric label, before the token is checked (anything else: ''). */
export function leaseLabel(token: unknown): string {
  const lease = (token as { lease?: unknown } | null | undefined)?.lease;
  return typeof lease === 'string' ? lease : '';
}

/** Time a fenced write and report its latency and outcome (histogram tenure_fenced_write_seconds). */
export async function timeFencedWrite<T>(path: FencedPath, lease: string, write: () => Promise<T>): Promise<T> {
  const start = performance.now();
  try {
    const result = await write();
    reportFencedWrite({ path, lease, ms: performance.now() - start, outcome: 'ok' });
    return result;
  } catch (err) {
    const stale = typeof err === 'object' && err !== null && (err as { code?: unknown }).code === 'STALE_TERM';
    reportFencedWrite({ path, lease, ms: performance.now() - start, outcome: stale ? 'stale' : 'error' });
    throw err;
  }
}
