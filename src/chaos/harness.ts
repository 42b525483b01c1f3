/**
 * The chaos harness as shipped (`tenure chaos`): N local node processes (src/chaos/node.ts)
 * campaign for a few groups on the user's own store and write fenced entries, while a seeded
 * nemesis pauses (SIGSTOP past the TTL) and kills them, and, where the store URL names host:port
 * endpoints, cuts, resets, blackholes, delays and half-opens their connections through a fault
 * proxy per node. Then the nodes stop, the checker (src/chaos/checker.ts) judges the streams
 * against the nodes' histories, and everything the run wrote is purged.
 *
 * Every name the run uses starts with its namespace `PREFIX<runid>/` (groups `…/g0`, streams
 * `…/g0.log`): nothing outside it is read for the verdict, written or deleted. The store must be
 * shared by many processes and able to delete by prefix (`Store.purge`).
 */
import { spawn } from 'node:child_process';
import type { ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { closeSync, existsSync, mkdirSync, mkdtempSync, openSync, readFileSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { SeededRandom, randomInt, redactSecrets, redactUrl } from '../core/index.js';
import type { Random, StreamEntry } from '../core/index.js';
import type { TenureStore } from '../open.js';
import { check, formatViolation } from './checker.js';
import type { GroupStats, Violation, ViolationRule } from './checker.js';
import { FaultProxy } from './fault-proxy.js';
import type { Endpoint } from './fault-proxy.js';
import { parseHistory, streamOf } from './history.js';
import type { HistoryRecord } from './history.js';
import type { ChaosNodeConfig, ChaosNodeMessage } from './protocol.js';

/** Faults on one node process. */
export const processFaults = ['pause', 'kill', 'resign'] as const;
/** Faults on one node's connections to the store, through its fault proxy (host:port URLs only). */
export const connectionFaults = ['cut', 'drop', 'blackhole', 'delay', 'one-way', 'tear'] as const;
export type ChaosFault = (typeof processFaults)[number] | (typeof connectionFaults)[number];
export const chaosFaults: readonly ChaosFault[] = [...processFaults, ...connectionFaults];

/** Safety rules (their violation is exit code 5); the others are liveness or a crashed node. */
export const safetyRules: readonly ViolationRule[] = ['stream-shape', 'term-order', 'two-owners', 'term-went-back', 'reordered', 'duplicated', 'lost-ack', 'false-reject'];

export interface ChaosRunOptions {
  /** The store: opened by the caller for the checks and the purge; the nodes get `url`. */
  readonly store: TenureStore;
  /** The store's URL (credentials included: the node processes need them; never printed). */
  readonly url: string;
  readonly nodes: number;
  readonly groups: number;
  /** Whole run, including warm-up and the quiet tail, ms. */
  readonly durationMs: number;
  readonly ttlMs: number;
  readonly faults: readonly ChaosFault[];
  /** The namespace's start (`tenure-chaos-`); a random run id and `/` follow. */
  readonly prefix: string;
  readonly seed: number;
  /** A deliberate bug, to see the checker fail: nodes now and then write with the holder's term. */
  readonly mutation?: 'forge-token';
  /** Progress lines (already free of credentials). */
  readonly log: (line: string) => void;
  /** Abort (SIGINT): nodes are killed, the namespace purged, and the run resolves as `aborted`. */
  readonly signal?: AbortSignal;
}

export interface ChaosFaultEvent {
  readonly kind: ChaosFault;
  readonly target: string;
  readonly detail: string;
  /** ms since the start of the run. */
  readonly startMs: number;
  healMs: number | null;
}

export type ChaosVerdict = 'pass' | 'unsafe' | 'fail' | 'aborted';

export interface ChaosReport {
  readonly verdict: ChaosVerdict;
  /** The store URL with its credentials replaced by `***`. */
  readonly store: string;
  readonly namespace: string;
  readonly seed: number;
  readonly nodes: number;
  readonly groups: number;
  readonly ttlMs: number;
  readonly durationMs: number;
  readonly elapsedMs: number;
  readonly proxied: boolean;
  readonly faults: readonly ChaosFaultEvent[];
  readonly faultsByKind: Readonly<Record<string, number>>;
  readonly restarts: number;
  readonly accepted: number;
  readonly rejected: number;
  readonly ambiguous: number;
  readonly leaderChanges: number;
  readonly perGroup: Readonly<Record<string, GroupStats>>;
  readonly violations: readonly { readonly rule: ViolationRule; readonly safety: boolean; readonly group: string | null; readonly message: string }[];
  /** What the purge removed, and what was left with the namespace's prefix after it (0 when clean). */
  readonly cleanup: { readonly purged: number; readonly left: number; readonly error: string | null };
  /** The run directory (histories, node logs) when kept (a failed run), else null. */
  readonly kept: string | null;
}

const sleep = (ms: number, signal?: AbortSignal): Promise<void> =>
  new Promise((resolve) => {
    if (signal?.aborted) return resolve();
    const timer = setTimeout(done, Math.max(0, ms));
    function done(): void {
      clearTimeout(timer);
      signal?.removeEventListener('abort', done);
      resolve();
    }
    signal?.addEventListener('abort', done, { once: true });
  });

const DEFAULT_PORTS: Readonly<Record<string, number>> = { postgres: 5432, postgresql: 5432, mysql: 3306, redis: 6379, etcd: 2379 };

/**
 * The host:port endpoints of a URL that names them (`scheme://[user@]host:port[,host:port…]/…`),
 * and a function that rebuilds the URL with other endpoints in their place (the proxies'); null
 * for a URL without endpoints (sqlite:, a unix socket).
 */
export function urlEndpoints(url: string): { endpoints: Endpoint[]; via(endpoints: readonly Endpoint[]): string } | null {
  const m = /^([a-z][a-z0-9+.-]*):\/\/([^@/?#]*@)?([^/?#]+)(.*)$/is.exec(url);
  if (!m) return null;
  const scheme = m[1]!.toLowerCase();
  const endpoints: Endpoint[] = [];
  for (const part of m[3]!.split(',')) {
    const hp = /^(\[[0-9a-f:.]+\]|[^:[\]]+)(?::(\d{1,5}))?$/i.exec(part.trim());
    if (!hp) return null;
    const port = hp[2] !== undefined ? Number(hp[2]) : DEFAULT_PORTS[scheme];
    if (port === undefined || port < 1 || port > 65535) return null;
    endpoints.push({ host: hp[1]!.replace(/^\[|\]$/g, ''), port });
  }
  return {
    endpoints,
    via: (list) => `${m[1]}://${m[2] ?? ''}${list.map((e) => `${e.host.includes(':') ? `[${e.host}]` : e.host}:${e.port}`).join(',')}${m[4]}`,
  };
}

/** The compiled node process next to this module. */
function nodeScript(): string {
  const path = fileURLToPath(new URL('./node.js', import.meta.url));
  if (!existsSync(path)) throw new Error(`the chaos node is not built (${path}): run npm run build`);
  return path;
}

/** One node: its process (restarted after a kill), its proxies, and what it says it leads. */
class ChaosNode {
  restarts = -1;
  child: ChildProcess | null = null;
  state: 'running' | 'paused' | 'dead' = 'dead';
  readonly leading = new Set<string>();
  proxies: FaultProxy[] = [];
  crashes: string[] = [];
  private expectExit = false;
  private exited: Promise<void> = Promise.resolve();

  constructor(
    readonly id: string,
    readonly index: number,
    private readonly config: (node: ChaosNode) => ChaosNodeConfig,
    private readonly logDir: string,
  ) {}

  start(): Promise<void> {
    this.restarts++;
    const fd = openSync(join(this.logDir, `${this.id}.${this.restarts}.log`), 'a');
    const child = spawn(process.execPath, [nodeScript(), JSON.stringify(this.config(this))], { stdio: ['ignore', fd, fd, 'ipc'] });
    closeSync(fd);
    this.child = child;
    this.state = 'running';
    this.expectExit = false;
    this.leading.clear();
    // A stop message sent as the process dies fails with EPIPE: the exit handler tells the rest.
    child.on('error', () => {});
    this.exited = new Promise((resolve) => {
      child.on('exit', (code, signal) => {
        if (this.child === child) {
          this.state = 'dead';
          this.leading.clear();
        }
        if (!this.expectExit) this.crashes.push(`${this.id}.${this.restarts} exited by itself (code ${code}, signal ${signal})`);
        resolve();
      });
    });
    return new Promise((resolve) => {
      child.on('message', (m: ChaosNodeMessage) => {
        if (this.child !== child) return;
        if (m.type === 'ready') resolve();
        else if (m.type === 'fatal') this.crashes.push(`${this.id}.${this.restarts}: ${m.error}`);
        else if (m.type === 'elected') this.leading.add(m.group);
        else if (m.type === 'deposed') this.leading.delete(m.group);
      });
      void this.exited.then(() => resolve());
    });
  }

  /** kill -9 now, without waiting (interrupt, or an error in the run). */
  killNow(): void {
    if (!this.child || this.state === 'dead') return;
    this.expectExit = true;
    this.child.kill('SIGCONT');
    this.child.kill('SIGKILL');
  }

  async kill(): Promise<void> {
    if (!this.child || this.state === 'dead') return;
    this.expectExit = true;
    this.child.kill('SIGCONT');
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

  resign(): void {
    if (this.child?.connected && this.state === 'running') this.child.send({ type: 'resign' });
  }

  /** Ask the node to stop (release, flush its history, exit); kill -9 after `graceMs`. */
  async stop(graceMs = 5000): Promise<void> {
    if (!this.child || this.state === 'dead') return;
    this.resume();
    this.expectExit = true;
    if (this.child.connected) this.child.send({ type: 'stop' }, () => {});
    else this.child.kill('SIGTERM');
    const timer = setTimeout(() => this.child?.kill('SIGKILL'), graceMs);
    await this.exited;
    clearTimeout(timer);
  }
}

/** Run the harness; resolves with the report (never rejects after nodes started: errors become a `fail` verdict). */
export async function runChaosHarness(o: ChaosRunOptions): Promise<ChaosReport> {
  const startedAt = Date.now();
  const elapsed = (): number => Date.now() - startedAt;
  const secs = (ms: number): string => `+${(ms / 1000).toFixed(1)}s`;
  const namespace = `${o.prefix}${randomBytes(4).toString('hex')}/`;
  const groups = Array.from({ length: o.groups }, (_, i) => `${namespace}g${i}`);
  const random: Random = new SeededRandom(o.seed);
  const aim: Random = new SeededRandom(o.seed ^ 0x5bd1e995);
  const int = (lo: number, hi: number): number => randomInt(random, lo, hi + 1);
  const clean = (text: string): string => redactSecrets(text, [o.url]);
  const display = redactUrl(o.url);
  const split = urlEndpoints(o.url);
  const proxied = split !== null && o.faults.some((f) => (connectionFaults as readonly string[]).includes(f));
  const dir = mkdtempSync(join(tmpdir(), 'tenure-chaos-'));
  const historyDir = join(dir, 'history');
  const logDir = join(dir, 'logs');
  mkdirSync(historyDir);
  mkdirSync(logDir);
  const quietMs = o.ttlMs + 2000;
  const events: ChaosFaultEvent[] = [];
  const violations: Violation[] = [];
  let failure: string | null = null;

  const nodes: ChaosNode[] = Array.from(
    { length: o.nodes },
    (_, i) =>
      new ChaosNode(
        `n${i + 1}`,
        i,
        (n) => ({
          url: n.proxies.length > 0 && split ? split.via(n.proxies.map((p) => p.endpoint)) : o.url,
          node: n.id,
          proc: `${n.id}.${n.restarts}`,
          groups,
          ttlMs: o.ttlMs,
          history: join(historyDir, `${n.id}.${n.restarts}.jsonl`),
          seed: (o.seed * 1000 + n.index * 97 + n.restarts) >>> 0,
          ...(o.mutation ? { mutation: o.mutation } : {}),
        }),
        logDir,
      ),
  );
  const emergency = (): void => {
    for (const n of nodes) n.killNow();
  };
  const onAbort = (): void => emergency();
  o.signal?.addEventListener('abort', onAbort, { once: true });

  o.log(`chaos on ${display}: namespace ${namespace}, ${o.nodes} nodes, ${o.groups} groups, ttl ${o.ttlMs} ms, ${o.durationMs} ms, seed ${o.seed}`);
  o.log(`  faults: ${o.faults.join(', ')}${proxied ? ' (connection faults through a proxy per node)' : ''}${o.mutation ? `; mutation ${o.mutation}` : ''}`);
  let progress: NodeJS.Timeout | null = null;
  try {
    if (proxied && split) {
      for (const n of nodes) for (const target of split.endpoints) n.proxies.push(await FaultProxy.start({ target, name: `${n.id}->${target.host}:${target.port}` }));
    }
    await Promise.all(nodes.map((n) => n.start()));
    let lastEntries = 0;
    progress = setInterval(() => {
      void entriesWritten(o.store, groups).then(
        (count) => {
          lastEntries = count;
          const leaders = groups.map((g) => `${g.slice(namespace.length)}=${nodes.find((n) => n.leading.has(g))?.id ?? '-'}`).join(' ');
          o.log(`  ${secs(elapsed())} entries ${count}, faults ${events.length}, leaders ${leaders}`);
        },
        () => o.log(`  ${secs(elapsed())} entries ${lastEntries}+ (store did not answer), faults ${events.length}`),
      );
    }, 1000);

    // Warm-up: every group has a leader, or a few TTLs have passed.
    const warmUntil = Date.now() + 3 * o.ttlMs + 2000;
    while (!o.signal?.aborted && groups.some((g) => !nodes.some((n) => n.leading.has(g))) && Date.now() < warmUntil) await sleep(50, o.signal);

    const inject = async (kind: ChaosFault): Promise<void> => {
      const free = nodes.filter((n) => n.state === 'running');
      if (free.length === 0) return;
      const leaders = free.filter((n) => n.leading.size > 0);
      const pool = leaders.length > 0 && aim.next() < 0.85 ? leaders : free;
      const node = pool[Math.floor(aim.next() * pool.length)]!;
      const leads = `leads ${[...node.leading].map((g) => g.slice(namespace.length)).join(',') || 'nothing'}`;
      const begin = (detail: string): ChaosFaultEvent => {
        const e: ChaosFaultEvent = { kind, target: node.id, detail, startMs: elapsed(), healMs: null };
        events.push(e);
        o.log(`  ${secs(e.startMs)} fault ${events.length}: ${kind} ${node.id} ${detail}`);
        return e;
      };
      const ttl = o.ttlMs;
      if (kind === 'pause') {
        const ms = ttl + int(100, ttl);
        const e = begin(`${ms} ms, past the TTL (${leads})`);
        node.pause();
        try {
          await sleep(ms, o.signal);
        } finally {
          node.resume();
          e.healMs = elapsed();
        }
      } else if (kind === 'kill') {
        const down = int(0, 1000);
        const e = begin(`kill -9, down ${down} ms (${leads})`);
        await node.kill();
        await sleep(down, o.signal);
        e.healMs = elapsed();
        if (!o.signal?.aborted) await node.start();
      } else if (kind === 'resign') {
        const e = begin(`(${leads})`);
        node.resign();
        e.healMs = elapsed();
      } else if (kind === 'drop') {
        const ms = int(Math.floor(ttl / 2), 2 * ttl);
        const e = begin(`connections reset every 100-400 ms for ${ms} ms`);
        const until = Date.now() + ms;
        while (Date.now() < until && !o.signal?.aborted) {
          for (const p of node.proxies) await p.drop();
          await sleep(int(100, 400), o.signal);
        }
        e.healMs = elapsed();
      } else if (kind === 'tear') {
        const ms = int(Math.floor(ttl / 2), 2 * ttl);
        const e = begin(`torn chunks every 100-400 ms for ${ms} ms`);
        const until = Date.now() + ms;
        while (Date.now() < until && !o.signal?.aborted) {
          const keep = int(1, 200);
          const direction = random.next() < 0.25 ? 'up' : 'down';
          for (const p of node.proxies) await p.tear(keep, direction);
          await sleep(int(100, 400), o.signal);
        }
        e.healMs = elapsed();
      } else {
        const ms = int(Math.floor(ttl / 2), 2 * ttl);
        const delayMs = int(20, Math.floor(ttl / 2));
        const direction = random.next() < 0.5 ? 'up' : 'down';
        const e = begin(kind === 'delay' ? `${delayMs} ms latency for ${ms} ms` : kind === 'one-way' ? `only ${direction} for ${ms} ms` : `for ${ms} ms`);
        try {
          for (const p of node.proxies) {
            if (kind === 'cut') await p.cut();
            else if (kind === 'blackhole') await p.blackhole();
            else if (kind === 'delay') await p.delay(delayMs);
            else await p.oneWay(direction);
          }
          await sleep(ms, o.signal);
        } finally {
          for (const p of node.proxies) await p.heal();
          e.healMs = elapsed();
        }
      }
    };

    const nemesisUntil = startedAt + o.durationMs - quietMs;
    const warmMs = elapsed();
    if (o.faults.length > 0 && Date.now() >= nemesisUntil) {
      // The warm-up (node starts, first elections) took the whole fault window, as on a loaded
      // machine: a run that injected nothing has tested nothing, so one fault goes in anyway and
      // the run ends that much later (its quiet tail still follows the heal).
      o.log(`  ${secs(warmMs)} warm-up took the fault window (${((nemesisUntil - startedAt) / 1000).toFixed(1)} s): one fault anyway, the run ends later than its duration`);
    }
    while (!o.signal?.aborted && (Date.now() < nemesisUntil || events.length === 0) && o.faults.length > 0) {
      await inject(o.faults[Math.floor(random.next() * o.faults.length)]!);
      await sleep(int(100, 800), o.signal);
    }
    const lastHealMs = events.length > 0 ? Math.max(...events.map((e) => e.healMs ?? elapsed())) : null;
    // The quiet tail: at least TTL + 1.5 s after the last heal, so that recovery can be judged.
    await sleep(Math.max(startedAt + o.durationMs, lastHealMs === null ? 0 : startedAt + lastHealMs + o.ttlMs + 1500) - Date.now(), o.signal);
    const endAt = Date.now();
    clearInterval(progress);
    progress = null;
    await Promise.all(nodes.map((n) => n.stop()));
    if (o.signal?.aborted) throw new Error('interrupted');

    const streams = new Map<string, StreamEntry[]>();
    for (const g of groups) streams.set(g, await readWholeStream(o.store, streamOf(g)));
    const histories = readHistories(historyDir);
    const checked = check({ groups, streams, histories, ttlMs: o.ttlMs, lastHealAt: lastHealMs === null ? null : startedAt + lastHealMs, endAt });
    for (const v of checked.violations) violations.push(v);
    for (const n of nodes) for (const c of n.crashes) violations.push({ rule: 'node-crashed', group: null, message: clean(`${c}\n${logTail(logDir, c.split(/[ :]/)[0]!)}`), entries: [], records: [] });
    return await finish(checked);
  } catch (err) {
    emergency();
    failure = o.signal?.aborted ? null : clean(err instanceof Error ? err.message : String(err));
    return await finish(null);
  } finally {
    if (progress) clearInterval(progress);
    o.signal?.removeEventListener('abort', onAbort);
    emergency();
    await Promise.allSettled(nodes.flatMap((n) => n.proxies.splice(0)).map((p) => p.close()));
  }

  async function finish(checked: ReturnType<typeof check> | null): Promise<ChaosReport> {
    await Promise.allSettled(nodes.map((n) => n.stop(1000)));
    const cleanup = await purgeNamespace(o.store, namespace, groups).catch((err: unknown) => ({ purged: 0, left: -1, error: clean(err instanceof Error ? err.message : String(err)) }));
    o.log(`  cleanup: ${cleanup.purged} rows/keys under ${namespace} deleted${cleanup.left > 0 ? `, ${cleanup.left} left` : ''}${cleanup.error ? `; failed: ${cleanup.error}` : ''}`);
    const verdict: ChaosVerdict = o.signal?.aborted
      ? 'aborted'
      : violations.some((v) => safetyRules.includes(v.rule))
        ? 'unsafe'
        : violations.length > 0 || failure !== null || checked === null
          ? 'fail'
          : 'pass';
    const keep = verdict === 'unsafe' || verdict === 'fail';
    if (!keep) rmSync(dir, { recursive: true, force: true });
    const faultsByKind: Record<string, number> = {};
    for (const e of events) faultsByKind[e.kind] = (faultsByKind[e.kind] ?? 0) + 1;
    const perGroup: Record<string, GroupStats> = {};
    for (const [g, s] of checked?.groups ?? []) perGroup[g.slice(namespace.length)] = s;
    const reported = violations.map((v) => ({ rule: v.rule, safety: safetyRules.includes(v.rule), group: v.group?.slice(namespace.length) ?? null, message: clean(formatViolation(v, startedAt)) }));
    if (failure !== null) reported.push({ rule: 'node-crashed', safety: false, group: null, message: `the run could not go on: ${failure}` });
    return {
      verdict,
      store: display,
      namespace,
      seed: o.seed,
      nodes: o.nodes,
      groups: o.groups,
      ttlMs: o.ttlMs,
      durationMs: o.durationMs,
      elapsedMs: elapsed(),
      proxied,
      faults: events,
      faultsByKind,
      restarts: nodes.reduce((s, n) => s + Math.max(0, n.restarts), 0),
      accepted: checked?.accepted ?? 0,
      rejected: checked?.rejected ?? 0,
      ambiguous: checked?.ambiguous ?? 0,
      leaderChanges: checked?.leaderChanges ?? 0,
      perGroup,
      violations: reported,
      cleanup,
      kept: keep ? dir : null,
    };
  }
}

/** Entries in the run's streams now (their heads). */
async function entriesWritten(store: TenureStore, groups: readonly string[]): Promise<number> {
  let total = 0;
  for (const g of groups) {
    const last = store.readLast ? await store.readLast(streamOf(g)) : null;
    total += last?.seq ?? 0;
  }
  return total;
}

async function readWholeStream(store: TenureStore, stream: string): Promise<StreamEntry[]> {
  const all: StreamEntry[] = [];
  for (;;) {
    const page = await store.readStream(stream, { after: all.length === 0 ? 0 : all[all.length - 1]!.seq, limit: 10_000 });
    all.push(...page);
    if (page.length < 10_000) return all;
  }
}

/** Every history file in `dir`, in file-name order, one array. @internal (exported for its test) */
export function readHistories(dir: string): HistoryRecord[] {
  const out: HistoryRecord[] = [];
  // One loop, not push(...records): a fast store's run writes some 100,000 records per node
  // file, more than a call's arguments may be (RangeError: Maximum call stack size exceeded).
  for (const f of readdirSync(dir).sort()) if (f.endsWith('.jsonl')) for (const r of parseHistory(readFileSync(join(dir, f), 'utf8'), f)) out.push(r);
  return out;
}

function logTail(logDir: string, proc: string, lines = 10): string {
  try {
    return readFileSync(join(logDir, `${proc}.log`), 'utf8').trimEnd().split('\n').slice(-lines).join('\n');
  } catch {
    return '';
  }
}

/**
 * Delete everything under the namespace (`Store.purge`), then look again: no live lease under
 * it, no entry in its streams. `left` counts what is still there.
 */
export async function purgeNamespace(store: TenureStore, namespace: string, groups: readonly string[]): Promise<{ purged: number; left: number; error: string | null }> {
  if (!store.purge) throw new Error(`the ${store.kind} store cannot delete by prefix`);
  const purged = await store.purge(namespace);
  let left = (await store.list(namespace)).length;
  for (const g of groups) {
    left += (await store.readStream(streamOf(g), { after: 0, limit: 1000 })).length;
    if (await store.read(g)) left++;
  }
  return { purged, left, error: null };
}

/** The report as text: verdict, counts, faults by kind, per group, and each violation. */
export function formatChaosReport(r: ChaosReport): string {
  const kinds = Object.entries(r.faultsByKind).map(([k, n]) => `${k} ${n}`).join(', ') || 'none';
  const lines = [
    `chaos ${r.verdict.toUpperCase()}: ${r.store}, namespace ${r.namespace}, seed ${r.seed}, ${(r.elapsedMs / 1000).toFixed(1)} s`,
    `  ${r.nodes} nodes, ${r.groups} groups, ttl ${r.ttlMs} ms; faults ${r.faults.length} (${kinds}); node restarts ${r.restarts}; leader changes ${r.leaderChanges}`,
    `  appends: ${r.accepted} accepted, ${r.rejected} rejected as stale, ${r.ambiguous} ambiguous`,
    ...Object.entries(r.perGroup).map(([g, s]) => `  ${g}: ${s.entries} entries, ${s.terms} terms, recovery after the last fault ${s.recoveryMs === null ? '-' : `${s.recoveryMs} ms`}`),
    `  cleanup: ${r.cleanup.purged} deleted, ${r.cleanup.left} left${r.cleanup.error ? ` (${r.cleanup.error})` : ''}`,
  ];
  for (const v of r.violations) lines.push(`  VIOLATION ${v.rule}${v.safety ? ' (safety)' : ''}: ${v.message.replace(/\n/g, '\n    ')}`);
  if (r.kept) lines.push(`  run directory kept: ${r.kept} (histories in history/, node logs in logs/); rerun with --seed ${r.seed}`);
  return lines.join('\n');
}
