/**
 * tsx test/sim/raft/cli.ts --seeds N [--from S] [--nodes 3|5] [--ticks T] [--lin-only] [--quiet] [--json]
 *
 * Runs the Raft simulation for seeds S .. S+N-1 (S defaults to 1). Without --nodes, odd seeds run
 * 3 nodes and even seeds 5. Prints the report of the first violations (seed, how to reproduce, a
 * minimal trace, the non-linearizable part of the history) and ends with one summary line that
 * includes `violations N`. Exits 1 when any seed fails, 2 on bad usage. --lin-only turns off the
 * step-by-step safety checks, leaving the linearizability checker (and the liveness check) alone.
 * --json adds, after the summary, one line of JSON: `{ from, seeds, totals, failures }` (every
 * SimStats counter summed; each failing seed with its node count and violation kind), which the
 * CI test reads from the processes it spreads the seeds over.
 */
import { parseArgs } from 'node:util';
import { nodesFor } from './seeds.js';
import { runSeed, type SimResult, type SimStats } from './simulation.js';

const usage = 'usage: tsx test/sim/raft/cli.ts --seeds N [--from S] [--nodes 3|5] [--ticks T] [--lin-only] [--quiet] [--json]';

function fail(message: string): never {
  process.stderr.write(`sim raft: ${message}\n${usage}\n`);
  process.exit(2);
}

function integer(name: string, text: string | undefined, fallback: number, min: number): number {
  if (text === undefined) return fallback;
  if (!/^\d+$/.test(text) || Number(text) < min) fail(`--${name} expects an integer >= ${min}, got '${text}'`);
  return Number(text);
}

function main(): void {
  let values;
  try {
    ({ values } = parseArgs({
      options: {
        seeds: { type: 'string' },
        from: { type: 'string' },
        nodes: { type: 'string' },
        ticks: { type: 'string' },
        quiet: { type: 'boolean' },
        json: { type: 'boolean' },
        'lin-only': { type: 'boolean' },
        help: { type: 'boolean', short: 'h' },
      },
    }));
  } catch (err) {
    fail((err as Error).message);
  }
  if (values.help === true) {
    process.stdout.write(`${usage}\n`);
    return;
  }
  const seeds = integer('seeds', values.seeds, 100, 1);
  const from = integer('from', values.from, 1, 0);
  const nodes = values.nodes === undefined ? undefined : integer('nodes', values.nodes, 3, 3);
  if (nodes !== undefined && nodes !== 3 && nodes !== 5) fail(`--nodes expects 3 or 5, got ${nodes}`);
  const ticks = values.ticks === undefined ? undefined : integer('ticks', values.ticks, 300, 10);

  const started = performance.now();
  const failures: SimResult[] = [];
  const totals: Partial<Record<keyof SimStats, number>> = {};
  const total = (k: keyof SimStats): number => totals[k] ?? 0;
  for (let seed = from; seed < from + seeds; seed++) {
    const r = runSeed({ seed, nodes: nodesFor(seed, nodes), faultTicks: ticks, stepChecks: values['lin-only'] !== true });
    for (const [k, v] of Object.entries(r.stats) as [keyof SimStats, number][]) totals[k] = (totals[k] ?? 0) + v;
    if (r.violation !== undefined) {
      failures.push(r);
      if (failures.length <= 3) process.stdout.write(`${r.violation.report}\n\n`);
    }
    const done = seed - from + 1;
    if (values.quiet !== true && done % 500 === 0 && done < seeds) {
      process.stdout.write(`… ${done}/${seeds} seeds, ${failures.length} violations\n`);
    }
  }
  const secs = (performance.now() - started) / 1000;
  if (failures.length > 3) process.stdout.write(`further failing seeds: ${failures.slice(3).map((f) => f.seed).join(' ')}\n`);
  const kinds = new Map<string, number>();
  for (const f of failures) kinds.set(f.violation!.kind, (kinds.get(f.violation!.kind) ?? 0) + 1);
  const byKind = [...kinds].map(([k, n]) => `${k} ${n}`).join(', ');
  process.stdout.write(
    `raft sim: seeds ${from}..${from + seeds - 1} (${nodes === undefined ? '3 and 5' : nodes} nodes), ${(seeds / secs).toFixed(1)} seeds/s, ` +
      `ops ${total('ops')} (completed ${total('completed')}, ambiguous ${total('ambiguous')}), leaders ${total('leaders')}, crashes ${total('crashes')}, ` +
      `partitions ${total('partitions')}, conf changes ${total('confChanges')}, transfers ${total('transfers')}, snapshots ${total('snapshotsSent')}, ` +
      `stalled ${total('stalled')}, violations ${failures.length}${byKind === '' ? '' : ` (${byKind})`}\n`,
  );
  if (values.json === true) {
    const list = failures.map((f) => ({ seed: f.seed, nodes: f.nodes, kind: f.violation!.kind }));
    process.stdout.write(`${JSON.stringify({ from, seeds, totals, failures: list })}\n`);
  }
  process.exitCode = failures.length > 0 ? 1 : 0;
}

main();
