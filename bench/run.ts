/**
 * Benchmark runner: `npm run bench` (builds first, since node processes run dist/ code).
 *
 *   tsx bench/run.ts [NAME...] [--cycles N] [--list]
 *
 * Runs every registered benchmark (or the named ones), prints a table for each, and writes
 * bench/results/<name>-<timestamp>.json plus bench/results/latest.md.
 * To add a benchmark (another store, Raft), add one entry to BENCHMARKS.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, relative } from 'node:path';
import { repoRoot } from '../test/fixtures/harness.js';
import { electionBenchmark } from './election.js';
import { environment, finish, markdown, textTable, timestamp, writeJson } from './lib/report.js';
import type { BenchResult, Benchmark } from './lib/types.js';

/** A fresh SQLite database file in a temporary directory. */
async function tempSqlite(): Promise<{ storeArg: string; cleanup: () => void }> {
  const dir = mkdtempSync(join(tmpdir(), 'tenure-bench-'));
  return { storeArg: join(dir, 'bench.db'), cleanup: () => rmSync(dir, { recursive: true, force: true }) };
}

const BENCHMARKS: readonly Benchmark[] = [
  electionBenchmark({ name: 'sqlite-election', target: 'sqlite', ttlMs: 2000, nodes: 3, prepare: tempSqlite }),
  // e.g. electionBenchmark({ name: 'postgres-election', target: 'postgres', ttlMs: 2000, nodes: 3,
  //        prepare: async () => ({ storeArg: 'postgres://…', cleanup: () => {} }) }),
];

function parseArgs(argv: readonly string[]): { names: string[]; cycles: number; list: boolean } {
  const names: string[] = [];
  let cycles = 20;
  let list = false;
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i]!;
    if (a === '--cycles') {
      cycles = Number(argv[++i]);
      if (!Number.isInteger(cycles) || cycles < 1) throw new Error(`--cycles needs a positive integer, got ${argv[i]}`);
    } else if (a === '--list') list = true;
    else if (a.startsWith('-')) throw new Error(`unknown option ${a} (use NAME... --cycles N --list)`);
    else names.push(a);
  }
  return { names, cycles, list };
}

async function main(): Promise<void> {
  const args = parseArgs(process.argv.slice(2));
  if (args.list) {
    for (const b of BENCHMARKS) console.log(`${b.name}\n  ${b.description}`);
    return;
  }
  const unknown = args.names.filter((n) => !BENCHMARKS.some((b) => b.name === n));
  if (unknown.length > 0) throw new Error(`unknown benchmark ${unknown.join(', ')}; known: ${BENCHMARKS.map((b) => b.name).join(', ')}`);
  const chosen = args.names.length > 0 ? BENCHMARKS.filter((b) => args.names.includes(b.name)) : BENCHMARKS;

  const root = repoRoot();
  const resultsDir = join(root, 'bench', 'results');
  const env = environment();
  const stamp = timestamp();
  console.log(`1-minute load average ${env.loadAvg.start} on ${env.cpus} CPUs`);
  const results: BenchResult[] = [];
  const files: string[] = [];
  for (const b of chosen) {
    console.log(`running ${b.name} (${args.cycles} cycles per scenario)...`);
    const result = await b.run({ cycles: args.cycles, log: (line) => console.log(`  ${line}`) });
    results.push(result);
    files.push(relative(root, writeJson(resultsDir, result, finish(env), stamp)));
    console.log(`\n${textTable(result)}\n`);
  }
  const command = `npm run bench${process.argv.length > 2 ? ` -- ${process.argv.slice(2).join(' ')}` : ''}`;
  writeFileSync(join(resultsDir, 'latest.md'), `${markdown(results, finish(env), stamp, command, files)}\n`);
  console.log(`results: ${[...files, relative(root, join(resultsDir, 'latest.md'))].join(', ')}`);
  const missed = results.flatMap((r) => r.metrics.filter((m) => m.pass === false).map((m) => `${r.name}/${m.id}`));
  if (missed.length > 0) console.log(`goals missed: ${missed.join(', ')}`);
}

main().catch((err: unknown) => {
  console.error(err instanceof Error ? (err.stack ?? err.message) : String(err));
  process.exit(1);
});
