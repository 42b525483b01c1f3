/**
 * `tenure chaos --store URL`: the chaos harness (src/chaos/harness.ts) on the user's own store.
 * Every flag is checked before anything is opened or written; the store must be shared by many
 * processes and able to delete by prefix (SQLite, PostgreSQL, MySQL, Redis).
 *
 * Exit codes: 0 the checker passed; 5 a safety rule broke (CHAOS_UNSAFE_EXIT); 1 the run failed
 * otherwise (no leader after the faults, a node crashed, the store went away, cleanup left
 * something); 2 bad input; 130 interrupted (after killing the nodes and cleaning up).
 */
import { existsSync, writeFileSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { InvalidArgumentError, redactSecrets } from '../core/index.js';
import { chaosFaults, connectionFaults, formatChaosReport, runChaosHarness, urlEndpoints } from '../chaos/harness.js';
import type { ChaosFault, ChaosReport } from '../chaos/harness.js';
import { durationOption, integerOption, parseCommand, renderHelp, stringOption } from './args.js';
import type { CommandSpec } from './args.js';
import type { CliIO } from './output.js';
import { onTermination } from './signals.js';
import { openCliStore, probeStore, storeTarget } from './store.js';

/** A safety rule broke during the run (distinct from 1, a run that failed otherwise). */
export const CHAOS_UNSAFE_EXIT = 5;
const INTERRUPTED_EXIT = 130;

/** The namespace's start: plain characters, so it is never a pattern or a path in any store. */
const NAMESPACE_SAFE = /^[A-Za-z0-9][A-Za-z0-9._-]{0,39}$/;

export const chaosSpec: CommandSpec = {
  name: 'chaos',
  usage: 'chaos --store URL [--nodes N] [--duration S] [--faults pause,kill,...] [--prefix P] [--seed N] [--report FILE]',
  summary: 'Run the fault harness on your store and check every safety rule.',
  description: [
    'Starts N local node processes that campaign for a few groups on the store and write fenced entries, while a seeded nemesis pauses (SIGSTOP past the TTL) and kills them, and, for a host:port store URL, breaks their connections through a fault proxy per node. Then the checker judges what the store kept against what the nodes saw, and the run deletes everything it wrote.',
    'Every name it uses starts with PREFIX<runid>/ (groups PREFIX<runid>/g0…, streams PREFIX<runid>/g0.log); nothing else is touched. Supported stores: sqlite:, postgres://, mysql://, redis:// (a store that can delete by prefix and is shared by processes).',
    `Faults: ${chaosFaults.join(', ')} (the connection faults need a host:port URL). Default: all that the URL allows.`,
    `Exit codes: 0 pass; ${CHAOS_UNSAFE_EXIT} a safety rule broke; 1 the run failed otherwise (no leader after the faults, a node crashed, cleanup incomplete); 2 bad input; 130 interrupted.`,
  ],
  options: {
    store: { type: 'string', value: 'URL', help: 'the store to run on (required; or $TENURE_STORE)' },
    nodes: { type: 'string', value: 'N', help: 'node processes, 2..32 (default 5)' },
    groups: { type: 'string', value: 'N', help: 'groups every node campaigns for, 1..16 (default 3)' },
    duration: { type: 'string', value: 'S', help: 'whole run, 6s..24h (default 30s)' },
    ttl: { type: 'string', value: 'MS', help: 'lease TTL, 500ms..60s (default 1500ms)' },
    faults: { type: 'string', value: 'LIST', help: `comma-separated: ${chaosFaults.join(',')}` },
    prefix: { type: 'string', value: 'P', help: 'namespace start, letters, digits, . _ - (default tenure-chaos-)' },
    seed: { type: 'string', value: 'N', help: 'seed of the fault schedule (default: random, printed)' },
    report: { type: 'string', value: 'FILE', help: 'also write the report as JSON to FILE' },
    mutation: { type: 'string', value: 'M', help: 'forge-token: a deliberate bug (nodes borrow the holder\'s term) to see the checker fail' },
  },
  examples: ['tenure chaos --store postgres://app@db:5432/app --duration 2m', 'tenure chaos --store sqlite:/tmp/chaos.db --faults pause,kill --report chaos.json'],
};

function parseFaults(text: string | undefined, proxyable: boolean): ChaosFault[] {
  if (text === undefined) return chaosFaults.filter((f) => proxyable || !(connectionFaults as readonly string[]).includes(f));
  const list = text.split(',').map((s) => s.trim());
  const out: ChaosFault[] = [];
  for (const item of list) {
    const f = chaosFaults.find((k) => k === item);
    if (!f) throw new InvalidArgumentError('--faults', `unknown fault '${item}' (have: ${chaosFaults.join(', ')})`);
    if (!proxyable && (connectionFaults as readonly string[]).includes(f)) throw new InvalidArgumentError('--faults', `${f} needs a store URL with host:port (the fault proxy stands there)`);
    if (!out.includes(f)) out.push(f);
  }
  return out;
}

export async function chaosCommand(argv: readonly string[], io: CliIO): Promise<number> {
  const args = parseCommand(chaosSpec, argv);
  if (args.help) {
    io.stdout.write(renderHelp(chaosSpec));
    return 0;
  }
  const flag = stringOption(args.values, 'store');
  if (flag === undefined && !(io.env.TENURE_STORE && io.env.TENURE_STORE.trim() !== '')) {
    throw new InvalidArgumentError('--store', 'required: the chaos run writes to the store you name, never to a default one');
  }
  const target = storeTarget(flag, io.env);
  if (target.options.kind === 'memory') throw new InvalidArgumentError('--store', 'the memory store lives in one process; the chaos run needs a store shared by many');
  const nodes = integerOption(args.values, 'nodes', 5, 2, 32);
  const groups = integerOption(args.values, 'groups', 3, 1, 16);
  const ttlMs = durationOption(args.values, 'ttl', 1500, 500, 60_000);
  const minMs = ttlMs + 4000;
  const durationMs = durationOption(args.values, 'duration', 30_000, minMs, 24 * 3600_000);
  const seedText = stringOption(args.values, 'seed');
  const seed = seedText === undefined ? Math.floor(Math.random() * 1_000_000) : integerOption(args.values, 'seed', 0, 0, 2 ** 31 - 1);
  const prefix = stringOption(args.values, 'prefix') ?? 'tenure-chaos-';
  if (!NAMESPACE_SAFE.test(prefix)) throw new InvalidArgumentError('--prefix', `expected 1..40 letters, digits, '.', '_' or '-' starting with a letter or digit, got '${prefix}'`);
  const faults = parseFaults(stringOption(args.values, 'faults'), urlEndpoints(target.url) !== null);
  const mutationText = stringOption(args.values, 'mutation');
  if (mutationText !== undefined && mutationText !== 'forge-token') throw new InvalidArgumentError('--mutation', `expected forge-token, got '${mutationText}'`);
  const reportText = stringOption(args.values, 'report');
  if (reportText !== undefined && reportText.trim() === '') throw new InvalidArgumentError('--report', 'expected a file name');
  const reportPath = reportText === undefined ? undefined : resolve(reportText);
  if (reportPath !== undefined && !existsSync(dirname(reportPath))) throw new InvalidArgumentError('--report', `no directory ${dirname(reportPath)}`);

  const store = await openCliStore(target);
  const controller = new AbortController();
  const removeHandlers = onTermination({
    stop: () => {
      io.stderr.write('tenure chaos: interrupted: killing the nodes and deleting what the run wrote\n');
      controller.abort();
    },
  });
  let report: ChaosReport;
  try {
    if (!store.purge) throw new InvalidArgumentError('--store', `the ${store.kind} store cannot delete by prefix, so a chaos run could not clean up after itself (supported: sqlite, postgres, mysql, redis, etcd, zk, azblob, raft)`);
    await probeStore(store, target, `${prefix}probe`);
    report = await runChaosHarness({
      store,
      url: target.url,
      nodes,
      groups,
      durationMs,
      ttlMs,
      faults,
      prefix,
      seed,
      ...(mutationText === 'forge-token' ? { mutation: 'forge-token' as const } : {}),
      log: (line) => void io.stdout.write(`${redactSecrets(line, [target.url])}\n`),
      signal: controller.signal,
    });
  } finally {
    removeHandlers();
    await store.close();
  }
  io.stdout.write(`${redactSecrets(formatChaosReport(report), [target.url])}\n`);
  if (reportPath !== undefined) {
    try {
      writeFileSync(reportPath, `${redactSecrets(JSON.stringify(report, null, 2), [target.url])}\n`);
    } catch (err) {
      throw new Error(`cannot write the report to ${reportPath}: ${(err as Error).message}`, { cause: err });
    }
  }
  if (report.verdict === 'aborted') return INTERRUPTED_EXIT;
  if (report.verdict === 'unsafe') return CHAOS_UNSAFE_EXIT;
  if (report.verdict === 'fail' || report.cleanup.left !== 0 || report.cleanup.error !== null) return 1;
  return 0;
}
