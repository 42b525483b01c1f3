/**
 * tsx test/sim/classic/cli.ts --seeds N [--from S] [--algorithm bully|ring|both] [--nodes 3..5] [--partitions] [--quiet] [--json]
 *
 * Runs the classic elections' simulation for seeds S .. S+N-1 (S defaults to 1). Without
 * --nodes, seeds run 3, 4 and 5 nodes in turn. Prints the report of the first violations (seed,
 * how to reproduce, the end of the trace) and one summary line per algorithm that includes
 * `violations N` and `split brains N`. Without --partitions, any violation fails (exit 1): one
 * leader per term, terms that never go back, and an election settled on the highest id once the
 * faults stop. With --partitions the same properties are checked, and the split brains (two
 * leaders at once on the two sides of a partition) are counted: these elections are not safe
 * under partitions, and the run shows it. Exit 2 on bad usage. --json adds one line of JSON.
 */
import { parseArgs } from 'node:util';
import { report, runSeed, type Algorithm, type SimResult, type SimStats } from './simulation.js';

const usage = 'usage: tsx test/sim/classic/cli.ts --seeds N [--from S] [--algorithm bully|ring|both] [--nodes 3..5] [--partitions] [--quiet] [--json]';

function fail(message: string): never {
  process.stderr.write(`sim classic: ${message}\n${usage}\n`);
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
        algorithm: { type: 'string' },
        nodes: { type: 'string' },
        partitions: { type: 'boolean' },
        quiet: { type: 'boolean' },
        json: { type: 'boolean' },
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
  if (nodes !== undefined && nodes > 5) fail(`--nodes expects 3, 4 or 5, got ${nodes}`);
  const which = values.algorithm ?? 'both';
  if (which !== 'bully' && which !== 'ring' && which !== 'both') fail(`--algorithm expects bully, ring or both, got '${which}'`);
  const algorithms: Algorithm[] = which === 'both' ? ['bully', 'ring'] : [which];
  const partitions = values.partitions === true;

  let failed = 0;
  const json: unknown[] = [];
  for (const algorithm of algorithms) {
    const started = performance.now();
    const failures: SimResult[] = [];
    const totals: Partial<Record<keyof SimStats, number>> = {};
    let seedsWithSplitBrain = 0;
    for (let seed = from; seed < from + seeds; seed++) {
      const r = runSeed({ seed, algorithm, partitions, ...(nodes === undefined ? {} : { nodes }) });
      for (const [k, v] of Object.entries(r.stats) as [keyof SimStats, number][]) totals[k] = (totals[k] ?? 0) + v;
      if (r.stats.splitBrains > 0) seedsWithSplitBrain++;
      if (r.violations.length > 0) {
        failures.push(r);
        if (failures.length <= 3) process.stdout.write(`${report(r, partitions)}\n\n`);
      }
      const done = seed - from + 1;
      if (values.quiet !== true && done % 1000 === 0 && done < seeds) process.stdout.write(`… ${algorithm}: ${done}/${seeds} seeds, ${failures.length} violations\n`);
    }
    const secs = (performance.now() - started) / 1000;
    const t = (k: keyof SimStats): number => totals[k] ?? 0;
    if (failures.length > 3) process.stdout.write(`further failing seeds: ${failures.slice(3).map((f) => f.seed).join(' ')}\n`);
    process.stdout.write(
      `classic sim ${algorithm}${partitions ? ' with partitions' : ''}: seeds ${from}..${from + seeds - 1}, ${(seeds / secs).toFixed(1)} seeds/s, ` +
        `elections ${t('elections')}, crashes ${t('crashes')}, partitions ${t('partitions')}, messages ${t('messages')} (dropped ${t('dropped')}, duplicated ${t('duplicated')}), ` +
        `overlapping leaders ${t('overlaps')}, split brains ${t('splitBrains')} (in ${seedsWithSplitBrain} seeds), violations ${failures.length}\n`,
    );
    failed += failures.length;
    json.push({ algorithm, partitions, from, seeds, totals, seedsWithSplitBrain, failures: failures.map((f) => ({ seed: f.seed, kinds: [...new Set(f.violations.map((v) => v.kind))] })) });
  }
  if (values.json === true) process.stdout.write(`${JSON.stringify(json)}\n`);
  process.exitCode = failed > 0 ? 1 : 0;
}

main();
