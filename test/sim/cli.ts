/**
 * npm run sim -- [election] --seeds N [--from S] [--mode shell|machine] [--variant none|margin-zero|unfenced|fake-ack|slow-clock] [--trace LINES] [--full] [--quiet]
 * npm run sim -- raft --seeds N [--from S] [--nodes 3|5]     (the Raft core's simulation: test/sim/raft/cli.ts)
 *
 * Runs seeds S .. S+N-1, prints a progress line now and then, the report of the first failing
 * seeds, and one summary line ending with `violations N`. Exits 1 when any seed fails, 2 on bad usage.
 * `--mode machine` steps the pure elector machine directly (machine-simulation.ts) instead of
 * running LeaderElector (`shell`, the default); `--quiet` leaves out the progress lines.
 */
import { parseArgs } from 'node:util';
import { runMachineSeed } from './machine-simulation.js';
import { modes, variants } from './plan.js';
import type { SimMode, Variant } from './plan.js';
import { addResult, emptyTotals, failureReport, summaryLine } from './report.js';
import { runSeed } from './simulation.js';

const usage = 'usage: npm run sim -- --seeds N [--from S] [--mode shell|machine] [--variant none|margin-zero|unfenced|fake-ack|slow-clock] [--trace LINES] [--full] [--quiet]';

function fail(message: string): never {
  process.stderr.write(`sim: ${message}\n${usage}\n`);
  process.exit(2);
}

function integer(name: string, text: string | undefined, fallback: number, min: number): number {
  if (text === undefined) return fallback;
  if (!/^\d+$/.test(text) || Number(text) < min) fail(`--${name} expects an integer >= ${min}, got '${text}'`);
  return Number(text);
}

async function main(): Promise<void> {
  let values;
  try {
    ({ values } = parseArgs({
      options: {
        seeds: { type: 'string' },
        from: { type: 'string' },
        mode: { type: 'string' },
        variant: { type: 'string' },
        trace: { type: 'string' },
        full: { type: 'boolean' },
        quiet: { type: 'boolean' },
        help: { type: 'boolean', short: 'h' },
      },
    }));
  } catch (err) {
    fail((err as Error).message);
  }
  if (values.help) {
    process.stdout.write(`${usage}\n`);
    return;
  }
  const seeds = integer('seeds', values.seeds, 100, 1);
  const from = integer('from', values.from, 0, 0);
  const traceLines = integer('trace', values.trace, 60, 0);
  const variant = (values.variant ?? 'none') as Variant;
  if (!variants.includes(variant)) fail(`--variant must be one of ${variants.join(', ')}, got '${values.variant}'`);
  const mode = (values.mode ?? 'shell') as SimMode;
  if (!modes.includes(mode)) fail(`--mode must be one of ${modes.join(', ')}, got '${values.mode}'`);

  const totals = emptyTotals();
  const started = performance.now();
  let lastProgress = started;
  let reported = 0;
  for (let seed = from; seed < from + seeds; seed++) {
    const result = mode === 'machine' ? runMachineSeed(seed, { variant }) : await runSeed(seed, { variant });
    addResult(totals, result);
    if (values.full) process.stdout.write(`${result.trace.format()}\n`);
    if (result.violations.length > 0 && reported++ < 3) process.stdout.write(`\n${failureReport(result, traceLines)}\n\n`);
    const now = performance.now();
    if (!values.quiet && (now - lastProgress > 2000 || seed === from + seeds - 1)) {
      lastProgress = now;
      const rate = totals.seeds / ((now - started) / 1000);
      process.stdout.write(`progress ${totals.seeds}/${seeds} seeds, ${rate.toFixed(1)} seeds/s, failed seeds ${totals.failedSeeds.length}\n`);
    }
  }
  process.stdout.write(`${summaryLine(totals, from, performance.now() - started, mode)}\n`);
  if (totals.violations > 0) process.exitCode = 1;
}

// The first word picks the simulation: the elector's (default) or the Raft core's.
if (process.argv[2] === 'raft') {
  process.argv.splice(2, 1);
  await import('./raft/cli.js');
} else {
  if (process.argv[2] === 'election') process.argv.splice(2, 1);
  await main();
}
