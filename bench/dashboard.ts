/**
 * Issue 25: the dashboard with 1,000 groups on PostgreSQL, in a real headless Chromium.
 *
 *   npm run build && npx tsx bench/dashboard.ts [--groups N] [--samples N] [--window S] [--warmup S]
 *
 * 1,000 live leases (TTL 30 min, so nothing renews during the run) in a fresh database, then two
 * dashboards on it, one after the other:
 * - `push`: the real `tenure dashboard` process (its defaults: a 2 s poll, changes of holder
 *   from PostgreSQL's LISTEN/NOTIFY push);
 * - `poll`: dashboardHandler in this process with push off and a 1 s poll (what a store without
 *   push gets, MySQL say).
 * For each:
 * - page load: `page.goto` until all N rows are in the table (a new page each sample);
 * - change to shown: the bench moves one group to a new owner (release, then acquire: a new
 *   term); from just before the acquire is sent to the page showing the new owner (the page's own
 *   Date.now() when a requestAnimationFrame poll sees it; same host, same clock);
 * - the dashboard's own store load: transactions on the bench database (pg_stat_database
 *   xact_commit + xact_rollback, read from another database) over a quiet window with one page
 *   open, divided by the window; nothing else touches that database meanwhile. For `poll` also
 *   the store calls counted in the dashboard itself.
 * Goals: page load <= 1 s, change shown <= 1 s, <= 1 query/s per 1,000 groups.
 * Writes bench/results/dashboard.json and prints a table.
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:http';
import type { Server } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { chromium } from 'playwright-core';
import type { BrowserContext } from 'playwright-core';
import { dashboardHandler, openStore } from '../src/index.js';
import type { DashboardHandler, TenureStore } from '../src/index.js';
import { createPostgresDatabase, PG_ADMIN_URL } from '../test/stores/sql-servers.js';

const args = process.argv.slice(2);
const flag = (name: string, fallback: number): number => {
  const at = args.indexOf(`--${name}`);
  return at >= 0 ? Number(args[at + 1]) : fallback;
};
const GROUPS = flag('groups', 1000);
const SAMPLES = flag('samples', 10);
const WINDOW_S = flag('window', 60);
const WARMUP_S = flag('warmup', 30);
const TTL_MS = 30 * 60_000;
const BIN = fileURLToPath(new URL('../bin/tenure.js', import.meta.url));
const OUT = fileURLToPath(new URL('./results/dashboard.json', import.meta.url));

const name = (i: number): string => `group-${String(i).padStart(4, '0')}`;

interface Stats {
  readonly n: number;
  readonly p50: number;
  readonly p90: number;
  readonly max: number;
}

function stats(xs: number[]): Stats {
  const s = [...xs].sort((a, b) => a - b);
  const at = (q: number): number => s[Math.min(s.length - 1, Math.floor(q * s.length))]!;
  return { n: s.length, p50: round(at(0.5)), p90: round(at(0.9)), max: round(s[s.length - 1]!) };
}

function round(x: number): number {
  return Math.round(x * 10) / 10;
}

async function xacts(admin: pg.Client, db: string): Promise<number> {
  await admin.query('SELECT pg_stat_clear_snapshot()');
  const r = await admin.query<{ n: string }>('SELECT xact_commit + xact_rollback AS n FROM pg_stat_database WHERE datname = $1', [db]);
  return Number(r.rows[0]!.n);
}

function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}

async function measure(label: string, url: string, context: BrowserContext, store: TenureStore, admin: pg.Client, dbName: string, owners: Map<string, { owner: string; term: number }>, handler?: DashboardHandler) {
  const loads: number[] = [];
  for (let i = 0; i < SAMPLES; i++) {
    const page = await context.newPage();
    const t0 = Date.now();
    await page.goto(url);
    await page.waitForFunction(`document.querySelectorAll('[data-group]').length === ${GROUPS}`, undefined, { timeout: 30_000, polling: 'raf' });
    loads.push(Date.now() - t0);
    await page.close();
  }
  const page = await context.newPage();
  await page.goto(url);
  await page.waitForFunction(`document.querySelectorAll('[data-group]').length === ${GROUPS}`, undefined, { timeout: 30_000, polling: 'raf' });
  const changes: number[] = [];
  for (let i = 0; i < SAMPLES; i++) {
    const g = name(Math.floor(Math.random() * GROUPS));
    const held = owners.get(g)!;
    const next = `${label}-${i}~bench`;
    await store.release(g, held.owner, held.term);
    await sleep(300);
    const shown = page.waitForFunction(
      `(() => { const c = document.querySelector('[data-group="${g}"] .owner'); return c && c.textContent === '${next}' ? Date.now() : false; })()`,
      undefined,
      { timeout: 30_000, polling: 'raf' },
    );
    const t0 = Date.now();
    const r = await store.acquire(g, next, TTL_MS);
    if (!r.acquired) throw new Error(`${g}: not acquired`);
    owners.set(g, { owner: next, term: r.lease.term });
    const at = (await (await shown).jsonValue()) as number;
    changes.push(at - t0);
    await sleep(200);
  }
  // Quiet window: the page stays open, nothing changes.
  await sleep(3000);
  const callsBefore = handler ? { ...handler.source.calls } : null;
  const before = await xacts(admin, dbName);
  const w0 = Date.now();
  await sleep(WINDOW_S * 1000);
  const after = await xacts(admin, dbName);
  const seconds = (Date.now() - w0) / 1000;
  const callsAfter = handler ? { ...handler.source.calls } : null;
  await page.close();
  const calls = callsBefore && callsAfter ? Object.values(callsAfter).reduce((a, b) => a + b, 0) - Object.values(callsBefore).reduce((a, b) => a + b, 0) : null;
  return {
    pageLoadMs: stats(loads),
    changeToShownMs: stats(changes),
    queriesPerSecond: round((after - before) / seconds),
    queriesPerSecondPer1000Groups: round(((after - before) / seconds) * (1000 / GROUPS)),
    storeCallsPerSecond: calls === null ? null : round(calls / seconds),
    windowS: round(seconds),
  };
}

async function main(): Promise<void> {
  const db = await createPostgresDatabase();
  const store = await openStore(db.url);
  const admin = new pg.Client({ connectionString: PG_ADMIN_URL });
  await admin.connect();
  const dir = mkdtempSync(join(tmpdir(), 'tenure-bench-chromium-'));
  let context: BrowserContext | null = null;
  let child: ReturnType<typeof spawn> | null = null;
  let server: Server | null = null;
  let handler: DashboardHandler | null = null;
  try {
    const owners = new Map<string, { owner: string; term: number }>();
    for (let i = 0; i < GROUPS; i += 50) {
      await Promise.all(
        Array.from({ length: Math.min(50, GROUPS - i) }, async (_, k) => {
          const g = name(i + k);
          const r = await store.acquire(g, `node-${(i + k) % 7}~bench`, TTL_MS, { url: `http://10.0.0.${(i + k) % 7}:8080`, version: '1.4.2' });
          owners.set(g, { owner: r.lease.owner, term: r.lease.term });
        }),
      );
    }
    context = await chromium.launchPersistentContext(dir, {
      executablePath: '/usr/bin/chromium',
      headless: true,
      // The page's CSP forbids eval; the bench's probes (waitForFunction on a string) need it.
      bypassCSP: true,
      args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync', '--no-proxy-server'],
    });

    // 1. The real `tenure dashboard` process, its defaults (push).
    const proc = spawn(process.execPath, [BIN, 'dashboard', '--store', db.url, '--listen', '127.0.0.1:0'], { stdio: ['ignore', 'pipe', 'pipe'] });
    child = proc;
    let out = '';
    proc.stdout.on('data', (d: Buffer) => (out += d.toString()));
    proc.stderr.on('data', (d: Buffer) => (out += d.toString()));
    const started = Date.now();
    while (!/serving (http:\/\/\S+)/.test(out)) {
      if (Date.now() - started > 30_000 || proc.exitCode !== null) throw new Error(`dashboard did not start: ${out}`);
      await sleep(50);
    }
    const pushUrl = /serving (http:\/\/\S+)/.exec(out)![1]!;
    // Warm-up: its first poll, then PostgreSQL's LISTEN connection reads each watched lease once
    // when it connects (1,000 reads, one at a time; pushes queue behind them meanwhile).
    await sleep(WARMUP_S * 1000);
    const push = await measure('push', pushUrl, context, store, admin, db.name, owners);
    proc.kill('SIGTERM');
    await new Promise((r) => proc.once('exit', r));
    child = null;

    // 2. dashboardHandler in this process, push off, a 1 s poll.
    const pollStore = await openStore(db.url);
    handler = dashboardHandler({ store: pollStore, storeUrl: db.url, push: false, pollMs: 1000 });
    const h = handler;
    server = createServer((req, res) => h(req, res));
    await new Promise<void>((r) => server!.listen(0, '127.0.0.1', () => r()));
    const address = server.address();
    const pollUrl = `http://127.0.0.1:${typeof address === 'object' && address ? address.port : 0}/`;
    await sleep(2000);
    const poll = await measure('poll', pollUrl, context, store, admin, db.name, owners, handler);
    await handler.close();
    handler = null;
    await pollStore.close();

    const result = { benchmark: 'dashboard', groups: GROUPS, samples: SAMPLES, at: new Date().toISOString(), push, poll, goals: { pageLoadMs: 1000, changeToShownMs: 1000, queriesPerSecondPer1000Groups: 1 } };
    writeFileSync(OUT, `${JSON.stringify(result, null, 2)}\n`);
    const row = (l: string, m: typeof push): string =>
      `| ${l} | ${m.pageLoadMs.p50} / ${m.pageLoadMs.max} | ${m.changeToShownMs.p50} / ${m.changeToShownMs.max} | ${m.queriesPerSecond} | ${m.storeCallsPerSecond ?? '-'} |`;
    process.stdout.write(
      [
        `dashboard, ${GROUPS} groups on PostgreSQL, ${SAMPLES} samples, ${push.windowS} s quiet window`,
        '| dashboard | page load ms p50 / max | change shown ms p50 / max | queries/s (pg_stat_database) | store calls/s |',
        '|---|---|---|---|---|',
        row('tenure dashboard (push, 2 s poll)', push),
        row('handler, push off, 1 s poll', poll),
        `goals: page load <= 1000 ms, change shown <= 1000 ms, <= 1 query/s per 1,000 groups; written to ${OUT}`,
        '',
      ].join('\n'),
    );
  } finally {
    child?.kill('SIGKILL');
    await handler?.close();
    server?.close();
    await context?.close();
    rmSync(dir, { recursive: true, force: true });
    await store.close();
    await admin.end();
    await db.drop();
  }
}

await main();
