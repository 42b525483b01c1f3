/**
 * One chaos run on one store: start a private instance, K node processes campaigning for G
 * groups, a seeded nemesis injecting faults until the quiet tail, then stop everything, read the
 * streams and the histories, and check them.
 */
import { spawn } from 'node:child_process';
import type { ChildProcess } from 'node:child_process';
import { closeSync, mkdirSync, mkdtempSync, openSync, readFileSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { SeededRandom, randomInt } from '../../src/core/index.js';
import type { Random, StreamEntry } from '../../src/core/index.js';
import { openStore } from '../../src/open.js';
import { parseHistory, streamOf } from '../fixtures/chaos-history.js';
import type { HistoryRecord } from '../fixtures/chaos-history.js';
import type { ChaosFollowerConfig } from '../fixtures/chaos-follower.js';
import type { ChaosNodeConfig, ChaosNodeMessage } from '../fixtures/chaos-node.js';
import type { ChaosBackend, ChaosInstance, ChaosWorkload, FaultKind } from './backends.js';
import { check, checkReplication, formatRecord, formatViolation } from './checker.js';
import type { CheckResult, ReplicationStats, Violation } from './checker.js';
import { ReplicationObserver } from './observer.js';
import { ensureBuilt, fixture } from './dist.js';
import { FaultProxy } from './proxy/index.js';
import { proxyFaults } from './stores/types.js';

export type ChaosMutation = 'forge-token' | 'skip-entry';

export interface ChaosOptions {
  /** Whole run, including warm-up and the quiet tail (at least TTL + 2 s long). */
  readonly durationMs: number;
  readonly seed: number;
  /** Node processes (default 5). */
  readonly nodes?: number;
  /** Groups every node campaigns for (default 3). */
  readonly groups?: number;
  /** Lease TTL (default: the backend's, else 1500 ms). */
  readonly ttlMs?: number;
  /** Keep the run directory (data, histories, node logs) even when the run is clean. */
  readonly keep?: boolean;
  /** Progress lines (default: none). */
  readonly log?: (line: string) => void;
  /**
   * Break the workload on purpose to see the checker fail: `forge-token` (the nodes, see
   * ChaosNodeConfig.mutation) or `skip-entry` (the followers, see ChaosFollowerConfig.mutation).
   */
  readonly mutation?: ChaosMutation;
  /**
   * Follower processes (default 3): follower i tails group `g(i mod 2)` (g0 gets two when there
   * are two groups or more), each into its own SQLite projection, with a lag advert; a
   * ReadRouter serves reads from them during the run. 0: none.
   */
  readonly followers?: number;
}

/** Reads during the run are routed with this threshold, ms. */
const READ_MAX_LAG_MS = 1000;

export interface FaultEvent {
  readonly cycle: number;
  readonly kind: FaultKind;
  readonly target: string;
  readonly detail: string;
  startAt: number;
  healAt: number | null;
}

export interface ChaosResult extends CheckResult {
  readonly store: string;
  readonly seed: number;
  readonly ttlMs: number;
  readonly startedAt: number;
  readonly cycles: number;
  readonly faults: number;
  readonly faultsByKind: Readonly<Record<string, number>>;
  readonly events: readonly FaultEvent[];
  readonly lastHealAt: number | null;
  readonly restarts: number;
  /** The run directory (removed after a clean run unless `keep`). */
  readonly dir: string;
  readonly kept: boolean;
  /** What the followers and the read router did (null without followers). */
  readonly replication: (ReplicationStats & { readonly followers: number; readonly unserved: number }) | null;
}

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, Math.max(0, ms)));

// ---- the node processes -------------------------------------------------------------------

/** A child process of the run (a campaigning node or a follower), started again after a kill. */
abstract class ChildProc {
  restarts = -1;
  child: ChildProcess | null = null;
  state: 'running' | 'paused' | 'dead' = 'dead';
  /** One proxy per store endpoint (empty for embedded stores). */
  proxies: FaultProxy[] = [];
  /** Set while the runner itself is killing or stopping the process. */
  private expectExit = false;
  private exited: Promise<void> = Promise.resolve();

  constructor(
    protected readonly cluster: Cluster,
    readonly index: number,
    readonly id: string,
  ) {}

  get proc(): string {
    return `${this.id}.${this.restarts}`;
  }

  protected abstract readonly fixtureName: string;
  /** The JSON config of the next incarnation (`restarts` already counts it). */
  protected abstract config(): object;
  /** A message from the current incarnation other than `ready` and `fatal`. */
  protected onMessage(_m: { type: string }): void {}
  /** The current incarnation is gone (or a new one starts). */
  protected forget(): void {}

  /** Start a new incarnation; resolves when it reports ready (or dies). */
  start(): Promise<void> {
    this.restarts++;
    const c = this.cluster;
    const logFd = openSync(join(c.logDir, `${this.proc}.log`), 'a');
    const child = spawn(process.execPath, [fixture(this.fixtureName), JSON.stringify(this.config())], { stdio: ['ignore', logFd, logFd, 'ipc'] });
    closeSync(logFd);
    this.child = child;
    this.state = 'running';
    this.expectExit = false;
    this.forget();
    const proc = this.proc;
    this.exited = new Promise((resolve) => {
      child.on('exit', (code, signal) => {
        if (this.child === child) {
          this.state = 'dead';
          this.forget();
        }
        if (!this.expectExit) c.crashed(proc, `exited by itself (code ${code}, signal ${signal})`);
        resolve();
      });
    });
    return new Promise((resolve) => {
      child.on('message', (m: { type: string; error?: string }) => {
        if (this.child !== child) return;
        if (m.type === 'ready') resolve();
        else if (m.type === 'fatal') c.crashed(proc, m.error ?? 'fatal');
        else this.onMessage(m);
      });
      void this.exited.then(() => resolve());
    });
  }

  /** kill -9; resolves when the process is gone. */
  async kill(): Promise<void> {
    if (!this.child || this.state === 'dead') return;
    this.expectExit = true;
    this.child.kill('SIGKILL');
    await this.exited;
  }

  pause(): void {
    if (this.child && this.state === 'running') {
      this.child.kill('SIGSTOP');
      this.state = 'paused';
    }
  }

  resume(): void {
    if (this.child && this.state === 'paused') {
      this.child.kill('SIGCONT');
      this.state = 'running';
    }
  }

  /** Ask the process to stop (release, flush, exit); kill -9 after `graceMs`. */
  async stop(graceMs = 5000): Promise<void> {
    if (!this.child || this.state === 'dead') return;
    this.resume();
    this.expectExit = true;
    if (this.child.connected) this.child.send({ type: 'stop' });
    else this.child.kill('SIGTERM');
    const timer = setTimeout(() => this.child?.kill('SIGKILL'), graceMs);
    await this.exited;
    clearTimeout(timer);
  }
}

class NodeProc extends ChildProc {
  protected readonly fixtureName = 'chaos-node';
  /** Groups this node last said it leads, with the term. */
  readonly leading = new Map<string, number>();

  constructor(cluster: Cluster, index: number) {
    super(cluster, index, `n${index + 1}`);
  }

  protected config(): ChaosNodeConfig {
    const c = this.cluster;
    return {
      url: c.urlFor(this),
      ...(c.workload === 'redlock' ? { workload: 'redlock' as const, streamUrl: c.streamUrlFor(this) } : {}),
      node: this.id,
      proc: this.proc,
      groups: c.groups,
      ttlMs: c.ttlMs,
      history: join(c.historyDir, `${this.proc}.jsonl`),
      seed: (c.seed * 1000 + this.index * 97 + this.restarts) >>> 0,
      ...(c.mutation === 'forge-token' ? { mutation: c.mutation } : {}),
    };
  }

  protected override onMessage(m: ChaosNodeMessage): void {
    if (m.type === 'elected') this.leading.set(m.group, m.term);
    else if (m.type === 'deposed') {
      if (this.leading.get(m.group) === m.term) this.leading.delete(m.group);
    }
  }

  protected override forget(): void {
    this.leading.clear();
  }

  /** Ask the node to give up what it leads now (it campaigns again after a renew interval). */
  resign(): void {
    if (this.child?.connected && this.state === 'running') this.child.send({ type: 'resign' });
  }
}

/** The follower's poll once caught up, ms; the checker's slack for a claimed lag starts from it. */
const FOLLOWER_POLL_MS = 50;

/** A Model B follower of one group with its own SQLite projection, and its lag advert. */
class FollowerProc extends ChildProc {
  protected readonly fixtureName = 'chaos-follower';

  constructor(
    cluster: Cluster,
    index: number,
    readonly group: string,
    readonly projection: string,
  ) {
    super(cluster, index, `f${index + 1}`);
  }

  protected config(): ChaosFollowerConfig {
    const c = this.cluster;
    return {
      url: c.streamUrlFor(this),
      id: this.id,
      group: this.group,
      projection: this.projection,
      pollMs: FOLLOWER_POLL_MS,
      advertTtlMs: c.ttlMs,
      advertRefreshMs: Math.max(50, Math.floor(c.ttlMs / 6)),
      seed: (c.seed * 1000 + 500 + this.index * 97 + this.restarts) >>> 0,
      ...(c.mutation === 'skip-entry' ? { mutation: c.mutation } : {}),
    };
  }
}

class Cluster {
  readonly nodes: NodeProc[];
  readonly followers: FollowerProc[];
  readonly crashes: { proc: string; error: string }[] = [];

  constructor(
    readonly instance: ChaosInstance,
    readonly groups: readonly string[],
    readonly ttlMs: number,
    readonly historyDir: string,
    readonly logDir: string,
    readonly seed: number,
    readonly mutation: ChaosMutation | undefined,
    count: number,
    readonly workload: ChaosWorkload = 'elector',
    followers: readonly { group: string; projection: string }[] = [],
  ) {
    this.nodes = Array.from({ length: count }, (_, i) => new NodeProc(this, i));
    this.followers = followers.map((f, i) => new FollowerProc(this, i, f.group, f.projection));
  }

  get all(): ChildProc[] {
    return [...this.nodes, ...this.followers];
  }

  async startProxies(): Promise<void> {
    for (const p of this.all) {
      for (const target of this.instance.endpoints) p.proxies.push(await FaultProxy.start({ target, name: `${p.id}->${target.host}:${target.port}` }));
    }
  }

  urlFor(p: ChildProc): string {
    return p.proxies.length > 0 ? this.instance.url(p.proxies.map((x) => x.endpoint)) : this.instance.url();
  }

  /** The fenced streams' store URL for a process (differs from `urlFor` only for workloads whose `url` is not a store). */
  streamUrlFor(p: ChildProc): string {
    const streamUrl = this.instance.streamUrl?.bind(this.instance);
    if (!streamUrl) return this.urlFor(p);
    return p.proxies.length > 0 ? streamUrl(p.proxies.map((x) => x.endpoint)) : streamUrl();
  }

  crashed(proc: string, error: string): void {
    this.crashes.push({ proc, error });
  }

  leaders(): Map<string, string> {
    const out = new Map<string, string>();
    for (const n of this.nodes) for (const g of n.leading.keys()) out.set(g, n.id);
    return out;
  }

  async stopAll(): Promise<void> {
    await Promise.all(this.all.map((n) => n.stop()));
    await Promise.all(this.all.flatMap((p) => p.proxies.splice(0)).map((p) => p.close()));
  }

  /** Last resort on any error: no process may stay stopped or alive. */
  emergency(): void {
    for (const n of this.all) {
      if (n.child && n.state !== 'dead') {
        n.child.kill('SIGCONT');
        n.child.kill('SIGKILL');
      }
    }
  }
}

// ---- the nemesis ----------------------------------------------------------------------------

/** The faults a follower is given too (issue 23: pause, kill, cut connection; store faults hit everyone). */
const followerFaults: readonly FaultKind[] = ['pause', 'kill', 'cut'];
/** Of those faults, the share aimed at a follower. */
const FOLLOWER_SHARE = 0.3;

class Nemesis {
  readonly events: FaultEvent[] = [];
  cycles = 0;
  private readonly kinds: FaultKind[];

  constructor(
    private readonly cluster: Cluster,
    private readonly instance: ChaosInstance,
    backend: ChaosBackend,
    private readonly random: Random,
    private readonly aim: Random,
    private readonly ttlMs: number,
    private readonly log: (line: string) => void,
    private readonly startedAt: number,
    /** The opening fault's draws (kind, target). */
    private readonly opener: Random,
  ) {
    this.kinds = backend.faults.filter((k) => this.possible(k));
  }

  get faultKinds(): readonly FaultKind[] {
    return this.kinds;
  }

  private possible(k: FaultKind): boolean {
    if (proxyFaults.includes(k)) return this.instance.endpoints.length > 0;
    if (k === 'slow') return this.instance.slow !== undefined;
    if (k === 'restart-store') return this.instance.restart !== undefined;
    if (k === 'kill-member') return this.instance.members !== undefined && this.instance.members.count > 0;
    return true;
  }

  private int(lo: number, hi: number): number {
    return randomInt(this.random, lo, hi + 1);
  }

  private pick<T>(list: readonly T[], random: Random = this.random): T {
    return list[Math.floor(random.next() * list.length)]!;
  }

  /**
   * Until `until` (Date.now()): cycles of one or two faults at once, healed, then a rest. At least
   * one cycle, however long the warm-up took. The first cycle ends a leadership (a pause, kill or
   * resign of a leader, where the backend takes one): every run then has a take-over for the
   * checker to judge. A CI run of the Raft backend (22 s, 3 cycles) once drew only faults that no
   * leader had to ride out, and had nothing to judge. Its draws come from a stream of their own,
   * so the rest of a seed's schedule is as before.
   */
  async run(until: number): Promise<void> {
    const opening = this.kinds.filter((k) => k === 'pause' || k === 'kill' || k === 'resign');
    if (opening.length > 0) {
      this.cycles++;
      const target = this.pickNode(new Set(), true, true);
      if (target !== null) await this.inject(this.pick(opening, this.opener), target);
      await sleep(300);
    }
    while ((Date.now() < until || this.cycles === 0) && this.kinds.length > 0) {
      this.cycles++;
      const n = this.random.next() < 0.3 ? 2 : 1;
      const used = new Set<string>();
      const chosen: Promise<void>[] = [];
      for (let i = 0; i < n; i++) {
        const kind = this.pick(this.kinds);
        const storeLevel = kind === 'slow' || kind === 'restart-store' || kind === 'kill-member';
        if (storeLevel && used.has('store')) continue;
        if (storeLevel) {
          used.add('store');
          chosen.push(this.inject(kind, null));
          continue;
        }
        const target = this.pickTarget(used, kind);
        if (target === null) continue;
        used.add(target.id);
        chosen.push(this.inject(kind, target));
      }
      await Promise.all(chosen);
      await sleep(this.int(100, 800));
    }
  }

  /**
   * A running node not yet used this cycle; a current leader when there is one (mostly). Targets
   * come from their own random stream, so the schedule of faults (kinds, durations, rests) is
   * the same for a seed whoever happens to lead.
   */
  private pickTarget(used: Set<string>, kind: FaultKind): ChildProc | null {
    // Followers take their share of the faults they are meant to ride out; the draw is made only
    // when there are followers, so a run without them keeps its schedule for a seed.
    const followers = followerFaults.includes(kind) ? this.cluster.followers.filter((f) => f.state === 'running' && !used.has(f.id)) : [];
    if (followers.length > 0 && this.aim.next() < FOLLOWER_SHARE) return this.pick(followers, this.aim);
    return this.pickNode(used, kind === 'pause' || kind === 'kill' || kind === 'resign' || proxyFaults.includes(kind));
  }

  /** `leaderOnly`: a leader whenever one runs (the opening fault), else as `preferLeader` says. */
  private pickNode(used: Set<string>, preferLeader: boolean, leaderOnly = false): NodeProc | null {
    const free = this.cluster.nodes.filter((n) => n.state === 'running' && !used.has(n.id));
    if (free.length === 0) return null;
    const leaders = free.filter((n) => n.leading.size > 0);
    if (leaderOnly && leaders.length > 0) return this.pick(leaders, this.opener);
    if (preferLeader && leaders.length > 0 && this.aim.next() < 0.85) return this.pick(leaders, this.aim);
    return this.pick(free, this.aim);
  }

  private begin(kind: FaultKind, target: string, detail: string): FaultEvent {
    const e: FaultEvent = { cycle: this.cycles, kind, target, detail, startAt: Date.now(), healAt: null };
    this.events.push(e);
    this.log(`  +${((e.startAt - this.startedAt) / 1000).toFixed(1)}s cycle ${e.cycle}: ${kind} ${target} ${detail}`);
    return e;
  }

  private async inject(kind: FaultKind, node: ChildProc | null): Promise<void> {
    const ttl = this.ttlMs;
    const leads = (): string => (node instanceof NodeProc ? `leads ${[...node.leading.keys()].join(',') || 'nothing'}` : `follows ${(node as FollowerProc).group}`);
    switch (kind) {
      case 'pause': {
        const ms = ttl + this.int(100, ttl);
        const e = this.begin(kind, node!.id, `${ms} ms (${leads()})`);
        node!.pause();
        try {
          await sleep(ms);
        } finally {
          node!.resume(); // always: a stopped SQLite node may hold the write lock
          e.healAt = Date.now();
        }
        return;
      }
      case 'kill': {
        const down = this.int(0, 1000);
        const e = this.begin(kind, node!.id, `down ${down} ms (${leads()})`);
        await node!.kill();
        await sleep(down);
        e.healAt = Date.now();
        await node!.start();
        return;
      }
      case 'resign': {
        // A graceful step-down: the leader releases, handing over where the store does (PostgreSQL,
        // etcd) to a waiting node, which may itself be paused or cut off by this cycle's other fault.
        const e = this.begin(kind, node!.id, `(${leads()})`);
        if (node instanceof NodeProc) node.resign();
        e.healAt = Date.now();
        return;
      }
      case 'slow': {
        const ms = this.int(50, 500);
        const e = this.begin(kind, 'store', `${ms} ms`);
        const held = await this.instance.slow!(ms);
        if (held) e.startAt = held.from;
        e.healAt = held ? held.to : Date.now();
        return;
      }
      case 'restart-store': {
        const down = this.int(0, 1000);
        const e = this.begin(kind, 'store', `down ${down} ms`);
        await this.instance.restart!(down);
        e.healAt = Date.now();
        return;
      }
      case 'kill-member': {
        const members = this.instance.members!;
        const i = this.int(0, members.count - 1);
        const down = this.int(500, 2 * ttl);
        const e = this.begin(kind, `member ${i}`, `down ${down} ms`);
        try {
          await members.kill(i);
          await sleep(down);
        } finally {
          await members.start(i);
          e.healAt = Date.now();
        }
        return;
      }
      case 'drop': {
        const proxies = node!.proxies;
        const ms = this.int(Math.floor(ttl / 2), 2 * ttl);
        // Drawn up front: faults of one cycle run side by side, and their draws must not interleave.
        const gaps = Array.from({ length: Math.ceil(ms / 100) }, () => this.int(100, 400));
        const e = this.begin(kind, node!.id, `resets every 100-400 ms for ${ms} ms`);
        let dropped = 0;
        const until = Date.now() + ms;
        for (let i = 0; Date.now() < until; i++) {
          for (const p of proxies) dropped += await p.drop();
          await sleep(gaps[i] ?? 250);
        }
        e.healAt = Date.now();
        this.log(`    ${node!.id}: ${dropped} connections reset`);
        return;
      }
      case 'tear': {
        const proxies = node!.proxies;
        const ms = this.int(Math.floor(ttl / 2), 2 * ttl);
        // Drawn up front, as for drop: one cut point and direction per round.
        const rounds = Array.from({ length: Math.ceil(ms / 100) }, () => ({ gap: this.int(100, 400), keep: this.int(1, 200), up: this.random.next() < 0.25 }));
        const e = this.begin(kind, node!.id, `torn chunks every 100-400 ms for ${ms} ms`);
        let torn = 0;
        const until = Date.now() + ms;
        for (let i = 0; Date.now() < until; i++) {
          const r = rounds[i] ?? { gap: 250, keep: 10, up: false };
          for (const p of proxies) torn += await p.tear(r.keep, r.up ? 'up' : 'down');
          await sleep(r.gap);
        }
        e.healAt = Date.now();
        this.log(`    ${node!.id}: ${torn} connections torn`);
        return;
      }
      case 'cut':
      case 'blackhole':
      case 'delay':
      case 'one-way': {
        const proxies = node!.proxies;
        const ms = this.int(Math.floor(ttl / 2), 2 * ttl);
        const delayMs = this.int(20, Math.floor(ttl / 2));
        const direction = this.random.next() < 0.5 ? 'up' : 'down';
        const detail = kind === 'delay' ? `${delayMs} ms latency for ${ms} ms` : kind === 'one-way' ? `only ${direction} for ${ms} ms` : `for ${ms} ms`;
        const e = this.begin(kind, node!.id, detail);
        try {
          for (const p of proxies) {
            if (kind === 'cut') await p.cut();
            else if (kind === 'blackhole') await p.blackhole();
            else if (kind === 'delay') await p.delay(delayMs);
            else await p.oneWay(direction);
          }
          await sleep(ms);
        } finally {
          for (const p of proxies) await p.heal();
          e.healAt = Date.now();
        }
        return;
      }
    }
  }
}

// ---- the run --------------------------------------------------------------------------------

async function readWholeStream(url: string, groups: readonly string[]): Promise<Map<string, StreamEntry[]>> {
  const store = await openStore(url);
  try {
    const out = new Map<string, StreamEntry[]>();
    for (const g of groups) {
      const all: StreamEntry[] = [];
      for (;;) {
        const page = await store.readStream(streamOf(g), { after: all.length === 0 ? 0 : all[all.length - 1]!.seq, limit: 10_000 });
        all.push(...page);
        if (page.length < 10_000) break;
      }
      out.set(g, all);
    }
    return out;
  } finally {
    await store.close();
  }
}

function readHistories(dir: string): HistoryRecord[] {
  const out: HistoryRecord[] = [];
  for (const f of readdirSync(dir).sort()) {
    if (f.endsWith('.jsonl')) for (const r of parseHistory(readFileSync(join(dir, f), 'utf8'), f)) out.push(r); // not push(...): a file can hold 100,000s
  }
  return out;
}

function logTail(logDir: string, proc: string, lines = 15): string {
  try {
    return readFileSync(join(logDir, `${proc}.log`), 'utf8').trimEnd().split('\n').slice(-lines).join('\n');
  } catch {
    return '';
  }
}

/** Runs in progress, for `abortAllRuns` (Ctrl-C). */
const active = new Set<{ cluster: Cluster | null; instance: ChaosInstance }>();

/** On interrupt: kill -9 every node process of every run in progress (paused ones too) and stop their instances. */
export async function abortAllRuns(): Promise<void> {
  const runs = [...active];
  for (const r of runs) r.cluster?.emergency();
  await Promise.allSettled(runs.map((r) => r.instance.stop()));
}

export async function runChaos(backend: ChaosBackend, options: ChaosOptions): Promise<ChaosResult> {
  ensureBuilt();
  const log = options.log ?? ((): void => {});
  const ttlMs = options.ttlMs ?? backend.ttlMs ?? 1500;
  const quietMs = ttlMs + 2000;
  if (options.durationMs < quietMs + 2000) throw new RangeError(`duration must be at least ${quietMs + 2000} ms for a ${ttlMs} ms TTL`);
  const nodeCount = options.nodes ?? 5;
  const groups = Array.from({ length: options.groups ?? 3 }, (_, i) => `g${i}`);
  const random = new SeededRandom(options.seed);
  const dir = mkdtempSync(join(tmpdir(), `tenure-chaos-${backend.name}-`));
  const historyDir = join(dir, 'history');
  const logDir = join(dir, 'logs');
  mkdirSync(historyDir);
  mkdirSync(logDir);
  const startedAt = Date.now();
  log(
    `chaos ${backend.name}: seed ${options.seed}, ${nodeCount} nodes, ${groups.length} groups, ttl ${ttlMs} ms, ${options.durationMs} ms` +
      `${options.mutation ? `, mutation ${options.mutation}` : ''}, in ${dir}`,
  );

  const instance = await backend.start({ dir, random: new SeededRandom(options.seed ^ 0x27d4eb2f), log });
  let cluster: Cluster | null = null;
  let observer: ReplicationObserver | null = null;
  const run: { cluster: Cluster | null; instance: ChaosInstance } = { cluster: null, instance };
  active.add(run);
  try {
    const projectionDir = join(dir, 'projections');
    mkdirSync(projectionDir);
    const followers = Array.from({ length: options.followers ?? 3 }, (_, i) => ({
      group: groups[i % Math.min(2, groups.length)]!,
      projection: join(projectionDir, `f${i + 1}.db`),
    }));
    cluster = new Cluster(instance, groups, ttlMs, historyDir, logDir, options.seed, options.mutation, nodeCount, backend.workload, followers);
    run.cluster = cluster;
    await cluster.startProxies();
    await Promise.all(cluster.all.map((n) => n.start()));
    observer = new ReplicationObserver({
      storeUrl: instance.streamUrl?.() ?? instance.url(),
      followers: cluster.followers.map((f) => ({ id: f.id, group: f.group, projection: f.projection })),
      maxLagMs: backend.readMaxLagMs ?? READ_MAX_LAG_MS,
      everyMs: 50,
    });
    await observer.start();

    // Warm-up: every group has a leader, or give up waiting after a few TTLs.
    const warmUntil = Date.now() + 3 * ttlMs + 2000;
    while (cluster.leaders().size < groups.length && Date.now() < warmUntil) await sleep(50);
    log(`  leaders after ${Date.now() - startedAt} ms: ${[...cluster.leaders()].map(([g, n]) => `${g}=${n}`).join(' ')}`);

    const nemesis = new Nemesis(cluster, instance, backend, random, new SeededRandom(options.seed ^ 0x5bd1e995), ttlMs, log, startedAt, new SeededRandom(options.seed ^ 0x1b873593));
    log(`  faults: ${nemesis.faultKinds.join(', ')}`);
    await nemesis.run(startedAt + options.durationMs - quietMs);
    const healed = nemesis.events.map((e) => e.healAt ?? Date.now());
    const lastHealAt = healed.length > 0 ? Math.max(...healed) : null;
    // The quiet tail: at least TTL + 1.5 s after the last heal, so the liveness window fits.
    await sleep(Math.max(startedAt + options.durationMs, (lastHealAt ?? 0) + ttlMs + 1500) - Date.now());
    const endAt = Date.now();
    await observer.stop();
    await cluster.stopAll();
    observer.finalSample();

    const streams = await readWholeStream(instance.streamUrl?.() ?? instance.url(), groups);
    const histories = readHistories(historyDir);
    const checked = check({ groups, streams, histories, ttlMs, lastHealAt, endAt });
    const violations: Violation[] = [...checked.violations];
    let replication: ChaosResult['replication'] = null;
    if (cluster.followers.length > 0) {
      const r = checkReplication({ streams, samples: observer.samples, heads: observer.heads, reads: observer.reads, slackMs: FOLLOWER_POLL_MS + 100 });
      for (const v of r.violations) violations.push(v);
      replication = { ...r.stats, followers: cluster.followers.length, unserved: observer.unserved };
    }
    for (const c of cluster.crashes) {
      violations.push({ rule: 'node-crashed', group: null, message: `${c.proc}: ${c.error}\n${logTail(logDir, c.proc)}`, entries: [], records: [] });
    }
    const faultsByKind: Record<string, number> = {};
    for (const e of nemesis.events) faultsByKind[e.kind] = (faultsByKind[e.kind] ?? 0) + 1;
    const kept = options.keep === true || violations.length > 0;
    return {
      ...checked,
      violations,
      store: backend.name,
      seed: options.seed,
      ttlMs,
      startedAt,
      cycles: nemesis.cycles,
      faults: nemesis.events.length,
      faultsByKind,
      events: nemesis.events,
      lastHealAt,
      restarts: cluster.nodes.reduce((s, n) => s + n.restarts, 0),
      dir,
      kept,
      replication,
    };
  } catch (err) {
    cluster?.emergency();
    throw err;
  } finally {
    await observer?.stop();
    await observer?.close();
    if (cluster) await cluster.stopAll().catch(() => cluster?.emergency());
    await instance.stop();
    active.delete(run);
  }
}

/** Remove the run directory of a clean run (unless kept). */
export function cleanUp(result: ChaosResult): void {
  if (!result.kept) rmSync(result.dir, { recursive: true, force: true });
}

/** `chaos sqlite: cycles N, faults N, accepted N, rejected N, ambiguous N, violations N` */
export function summaryLine(r: ChaosResult): string {
  return `chaos ${r.store}: cycles ${r.cycles}, faults ${r.faults}, accepted ${r.accepted}, rejected ${r.rejected}, ambiguous ${r.ambiguous}, violations ${r.violations.length}`;
}

/** Detail lines: faults by kind, leader changes, recovery after the last heal, per group. */
export function detailLines(r: ChaosResult): string[] {
  const kinds = Object.entries(r.faultsByKind).map(([k, n]) => `${k} ${n}`).join(', ') || 'none';
  const groups = [...r.groups].map(([g, s]) => `${g}: ${s.entries} entries, ${s.terms} terms, recovery ${s.recoveryMs === null ? '-' : `${s.recoveryMs} ms`}`);
  return [
    `  faults by kind: ${kinds}; node restarts ${r.restarts}; leader changes ${r.leaderChanges}`,
    `  late writes with an old token: ${r.late.rejected} fenced, ${r.late.ok} accepted (no newer term had written); ambiguous that landed ${r.ambiguousLanded}; store open retries ${r.openRetries}`,
    `  ${groups.join('; ')}`,
    ...(r.replication
      ? [
          `  followers ${r.replication.followers}: ${r.replication.applied} rows applied, ${r.replication.samples} projection samples; ` +
            `reads ${r.replication.reads} (${r.replication.followerReads} by followers, ${r.replication.behindReads} of them behind the head seen before; ${r.replication.unserved} unserved)`,
        ]
      : []),
  ];
}

/** The failure report: the seed, each violation with its part of the stream and history, and the faults around it. */
export function failureReport(r: ChaosResult): string {
  const lines = [`chaos ${r.store}: ${r.violations.length} violation(s) with seed ${r.seed}; rerun: npm run chaos -- --store ${r.store} --seed ${r.seed}`];
  for (const v of r.violations) {
    lines.push(formatViolation(v, r.startedAt));
    const times = v.records.map((x) => x.at);
    if (times.length > 0) {
      const lo = Math.min(...times) - 2 * r.ttlMs;
      const hi = Math.max(...times) + r.ttlMs;
      for (const e of r.events) {
        if (e.startAt <= hi && (e.healAt ?? Infinity) >= lo) {
          lines.push(
            `    fault +${((e.startAt - r.startedAt) / 1000).toFixed(3)}s..+${e.healAt === null ? '?' : ((e.healAt - r.startedAt) / 1000).toFixed(3)}s ${e.kind} ${e.target} ${e.detail}`,
          );
        }
      }
    }
  }
  lines.push(`  run directory kept: ${r.dir} (histories in history/, node logs in logs/)`);
  return lines.join('\n');
}

export { formatRecord };
