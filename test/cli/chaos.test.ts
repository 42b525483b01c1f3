/**
 * `tenure chaos` on the user's own store, as a user runs it (the built bin/tenure.js): short runs
 * on SQLite and on PostgreSQL (its own database, connection faults through the proxy) pass with
 * exit 0 and leave no row under their namespace while rows outside it stay untouched; a run with
 * a deliberate bug (nodes borrowing the holder's term) ends with exit 5 and a two-owners
 * violation, and cleans up too; SIGINT mid-run kills the nodes, deletes what the run wrote and
 * exits 130; hostile flags are one line and exit 2 with nothing created; credentials never show.
 * etcd and ZooKeeper run with connection faults; the Raft store (raft://) and Azure Blob (Azurite)
 * with node faults.
 */
import { existsSync, readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import pg from 'pg';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import type { Store } from '../../src/core/index.js';
import { openStore } from '../../src/open.js';
import { ensureBuilt } from '../chaos/dist.js';
import { openTestSqlite } from '../fixtures/sqlite-compat.js';
import { etcdInstalled, sharedEtcd } from '../stores/etcd-harness.js';
import { sharedZookeeper, zookeeperInstalled } from '../fixtures/zookeeper.js';
import { createPostgresDatabase } from '../stores/sql-servers.js';
import { ServeCluster } from '../stores/raft/serve-cluster.js';
import { AZURITE_KEY, sharedAzurite } from '../fixtures/azurite.js';
import type { TestDatabase } from '../stores/sql-servers.js';
import { cleanUp, lines, sandbox, start, tenure, waitUntil } from './helpers.js';
import type { Sandbox } from './helpers.js';

beforeAll(() => ensureBuilt(), 180_000);
afterEach(cleanUp);

interface Report {
  verdict: string;
  store: string;
  namespace: string;
  faults: { kind: string }[];
  accepted: number;
  violations: { rule: string; safety: boolean }[];
  cleanup: { purged: number; left: number; error: string | null };
  kept: string | null;
}

/** Rows in the SQLite store whose name starts with `prefix`, per table. */
function sqliteRows(db: string, prefix: string): number {
  const d = openTestSqlite(db, { readonly: true });
  try {
    let n = 0;
    for (const [table, column] of [['tenure_leases', 'name'], ['tenure_fences', 'name'], ['tenure_streams', 'stream']]) {
      n += Number((d.prepare(`SELECT count(*) AS n FROM ${table} WHERE substr(${column}, 1, length(?)) = ?`).get(prefix, prefix) as { n: number }).n);
    }
    return n;
  } finally {
    d.close();
  }
}

/** A lease and a stream entry outside any chaos namespace: the run must leave them alone. */
async function bystander(url: string, ttlMs = 600_000): Promise<void> {
  const store = await openStore(url);
  try {
    const got = await store.acquire('app/leader', 'app~1', ttlMs);
    if (!got.acquired) throw new Error('bystander lease not acquired');
    await store.appendFenced({ lease: 'app/leader', term: got.lease.term }, 'app/orders', 'order 1');
  } finally {
    await store.close();
  }
}

async function bystanderIntact(url: string): Promise<void> {
  const store = await openStore(url);
  try {
    expect((await store.read('app/leader'))?.owner).toBe('app~1');
    expect((await store.readStream('app/orders', { after: 0 })).map((e) => e.payload)).toEqual(['order 1']);
  } finally {
    await store.close();
  }
}

describe('tenure chaos on SQLite', () => {
  let box: Sandbox;
  beforeEach(() => {
    box = sandbox(); // removed after each test (cleanUp)
  });

  it('passes a short run with pause, kill and resign faults (exit 0), reports, and leaves nothing under its namespace', async () => {
    const url = `sqlite:${box.db}`;
    await bystander(url);
    const reportFile = join(box.dir, 'report.json');
    const r = await tenure(box, ['chaos', '--store', url, '--duration', '9s', '--nodes', '3', '--seed', '11', '--report', reportFile], { timeoutMs: 90_000 });
    expect(r.stderr).toBe('');
    expect(r.code, r.stdout).toBe(0);
    // Live progress while it ran: faults as they were injected, entries written, elapsed time.
    expect(r.stdout).toMatch(/\+\d+\.\ds fault 1: (pause|kill|resign) n\d/);
    expect(r.stdout).toMatch(/\+\d+\.\ds entries [1-9]\d*, faults \d+, leaders g0=/);
    expect(r.stdout).toMatch(/chaos PASS: sqlite:/);
    const report = JSON.parse(readFileSync(reportFile, 'utf8')) as Report;
    expect(report.verdict).toBe('pass');
    expect(report.namespace).toMatch(/^tenure-chaos-[0-9a-f]{8}\/$/);
    expect(report.faults.length).toBeGreaterThan(0);
    expect(report.accepted).toBeGreaterThan(0);
    expect(report.violations).toEqual([]);
    expect(report.cleanup).toMatchObject({ left: 0, error: null });
    expect(report.cleanup.purged).toBeGreaterThan(report.accepted);
    expect(report.kept).toBeNull();
    expect(sqliteRows(box.db, 'tenure-chaos-')).toBe(0);
    await bystanderIntact(url);
  }, 120_000);

  it('a run whose nodes write with borrowed terms ends with exit 5 (two-owners), and still cleans up', async () => {
    const url = `sqlite:${box.db}`;
    await bystander(url);
    const reportFile = join(box.dir, 'mutated.json');
    const r = await tenure(box, ['chaos', '--store', url, '--duration', '7s', '--nodes', '3', '--seed', '3', '--faults', 'pause', '--mutation', 'forge-token', '--report', reportFile], { timeoutMs: 90_000 });
    expect(r.code, r.stdout).toBe(5);
    expect(r.stdout).toMatch(/chaos UNSAFE/);
    expect(r.stdout).toMatch(/VIOLATION two-owners \(safety\)/);
    const report = JSON.parse(readFileSync(reportFile, 'utf8')) as Report;
    expect(report.verdict).toBe('unsafe');
    expect(report.violations.filter((v) => v.safety).map((v) => v.rule)).toContain('two-owners');
    expect(report.cleanup.left).toBe(0);
    expect(sqliteRows(box.db, 'tenure-chaos-')).toBe(0);
    expect(report.kept).not.toBeNull(); // the histories, for the post-mortem
    expect(existsSync(join(report.kept!, 'history'))).toBe(true);
    rmSync(report.kept!, { recursive: true, force: true });
    await bystanderIntact(url);
  }, 120_000);

  it('SIGINT mid-run: kills the nodes, deletes what the run wrote, exits 130', async () => {
    const url = `sqlite:${box.db}`;
    await bystander(url);
    const run = start(box, ['chaos', '--store', url, '--duration', '60s', '--nodes', '3', '--seed', '5']);
    await waitUntil('entries written', () => /entries [1-9]/.test(run.stdout), 30_000);
    run.signal('SIGINT');
    const exit = await Promise.race([run.exited, new Promise<null>((r) => setTimeout(() => r(null), 20_000))]);
    expect(exit?.code, run.stdout + run.stderr).toBe(130);
    expect(run.stderr).toMatch(/interrupted/);
    expect(run.stdout).toMatch(/cleanup: \d+ rows\/keys under tenure-chaos-[0-9a-f]{8}\/ deleted/);
    expect(sqliteRows(box.db, 'tenure-chaos-')).toBe(0);
    await bystanderIntact(url);
  }, 60_000);

  it('refuses hostile input with one line and exit 2, creating nothing', async () => {
    const db = join(box.dir, 'never.db');
    const url = `sqlite:${db}`;
    const cases: [string[], RegExp][] = [
      [['--nodes', '0'], /--nodes: must be in \[2, 32\], got 0/],
      [['--nodes=-3'], /--nodes: expected a whole number/],
      [['--nodes', '100000000000000'], /--nodes: must be in \[2, 32\]/],
      [['--duration', 'soon'], /--duration: expected a duration/],
      [['--duration', '2s'], /--duration: must be between 5500ms and 24h, got 2s/],
      [['--faults', 'pause,nuke'], /--faults: unknown fault 'nuke'/],
      [['--faults', 'cut'], /--faults: cut needs a store URL with host:port/],
      [['--prefix', '../etc'], /--prefix: expected/],
      [['--seed', 'x'], /--seed: expected a whole number/],
      [['--mutation', 'nope'], /--mutation: expected forge-token/],
      [['--report', join(box.dir, 'no', 'such', 'dir', 'r.json')], /--report: no directory/],
    ];
    for (const [args, message] of cases) {
      const r = await tenure(box, ['chaos', '--store', url, ...args]);
      expect(r.code, `${args.join(' ')}: ${r.stderr}`).toBe(2);
      expect(lines(r.stderr)).toHaveLength(1);
      expect(r.stderr).toMatch(message);
      expect(r.stdout).toBe('');
    }
    expect(existsSync(db)).toBe(false);
    for (const [args, message] of [
      [['--store', 'memory:'], /memory store lives in one process/],
      [['--store', 'postgres://app:hunter2@[nope'], /--store: /],
      [[], /--store: required/],
    ] as [string[], RegExp][]) {
      const r = await tenure(box, ['chaos', ...args], { env: { ...box.env, TENURE_STORE: '' } });
      expect(r.code).toBe(2);
      expect(lines(r.stderr)).toHaveLength(1);
      expect(r.stderr).toMatch(message);
      expect(r.stderr).not.toContain('hunter2');
    }
  }, 60_000);
});

describe('tenure chaos on PostgreSQL (its own database)', () => {
  let db: TestDatabase;
  let box: Sandbox;
  beforeAll(async () => {
    db = await createPostgresDatabase();
  });
  beforeEach(() => {
    box = sandbox();
  });
  afterAll(async () => {
    await db?.drop();
  });

  it('passes with connection faults through the proxy, never shows the password, and leaves no row under its namespace', async () => {
    // The test server trusts local connections, so any password is accepted: it is there to be hidden.
    const u = new URL(db.url);
    u.password = 'pw-Sup3rSecret';
    const url = u.toString();
    await bystander(url);
    const reportFile = join(box.dir, 'pg.json');
    const r = await tenure(box, ['chaos', '--store', url, '--duration', '10s', '--nodes', '3', '--seed', '2', '--report', reportFile], { timeoutMs: 120_000 });
    expect(r.code, r.stdout + r.stderr).toBe(0);
    expect(r.stdout).toMatch(/connection faults through a proxy per node/);
    const text = readFileSync(reportFile, 'utf8');
    for (const out of [r.stdout, r.stderr, text]) expect(out).not.toContain('Sup3rSecret');
    const report = JSON.parse(text) as Report;
    expect(report.verdict).toBe('pass');
    expect(report.store).toContain('***');
    expect(report.faults.length).toBeGreaterThan(0);
    expect(report.cleanup).toMatchObject({ left: 0, error: null });
    const client = new pg.Client({ connectionString: db.url });
    await client.connect();
    try {
      const n = async (sql: string): Promise<number> => Number((await client.query<{ n: string }>(sql, ['tenure-chaos-%'])).rows[0]!.n);
      expect(await n('SELECT count(*) AS n FROM tenure_leases WHERE name LIKE $1')).toBe(0);
      expect(await n('SELECT count(*) AS n FROM tenure_fences WHERE name LIKE $1')).toBe(0);
      expect(await n('SELECT count(*) AS n FROM tenure_streams WHERE stream LIKE $1')).toBe(0);
      expect(await n('SELECT count(*) AS n FROM tenure_stream_heads WHERE stream LIKE $1')).toBe(0);
    } finally {
      await client.end();
    }
    await bystanderIntact(url);
  }, 150_000);
});

describe('tenure chaos on Redis (its own key prefix)', () => {
  it('passes with connection faults and leaves no key under its namespace', async () => {
    const box = sandbox();
    const keyPrefix = `t25c-${Date.now().toString(36)}:`;
    const url = `redis://127.0.0.1:6379/?prefix=${keyPrefix}`;
    await bystander(url);
    const reportFile = join(box.dir, 'redis.json');
    const r = await tenure(box, ['chaos', '--store', url, '--duration', '8s', '--nodes', '3', '--seed', '4', '--report', reportFile], { timeoutMs: 90_000 });
    expect(r.code, r.stdout + r.stderr).toBe(0);
    const report = JSON.parse(readFileSync(reportFile, 'utf8')) as Report;
    expect(report).toMatchObject({ verdict: 'pass', cleanup: { left: 0, error: null } });
    const { Redis } = await import('ioredis');
    const redis = new Redis({ host: '127.0.0.1', port: 6379, lazyConnect: true });
    await redis.connect();
    try {
      const [, keys] = await redis.scan('0', 'MATCH', `${keyPrefix}*tenure-chaos-*`, 'COUNT', 100_000);
      expect(keys).toEqual([]);
      expect(await redis.zrangebylex(`${keyPrefix}names`, '[tenure-chaos-', '[tenure-chaos-\xff')).toEqual([]);
      await bystanderIntact(url);
      const all = await redis.keys(`${keyPrefix}*`);
      if (all.length > 0) await redis.del(...all);
    } finally {
      redis.disconnect();
    }
  }, 120_000);
});

/**
 * A 12 s run with connection faults on `url` (seed 2: faults land within the run): it passes,
 * injected a connection fault, cleaned up all it wrote, and left the store with no lease under
 * the chaos prefix and only `app/leader`.
 */
async function passesWithConnectionFaults(url: string, store: Store): Promise<void> {
  const box = sandbox();
  const reportFile = join(box.dir, 'report.json');
  const r = await tenure(box, ['chaos', '--store', url, '--duration', '12s', '--nodes', '3', '--seed', '2', '--report', reportFile], { timeoutMs: 100_000 });
  expect(r.code, r.stdout + r.stderr).toBe(0);
  const report = JSON.parse(readFileSync(reportFile, 'utf8')) as Report;
  expect(report).toMatchObject({ verdict: 'pass', cleanup: { left: 0, error: null } });
  expect(report.cleanup.purged).toBeGreaterThan(report.accepted);
  expect(report.faults.map((f) => f.kind), 'faults injected').toContainEqual(expect.stringMatching(/^(cut|drop|blackhole|delay|one-way)$/));
  expect(await store.list('tenure-chaos-')).toEqual([]);
  expect((await store.list()).map((l) => l.name)).toEqual(['app/leader']);
}

describe('tenure chaos on etcd (its own key namespace)', () => {
  it.skipIf(!etcdInstalled())('passes with connection faults through the proxy and leaves no key under its namespace', async () => {
    const etcd = await sharedEtcd();
    const url = `${etcd.url}?prefix=t25e-${Date.now().toString(36)}/`;
    await bystander(url);
    const store = await openStore(url);
    try {
      await passesWithConnectionFaults(url, store);
    } finally {
      await store.close();
    }
    await bystanderIntact(url);
  }, 120_000);
});

describe('tenure chaos on ZooKeeper (its own chroot)', () => {
  it.skipIf(!zookeeperInstalled())('passes with connection faults through the proxy and leaves no node under its namespace', async () => {
    const zk = await sharedZookeeper();
    const url = `${zk.url}/t25z-${Date.now().toString(36)}`;
    // A ZooKeeper lease lives as long as its session: the bystander keeps its store open throughout.
    const app = await openStore(url);
    try {
      const got = await app.acquire('app/leader', 'app~1', 60_000);
      if (!got.acquired) throw new Error('bystander lease not acquired');
      await app.appendFenced({ lease: 'app/leader', term: got.lease.term }, 'app/orders', 'order 1');
      await passesWithConnectionFaults(url, app);
      expect((await app.read('app/leader'))?.owner).toBe('app~1');
      expect((await app.readStream('app/orders', { after: 0 })).map((e) => e.payload)).toEqual(['order 1']);
    } finally {
      await app.close();
    }
  }, 120_000);
});

/**
 * A run with node faults only (pause, kill, resign: the proxy takes one endpoint, and these
 * stores' URLs name several or sign each request), on a store whose purge is newer than the
 * others': it passes, cleans up all it wrote, and leaves the bystander alone.
 */
async function passesWithNodeFaults(url: string, extra: readonly string[], store: Store, purgeCountsEntries: boolean): Promise<void> {
  const box = sandbox();
  const reportFile = join(box.dir, 'report.json');
  const r = await tenure(box, ['chaos', '--store', url, '--nodes', '3', '--seed', '11', '--faults', 'pause,kill,resign', '--report', reportFile, ...extra], { timeoutMs: 150_000 });
  expect(r.code, r.stdout + r.stderr).toBe(0);
  for (const secret of [AZURITE_KEY, encodeURIComponent(AZURITE_KEY)]) expect(r.stdout + r.stderr).not.toContain(secret);
  const report = JSON.parse(readFileSync(reportFile, 'utf8')) as Report;
  expect(report).toMatchObject({ verdict: 'pass', violations: [], cleanup: { left: 0, error: null } });
  expect(report.accepted).toBeGreaterThan(0);
  // The Raft store counts each entry it deleted; Azure counts blobs (a lease's entries are one journal blob).
  if (purgeCountsEntries) expect(report.cleanup.purged).toBeGreaterThan(report.accepted);
  else expect(report.cleanup.purged).toBeGreaterThan(0);
  expect(await store.list('tenure-chaos-')).toEqual([]);
  expect((await store.list()).map((l) => l.name)).toEqual(['app/leader']);
}

describe('tenure chaos on the Raft store (raft://, 3 tenure raft serve processes)', () => {
  it('passes with node faults, cleans up with one purge command, and leaves the bystander alone', async () => {
    const cluster = await ServeCluster.start();
    try {
      const url = cluster.url();
      await bystander(url);
      const store = await openStore(url);
      try {
        await passesWithNodeFaults(url, ['--duration', '10s'], store, true);
      } finally {
        await store.close();
      }
      await bystanderIntact(url);
    } finally {
      await cluster.close();
    }
  }, 180_000);
});

describe('tenure chaos on Azure Blob (Azurite, its own container)', () => {
  it('passes with node faults at its shortest lease (15 s), cleans up its blobs, and leaves the bystander alone', async () => {
    const azurite = await sharedAzurite();
    const url = azurite.url(`chaos-${Date.now().toString(36)}`);
    await bystander(url, 60_000);
    const store = await openStore(url);
    try {
      await passesWithNodeFaults(url, ['--ttl', '15s', '--duration', '24s'], store, false);
    } finally {
      await store.close();
    }
    await bystanderIntact(url);
  }, 180_000);
});
