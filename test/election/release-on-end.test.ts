/**
 * "Task ends, leadership ends": runWhileLeader(fn, { releaseOnEnd: true }) on real stores. Two
 * nodes, each with its own store handle on one SQLite file or one PostgreSQL database; the lease
 * TTL is long (10 s), so a takeover within a second proves the lease was released, not left to
 * expire.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { InvalidArgumentError, LeaderElector, MemoryStore } from '../../src/index.js';
import type { Store } from '../../src/index.js';
import { SqliteStore } from '../../src/stores/sqlite/index.js';
import { PostgresStore } from '../../src/stores/postgres/index.js';
import { createPostgresDatabase } from '../stores/sql-servers.js';

const TTL_MS = 10_000;
/** A takeover this fast cannot be the lease expiring (TTL 10 s). */
const AT_ONCE_MS = 2000;

const cleanups: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

interface Backend {
  readonly name: string;
  /** Two handles on one fresh store, as two processes would have. */
  open(): Promise<[Store, Store]>;
}

const backends: Backend[] = [
  {
    name: 'sqlite',
    open: async () => {
      const dir = mkdtempSync(join(tmpdir(), 'tenure-release-on-end-'));
      const path = join(dir, 'tenure.db');
      const a = new SqliteStore({ path });
      const b = new SqliteStore({ path });
      cleanups.push(async () => {
        await a.close();
        await b.close();
        rmSync(dir, { recursive: true, force: true });
      });
      return [a, b];
    },
  },
  {
    name: 'postgres',
    open: async () => {
      const db = await createPostgresDatabase();
      const a = new PostgresStore({ url: db.url });
      const b = new PostgresStore({ url: db.url });
      cleanups.push(async () => {
        await a.close();
        await b.close();
        await db.drop();
      });
      return [a, b];
    },
  },
];

function elector(store: Store, id: string): LeaderElector {
  const e = new LeaderElector({ store, group: 'jobs', id, ttlMs: TTL_MS });
  cleanups.push(() => e.stop());
  return e;
}

function elected(e: LeaderElector): Promise<number> {
  return new Promise((resolve) => e.once('elected', ({ term }) => resolve(term)));
}

describe.each(backends)('runWhileLeader releaseOnEnd on $name', (backend) => {
  it('a job that resolves releases the lease: the waiting node is elected at once, the first campaigns no more', async () => {
    const [sa, sb] = await backend.open();
    const a = elector(sa, 'a');
    const b = elector(sb, 'b');
    let finishJob = (): void => {};
    const runs: number[] = [];
    const done = a.runWhileLeader(
      async ({ term }) => {
        runs.push(term);
        await new Promise<void>((r) => (finishJob = r));
      },
      { releaseOnEnd: true },
    );
    await elected(a);
    b.start();
    const bElected = elected(b);
    await new Promise((r) => setTimeout(r, 200)); // b is waiting on a's live lease
    expect(b.isLeader).toBe(false);

    const endedAt = performance.now();
    finishJob();
    await done; // resolves once a stopped: its lease released
    expect(a.isLeader).toBe(false);
    const bTerm = await bElected;
    const takeoverMs = performance.now() - endedAt;
    expect(takeoverMs).toBeLessThan(AT_ONCE_MS);
    expect(bTerm).toBe(runs[0]! + 1);
    expect((await sb.read('jobs'))?.owner).toBe(b.owner);

    // a campaigns no more: when b steps down, no one takes the group.
    await b.stop();
    await new Promise((r) => setTimeout(r, 300));
    expect(await sa.read('jobs')).toBeNull();
    expect(runs).toHaveLength(1);
  });

  it('a job that throws releases the lease too, and runWhileLeader rejects with its error', async () => {
    const [sa, sb] = await backend.open();
    const a = elector(sa, 'a');
    const b = elector(sb, 'b');
    const errors: Error[] = [];
    a.on('work-error', ({ error }) => errors.push(error));
    let fail = (): void => {};
    const done = a.runWhileLeader(
      async () => {
        await new Promise<void>((r) => (fail = r));
        throw new Error('report failed');
      },
      { releaseOnEnd: true },
    );
    await elected(a);
    b.start();
    const bElected = elected(b);
    const endedAt = performance.now();
    fail();
    await expect(done).rejects.toThrow('report failed');
    await bElected;
    expect(performance.now() - endedAt).toBeLessThan(AT_ONCE_MS);
    expect(errors.map((e) => e.message)).toEqual(['report failed']);
  });

  it('a job cut short by losing leadership did not end: it runs again at the next election, then ends it', async () => {
    const [sa] = await backend.open();
    const a = elector(sa, 'a');
    const terms: number[] = [];
    const done = a.runWhileLeader(
      async ({ term, signal }) => {
        terms.push(term);
        if (terms.length === 1) {
          // The first run waits for its leadership to end, then returns (as a loop on `signal` does).
          await new Promise<void>((r) => signal.addEventListener('abort', () => r(), { once: true }));
        }
      },
      { releaseOnEnd: true },
    );
    await elected(a);
    await a.resign(); // leadership ends: the job is cut short, not done
    await done;
    expect(terms).toEqual([1, 2]);
    expect(await sa.read('jobs')).toBeNull();
  });

  it('without the option a job that resolves keeps the node leading (the default is unchanged)', async () => {
    const [sa] = await backend.open();
    const a = elector(sa, 'a');
    void a.runWhileLeader(() => {});
    const term = await elected(a);
    await new Promise((r) => setTimeout(r, 300));
    expect(a.isLeader).toBe(true);
    expect((await sa.read('jobs'))).toMatchObject({ owner: a.owner, term });
  });
});

describe('runWhileLeader options', () => {
  it('refuses a releaseOnEnd that is not a boolean, and options that are not an object', () => {
    const a = new LeaderElector({ store: new MemoryStore(), group: 'g', id: 'a' });
    cleanups.push(() => a.stop());
    expect(() => a.runWhileLeader(() => {}, { releaseOnEnd: 'yes' as unknown as boolean })).toThrow(InvalidArgumentError);
    expect(() => a.runWhileLeader(() => {}, null as unknown as object)).toThrow(/options: expected an object/);
    expect(() => a.runWhileLeader('job' as unknown as () => void)).toThrow(/fn: expected a function/);
    expect(a.isLeader).toBe(false);
  });
});
