/**
 * Fencing tokens and incarnation ids.
 *
 * The text form of a token is `LEASE#TERM` (e.g. `billing#5`): readable in logs and env vars,
 * and unambiguous because the term is the digits after the last `#`.
 */
import { InvalidArgumentError } from './errors.js';
import type { Random } from './random.js';
import { randomSuffix } from './random.js';
import type { FencingToken } from './types.js';
import { checkName, checkOwner, checkTerm } from './validate.js';

export function makeToken(lease: string, term: number): FencingToken {
  return Object.freeze({ lease: checkName('lease', lease), term: checkTerm('term', term) });
}

export function formatToken(token: FencingToken): string {
  return `${token.lease}#${token.term}`;
}

/** Parse `LEASE#TERM`; throws InvalidArgumentError (field `token`) when it does not parse. */
export function parseToken(text: string): FencingToken {
  const at = text.lastIndexOf('#');
  const term = at > 0 ? text.slice(at + 1) : '';
  if (at <= 0 || !/^[1-9]\d*$/.test(term)) {
    throw new InvalidArgumentError('token', `expected LEASE#TERM such as 'billing#5', got '${text}'`);
  }
  return makeToken(text.slice(0, at), Number(term));
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
