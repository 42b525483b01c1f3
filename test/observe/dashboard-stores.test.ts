/**
 * The dashboard's shared source on every store of the contract suite (memory, SQLite, PostgreSQL,
 * MySQL, Redis, etcd): it lists the groups with their leaders and follower adverts, shows a new
 * holder within 2 s (by push where the store has it, else by its poll), and a stream's new head.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DashboardSource } from '../../src/index.js';
import type { DashboardSnapshot, Store } from '../../src/index.js';
import { backends } from '../contract/backends.js';

async function until(what: string, source: DashboardSource, check: (s: DashboardSnapshot) => boolean, timeoutMs = 2000): Promise<number> {
  const start = Date.now();
  for (;;) {
    if (check(source.snapshot())) return Date.now() - start;
    if (Date.now() - start > timeoutMs) throw new Error(`${what}: not shown within ${timeoutMs} ms: ${JSON.stringify(source.snapshot().groups)}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

for (const backend of backends) {
  describe(`dashboard source on ${backend.name}`, () => {
    let store: Store;
    let cleanup: () => Promise<void>;
    let source: DashboardSource;

    beforeAll(async () => {
      ({ store, cleanup } = await backend.open());
    });
    afterAll(async () => {
      source?.close();
      await cleanup?.();
    });

    it('shows groups, leaders, followers, a change of holder and a stream head', async () => {
      const ttl = 60_000;
      await store.acquire('web', 'web-a~1', ttl, { url: 'http://a' });
      await store.acquire('web/followers/r1', 'r1~1', ttl, { appliedSeq: 0, lagEntries: 0, lagAtLeast: false, lagMs: 3 });
      const jobs = await store.acquire('jobs', 'jobs-a~1', ttl);
      source = new DashboardSource({ store, pollMs: 500 });
      source.start();
      await until('the groups', source, (s) => s.status.ok && s.groups.length === 2, 10_000);
      const first = source.snapshot();
      expect(first.groups.map((g) => [g.name, g.leader?.owner, g.followers.map((f) => f.node)])).toEqual([
        ['jobs', 'jobs-a~1', []],
        ['web', 'web-a~1', ['r1']],
      ]);
      expect(first.remaining.web).toBeGreaterThan(ttl - 10_000);

      await store.release('jobs', 'jobs-a~1', jobs.lease.term);
      const b = await store.acquire('jobs', 'jobs-b~1', ttl);
      expect(b.acquired).toBe(true);
      await until('the new holder', source, (s) => s.groups.some((g) => g.name === 'jobs' && g.leader?.owner === 'jobs-b~1' && g.term === b.lease.term));
      const view = source.snapshot().groups.find((g) => g.name === 'jobs')!;
      expect(view.history.map(([, term]) => term)).toEqual([jobs.lease.term, b.lease.term]);

      const web = (await store.read('web'))!;
      for (let i = 0; i < 3; i++) await store.appendFenced({ lease: 'web', term: web.term }, 'web', `e${i}`);
      await until('the stream head', source, (s) => s.groups.some((g) => g.name === 'web' && g.stream?.head === 3));
    });
  });
}
