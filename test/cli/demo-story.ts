/**
 * What every `tenure demo --via …` run must show, whatever the path: both failovers with higher
 * terms, the resumed leader's write refused, and a resource record with no stale write.
 */
import { expect } from 'vitest';
import { processAlive } from './helpers.js';

export interface DemoSummaryJson {
  ok: boolean;
  via: string;
  failovers: Array<{ cause: string; from: string; fromTerm: number; to: string; toTerm: number; ms: number }>;
  terms: Array<{ term: number; node: string; entries: number }>;
  staleRejected: number;
  entries: number;
  violations: string[];
  problems: string[];
  pids: number[];
  interrupted: boolean;
}

/** The story happened, and the resource's own record shows no stale write. */
export function expectTheStory(summary: DemoSummaryJson): void {
  expect(summary.violations).toEqual([]);
  expect(summary.problems).toEqual([]);
  expect(summary.ok).toBe(true);
  expect(summary.interrupted).toBe(false);
  expect(summary.staleRejected).toBeGreaterThanOrEqual(1);
  expect(summary.failovers.map((f) => f.cause)).toEqual(['pause', 'crash']);
  for (const f of summary.failovers) {
    expect(f.toTerm).toBeGreaterThan(f.fromTerm);
    expect(f.to).not.toBe(f.from);
    expect(f.ms).toBeGreaterThan(0);
  }
  const terms = summary.terms.map((t) => t.term);
  expect(terms).toEqual([...terms].sort((a, b) => a - b));
  expect(new Set(terms).size).toBe(terms.length);
  expect(summary.entries).toBeGreaterThan(0);
  expect(summary.terms.reduce((n, t) => n + t.entries, 0)).toBe(summary.entries);
  // The new leader's writes landed on the resource.
  const pause = summary.failovers[0]!;
  expect(summary.terms.find((t) => t.term === pause.toTerm)?.entries ?? 0).toBeGreaterThan(0);
  expect(summary.pids.length).toBeGreaterThanOrEqual(4); // three nodes and the restarted one
  for (const pid of summary.pids) expect(processAlive(pid)).toBe(false);
}
