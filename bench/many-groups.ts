/**
 * Many groups on one node, and partition rebalance (issue 26). Not a timed test: a script.
 *
 *   npx tsx bench/many-groups.ts [--groups 10000] [--ttl 10000] [--stores postgres,sqlite] [--electors 10000] [--shards 1000]
 *   (--electors 0 / --shards 0 / --stores none skip those parts; --stores also takes mysql, redis)
 *
 *  - groups: one GroupSet leading N groups at the TTL, against N separate LeaderElectors on the
 *    same store. Counted at the driver over whole renew intervals once every group is led:
 *    PostgreSQL statements sent (every `pg` Client.query: pool queries and transactions alike),
 *    SQLite transactions (each `BEGIN IMMEDIATE` the store runs); MySQL statements (mysql2 query and
 *    execute); Redis commands (ioredis sendCommand; a script is one);
 *    and the node's CPU time per interval (process.cpuUsage, user + system).
 *  - rebalance: 1,000 shards over 4 Partitions nodes (one process, PostgreSQL); a fifth joins;
 *    measured from its join (start() resolved: it is a member) to balance as the store shows it
 *    (every shard held by a member, most − fewest ≤ 1).
 * Writes bench/results/many-groups-<timestamp>.json and prints a table.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { GroupSet, LeaderElector, Partitions, nodeIdOf, openStore } from '../src/index.js';
import type { Store } from '../src/index.js';
import { PostgresStore } from '../src/stores/postgres/index.js';
import { SqliteStore } from '../src/stores/sqlite/index.js';
import { repoRoot } from '../test/fixtures/harness.js';
import { createMysqlDatabase, createPostgresDatabase } from '../test/stores/sql-servers.js';
import { freshRedis } from './lib/servers.js';

const args = process.argv.slice(2);
function flag(name: string, fallback: string): string {
  const i = args.indexOf(`--${name}`);
  return i >= 0 && args[i + 1] !== undefined ? args[i + 1]! : fallback;
}
const GROUPS = Number(flag('groups', '10000'));
const ELECTORS = Number(flag('electors', String(GROUPS)));
const TTL_MS = Number(flag('ttl', '10000'));
const STORES = flag('stores', 'postgres,sqlite').split(',').filter((k) => k !== '' && k !== 'none');
const SHARDS = Number(flag('shards', '1000'));
const INTERVALS = 3;
const ELECTOR_WAIT_MS = Number(flag('elector-wait', '240000'));

const require = createRequire(import.meta.url);
const counters = { pgQueries: 0, sqliteTx: 0, sqliteStatements: 0, mysqlStatements: 0, redisCommands: 0 };
// Count every statement the pg driver sends (pool.query goes through Client.query too).
const pg = require('pg') as { Client: { prototype: { query: (...a: unknown[]) => unknown } } };
const originalQuery = pg.Client.prototype.query;
pg.Client.prototype.query = function (this: unknown, ...a: unknown[]): unknown {
  counters.pgQueries++;
  return originalQuery.apply(this, a);
};

let mysqlPatched = false;
/** Count every statement mysql2 sends (query and execute, pool connections included). */
function countMysql(): void {
  if (mysqlPatched) return;
  mysqlPatched = true;
  const core = require('mysql2') as { Connection: { prototype: Record<'query' | 'execute', (...a: unknown[]) => unknown> } };
  for (const m of ['query', 'execute'] as const) {
    const f = core.Connection.prototype[m];
    core.Connection.prototype[m] = function (this: unknown, ...a: unknown[]): unknown {
      counters.mysqlStatements++;
      return f.apply(this, a);
    };
  }
}

let redisPatched = false;
/** Count every command ioredis sends (a script call is one). */
function countRedis(): void {
  if (redisPatched) return;
  redisPatched = true;
  const Redis = require('ioredis') as { prototype: { sendCommand: (...a: unknown[]) => unknown } } & { default?: { prototype: { sendCommand: (...a: unknown[]) => unknown } } };
  const proto = (Redis.default ?? Redis).prototype;
  const f = proto.sendCommand;
  proto.sendCommand = function (this: unknown, ...a: unknown[]): unknown {
    counters.redisCommands++;
    return f.apply(this, a);
  };
}

function countSqlite(store: SqliteStore): void {
  const db = (store as unknown as { db: { exec: (sql: string) => void; prepare: (sql: string) => Record<string, unknown> } }).db;
  const exec = db.exec.bind(db);
  db.exec = (sql: string) => {
    if (/^BEGIN/i.test(sql)) counters.sqliteTx++;
    exec(sql);
  };
  // Statements are prepared once and cached by the store: wrap what prepare returns.
  const prepare = db.prepare.bind(db);
  db.prepare = (sql: string) => {
    const st = prepare(sql);
    for (const m of ['run', 'get', 'all'] as const) {
      const f = st[m] as (...x: unknown[]) => unknown;
      st[m] = (...x: unknown[]) => {
        counters.sqliteStatements++;
        return f.apply(st, x);
      };
    }
    return st;
  };
}

interface Opened {
  store: Store;
  roundTrips: () => number;
  unit: string;
  cleanup: () => Promise<void>;
}

async function open(kind: string): Promise<Opened> {
  if (kind === 'postgres') {
    const db = await createPostgresDatabase();
    const store = new PostgresStore({ url: db.url, poolConfig: { max: 10 } });
    await store.migrate();
    return { store, roundTrips: () => counters.pgQueries, unit: 'statements sent by pg', cleanup: async () => (await store.close(), await db.drop()) };
  }
  if (kind === 'mysql') {
    countMysql();
    const db = await createMysqlDatabase();
    const store = await openStore(db.url);
    await store.migrate();
    return { store, roundTrips: () => counters.mysqlStatements, unit: 'statements sent by mysql2', cleanup: async () => (await store.close(), await db.drop()) };
  }
  if (kind === 'redis') {
    countRedis();
    const r = await freshRedis();
    const store = await openStore(r.storeArg);
    return { store, roundTrips: () => counters.redisCommands, unit: 'commands sent by ioredis', cleanup: async () => (await store.close(), await r.cleanup()) };
  }
  const dir = mkdtempSync(join(tmpdir(), 'tenure-many-'));
  const store = new SqliteStore({ path: join(dir, 'tenure.db') });
  await store.migrate();
  countSqlite(store);
  return { store, roundTrips: () => counters.sqliteTx, unit: 'SQLite transactions', cleanup: async () => (await store.close(), rmSync(dir, { recursive: true, force: true })) };
}

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));
async function until(what: string, check: () => boolean | Promise<boolean>, timeoutMs: number): Promise<void> {
  const start = performance.now();
  while (!(await check())) {
    if (performance.now() - start > timeoutMs) throw new Error(`timed out waiting for ${what}`);
    await sleep(50);
  }
}

/** Round trips and CPU over INTERVALS renew intervals, per interval. */
async function measure(o: Opened, renewIntervalMs: number): Promise<{ roundTripsPerInterval: number; cpuMsPerInterval: number }> {
  const rt0 = o.roundTrips();
  const cpu0 = process.cpuUsage();
  await sleep(renewIntervalMs * INTERVALS);
  const cpu = process.cpuUsage(cpu0);
  return { roundTripsPerInterval: (o.roundTrips() - rt0) / INTERVALS, cpuMsPerInterval: (cpu.user + cpu.system) / 1000 / INTERVALS };
}

const results: Record<string, unknown>[] = [];

for (const kind of STORES) {
  // One GroupSet with GROUPS groups.
  {
    const o = await open(kind);
    const names = Array.from({ length: GROUPS }, (_, i) => `g/${i}`);
    let gained = 0;
    const set = new GroupSet({ store: o.store, id: 'bench', ttlMs: TTL_MS, groups: names, onGained: () => void gained++ });
    const rounds: number[] = [];
    set.leases.on('renewed', ({ latencyMs }) => rounds.push(latencyMs));
    const t0 = performance.now();
    set.start();
    await until('every group led', () => gained === GROUPS, 300_000);
    const gainAllMs = performance.now() - t0;
    await sleep(set.timing.renewIntervalMs / 2); // out of phase with the start-up acquires
    const r0 = rounds.length;
    const m = await measure(o, set.timing.renewIntervalMs);
    const lat = rounds.slice(r0).sort((a, b) => a - b);
    results.push({ store: kind, scenario: `GroupSet, ${GROUPS} groups`, ttlMs: TTL_MS, renewIntervalMs: set.timing.renewIntervalMs, gainAllMs: Math.round(gainAllMs), ...round(m), renewRounds: rounds.length - r0, renewRoundMsP50: round1(lat[Math.floor(lat.length / 2)] ?? NaN), held: set.held.length, unit: o.unit });
    console.log(JSON.stringify(results.at(-1)));
    await set.stop();
    await o.cleanup();
  }
  // ELECTORS separate LeaderElectors.
  if (ELECTORS > 0) {
    const o = await open(kind);
    const electors = Array.from({ length: ELECTORS }, (_, i) => new LeaderElector({ store: o.store, group: `e/${i}`, id: 'bench', ttlMs: TTL_MS }));
    const t0 = performance.now();
    for (const e of electors) void e.start();
    // On a loaded machine N separate renewals may never all be on time at once: measure after
    // ELECTOR_WAIT_MS anyway, and report how many led then.
    let allLed = true;
    await until('every elector leading', () => electors.every((e) => e.isLeader), ELECTOR_WAIT_MS).catch(() => (allLed = false));
    const gainAllMs = allLed ? performance.now() - t0 : null;
    const renewIntervalMs = Math.floor(TTL_MS / 3);
    await sleep(renewIntervalMs / 2);
    const m = await measure(o, renewIntervalMs);
    const deposed = electors.reduce((n, e) => n + (e.isLeader ? 0 : 1), 0);
    results.push({ store: kind, scenario: `${ELECTORS} LeaderElectors`, ttlMs: TTL_MS, renewIntervalMs, gainAllMs: gainAllMs === null ? `not all within ${ELECTOR_WAIT_MS} ms` : Math.round(gainAllMs), ...round(m), leading: ELECTORS - deposed, unit: o.unit });
    console.log(JSON.stringify(results.at(-1)));
    await Promise.allSettled(electors.map((e) => e.stop()));
    await o.cleanup();
  }
}

// Rebalance: SHARDS shards, 4 nodes, a fifth joins.
for (const ttlMs of SHARDS > 0 ? [TTL_MS, 2000] : []) {
  const o = await open('postgres');
  const nodes: Partitions[] = [];
  const join5 = (id: string): Partitions => {
    const p = new Partitions({ store: o.store, id, shards: SHARDS, ttlMs, name: 'bench' });
    nodes.push(p);
    return p;
  };
  const balanced = async (k: number): Promise<boolean> => {
    const live = await o.store.list('bench/');
    const members = live.filter((l) => l.name.startsWith('bench/member/')).length;
    const counts = new Map<string, number>();
    let held = 0;
    for (const l of live) {
      if (!l.name.startsWith('bench/shard/')) continue;
      held++;
      counts.set(nodeIdOf(l.owner), (counts.get(nodeIdOf(l.owner)) ?? 0) + 1);
    }
    const c = [...counts.values()];
    return members === k && held === SHARDS && c.length === k && Math.max(...c) - Math.min(...c) <= 1;
  };
  const t0 = performance.now();
  await Promise.all(['a', 'b', 'c', 'd'].map((id) => join5(id).start()));
  await until('4 nodes balanced', () => balanced(4), 120_000);
  const startMs = performance.now() - t0;
  const fifth = join5('e');
  await fifth.start();
  const t1 = performance.now();
  await until('5 nodes balanced', () => balanced(5), 120_000);
  const rebalanceMs = performance.now() - t1;
  results.push({ store: 'postgres', scenario: `rebalance ${SHARDS} shards, 4 -> 5 nodes`, ttlMs, reconcileMs: Math.max(10, Math.floor(ttlMs / 10)), startMs: Math.round(startMs), rebalanceMs: Math.round(rebalanceMs), fifthHolds: fifth.held.length });
  console.log(JSON.stringify(results.at(-1)));
  await Promise.all(nodes.map((n) => n.stop()));
  await o.cleanup();
}

function round(m: { roundTripsPerInterval: number; cpuMsPerInterval: number }): { roundTripsPerInterval: number; cpuMsPerInterval: number } {
  return { roundTripsPerInterval: round1(m.roundTripsPerInterval), cpuMsPerInterval: round1(m.cpuMsPerInterval) };
}
function round1(n: number): number {
  return Math.round(n * 10) / 10;
}

const stamp = new Date().toISOString().replace(/[:.]/g, '-');
const file = join(repoRoot(), 'bench', 'results', `many-groups-${stamp}.json`);
writeFileSync(file, `${JSON.stringify({ command: `tsx bench/many-groups.ts ${args.join(' ')}`.trim(), node: process.version, results }, null, 2)}\n`);
console.table(results);
console.log(`written ${file}`);
