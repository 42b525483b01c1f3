/**
 * `tenure demo --store URL`: the same story on a store of the user's (PostgreSQL, Redis), in a
 * group and stream of the run's own so nothing already in the store is touched; bad stores are
 * refused before any node starts, and TENURE_STORE never sends a demo to a real store unasked.
 */
import { afterAll, describe, expect, it } from 'vitest';
import { openStore } from '../../src/open.js';
import { freePort } from '../stores/redis-servers.js';
import { createPostgresDatabase } from '../stores/sql-servers.js';
import type { TestDatabase } from '../stores/sql-servers.js';
import { expectTheStory } from './demo-story.js';
import type { DemoSummaryJson } from './demo-story.js';
import { cleanUp, lines, sandbox, tenure } from './helpers.js';

interface Summary extends DemoSummaryJson {
  store: string;
  group: string;
}

const databases: TestDatabase[] = [];
afterAll(async () => {
  await cleanUp();
  await Promise.all(databases.map((d) => d.drop()));
});

describe('tenure demo --store', () => {
  it('runs the story on PostgreSQL in a group of its own, leaving a lease already there alone', { timeout: 120_000 }, async () => {
    const db = await createPostgresDatabase();
    databases.push(db);
    const store = await openStore(db.url);
    try {
      // Someone else's lease named like the demo's default group must not be touched.
      const theirs = await store.acquire('demo', 'someone-else', 120_000, { app: 'production' });
      expect(theirs.acquired).toBe(true);

      const box = sandbox();
      const r = await tenure(box, ['demo', '--store', db.url, '--duration', '4', '--json'], { timeoutMs: 110_000 });
      expect(r.code, r.stderr).toBe(0);
      const summary = JSON.parse(r.stdout) as Summary;
      expectTheStory(summary);
      expect(summary.group).toMatch(/^demo-[0-9a-f]{8}$/);
      expect(summary.store).toBe(db.url.replace(/:[^:@/]*@/, ':***@'));

      // The entries the summary counted are in the user's store, under the run's own stream.
      const entries = await store.readStream(summary.group, { limit: 10_000 });
      expect(entries).toHaveLength(summary.entries);
      expect(entries.every((e) => e.lease === summary.group)).toBe(true);
      const after = await store.read('demo');
      expect(after?.owner).toBe('someone-else');
      expect(after?.term).toBe(theirs.lease.term);
      expect(await store.readStream('demo')).toEqual([]);
    } finally {
      await store.close();
    }
  });

  it('runs the story on Redis under a key prefix', { timeout: 120_000 }, async () => {
    const prefix = `demo-store-${process.pid}-${Date.now()}:`;
    const url = `redis://127.0.0.1:6379/?prefix=${prefix}`;
    const box = sandbox();
    const r = await tenure(box, ['demo', '--store', url, '--duration', '4', '--json'], { timeoutMs: 110_000 });
    expect(r.code, r.stderr).toBe(0);
    const summary = JSON.parse(r.stdout) as Summary;
    expectTheStory(summary);
    const store = await openStore(url);
    try {
      expect(await store.readStream(summary.group, { limit: 10_000 })).toHaveLength(summary.entries);
    } finally {
      await store.close();
    }
  });

  it('refuses a store the nodes cannot share, --via sql off SQLite and a bad URL: one line, exit 2, nothing started', async () => {
    const box = sandbox();
    const cases: Array<[string[], string]> = [
      [['--store', 'memory:'], 'memory: lives inside one process'],
      [['--store', 'postgres://u:s3cret@127.0.0.1/x', '--via', 'sql'], '--via sql writes a row beside the SQLite leases table; postgres://u:***@127.0.0.1/x is postgres'],
      [['--store', 'bogus://x'], "unknown store scheme 'bogus:'"],
      [['--store', 'postgres://u:s3cret@[bad'], '--store'],
    ];
    for (const [args, message] of cases) {
      const r = await tenure(box, ['demo', ...args, '--json']);
      const why = `${args.join(' ')}: ${r.stderr}`;
      expect(r.code, why).toBe(2);
      expect(r.stdout, why).toBe('');
      expect(lines(r.stderr), why).toHaveLength(1);
      expect(r.stderr, why).toContain(message);
      expect(r.stderr, why).not.toContain('s3cret');
    }
  });

  it('an unreachable store is one line naming it (password hidden) and exit code 1', { timeout: 60_000 }, async () => {
    const box = sandbox();
    const port = await freePort();
    const r = await tenure(box, ['demo', '--store', `postgres://u:s3cret@127.0.0.1:${port}/x`, '--json'], { timeoutMs: 50_000 });
    expect(r.code, r.stderr).toBe(1);
    expect(lines(r.stderr)).toHaveLength(1);
    expect(r.stderr).toContain(`postgres://u:***@127.0.0.1:${port}/x`);
    expect(r.stderr).not.toContain('s3cret');
  });

  it('does not read TENURE_STORE: without --store the demo runs on its own temporary SQLite file', { timeout: 120_000 }, async () => {
    const box = sandbox();
    const port = await freePort();
    const r = await tenure(box, ['demo', '--duration', '3', '--json'], { timeoutMs: 110_000, env: { ...box.env, TENURE_STORE: `postgres://u:s3cret@127.0.0.1:${port}/x` } });
    expect(r.code, r.stderr).toBe(0);
    const summary = JSON.parse(r.stdout) as Summary;
    expectTheStory(summary);
    expect(summary.store).toBe('sqlite (temporary)');
    expect(summary.group).toBe('demo');
  });
});
