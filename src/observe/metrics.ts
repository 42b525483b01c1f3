/**
 * Prometheus metrics through prom-client, when the user has it installed (optional peer
 * dependency). The same facts are always available as LeaderElector and TenureStore events.
 *
 *   tenure_is_leader{group}                 1 while this node leads the group
 *   tenure_term{group}                      term of the current leadership (last one held)
 *   tenure_renew_latency_seconds{group}     histogram of successful renew round trips
 *   tenure_renew_failures_total{group}      renewals that failed or got no answer
 *   tenure_leadership_changes_total{group}  elections and depositions of this node
 *   tenure_fenced_rejections_total{lease,path,side}
 *                                           fenced writes refused as stale, every one in this process:
 *                                           path stream|sql|http|message; side guard (refused here, where
 *                                           the write lands) or writer (this process's write, refused elsewhere)
 *   tenure_fenced_write_seconds{path,outcome}  histogram of fenced writes' latency (ok, stale, conflict, error)
 *   tenure_leader_info{group,owner}         1 for the leader this node last saw (its own incarnation when it leads)
 *   tenure_suspended{group}                 1 while this node leads and its last renew failed as "maybe"
 *   tenure_stalled{group}                   1 while this node leads and its work reported no progress in time
 *   tenure_store_call_seconds{group,operation,outcome}  histogram of the elector's store calls (ok, error, timeout)
 *   tenure_follower_lag_entries{stream}     entries after the follower's last applied one
 *   tenure_follower_lag_seconds{stream}     age of the oldest entry not yet applied, on the store's clock
 *   tenure_follower_behind_seconds{stream}  time since the follower last found itself caught up (local clock)
 *
 * docs/operations.md has the table, and the alert rules over them (observe/alerts.yml).
 */
import { createRequire } from 'node:module';
import { DriverMissingError, onFencedRejection, onFencedWrite } from '../core/index.js';
import type { LeaderElector } from '../election/index.js';
import type { TenureStore } from '../open.js';
import type { FollowerLag } from '../replication/index.js';

interface Labeled<T> {
  labels(labels: Record<string, string>): T;
  remove(labels: Record<string, string>): void;
}
interface GaugeChild {
  set(value: number): void;
}
interface CounterChild {
  inc(value?: number): void;
}
interface HistogramChild {
  observe(value: number): void;
}
interface MetricCtor<T> {
  new (config: { name: string; help: string; labelNames: string[]; registers: unknown[]; buckets?: number[] }): Labeled<T>;
}
interface PromClient {
  Gauge: MetricCtor<GaugeChild>;
  Counter: MetricCtor<CounterChild>;
  Histogram: MetricCtor<HistogramChild>;
  register: Registry;
}
/** The part of a prom-client Registry tenure uses. */
export interface Registry {
  getSingleMetric(name: string): unknown;
  metrics(): Promise<string>;
  readonly contentType: string;
}

export interface MetricsOptions {
  /** A prom-client Registry; default: prom-client's global registry. */
  registry?: Registry;
}

function loadPromClient(): PromClient {
  try {
    return createRequire(import.meta.url)('prom-client') as PromClient;
  } catch {
    throw new DriverMissingError('prom-client', 'metrics');
  }
}

function metric<T>(client: PromClient, registry: Registry, Ctor: MetricCtor<T>, name: string, help: string, labelNames: string[], buckets?: number[]): Labeled<T> {
  const existing = registry.getSingleMetric(name);
  if (existing) return existing as Labeled<T>;
  return new Ctor({ name, help, labelNames, registers: [registry], ...(buckets ? { buckets } : {}) });
}

/**
 * Publish an elector's state and the process's fenced rejections as Prometheus metrics (every
 * stale refusal is counted, whatever store or fencedUpdate refused it; `store` need not be given
 * for that and is kept for compatibility). Returns a function that stops updating them. Throws
 * DriverMissingError without prom-client.
 */
/** What the follower metrics read: a replication Follower (or anything that measures its lag the same way). */
export interface LagSource {
  readonly stream: string;
  lag(): FollowerLag;
  on(event: 'lag', listener: (lag: FollowerLag) => void): unknown;
  off(event: 'lag', listener: (lag: FollowerLag) => void): unknown;
}

export interface MetricSources {
  elector?: LeaderElector;
  /** More electors (one per group); each is published under its group. */
  electors?: readonly LeaderElector[];
  /** A replication Follower: its measured lag (every lagEveryMs) as gauges by stream. */
  follower?: LagSource;
  followers?: readonly LagSource[];
  /** Kept for compatibility: fenced rejections are counted process-wide whether or not it is given. */
  store?: TenureStore;
}

export function collectMetrics(sources: MetricSources, options: MetricsOptions = {}): () => void {
  const client = loadPromClient();
  const registry = options.registry ?? client.register;
  const stops: (() => void)[] = [];
  const electors = [...(sources.elector ? [sources.elector] : []), ...(sources.electors ?? [])];
  for (const elector of electors) stops.push(collectElector(client, registry, elector));
  for (const follower of [...(sources.follower ? [sources.follower] : []), ...(sources.followers ?? [])]) stops.push(collectFollower(client, registry, follower));
  // Every stale refusal in the process (each store's appendFenced and fencedUpdate report it where
  // they refuse), counted once per registry however many times collectMetrics is called with it.
  const rejections = metric(client, registry, client.Counter, 'tenure_fenced_rejections_total', 'Fenced writes refused as stale', ['lease', 'path', 'side']);
  const writes = metric(client, registry, client.Histogram, 'tenure_fenced_write_seconds', 'Fenced writes by path and outcome', ['path', 'outcome'], [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5,
  ]);
  stops.push(countRejections(registry, rejections, writes));
  return () => stops.forEach((stop) => stop());
}

const LATENCY_BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5];

function collectElector(client: PromClient, registry: Registry, elector: LeaderElector): () => void {
  {
    const group = { group: elector.group };
    const isLeader = metric(client, registry, client.Gauge, 'tenure_is_leader', '1 while this node leads the group', ['group']).labels(group);
    const term = metric(client, registry, client.Gauge, 'tenure_term', 'Term of the current or last leadership', ['group']).labels(group);
    const latency = metric(client, registry, client.Histogram, 'tenure_renew_latency_seconds', 'Successful renew round trips', ['group'], [
      0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5,
    ]).labels(group);
    const failures = metric(client, registry, client.Counter, 'tenure_renew_failures_total', 'Renewals that failed or got no answer', ['group']).labels(group);
    const changes = metric(client, registry, client.Counter, 'tenure_leadership_changes_total', 'Elections and depositions of this node', ['group']).labels(group);
    const leaderInfo = metric(client, registry, client.Gauge, 'tenure_leader_info', 'The leader this node last saw (1), by owner incarnation', ['group', 'owner']);
    const suspended = metric(client, registry, client.Gauge, 'tenure_suspended', '1 while this node leads and its last renew failed as maybe', ['group']).labels(group);
    const stalled = metric(client, registry, client.Gauge, 'tenure_stalled', '1 while this node leads and its work reported no progress within progressTimeoutMs', ['group']).labels(group);
    const calls = metric(client, registry, client.Histogram, 'tenure_store_call_seconds', 'Store calls of the elector by operation and outcome (ok, error, timeout)', ['group', 'operation', 'outcome'], LATENCY_BUCKETS);
    isLeader.set(elector.isLeader ? 1 : 0);
    suspended.set(elector.suspended ? 1 : 0);
    stalled.set(elector.stalled ? 1 : 0);
    let shownOwner: string | null = null;
    const onLeaderChanged = ({ owner }: { owner: string | null }): void => {
      if (shownOwner !== null) leaderInfo.remove({ group: elector.group, owner: shownOwner });
      shownOwner = owner;
      if (owner !== null) leaderInfo.labels({ group: elector.group, owner }).set(1);
    };
    const onSuspended = (): void => suspended.set(1);
    const onRecovered = (): void => suspended.set(0);
    const onStalled = (): void => stalled.set(1);
    const onUnstalled = (): void => stalled.set(0);
    const onCall = ({ operation, ms, outcome }: { operation: string; ms: number; outcome: string }): void => calls.labels({ group: elector.group, operation, outcome }).observe(ms / 1000);
    const onElected = ({ term: t }: { term: number }): void => {
      isLeader.set(1);
      term.set(t);
      changes.inc();
    };
    const onDeposed = (): void => {
      isLeader.set(0);
      suspended.set(0);
      stalled.set(0);
      changes.inc();
    };
    const onRenewed = ({ latencyMs }: { latencyMs: number }): void => latency.observe(latencyMs / 1000);
    const onFailed = (): void => failures.inc();
    elector.on('elected', onElected).on('deposed', onDeposed).on('renewed', onRenewed).on('renew-failed', onFailed);
    elector.on('leader-changed', onLeaderChanged).on('suspended', onSuspended).on('recovered', onRecovered).on('stalled', onStalled).on('unstalled', onUnstalled).on('store-call', onCall);
    return () => {
      elector.off('elected', onElected).off('deposed', onDeposed).off('renewed', onRenewed).off('renew-failed', onFailed);
      elector.off('leader-changed', onLeaderChanged).off('suspended', onSuspended).off('recovered', onRecovered).off('stalled', onStalled).off('unstalled', onUnstalled).off('store-call', onCall);
    };
  }
}

/** The lag a Follower measures (every lagEveryMs, see FollowerOptions), as gauges by stream. */
function collectFollower(client: PromClient, registry: Registry, follower: LagSource): () => void {
  const stream = { stream: follower.stream };
  const entries = metric(client, registry, client.Gauge, 'tenure_follower_lag_entries', 'Entries after the last one the follower applied', ['stream']).labels(stream);
  const seconds = metric(client, registry, client.Gauge, 'tenure_follower_lag_seconds', "Age of the oldest entry not yet applied, on the store's clock", ['stream']).labels(stream);
  const behind = metric(client, registry, client.Gauge, 'tenure_follower_behind_seconds', 'Time since the follower last found itself caught up (local monotonic clock)', ['stream']).labels(stream);
  const onLag = (lag: FollowerLag): void => {
    entries.set(lag.entries);
    behind.set(lag.behindMs / 1000);
    if (lag.ms !== null) seconds.set(lag.ms / 1000);
  };
  onLag(follower.lag());
  follower.on('lag', onLag);
  return () => void follower.off('lag', onLag);
}

const rejectionFeeds = new WeakMap<Registry, { users: number; stop: () => void }>();

function countRejections(registry: Registry, counter: Labeled<CounterChild>, writes: Labeled<HistogramChild>): () => void {
  let feed = rejectionFeeds.get(registry);
  if (!feed) {
    const stopRejections = onFencedRejection(({ error, path, side }) => counter.labels({ lease: error.lease, path, side }).inc());
    const stopWrites = onFencedWrite(({ path, outcome, ms }) => writes.labels({ path, outcome }).observe(ms / 1000));
    feed = {
      users: 0,
      stop: () => {
        stopRejections();
        stopWrites();
      },
    };
    rejectionFeeds.set(registry, feed);
  }
  const mine = feed;
  mine.users++;
  let stopped = false;
  return () => {
    if (stopped) return;
    stopped = true;
    if (--mine.users === 0) {
      mine.stop();
      if (rejectionFeeds.get(registry) === mine) rejectionFeeds.delete(registry);
    }
  };
}
