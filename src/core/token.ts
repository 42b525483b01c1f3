/**
 * Fencing tokens and incarnation ids. The stores issue tokens (makeToken), so it lives here; the
 * token's text form is in `fencing/token.ts`.
 */
import type { Random } from './random.js';
import { randomSuffix } from './random.js';
import type { FencingToken } from './types.js';
import { checkName, checkOwner, checkTerm } from './validate.js';

export function makeToken(lease: string, term: number): FencingToken {
  return Object.freeze({ lease: checkName('lease', lease), term: checkTerm('term', term) });
}

/**
 * An incarnation id: the stable node id plus a random suffix made once per process, so a
 * restarted process is never mistaken for its earlier self (and gets a new term).
 */
export function makeIncarnation(nodeId: string, random: Random): string {
  checkOwner('id', nodeId);
  const id = `${nodeId}~${randomSuffix(random, 8)}`;
  return checkOwner('id', id);
}

/** The node id part of an incarnation id. */
export function nodeIdOf(owner: string): string {
  const i = owner.lastIndexOf('~');
  return i > 0 ? owner.slice(0, i) : owner;
}
