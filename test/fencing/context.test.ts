/**
 * The token context: the leadership's token flows with the work (timers, promises, jobs it
 * starts), is absent outside, and a fenced helper there fails loudly. A stale rejection of this
 * leadership's token, on any path, ends the leadership at once.
 */
import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { NoTokenError, StaleTermError } from '../../src/core/index.js';
import type { FencingToken } from '../../src/core/index.js';
import { LeaderElector } from '../../src/election/index.js';
import { currentToken, fencedUpdate, onFencedWrite, postgresDialect, refuse, requireFence, runFenced } from '../../src/fencing/index.js';
import type { FencedWrite } from '../../src/fencing/index.js';
import { openStore } from '../../src/open.js';
import { Lock } from '../../src/locks/index.js';
import { MemoryStore } from '../../src/stores/memory/index.js';
import { PostgresStore } from '../../src/stores/postgres/index.js';
import { createPostgresDatabase } from '../stores/sql-servers.js';

const fast = { ttlMs: 2000, renewIntervalMs: 300, retryMs: 100 };

function deposedOnce(elector: LeaderElector): Promise<{ term: number; reason: string }> {
  return new Promise((resolve) => elector.once('deposed', ({ term, reason }) => resolve({ term, reason })));
}

describe('token context', () => {
  it('runWhileLeader: the token is seen in the work, its timers, promises and queued jobs; not outside', async () => {
    const store = new MemoryStore();
    const elector = new LeaderElector({ store, group: 'ctx', ...fast });
    const seen: Record<string, FencingToken | undefined> = {};
    const jobs: (() => void)[] = [];
    let leaderToken: FencingToken | undefined;
    const done = new Promise<void>((resolve) => {
      void elector.runWhileLeader(async ({ token }) => {
        leaderToken = token;
        seen.direct = currentToken();
        await new Promise<void>((r) => setTimeout(r, 5));
        seen.afterAwait = currentToken();
        setTimeout(() => {
          seen.timer = currentToken();
          // A job queued from the work, run later by code outside it: the context went with the closure's async resource.
          jobs.push(() => (seen.queuedFromOutside = currentToken()));
          resolve();
        }, 10);
        void Promise.resolve().then(() => (seen.promise = currentToken()));
      });
    });
    await done;
    seen.outside = currentToken();
    jobs.forEach((job) => job()); // run from the test, outside any leadership
    expect(leaderToken).toEqual({ lease: 'ctx', term: 1 });
    expect(seen.direct).toEqual(leaderToken);
    expect(seen.afterAwait).toEqual(leaderToken);
    expect(seen.timer).toEqual(leaderToken);
    expect(seen.promise).toEqual(leaderToken);
    expect(seen.outside).toBeUndefined();
    // A plain closure carries no context: only async resources (timers, promises, emitters bound
    // with AsyncResource) do. So a job queue must capture the context itself, as runFenced does.
    expect(seen.queuedFromOutside).toBeUndefined();
    expect(() => requireFence('fencedFetch')).toThrow(NoTokenError);
    await elector.stop();
    await store.close();
  });

  it('a timer started by the work finds no usable token after leadership ends', async () => {
    const store = new MemoryStore();
    const elector = new LeaderElector({ store, group: 'late', ...fast });
    let lateError: unknown = null;
    let lateToken: FencingToken | undefined | null = null;
    const fired = new Promise<void>((resolve) => {
      void elector.runWhileLeader(() => {
        // Started during the leadership, fires after it ended (the test stops the elector at once).
        setTimeout(() => {
          lateToken = currentToken();
          try {
            requireFence('publishFenced');
          } catch (err) {
            lateError = err;
          }
          resolve();
        }, 100);
      });
    });
    await new Promise<void>((r) => elector.once('elected', () => r()));
    await elector.stop();
    await fired;
    expect(lateToken).toBeUndefined();
    expect(lateError).toBeInstanceOf(NoTokenError);
    expect((lateError as Error).message).toMatch(/leadership of late term 1 has ended/);
    await store.close();
  });

  it('lock.using carries the handle token; runFenced carries a handle from acquire(); a token for another group is refused', async () => {
    const store = new MemoryStore();
    const lock = new Lock(store, 'jobs', fast);
    const inUsing = await lock.using(async (handle) => {
      await new Promise((r) => setTimeout(r, 1));
      return { ctx: currentToken(), handle: handle.token };
    });
    expect(inUsing.ctx).toEqual(inUsing.handle);
    const handle = await lock.acquire();
    const got = await runFenced(handle, async () => {
      await Promise.resolve();
      return requireFence('x', 'jobs').token;
    });
    expect(got).toEqual(handle.token);
    expect(() => runFenced(handle, () => requireFence('x', 'billing'))).toThrow(/token in this context is for group jobs, not billing/);
    await handle.release();
    expect(() => runFenced({ token: { lease: 'a', term: 0 } }, () => 1)).toThrow(/term/);
    await store.close();
  });
});

describe('a stale rejection stops the writer', () => {
  it('a refusal reported for this leadership term (any path) deposes with reason fenced; another term or group does not', async () => {
    const store = new MemoryStore();
    const elector = new LeaderElector({ store, group: 'w', ...fast });
    elector.start();
    await new Promise<void>((r) => elector.once('elected', () => r()));
    refuse(new StaleTermError('w', 7, 9), 'http', 'writer'); // not our term
    refuse(new StaleTermError('other', 1, 2), 'message'); // not our group
    await new Promise((r) => setTimeout(r, 20));
    expect(elector.isLeader).toBe(true);
    const signal = elector.signal!;
    const deposed = deposedOnce(elector);
    refuse(new StaleTermError('w', 1, 2), 'http', 'writer');
    expect(signal.aborted).toBe(true); // at once, synchronously with the report
    expect(await deposed).toEqual({ term: 1, reason: 'fenced' });
    await elector.stop();
    await store.close();
  });

  it('PostgreSQL: a leader whose fenced row update is refused steps down; its work sees the signal abort', async () => {
    const db = await createPostgresDatabase();
    const pool = new pg.Pool({ connectionString: db.url, max: 3 });
    pool.on('error', () => {}); // its idle clients are cut when the database is dropped
    const store = new PostgresStore({ pool });
    try {
      await store.migrate?.();
      await pool.query('CREATE TABLE acct (id int PRIMARY KEY, balance int, last_fence_token bigint, last_fence_lease text)');
      // A newer term (2) already wrote the row: this leader (term 1) is a zombie as far as the row knows.
      await pool.query("INSERT INTO acct VALUES (1, 10, 2, 'pay')");
      const elector = new LeaderElector({ store, group: 'pay', ...fast });
      const deposed = deposedOnce(elector);
      const writes: FencedWrite[] = [];
      const stopHearing = onFencedWrite((w) => writes.push(w));
      const outcome = new Promise<{ error: unknown; abortedAfter: boolean }>((resolve) => {
        void elector.runWhileLeader(async ({ signal }) => {
          try {
            await fencedUpdate(postgresDialect, pool, requireFence('test').token, { table: 'acct', set: { balance: 0 }, where: { id: 1 } });
            resolve({ error: null, abortedAfter: signal.aborted });
          } catch (error) {
            resolve({ error, abortedAfter: signal.aborted });
          }
        });
      });
      const { error, abortedAfter } = await outcome;
      expect(error).toBeInstanceOf(StaleTermError);
      expect(abortedAfter).toBe(true);
      expect(await deposed).toEqual({ term: 1, reason: 'fenced' });
      stopHearing();
      // Its latency went to the fenced-write histogram as a stale SQL write.
      expect(writes.map(({ path, lease, outcome }) => ({ path, lease, outcome }))).toEqual([{ path: 'sql', lease: 'pay', outcome: 'stale' }]);
      expect(writes[0]!.ms).toBeGreaterThan(0);
      expect((await pool.query('SELECT balance, last_fence_token FROM acct')).rows).toEqual([{ balance: 10, last_fence_token: '2' }]);
      await elector.stop();
    } finally {
      await store.close();
      await pool.end();
      await db.drop();
    }
  });
});

describe('fenced-write latency', () => {
  it('every appendFenced through an opened store is timed with its outcome (path stream)', async () => {
    const store = await openStore('memory:');
    const writes: FencedWrite[] = [];
    const stop = onFencedWrite((w) => writes.push(w));
    try {
      await store.acquire('s', 'a', 5000);
      await store.release('s', 'a', 1);
      await store.acquire('s', 'b', 5000);
      await store.appendFenced({ lease: 's', term: 2 }, 'log', 'x');
      await expect(store.appendFenced({ lease: 's', term: 1 }, 'log', 'y')).rejects.toBeInstanceOf(StaleTermError);
      // A state cell's lost race: not a failure of the store, its own outcome.
      await expect(store.appendFenced({ lease: 's', term: 2 }, 'log', 'z', { expectSeq: 0 })).rejects.toMatchObject({ code: 'VERSION_CONFLICT', current: 1 });
    } finally {
      stop();
      await store.close();
    }
    expect(writes.map(({ path, lease, outcome }) => ({ path, lease, outcome }))).toEqual([
      { path: 'stream', lease: 's', outcome: 'ok' },
      { path: 'stream', lease: 's', outcome: 'stale' },
      { path: 'stream', lease: 's', outcome: 'conflict' },
    ]);
  });
});
