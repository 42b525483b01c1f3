/**
 * Issue 24, measured part: tenure's embedded Raft store as three processes on loopback, side by
 * side with a three-member etcd (Debian's etcd 3.4) on the same disk, in one run, round by round.
 *
 * tenure: three child processes (bench/fixtures/raft-store-member.mjs), each running
 * `openRaftStore` from dist/ with its WAL on the disk; the load generator runs inside the leader's
 * process and reports its samples over stdout. etcd: three private `etcd` processes (the test
 * harness's, with `--heartbeat-interval 50 --election-timeout 300` and their data directories on
 * the same disk as tenure's, fsync on), driven by the etcd3 npm package (the same language as
 * tenure's load generator) from this process, one client connected to the leader's endpoint.
 *
 * Each round runs every scenario on both systems, the order of the two flipped every round, so
 * both see the same load from the rest of the machine:
 *
 * - `append`: one 100-byte write at a time; tenure: `appendFenced` via the leader's store until
 *   committed and applied; etcd: a put of the same 100-byte value;
 * - `throughput`: the same with 256 in flight, writes/s;
 * - `handoff`: graceful leadership transfer, the call to its answer in the old leader's process;
 *   tenure `transferLeadership` (answers once the old leader sees the new one lead), etcd
 *   `maintenance.moveLeader` (answers once its server sees the new leader: it polls every
 *   heartbeat interval);
 * - `failover`: SIGKILL of the leader process to the first write acknowledged by the new leader.
 *   Both clients are processes that are not killed and retry every 1 ms: tenure's probe runs in
 *   each surviving member (armed before the kill; `appendFenced` as soon as that store leads),
 *   etcd's in this process (a new put to each surviving member every 2 ms, each with a 1 s
 *   deadline, since a put a follower forwarded to the dead leader hangs). The killed member is restarted with its data and
 *   waited for (caught up) before the next round.
 *
 *   npx tsx bench/run.ts raft-cluster     // after npm run build (npm run bench -- raft-cluster builds first)
 *   TENURE_BENCH_DIR=/mnt/disk ...        // where the data directories go (default: the OS temporary directory)
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { noop } from 'cockatiel';
import etcd3 from 'etcd3';
import { FixtureProcess, msBetween, nowNs, type FixtureEvent } from '../test/fixtures/harness.js';
import { freePort } from '../test/fixtures/ports.js';
import { startEtcd, type EtcdCluster, type EtcdMember } from '../test/stores/etcd-harness.js';
import { metric } from './lib/stats.js';
import type { BenchOptions, BenchResult, Benchmark } from './lib/types.js';

const SECRET = 'raft cluster bench secret 0123456789';
const PAYLOAD_BYTES = 100;
const IN_FLIGHT = 256;
const ELECTION_MS = 300;
const HEARTBEAT_MS = 50;
const WAIT_MS = 20_000;
const MEMBER = fileURLToPath(new URL('./fixtures/raft-store-member.mjs', import.meta.url));

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** Where data directories go: a real disk (the OS temporary directory here), as a user's WAL is. */
export function benchDir(prefix: string): string {
  return mkdtempSync(join(process.env.TENURE_BENCH_DIR ?? tmpdir(), prefix));
}

// ---- tenure: three member processes ----

interface Token {
  readonly lease: string;
  readonly term: number;
}

/** One member process and its request/answer channel. */
export class RaftMember {
  private next = 0;
  proc: FixtureProcess;

  constructor(
    readonly id: number,
    private readonly dir: string,
    private readonly peers: Record<number, string>,
    private readonly node: Record<string, unknown>,
    private readonly store: Record<string, unknown> = {},
  ) {
    this.proc = this.spawn();
  }

  private spawn(): FixtureProcess {
    return new FixtureProcess(`raft-${this.id}`, MEMBER, [String(this.id), this.dir, JSON.stringify(this.peers), SECRET, JSON.stringify(this.node), JSON.stringify(this.store)]);
  }

  /** A new process on the same data directory (after a kill); returns the instant of the spawn, ns. */
  restart(): bigint {
    if (this.proc.exit === null) throw new Error(`raft-${this.id} is still running`);
    const t = nowNs();
    this.proc = this.spawn();
    return t;
  }

  async request(cmd: string, args: Record<string, unknown> = {}, timeoutMs = WAIT_MS): Promise<FixtureEvent> {
    const id = ++this.next;
    const from = this.proc.events.length;
    this.proc.send(JSON.stringify({ id, cmd, ...args }));
    const e = await this.proc.waitFor('re', timeoutMs, (x) => x.re === id, from);
    if (typeof e.error === 'string') throw new Error(`raft-${this.id} ${cmd}: ${e.error}`);
    return e;
  }

  get alive(): boolean {
    return this.proc.exit === null;
  }
}

export class RaftCluster {
  readonly members: RaftMember[] = [];
  private constructor(readonly root: string) {}

  /** `node`: the RaftNode options (snapshotEntries...); `store`: openRaftStore's own (proposeTimeoutMs...). */
  static async start(node: Record<string, unknown> = {}, store: Record<string, unknown> = {}): Promise<RaftCluster> {
    const c = new RaftCluster(benchDir('tenure-raft-cluster-'));
    const peers: Record<number, string> = {};
    for (const id of [1, 2, 3]) peers[id] = `127.0.0.1:${await freePort()}`;
    try {
      for (const id of [1, 2, 3]) c.members.push(new RaftMember(id, join(c.root, `n${id}`), peers, node, store));
      await Promise.all(c.members.map((m) => m.proc.waitFor('open', WAIT_MS)));
      await c.members[0]!.request('campaign');
      await c.leader();
    } catch (err) {
      await c.stop();
      throw err;
    }
    return c;
  }

  /** The member whose store leads with its takeover applied (waits for one). */
  async leader(): Promise<RaftMember> {
    const deadline = performance.now() + WAIT_MS;
    for (;;) {
      for (const m of this.members.filter((x) => x.alive)) {
        const st = await m.request('status');
        if (st.isLeader === true) return m;
      }
      if (performance.now() > deadline) throw new Error('raft cluster: no ready leader');
      await sleep(5);
    }
  }

  /** Waits until every live member applied what the leader has committed. */
  async caughtUp(): Promise<void> {
    const leader = await this.leader();
    const commit = Number((await leader.request('status')).commit);
    const deadline = performance.now() + 60_000;
    for (const m of this.members) {
      while (Number((await m.request('status')).applied) < commit) {
        if (performance.now() > deadline) throw new Error(`raft-${m.id} did not catch up within 60 s`);
        await sleep(5);
      }
    }
  }

  async stop(): Promise<void> {
    for (const m of this.members) m.proc.child.stdin!.end();
    await Promise.race([Promise.all(this.members.map((m) => m.proc.exited)), sleep(5000)]);
    await Promise.all(this.members.map((m) => m.proc.kill()));
    rmSync(this.root, { recursive: true, force: true });
  }
}

// ---- etcd: three members ----

type Client = etcd3.Etcd3;

function etcdClient(host: string): Client {
  // No retries or circuit breaker in the client: the failover loop retries itself, every 1 ms.
  return new etcd3.Etcd3({ hosts: `http://${host}`, faultHandling: { host: () => noop, global: noop } });
}

class EtcdBench {
  private readonly clients = new Map<EtcdMember, Client>();
  private readonly ids = new Map<EtcdMember, string>();
  private constructor(
    readonly cluster: EtcdCluster,
    readonly root: string,
  ) {}

  static async start(): Promise<EtcdBench> {
    const root = benchDir('tenure-etcd-cluster-');
    const cluster = await startEtcd(3, { dataRoot: root, heartbeatMs: HEARTBEAT_MS, electionMs: ELECTION_MS });
    const b = new EtcdBench(cluster, root);
    for (const m of cluster.members) {
      const c = etcdClient(m.host);
      b.clients.set(m, c);
      b.ids.set(m, (await c.maintenance.status()).header.member_id);
    }
    return b;
  }

  client(m: EtcdMember): Client {
    return this.clients.get(m)!;
  }

  idOf(m: EtcdMember): string {
    return this.ids.get(m)!;
  }

  /** The member etcd reports as leader (asked of a live member). */
  async leader(): Promise<EtcdMember> {
    const deadline = performance.now() + WAIT_MS;
    let last = '';
    for (;;) {
      for (const m of this.cluster.members.filter((x) => x.process !== null)) {
        try {
          const st = await this.client(m).maintenance.status();
          const lead = this.cluster.members.find((x) => this.ids.get(x) === st.leader);
          if (lead && lead.process !== null && st.leader !== '0') return lead;
          last = `${m.name} reports leader ${st.leader}`;
        } catch (err) {
          // restarting, or no leader yet
          last = `${m.name}: ${String(err)}`;
        }
      }
      if (performance.now() > deadline) throw new Error(`etcd: no leader (${last})`);
      await sleep(5);
    }
  }

  async stop(): Promise<void> {
    for (const c of this.clients.values()) c.close();
    await this.cluster.stop();
    rmSync(this.root, { recursive: true, force: true });
  }
}

const VALUE = 'x'.repeat(PAYLOAD_BYTES);

async function etcdSeq(client: Client, n: number): Promise<number[]> {
  const out: number[] = [];
  for (let i = 0; i < n; i++) {
    const t0 = performance.now();
    await client.put('one').value(VALUE);
    out.push(performance.now() - t0);
  }
  return out;
}

async function etcdConc(client: Client, total: number): Promise<number> {
  let started = 0;
  const t0 = performance.now();
  await Promise.all(
    Array.from({ length: IN_FLIGHT }, async (_, w) => {
      while (started < total) {
        started++;
        await client.put(`w${w}`).value(VALUE);
      }
    }),
  );
  return (total * 1000) / (performance.now() - t0);
}

/**
 * Kill etcd's leader; ms from the SIGKILL to the first put a survivor acknowledges. A put sent to
 * a follower while the old leader is dead can hang until etcd's request timeout (its proposal was
 * forwarded to the dead leader), so rather than one put after another the client starts a new one
 * on each survivor every 2 ms, each with a 1 s deadline, and the first acknowledgement counts.
 */
async function etcdFailover(b: EtcdBench): Promise<number> {
  const leader = await b.leader();
  const survivors = b.cluster.members.filter((m) => m !== leader);
  let done: bigint | null = null;
  let lastError = '';
  const pending: Promise<void>[] = [];
  const t0 = nowNs();
  const killed = b.cluster.kill(leader);
  const deadline = performance.now() + WAIT_MS;
  while (done === null && performance.now() < deadline) {
    for (const m of survivors) {
      pending.push(
        b
          .client(m)
          .put('probe')
          .value('p')
          .options({ deadline: new Date(Date.now() + 1000) })
          .then(
            () => void (done ??= nowNs()),
            (err: unknown) => void (lastError = String(err)),
          ),
      );
    }
    await sleep(2);
  }
  await Promise.all(pending);
  await killed;
  if (done === null) throw new Error(`etcd failover: no put acknowledged within ${WAIT_MS} ms (last error: ${lastError})`);
  const ms = msBetween(t0, done);
  await b.cluster.restart(leader);
  await b.leader();
  return ms;
}

/** Graceful transfer from etcd's leader to another member: moveLeader's call to its answer, ms. */
async function etcdHandoff(b: EtcdBench, round: number): Promise<number> {
  const leader = await b.leader();
  const others = b.cluster.members.filter((m) => m !== leader);
  const target = others[round % others.length]!;
  const t0 = performance.now();
  await b.client(leader).maintenance.moveLeader({ targetID: b.idOf(target) });
  return performance.now() - t0;
}

// ---- tenure's scenarios ----

/** Leader changes no kill or transfer asked for (a follower heard nothing for an election timeout), in the notes. */
const unaskedElections: string[] = [];

/**
 * Runs a load block on the leader; when leadership moves during it (the block fails with
 * NOT_LEADER), notes it and runs the whole block again on the new leader, as a user would retry.
 */
async function onLeader(c: RaftCluster, what: string, cmd: string, args: Record<string, unknown>): Promise<FixtureEvent> {
  for (let attempt = 1; ; attempt++) {
    const leader = await c.leader();
    try {
      return await leader.request(cmd, args, 120_000);
    } catch (err) {
      if (attempt >= 20 || !/RaftNotLeaderError|StoreUnavailableError|ProposalLostError/.test(String(err))) throw err;
      unaskedElections.push(`${what}: node ${leader.id} lost leadership during the block (run again on the new leader)`);
    }
  }
}

async function raftSeq(c: RaftCluster, token: Token, n: number): Promise<number[]> {
  const r = await onLeader(c, 'one in flight', 'seq', { token, n, bytes: PAYLOAD_BYTES, stream: 'one' });
  return r.ms as number[];
}

async function raftConc(c: RaftCluster, token: Token, total: number): Promise<number> {
  const r = await onLeader(c, `${IN_FLIGHT} in flight`, 'conc', { token, total, inFlight: IN_FLIGHT, bytes: PAYLOAD_BYTES, stream: 'w' });
  return Number(r.opsPerSecond);
}

async function raftHandoff(c: RaftCluster, token: Token, round: number): Promise<{ ms: number; toFirstWriteMs: number }> {
  const leader = await c.leader();
  const others = c.members.filter((m) => m !== leader);
  const target = others[round % others.length]!;
  // The new leader's probe: its first fenced write, once its takeover is applied.
  const from = target.proc.events.length;
  await target.request('arm', { token });
  const r = await leader.request('transfer', { to: target.id });
  const probe = await target.proc.waitFor('probe', WAIT_MS, undefined, from);
  const sentNs = BigInt(r.t) - BigInt(Math.round(Number(r.ms) * 1e6));
  return { ms: Number(r.ms), toFirstWriteMs: msBetween(sentNs, probe.t) };
}

/** Where a tenure failover's time went, ms, on the member that won (from its probe's instants). */
interface FailoverParts {
  readonly total: number;
  /** SIGKILL to the winner leaving the follower role (its election timeout ran out). */
  readonly toCampaign: number;
  /** Its pre-vote and vote rounds. */
  readonly campaign: number;
  /** Raft leader to the store's takeover applied (a read index, then the takeover command committed). */
  readonly takeover: number;
  /** Takeover applied to the probe's fenced append acknowledged. */
  readonly write: number;
}

/** Failovers where the first survivor to campaign was not the one elected (in the notes). */
const failoverNotes: string[] = [];

async function raftFailover(c: RaftCluster, token: Token): Promise<FailoverParts> {
  await c.caughtUp();
  const leader = await c.leader();
  const survivors = c.members.filter((m) => m !== leader);
  const from = survivors.map((m) => m.proc.events.length);
  await Promise.all(survivors.map((m) => m.request('arm', { token })));
  const t0 = nowNs();
  await leader.proc.kill();
  const probe = await Promise.race(survivors.map((m, i) => m.proc.waitFor('probe', WAIT_MS, undefined, from[i])));
  const at = (k: string): string => (typeof probe[k] === 'string' ? (probe[k] as string) : probe.t);
  const parts = {
    total: msBetween(t0, probe.t),
    toCampaign: msBetween(t0, at('campaigned')),
    campaign: msBetween(at('campaigned'), at('elected')),
    takeover: msBetween(at('elected'), at('ready')),
    write: msBetween(at('ready'), probe.t),
  };
  const losers = await Promise.all(survivors.filter((m) => m.id !== Number(probe.id)).map((m) => m.request('disarm')));
  const firstCampaign = [at('campaigned'), ...losers.flatMap((l) => (typeof l.campaigned === 'string' ? [l.campaigned] : []))].sort((a, b) => (BigInt(a) < BigInt(b) ? -1 : 1))[0]!;
  if (firstCampaign !== at('campaigned')) failoverNotes.push(`the first to campaign lost: ${msBetween(t0, firstCampaign).toFixed(0)} ms after the kill, the winner at ${parts.toCampaign.toFixed(0)} ms`);
  leader.restart();
  await leader.proc.waitFor('served', 60_000);
  return parts;
}

// ---- the benchmark ----

export interface ClusterSamples {
  appendMs: number[];
  throughput: number[];
  handoffMs: number[];
  failoverMs: number[];
  failoverParts: FailoverParts[];
}

const empty = (): ClusterSamples => ({ appendMs: [], throughput: [], handoffMs: [], failoverMs: [], failoverParts: [] });

export function raftClusterBenchmark(): Benchmark {
  return {
    name: 'raft-cluster',
    description:
      'Embedded Raft store, 3 processes on loopback with fsync, load in the leader process, side by side with a 3-member etcd 3.4 on the same disk (etcd3 client), rounds interleaved: 100-byte write commit, writes/s with 256 in flight, graceful handoff, leader SIGKILL to the next acknowledged write.',
    tags: ['raft', 'etcd', 'etcd-cluster'],
    async run(options: BenchOptions): Promise<BenchResult> {
      const started = performance.now();
      const rounds = options.cycles;
      const seqPerRound = 100;
      const concPerRound = 5000;
      const raft = empty();
      const etcd = empty();
      const raftHandoffToWrite: number[] = [];
      const notes: string[] = [];
      const loads: number[] = [];
      const { loadavg } = await import('node:os');
      const rc = await RaftCluster.start({ electionTicks: ELECTION_MS / 10, heartbeatTicks: HEARTBEAT_MS / 10 });
      let eb: EtcdBench | undefined;
      try {
        eb = await EtcdBench.start();
        const first = await rc.leader();
        const token = { lease: 'bench', term: Number((await first.request('acquire', { name: 'bench', owner: 'bench~1', ttlMs: 3_600_000 })).term) };
        // Warm-up: connections, JIT, the first WAL segments.
        await raftSeq(rc, token, 200);
        await etcdSeq(eb.client(await eb.leader()), 200);
        for (let round = 0; round < rounds; round++) {
          loads.push(loadavg()[0]!);
          const tenureFirst = round % 2 === 0;
          const runRaft = async (): Promise<void> => {
            raft.appendMs.push(...(await raftSeq(rc, token, seqPerRound)));
            raft.throughput.push(await raftConc(rc, token, concPerRound));
            const h = await raftHandoff(rc, token, round);
            raft.handoffMs.push(h.ms);
            raftHandoffToWrite.push(h.toFirstWriteMs);
            const f = await raftFailover(rc, token);
            raft.failoverMs.push(f.total);
            raft.failoverParts.push(f);
          };
          const runEtcd = async (): Promise<void> => {
            const b = eb!;
            etcd.appendMs.push(...(await etcdSeq(b.client(await b.leader()), seqPerRound)));
            etcd.throughput.push(await etcdConc(b.client(await b.leader()), concPerRound));
            etcd.handoffMs.push(await etcdHandoff(b, round));
            etcd.failoverMs.push(await etcdFailover(b));
          };
          if (tenureFirst) {
            await runRaft();
            await runEtcd();
          } else {
            await runEtcd();
            await runRaft();
          }
          options.log(
            `round ${round + 1}/${rounds}: tenure ${raft.throughput.at(-1)!.toFixed(0)} w/s failover ${raft.failoverMs.at(-1)!.toFixed(0)} ms; etcd ${etcd.throughput.at(-1)!.toFixed(0)} w/s failover ${etcd.failoverMs.at(-1)!.toFixed(0)} ms`,
          );
        }
      } finally {
        await rc.stop();
        await eb?.stop();
      }
      const etcdThroughputP50 = [...etcd.throughput].sort((a, b) => a - b)[Math.ceil(etcd.throughput.length / 2) - 1]!;
      const ratios = raft.throughput.map((r, i) => r / etcd.throughput[i]!);
      notes.push(`tenure leader changes under load that no kill or transfer asked for: ${unaskedElections.length}${unaskedElections.length > 0 ? ` (${unaskedElections.splice(0).join('; ')})` : ''}`);
      notes.push(`tenure failovers where the first survivor to campaign lost: ${failoverNotes.length} of ${raft.failoverMs.length}${failoverNotes.length > 0 ? ` (${failoverNotes.splice(0).join('; ')})` : ''}`);
      notes.push(`1-minute load average during the rounds: ${Math.min(...loads).toFixed(1)}-${Math.max(...loads).toFixed(1)}`);
      notes.push(`etcd: Debian's etcd 3.4, --heartbeat-interval ${HEARTBEAT_MS} --election-timeout ${ELECTION_MS}, data dirs on the same disk as tenure's WALs; client: etcd3 npm package, one connection to the leader's endpoint`);
      const metrics = [
        metric('raft-append', `tenure: appendFenced of ${PAYLOAD_BYTES} bytes via the leader's embedded store until committed and applied, one in flight; 3 processes`, raft.appendMs, { stat: 'p50', max: 1.5, label: 'issue 24: 1.5 ms' }),
        metric('raft-append-p99', 'the same samples, judged at p99', raft.appendMs, { stat: 'p99', max: 5, label: 'issue 24: 5 ms' }),
        metric('etcd-append', `etcd: put of a ${PAYLOAD_BYTES}-byte value, one in flight`, etcd.appendMs),
        metric('raft-throughput', `tenure: fenced appends/s with ${IN_FLIGHT} in flight (a round of ${concPerRound})`, raft.throughput, { stat: 'p50', min: 1.5 * etcdThroughputP50, label: '1.5 x etcd p50 of this run' }, 'ops/s'),
        metric('etcd-throughput', `etcd: puts/s with ${IN_FLIGHT} in flight`, etcd.throughput, undefined, 'ops/s'),
        metric('raft/etcd-throughput', 'per-round ratio of the two rates', ratios, { stat: 'p50', min: 1.5, label: 'issue 24: 1.5x' }, 'x'),
        metric('raft-handoff', 'tenure: transferLeadership, call to answer (the old leader sees the new one lead)', raft.handoffMs, { stat: 'p50', max: 10, label: 'issue 24: 10 ms' }),
        metric('raft-handoff-to-write', "tenure: transferLeadership's call to the new leader's first fenced write (its takeover applied first)", raftHandoffToWrite),
        metric('etcd-handoff', 'etcd: maintenance.moveLeader, call to answer', etcd.handoffMs),
        metric('raft-failover', 'tenure: SIGKILL of the leader process to the first fenced append acknowledged by the new leader (probe in each survivor, 1 ms retry)', raft.failoverMs, { stat: 'p50', max: 400, label: 'issue 24: 400 ms' }),
        metric('raft-failover-max', 'the same samples, judged at max', raft.failoverMs, { stat: 'max', max: 700, label: 'issue 24: 700 ms' }),
        metric('raft-failover-timeout', "tenure failover, part 1: SIGKILL to the winner's campaign (its randomized election timeout, [300, 600) ms after the last heartbeat)", raft.failoverParts.map((p) => p.toCampaign)),
        metric('raft-failover-election', 'part 2: pre-vote and vote rounds, to Raft leader', raft.failoverParts.map((p) => p.campaign)),
        metric('raft-failover-takeover', "part 3: Raft leader to the store's takeover applied (read index, takeover committed)", raft.failoverParts.map((p) => p.takeover)),
        metric('raft-failover-write', "part 4: takeover applied to the probe's append acknowledged", raft.failoverParts.map((p) => p.write)),
        metric('etcd-failover', 'etcd: SIGKILL of the leader to the first put a survivor acknowledges (a new put to each survivor every 2 ms)', etcd.failoverMs),
      ];
      return {
        name: 'raft-cluster',
        description: 'Embedded Raft store (3 processes) vs 3-member etcd, interleaved rounds',
        target: 'raft',
        params: { rounds, seqPerRound, concPerRound, inFlight: IN_FLIGHT, payloadBytes: PAYLOAD_BYTES, electionMs: ELECTION_MS, heartbeatMs: HEARTBEAT_MS },
        metrics,
        notes,
        durationMs: performance.now() - started,
      };
    },
  };
}

// ---- restart of a member with a large log ----

const RESTART_ENTRY_BYTES = 512 * 1024;

export interface RestartSample {
  readonly mib: number;
  readonly snapshots: boolean;
  /** Spawn of the process to openRaftStore's return (WAL and snapshot read, state restored), ms. */
  readonly openMs: number;
  /** Spawn to the first linearizable read answered (caught up to the leader's commit), ms. */
  readonly servedMs: number;
}

/**
 * A three-process cluster whose log holds `mib` MiB of fenced appends (512 KiB payloads, 8 in
 * flight), then `restarts` times: SIGKILL of a follower and a new process on its data directory.
 * With `snapshots`, every node takes one snapshot once 4/5 of the log is applied and compacts its
 * log up to it (`catchUpEntries: 0`), so a restart reads that snapshot and the last fifth of the
 * log; without, nothing is snapshotted and a restart replays the whole log. The state is the log
 * here (every append is kept), so the snapshot is as large as 4/5 of the log. A snapshot is one
 * synchronous JSON text of the whole state: taking one of ~100 MiB blocks the node's event loop
 * for seconds on this machine, so the build allows 60 s per write (proposeTimeoutMs).
 */
export async function runRestartBench(mib: number, snapshots: boolean, restarts: number, log: (line: string) => void = () => {}): Promise<RestartSample[]> {
  const total = Math.ceil((mib * 1024 * 1024) / RESTART_ENTRY_BYTES);
  const node = snapshots ? { snapshotEntries: Math.max(1, Math.floor((total * 4) / 5)), catchUpEntries: 0 } : { snapshotEntries: 1_000_000_000 };
  const c = await RaftCluster.start(node, { proposeTimeoutMs: 60_000 });
  const out: RestartSample[] = [];
  try {
    const leader = await c.leader();
    const token = { lease: 'bench', term: Number((await leader.request('acquire', { name: 'bench', owner: 'bench~1', ttlMs: 3_600_000 })).term) };
    const t0 = performance.now();
    // In blocks of 32 (16 MiB), each run again on the new leader if leadership moved meanwhile:
    // a node taking a large snapshot stops answering for seconds, and may be deposed.
    for (let done = 0; done < total; done += 32) {
      await onLeader(c, 'building the log', 'conc', { token, total: Math.min(32, total - done), inFlight: 8, bytes: RESTART_ENTRY_BYTES, stream: 'big' });
    }
    await c.caughtUp();
    if (unaskedElections.length > 0) log(`leader changes while building: ${unaskedElections.splice(0).join('; ')}`);
    log(`${mib} MiB log built in ${((performance.now() - t0) / 1000).toFixed(1)} s (${snapshots ? 'snapshots' : 'no snapshot'})`);
    for (let i = 0; i < restarts; i++) {
      const lead = await c.leader();
      const follower = c.members.find((m) => m !== lead)!;
      const st = await follower.request('status');
      await follower.proc.kill();
      const spawned = follower.restart();
      const open = await follower.proc.waitFor('open', 10 * 60_000);
      const served = await follower.proc.waitFor('served', 10 * 60_000);
      out.push({ mib, snapshots, openMs: msBetween(spawned, open.t), servedMs: msBetween(spawned, served.t) });
      log(`  restart ${i + 1}: open ${out.at(-1)!.openMs.toFixed(0)} ms, served ${out.at(-1)!.servedMs.toFixed(0)} ms (snapshot index ${String(st.snapshotIndex)}, last index ${String(st.lastIndex)})`);
    }
  } finally {
    await c.stop();
  }
  return out;
}

export function raftRestartBenchmark(): Benchmark {
  return {
    name: 'raft-restart',
    description: 'Embedded Raft store, 3 processes: restart of a follower whose log holds 0, 128 and 256 MiB of fenced appends, with a snapshot of 4/5 of it and without, to openRaftStore returning and to its first linearizable read.',
    tags: ['raft'],
    async run(options: BenchOptions): Promise<BenchResult> {
      const started = performance.now();
      const sizes = (process.env.TENURE_BENCH_RESTART_MIB ?? '0,128,256').split(',').map(Number);
      const restarts = Math.min(3, options.cycles);
      const metrics = [];
      for (const mib of sizes) {
        for (const snapshots of [true, false]) {
          const r = await runRestartBench(mib, snapshots, restarts, options.log);
          const tag = `${mib}MiB-${snapshots ? 'snap' : 'log'}`;
          const how = snapshots ? 'a snapshot of the first 4/5 (parsed before open returns) plus the log after it' : 'no snapshot (the WAL is read before open returns, its entries applied after)';
          metrics.push(metric(`open-${tag}`, `${mib} MiB of log, ${how}: process spawn to openRaftStore returned`, r.map((x) => x.openMs)));
          metrics.push(metric(`served-${tag}`, `the same: process spawn to the first linearizable read answered`, r.map((x) => x.servedMs)));
        }
      }
      return {
        name: 'raft-restart',
        description: 'Restart of a Raft store member with a large log',
        target: 'raft',
        params: { sizesMiB: sizes.join(','), restarts, entryBytes: RESTART_ENTRY_BYTES },
        metrics,
        notes: ['the state is the log (every append kept), so a snapshot is as large as the log; 1 GiB: TENURE_BENCH_RESTART_MIB=1024 with NODE_OPTIONS=--max-old-space-size=8192 (docs/raft-store.md)'],
        durationMs: performance.now() - started,
      };
    },
  };
}
