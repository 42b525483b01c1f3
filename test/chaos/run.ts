/**
 * npm run chaos -- --store sqlite|all [--duration 60s] [--seed N] [--nodes 5] [--groups 3] [--followers 3] [--ttl MS] [--keep] [--quiet]
 *                   [--mutation forge-token|skip-entry]   (a deliberate bug: the run must then fail)
 *
 * Runs the chaos suite on one store or on every chaos backend (`all`), one after the other, and
 * prints one summary line per store:
 *   chaos sqlite: cycles N, faults N, accepted N, rejected N, ambiguous N, violations 0
 * On any violation it prints the seed and the offending part of the history and exits 1.
 * Bad usage exits 2.
 */
import { parseArgs } from 'node:util';
import { parseDuration } from '../../src/core/index.js';
import { chaosBackend, chaosBackends } from './backends.js';
import type { ChaosBackend } from './backends.js';
import { abortAllRuns, cleanUp, detailLines, failureReport, runChaos, summaryLine } from './runner.js';
import type { ChaosMutation, ChaosResult } from './runner.js';

const usage =
  'usage: npm run chaos -- --store NAME|all [--duration 60s] [--seed N] [--nodes 5] [--groups 3] [--followers 3] [--ttl MS] [--keep] [--quiet] [--mutation forge-token|skip-entry]\n' +
  `stores: ${chaosBackends.map((b) => b.name).join(', ')} (memory is one process only and has no chaos run)`;

function fail(message: string): never {
  process.stderr.write(`chaos: ${message}\n${usage}\n`);
  process.exit(2);
}

function integer(name: string, text: string | undefined, fallback: number, min: number, max: number): number {
  if (text === undefined) return fallback;
  if (!/^\d+$/.test(text) || Number(text) < min || Number(text) > max) fail(`--${name} expects an integer from ${min} to ${max}, got '${text}'`);
  return Number(text);
}

function duration(name: string, text: string | undefined, fallback: number): number {
  if (text === undefined) return fallback;
  try {
    return parseDuration(name, text);
  } catch (err) {
    fail((err as Error).message);
  }
}

async function main(): Promise<void> {
  let values;
  try {
    ({ values } = parseArgs({
      options: {
        store: { type: 'string' },
        duration: { type: 'string' },
        seed: { type: 'string' },
        nodes: { type: 'string' },
        groups: { type: 'string' },
        followers: { type: 'string' },
        ttl: { type: 'string' },
        keep: { type: 'boolean' },
        mutation: { type: 'string' },
        quiet: { type: 'boolean', short: 'q' },
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
  const name = values.store ?? 'sqlite';
  let selected: readonly ChaosBackend[];
  if (name === 'all') selected = chaosBackends;
  else {
    const b = chaosBackend(name);
    if (!b) {
      if (name === 'memory') fail('the memory store lives in one process; the chaos suite needs a store shared by many processes');
      fail(`no chaos backend '${name}' (have: ${chaosBackends.map((x) => x.name).join(', ')}, all)`);
    }
    selected = [b];
  }
  const durationMs = duration('duration', values.duration, 60_000);
  const seed = integer('seed', values.seed, Date.now() % 1_000_000, 0, 2 ** 31 - 1);
  const nodes = integer('nodes', values.nodes, 5, 2, 50);
  const groups = integer('groups', values.groups, 3, 1, 50);
  const followers = integer('followers', values.followers, 3, 0, 20);
  const ttlMs = values.ttl === undefined ? undefined : duration('ttl', values.ttl, 1500);
  const mutations: readonly ChaosMutation[] = ['forge-token', 'skip-entry'];
  const mutation = mutations.find((m) => m === values.mutation);
  if (values.mutation !== undefined && mutation === undefined) fail(`--mutation must be forge-token or skip-entry, got '${values.mutation}'`);
  const log = values.quiet ? undefined : (line: string): void => void process.stdout.write(`${line}\n`);

  const results: ChaosResult[] = [];
  let failed = false;
  for (const backend of selected) {
    const why = backend.unavailable?.() ?? null;
    if (why !== null) {
      process.stdout.write(`chaos ${backend.name}: skipped, ${why}\n`);
      if (name !== 'all') failed = true;
      continue;
    }
    if (backend.knownIssue) process.stdout.write(`chaos ${backend.name}: known issue (skipped in CI): ${backend.knownIssue}\n`);
    let result: ChaosResult;
    try {
      result = await runChaos(backend, { durationMs, seed, nodes, groups, followers, ttlMs, keep: values.keep, log, mutation });
    } catch (err) {
      process.stdout.write(`chaos ${backend.name}: could not run (seed ${seed}): ${(err as Error).stack ?? String(err)}\n`);
      failed = true;
      continue;
    }
    results.push(result);
    if (!values.quiet) for (const line of detailLines(result)) process.stdout.write(`${line}\n`);
    if (result.violations.length > 0) {
      failed = true;
      process.stdout.write(`${failureReport(result)}\n`);
    } else cleanUp(result);
    process.stdout.write(`${summaryLine(result)}\n`);
  }
  if (results.length > 1) for (const r of results) process.stdout.write(`${summaryLine(r)}\n`);
  process.exitCode = failed ? 1 : 0;
}

let interrupted = false;
for (const signal of ['SIGINT', 'SIGTERM'] as const) {
  process.on(signal, () => {
    // kill -9 every node (a paused one would otherwise stay stopped) and stop private instances.
    if (interrupted) process.exit(130);
    interrupted = true;
    process.stderr.write('chaos: interrupted, killing nodes\n');
    setTimeout(() => process.exit(130), 5000).unref();
    void abortAllRuns().finally(() => process.exit(130));
  });
}

main().catch((err: unknown) => {
  process.stderr.write(`chaos: ${(err as Error).stack ?? String(err)}\n`);
  process.exit(1);
});
