/**
 * Leader election over real processes: graceful handoff and crash failover.
 *
 * N campaigner processes (dist/test/fixtures/campaigner.js) contend for one group on one store.
 * Every instant is taken from `process.hrtime.bigint()`, which on Linux is CLOCK_MONOTONIC, one
 * clock for all processes on the host, so an instant reported by one process can be subtracted
 * from an instant reported by another.
 *
 *  - handoff: the leader is told `stop` on stdin; it reports `stopping` just before it calls
 *    elector.stop() (which releases the lease). Measured: from that instant to the `elected`
 *    event of the node that takes over. The stopped node then exits and is started again.
 *  - crash failover: right after the leader reports a successful renew (so the lease has nearly a
 *    full TTL left: the worst case), it is killed with SIGKILL. Measured: from the kill to the
 *    next `elected` event. Also reported: how long after the earliest instant the lease could have
 *    expired (renew sent + TTL) the new leader was elected, i.e. how fast expiry is noticed.
 *    The killed node is started again (same node id, new incarnation).
 *    With `firstWrite`, the nodes do one fenced append as soon as they are elected (campaigner
 *    `--append-ms` longer than the run), and crash failover is also measured to that write's
 *    `append` report: the instant the new leader's work is actually accepted by the store.
 *    With `removals` (etcd), the instant the store deleted the dead holder's key is observed too,
 *    which splits crash failover into the store's part and tenure's part.
 */
import { FixtureProcess, killAll, msBetween, nowNs, num, pollUntil, str } from '../test/fixtures/harness.js';
import type { FixtureEvent } from '../test/fixtures/harness.js';
import { metric } from './lib/stats.js';
import type { BenchOptions, BenchResult, Benchmark, Goal, Metric } from './lib/types.js';

/** Instants (host-monotonic ns) at which the store removed a holder's record, as a watcher saw them. */
export interface RemovalLog {
  /** The first removal seen at or after `ns`, or null. */
  firstAfter(ns: bigint): bigint | null;
  close(): Promise<void>;
}

export interface ElectionBenchConfig {
  readonly name: string;
  /** The store under test, for the report (`sqlite`, `postgres`...). */
  readonly target: string;
  readonly ttlMs: number;
  readonly nodes: number;
  /** Make a fresh, empty store: the campaigner's first argument (a SQLite path or a store URL). */
  prepare(): Promise<{ storeArg: string; cleanup: () => Promise<void> | void }>;
  /**
   * Start one node (default: the campaigner fixture on `storeArg`). Another implementation must
   * speak the campaigner's event vocabulary: ready {owner}, elected {term}, renewed {term,
   * latencyMs}, leader-changed {owner}, stopping; `stop` on stdin.
   */
  node?(storeArg: string, id: string): FixtureProcess;
  /** For `--only` (default: [target]). */
  readonly tags?: readonly string[];
  /** Goal on handoff (default p50 <= 60 ms); null for none. */
  readonly handoffGoal?: Goal | null;
  /** Goal on crash failover (default p50 <= TTL + 60 ms); on `crash-to-first-write` when `firstWrite`. null for none. */
  readonly crashGoal?: Goal | null;
  /** Measure crash failover to the new leader's first fenced append as well (see the file comment). */
  readonly firstWrite?: boolean;
  /**
   * Whether every candidate is at rest, waiting in line, beside a settled leader (etcd: all of
   * them in the name's waiting room), checked before each graceful stop. Without it a restarted
   * node may still be starting (its first calls) when the leader stops. etcdctl's bench waits
   * the same way (all three candidate keys in) before each resign.
   */
  atRest?(storeArg: string, waiting: number): Promise<boolean>;
  /** Watch the store for the removal of the dead holder's record (etcd: the delete of its key). */
  removals?(storeArg: string): Promise<RemovalLog>;
  /** Goal on `key-deleted-to-elected` when `removals` is given. */
  readonly removalGoal?: Goal | null;
  /** What `removals` watches for, for the metric descriptions (default "the dead holder's key is deleted"). */
  readonly removalText?: string;
}

/** Appends every this many ms while leader: longer than any run, so exactly one append per term, right after election. */
const ONE_APPEND_MS = 3_600_000;

const WAIT_MS = 20_000;
export const ELECTION_GROUP = 'bench';
const GROUP = ELECTION_GROUP;

interface Node {
  readonly id: string;
  proc: FixtureProcess;
}

/** The term this process currently leads by its own report, or null. */
function leadingTerm(p: FixtureProcess): number | null {
  let term: number | null = null;
  for (const e of p.events) {
    if (e.ev === 'elected') term = num(e, 'term');
    else if (e.ev === 'deposed' && term !== null && num(e, 'term') === term) term = null;
  }
  return term;
}

function ownerOf(p: FixtureProcess): string | null {
  const ready = p.all('ready')[0];
  return ready ? str(ready, 'owner') : null;
}

/** The last leader this process has seen, by its `leader-changed` events. */
function seenLeader(p: FixtureProcess): string | null {
  const changes = p.all('leader-changed');
  const last = changes[changes.length - 1];
  return last ? (last.owner as string | null) : null;
}

export function electionBenchmark(config: ElectionBenchConfig): Benchmark {
  const { name, target, ttlMs, nodes: nodeCount } = config;
  const description =
      `${nodeCount} node processes campaign for one group on ${target} with TTL ${ttlMs} ms. ` +
      'Graceful handoff: leader calls stop() (releases) until another node is elected. ' +
      'Crash failover: leader killed with SIGKILL right after a successful renew (nearly a full TTL left) until another node is elected. ' +
      'Instants come from CLOCK_MONOTONIC (process.hrtime.bigint()), shared by all processes.';
  const handoffGoal = config.handoffGoal === undefined ? { stat: 'p50' as const, max: 60, label: '60 ms' } : config.handoffGoal;
  const crashGoal = config.crashGoal === undefined ? { stat: 'p50' as const, max: ttlMs + 60, label: 'TTL + 60 ms' } : config.crashGoal;
  const removalText = config.removalText ?? "the dead holder's key is deleted";
  return {
    name,
    description: config.firstWrite ? `${description} With fenced writes: each new leader appends one fenced entry as soon as it is elected.` : description,
    tags: config.tags ?? [target],
    async run(options: BenchOptions): Promise<BenchResult> {
      const started = nowNs();
      const { storeArg, cleanup } = await config.prepare();
      const all: FixtureProcess[] = [];
      const notes: string[] = [];
      let removals: RemovalLog | null = null;
      const appendMs = config.firstWrite ? ONE_APPEND_MS : 0;
      const spawnNode = (id: string): FixtureProcess => {
        const p = config.node ? config.node(storeArg, id) : new FixtureProcess(id, 'campaigner', [storeArg, GROUP, id, String(ttlMs), '--append-ms', String(appendMs)]);
        all.push(p);
        return p;
      };
      const nodes: Node[] = Array.from({ length: nodeCount }, (_, i) => ({ id: `n${i + 1}`, proc: spawnNode(`n${i + 1}`) }));
      let lastTerm = 0;

      /** Wait until exactly one node leads and every other node is running and has seen it. */
      const settled = (): Promise<{ node: Node; term: number; owner: string }> =>
        pollUntil('a settled leader that every node has seen', WAIT_MS, () => {
          const leaders = nodes.filter((n) => n.proc.exit === null && leadingTerm(n.proc) !== null);
          if (leaders.length !== 1) return undefined;
          const node = leaders[0]!;
          const owner = ownerOf(node.proc);
          if (owner === null) return undefined;
          for (const n of nodes) {
            if (n === node) continue;
            if (n.proc.exit !== null || seenLeader(n.proc) !== owner) return undefined;
          }
          return { node, term: leadingTerm(node.proc)!, owner };
        }, 2);

      /** The first `elected` event any of `candidates` reports after its event index in `marks`. */
      const nextElected = (candidates: Node[], marks: number[]): Promise<{ node: Node; event: FixtureEvent }> =>
        pollUntil('another node to be elected', WAIT_MS, () => {
          for (let i = 0; i < candidates.length; i++) {
            const c = candidates[i]!;
            const e = c.proc.events.slice(marks[i]).find((x) => x.ev === 'elected');
            if (e) return { node: c, event: e };
          }
          return undefined;
        }, 2);

      const checkTerm = (term: number, what: string): void => {
        if (term <= lastTerm) throw new Error(`${what}: term ${term} did not go up from ${lastTerm}`);
        lastTerm = term;
      };

      const restart = async (node: Node): Promise<void> => {
        node.proc = spawnNode(node.id);
        await node.proc.waitFor('ready', WAIT_MS);
      };

      try {
        if (config.removals) removals = await config.removals(storeArg);
        checkTerm((await settled()).term, 'first election');
        options.log(`${name}: ${nodeCount} nodes up; leader elected`);

        const handoff: number[] = [];
        const releaseSeen: number[] = [];
        const seenToElected: number[] = [];
        for (let cycle = 1; cycle <= options.cycles; cycle++) {
          const { node: leader, owner: oldOwner } = await settled();
          const atRest = config.atRest;
          if (atRest) await pollUntil('every candidate waiting in line', WAIT_MS, () => atRest(storeArg, nodeCount - 1), 5);
          const others = nodes.filter((n) => n !== leader);
          const marks = others.map((n) => n.proc.events.length);
          const from = leader.proc.events.length;
          leader.proc.send('stop');
          const stopping = await leader.proc.waitFor('stopping', WAIT_MS, undefined, from);
          const { event } = await nextElected(others, marks);
          handoff.push(msBetween(stopping.t, event.t));
          // Split the handoff: until some other node first hears that the old leader is gone
          // (its first leader-changed away from it), and from there to the election.
          const seen = others
            .map((n, i) => n.proc.events.slice(marks[i]).find((e) => e.ev === 'leader-changed' && e.owner !== oldOwner))
            .filter((e): e is FixtureEvent => e !== undefined && BigInt(e.t) <= BigInt(event.t))
            .map((e) => BigInt(e.t))
            .sort((a, b) => (a < b ? -1 : a > b ? 1 : 0))[0];
          if (seen !== undefined) {
            releaseSeen.push(msBetween(stopping.t, seen));
            seenToElected.push(msBetween(seen, event.t));
          }
          checkTerm(num(event, 'term'), `handoff ${cycle}`);
          const exit = await leader.proc.exited;
          if (exit.code !== 0) notes.push(`handoff ${cycle}: stopped node exited with ${JSON.stringify(exit)}`);
          await restart(leader);
        }
        options.log(`${name}: ${options.cycles} handoffs done`);

        const crash: number[] = [];
        const afterExpiry: number[] = [];
        const toFirstWrite: number[] = [];
        const killToRemoval: number[] = [];
        const removalToElected: number[] = [];
        for (let cycle = 1; cycle <= options.cycles; cycle++) {
          const { node: leader, term } = await settled();
          const others = nodes.filter((n) => n !== leader);
          // Kill right after a successful renew: the lease then has (almost) a full TTL to run.
          const renewed = await leader.proc.waitFor('renewed', WAIT_MS, (e) => num(e, 'term') === term, leader.proc.events.length);
          const marks = others.map((n) => n.proc.events.length);
          const killedAt = nowNs();
          leader.proc.signal('SIGKILL');
          const { node: next, event } = await nextElected(others, marks);
          crash.push(msBetween(killedAt, event.t));
          const newTerm = num(event, 'term');
          if (config.firstWrite) {
            const write = await next.proc.waitFor('append', WAIT_MS, (e) => num(e, 'term') === newTerm);
            toFirstWrite.push(msBetween(killedAt, write.t));
          }
          if (removals) {
            const removedAt = await pollUntil(removalText, WAIT_MS, () => removals!.firstAfter(killedAt) ?? undefined, 2);
            killToRemoval.push(msBetween(killedAt, removedAt));
            removalToElected.push(msBetween(removedAt, event.t));
          }
          // The renew was sent at renewed.t - latency; the store's expiry is no earlier than that + TTL.
          const renewSent = BigInt(renewed.t) - BigInt(Math.round(num(renewed, 'latencyMs') * 1e6));
          afterExpiry.push(msBetween(renewSent, event.t) - ttlMs);
          checkTerm(num(event, 'term'), `crash ${cycle}`);
          await leader.proc.exited;
          await restart(leader);
        }
        options.log(`${name}: ${options.cycles} crashes done`);

        const storeErrors = all.reduce((n, p) => n + p.all('store-error').length + p.all('renew-failed').length, 0);
        if (storeErrors > 0) notes.push(`${storeErrors} store-error/renew-failed events across all nodes`);
        notes.push(`${all.length} node processes started in total; terms went 1..${lastTerm} with no repeats`);
        const metrics: Metric[] = [
          metric('handoff', 'leader calls stop() (its `stopping` report) -> another node reports `elected`', handoff, handoffGoal ?? undefined),
        ];
        if (releaseSeen.length > 0) {
          metrics.push(
            metric('handoff:release-seen', 'part of handoff: `stopping` -> the first other node reports a leader-changed away from the old leader (the release has reached it)', releaseSeen),
            metric('handoff:seen-to-elected', 'part of handoff: that report -> the `elected` report (the takeover)', seenToElected),
          );
        }
        metrics.push(
          metric(
            'crash-failover',
            'SIGKILL of the leader, sent right after its successful renew -> another node reports `elected`',
            crash,
            config.firstWrite ? undefined : (crashGoal ?? undefined),
          ),
        );
        if (config.firstWrite) {
          metrics.push(
            metric('crash-to-first-write', 'SIGKILL of the leader (as above) -> the new leader reports its first fenced append accepted by the store', toFirstWrite, crashGoal ?? undefined),
          );
        }
        metrics.push(
          metric(
            'expiry-to-elected',
            'earliest instant the killed leader\'s lease could expire (its last renew sent + TTL) -> another node reports `elected`; how fast expiry is noticed',
            afterExpiry,
          ),
        );
        if (removals) {
          metrics.push(
            metric('kill-to-key-deleted', `SIGKILL of the leader -> a watcher in the bench process sees that ${removalText} (the store's own expiry)`, killToRemoval),
            metric('key-deleted-to-elected', `the bench's watcher sees that ${removalText} -> another node reports \`elected\` (what the client adds)`, removalToElected, config.removalGoal ?? undefined),
          );
        }
        return {
          name,
          description: config.firstWrite ? `${description} With fenced writes: each new leader appends one fenced entry as soon as it is elected.` : description,
          target,
          params: { ttlMs, nodes: nodeCount, cycles: options.cycles },
          metrics,
          notes,
          durationMs: msBetween(started, nowNs()),
        };
      } finally {
        await killAll(all);
        await removals?.close();
        await cleanup();
      }
    },
  };
}
