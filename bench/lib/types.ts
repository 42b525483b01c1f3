/**
 * What a benchmark is and what it hands back. A new benchmark (another store, Raft) implements
 * `Benchmark` and is added as one entry in bench/run.ts.
 */

export interface BenchOptions {
  /** Samples to take per measured scenario. */
  readonly cycles: number;
  /** Print progress lines. */
  readonly log: (line: string) => void;
}

/** What a metric's samples are: latencies in ms, rates in operations per second, or ratios. */
export type Unit = 'ms' | 'ops/s' | 'MB/s' | 'x' | 'count';

/**
 * A target a metric is reported against, e.g. handoff p50 <= 60 ms (`max`), or a throughput
 * ratio p50 >= 0.85 (`min`). Exactly one of `max` and `min` is set.
 */
export interface Goal {
  readonly stat: 'p50' | 'p99' | 'mean' | 'max' | 'min';
  /** The stat must be at most this (in the metric's unit). */
  readonly max?: number;
  /** The stat must be at least this (in the metric's unit). */
  readonly min?: number;
  /** How the limit was derived, e.g. "TTL + 60 ms" or "1.05 × raw p50". */
  readonly label: string;
}

export interface Stats {
  readonly n: number;
  readonly min: number;
  readonly max: number;
  readonly mean: number;
  readonly p50: number;
  readonly p99: number;
}

export interface Metric {
  /** Short id, e.g. `handoff`. */
  readonly id: string;
  /** What exactly is measured, from which instant to which. */
  readonly description: string;
  readonly unit: Unit;
  readonly samples: readonly number[];
  readonly stats: Stats;
  readonly goal?: Goal;
  /** Whether the goal was met (absent when there is no goal). */
  readonly pass?: boolean;
}

export interface BenchResult {
  readonly name: string;
  readonly description: string;
  /** Store or system under test (`sqlite`, `postgres`, `raft`...). */
  readonly target: string;
  readonly params: Readonly<Record<string, string | number | boolean>>;
  readonly metrics: readonly Metric[];
  /** Observations worth keeping with the numbers (retries, anomalies). */
  readonly notes: readonly string[];
  readonly durationMs: number;
}

export interface Benchmark {
  readonly name: string;
  readonly description: string;
  /** Words `--only` selects it by besides its name (the stores it uses: `postgres`, `redis`...). */
  readonly tags?: readonly string[];
  run(options: BenchOptions): Promise<BenchResult>;
}
