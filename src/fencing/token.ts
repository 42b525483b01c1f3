/**
 * The fencing token, its text form, and the fence decision.
 *
 * The text form of a token is `LEASE#TERM` (e.g. `billing#5`): readable in logs and env vars
 * (`tenure run` sets TENURE_TOKEN, `tenure append --token` reads it), and unambiguous because the
 * term is the digits after the last `#`.
 *
 * The token type, makeToken, decideFence and the rejection feed are defined in `core/` and only
 * re-exported here: the stores, which may import nothing but `core/`, issue tokens (makeToken),
 * decide fences in their appendFenced (decideFence) and report refusals (reportStale).
 */
import { InvalidArgumentError, makeToken } from '../core/index.js';
import type { FencingToken } from '../core/index.js';

export { makeToken, decideFence, onFencedRejection, reportStale, onFencedWrite, reportFencedWrite, StaleTermError, NoTokenError } from '../core/index.js';
export type { FencingToken, FencedRejection, FencedRejectionListener, FencedPath, FencedWrite, FencedWriteListener, StaleWhere } from '../core/index.js';

/** `LEASE#TERM`, e.g. `billing#5`. */
export function formatToken(token: FencingToken): string {
  return `${token.lease}#${token.term}`;
}

/** Parse `LEASE#TERM`; throws InvalidArgumentError (field `token`) when it does not parse. */
export function parseToken(text: string): FencingToken {
  const at = typeof text === 'string' ? text.lastIndexOf('#') : -1;
  const term = at > 0 ? text.slice(at + 1) : '';
  if (at <= 0 || !/^[1-9]\d*$/.test(term)) {
    throw new InvalidArgumentError('token', `expected LEASE#TERM such as 'billing#5', got '${String(text)}'`);
  }
  return makeToken(text.slice(0, at), Number(term));
}
