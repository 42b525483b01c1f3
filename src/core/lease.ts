/**
 * Lease and term math for stores that read a row, decide and write it back inside one atomic
 * step (memory, SQLite). Times here are the store's own clock, in ms; callers never pass a
 * client's clock (safety rule 1).
 */
import { InvalidArgumentError } from './errors.js';
import type { Lease, LeaseMeta, RenewResult } from './types.js';
import { nextTerm } from './validate.js';

/** A lease row as kept by a store. `owner` is null once released; the term is kept forever. */
export interface LeaseRow {
  readonly name: string;
  readonly owner: string | null;
  readonly term: number;
  readonly expiresAtMs: number;
  readonly ttlMs: number;
  readonly meta: LeaseMeta;
}

export function isLive(row: LeaseRow | undefined | null, nowMs: number): row is LeaseRow & { owner: string } {
  return row != null && row.owner !== null && row.expiresAtMs > nowMs;
}

export function toLease(row: LeaseRow & { owner: string }, nowMs: number): Lease {
  return {
    name: row.name,
    owner: row.owner,
    term: row.term,
    meta: row.meta,
    ttlMs: row.ttlMs,
    // To the microsecond: (now + ttl) - now can come out one ulp above ttl in floating point (the
    // contract suite once saw 5000.000000000001 for a 5000 ms lease on the memory store); a TTL is
    // whole ms, so a fresh lease never reads above it. A row that says more (written by hand) is
    // reported as it says.
    remainingMs: Math.max(0, Math.round((row.expiresAtMs - nowMs) * 1000) / 1000),
  };
}

export type AcquireDecision =
  | { readonly acquired: true; readonly row: LeaseRow; readonly newTerm: boolean }
  | { readonly acquired: false; readonly row: LeaseRow & { owner: string } };

/**
 * The term bumps on every acquisition that is not a live renewal by the same owner incarnation
 * (safety rule 4): a free, released or expired lease goes to `owner` with term + 1.
 */
export function decideAcquire(
  current: LeaseRow | undefined | null,
  name: string,
  owner: string,
  ttlMs: number,
  meta: LeaseMeta,
  nowMs: number,
): AcquireDecision {
  if (isLive(current, nowMs)) {
    if (current.owner !== owner) return { acquired: false, row: current };
    return { acquired: true, newTerm: false, row: { ...current, expiresAtMs: nowMs + ttlMs, ttlMs, meta } };
  }
  const term = nextTerm(name, current?.term ?? 0);
  return { acquired: true, newTerm: true, row: { name, owner, term, expiresAtMs: nowMs + ttlMs, ttlMs, meta } };
}

/** Renew is compare-and-set on owner and term of a live lease (safety rule 6). */
export function decideRenew(current: LeaseRow | undefined | null, owner: string, term: number, ttlMs: number, nowMs: number): LeaseRow | null {
  if (!isLive(current, nowMs) || current.owner !== owner || current.term !== term) return null;
  return { ...current, expiresAtMs: nowMs + ttlMs, ttlMs };
}

/**
 * A renew as a store answers it: the renewed row handed to `put` (to store it) and reported or,
 * refused, the live lease that stands (null when none does).
 */
export function renewLease(current: LeaseRow | undefined | null, owner: string, term: number, ttlMs: number, nowMs: number, put: (row: LeaseRow) => void): RenewResult {
  const next = decideRenew(current, owner, term, ttlMs, nowMs);
  if (next === null) return { renewed: false, lease: isLive(current, nowMs) ? toLease(current, nowMs) : null };
  put(next);
  return { renewed: true, lease: toLease(next as LeaseRow & { owner: string }, nowMs) };
}

/** Release is compare-and-set on owner and term; the term stays so it never goes back. */
export function decideRelease(current: LeaseRow | undefined | null, owner: string, term: number, nowMs: number): LeaseRow | null {
  if (!isLive(current, nowMs) || current.owner !== owner || current.term !== term) return null;
  return { ...current, owner: null, expiresAtMs: nowMs };
}

/**
 * Fencing decision for a write under `term` for lease `name`. `highest` is the highest term
 * accepted so far for that name, `leaseTerm` the term the store has issued (0 if none).
 * Returns 'stale' for a term below the highest, 'unissued' for a term the store never issued.
 */
export function decideFence(term: number, highest: number, leaseTerm: number): 'ok' | 'stale' | 'unissued' {
  if (term < highest) return 'stale';
  if (term > leaseTerm) return 'unissued';
  return 'ok';
}

/**
 * A stream belongs to the lease of its first entry: an append under another lease's token is
 * refused with this (bad input, nothing written), never a StaleTermError (terms of different
 * leases are not comparable).
 */
export function foreignStreamError(stream: string, owner: string, lease: string): InvalidArgumentError {
  return new InvalidArgumentError('stream', `stream ${stream} belongs to lease ${owner}, not ${lease}`);
}
