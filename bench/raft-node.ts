/**
 * The Raft node (src/raft/node) end to end: three nodes on loopback, each with its own WAL on
 * this machine's disk (real fdatasync) and the TCP transport between them. Node 1 runs in this
 * process and takes the proposals; nodes 2 and 3 run in child processes (bench/fixtures/
 * raft-node-member.mjs), or in this process too for the `-1proc` metrics.
 *
 * - commit latency: one 100-byte proposal at a time, from `propose` to its promise resolving
 *   (leader fsync, append to both followers, their fsync, acknowledgement, commit, apply);
 * - throughput: 100-byte proposals with 256 in flight, proposals/s;
 * - failover (all three in this process): the leader is closed (its sockets close, as the kernel
 *   closes a killed process's), until a proposal commits on the new leader; election timeout
 *   300 ms, heartbeat 50 ms (the defaults). The closed node is restarted between rounds.
 *
 *   npx tsx bench/run.ts raft-node        // after npm run build (npm run bench -- raft-node builds first)
 *   TENURE_BENCH_DIR=/mnt/disk ...        // where the data directories go (default: the OS temporary directory)
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import type { RaftNode as RaftNodeType } from '../src/raft/node/index.js';
import { freePort } from '../test/fixtures/ports.js';
import { RaftNode } from './lib/built.js';
import { metric, opsPerSecond } from './lib/stats.js';
import type { BenchOptions, BenchResult, Benchmark } from './lib/types.js';

const SECRET = 'raft node bench secret 0123456789';
const ENTRY_BYTES = 100;
const IN_FLIGHT = 256;
const WARMUP = 200;

export interface RaftNodeBenchResult {
  readonly latencyMs: number[];
  readonly opsPerSecond: number;
}

function silentNode(id: number, dir: string, peers: Record<number, string>, log?: (line: string) => void): Promise<RaftNodeType<void>> {
  return RaftNode.start<void>({ id, dataDir: dir, listen: peers[id]!, peers, clusterId: 'bench', secret: SECRET, apply: () => {}, snapshot: () => new Uint8Array(), restore: () => {}, ...(log ? { log } : {}) });
}

async function child(id: number, dir: string, peers: Record<number, string>): Promise<ChildProcess> {
  const script = fileURLToPath(new URL('./fixtures/raft-node-member.mjs', import.meta.url));
  const c = spawn(process.execPath, [script, String(id), dir, JSON.stringify(peers), SECRET], { stdio: ['pipe', 'pipe', 'inherit'] });
  await new Promise<void>((resolve, reject) => {
    c.once('exit', (code) => reject(new Error(`raft-node-member ${id} exited with ${code} before it was ready`)));
    c.stdout!.on('data', (d: Buffer) => {
      if (d.toString().includes('ready')) resolve();
    });
  });
  return c;
}

/** Runs one cluster: `samples` sequential proposals, then `total` with IN_FLIGHT in flight. */
export async function runRaftNodeBench(samples = 2000, total = 20_000, childProcesses = true): Promise<RaftNodeBenchResult> {
  const root = mkdtempSync(join(process.env.TENURE_BENCH_DIR ?? tmpdir(), 'tenure-raft-node-'));
  const peers: Record<number, string> = {};
  for (const id of [1, 2, 3]) peers[id] = `127.0.0.1:${await freePort()}`;
  const children: ChildProcess[] = [];
  const local: RaftNodeType<void>[] = [];
  try {
    for (const id of [2, 3]) {
      if (childProcesses) children.push(await child(id, join(root, `n${id}`), peers));
      else local.push(await silentNode(id, join(root, `n${id}`), peers));
    }
    const leader = await silentNode(1, join(root, 'n1'), peers);
    local.push(leader);
    const deadline = performance.now() + 10_000;
    while (!leader.isLeader) {
      if (performance.now() > deadline) throw new Error('node 1 did not become leader within 10 s');
      leader.campaign();
      await new Promise((r) => setTimeout(r, 100));
    }
    const data = new Uint8Array(ENTRY_BYTES).fill(42);
    const latencyMs: number[] = [];
    for (let i = 0; i < WARMUP + samples; i++) {
      const t0 = performance.now();
      await leader.propose(data);
      if (i >= WARMUP) latencyMs.push(performance.now() - t0);
    }
    let started = 0;
    const t0 = performance.now();
    const worker = async (): Promise<void> => {
      while (started < total) {
        started++;
        await leader.propose(data);
      }
    };
    await Promise.all(Array.from({ length: IN_FLIGHT }, worker));
    return { latencyMs, opsPerSecond: opsPerSecond(total, performance.now() - t0) };
  } finally {
    await Promise.all(local.map((n) => n.close()));
    await Promise.all(
      children.map(
        (c) =>
          new Promise<void>((r) => {
            c.once('exit', () => r());
            c.stdin!.end();
          }),
      ),
    );
    rmSync(root, { recursive: true, force: true });
  }
}

/** `rounds` failovers of a three-node cluster in this process: leader closed -> next commit, ms. */
export async function runFailoverBench(rounds = 10): Promise<number[]> {
  const root = mkdtempSync(join(process.env.TENURE_BENCH_DIR ?? tmpdir(), 'tenure-raft-failover-'));
  const peers: Record<number, string> = {};
  for (const id of [1, 2, 3]) peers[id] = `127.0.0.1:${await freePort()}`;
  const nodes = new Map<number, RaftNodeType<void>>();
  const start = async (id: number): Promise<void> => {
    // The closed leader's peers log one "cannot reach" line per round: expected here, not shown.
    nodes.set(id, await silentNode(id, join(root, `n${id}`), peers, () => {}));
  };
  const data = new Uint8Array(ENTRY_BYTES).fill(42);
  const until = async (what: string, cond: () => boolean): Promise<void> => {
    const deadline = performance.now() + 10_000;
    while (!cond()) {
      if (performance.now() > deadline) throw new Error(`failover bench: no ${what} within 10 s`);
      await new Promise((r) => setTimeout(r, 1));
    }
  };
  const out: number[] = [];
  try {
    for (const id of [1, 2, 3]) await start(id);
    for (let round = 0; round < rounds; round++) {
      await until('leader', () => [...nodes.values()].some((n) => n.isLeader));
      const leader = [...nodes.values()].find((n) => n.isLeader)!;
      await leader.propose(data);
      // Let every node apply it, so the one restarted last round is a full member again.
      await until('caught-up followers', () => [...nodes.values()].every((n) => n.status().applied >= leader.status().applied));
      const t0 = performance.now();
      nodes.delete(leader.id);
      await leader.close();
      for (;;) {
        const next = [...nodes.values()].find((n) => n.isLeader);
        if (next) {
          try {
            await next.propose(data);
            break;
          } catch {
            // lost its leadership meanwhile: look again
          }
        }
        await new Promise((r) => setTimeout(r, 1));
        if (performance.now() - t0 > 10_000) throw new Error('failover bench: no commit within 10 s of the leader closing');
      }
      out.push(performance.now() - t0);
      await start(leader.id);
    }
    return out;
  } finally {
    await Promise.all([...nodes.values()].map((n) => n.close()));
    rmSync(root, { recursive: true, force: true });
  }
}

export function raftNodeBenchmark(): Benchmark {
  return {
    name: 'raft-node',
    description: 'Three Raft nodes on loopback with fsync: 100-byte proposal commit latency and throughput with 256 in flight.',
    tags: ['raft'],
    async run(options: BenchOptions): Promise<BenchResult> {
      const started = performance.now();
      const samples = Math.max(200, options.cycles * 100);
      options.log('raft-node: 3 processes');
      const multi = await runRaftNodeBench(samples);
      options.log('raft-node: 1 process');
      const single = await runRaftNodeBench(samples, 20_000, false);
      options.log('raft-node: failover');
      const failover = await runFailoverBench(Math.max(5, options.cycles));
      const metrics = [
        metric('commit', `propose of a ${ENTRY_BYTES}-byte entry until committed and applied on the leader, one in flight; followers in child processes`, multi.latencyMs, { stat: 'p50', max: 1.5, label: 'issue 24: 1.5 ms' }),
        metric('throughput', `proposals/s with ${IN_FLIGHT} in flight; followers in child processes`, [multi.opsPerSecond], { stat: 'p50', min: 6900, label: 'issue 24: 1.5 × etcd 4.6k' }, 'ops/s'),
        metric('commit-1proc', 'the same, all three nodes in this process', single.latencyMs),
        metric('throughput-1proc', 'the same, all three nodes in this process', [single.opsPerSecond], undefined, 'ops/s'),
        metric('failover-1proc', 'leader closed -> next commit on the new leader; election timeout 300 ms, heartbeat 50 ms; three nodes in this process', failover, { stat: 'p50', max: 400, label: 'issue 24: 400 ms' }),
      ];
      return { name: 'raft-node', description: 'Raft node end to end', target: 'raft', params: { samples, inFlight: IN_FLIGHT, entryBytes: ENTRY_BYTES }, metrics, notes: [], durationMs: performance.now() - started };
    },
  };
}

if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href) {
  const pct = (xs: number[], q: number): number => xs[Math.max(0, Math.ceil(q * xs.length) - 1)]!;
  for (const multi of [true, false]) {
    const r = await runRaftNodeBench(2000, 20_000, multi);
    const sorted = [...r.latencyMs].sort((x, y) => x - y);
    process.stdout.write(`${multi ? 'followers in child processes' : 'all in one process'}: commit p50 ${pct(sorted, 0.5).toFixed(3)} ms, p99 ${pct(sorted, 0.99).toFixed(3)} ms (n ${sorted.length}); ${IN_FLIGHT} in flight: ${r.opsPerSecond.toFixed(0)} proposals/s\n`);
  }
  const f = (await runFailoverBench(10)).sort((x, y) => x - y);
  process.stdout.write(`failover (leader closed -> next commit): p50 ${pct(f, 0.5).toFixed(0)} ms, max ${f[f.length - 1]!.toFixed(0)} ms (n ${f.length}): ${f.map((x) => x.toFixed(0)).join(', ')}\n`);
}
