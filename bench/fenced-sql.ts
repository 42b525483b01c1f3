/**
 * Issue 22, database commands: a fenced row update (fencedUpdate: the term, the lease binding and
 * the issued term checked in the UPDATE itself) against the same plain UPDATE, on PostgreSQL and
 * on MySQL/MariaDB, side by side in one run. One client, one call at a time, through the same
 * pool; each round runs the variants op by op, in turn (the order rotated every op), so a change
 * in the machine's load hits all alike, and gives one throughput ratio. A third variant is the
 * fenced update checked against an epoch table with termCheck 'current' (the epoch store in the
 * written database), for comparison (no goal).
 */
import mysql from 'mysql2/promise';
import pg from 'pg';
import type * as FencingModule from '../src/fencing/index.js';
import type { FencingToken } from '../src/index.js';
import { msBetween, nowNs } from '../test/fixtures/harness.js';
import { PostgresStore, MysqlStore } from './lib/built.js';
import { freshMysql, freshPostgres } from './lib/servers.js';
import { metric, opsPerSecond } from './lib/stats.js';
import type { BenchOptions, BenchResult, Benchmark } from './lib/types.js';

// The built fencing module, as bench/lib/built.ts loads the stores (see there why not src/).
const fencing = (await import(new URL('../dist/src/fencing/index.js', import.meta.url).href).catch((err: unknown) => {
  throw new Error('cannot load the built tenure; run `npm run build` first (`npm run bench` does)', { cause: err });
})) as typeof FencingModule;

const ROUNDS = 20;
const OPS_PER_ROUND = 200;
const WARMUP = 200;
const ROWS = 100;

interface Server {
  readonly dialect: FencingModule.SqlDialect<unknown>;
  readonly db: unknown;
  /** The lease store on the same database (issues the term; its table is the issued check). */
  readonly store: { acquire(name: string, owner: string, ttlMs: number): Promise<{ acquired: boolean; lease: { term: number } }>; close(): Promise<void> };
  exec(sql: string): Promise<void>;
  plainUpdate(balance: number, id: number): Promise<void>;
  close(): Promise<void>;
}

async function postgresServer(url: string): Promise<Server> {
  const pool = new pg.Pool({ connectionString: url, max: 4 });
  pool.on('error', () => {});
  const store = new PostgresStore({ pool: pool as never });
  return {
    dialect: fencing.postgresDialect as FencingModule.SqlDialect<unknown>,
    db: pool,
    store,
    exec: async (sql) => void (await pool.query(sql)),
    plainUpdate: async (balance, id) => {
      await pool.query('UPDATE bench_rows SET balance = $1 WHERE id = $2', [balance, id]);
    },
    close: async () => {
      await store.close();
      await pool.end();
    },
  };
}

async function mysqlServer(url: string): Promise<Server> {
  const pool = mysql.createPool({ uri: url, connectionLimit: 4 });
  const store = new MysqlStore({ pool: pool as never });
  return {
    dialect: fencing.mysqlDialect as FencingModule.SqlDialect<unknown>,
    db: pool,
    store,
    exec: async (sql) => void (await pool.query(sql)),
    plainUpdate: async (balance, id) => {
      await pool.execute('UPDATE bench_rows SET balance = ? WHERE id = ?', [balance, id]);
    },
    close: async () => {
      await store.close();
      await pool.end();
    },
  };
}

function fencedSqlBenchmark(kind: 'postgres' | 'mysql'): Benchmark {
  const name = `${kind}-fenced-update`;
  const label = kind === 'postgres' ? 'PostgreSQL' : 'MySQL/MariaDB';
  return {
    name,
    description:
      `On ${label}, one client, one call at a time, on a table of ${ROWS} rows: fencedUpdate (term, lease binding and issued term checked in the UPDATE) ` +
      `vs the same plain UPDATE ${kind === 'postgres' ? '(pool.query)' : '(pool.execute, a prepared statement as fencedUpdate sends)'}, and fencedUpdate against an epoch table with termCheck 'current'; ` +
      `${ROUNDS} rounds of ${OPS_PER_ROUND} each, the variants op by op in turn. Goal: fenced >= 0.85x plain.`,
    tags: [kind, 'sql', 'fencing'],
    async run(options: BenchOptions): Promise<BenchResult> {
      const started = nowNs();
      const db = kind === 'postgres' ? await freshPostgres() : await freshMysql();
      const server = kind === 'postgres' ? await postgresServer(db.url) : await mysqlServer(db.url);
      try {
        const held = await server.store.acquire('bench', 'bench-writer', 600_000);
        if (!held.acquired) throw new Error('could not take the writer lease');
        const token: FencingToken = { lease: 'bench', term: held.lease.term };
        const epochs = fencing.createEpochStore({ dialect: server.dialect, db: server.db });
        const epochToken = epochs.token('bench', await epochs.bump('bench'));
        const types = kind === 'postgres' ? { token: 'bigint', lease: 'text' } : { token: 'BIGINT NULL', lease: 'VARBINARY(800) NULL' };
        await server.exec(`CREATE TABLE bench_rows (id int PRIMARY KEY, balance int NOT NULL, last_fence_token ${types.token}, last_fence_lease ${types.lease})`);
        await server.exec(`CREATE TABLE bench_epoch_rows (id int PRIMARY KEY, balance int NOT NULL, last_fence_token ${types.token}, last_fence_lease ${types.lease})`);
        const values = Array.from({ length: ROWS }, (_, i) => `(${i + 1}, 0)`).join(', ');
        await server.exec(`INSERT INTO bench_rows (id, balance) VALUES ${values}`);
        await server.exec(`INSERT INTO bench_epoch_rows (id, balance) VALUES ${values}`);
        let n = 0;
        const variants = [
          {
            id: 'fenced',
            op: async () => {
              n++;
              const r = await fencing.fencedUpdate(server.dialect, server.db, token, { table: 'bench_rows', set: { balance: n }, where: { id: (n % ROWS) + 1 } });
              if (r.updated !== 1) throw new Error('fenced update matched no row');
            },
            lat: [] as number[],
            rate: [] as number[],
          },
          {
            id: 'plain',
            op: async () => {
              n++;
              await server.plainUpdate(n, (n % ROWS) + 1);
            },
            lat: [] as number[],
            rate: [] as number[],
          },
          {
            id: 'epoch',
            op: async () => {
              n++;
              const r = await fencing.fencedUpdate(server.dialect, server.db, epochToken, {
                table: 'bench_epoch_rows',
                set: { balance: n },
                where: { id: (n % ROWS) + 1 },
                leaseTable: 'tenure_epochs',
                termCheck: 'current',
              });
              if (r.updated !== 1) throw new Error('epoch-fenced update matched no row');
            },
            lat: [] as number[],
            rate: [] as number[],
          },
        ];
        for (let i = 0; i < WARMUP; i++) for (const v of variants) await v.op();
        const ratios: number[] = [];
        const epochRatios: number[] = [];
        for (let r = 0; r < ROUNDS; r++) {
          // The variants op by op, in turn (the order rotated every op), so that the machine's
          // load drifting during a round hits every variant alike; a round's rate per variant is
          // its ops over the time spent in them.
          const spent = new Map<string, number>(variants.map((v) => [v.id, 0]));
          for (let i = 0; i < OPS_PER_ROUND; i++) {
            for (let k = 0; k < variants.length; k++) {
              const v = variants[(i + k + r) % variants.length]!;
              const s = nowNs();
              await v.op();
              const ms = msBetween(s, nowNs());
              v.lat.push(ms);
              spent.set(v.id, spent.get(v.id)! + ms);
            }
          }
          const rate = new Map<string, number>();
          for (const v of variants) {
            const ops = opsPerSecond(OPS_PER_ROUND, spent.get(v.id)!);
            v.rate.push(ops);
            rate.set(v.id, ops);
          }
          ratios.push(rate.get('fenced')! / rate.get('plain')!);
          epochRatios.push(rate.get('epoch')! / rate.get('plain')!);
        }
        options.log(`${name}: done`);
        const [fencedV, plainV, epochV] = variants as [(typeof variants)[0], (typeof variants)[0], (typeof variants)[0]];
        return {
          name,
          description: this.description,
          target: kind,
          params: { rounds: ROUNDS, opsPerRound: OPS_PER_ROUND, rows: ROWS, clients: 1 },
          metrics: [
            metric('fenced-update', 'latency of one fencedUpdate call (default checks: term, lease binding, issued term in tenure_leases)', fencedV.lat),
            metric('plain-update', 'latency of the same UPDATE without any check', plainV.lat),
            metric('epoch-update', "latency of one fencedUpdate checked against the epoch table with termCheck 'current'", epochV.lat),
            metric('fenced-rate', 'fencedUpdate calls per second, one client (samples: rounds)', fencedV.rate, undefined, 'ops/s'),
            metric('plain-rate', 'plain UPDATEs per second, one client (samples: rounds)', plainV.rate, undefined, 'ops/s'),
            metric('epoch-rate', "epoch-fenced (termCheck 'current') updates per second (samples: rounds)", epochV.rate, undefined, 'ops/s'),
            metric('fenced/plain', 'fencedUpdate throughput / plain UPDATE throughput, in the same round', ratios, { stat: 'p50', min: 0.85, label: '0.85x' }, 'x'),
            metric('epoch/plain', "epoch-fenced (termCheck 'current') throughput / plain UPDATE throughput, in the same round", epochRatios, undefined, 'x'),
          ],
          notes: [],
          durationMs: msBetween(started, nowNs()),
        };
      } finally {
        await server.close();
        await db.cleanup();
      }
    },
  };
}

export const fencedSqlBenchmarks: readonly Benchmark[] = [fencedSqlBenchmark('postgres'), fencedSqlBenchmark('mysql')];
