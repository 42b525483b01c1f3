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
 *   tenure_fenced_write_seconds{path,outcome}  histogram of fenced writes' latency (ok, stale, error)
 */
import { createRequire } from 'node:module';
import { DriverMissingError, onFencedRejection, onFencedWrite } from '../core/index.js';
import type { LeaderElector } from '../election/index.js';
import type { TenureStore } from '../open.js';

interface Labeled<T> {
  labels(labels: Record<string, string>): T;
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
interface Registry {
  getSingleMetric(name: string): unknown;
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
export function collectMetrics(sources: { elector?: LeaderElector; store?: TenureStore }, options: MetricsOptions = {}): () => void {
  const client = loadPromClient();
  const registry = options.registry ?? client.register;
  const stops: (() => void)[] = [];
  const { elector } = sources;
  if (elector) {
    const group = { group: elector.group };
    const isLeader = metric(client, registry, client.Gauge, 'tenure_is_leader', '1 while this node leads the group', ['group']).labels(group);
    const term = metric(client, registry, client.Gauge, 'tenure_term', 'Term of the current or last leadership', ['group']).labels(group);
    const latency = metric(client, registry, client.Histogram, 'tenure_renew_latency_seconds', 'Successful renew round trips', ['group'], [
      0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5,
    ]).labels(group);
    const failures = metric(client, registry, client.Counter, 'tenure_renew_failures_total', 'Renewals that failed or got no answer', ['group']).labels(group);
    const changes = metric(client, registry, client.Counter, 'tenure_leadership_changes_total', 'Elections and depositions of this node', ['group']).labels(group);
    isLeader.set(elector.isLeader ? 1 : 0);
    const onElected = ({ term: t }: { term: number }): void => {
      isLeader.set(1);
      term.set(t);
      changes.inc();
    };
    const onDeposed = (): void => {
      isLeader.set(0);
      changes.inc();
    };
    const onRenewed = ({ latencyMs }: { latencyMs: number }): void => latency.observe(latencyMs / 1000);
    const onFailed = (): void => failures.inc();
    elector.on('elected', onElected).on('deposed', onDeposed).on('renewed', onRenewed).on('renew-failed', onFailed);
    stops.push(() => elector.off('elected', onElected).off('deposed', onDeposed).off('renewed', onRenewed).off('renew-failed', onFailed));
  }
  // Every stale refusal in the process (each store's appendFenced and fencedUpdate report it where
  // they refuse), counted once per registry however many times collectMetrics is called with it.
  const rejections = metric(client, registry, client.Counter, 'tenure_fenced_rejections_total', 'Fenced writes refused as stale', ['lease', 'path', 'side']);
  const writes = metric(client, registry, client.Histogram, 'tenure_fenced_write_seconds', 'Fenced writes by path and outcome', ['path', 'outcome'], [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5,
  ]);
  stops.push(countRejections(registry, rejections, writes));
  return () => stops.forEach((stop) => stop());
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
