import type { Goal, Metric, Stats, Unit } from './types.js';

/**
 * Nearest-rank percentile: the smallest sample with at least q of all samples at or below it.
 * With 20 samples, p50 is the 10th smallest and p99 is the largest.
 */
export function percentile(sorted: readonly number[], q: number): number {
  if (sorted.length === 0) return Number.NaN;
  const rank = Math.max(1, Math.ceil(q * sorted.length));
  return sorted[rank - 1]!;
}

export function summarize(samples: readonly number[]): Stats {
  const sorted = [...samples].sort((a, b) => a - b);
  const n = sorted.length;
  return {
    n,
    min: n ? sorted[0]! : Number.NaN,
    max: n ? sorted[n - 1]! : Number.NaN,
    mean: n ? sorted.reduce((a, b) => a + b, 0) / n : Number.NaN,
    p50: percentile(sorted, 0.5),
    p99: percentile(sorted, 0.99),
  };
}

/** Whether `stats` meets `goal`. */
export function meets(stats: Stats, goal: Goal): boolean {
  if (stats.n === 0) return false;
  const v = stats[goal.stat];
  return (goal.max === undefined || v <= goal.max) && (goal.min === undefined || v >= goal.min);
}

/** A metric from its samples (ms unless `unit` says otherwise), judged against `goal` if given. */
export function metric(id: string, description: string, samples: readonly number[], goal?: Goal, unit: Unit = 'ms'): Metric {
  const stats = summarize(samples);
  const rounded = samples.map((s) => Math.round(s * 1000) / 1000);
  if (!goal) return { id, description, unit, samples: rounded, stats };
  return { id, description, unit, samples: rounded, stats, goal, pass: meets(stats, goal) };
}

/** Operations per second of `count` operations that took `ms` in all. */
export function opsPerSecond(count: number, ms: number): number {
  return ms > 0 ? (count * 1000) / ms : Number.NaN;
}
