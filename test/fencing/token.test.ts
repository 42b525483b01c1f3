/** The token's text form, `LEASE#TERM`, from tenure/fencing (and the package root). */
import { describe, expect, it } from 'vitest';
import { InvalidArgumentError } from '../../src/core/index.js';
import { formatToken, makeToken, parseToken } from '../../src/fencing/index.js';
import * as root from '../../src/index.js';

describe('the text form of a fencing token', () => {
  it('round-trips, the term being the digits after the last #', () => {
    expect(formatToken(makeToken('billing', 5))).toBe('billing#5');
    expect(parseToken('billing#5')).toEqual({ lease: 'billing', term: 5 });
    expect(parseToken('jobs#eu#12')).toEqual({ lease: 'jobs#eu', term: 12 });
    expect(parseToken(formatToken({ lease: 'a/b c', term: 2 ** 53 - 1 }))).toEqual({ lease: 'a/b c', term: 2 ** 53 - 1 });
    expect(Object.isFrozen(parseToken('x#1'))).toBe(true);
  });

  it('refuses anything else as bad input', () => {
    for (const text of ['', 'billing', '#5', 'billing#', 'billing#0', 'billing#05', 'billing#-1', 'billing#1e3', 'billing# 5', 'billing#9007199254740992', 42]) {
      expect(() => parseToken(text as string), String(text)).toThrow(InvalidArgumentError);
    }
    expect(() => parseToken('billing')).toThrow(/^token: expected LEASE#TERM such as 'billing#5', got 'billing'$/);
  });

  it('is exported by the package root too', () => {
    expect(root.formatToken).toBe(formatToken);
    expect(root.parseToken).toBe(parseToken);
    expect(root.fencedUpdate).toBeTypeOf('function');
  });
});
