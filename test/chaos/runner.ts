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
import type { ChaosNodeConfig, ChaosNodeMessage } from '../fixtures/chaos-node.js';
import type { ChaosBackend, ChaosInstance, ChaosWorkload, FaultKind } from './backends.js';
import { check, formatRecord, formatViolation } from './checker.js';
import type { CheckResult, Violation } from './checker.js';
import { ensureBuilt, fixture } from './dist.js';
import { FaultProxy } from './proxy/index.js';
import { proxyFaults } from './stores/types.js';

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
  /** Break the workload on purpose (see ChaosNodeConfig.mutation) to see the checker fail. */
  readonly mutation?: 'forge-token';
}

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
}

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, Math.max(0, ms)));

// ---- the node processes -------------------------------------------------------------------

class NodeProc {
  readonly id: string;
  restarts = -1;
  child: ChildProcess | null = null;
  state: 'running' | 'paused' | 'dead' = 'dead';
  /** Groups this node last said it leads, with the term. */
  readonly leading = new Map<string, number>();
  /** Set while the runner itself is killing or stopping the process. */
  private expectExit = false;
  private exited: Promise<void> = Promise.resolve();

  constructor(
    private readonly cluster: Cluster,
    readonly index: number,
  ) {
    this.id = `n${index + 1}`;
  }

  get proc(): string {
    return `${this.id}.${this.restarts}`;
  }

  /** Start a new incarnation; resolves when it reports ready (or dies). */
  start(): Promise<void> {
    this.restarts++;
    const c = this.cluster;
    const config: ChaosNodeConfig = {
      url: c.urlFor(this.index),
      ...(c.workload === 'redlock' ? { workload: 'redlock' as const, streamUrl: c.streamUrlFor(this.index) } : {}),
      node: this.id,
      proc: this.proc,
      groups: c.groups,
      ttlMs: c.ttlMs,
      history: join(c.historyDir, `${this.proc}.jsonl`),
      seed: (c.seed * 1000 + this.index * 97 + this.restarts) >>> 0,
      ...(c.mutation ? { mutation: c.mutation } : {}),
    };
    const logFd = openSync(join(c.logDir, `${this.proc}.log`), 'a');
    const child = spawn(process.execPath, [fixture('chaos-node'), JSON.stringify(config)], { stdio: ['ignore', logFd, logFd, 'ipc'] });
    closeSync(logFd);
    this.child = child;
    this.state = 'running';
    this.expectExit = false;
    this.leading.clear();
    const proc = this.proc;
    this.exited = new Promise((resolve) => {
      child.on('exit', (code, signal) => {
        if (this.child === child) {
          this.state = 'dead';
          this.leading.clear();
        }
        if (!this.expectExit) c.crashed(proc, `exited by itself (code ${code}, signal ${signal})`);
        resolve();
      });
    });
    return new Promise((resolve) => {
      child.on('message', (m: ChaosNodeMessage) => {
        if (this.child !== child) return;
        if (m.type === 'ready') resolve();
        else if (m.type === 'elected') this.leading.set(m.group, m.term);
        else if (m.type === 'deposed') {
          if (this.leading.get(m.group) === m.term) this.leading.delete(m.group);
        } else if (m.type === 'fatal') c.crashed(proc, m.error);
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

  /** Ask the node to give up what it leads now (it campaigns again after a renew interval). */
  resign(): void {
    if (this.child?.connected && this.state === 'running') this.child.send({ type: 'resign' });
  }

  resume(): void {
    if (this.child && this.state === 'paused') {
      this.child.kill('SIGCONT');
      this.state = 'running';
    }
  }

  /** Ask the node to stop (release, flush, exit); kill -9 after `graceMs`. */
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

class Cluster {
  readonly nodes: NodeProc[];
  readonly crashes: { proc: string; error: string }[] = [];
  /** Per node, one proxy per store endpoint (empty for embedded stores). */
  readonly proxies: FaultProxy[][] = [];

  constructor(
    readonly instance: ChaosInstance,
    readonly groups: readonly string[],
    readonly ttlMs: number,
    readonly historyDir: string,
    readonly logDir: string,
    readonly seed: number,
    readonly mutation: 'forge-token' | undefined,
    count: number,
    readonly workload: ChaosWorkload = 'elector',
  ) {
    this.nodes = Array.from({ length: count }, (_, i) => new NodeProc(this, i));
  }

  async startProxies(): Promise<void> {
    for (let i = 0; i < this.nodes.length; i++) {
      const list: FaultProxy[] = [];
      for (const target of this.instance.endpoints) list.push(await FaultProxy.start({ target, name: `n${i + 1}->${target.host}:${target.port}` }));
      this.proxies.push(list);
    }
  }

  urlFor(index: number): string {
    const proxies = this.proxies[index] ?? [];
    return proxies.length > 0 ? this.instance.url(proxies.map((p) => p.endpoint)) : this.instance.url();
  }

  /** The fenced streams' store URL for a node (only for workloads whose `url` is not a store). */
  streamUrlFor(index: number): string {
    const proxies = this.proxies[index] ?? [];
    const streamUrl = this.instance.streamUrl?.bind(this.instance);
    if (!streamUrl) return this.urlFor(index);
    return proxies.length > 0 ? streamUrl(proxies.map((p) => p.endpoint)) : streamUrl();
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
    await Promise.all(this.nodes.map((n) => n.stop()));
    await Promise.all(this.proxies.flat().map((p) => p.close()));
  }

  /** Last resort on any error: no process may stay stopped or alive. */
  emergency(): void {
    for (const n of this.nodes) {
      if (n.child && n.state !== 'dead') {
        n.child.kill('SIGCONT');
        n.child.kill('SIGKILL');
      }
    }
  }
}

// ---- the nemesis ----------------------------------------------------------------------------

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

  /** Until `until` (Date.now()): cycles of one or two faults at once, healed, then a rest. */
  async run(until: number): Promise<void> {
    while (Date.now() < until && this.kinds.length > 0) {
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
        const target = this.pickNode(used, kind === 'pause' || kind === 'kill' || kind === 'resign' || proxyFaults.includes(kind));
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
  private pickNode(used: Set<string>, preferLeader: boolean): NodeProc | null {
    const free = this.cluster.nodes.filter((n) => n.state === 'running' && !used.has(n.id));
    if (free.length === 0) return null;
    const leaders = free.filter((n) => n.leading.size > 0);
    if (preferLeader && leaders.length > 0 && this.aim.next() < 0.85) return this.pick(leaders, this.aim);
    return this.pick(free, this.aim);
  }

  private begin(kind: FaultKind, target: string, detail: string): FaultEvent {
    const e: FaultEvent = { cycle: this.cycles, kind, target, detail, startAt: Date.now(), healAt: null };
    this.events.push(e);
    this.log(`  +${((e.startAt - this.startedAt) / 1000).toFixed(1)}s cycle ${e.cycle}: ${kind} ${target} ${detail}`);
    return e;
  }

  private async inject(kind: FaultKind, node: NodeProc | null): Promise<void> {
    const ttl = this.ttlMs;
    switch (kind) {
      case 'pause': {
        const ms = ttl + this.int(100, ttl);
        const e = this.begin(kind, node!.id, `${ms} ms (leads ${[...node!.leading.keys()].join(',') || 'nothing'})`);
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
        const e = this.begin(kind, node!.id, `down ${down} ms (leads ${[...node!.leading.keys()].join(',') || 'nothing'})`);
        await node!.kill();
        await sleep(down);
        e.healAt = Date.now();
        await node!.start();
        return;
      }
      case 'resign': {
        // A graceful step-down: the leader releases, handing over where the store does (PostgreSQL,
        // etcd) to a waiting node, which may itself be paused or cut off by this cycle's other fault.
        const e = this.begin(kind, node!.id, `(leads ${[...node!.leading.keys()].join(',') || 'nothing'})`);
        node!.resign();
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
        const proxies = this.cluster.proxies[node!.index] ?? [];
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
      case 'cut':
      case 'blackhole':
      case 'delay':
      case 'one-way': {
        const proxies = this.cluster.proxies[node!.index] ?? [];
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
    if (f.endsWith('.jsonl')) out.push(...parseHistory(readFileSync(join(dir, f), 'utf8'), f));
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
  const run: { cluster: Cluster | null; instance: ChaosInstance } = { cluster: null, instance };
  active.add(run);
  try {
    cluster = new Cluster(instance, groups, ttlMs, historyDir, logDir, options.seed, options.mutation, nodeCount, backend.workload);
    run.cluster = cluster;
    await cluster.startProxies();
    await Promise.all(cluster.nodes.map((n) => n.start()));

    // Warm-up: every group has a leader, or give up waiting after a few TTLs.
    const warmUntil = Date.now() + 3 * ttlMs + 2000;
    while (cluster.leaders().size < groups.length && Date.now() < warmUntil) await sleep(50);
    log(`  leaders after ${Date.now() - startedAt} ms: ${[...cluster.leaders()].map(([g, n]) => `${g}=${n}`).join(' ')}`);

    const nemesis = new Nemesis(cluster, instance, backend, random, new SeededRandom(options.seed ^ 0x5bd1e995), ttlMs, log, startedAt);
    log(`  faults: ${nemesis.faultKinds.join(', ')}`);
    await nemesis.run(startedAt + options.durationMs - quietMs);
    const healed = nemesis.events.map((e) => e.healAt ?? Date.now());
    const lastHealAt = healed.length > 0 ? Math.max(...healed) : null;
    // The quiet tail: at least TTL + 1.5 s after the last heal, so the liveness window fits.
    await sleep(Math.max(startedAt + options.durationMs, (lastHealAt ?? 0) + ttlMs + 1500) - Date.now());
    const endAt = Date.now();
    await cluster.stopAll();

    const streams = await readWholeStream(instance.streamUrl?.() ?? instance.url(), groups);
    const histories = readHistories(historyDir);
    const checked = check({ groups, streams, histories, ttlMs, lastHealAt, endAt });
    const violations: Violation[] = [...checked.violations];
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
    };
  } catch (err) {
    cluster?.emergency();
    throw err;
  } finally {
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
