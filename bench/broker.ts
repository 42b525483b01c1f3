/**
 * Issue 23, Model C against Model B on the same work: the leader's decisions reach a follower's
 * PostgreSQL projection either through the leader's fenced log on PostgreSQL, tailed by a
 * Follower (Model B, polling every POLL_MS), or through a broker, consumed by a BrokerFollower
 * (Model C) on NATS JetStream (a subject per partition) or RabbitMQ streams (a stream queue per
 * partition), three partitions. The apply is the same in every variant, a batch at a time: one
 * multi-row INSERT of the decisions into `applied` and one multi-row upsert of their keys into
 * `kv`, in the transaction that moves the follower's offset (Model B) or the partition's mark
 * (Model C). Each variant has its own fresh
 * database, stream or queues; the servers are the ones on this machine.
 *
 * - latency: the leader publishes (appends) one decision and waits until the follower has
 *   committed it; the sample is publish sent -> follower committed. Between samples the leader
 *   waits a random 5..25 ms, so each decision finds the follower idle.
 * - e2e rate: the leader publishes E2E decisions one after another (each awaited: the broker's
 *   acknowledgement, the append's commit), the follower applying as they come; decisions per
 *   second from the first publish to the last committed.
 * - catch-up rate: CATCHUP decisions published first, then a follower starts from nothing;
 *   decisions per second from its start to the last committed (batches of BATCH).
 *
 *   npm run bench -- broker            (--cycles N latency samples per variant, at least 50)
 */
import pg from 'pg';
import { BrokerFollower, Follower, openStore, postgresSink } from '../src/index.js';
import type { FencingToken, TenureStore } from '../src/index.js';
import { partitionOf } from '../src/replication/index.js';
import type { BrokerPublisher, BrokerSource, PgSinkClient } from '../src/replication/index.js';
import { openBrokerRig } from '../test/fixtures/broker-rig.js';
import { freshPostgres, randomTag } from './lib/servers.js';
import { metric, opsPerSecond } from './lib/stats.js';
import type { BenchOptions, BenchResult, Benchmark, Metric } from './lib/types.js';

const PARTITIONS = ['p0', 'p1', 'p2'];
const POLL_MS = 2;
const BATCH = 500;
const E2E = 2000;
const CATCHUP = 10_000;
const WAIT_MS = 60_000;
const GROUP = 'bench-decisions';

type Variant = 'model-b' | 'model-c-nats' | 'model-c-amqp';
const VARIANTS: readonly Variant[] = ['model-b', 'model-c-nats', 'model-c-amqp'];

/** Resolves waiters when the count of committed decisions reaches their target. */
class Committed {
  n = 0;
  private waiters: { target: number; resolve: () => void; reject: (e: Error) => void }[] = [];
  add(k: number): void {
    this.n += k;
    this.waiters = this.waiters.filter((w) => {
      if (this.n < w.target) return true;
      w.resolve();
      return false;
    });
  }
  fail(e: Error): void {
    for (const w of this.waiters.splice(0)) w.reject(e);
  }
  reach(target: number): Promise<void> {
    if (this.n >= target) return Promise.resolve();
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`timed out waiting for ${target} committed (at ${this.n})`)), WAIT_MS);
      this.waiters.push({ target, resolve: () => (clearTimeout(timer), resolve()), reject });
    });
  }
}

/**
 * The same apply for both models, a batch at a time (applyBatch): the decisions' rows in one
 * multi-row INSERT, and each key's latest value in one multi-row upsert.
 */
async function applyDecisions(tx: PgSinkClient, payloads: readonly string[]): Promise<void> {
  const latest = new Map<string, number>();
  for (const p of payloads) {
    const { key, value } = JSON.parse(p) as { key: string; value: number };
    latest.set(key, value);
  }
  await tx.query('INSERT INTO applied (payload) SELECT * FROM unnest($1::text[])', [payloads]);
  await tx.query('INSERT INTO kv (key, value) SELECT * FROM unnest($1::text[], $2::bigint[]) ON CONFLICT (key) DO UPDATE SET value = excluded.value', [[...latest.keys()], [...latest.values()]]);
}

interface Rig {
  /** Publish (or append) one decision, awaited. */
  send(payload: string): Promise<void>;
  /** Start a follower from nothing; its commits counted in `committed`. */
  follow(committed: Committed): Promise<{ stop(): Promise<void> }>;
  close(): Promise<void>;
}

async function openRig(variant: Variant): Promise<Rig> {
  const db = await freshPostgres();
  const pool = new pg.Pool({ connectionString: db.url, max: 4 });
  pool.on('error', () => {});
  await pool.query('CREATE TABLE applied (id bigserial PRIMARY KEY, payload text NOT NULL)');
  await pool.query('CREATE TABLE kv (key text PRIMARY KEY, value bigint NOT NULL)');
  const token: FencingToken = { lease: GROUP, term: 1 };
  const closers: (() => Promise<unknown>)[] = [() => pool.end(), () => db.cleanup()];
  const close = async (): Promise<void> => {
    for (const c of closers.splice(0).reverse()) await c().catch(() => undefined);
  };
  let n = 0;
  if (variant === 'model-b') {
    const leader: TenureStore = await openStore(db.url);
    const followerStore: TenureStore = await openStore(db.url);
    closers.push(() => leader.close(), () => followerStore.close());
    const acquired = await leader.acquire(GROUP, 'bench-leader', 600_000);
    const t: FencingToken = { lease: GROUP, term: acquired.lease!.term };
    const stream = `decisions-${n++}-${randomTag()}`;
    return {
      send: async (payload) => void (await leader.appendFenced(t, stream, payload)),
      follow: async (committed) => {
        const f = new Follower({ store: followerStore, stream, sink: postgresSink({ pool }), batchSize: BATCH, pollMs: POLL_MS, applyBatch: (es, tx) => applyDecisions(tx, es.map((e) => e.payload)) });
        f.on('applied', (b) => committed.add(b.count));
        f.start().catch((e: unknown) => committed.fail(e instanceof Error ? e : new Error(String(e))));
        return f;
      },
      close,
    };
  }
  const broker = await openBrokerRig(variant === 'model-c-nats' ? 'nats' : 'amqp', `bench_c_${randomTag()}`, PARTITIONS);
  closers.push(() => broker.destroy());
  const publisher: BrokerPublisher = broker.publisher;
  // Twice the batch in flight: the next batch arrives while one commits (acks go after the commit).
  const source: BrokerSource = broker.source(2 * BATCH);
  return {
    send: (payload) => publisher.publish(partitionOf((JSON.parse(payload) as { key: string }).key, PARTITIONS), payload, { token }),
    follow: async (committed) => {
      const f = new BrokerFollower({ source, group: GROUP, partitions: PARTITIONS, sink: postgresSink({ pool }), batchSize: BATCH, applyBatch: (ds, tx) => applyDecisions(tx, ds.map((d) => d.payload)) });
      f.on('applied', (b) => committed.add(b.count));
      f.start().catch((e: unknown) => committed.fail(e instanceof Error ? e : new Error(String(e))));
      return f;
    },
    close,
  };
}

const decision = (i: number): string => JSON.stringify({ key: `k${i % 97}`, value: i });
const pause = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

async function measure(variant: Variant, samples: number): Promise<{ latency: number[]; e2e: number; catchup: number }> {
  const latency: number[] = [];
  let e2e = 0;
  {
    const rig = await openRig(variant);
    try {
      const committed = new Committed();
      const f = await rig.follow(committed);
      let sent = 0;
      // Warm-up: connections, prepared statements, the consumers' first pulls.
      for (let i = 0; i < 20; i++) {
        await rig.send(decision(sent++));
        await committed.reach(sent);
      }
      for (let i = 0; i < samples; i++) {
        await pause(5 + Math.random() * 20);
        const t0 = performance.now();
        await rig.send(decision(sent++));
        await committed.reach(sent);
        latency.push(performance.now() - t0);
      }
      const t0 = performance.now();
      for (let i = 0; i < E2E; i++) await rig.send(decision(sent++));
      await committed.reach(sent);
      e2e = opsPerSecond(E2E, performance.now() - t0);
      await f.stop();
    } finally {
      await rig.close();
    }
  }
  const rig = await openRig(variant);
  try {
    for (let i = 0; i < CATCHUP; i++) await rig.send(decision(i));
    const committed = new Committed();
    const t0 = performance.now();
    const f = await rig.follow(committed);
    await committed.reach(CATCHUP);
    const catchup = opsPerSecond(CATCHUP, performance.now() - t0);
    await f.stop();
    return { latency, e2e, catchup };
  } finally {
    await rig.close();
  }
}

export function brokerBenchmark(): Benchmark {
  const name = 'broker';
  const description =
    `Model C (BrokerFollower on NATS JetStream and on RabbitMQ streams, ${PARTITIONS.length} partitions) vs Model B (Follower tailing the fenced log on PostgreSQL, poll ${POLL_MS} ms), ` +
    'the same decisions and the same PostgreSQL apply per batch (multi-row INSERT + upsert, with the offset or mark, in one transaction): ' +
    `latency publish -> committed, e2e rate (${E2E} decisions published one by one while applied), catch-up rate (${CATCHUP} decisions, batches of ${BATCH}).`;
  return {
    name,
    description,
    tags: ['nats', 'amqp', 'rabbitmq', 'postgres', 'replication', 'follow'],
    async run(options: BenchOptions): Promise<BenchResult> {
      const started = performance.now();
      const samples = Math.max(50, options.cycles);
      const metrics: Metric[] = [];
      const notes: string[] = [];
      for (const v of VARIANTS) {
        const r = await measure(v, samples);
        options.log(`${name}: ${v} latency p50 ${r.latency.slice().sort((a, b) => a - b)[Math.floor(r.latency.length / 2)]!.toFixed(2)} ms, e2e ${r.e2e.toFixed(0)}/s, catch-up ${r.catchup.toFixed(0)}/s`);
        metrics.push(metric(`latency-${v}`, `${v}: decision published (appended) -> committed by the follower, ms`, r.latency));
        metrics.push(metric(`e2e-${v}`, `${v}: decisions/s, ${E2E} published one by one while the follower applies, first publish -> last committed`, [r.e2e], undefined, 'ops/s'));
        metrics.push(metric(`catchup-${v}`, `${v}: decisions/s, a follower catching up ${CATCHUP} decisions from nothing`, [r.catchup], undefined, 'ops/s'));
      }
      notes.push('Model B polls the log (the Store interface has no push for streams); Model C is pushed by the broker. Each variant runs on its own fresh database, stream or queues.');
      return { name, description, target: 'nats+amqp', params: { partitions: PARTITIONS.length, pollMs: POLL_MS, batch: BATCH, e2e: E2E, catchup: CATCHUP, samples }, metrics, notes, durationMs: performance.now() - started };
    },
  };
}
