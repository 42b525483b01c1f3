/**
 * The dedicated epoch store on Redis (INCR) and a private etcd (a key's revision), and withEpoch
 * on real electors over PostgreSQL: each leadership bumps the epoch before its work, writes into
 * the database carry the epoch, the previous leader's epoch is refused, and a refused epoch
 * deposes the leader that holds it.
 */
import { randomBytes } from 'node:crypto';
import { Etcd3 } from 'etcd3';
import { Redis } from 'ioredis';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { InvalidArgumentError, StaleTermError, StoreDataError } from '../../src/core/index.js';
import { LeaderElector } from '../../src/election/index.js';
import { createEpochStore, currentToken, fencedUpdate, postgresDialect, withEpoch } from '../../src/fencing/index.js';
import type { EpochContext, EpochStore, FencingToken } from '../../src/fencing/index.js';
import { PostgresStore } from '../../src/stores/postgres/index.js';
import { etcdInstalled, sharedEtcd } from '../stores/etcd-harness.js';
import { createPostgresDatabase } from '../stores/sql-servers.js';

const fast = { ttlMs: 2000, renewIntervalMs: 300, retryMs: 100 };

/** The contract every epoch store keeps: from 1, +1 per bump, no repeats under concurrency. */
async function contract(epochs: EpochStore, group: string, step: 'one' | 'increasing'): Promise<void> {
  expect(await epochs.current(group)).toBe(0);
  const first = await epochs.bump(group);
  expect(first).toBeGreaterThanOrEqual(1);
  expect(await epochs.current(group)).toBe(first);
  const many = await Promise.all(Array.from({ length: 40 }, () => epochs.bump(group)));
  expect(new Set(many).size).toBe(40);
  expect(Math.min(...many)).toBeGreaterThan(first);
  expect(await epochs.current(group)).toBe(Math.max(...many));
  if (step === 'one') expect(Math.max(...many)).toBe(first + 40);
  expect(epochs.token(group, 5)).toEqual({ lease: `epoch:${group}`, term: 5 });
  for (const bad of ['', 'a\u0000b', 'x'.repeat(195), 42, null]) {
    await expect(epochs.bump(bad as string)).rejects.toBeInstanceOf(InvalidArgumentError);
    await expect(epochs.current(bad as string)).rejects.toBeInstanceOf(InvalidArgumentError);
  }
}

describe('epoch store: Redis INCR', () => {
  const redis = new Redis({ host: '127.0.0.1', port: 6379, lazyConnect: true, maxRetriesPerRequest: 1 });
  const prefix = `tenure-test-${randomBytes(4).toString('hex')}:`;
  afterAll(async () => {
    const keys = await redis.keys(`${prefix}*`);
    if (keys.length > 0) await redis.del(...keys);
    redis.disconnect();
  });

  it('bumps atomically, one by one; concurrent bumps never repeat; bad groups write nothing', async () => {
    const epochs = createEpochStore({ redis, prefix });
    expect(epochs.kind).toBe('redis');
    await contract(epochs, 'billing', 'one');
    expect(await redis.get(`${prefix}epoch:billing`)).toBe('41');
    expect((await redis.keys(`${prefix}*`)).sort()).toEqual([`${prefix}epoch:billing`]);
  });

  it('a value that is not an epoch is a StoreDataError, not a number', async () => {
    const epochs = createEpochStore({ redis, prefix });
    await redis.set(`${prefix}epoch:tampered`, '9007199254740993');
    await expect(epochs.current('tampered')).rejects.toBeInstanceOf(StoreDataError);
    await expect(epochs.bump('tampered')).rejects.toBeInstanceOf(StoreDataError);
    await redis.set(`${prefix}epoch:word`, 'abc');
    await expect(epochs.current('word')).rejects.toBeInstanceOf(StoreDataError);
    expect(() => createEpochStore({ redis: {} as Redis })).toThrow(InvalidArgumentError);
    expect(() => createEpochStore({ redis, prefix: 'a\u0000' })).toThrow(/^prefix: /);
  });
});

describe.skipIf(!etcdInstalled())('epoch store: etcd revision', () => {
  let etcd: Etcd3;
  beforeAll(async () => {
    const cluster = await sharedEtcd();
    etcd = new Etcd3({ hosts: cluster.hosts.map((h) => `http://${h}`) });
  });
  afterAll(() => etcd?.close());

  it('bumps to the put revision: increasing, never repeated, also across a delete', async () => {
    const prefix = `t-${randomBytes(4).toString('hex')}/`;
    const epochs = createEpochStore({ etcd, prefix });
    expect(epochs.kind).toBe('etcd');
    await contract(epochs, 'billing', 'increasing');
    const before = await epochs.current('billing');
    await etcd.delete().key(`${prefix}epoch:billing`).exec();
    expect(await epochs.current('billing')).toBe(0);
    expect(await epochs.bump('billing')).toBeGreaterThan(before);
  });
});

describe('withEpoch: an elector whose leaderships carry an epoch (PostgreSQL leases and rows)', () => {
  let pool: pg.Pool;
  let drop: () => Promise<void>;
  let store: PostgresStore;
  let epochs: EpochStore;
  beforeAll(async () => {
    const db = await createPostgresDatabase();
    drop = db.drop;
    pool = new pg.Pool({ connectionString: db.url, max: 6 });
    pool.on('error', () => {});
    store = new PostgresStore({ pool });
    epochs = createEpochStore({ dialect: postgresDialect, db: pool });
    await pool.query('CREATE TABLE jobs (id int PRIMARY KEY, state text, last_fence_token bigint, last_fence_lease text)');
    await pool.query("INSERT INTO jobs (id, state) VALUES (1, 'new')");
  });
  afterAll(async () => {
    await store?.close();
    await pool?.end();
    await drop?.();
  });
  const write = (token: FencingToken, state: string) =>
    fencedUpdate(postgresDialect, pool, token, { table: 'jobs', set: { state }, where: { id: 1 }, leaseTable: 'tenure_epochs' });
  const row = async () => (await pool.query('SELECT state, last_fence_token::int AS t, last_fence_lease AS l FROM jobs')).rows[0] as { state: string; t: number; l: string };

  /** Start an elector under withEpoch; resolves with its first leadership's context. */
  function lead(id: string, work?: (ctx: EpochContext) => Promise<void>): { elector: LeaderElector; elected: Promise<EpochContext>; seen: (FencingToken | undefined)[] } {
    const elector = new LeaderElector({ store, group: 'jobs', id, ...fast });
    const seen: (FencingToken | undefined)[] = [];
    const elected = new Promise<EpochContext>((resolve) => {
      void withEpoch(elector, epochs).runWhileLeader(async (ctx) => {
        seen.push(currentToken());
        resolve(ctx);
        if (work) await work(ctx);
        else await new Promise((r) => ctx.signal.addEventListener('abort', r, { once: true }));
      });
    });
    return { elector, elected, seen };
  }

  it('bumps the epoch on each takeover before the work runs; the old leader epoch is refused', async () => {
    const a = lead('a');
    const ctxA = await a.elected;
    expect(ctxA.epoch).toBe(1);
    expect(ctxA.token).toEqual({ lease: 'epoch:jobs', term: 1 });
    expect(a.seen).toEqual([ctxA.token]); // the work's fencing context is the epoch's
    expect(await epochs.current('jobs')).toBe(1);
    expect(await write(ctxA.token, 'by a')).toEqual({ updated: 1 });

    await a.elector.stop(); // hands over
    const b = lead('b');
    const ctxB = await b.elected;
    expect(ctxB.epoch).toBe(2);
    expect(ctxB.term).toBeGreaterThan(ctxA.term);
    expect(await write(ctxB.token, 'by b')).toEqual({ updated: 1 });
    // A's late write, with the epoch it held: refused, nothing written.
    await expect(write(ctxA.token, 'late a')).rejects.toBeInstanceOf(StaleTermError);
    expect(await row()).toEqual({ state: 'by b', t: 2, l: 'epoch:jobs' });
    await b.elector.stop();
  });

  it('a refusal of the leader epoch aborts its work and deposes it at once', async () => {
    let refused: unknown;
    let abortedAfter: boolean | undefined;
    let workDone!: () => void;
    const finished = new Promise<void>((r) => (workDone = r));
    const c = lead('c', async (ctx) => {
      // A newer epoch wrote the row meanwhile (another leader after this one, in a split second).
      const newer = epochs.token('jobs', await epochs.bump('jobs'));
      await write(newer, 'by newer');
      refused = await write(ctx.token, 'by c').catch((e: unknown) => e);
      abortedAfter = ctx.signal.aborted;
      workDone();
    });
    const deposed = new Promise<string>((resolve) => c.elector.once('deposed', ({ reason }) => resolve(reason)));
    await c.elected;
    expect(await deposed).toBe('resigned');
    await finished;
    expect(abortedAfter).toBe(true);
    expect(refused).toBeInstanceOf(StaleTermError);
    expect((await row()).state).toBe('by newer');
    await c.elector.stop();
  });

  it('a node that loses its lease while bumping never runs its work with that epoch', async () => {
    const group = 'late-bump';
    const elector = new LeaderElector({ store, group, id: 'slow', ...fast });
    let ran = false;
    let taken: { term: number } | null = null;
    // The real epoch store, with the takeover landing between the lease won and the bump: the
    // lease is released under the node and another owner takes it before the bump is sent.
    const racing: EpochStore = {
      ...epochs,
      bump: async (g) => {
        const held = await store.read(group);
        await store.release(group, held!.owner, held!.term);
        const other = await store.acquire(group, 'usurper~1', 60_000);
        taken = other.lease;
        return epochs.bump(g);
      },
    };
    const deposed = new Promise<string>((resolve) => elector.once('deposed', ({ reason }) => resolve(reason)));
    void withEpoch(elector, racing).runWhileLeader(() => {
      ran = true;
    });
    expect(await deposed).toBe('lost');
    expect(taken).not.toBeNull();
    expect(ran).toBe(false);
    await elector.stop();
  });

  it('refuses a group that cannot carry an epoch, and a missing store', () => {
    const long = new LeaderElector({ store, group: 'g'.repeat(199), ...fast });
    expect(() => withEpoch(long, epochs)).toThrow(/^group: must be at most 194 characters/);
    const ok = new LeaderElector({ store, group: 'ok', ...fast });
    expect(() => withEpoch(ok, {} as EpochStore)).toThrow(/^epochs: /);
  });
});
