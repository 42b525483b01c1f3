/**
 * Every fenced write tenure refuses as stale is reported here, once, by the code that refused it:
 * each store's appendFenced and tenure/fencing's fencedUpdate. `collectMetrics` counts them
 * (tenure_fenced_rejections_total). A listener must not throw; one that does is ignored.
 */
import type { StaleTermError } from './errors.js';

export interface FencedRejection {
  readonly error: StaleTermError;
  /** The stream of a refused appendFenced. */
  readonly stream?: string;
  /** The table of a refused fencedUpdate. */
  readonly table?: string;
}

export type FencedRejectionListener = (rejection: FencedRejection) => void;

const listeners = new Set<FencedRejectionListener>();

/** Hear of every stale fenced write refused in this process; returns the way to stop. */
export function onFencedRejection(listener: FencedRejectionListener): () => void {
  listeners.add(listener);
  return () => {
    listeners.delete(listener);
  };
}

/** Report a refusal and return its error, so a store can `throw reportStale(new StaleTermError(…), { stream })`. */
export function reportStale(error: StaleTermError, where: { stream?: string; table?: string } = {}): StaleTermError {
  const rejection: FencedRejection = { error, ...where };
  for (const listener of [...listeners]) {
    try {
      listener(rejection);
    } catch {
      // a listener's failure is not the writer's
    }
  }
  return error;
}
