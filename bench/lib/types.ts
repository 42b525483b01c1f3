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

/** A target a metric is reported against, e.g. handoff p50 <= 60 ms. */
export interface Goal {
  readonly stat: 'p50' | 'p99' | 'mean' | 'max';
  readonly maxMs: number;
  /** How the limit was derived, e.g. "TTL + 60 ms". */
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
  readonly unit: 'ms';
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
  run(options: BenchOptions): Promise<BenchResult>;
}
