/**
 * Text for people: the report of a failing seed, and the summary of many.
 */
import { formatViolation } from './checker.js';
import { describePlan } from './plan.js';
import type { SimMode } from './plan.js';
import { formatTime } from './trace.js';
import type { SimResult } from './simulation.js';

/** Events shown past the first violation, for what happened next. */
const AFTER = 10;

/** Everything needed to understand and reproduce one failing seed. */
export function failureReport(result: SimResult, traceLines = 60): string {
  const variantFlag = (result.plan.mode === 'shell' ? '' : ` --mode ${result.plan.mode}`) + (result.plan.variant === 'none' ? '' : ` --variant ${result.plan.variant}`);
  const first = result.violations[0];
  const until = first?.at ?? Infinity;
  const shown = result.trace.events.filter((e) => e.t <= until).length;
  return [
    `FAIL seed ${result.seed}: ${result.violations.length} violation(s)`,
    ...result.violations.slice(0, 20).map((v) => `  - ${formatViolation(v)}`),
    ...(result.violations.length > 20 ? [`  … ${result.violations.length - 20} more`] : []),
    describePlan(result.plan),
    `last ${Math.min(traceLines, shown)} of ${result.trace.events.length} events up to the first violation at t=${first ? formatTime(first.at) : 'end'}, and ${AFTER} after (virtual ms, node, event):`,
    result.trace.format(traceLines, until, AFTER),
    `reproduce: npm run sim -- --seeds 1 --from ${result.seed}${variantFlag} --trace ${traceLines}`,
  ].join('\n');
}

export interface Totals {
  seeds: number;
  failedSeeds: number[];
  violations: number;
  elections: number;
  appendsOk: number;
  appendsStale: number;
  appendsAmbiguous: number;
  lateSends: number;
}

export function emptyTotals(): Totals {
  return { seeds: 0, failedSeeds: [], violations: 0, elections: 0, appendsOk: 0, appendsStale: 0, appendsAmbiguous: 0, lateSends: 0 };
}

export function addResult(totals: Totals, result: SimResult): void {
  totals.seeds++;
  if (result.violations.length > 0) totals.failedSeeds.push(result.seed);
  totals.violations += result.violations.length;
  totals.elections += result.stats.elections;
  totals.appendsOk += result.stats.appendsOk;
  totals.appendsStale += result.stats.appendsStale;
  totals.appendsAmbiguous += result.stats.appendsAmbiguous;
  totals.lateSends += result.stats.lateSends;
}

/** One line; it ends with `violations N`. */
export function summaryLine(totals: Totals, from: number, elapsedMs: number, mode: SimMode = 'shell'): string {
  const rate = totals.seeds / Math.max(elapsedMs / 1000, 1e-9);
  const failed = totals.failedSeeds.length > 0 ? `, failed seeds ${totals.failedSeeds.slice(0, 10).join(' ')}${totals.failedSeeds.length > 10 ? ' …' : ''}` : '';
  return (
    `sim: seeds ${from}..${from + totals.seeds - 1} (${totals.seeds})${mode === 'shell' ? '' : ` ${mode} mode`} in ${(elapsedMs / 1000).toFixed(1)} s, ${rate.toFixed(1)} seeds/s; ` +
    `elections ${totals.elections}, appends ok ${totals.appendsOk} stale ${totals.appendsStale} ambiguous ${totals.appendsAmbiguous}, ` +
    `late sends ${totals.lateSends}${failed}, violations ${totals.violations}`
  );
}
