/**
 * Benchmark runner: `npm run bench` (builds first, since node processes run dist/ code).
 *
 *   tsx bench/run.ts [NAME...] [--only WORD,WORD] [--cycles N] [--list]
 *
 * Runs every registered benchmark (or the named ones, or those `--only` selects by name or tag:
 * `--only postgres,redis`), prints a table for each, and writes
 * bench/results/<name>-<timestamp>.json plus bench/results/latest.md (rewritten after each
 * benchmark, so an interrupted run keeps what it measured). A benchmark that fails is reported
 * and the others still run; the exit code is 1 then.
 * To add a benchmark (another store, Raft), add one entry to BENCHMARKS.
 */
import { raftBenchmark } from './raft.js';
import { walBenchmark } from './wal.js';
import { raftTransportBenchmark } from './raft-transport.js';
import { raftNodeBenchmark } from './raft-node.js';
import { raftStoreBenchmark } from './raft-store.js';
import { raftClusterBenchmark, raftRestartBenchmark } from './raft-cluster.js';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, relative } from 'node:path';
import { repoRoot } from '../test/fixtures/harness.js';
import { electionBenchmark } from './election.js';
import { followBenchmark } from './follow.js';
import { workBenchmark } from './work.js';
import { brokerBenchmark } from './broker.js';
import { fencedHttpBenchmark } from './fenced-http.js';
import { etcdBenchmarks } from './etcd.js';
import { zookeeperBenchmarks } from './zookeeper.js';
import { fencedNatsBenchmark } from './fenced-nats.js';
import { fencedContextBenchmark } from './fenced-context.js';
import { environment, finish, markdown, textTable, timestamp, writeJson } from './lib/report.js';
import { freshMysql, freshPostgres, freshRedis, stopServers } from './lib/servers.js';
import type { BenchResult, Benchmark } from './lib/types.js';
import { redisLocksBenchmark } from './redis-locks.js';
import { sqlBenchmarks } from './sql.js';
import { fencedSqlBenchmarks } from './fenced-sql.js';
import { sqliteWritersBenchmark } from './sqlite-writers.js';

/** A fresh SQLite database file in a temporary directory. */
async function tempSqlite(): Promise<{ storeArg: string; cleanup: () => void }> {
  const dir = mkdtempSync(join(tmpdir(), 'tenure-bench-'));
  return { storeArg: join(dir, 'bench.db'), cleanup: () => rmSync(dir, { recursive: true, force: true }) };
}

const TTL_MS = 2000;
/** Issue 12 and 13: crash failover p50 <= TTL + 30 ms. */
const CRASH_30 = { stat: 'p50', max: TTL_MS + 30, label: 'TTL + 30 ms' } as const;
const PUSH_10 = { stat: 'p50', max: 10, label: '10 ms (push)' } as const;

const BENCHMARKS: readonly Benchmark[] = [
  electionBenchmark({ name: 'sqlite-election', target: 'sqlite', ttlMs: TTL_MS, nodes: 3, prepare: tempSqlite }),
  // Issue 20: appends/s of 1, 2 and 8 writer processes on one file, beside a leader at TTL 200 ms.
  sqliteWritersBenchmark(),
  // Issue 12: crash failover to the new leader's first fenced write. MySQL has no push: no handoff goal.
  electionBenchmark({ name: 'postgres-election', target: 'postgres', ttlMs: TTL_MS, nodes: 3, prepare: freshPostgres, firstWrite: true, handoffGoal: PUSH_10, crashGoal: CRASH_30 }),
  electionBenchmark({ name: 'mysql-election', target: 'mysql', ttlMs: TTL_MS, nodes: 3, prepare: freshMysql, firstWrite: true, handoffGoal: PUSH_10, crashGoal: CRASH_30 }),
  ...sqlBenchmarks,
  // Issue 22: fenced row update vs plain UPDATE.
  ...fencedSqlBenchmarks,
  // Issue 22: HTTP requests through the fence middleware and guard vs the plain handler.
  fencedHttpBenchmark(),
  // Issue 13.
  electionBenchmark({ name: 'redis-election', target: 'redis', ttlMs: TTL_MS, nodes: 3, prepare: freshRedis, handoffGoal: PUSH_10, crashGoal: CRASH_30 }),
  redisLocksBenchmark(),
  // Issue 14: tenure, the etcd3 package's Election and etcdctl elect on one private etcd.
  ...etcdBenchmarks,
  // Issue 27: the ZooKeeper store.
  ...zookeeperBenchmarks,
  // Issue 10: the Raft core alone.
  raftBenchmark(),
  // Issue 24: the Raft write-ahead log on this disk (save latency with fdatasync, group commit, open of 1 GiB).
  walBenchmark(),
  // Issue 24: the Raft transport on loopback (round trip, message rate, snapshot chunks).
  raftTransportBenchmark(),
  raftNodeBenchmark(),
  // Issue 24: the embedded Raft store (openRaftStore), three nodes in one process.
  raftStoreBenchmark(),
  // Issue 24: the Raft store as three processes beside a three-member etcd, interleaved rounds.
  raftClusterBenchmark(),
  raftRestartBenchmark(),
  // Issue 23: Model B, a follower tailing the leader's fenced stream (latency and catch-up).
  followBenchmark(),
  // Issue 23: the leader directs work.
  workBenchmark(),
  // Issue 23: Model C (broker: NATS JetStream, RabbitMQ streams) vs Model B on the same work.
  brokerBenchmark(),
  // Issue 22: fenced NATS publish + consume vs plain.
  fencedNatsBenchmark(),
  // Issue 22: the token context (runFenced, AsyncLocalStorage) on this Node.
  fencedContextBenchmark(),
];

interface Args {
  names: string[];
  only: string[];
  cycles: number;
  list: boolean;
}

function parseArgs(argv: readonly string[]): Args {
  const names: string[] = [];
  const only: string[] = [];
  let cycles = 20;
  let list = false;
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i]!;
    if (a === '--cycles') {
      cycles = Number(argv[++i]);
      if (!Number.isInteger(cycles) || cycles < 1) throw new Error(`--cycles needs a positive integer, got ${argv[i]}`);
    } else if (a === '--only') {
      const v = argv[++i];
      if (!v) throw new Error('--only needs a comma-separated list of names or tags, e.g. --only postgres,redis');
      only.push(...v.split(',').map((w) => w.trim()).filter((w) => w !== ''));
    } else if (a.startsWith('--only=')) only.push(...a.slice(7).split(',').filter((w) => w !== ''));
    else if (a === '--list') list = true;
    else if (a.startsWith('-')) throw new Error(`unknown option ${a} (use NAME... --only WORD,WORD --cycles N --list)`);
    else names.push(a);
  }
  return { names, only, cycles, list };
}

/** Names and tags a benchmark answers to. */
const words = (b: Benchmark): string[] => [b.name, ...(b.tags ?? [])];

async function main(): Promise<void> {
  const args = parseArgs(process.argv.slice(2));
  if (args.list) {
    for (const b of BENCHMARKS) console.log(`${b.name} [${(b.tags ?? []).join(', ')}]\n  ${b.description}`);
    return;
  }
  const selectors = [...args.names, ...args.only];
  const unknown = selectors.filter((n) => !BENCHMARKS.some((b) => words(b).includes(n)));
  if (unknown.length > 0) {
    const known = [...new Set(BENCHMARKS.flatMap(words))].sort();
    throw new Error(`unknown benchmark or tag ${unknown.join(', ')}; known: ${known.join(', ')}`);
  }
  const chosen = selectors.length > 0 ? BENCHMARKS.filter((b) => words(b).some((w) => selectors.includes(w))) : BENCHMARKS;

  const root = repoRoot();
  const resultsDir = join(root, 'bench', 'results');
  const env = environment();
  const stamp = timestamp();
  console.log(`1-minute load average ${env.loadAvg.start} on ${env.cpus} CPUs`);
  const results: BenchResult[] = [];
  const files: string[] = [];
  const failed: string[] = [];
  const command = `npm run bench${process.argv.length > 2 ? ` -- ${process.argv.slice(2).join(' ')}` : ''}`;
  const writeLatest = (): void => {
    const failures = failed.length > 0 ? `\n## Failed\n\n${failed.map((f) => `- ${f}`).join('\n')}\n` : '';
    writeFileSync(join(resultsDir, 'latest.md'), `${markdown(results, finish(env), stamp, command, files)}${failures}\n`);
  };
  try {
    for (const b of chosen) {
      console.log(`running ${b.name} (${args.cycles} cycles per scenario where it has cycles)...`);
      try {
        const result = await b.run({ cycles: args.cycles, log: (line) => console.log(`  ${line}`) });
        results.push(result);
        files.push(relative(root, writeJson(resultsDir, result, finish(env), stamp)));
        console.log(`\n${textTable(result)}\n`);
      } catch (err) {
        const message = err instanceof Error ? err.message : String(err);
        failed.push(`${b.name}: ${message.split('\n')[0]}`);
        console.error(`${b.name} failed: ${err instanceof Error ? (err.stack ?? message) : message}`);
      }
      writeLatest();
    }
  } finally {
    await stopServers();
  }
  console.log(`1-minute load average ${finish(env).loadAvg.end} at the end`);
  console.log(`results: ${[...files, relative(root, join(resultsDir, 'latest.md'))].join(', ')}`);
  const missed = results.flatMap((r) => r.metrics.filter((m) => m.pass === false).map((m) => `${r.name}/${m.id}`));
  if (missed.length > 0) console.log(`goals missed: ${missed.join(', ')}`);
  if (failed.length > 0) {
    console.log(`benchmarks failed: ${failed.join('; ')}`);
    process.exitCode = 1;
  }
}

main().then(
  // Drivers and watchdogs may keep handles open: leave once the report is written.
  () => process.exit(process.exitCode ?? 0),
  (err: unknown) => {
    console.error(err instanceof Error ? (err.stack ?? err.message) : String(err));
    process.exit(1);
  },
);
