/**
 * Issue 22, HTTP: requests/s through httpFence's middleware and guard against the same handler
 * without them, side by side in one run, on PostgreSQL.
 *
 * One service process (bench/fixtures/http-service.ts) runs two node:http servers, each on a pg
 * pool of its own, each doing the same write per request: BEGIN; UPDATE items SET value, term
 * WHERE id; COMMIT on one of 100 rows picked at random. The fenced one also parses the
 * Fencing-Token header and runs the guard's check-and-record in that transaction, begun by
 * `guard.begin` (BEGIN and the check in one round trip). autocannon,
 * in this process, drives each server in turn for a few seconds (the order reversed every other
 * round, so that a change in the machine's load hits both alike); each round gives one ratio.
 *
 *   npx tsx bench/run.ts fenced-http        (or on its own: npx tsx bench/fenced-http.ts)
 */
import autocannon from 'autocannon';
import type { AutocannonResult } from 'autocannon';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import pg from 'pg';
import { PostgresStore } from '../src/stores/postgres/index.js';
import { FixtureProcess, msBetween, nowNs, repoRoot } from '../test/fixtures/harness.js';
import { metric } from './lib/stats.js';
import { freshPostgres } from './lib/servers.js';
import type { BenchOptions, BenchResult, Benchmark } from './lib/types.js';

const GROUP = 'bench-http';
const ROWS = 100;
const CONNECTIONS = 10;
const POOL = 10;
const SECONDS = 2;
const WARMUP_SECONDS = 2;

const tsxLoader = (): string => pathToFileURL(join(repoRoot(), 'node_modules', 'tsx', 'dist', 'loader.mjs')).href;

function load(url: string, headers: Record<string, string>, seconds: number): Promise<AutocannonResult> {
  let n = 0;
  return autocannon({
    url,
    connections: CONNECTIONS,
    duration: seconds,
    requests: [
      {
        method: 'PUT',
        setupRequest: (req) => ({
          ...req,
          method: 'PUT',
          path: `/items/${1 + Math.floor(Math.random() * ROWS)}`,
          headers: { ...headers, 'content-type': 'application/json' },
          body: JSON.stringify({ value: `v${n++}` }),
        }),
      },
    ],
  });
}

export function fencedHttpBenchmark(): Benchmark {
  const name = 'fenced-http';
  const description = `HTTP requests/s through httpFence (node:http middleware + guard checking the term in the write's PostgreSQL transaction) vs the same handler unfenced; autocannon, ${CONNECTIONS} connections, pool of ${POOL}, one UPDATE on one of ${ROWS} rows per request`;
  return {
    name,
    description,
    tags: ['postgres', 'http', 'fencing'],
    async run(options: BenchOptions): Promise<BenchResult> {
      const started = nowNs();
      const db = await freshPostgres();
      const pool = new pg.Pool({ connectionString: db.url, max: 2 });
      const store = new PostgresStore({ pool });
      let svc: FixtureProcess | null = null;
      try {
        const { lease } = await store.acquire(GROUP, 'bench-leader~1', 600_000);
        await pool.query('CREATE TABLE items (id int PRIMARY KEY, value text NOT NULL, term bigint NOT NULL)');
        await pool.query(`INSERT INTO items SELECT g, '', 0 FROM generate_series(1, ${ROWS}) AS g`);
        svc = new FixtureProcess('http-service', join(repoRoot(), 'bench', 'fixtures', 'http-service.ts'), [db.url, GROUP, String(POOL)], { NODE_OPTIONS: `--import ${tsxLoader()}` });
        const ports = await new Promise<{ plain: number; fenced: number }>((resolve, reject) => {
          const child = svc!.child;
          let out = '';
          const onData = (chunk: Buffer | string): void => {
            out += String(chunk);
            const nl = out.indexOf('\n');
            if (nl >= 0) {
              child.stdout!.off('data', onData);
              resolve(JSON.parse(out.slice(0, nl)) as { plain: number; fenced: number });
            }
          };
          child.stdout!.on('data', onData);
          child.once('exit', (code) => reject(new Error(`http-service exited with ${code}: ${svc!.stderr}`)));
        });
        const variants = {
          plain: { url: `http://127.0.0.1:${ports.plain}`, headers: {} as Record<string, string> },
          fenced: { url: `http://127.0.0.1:${ports.fenced}`, headers: { 'Fencing-Token': `${GROUP}#${lease.term}` } },
        };
        // Warm both (JIT, pools, the fence row recorded).
        for (const v of Object.values(variants)) await load(v.url, v.headers, WARMUP_SECONDS);
        const rounds = Math.max(2, Math.min(options.cycles, 20));
        const rate = { plain: [] as number[], fenced: [] as number[] };
        const p50 = { plain: [] as number[], fenced: [] as number[] };
        const ratios: number[] = [];
        const notes: string[] = [];
        let bad = 0;
        for (let r = 0; r < rounds; r++) {
          const order = r % 2 === 0 ? (['plain', 'fenced'] as const) : (['fenced', 'plain'] as const);
          const got: Partial<Record<'plain' | 'fenced', number>> = {};
          for (const k of order) {
            const res = await load(variants[k].url, variants[k].headers, SECONDS);
            bad += res.non2xx + res.errors + res.timeouts;
            const perSecond = res.requests.total / res.duration;
            got[k] = perSecond;
            rate[k].push(perSecond);
            p50[k].push(res.latency.p50);
          }
          ratios.push(got.fenced! / got.plain!);
          options.log(`round ${r + 1}/${rounds}: plain ${got.plain!.toFixed(0)} req/s, fenced ${got.fenced!.toFixed(0)} req/s, ratio ${(got.fenced! / got.plain!).toFixed(3)}`);
        }
        if (bad > 0) notes.push(`${bad} requests failed (non-2xx, errors or timeouts); expected 0`);
        const [fenceRow] = (await pool.query('SELECT term FROM tenure_http_fences WHERE name = $1', [GROUP])).rows as { term: string }[];
        notes.push(`fence row after the run: ${GROUP} term ${fenceRow?.term ?? 'none'} (the bench leader's term ${lease.term})`);
        return {
          name,
          description,
          target: 'postgres',
          params: { rounds, seconds: SECONDS, connections: CONNECTIONS, pool: POOL, rows: ROWS },
          metrics: [
            metric('plain-rate', 'requests/s of the unfenced handler (samples: rounds)', rate.plain, undefined, 'ops/s'),
            metric('fenced-rate', 'requests/s through the middleware and the guard (samples: rounds)', rate.fenced, undefined, 'ops/s'),
            metric('plain-p50', 'p50 latency of a request to the unfenced handler (autocannon, per round)', p50.plain),
            metric('fenced-p50', 'p50 latency of a fenced request (autocannon, per round)', p50.fenced),
            metric('fenced/plain', 'fenced requests/s / plain requests/s, in the same round', ratios, { stat: 'p50', min: 0.9, label: '0.9x' }, 'x'),
          ],
          notes,
          durationMs: msBetween(started, nowNs()),
        };
      } finally {
        if (svc) {
          svc.child.stdin!.end();
          await svc.kill();
        }
        await store.close().catch(() => {});
        await pool.end().catch(() => {});
        await db.cleanup();
      }
    },
  };
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  const result = await fencedHttpBenchmark().run({ cycles: Number(process.argv[2] ?? 6), log: (line) => console.log(line) });
  for (const m of result.metrics) console.log(`${m.id}: p50 ${m.stats.p50.toFixed(3)} ${m.unit}${m.goal ? ` (goal ${m.goal.label}: ${m.pass ? 'met' : 'NOT met'})` : ''}`);
  for (const n of result.notes) console.log(`note: ${n}`);
}
