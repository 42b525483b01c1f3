/**
 * Issue 14: leader election on etcd, side by side on one private etcd server (bench/lib/servers.ts):
 *
 *  - `etcd-election`: tenure nodes (the campaigner fixture on `etcd://`), TTL 2 s.
 *  - `etcd3-election`: the etcd3 npm package's own Election (bench/fixtures/etcd3-elector.ts),
 *    TTL 2 s, driven by the same code as tenure's (bench/election.ts).
 *  - `etcdctl-election`: three real `etcdctl elect` processes (Go's concurrency.Election).
 *
 * For all three, a watcher in the bench process timestamps the deletion of the old leader's key,
 * which separates etcd's part of a crash failover (its lessor revokes an expired lease on a
 * ~500 ms cycle) from the client's part (noticing the deletion and taking over).
 *
 * `etcdctl elect` always uses a 60 s session TTL (not configurable in etcd 3.4), so its crash
 * failover is not waited out: after the SIGKILL the bench revokes the dead leader's lease itself,
 * which is what etcd's lessor does when the TTL runs out, and measures from there.
 */
import { spawn } from 'node:child_process';
import type { ChildProcess } from 'node:child_process';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import etcd3 from 'etcd3';
import { killWithParent } from '../test/stores/etcd-harness.js';
import { FixtureProcess, msBetween, nowNs, pollUntil, repoRoot } from '../test/fixtures/harness.js';
import { ELECTION_GROUP, electionBenchmark } from './election.js';
import type { RemovalLog } from './election.js';
import { metric } from './lib/stats.js';
import { freshEtcd, privateEtcd, randomTag } from './lib/servers.js';
import type { BenchOptions, BenchResult, Benchmark } from './lib/types.js';

const TTL_MS = 2000;
const WAIT_MS = 20_000;

function etcdClient(hosts: readonly string[]): etcd3.Etcd3 {
  return new etcd3.Etcd3({ hosts: hosts.map((h) => `http://${h}`) });
}

/** The hosts and namespace of an `etcd://h1,h2?prefix=NS` URL made by freshEtcd(). */
function parseEtcdArg(storeArg: string): { hosts: string[]; namespace: string } {
  const m = /^etcd:\/\/([^/?]*)\/?(?:\?(.*))?$/.exec(storeArg);
  if (!m) throw new Error(`not an etcd URL: ${storeArg}`);
  return { hosts: m[1]!.split(','), namespace: new URLSearchParams(m[2] ?? '').get('prefix') ?? '' };
}

/** Timestamp (host-monotonic) every deletion of a key under `prefix`, as a watch reports it. */
/** One client per etcd URL for `waitingRoomFull` (the bench's private etcd lives for the whole run). */
const restClients = new Map<string, etcd3.Etcd3>();

/** Whether `waiting` tenure candidates wait in the waiting room of the bench's group (`\0tenure/wait/GROUP\0<lease>`). */
async function waitingRoomFull(storeArg: string, waiting: number): Promise<boolean> {
  const { hosts, namespace } = parseEtcdArg(storeArg);
  let client = restClients.get(storeArg);
  if (!client) {
    client = etcdClient(hosts);
    restClients.set(storeArg, client);
  }
  const keys = await client.getAll().prefix(`${namespace}\u0000tenure/wait/${ELECTION_GROUP}\u0000`).keys();
  return keys.length >= waiting;
}

async function watchDeletes(hosts: readonly string[], prefix: string): Promise<RemovalLog> {
  const client = etcdClient(hosts);
  const deletes: bigint[] = [];
  const watcher = await client.watch().prefix(prefix).create();
  watcher.on('delete', () => deletes.push(nowNs()));
  return {
    firstAfter: (ns) => deletes.find((d) => d >= ns) ?? null,
    close: async () => {
      await watcher.cancel().catch(() => {});
      client.close();
    },
  };
}

const tsxLoader = (): string => pathToFileURL(join(repoRoot(), 'node_modules', 'tsx', 'dist', 'loader.mjs')).href;

export const etcdBenchmarks: readonly Benchmark[] = [
  electionBenchmark({
    name: 'etcd-election',
    target: 'etcd',
    ttlMs: TTL_MS,
    nodes: 3,
    prepare: freshEtcd,
    handoffGoal: { stat: 'p50', max: 10, label: '10 ms (watch push)' },
    // Crash failover is bounded by etcd's own lease expiry; the goal is on what tenure adds to it.
    crashGoal: null,
    // As etcdctl-election waits for all three candidate keys: every other node in the waiting room.
    atRest: waitingRoomFull,
    removals: (storeArg) => {
      const { hosts, namespace } = parseEtcdArg(storeArg);
      return watchDeletes(hosts, `${namespace}${ELECTION_GROUP}/`);
    },
    removalGoal: { stat: 'p50', max: 30, label: 'etcd deletes the key + 30 ms' },
    removalText: "etcd deleted the dead holder's key (lease expired)",
  }),
  electionBenchmark({
    name: 'etcd3-election',
    target: 'etcd, the etcd3 npm package\'s Election (not tenure)',
    tags: ['etcd', 'etcd3'],
    ttlMs: TTL_MS,
    nodes: 3,
    prepare: freshEtcd,
    node: (storeArg, id) => {
      const { hosts, namespace } = parseEtcdArg(storeArg);
      return new FixtureProcess(id, join(repoRoot(), 'bench', 'fixtures', 'etcd3-elector.ts'), [hosts.join(','), namespace, ELECTION_GROUP, id, String(TTL_MS)], {
        NODE_OPTIONS: `--import ${tsxLoader()}`,
      });
    },
    handoffGoal: null,
    crashGoal: null,
    removals: (storeArg) => {
      const { hosts, namespace } = parseEtcdArg(storeArg);
      return watchDeletes(hosts, `${namespace}election/${ELECTION_GROUP}/`);
    },
    removalGoal: null,
    removalText: "etcd deleted the dead holder's key (lease expired)",
  }),
  etcdctlBenchmark(),
];

/** One `etcdctl elect NAME VALUE` process; it prints the key and VALUE when it becomes leader. */
class Etcdctl {
  readonly value: string;
  readonly lines: { t: bigint; line: string }[] = [];
  readonly proc: ChildProcess;
  readonly exited: Promise<void>;
  exit = false;
  private partial = '';
  output = '';

  constructor(hosts: readonly string[], election: string, value: string) {
    this.value = value;
    this.proc = spawn('etcdctl', ['--endpoints', hosts.join(','), 'elect', election, value], {
      env: { ...process.env, ETCDCTL_API: '3' },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    if (this.proc.pid !== undefined) killWithParent(this.proc.pid);
    this.proc.stdout!.setEncoding('utf8');
    this.proc.stdout!.on('data', (chunk: string) => {
      const t = nowNs();
      this.output = (this.output + chunk).slice(-4000);
      this.partial += chunk;
      let nl: number;
      while ((nl = this.partial.indexOf('\n')) >= 0) {
        this.lines.push({ t, line: this.partial.slice(0, nl).trim() });
        this.partial = this.partial.slice(nl + 1);
      }
    });
    this.proc.stderr!.on('data', (d: Buffer) => (this.output = (this.output + d.toString()).slice(-4000)));
    this.exited = new Promise<void>((r) =>
      this.proc.once('close', () => {
        this.exit = true;
        r();
      }),
    );
  }

  /** When it printed its own value (it was elected), at or after line `from`. */
  electedAt(from = 0): bigint | null {
    return this.lines.slice(from).find((l) => l.line === this.value)?.t ?? null;
  }

  async kill(signal: NodeJS.Signals): Promise<void> {
    if (!this.exit) this.proc.kill(signal);
    await this.exited;
  }
}

function etcdctlBenchmark(): Benchmark {
  const name = 'etcdctl-election';
  const description =
    '3 `etcdctl elect` processes (Go clientv3/concurrency.Election, session TTL fixed at 60 s) on the same private etcd. ' +
    'Graceful handoff: SIGINT to the leader (it resigns: deletes its key) until another etcdctl prints that it leads (seen on its stdout pipe). ' +
    'Crash: SIGKILL of the leader, then the bench revokes its lease at once (what etcd\'s lessor does when the TTL runs out; 60 s is not waited out) ' +
    'until another etcdctl prints that it leads.';
  return {
    name,
    description,
    tags: ['etcd', 'etcdctl'],
    async run(options: BenchOptions): Promise<BenchResult> {
      const started = nowNs();
      const cluster = await privateEtcd();
      const election = `bench-${randomTag()}/${ELECTION_GROUP}`;
      const client = etcdClient(cluster.hosts);
      const removals = await watchDeletes(cluster.hosts, `${election}/`);
      const all: Etcdctl[] = [];
      const notes: string[] = [];
      const start = (value: string): Etcdctl => {
        const p = new Etcdctl(cluster.hosts, election, value);
        all.push(p);
        return p;
      };
      const candidates = async (): Promise<{ key: string; createRevision: number }[]> => {
        const res = await client.getAll().prefix(`${election}/`).sort('Create', 'Ascend').exec();
        return res.kvs.map((kv) => ({ key: kv.key.toString(), createRevision: Number(kv.create_revision) }));
      };
      // Start one at a time, so that each has its key in before the next: n1 leads first.
      const nodes: Etcdctl[] = [];
      let lastRevision = 0;
      const checkRevision = (revision: number, what: string): void => {
        if (revision <= lastRevision) throw new Error(`${what}: leader's create revision ${revision} did not go up from ${lastRevision}`);
        lastRevision = revision;
      };
      /** Exactly one running etcdctl has printed that it leads, and all three have their keys in. */
      const settled = (): Promise<{ leader: Etcdctl; key: string; revision: number }> =>
        pollUntil('one etcdctl leading and three candidate keys', WAIT_MS, async () => {
          const leaders = nodes.filter((n) => !n.exit && n.electedAt() !== null);
          if (leaders.length !== 1 || nodes.some((n) => n.exit)) return undefined;
          const keys = await candidates();
          if (keys.length !== nodes.length) return undefined;
          return { leader: leaders[0]!, key: keys[0]!.key, revision: keys[0]!.createRevision };
        }, 5);
      const nextElected = (others: Etcdctl[], marks: number[]): Promise<{ node: Etcdctl; t: bigint }> =>
        pollUntil('another etcdctl to lead', WAIT_MS, () => {
          for (let i = 0; i < others.length; i++) {
            const t = others[i]!.electedAt(marks[i]);
            if (t !== null) return { node: others[i]!, t };
          }
          return undefined;
        }, 1);
      try {
        for (let i = 1; i <= 3; i++) {
          nodes.push(start(`n${i}`));
          await pollUntil(`etcdctl n${i}'s key`, WAIT_MS, async () => (await candidates()).length === i, 5);
        }
        checkRevision((await settled()).revision, 'first election');
        options.log(`${name}: 3 etcdctl processes up; leader elected`);

        const handoff: number[] = [];
        for (let cycle = 1; cycle <= options.cycles; cycle++) {
          const { leader } = await settled();
          const others = nodes.filter((n) => n !== leader);
          const marks = others.map((n) => n.lines.length);
          const stoppedAt = nowNs();
          leader.proc.kill('SIGINT');
          const { t } = await nextElected(others, marks);
          handoff.push(msBetween(stoppedAt, t));
          await leader.exited;
          nodes[nodes.indexOf(leader)] = start(leader.value);
          checkRevision((await settled()).revision, `handoff ${cycle}`);
        }
        options.log(`${name}: ${options.cycles} handoffs done`);

        const revokeToElected: number[] = [];
        const deletedToElected: number[] = [];
        for (let cycle = 1; cycle <= options.cycles; cycle++) {
          const { leader, key } = await settled();
          const leaseId = BigInt(`0x${key.slice(key.lastIndexOf('/') + 1)}`).toString();
          const others = nodes.filter((n) => n !== leader);
          const marks = others.map((n) => n.lines.length);
          await leader.kill('SIGKILL');
          const revokedAt = nowNs();
          await client.leaseClient.leaseRevoke({ ID: leaseId });
          const { t } = await nextElected(others, marks);
          revokeToElected.push(msBetween(revokedAt, t));
          const deletedAt = await pollUntil('the dead leader\'s key deleted', WAIT_MS, () => removals.firstAfter(revokedAt) ?? undefined, 2);
          deletedToElected.push(msBetween(deletedAt, t));
          nodes[nodes.indexOf(leader)] = start(leader.value);
          checkRevision((await settled()).revision, `crash ${cycle}`);
        }
        options.log(`${name}: ${options.cycles} crashes done`);
        notes.push(`${all.length} etcdctl processes started in total; the leader's create revision went up at every change`);
        notes.push('crash failover proper is 60 s + up to ~0.5 s with etcdctl elect: its session TTL is fixed at 60 s in etcd 3.4 (no --ttl flag for elect)');
        return {
          name,
          description,
          target: 'etcd, etcdctl elect (Go concurrency.Election, not tenure)',
          params: { sessionTtlS: 60, nodes: 3, cycles: options.cycles },
          metrics: [
            metric('handoff', 'SIGINT to the leading etcdctl (it resigns) -> another etcdctl\'s "I lead" lines arrive on the bench\'s pipe', handoff),
            metric('revoke-to-elected', 'the bench sends LeaseRevoke for the killed leader\'s lease -> another etcdctl\'s "I lead" lines arrive', revokeToElected),
            metric('key-deleted-to-elected', "the bench's watcher sees the dead leader's key deleted -> another etcdctl's \"I lead\" lines arrive (compare with etcd-election)", deletedToElected),
          ],
          notes,
          durationMs: msBetween(started, nowNs()),
        };
      } finally {
        await Promise.all(all.map((n) => n.kill('SIGKILL')));
        await removals.close();
        client.close();
      }
    },
  };
}
