/**
 * `tenure demo --scenario followers`: the other half of Leader and Followers, live.
 *
 * Two candidate leaders (`tenure demo-node`) campaign for the group; the leader appends fenced
 * entries to the stream. Three followers (`tenure demo-follower`) each apply the log to a SQLite
 * projection of their own, exactly once (Follower + sqliteSink), and advertise their lag
 * (LagAdvert). Meanwhile the demo
 *  1. stops one follower inside an apply (its row inserted, nothing committed), kills it (kill -9)
 *     and starts it again: it goes on after the last committed entry;
 *  2. freezes the leader past its TTL: the standby takes over; the old leader resumes and its
 *     append is refused as stale (the failover story's pause step, shared);
 *  3. routes reads all along with a ReadRouter: to a follower whose staleness bound is within the
 *     threshold, else to the leader; a follower's read is its projection file, read by the demo;
 *  4. at the end, stops the leaders, lets the followers catch up, and compares each projection
 *     with the log read from the store: the same seqs, terms and payloads, no duplicate, no gap.
 */
import { join } from 'node:path';
import { NotLeaderError, limits } from '../core/index.js';
import type { Store, StreamEntry } from '../core/index.js';
import { LAG_UNKNOWN_MS, ReadRouter } from '../replication/index.js';
import type { ReadTarget } from '../replication/index.js';
import type { SqliteDatabase } from '../stores/sqlite/driver.js';
import { Demo, delay, signal } from './demo.js';
import type { DemoNode } from './demo.js';
import { openProjection, projectionHead, readProjection } from './demo-follower.js';
import type { DemoFollowerEvent } from './demo-follower.js';
import { routedReads } from './demo-view.js';
import type { DemoSummary, FollowerReport, ReadsReport, SampleStats } from './demo-view.js';
import { formatMs } from './output.js';

/** A follower serves a read only when its staleness bound is at most this, ms. */
const READ_MAX_LAG_MS = 500;
/** Time between two routed reads, ms. */
const READ_EVERY_MS = 100;
/** The followers' lag adverts live this long without a refresh, ms (refreshed every fifth of it). */
const ADVERT_TTL_MS = 1000;
/** Characters in a follower's lag sparkline. */
const SPARK_WIDTH = 24;
const SPARKS = '▁▂▃▄▅▆▇█';
/** Which follower is killed mid-apply. */
const VICTIM = 2;

interface LagSample {
  readonly atMs: number;
  readonly entries: number;
  readonly ms: number;
}

interface FollowerState {
  readonly projection: string;
  readonly samples: LagSample[];
  restarts: number;
  readonly resumedAfter: number[];
  /** The seq it stopped inside, when asked to (SIGUSR2). */
  midApply: number | null;
  /** The last entry it advertised as applied. */
  appliedSeq: number;
  /** The demo's own read connection to its projection (for the reads routed to it). */
  reader: SqliteDatabase | null;
}

export class FollowersDemo extends Demo {
  private readonly followers = new Map<string, FollowerState>();
  private readonly reads: ReadsReport = { count: 0, thresholdMs: READ_MAX_LAG_MS, byTarget: {}, maxLagServedMs: 0, unserved: 0 };
  private reports: FollowerReport[] = [];
  private readonly readsDone = new AbortController();

  protected override async script(): Promise<void> {
    const { ttlMs, durationMs } = this.options;
    for (let i = 1; i <= this.options.nodeCount; i++) this.spawnNode(`node-${i}`);
    for (const n of this.nodes) n.idleLabel = 'standby';
    const first = await this.waitFor(() => this.leader(), 15_000 + 5 * ttlMs);
    if (!first) {
      this.problems.push(`no node was elected within ${formatMs(15_000 + 5 * ttlMs)}`);
      return;
    }
    for (let i = 1; i <= this.options.followers; i++) this.startFollower(`follower-${i}`);
    const reading = this.routeReads();
    try {
      const started = await this.waitFor(() => this.history.entries >= 10 && [...this.followers.values()].every((f) => f.samples.length > 0), 10_000 + 10 * ttlMs);
      if (!started) this.problems.push('the followers did not start advertising their lag');
      await this.killFollowerStep(`follower-${Math.min(VICTIM, this.options.followers)}`);
      await this.sleep(Math.max(durationMs * 0.4, this.elapsed() + 500) - this.elapsed());
      await this.pauseStep();
      await this.sleep(Math.max(durationMs - this.elapsed(), 1000));
      await this.drain();
    } finally {
      this.readsDone.abort();
      await reading;
    }
  }

  protected override stepsDone(): boolean {
    const restarted = [...this.followers.values()].some((f) => f.restarts > 0 && f.resumedAfter.length === f.restarts);
    const fromFollowers = this.reads.count - (this.reads.byTarget.leader ?? 0);
    return (
      this.failovers.some((f) => f.cause === 'pause') &&
      this.staleRejected > 0 &&
      restarted &&
      fromFollowers > 0 &&
      this.reports.length === this.options.followers &&
      this.reports.every((r) => r.equal)
    );
  }

  protected override summary(): DemoSummary {
    return { ...super.summary(), scenario: 'followers', followers: this.reports, reads: this.reads };
  }

  protected override statusLine(): string {
    return `reads: ${routedReads(this.reads)}`;
  }

  // ---- the steps --------------------------------------------------------------------------

  private startFollower(name: string): void {
    let f = this.followers.get(name);
    if (!f) {
      f = { projection: join(this.dir, `${name}.db`), samples: [], restarts: 0, resumedAfter: [], midApply: null, appliedSeq: 0, reader: null };
      this.followers.set(name, f);
    }
    this.spawnNode(name, [
      'demo-follower', '--group', this.group, '--stream', this.group, '--id', name, '--projection', f.projection, '--advert-ttl', String(ADVERT_TTL_MS),
    ]);
  }

  /** Stop a follower inside an apply, kill it there, start it again: it goes on after its last commit. */
  private async killFollowerStep(name: string): Promise<void> {
    const node = this.nodes.find((n) => n.name === name);
    const f = this.followers.get(name);
    if (!node || !f) return;
    f.midApply = null;
    signal(node, 'SIGUSR2');
    const seq = await this.waitFor(() => f.midApply, 10_000);
    if (seq === null) {
      this.problems.push(`${name} did not stop inside an apply`);
      return;
    }
    node.expectedExit = true;
    signal(node, 'SIGKILL');
    node.state = 'killed';
    this.note(`${name} killed (kill -9) inside the apply of entry #${seq}: its row inserted, the offset not committed`);
    await node.exited;
    f.restarts++;
    this.startFollower(name);
    const resumed = await this.waitFor(() => (f.resumedAfter.length === f.restarts ? f.resumedAfter[f.restarts - 1]! + 1 : 0), 10_000);
    if (!resumed) {
      this.problems.push(`${name} did not start again`);
      return;
    }
    const after = resumed - 1;
    if (after >= seq) this.violations.push(`${name} was killed inside the apply of #${seq}, and its projection had committed #${after}`);
    this.note(`${name} restarted as a new incarnation: it goes on after #${after}, so #${seq} is applied again, once`);
    await this.waitFor(() => f.appliedSeq >= seq, 10_000);
  }

  /** The end: stop the leaders, so the log is final, and wait for every follower to apply all of it. */
  private async drain(): Promise<void> {
    // The standbys first, so that none takes over (and appends) when the leader releases its lease.
    const candidates = this.nodes.filter((n) => !this.followers.has(n.name));
    const leader = this.leader();
    for (const group of [candidates.filter((n) => n !== leader), leader ? [leader] : []]) {
      for (const n of group) {
        n.expectedExit = true;
        signal(n, 'SIGCONT');
        signal(n, 'SIGTERM');
      }
      await Promise.race([Promise.all(group.map((n) => n.exited)), delay(5000)]);
    }
    if (!this.store) return;
    const head = (await readLog(this.store, this.group)).at(-1)?.seq ?? 0;
    this.note(`leaders stopped: the log ends at #${head}; waiting for the followers to apply it`);
    const caughtUp = await this.waitFor(() => [...this.followers.values()].every((f) => f.appliedSeq >= head), 10_000);
    if (!caughtUp) this.problems.push(`the followers did not all apply the log up to #${head} within 10 s`);
  }

  // ---- reads ------------------------------------------------------------------------------

  /** Route a read every READ_EVERY_MS until the end, and check each against its threshold. */
  private async routeReads(): Promise<void> {
    if (!this.store) return;
    const router = new ReadRouter({ store: this.store, group: this.group, maxLagMs: READ_MAX_LAG_MS });
    const done = this.readsDone.signal;
    let lastError = '';
    while (!done.aborted && !this.interrupt.signal.aborted) {
      try {
        const r = await router.read((target) => this.readAt(target));
        const served = r.target.role === 'follower' ? r.servedBy : 'leader';
        this.reads.count++;
        this.reads.byTarget[served] = (this.reads.byTarget[served] ?? 0) + 1;
        if (r.target.role === 'follower') {
          this.reads.maxLagServedMs = Math.max(this.reads.maxLagServedMs, Math.round(r.lagMs));
          if (r.lagMs > READ_MAX_LAG_MS) this.violations.push(`a read was served by ${served} with a staleness bound of ${Math.round(r.lagMs)} ms, above the threshold ${READ_MAX_LAG_MS} ms`);
          if (r.value < r.target.appliedSeq) this.violations.push(`${served} served a read at #${r.value}, behind the #${r.target.appliedSeq} it had advertised`);
        }
      } catch (err) {
        if (err instanceof NotLeaderError) this.reads.unserved++;
        else if ((err as Error).message !== lastError) this.note(`a read failed: ${(lastError = (err as Error).message)}`);
      }
      await delay(READ_EVERY_MS);
    }
  }

  /** A read served by `target`: the last entry in a follower's projection, or the log's head for the leader. */
  private readAt(target: ReadTarget): number {
    if (target.role === 'leader') return this.history.lastSeq;
    const f = this.followers.get(target.nodeId);
    if (!f) throw new Error(`the router chose ${target.nodeId}, which is no follower of this demo`);
    f.reader ??= openProjection(f.projection, 200);
    return projectionHead(f.reader);
  }

  // ---- the followers' reports -------------------------------------------------------------

  protected override onNodeLine(node: DemoNode, proc: DemoNode['proc'], line: string): void {
    const f = this.followers.get(node.name);
    if (!f) return super.onNodeLine(node, proc, line);
    if (node.proc !== proc) return;
    let e: DemoFollowerEvent;
    try {
      e = JSON.parse(line) as DemoFollowerEvent;
    } catch {
      return;
    }
    switch (e.event) {
      case 'following':
        node.owner = e.owner;
        node.state = 'follower';
        f.appliedSeq = e.appliedSeq;
        if (f.restarts > f.resumedAfter.length) f.resumedAfter.push(e.appliedSeq);
        this.note(`${node.name} started (pid ${e.pid}), following the log after #${e.appliedSeq}`);
        break;
      case 'lag':
        f.appliedSeq = e.appliedSeq;
        if (e.lagMs >= LAG_UNKNOWN_MS) {
          // Not a sample: no read of this (re)started follower has found the end of the log yet.
          node.detail = `applied #${e.appliedSeq} · lag not known yet`;
          break;
        }
        f.samples.push({ atMs: this.elapsed(), entries: e.lagEntries, ms: e.lagMs });
        if (f.samples.length > 10_000) f.samples.splice(0, f.samples.length - 10_000);
        node.detail = `applied #${e.appliedSeq} · lag ${e.lagEntries} entries, ${formatMs(e.lagMs)}`;
        break;
      case 'mid-apply':
        f.midApply = e.seq;
        node.state = 'frozen';
        break;
      case 'follower-failed':
        this.problems.push(`${node.name} stopped: ${e.message}`);
        break;
      case 'stopped':
        break;
    }
  }

  // ---- the end ----------------------------------------------------------------------------

  /** Every process is gone: compare each projection with the log, row by row. */
  protected override async afterShutdown(store: Store): Promise<void> {
    let log: StreamEntry[] = [];
    try {
      log = await readLog(store, this.group);
    } catch (err) {
      this.problems.push(`the log could not be read for the final check: ${(err as Error).message}`);
    }
    const all = [...this.followers.values()].flatMap((f) => f.samples);
    // One time axis and one scale for every follower's sparkline, so that they compare.
    const span = { from: Math.min(...all.map((s) => s.atMs)), to: Math.max(...all.map((s) => s.atMs)), fullMs: Math.max(1, ...all.map((s) => s.ms)) };
    for (const [name, f] of this.followers) {
      try {
        f.reader ??= openProjection(f.projection, 1000);
        this.reports.push(this.compare(name, f, readProjection(f.reader), log, span));
      } catch (err) {
        this.problems.push(`${name}'s projection could not be read: ${(err as Error).message}`);
      } finally {
        f.reader?.close();
        f.reader = null;
      }
    }
  }

  private compare(name: string, f: FollowerState, rows: ReturnType<typeof readProjection>, log: readonly StreamEntry[], span: SparkSpan): FollowerReport {
    let equal = rows.length === log.length;
    for (let i = 0; i < rows.length; i++) {
      const row = rows[i]!;
      const entry = log[i];
      if (row.seq !== i + 1) {
        this.violations.push(`${name}'s projection has #${row.seq} where #${i + 1} belongs: ${row.seq <= i ? `#${row.seq} applied twice` : `a gap before #${row.seq}`}`);
        equal = false;
        break;
      }
      if (!entry) {
        this.violations.push(`${name}'s projection has #${row.seq}, beyond the end of the log (#${log.length})`);
        equal = false;
        break;
      }
      if (entry.term !== row.term || entry.payload !== row.payload) {
        this.violations.push(`${name}'s row for #${row.seq} differs from the log's entry (term ${row.term} vs ${entry.term})`);
        equal = false;
        break;
      }
    }
    if (rows.length < log.length && !this.received) this.problems.push(`${name} applied ${rows.length} of the log's ${log.length} entries by the end`);
    return {
      name,
      entries: rows.length,
      lastSeq: rows.at(-1)?.seq ?? 0,
      equal,
      restarts: f.restarts,
      resumedAfter: f.resumedAfter,
      lag: {
        samples: f.samples.length,
        entries: stats(f.samples.map((s) => s.entries)),
        ms: stats(f.samples.map((s) => s.ms)),
        spark: sparkline(f.samples, span),
      },
    };
  }
}

/** The whole stream, page by page. */
async function readLog(store: Store, stream: string): Promise<StreamEntry[]> {
  const log: StreamEntry[] = [];
  for (;;) {
    const page = await store.readStream(stream, { after: log.at(-1)?.seq ?? 0, limit: limits.readLimitMax });
    log.push(...page);
    if (page.length < limits.readLimitMax) return log;
  }
}

function stats(values: readonly number[]): SampleStats {
  if (values.length === 0) return { min: 0, p50: 0, max: 0 };
  const sorted = [...values].sort((a, b) => a - b);
  return { min: sorted[0]!, p50: sorted[Math.floor((sorted.length - 1) / 2)]!, max: sorted.at(-1)! };
}

/** The time axis (ms since the demo started) and the scale (the largest lag of the run, ms) of the sparklines. */
interface SparkSpan {
  readonly from: number;
  readonly to: number;
  readonly fullMs: number;
}

/**
 * The lag in ms over the run, one character per time slice (the slice's largest sample): ▁ is
 * none, █ the run's largest; a blank is a slice with no advert (the follower was down).
 */
function sparkline(samples: readonly LagSample[], { from, to, fullMs }: SparkSpan): string {
  if (samples.length === 0 || !(to > from)) return '';
  const slice = (to - from) / SPARK_WIDTH;
  const peaks: Array<number | null> = new Array<number | null>(SPARK_WIDTH).fill(null);
  for (const s of samples) {
    const i = Math.min(SPARK_WIDTH - 1, Math.floor((s.atMs - from) / slice));
    peaks[i] = Math.max(peaks[i] ?? 0, s.ms);
  }
  return peaks.map((ms) => (ms === null ? ' ' : SPARKS[Math.min(SPARKS.length - 1, Math.floor((ms / fullMs) * (SPARKS.length - 1)))]!)).join('');
}
