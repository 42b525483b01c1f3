/**
 * The fencing token and its text form, `LEASE#TERM` (e.g. `billing#5`), and the fence decision.
 *
 * They are defined in `core/` and only re-exported here: the stores, which may import nothing but
 * `core/`, issue tokens (makeToken), decide fences in their appendFenced (decideFence) and report
 * refusals (reportStale), so those must stay below them. `tenure/fencing` is their public home.
 */
export { makeToken, formatToken, parseToken, decideFence, onFencedRejection, reportStale, StaleTermError } from '../core/index.js';
export type { FencingToken, FencedRejection, FencedRejectionListener } from '../core/index.js';
