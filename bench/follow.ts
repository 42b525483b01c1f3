/**
 * Issue 23, Model B: a follower tailing the leader's fenced stream.
 *
 * - Latency: the leader appends one entry; the sample is the time from just before the append to
 *   the follower's commit of that entry (projection row and offset in one transaction). The
 *   leader and the follower are two store objects (two connections) in this process. Where the
 *   store pushes (`watchStream`: PostgreSQL NOTIFY, Redis PUBLISH, an etcd watch, SQLite's
 *   in-process tell) the follower wakes on the push, and keeps its poll every POLL_MS as the
 *   fallback (MySQL has no push: the poll alone). PostgreSQL is also measured with push off (the
 *   poll alone, as before push existed), side by side in the same run. Between samples the
 *   leader waits a random 5..25 ms, so each append finds the follower idle.
 * - Lag: a follower that has applied nothing measures its lag (`measureLag()`: the store's time
 *   minus the oldest unapplied entry's append time, both on the store's clock) LAG_WAIT_MS after
 *   the leader's append returned; the metric is that lag minus the leader's own monotonic
 *   measure of the same interval (0 is exact; a round trip or so is expected).
 *   Projections: PostgreSQL and MySQL in their own database, the others in a SQLite file.
 * - Catch-up: a log of 100,000 entries, then one follower applies them all, batches of 1,000,
 *   with applyBatch (one multi-row INSERT per batch) and with apply (one INSERT per entry); the
 *   baseline is the same multi-row INSERTs of the same rows, in the same batches, without
 *   replication (no log read, no offset). The log is filled with one fenced append and then
 *   direct SQL into the store's stream table (100,000 fenced appends one by one would take
 *   minutes and measure the leader, not the follower).
 *
 *   npm run bench -- follow        (--cycles N latency samples per store, default 20; at least 50 are taken)
 *   FOLLOW_LATENCY_ONLY=1 npm run bench -- follow     (latency and lag only, no catch-up runs)
 *   FOLLOW_TARGETS=postgres,redis npm run bench -- follow   (only those stores)
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import mysql from 'mysql2/promise';
import pg from 'pg';
import type { FollowerSink, StreamEntry, TenureStore } from '../src/index.js';
// The built tenure, as users run it (bench/lib/built.ts says why not src/ through tsx).
import { Follower, openStore, postgresSink, sqliteSink, mysqlSink } from './lib/built.js';
import { freshMysql, freshPostgres, freshRedis, freshEtcd } from './lib/servers.js';
import { metric } from './lib/stats.js';
import type { BenchOptions, BenchResult, Benchmark, Goal, Metric } from './lib/types.js';

const POLL_MS = 2;
const LAG_WAIT_MS = 100;
const LAG_SAMPLES = 5;
const CATCHUP_ENTRIES = 100_000;
const CATCHUP_BATCH = 1000;
const WAIT_MS = 30_000;
const LATENCY_5: Goal = { stat: 'p50', max: 5, label: '5 ms' };
const LATENCY_20: Goal = { stat: 'p50', max: 20, label: '20 ms' };
const CATCHUP_GOAL: Goal = { stat: 'p50', min: 20_000, label: '20,000 entries/s' };
const RATIO_GOAL: Goal = { stat: 'p50', min: 0.8, label: '0.8 × without replication' };

/** A projection: table `applied (seq, payload)` and a sink over it. */
interface Projection {
  readonly sink: FollowerSink<unknown>;
  insertOne(tx: unknown, e: StreamEntry): Promise<void>;
  insertMany(tx: unknown, rows: readonly { seq: number; payload: string }[]): Promise<void>;
  /** The same multi-row inserts in batches, in transactions, with no replication. */
  rawBatch(rows: readonly { seq: number; payload: string }[]): Promise<void>;
  count(): Promise<number>;
  close(): Promise<void>;
}

function sqliteProjection(path: string): Projection {
  const db = new Database(path);
  db.pragma('journal_mode = WAL');
  db.pragma('synchronous = FULL');
  db.exec('CREATE TABLE IF NOT EXISTS applied (seq INTEGER NOT NULL, payload TEXT NOT NULL)');
  const one = db.prepare('INSERT INTO applied (seq, payload) VALUES (?, ?)');
  const many = (rows: readonly { seq: number; payload: string }[]): void => {
    for (const r of rows) one.run(r.seq, r.payload);
  };
  return {
    sink: sqliteSink(db) as FollowerSink<unknown>,
    insertOne: async (_tx, e) => void one.run(e.seq, e.payload),
    insertMany: async (_tx, rows) => many(rows),
    rawBatch: async (rows) => {
      db.exec('BEGIN IMMEDIATE');
      many(rows);
      db.exec('COMMIT');
    },
    count: async () => Number((db.prepare('SELECT count(*) AS n FROM applied').get() as { n: number }).n),
    close: async () => void db.close(),
  };
}

async function postgresProjection(url: string): Promise<Projection> {
  const pool = new pg.Pool({ connectionString: url, max: 2 });
  pool.on('error', () => {});
  await pool.query('CREATE TABLE IF NOT EXISTS applied (seq bigint NOT NULL, payload text NOT NULL)');
  const many = (c: pg.PoolClient | pg.Pool, rows: readonly { seq: number; payload: string }[]) =>
    c.query('INSERT INTO applied (seq, payload) SELECT * FROM unnest($1::bigint[], $2::text[])', [rows.map((r) => r.seq), rows.map((r) => r.payload)]);
  return {
    sink: postgresSink({ pool }) as FollowerSink<unknown>,
    insertOne: async (tx, e) => void (await (tx as pg.PoolClient).query('INSERT INTO applied (seq, payload) VALUES ($1, $2)', [e.seq, e.payload])),
    insertMany: async (tx, rows) => void (await many(tx as pg.PoolClient, rows)),
    rawBatch: async (rows) => {
      const c = await pool.connect();
      try {
        await c.query('BEGIN');
        await many(c, rows);
        await c.query('COMMIT');
      } finally {
        c.release();
      }
    },
    count: async () => Number((await pool.query('SELECT count(*) AS n FROM applied')).rows[0].n),
    close: () => pool.end(),
  };
}

async function mysqlProjection(url: string): Promise<Projection> {
  const pool = mysql.createPool({ uri: url, connectionLimit: 2 });
  await pool.query('CREATE TABLE IF NOT EXISTS applied (seq BIGINT NOT NULL, payload TEXT NOT NULL) ENGINE=InnoDB');
  return {
    sink: mysqlSink({ pool }) as FollowerSink<unknown>,
    insertOne: async (tx, e) => void (await (tx as mysql.PoolConnection).execute('INSERT INTO applied (seq, payload) VALUES (?, ?)', [e.seq, e.payload])),
    insertMany: async (tx, rows) => void (await (tx as mysql.PoolConnection).query('INSERT INTO applied (seq, payload) VALUES ?', [rows.map((r) => [r.seq, r.payload])])),
    rawBatch: async () => {
      throw new Error('not measured on MySQL');
    },
    count: async () => Number(((await pool.query('SELECT count(*) AS n FROM applied'))[0] as { n: number }[])[0]!.n),
    close: () => pool.end(),
  };
}

interface Target {
  readonly name: 'postgres' | 'redis' | 'sqlite' | 'mysql' | 'etcd';
  readonly goal?: Goal;
  /** Whether catch-up is measured here (the log can be filled by SQL). */
  readonly catchup?: boolean;
  open(): Promise<{ storeUrl: string; projection: () => Promise<Projection>; fill?: (n: number) => Promise<void>; cleanup: () => Promise<void> }>;
}

function tempDir(): { dir: string; remove: () => void } {
  const dir = mkdtempSync(join(tmpdir(), 'tenure-bench-follow-'));
  return { dir, remove: () => rmSync(dir, { recursive: true, force: true }) };
}

const TARGETS: readonly Target[] = [
  {
    name: 'postgres',
    goal: LATENCY_5,
    catchup: true,
    open: async () => {
      const db = await freshPostgres();
      return {
        storeUrl: db.url,
        projection: () => postgresProjection(db.url),
        // Rows 2..n of stream 's' (entry 1 came from a fenced append), and the stream's head.
        fill: async (n) => {
          const c = new pg.Client({ connectionString: db.url });
          await c.connect();
          try {
            await c.query(
              `INSERT INTO tenure_streams (stream, seq, lease, term, payload)
               SELECT 's', g, lease, term, 'entry ' || g FROM generate_series(2, $1::bigint) AS g, (SELECT lease, term FROM tenure_streams WHERE stream = 's' AND seq = 1) AS first`,
              [n],
            );
            await c.query(`UPDATE tenure_stream_heads SET last_seq = $1 WHERE stream = 's'`, [n]);
          } finally {
            await c.end();
          }
        },
        cleanup: db.cleanup,
      };
    },
  },
  {
    name: 'redis',
    goal: LATENCY_5,
    open: async () => {
      const r = await freshRedis();
      const t = tempDir();
      return { storeUrl: r.storeArg, projection: async () => sqliteProjection(join(t.dir, 'p.db')), cleanup: async () => { await r.cleanup(); t.remove(); } };
    },
  },
  {
    name: 'sqlite',
    goal: LATENCY_20,
    catchup: true,
    open: async () => {
      const t = tempDir();
      const log = join(t.dir, 'log.db');
      return {
        storeUrl: `sqlite:${log}`,
        projection: async () => sqliteProjection(join(t.dir, 'p.db')),
        fill: async (n) => {
          const db = new Database(log);
          db.pragma('busy_timeout = 10000');
          const first = db.prepare("SELECT lease, term FROM tenure_streams WHERE stream = 's' AND seq = 1").get() as { lease: string; term: number };
          const ins = db.prepare("INSERT INTO tenure_streams (stream, seq, lease, term, payload) VALUES ('s', ?, ?, ?, ?)");
          db.transaction(() => {
            for (let i = 2; i <= n; i++) ins.run(i, first.lease, first.term, `entry ${i}`);
          })();
          db.close();
        },
        cleanup: async () => t.remove(),
      };
    },
  },
  {
    name: 'mysql',
    open: async () => {
      const db = await freshMysql();
      return { storeUrl: db.url, projection: () => mysqlProjection(db.url), cleanup: db.cleanup };
    },
  },
  {
    name: 'etcd',
    open: async () => {
      const e = await freshEtcd();
      const t = tempDir();
      return { storeUrl: e.storeArg, projection: async () => sqliteProjection(join(t.dir, 'p.db')), cleanup: async () => { await e.cleanup(); t.remove(); } };
    },
  },
];

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

async function leaderToken(store: TenureStore): Promise<{ lease: string; term: number }> {
  const r = await store.acquire('leader', 'bench-leader', 600_000);
  return { lease: 'leader', term: r.lease.term };
}

/** One durable single-row INSERT (autocommit) on PostgreSQL, ms: an append and an apply are one such commit each. */
async function commitFloor(url: string): Promise<number[]> {
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  try {
    await c.query('CREATE TABLE IF NOT EXISTS commit_probe (a int)');
    const out: number[] = [];
    for (let i = 0; i < 30; i++) {
      const t0 = performance.now();
      await c.query('INSERT INTO commit_probe VALUES (1)');
      out.push(performance.now() - t0);
    }
    return out;
  } finally {
    await c.end();
  }
}

/**
 * The lag a follower reports in ms (store clock) minus the leader's monotonic measure of the
 * entry's age, per sample; null where the store has no readable clock (etcd).
 */
async function measureLagError(target: Target, log: (l: string) => void): Promise<number[] | null> {
  const env = await target.open();
  const leader = await openStore(env.storeUrl);
  const followerStore = await openStore(env.storeUrl);
  const proj = await env.projection();
  try {
    if (!followerStore.streamHead) return null;
    const token = await leaderToken(leader);
    const out: number[] = [];
    for (let i = 0; i < LAG_SAMPLES; i++) {
      const stream = `lag-${i}`;
      const t0 = performance.now();
      await leader.appendFenced(token, stream, 'probe');
      await sleep(LAG_WAIT_MS);
      const follower = new Follower({ store: followerStore, stream, sink: proj.sink, apply: () => {}, lagEveryMs: 0 });
      const lag = await follower.measureLag();
      const local = performance.now() - t0;
      if (lag.ms === null || lag.entries !== 1) throw new Error(`${target.name}: lag not measured (${JSON.stringify(lag)})`);
      out.push(lag.ms - local);
    }
    log(`${target.name}: lag in ms on the store's clock minus the leader's measure: ${out.map((x) => x.toFixed(1)).join(', ')}`);
    return out;
  } finally {
    await proj.close();
    await followerStore.close();
    await leader.close();
    await env.cleanup();
  }
}

async function measureLatency(target: Target, samples: number, log: (l: string) => void, floor?: number[], push = true): Promise<number[]> {
  const env = await target.open();
  const leader = await openStore(env.storeUrl);
  const followerStore = await openStore(env.storeUrl);
  const proj = await env.projection();
  try {
    const token = await leaderToken(leader);
    if (floor) floor.push(...(await commitFloor(env.storeUrl)));
    const committed = new Map<number, number>();
    const pushed = push && followerStore.watchStream !== undefined;
    const follower = new Follower({
      store: followerStore,
      stream: 's',
      sink: proj.sink,
      apply: (e, tx) => proj.insertOne(tx, e),
      pollMs: POLL_MS,
      push,
      batchSize: 100,
    });
    follower.on('applied', (b) => committed.set(b.to, performance.now()));
    const running = follower.start();
    const out: number[] = [];
    const warmup = 5;
    for (let i = 0; i < samples + warmup; i++) {
      await sleep(5 + Math.random() * 20);
      const t0 = performance.now();
      const seq = await leader.appendFenced(token, 's', `entry ${i + 1}`);
      const deadline = t0 + WAIT_MS;
      while (!committed.has(seq)) {
        if (performance.now() > deadline) throw new Error(`${target.name}: entry ${seq} not applied within ${WAIT_MS} ms`);
        await sleep(0.2);
      }
      if (i >= warmup) out.push(committed.get(seq)! - t0);
    }
    await follower.stop();
    await running;
    log(`${target.name}${pushed ? ` (push + poll every ${POLL_MS} ms)` : ` (poll every ${POLL_MS} ms)`}: append -> applied p50 ${[...out].sort((a, b) => a - b)[Math.floor(out.length / 2)]!.toFixed(2)} ms`);
    return out;
  } finally {
    await proj.close();
    await followerStore.close();
    await leader.close();
    await env.cleanup();
  }
}

interface Catchup {
  batched: number[];
  perEntry: number;
  raw: number[];
  /** batched / raw of each round. */
  ratio: number[];
}

/** Rounds of (without replication, batched follower), interleaved so a load spike hits both alike. */
const CATCHUP_ROUNDS = 5;

async function measureCatchup(target: Target, log: (l: string) => void): Promise<Catchup> {
  const env = await target.open();
  const store = await openStore(env.storeUrl);
  try {
    const token = await leaderToken(store);
    await store.appendFenced(token, 's', 'entry 1');
    await env.fill!(CATCHUP_ENTRIES);
    const rate = async (mode: 'batched' | 'perEntry' | 'raw', round: number): Promise<number> => {
      const proj = await env.projection();
      try {
        const t0 = performance.now();
        if (mode === 'raw') {
          for (let from = 1; from <= CATCHUP_ENTRIES; from += CATCHUP_BATCH) {
            const rows = Array.from({ length: Math.min(CATCHUP_BATCH, CATCHUP_ENTRIES - from + 1) }, (_, i) => ({ seq: from + i, payload: `entry ${from + i}` }));
            await proj.rawBatch(rows);
          }
        } else {
          const follower = new Follower({
            store,
            stream: 's',
            name: `catchup-${mode}-${round}`,
            sink: proj.sink,
            batchSize: CATCHUP_BATCH,
            pollMs: 1,
            ...(mode === 'batched' ? { applyBatch: (entries: readonly StreamEntry[], tx: unknown) => proj.insertMany(tx, entries) } : { apply: (e: StreamEntry, tx: unknown) => proj.insertOne(tx, e) }),
          });
          const running = follower.start();
          await new Promise<void>((resolve, reject) => {
            follower.on('caught-up', () => resolve());
            running.catch(reject);
          });
          await follower.stop();
          await running;
        }
        const elapsed = performance.now() - t0;
        return (CATCHUP_ENTRIES / elapsed) * 1000;
      } finally {
        await proj.close();
      }
    };
    const out: Catchup = { batched: [], perEntry: 0, raw: [], ratio: [] };
    for (let round = 0; round < CATCHUP_ROUNDS; round++) {
      const raw = await rate('raw', round);
      const batched = await rate('batched', round);
      out.raw.push(raw);
      out.batched.push(batched);
      out.ratio.push(batched / raw);
      log(`${target.name}: catch-up of ${CATCHUP_ENTRIES} entries, round ${round + 1}: ${batched.toFixed(0)}/s batched, ${raw.toFixed(0)}/s without replication`);
    }
    out.perEntry = await rate('perEntry', 0);
    log(`${target.name}: catch-up with one INSERT per entry: ${out.perEntry.toFixed(0)}/s`);
    return out;
  } finally {
    await store.close();
    await env.cleanup();
  }
}

const DESCRIPTION =
  `Model B: append on the leader -> committed by a follower (projection row and offset in one transaction; the follower wakes on the store's push, ` +
  `with its poll every ${POLL_MS} ms kept as the fallback; MySQL has no push), its lag in ms on the store's clock, ` +
  `and one follower catching up ${CATCHUP_ENTRIES.toLocaleString('en')} entries in batches of ${CATCHUP_BATCH} against the same inserts without replication.`;

/** The targets FOLLOW_TARGETS names (comma-separated), or all of them. */
function chosen(): readonly Target[] {
  const names = (process.env.FOLLOW_TARGETS ?? '').split(',').filter((n) => n !== '');
  if (names.length === 0) return TARGETS;
  const unknown = names.filter((n) => !TARGETS.some((t) => t.name === n));
  if (unknown.length > 0) throw new Error(`FOLLOW_TARGETS: unknown ${unknown.join(', ')} (known: ${TARGETS.map((t) => t.name).join(', ')})`);
  return TARGETS.filter((t) => names.includes(t.name));
}

export function followBenchmark(): Benchmark {
  return {
    name: 'follow',
    description: DESCRIPTION,
    tags: ['postgres', 'redis', 'sqlite', 'mysql', 'etcd', 'replication'],
    async run({ cycles, log }: BenchOptions): Promise<BenchResult> {
      const started = performance.now();
      const samples = Math.max(50, cycles);
      const metrics: Metric[] = [];
      const notes: string[] = [
        "Latency is measured by the leader (one process, one monotonic clock); the follower's own lag in ms (store clock) is checked against it in lag-* metrics.",
        'In the catch-up runs the projection tables are not emptied between modes: each mode uses its own follower name (its own offset) and appends 100,000 more rows.',
      ];
      for (const target of chosen()) {
        const floor: number[] = [];
        const lat = await measureLatency(target, samples, log, target.name === 'postgres' ? floor : undefined);
        metrics.push(metric(`latency-${target.name}`, `${target.name}: append sent -> follower committed, ms`, lat, target.goal));
        if (floor.length > 0) {
          metrics.push(metric(`commit-${target.name}`, `${target.name}: one durable single-row INSERT (autocommit) on the same server, ms; append -> applied is two such commits plus a read`, floor));
        }
        if (target.name === 'postgres') {
          const polled = await measureLatency(target, samples, log, undefined, false);
          metrics.push(metric(`latency-${target.name}-poll`, `${target.name}: the same with push off (the poll every ${POLL_MS} ms alone, as before push), ms`, polled));
        }
        const lagError = await measureLagError(target, log);
        if (lagError) {
          metrics.push(metric(`lag-${target.name}`, `${target.name}: follower's lag in ms (store clock) minus the leader's monotonic measure, ${LAG_WAIT_MS} ms after the append`, lagError));
        }
      }
      for (const target of chosen().filter((t) => t.catchup && process.env.FOLLOW_LATENCY_ONLY !== '1')) {
        const c = await measureCatchup(target, log);
        metrics.push(metric(`catchup-${target.name}`, `${target.name}: entries/s applied catching up (applyBatch, multi-row INSERT per batch)`, c.batched, CATCHUP_GOAL, 'ops/s'));
        metrics.push(metric(`catchup-${target.name}-per-entry`, `${target.name}: entries/s applied catching up (apply, one INSERT per entry)`, [c.perEntry], undefined, 'ops/s'));
        metrics.push(metric(`raw-${target.name}`, `${target.name}: the same multi-row INSERTs without replication, rows/s`, c.raw, undefined, 'ops/s'));
        metrics.push(metric(`ratio-${target.name}`, `${target.name}: catch-up (batched) / without replication, per round`, c.ratio, RATIO_GOAL, 'x'));
      }
      return {
        name: 'follow',
        description: DESCRIPTION,
        target: chosen().map((t) => t.name).join(','),
        params: { pollMs: POLL_MS, latencySamples: samples, catchupEntries: CATCHUP_ENTRIES, catchupBatch: CATCHUP_BATCH },
        metrics,
        notes,
        durationMs: performance.now() - started,
      };
    },
  };
}
