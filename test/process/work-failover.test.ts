/**
 * The leader directs work, with real worker processes (test/fixtures/work-worker.ts) on SQLite,
 * PostgreSQL and Redis; the leader (a WorkCoordinator) runs in this process:
 *  - every item is done and counted exactly once;
 *  - a worker SIGKILLed mid-item: its lease ends and its items go to the others;
 *  - a worker SIGSTOPped mid-item: the item times out and goes to another worker; after SIGCONT
 *    the stopped worker's late answer lands in its result stream and is ignored;
 *  - the leader deposed mid-job: the new leader's job completes under its own term, and a
 *    deposed leader's assignment is ignored by workers (and refused by the store once the new
 *    leader has written).
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';
import { Redis } from 'ioredis';
import { afterEach, describe, expect, it } from 'vitest';
import { NotLeaderError, StaleTermError, WorkCoordinator, openStore } from '../../src/index.js';
import type { FencingToken, ItemResult, TenureStore, WorkCoordinatorEvents, WorkItem } from '../../src/index.js';
import { FixtureProcess, killAll, num, pollUntil, str } from '../fixtures/harness.js';
import { createPostgresDatabase } from '../stores/sql-servers.js';
import { deleteKeys, testRedisUrl } from '../stores/redis-backend.js';

const GROUP = 'render';
type Output = { by: string; double: number };

const procs: FixtureProcess[] = [];
const cleanups: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  await killAll(procs.splice(0));
  for (const c of cleanups.splice(0).reverse()) await c();
});

const setups: Record<'sqlite' | 'postgres' | 'redis', () => Promise<string>> = {
  sqlite: async () => {
    const dir = mkdtempSync(join(tmpdir(), 'tenure-work-'));
    cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
    return `sqlite:${join(dir, 'tenure.db')}`;
  },
  postgres: async () => {
    const db = await createPostgresDatabase();
    cleanups.push(() => db.drop());
    return db.url;
  },
  redis: async () => {
    const keyPrefix = `{tenure-test-${randomBytes(6).toString('hex')}}:`;
    cleanups.push(async () => {
      const admin = new Redis(testRedisUrl);
      try {
        await deleteKeys(admin, keyPrefix);
      } finally {
        admin.disconnect();
      }
    });
    const url = new URL(testRedisUrl);
    url.searchParams.set('prefix', keyPrefix);
    return url.toString();
  },
};

function items(count: number, from = 0): WorkItem<{ n: number }>[] {
  return Array.from({ length: count }, (_, i) => ({ id: `item-${from + i}`, input: { n: from + i } }));
}

/** Every event the coordinator emits, in order. */
function record(c: WorkCoordinator): { [K in keyof WorkCoordinatorEvents]: WorkCoordinatorEvents[K][] } {
  const log = { assigned: [], completed: [], reassigned: [], ignored: [], retry: [] } as { [K in keyof WorkCoordinatorEvents]: WorkCoordinatorEvents[K][] };
  for (const k of Object.keys(log) as (keyof WorkCoordinatorEvents)[]) c.on(k, (e) => (log[k] as unknown[]).push(e));
  return log;
}

/** Each item's one result: its worker doubled its n, and the aggregate holds each item once. */
function expectAllOnce(results: ReadonlyMap<string, ItemResult<Output>>, job: readonly WorkItem<{ n: number }>[]): void {
  expect([...results.keys()]).toEqual(job.map((i) => i.id));
  for (const i of job) expect(results.get(i.id)!.output.double).toBe(2 * i.input.n);
  const sum = [...results.values()].reduce((s, r) => s + r.output.double, 0);
  expect(sum).toBe(job.reduce((s, i) => s + 2 * i.input.n, 0));
}

describe.each(['sqlite', 'postgres', 'redis'] as const)('the leader directs work on %s', (kind) => {
  async function start(workers: readonly string[], args: readonly string[]): Promise<{ store: TenureStore; url: string; w: Map<string, FixtureProcess> }> {
    const url = await setups[kind]();
    const store = await openStore(url);
    cleanups.push(() => store.close());
    const w = new Map<string, FixtureProcess>();
    for (const id of workers) {
      const p = new FixtureProcess(id, 'work-worker', [url, GROUP, id, ...args]);
      procs.push(p);
      w.set(id, p);
    }
    for (const p of w.values()) await p.waitFor('joined', 20_000);
    return { store, url, w };
  }

  async function lead(store: TenureStore, owner: string, ttlMs: number): Promise<FencingToken> {
    const r = await store.acquire(GROUP, owner, ttlMs);
    if (!r.acquired) throw new Error(`${owner} did not get ${GROUP}`);
    return { lease: GROUP, term: r.lease.term };
  }

  it('every item is done and counted exactly once, spread over the workers', { timeout: 120_000 }, async () => {
    const { store, w } = await start(['w1', 'w2', 'w3'], ['--work-ms', '20']);
    const c = new WorkCoordinator({ store, token: await lead(store, 'leader-1', 60_000), pollMs: 20 });
    const log = record(c);
    const job = items(30);
    const report = await c.run<Output>({ items: job, itemTimeoutMs: 20_000 });
    expectAllOnce(report.results, job);
    expect(report.reassigned).toBe(0);
    expect(log.completed).toHaveLength(30);
    // Each accepted result is one the worker sent for that attempt.
    // (A worker's report comes over its stdout and may arrive after the leader read the answer from
    // the store: wait for it, then count.)
    for (const r of report.results.values()) {
      expect(r.output.by).toBe(r.worker);
      const answered = (e: Record<string, unknown>): boolean => e.item === r.id && e.attempt === r.attempt && e.term === report.term;
      await w.get(r.worker)!.waitFor('answered', 20_000, answered);
      expect(w.get(r.worker)!.all('answered', answered)).toHaveLength(1);
    }
    expect(new Set([...report.results.values()].map((r) => r.worker)).size).toBe(3);
  });

  it('a worker killed with SIGKILL mid-item: its lease ends and its items are done by the others', { timeout: 120_000 }, async () => {
    // Items long enough that the kill lands mid-item however late this process hears 'started'.
    const { store, w } = await start(['w1', 'w2', 'w3'], ['--work-ms', '800', '--ttl', '1500']);
    const c = new WorkCoordinator({ store, token: await lead(store, 'leader-1', 60_000), pollMs: 20 });
    const log = record(c);
    const job = items(15);
    // A long item timeout: only the end of the lease can give the killed worker's items away.
    const running = c.run<Output>({ items: job, itemTimeoutMs: 60_000 });
    const victim = w.get('w2')!;
    const started = await victim.waitFor('started', 20_000);
    await victim.kill();
    const report = await running;
    expectAllOnce(report.results, job);
    const lost = str(started, 'item');
    expect(log.reassigned).toContainEqual({ item: lost, attempt: num(started, 'attempt'), worker: 'w2', reason: 'worker-lost' });
    expect(report.results.get(lost)!.worker).not.toBe('w2');
    expect(report.results.get(lost)!.attempt).toBeGreaterThan(num(started, 'attempt'));
    // Nothing the dead worker never answered is credited to it.
    for (const r of report.results.values()) {
      if (r.worker === 'w2') expect(victim.all('answered', (e) => e.item === r.id && e.attempt === r.attempt)).toHaveLength(1);
    }
  });

  it('a worker stopped with SIGSTOP mid-item: the item times out and goes to another; after SIGCONT its late answer is ignored', { timeout: 120_000 }, async () => {
    // A long lease: the stopped worker is still "alive"; only the item timeout can notice it.
    const { store, w } = await start(['w1', 'w2'], ['--work-ms', '700', '--ttl', '15000']);
    const c = new WorkCoordinator({ store, token: await lead(store, 'leader-1', 60_000), pollMs: 20 });
    const log = record(c);
    const job = items(16);
    const running = c.run<Output>({ items: job, itemTimeoutMs: 2000, maxAttempts: 10 });
    const stalled = w.get('w1')!;
    const started = await stalled.waitFor('started', 20_000);
    const item = str(started, 'item');
    const attempt = num(started, 'attempt');
    stalled.signal('SIGSTOP');
    cleanups.push(() => stalled.signal('SIGCONT'));
    await pollUntil('the stalled item done by w2', 30_000, () => log.completed.find((e) => e.item === item));
    expect(log.reassigned).toContainEqual({ item, attempt, worker: 'w1', reason: 'timeout' });
    // Enough is left that the job is still running when the late answer lands.
    expect(job.length - log.completed.length).toBeGreaterThanOrEqual(5);
    stalled.signal('SIGCONT');
    // Its answer to the superseded attempt lands in its result stream...
    const late = await stalled.waitFor('answered', 20_000, (e) => e.item === item && e.attempt === attempt);
    expect(late.ok).toBe(true);
    const report = await running;
    // ...and did not count: the item's result is w2's, of a later attempt.
    expectAllOnce(report.results, job);
    expect(report.results.get(item)).toMatchObject({ worker: 'w2', output: { by: 'w2' } });
    expect(report.results.get(item)!.attempt).toBeGreaterThan(attempt);
    // The coordinator read it while the job ran, and set it aside.
    expect(log.ignored.filter((e) => e.item === item && e.attempt === attempt && e.worker === 'w1')).toEqual([{ item, attempt, worker: 'w1', reason: 'superseded' }]);
    expect(report.ignored).toBe(log.ignored.length);
  });

  it('the leader deposed mid-job: the new leader\'s job wins, the old leader\'s assignments are ignored by workers', { timeout: 120_000 }, async () => {
    const { store, w } = await start(['w1', 'w2'], ['--work-ms', '150', '--ttl', '3000']);
    // The old leader's lease is short and nobody renews it: it expires mid-job.
    const old = await lead(store, 'leader-1', 2500);
    const c1 = new WorkCoordinator({ store, token: old, pollMs: 20 });
    const log1 = record(c1);
    // The old job is far longer than the old lease (1000 items of 150 ms on two workers), so it is
    // still running when the lease ends, however fast the workers hear of their items (push).
    const oldJob = items(1000);
    const job = items(30);
    const first = c1.run<Output>({ items: oldJob, itemTimeoutMs: 20_000 }).then(
      () => null,
      (err: unknown) => err,
    );
    await pollUntil('a few items done under the old leader', 20_000, () => log1.completed.length >= 2);
    const token = await pollUntil('the new leader', 20_000, async () => {
      const r = await store.acquire(GROUP, 'leader-2', 60_000);
      return r.acquired ? ({ lease: GROUP, term: r.lease.term } as FencingToken) : false;
    });
    expect(token.term).toBeGreaterThan(old.term);
    // The old leader, still running somewhere, gives an item to w1 before the new one writes
    // anything: the store takes it (no newer term has written yet), and w1 ignores it.
    const w1Term = num(w.get('w1')!.all('joined').at(-1)!, 'term');
    const zombie = JSON.stringify({ v: 1, kind: 'assign', job: 'zombie-job', worker: 'w1', workerTerm: w1Term, items: [{ item: 'zombie-item', attempt: 1, input: { n: 1000 } }] });
    await store.appendFenced(old, `${GROUP}/assignments`, zombie);
    await w.get('w1')!.waitFor('ignored', 20_000, (e) => e.item === 'zombie-item');
    const err = await first;
    expect(err).toBeInstanceOf(NotLeaderError);

    const c2 = new WorkCoordinator({ store, token, pollMs: 20 });
    const log2 = record(c2);
    const report = await c2.run<Output>({ items: job, itemTimeoutMs: 20_000 });
    expectAllOnce(report.results, job);
    expect(report.term).toBe(token.term);
    // Every accepted answer answers the new leader's term; late answers to the old job did not count.
    // (A worker's report of its answer comes over its stdout and may reach this process after the
    // leader read the answer from the store: wait for it, then count.)
    for (const r of report.results.values()) {
      const answered = (e: Record<string, unknown>): boolean => e.item === r.id && e.attempt === r.attempt && e.term === token.term;
      await w.get(r.worker)!.waitFor('answered', 20_000, answered);
      expect(w.get(r.worker)!.all('answered', answered)).toHaveLength(1);
    }
    for (const e of log2.ignored) expect(['other-job', 'other-term']).toContain(e.reason);
    // Once the new leader has written, the store refuses the old one's assignments outright.
    await expect(store.appendFenced(old, `${GROUP}/assignments`, zombie)).rejects.toBeInstanceOf(StaleTermError);
    for (const p of w.values()) expect(p.all('started', (e) => e.item === 'zombie-item')).toEqual([]);
  });
});
