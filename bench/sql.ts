/**
 * Issue 12, the write path on PostgreSQL and MySQL/MariaDB (one benchmark per server, each in a
 * fresh database):
 *
 *  - Fenced append vs a plain INSERT: one client, one call at a time, through the same kind of
 *    pool. The plain table is a copy of the store's stream table (same columns, same primary key:
 *    `CREATE TABLE … (LIKE …)`), written with a client-side sequence number and no check at all.
 *    A third variant, the sequenced INSERT, is the append without its fence (bump a stream head,
 *    insert at that position), to show where the append's cost goes. Each round runs every
 *    variant once, in turn (reversed every other round), so that a change in the machine's load
 *    hits all alike; each round gives one throughput ratio. On MySQL a fourth variant is the
 *    plain INSERT through mysql2's callback API, as the store itself sends statements: the ratio
 *    to it is the cost of the fence and the sequence number alone, without the promise layer.
 *  - One node holding 10,000 leases: `renewMany` of all of them, its time per call, and how many
 *    statements (round trips) the store sent per call, counted by wrapping the driver's pool.
 */
import mysql from 'mysql2/promise';
import pg from 'pg';
import type { MysqlPool } from '../src/stores/mysql/index.js';
import { MysqlStore, PostgresStore } from './lib/built.js';
import type { PgPool } from '../src/stores/postgres/index.js';
import type { FencingToken, Store } from '../src/index.js';
import { msBetween, nowNs } from '../test/fixtures/harness.js';
import { metric, opsPerSecond } from './lib/stats.js';
import { freshMysql, freshPostgres } from './lib/servers.js';
import type { BenchOptions, BenchResult, Benchmark } from './lib/types.js';

const ROUNDS = 20;
const OPS_PER_ROUND = 200;
const WARMUP = 100;
const LEASES = 10_000;
const RENEW_ROUNDS = 20;
/** TTL of the 10,000 leases: long enough that none expires while they are acquired and renewed. */
const BULK_TTL_MS = 60_000;
/** Parallel acquires while taking the 10,000 leases (the pool has this many connections). */
const ACQUIRE_CONCURRENCY = 8;
/** The renew interval of an elector at TTL 2 s (TTL / 3), for comparison in the description. */
const RENEW_INTERVAL_MS = Math.round(2000 / 3);

interface Counter {
  n: number;
}

/** `target` with every call of one of `methods` counted; other members pass through. */
function counting<T extends object>(target: T, methods: readonly string[], counter: Counter): T {
  return new Proxy(target, {
    get(t, prop) {
      const v: unknown = Reflect.get(t, prop, t);
      if (typeof v !== 'function') return v;
      const fn = v as (...args: unknown[]) => unknown;
      if (typeof prop === 'string' && methods.includes(prop)) {
        return (...args: unknown[]) => {
          counter.n++;
          return fn.apply(t, args);
        };
      }
      return fn.bind(t);
    },
  });
}

interface Server {
  /** The store on the plain pool (timed against the plain INSERT on the same pool). */
  readonly store: Store;
  /** The same store (same tables) on a pool whose statements are counted; slower, so never timed against the INSERT. */
  readonly counted: Store;
  readonly counter: Counter;
  /** The store's stream table and a plain copy of it (same columns and primary key). */
  createPlainTable(): Promise<void>;
  plainInsert(stream: string, seq: number, lease: string, term: number, payload: string): Promise<void>;
  /** The same INSERT through the driver's callback API, where the store itself uses it (mysql2: the store skips the promise layer). */
  plainInsertCore?(stream: string, seq: number, lease: string, term: number, payload: string): Promise<void>;
  /** The append without the fence: bump a stream head and insert the entry at that position, atomically. */
  sequencedInsert(stream: string, lease: string, term: number, payload: string): Promise<void>;
  close(): Promise<void>;
}

async function postgresServer(url: string): Promise<Server> {
  const counter: Counter = { n: 0 };
  const pool = new pg.Pool({ connectionString: url, max: ACQUIRE_CONCURRENCY });
  pool.on('error', () => {});
  const countedPool = {
    query: (text: string, values?: unknown[]) => {
      counter.n++;
      return pool.query(text, values);
    },
    connect: async () => counting(await pool.connect(), ['query'], counter),
    end: () => pool.end(),
    options: pool.options,
  };
  const counted = new PostgresStore({ pool: countedPool as unknown as PgPool });
  const store = new PostgresStore({ pool: pool as unknown as PgPool });
  return {
    store,
    counted,
    counter,
    createPlainTable: async () => {
      await pool.query('CREATE TABLE bench_plain (LIKE tenure_streams INCLUDING ALL)');
      await pool.query('CREATE TABLE bench_seq (LIKE tenure_streams INCLUDING ALL)');
      await pool.query('CREATE TABLE bench_heads (LIKE tenure_stream_heads INCLUDING ALL)');
    },
    plainInsert: async (stream, seq, lease, term, payload) => {
      await pool.query('INSERT INTO bench_plain (stream, seq, lease, term, payload) VALUES ($1, $2, $3, $4, $5)', [stream, seq, lease, term, payload]);
    },
    sequencedInsert: async (stream, lease, term, payload) => {
      await pool.query(
        `WITH head AS (
           INSERT INTO bench_heads AS h (stream, last_seq) VALUES ($1, 1)
           ON CONFLICT (stream) DO UPDATE SET last_seq = h.last_seq + 1 RETURNING last_seq)
         INSERT INTO bench_seq (stream, seq, lease, term, payload) SELECT $1, last_seq, $2, $3, $4 FROM head`,
        [stream, lease, term, payload],
      );
    },
    close: async () => {
      await counted.close();
      await store.close();
      await pool.end();
    },
  };
}

async function mysqlServer(url: string): Promise<Server> {
  const counter: Counter = { n: 0 };
  const pool = mysql.createPool({ uri: url, connectionLimit: ACQUIRE_CONCURRENCY });
  const countedPool = {
    getConnection: async () => counting(await pool.getConnection(), ['query', 'execute'], counter),
    end: () => pool.end(),
  };
  const counted = new MysqlStore({ pool: countedPool as unknown as MysqlPool });
  const store = new MysqlStore({ pool: pool as unknown as MysqlPool });
  return {
    store,
    counted,
    counter,
    createPlainTable: async () => {
      await pool.query('CREATE TABLE bench_plain LIKE tenure_streams');
      await pool.query('CREATE TABLE bench_core LIKE tenure_streams');
      await pool.query('CREATE TABLE bench_seq LIKE tenure_streams');
      await pool.query('CREATE TABLE bench_heads LIKE tenure_stream_heads');
    },
    plainInsert: async (stream, seq, lease, term, payload) => {
      await pool.execute('INSERT INTO bench_plain (stream, seq, lease, term, payload) VALUES (?, ?, ?, ?, ?)', [stream, seq, lease, term, payload]);
    },
    plainInsertCore: (stream, seq, lease, term, payload) =>
      new Promise<void>((resolve, reject) => {
        pool.pool.execute('INSERT INTO bench_core (stream, seq, lease, term, payload) VALUES (?, ?, ?, ?, ?)', [stream, seq, lease, term, payload], (err) => (err ? reject(err) : resolve()));
      }),
    sequencedInsert: async (stream, lease, term, payload) => {
      const c = await pool.getConnection();
      try {
        await c.query('START TRANSACTION');
        const [rows] = await c.execute('SELECT last_seq FROM bench_heads WHERE stream = ? FOR UPDATE', [stream]);
        const last = (rows as { last_seq: number | string }[])[0];
        const seq = last ? Number(last.last_seq) + 1 : 1;
        if (last) await c.execute('UPDATE bench_heads SET last_seq = ? WHERE stream = ?', [seq, stream]);
        else await c.execute('INSERT INTO bench_heads (stream, last_seq) VALUES (?, ?)', [stream, seq]);
        await c.execute('INSERT INTO bench_seq (stream, seq, lease, term, payload) VALUES (?, ?, ?, ?, ?)', [stream, seq, lease, term, payload]);
        await c.query('COMMIT');
      } catch (err) {
        await c.query('ROLLBACK').catch(() => {});
        throw err;
      } finally {
        c.release();
      }
    },
    close: async () => {
      await counted.close();
      await store.close();
      await pool.end();
    },
  };
}

function sqlBenchmark(kind: 'postgres' | 'mysql'): Benchmark {
  const name = `${kind}-writes`;
  const description =
    `On ${kind === 'postgres' ? 'PostgreSQL' : 'MySQL/MariaDB'}, one client, one call at a time: fenced append (appendFenced, the term checked in the same ` +
    `${kind === 'postgres' ? 'statement' : 'transaction'} as the write) vs a plain INSERT into a copy of the store's stream table (same columns and primary key, no check), ` +
    `and vs a sequenced INSERT (the append minus its fence)${kind === 'mysql' ? ", and vs the plain INSERT through mysql2's callback API (the store sends its statements that way, skipping the promise layer's per-call stack capture)" : ''}, ${ROUNDS} rounds of ${OPS_PER_ROUND} each, the variants in turn. Then one node holding ${LEASES} leases renews them all with renewMany, ${RENEW_ROUNDS} times ` +
    `(an elector at TTL 2 s renews every ${RENEW_INTERVAL_MS} ms); statements sent per call are counted at the driver.`;
  return {
    name,
    description,
    tags: [kind, 'sql'],
    async run(options: BenchOptions): Promise<BenchResult> {
      const started = nowNs();
      const db = kind === 'postgres' ? await freshPostgres() : await freshMysql();
      const server = kind === 'postgres' ? await postgresServer(db.url) : await mysqlServer(db.url);
      const { store } = server;
      const notes: string[] = [];
      try {
        // Fenced append vs plain INSERT.
        const lease = await store.acquire('writer', 'bench-writer', BULK_TTL_MS);
        if (!lease.acquired) throw new Error('could not take the writer lease');
        const token: FencingToken = { lease: 'writer', term: lease.lease.term };
        await server.createPlainTable();
        const payload = (n: number): string => JSON.stringify({ owner: 'bench-writer~1234', term: token.term, n });
        let plainSeq = 0;
        let appendN = 0;
        const append = async (): Promise<void> => {
          await store.appendFenced(token, 'bench-log', payload(appendN++));
        };
        const insert = async (): Promise<void> => {
          plainSeq++;
          await server.plainInsert('bench-log', plainSeq, 'writer', token.term, payload(plainSeq));
        };
        let seqN = 0;
        const sequenced = async (): Promise<void> => {
          await server.sequencedInsert('bench-log', 'writer', token.term, payload(seqN++));
        };
        let coreSeq = 0;
        const core = server.plainInsertCore;
        const insertCore = async (): Promise<void> => {
          coreSeq++;
          await core!('bench-log', coreSeq, 'writer', token.term, payload(coreSeq));
        };
        const variants = [
          { id: 'append', op: append, lat: [] as number[], rate: [] as number[] },
          { id: 'insert', op: insert, lat: [] as number[], rate: [] as number[] },
          { id: 'sequenced', op: sequenced, lat: [] as number[], rate: [] as number[] },
          ...(core ? [{ id: 'core', op: insertCore, lat: [] as number[], rate: [] as number[] }] : []),
        ];
        for (let i = 0; i < WARMUP; i++) for (const v of variants) await v.op();
        const ratios: number[] = [];
        const coreRatios: number[] = [];
        for (let r = 0; r < ROUNDS; r++) {
          // Visit the variants in turn, the order reversed every other round.
          const rate = new Map<string, number>();
          for (const v of r % 2 === 0 ? variants : [...variants].reverse()) {
            const t0 = nowNs();
            for (let i = 0; i < OPS_PER_ROUND; i++) {
              const s = nowNs();
              await v.op();
              v.lat.push(msBetween(s, nowNs()));
            }
            const ops = opsPerSecond(OPS_PER_ROUND, msBetween(t0, nowNs()));
            v.rate.push(ops);
            rate.set(v.id, ops);
          }
          ratios.push(rate.get('append')! / rate.get('insert')!);
          if (core) coreRatios.push(rate.get('append')! / rate.get('core')!);
        }
        const [appendV, insertV, seqV, coreV] = variants as [(typeof variants)[0], (typeof variants)[0], (typeof variants)[0], (typeof variants)[0] | undefined];
        options.log(`${name}: append vs insert done`);
        const { counted } = server;
        await counted.read('writer'); // its schema check, so that what follows counts only the append
        const before = server.counter.n;
        await counted.appendFenced(token, 'bench-log', payload(-1));
        const appendStatements = server.counter.n - before;

        // One node holding 10,000 leases.
        const names = Array.from({ length: LEASES }, (_, i) => `bulk-${String(i).padStart(5, '0')}`);
        const terms = new Map<string, number>();
        const acquireStart = nowNs();
        let next = 0;
        await Promise.all(
          Array.from({ length: ACQUIRE_CONCURRENCY }, async () => {
            while (next < names.length) {
              const n = names[next++]!;
              const r = await store.acquire(n, 'bulk-node', BULK_TTL_MS);
              if (!r.acquired) throw new Error(`could not take ${n}`);
              terms.set(n, r.lease.term);
            }
          }),
        );
        const acquireMs = msBetween(acquireStart, nowNs());
        options.log(`${name}: ${LEASES} leases taken in ${(acquireMs / 1000).toFixed(1)} s`);
        const items = names.map((n) => ({ name: n, term: terms.get(n)! }));
        const renewLat: number[] = [];
        const statements: number[] = [];
        let lost = 0;
        for (let r = 0; r < RENEW_ROUNDS; r++) {
          const c0 = server.counter.n;
          const t0 = nowNs();
          const results = await counted.renewMany!('bulk-node', items, BULK_TTL_MS);
          renewLat.push(msBetween(t0, nowNs()));
          statements.push(server.counter.n - c0);
          lost += results.filter((x) => !x.renewed).length;
        }
        if (lost > 0) notes.push(`${lost} lease renewals failed across ${RENEW_ROUNDS} renewMany calls (expected 0)`);
        notes.push(`statements per fenced append: ${appendStatements} (counted at the driver; the plain INSERT is 1)`);
        notes.push(`statements per renewMany of ${LEASES} leases: ${[...new Set(statements)].join(', ')}; taking the ${LEASES} leases (${ACQUIRE_CONCURRENCY} in parallel) took ${(acquireMs / 1000).toFixed(1)} s`);
        return {
          name,
          description,
          target: kind,
          params: { rounds: ROUNDS, opsPerRound: OPS_PER_ROUND, leases: LEASES, renewRounds: RENEW_ROUNDS },
          metrics: [
            metric('fenced-append', 'latency of one appendFenced call', appendV.lat),
            metric('plain-insert', 'latency of one INSERT into the copy of the stream table', insertV.lat),
            metric('sequenced-insert', `latency of the append without its fence: bump a stream head and insert the entry at that position (${kind === 'postgres' ? 'one statement' : 'one transaction'}); splits the cost of the append into sequencing and fencing`, seqV.lat),
            metric('fenced-append-rate', 'appendFenced calls per second, one client (samples: rounds)', appendV.rate, undefined, 'ops/s'),
            metric('plain-insert-rate', 'plain INSERTs per second, one client (samples: rounds)', insertV.rate, undefined, 'ops/s'),
            metric('sequenced-insert-rate', 'sequenced INSERTs per second, one client (samples: rounds)', seqV.rate, undefined, 'ops/s'),
            metric('append/insert', 'fenced append throughput / plain INSERT throughput, in the same round', ratios, { stat: 'p50', min: 0.85, label: '0.85x' }, 'x'),
            ...(coreV
              ? [
                  metric('plain-insert-core', "latency of the same plain INSERT through mysql2's callback API (pool.pool.execute), as the store sends its statements: without the promise layer's per-call cost", coreV.lat),
                  metric('append/insert-core', 'fenced append throughput / that callback-API INSERT throughput, in the same round: the cost of the fence and the sequence number alone', coreRatios, undefined, 'x'),
                ]
              : []),
            metric('renewMany-10k', `time of one renewMany call renewing all ${LEASES} leases`, renewLat),
            metric('renewMany-statements', `statements (round trips) the store sent per renewMany call of ${LEASES} leases, counted at the driver`, statements, { stat: 'max', max: 1, label: 'one round trip' }, 'count'),
          ],
          notes,
          durationMs: msBetween(started, nowNs()),
        };
      } finally {
        await server.close().catch(() => {});
        await db.cleanup();
      }
    },
  };
}

export const sqlBenchmarks: readonly Benchmark[] = [sqlBenchmark('postgres'), sqlBenchmark('mysql')];
