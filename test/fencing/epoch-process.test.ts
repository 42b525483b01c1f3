/**
 * The zombie leader over the epoch path, with real processes on PostgreSQL: a leader writing
 * epoch-fenced rows is frozen with SIGSTOP past its TTL, another process takes over (a new lease
 * term, a new epoch) and writes; the old leader is resumed and writes with the epoch it held. That
 * write is refused (StaleTermError) and nothing of it is applied, and the rows never show an older
 * epoch after a newer one.
 */
import pg from 'pg';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { FixtureProcess, killAll, num, pollUntil } from '../fixtures/harness.js';
import { createPostgresDatabase } from '../stores/sql-servers.js';
import type { TestDatabase } from '../stores/sql-servers.js';

const TTL_MS = 1000;
const WAIT_MS = 20_000;
const procs: FixtureProcess[] = [];

afterEach(async () => {
  await killAll(procs.splice(0));
});

describe('epoch-fenced writes with real processes on PostgreSQL', () => {
  let db: TestDatabase;
  let pool: pg.Pool;
  beforeAll(async () => {
    db = await createPostgresDatabase();
    pool = new pg.Pool({ connectionString: db.url, max: 2 });
    pool.on('error', () => {});
    await pool.query('CREATE TABLE writes (id bigserial PRIMARY KEY, who text, what text, epoch bigint, last_fence_token bigint, last_fence_lease text)');
  });
  afterAll(async () => {
    await pool?.end();
    await db?.drop();
  });

  const writer = (id: string): FixtureProcess => {
    const p = new FixtureProcess(id, 'epoch-writer', [db.url, 'jobs', id, String(TTL_MS)]);
    procs.push(p);
    return p;
  };

  it('a leader paused past its TTL resumes with the old epoch: its write is refused and nothing it sent lands after the takeover', { timeout: 120_000 }, async () => {
    const a = writer('node-a');
    const electedA = await a.waitFor('elected', WAIT_MS);
    const epochA = num(electedA, 'epoch');
    await a.waitFor('wrote', WAIT_MS, (e) => num(e, 'n') >= 3);
    const b = writer('node-b');
    await b.waitFor('ready', WAIT_MS);

    a.signal('SIGSTOP');
    await pollUntil('node-a stopped', WAIT_MS, () => a.procState() === 'T', 1);
    const electedB = await b.waitFor('elected', WAIT_MS);
    const epochB = num(electedB, 'epoch');
    expect(epochB).toBeGreaterThan(epochA);
    expect(num(electedB, 'term')).toBeGreaterThan(num(electedA, 'term'));
    await b.waitFor('wrote', WAIT_MS, (e) => num(e, 'n') >= 3);

    const from = a.events.length;
    a.signal('SIGCONT');
    const probe = await a.waitFor('probe', WAIT_MS, undefined, from);
    expect(probe).toMatchObject({ epoch: epochA, outcome: 'stale', error: 'StaleTermError', code: 'STALE_TERM', currentTerm: epochB });
    await b.waitFor('wrote', WAIT_MS, (e) => num(e, 'n') >= 6);
    // node-a's own elector steps down once it runs again (its deadline passed while frozen).
    await a.waitFor('deposed', WAIT_MS, undefined, from);
    await new Promise((r) => setTimeout(r, 300));

    const rows = (await pool.query('SELECT who, what, epoch::int AS epoch FROM writes ORDER BY id')).rows as { who: string; what: string; epoch: number }[];
    expect(rows.filter((r) => r.what === 'probe')).toEqual([]);
    // Never an older epoch after a newer one, and node-a wrote nothing after node-b's first row.
    for (let i = 1; i < rows.length; i++) expect(rows[i]!.epoch).toBeGreaterThanOrEqual(rows[i - 1]!.epoch);
    const firstB = rows.findIndex((r) => r.who === 'node-b');
    expect(firstB).toBeGreaterThan(0);
    expect(rows.slice(firstB).filter((r) => r.who === 'node-a')).toEqual([]);
    // Every write node-a reported landed (none lost), with its epoch.
    const reportedA = a.all('wrote').length;
    expect(rows.filter((r) => r.who === 'node-a' && r.epoch === epochA)).toHaveLength(reportedA);
  });
});
