/**
 * `tenure run` over a store holding a lease tenure cannot use (a term beyond 2^53 - 1, written by
 * hand or by another program): one clear error and exit 1, never a hang, an unsettled await
 * (exit 13) or a float written back; and `tenure lock --wait 0` is one attempt that counts.
 */
import pg from 'pg';
import { afterAll, describe, expect, it } from 'vitest';
import { openDatabase } from '../../src/stores/sqlite/driver.js';
import { createPostgresDatabase } from '../stores/sql-servers.js';
import type { TestDatabase } from '../stores/sql-servers.js';
import { cleanUp, lines, sandbox, start, tenure, waitUntil } from './helpers.js';

afterAll(cleanUp);

const HUGE = '9223372036854775807';
const ABOVE_SAFE = '9007199254740993';
const MARK = 'child ran';

function sqliteTerm(db: string, name: string): string {
  const { db: d } = openDatabase(db);
  try {
    const r = d.prepare('SELECT typeof(term) AS t, CAST(term AS TEXT) AS v FROM tenure_leases WHERE name = ?').get(name)!;
    return `${String(r.t)}:${String(r.v)}`;
  } finally {
    d.close();
  }
}

function setSqliteTerm(db: string, name: string, term: string): void {
  const { db: d } = openDatabase(db);
  try {
    d.prepare(`UPDATE tenure_leases SET term = ${term} WHERE name = ?`).run(name);
  } finally {
    d.close();
  }
}

describe('tenure run over a lease whose term tenure cannot use', () => {
  it('SQLite, released row at term 2^63 - 1: exit 1 with one line, CMD not run, the row not rewritten', async () => {
    const box = sandbox();
    expect((await tenure(box, ['run', '--group', 'huge', '--once', '--ttl', '1s', '--', 'true'])).code).toBe(0);
    setSqliteTerm(box.db, 'huge', HUGE);
    const r = await tenure(box, ['run', '--group', 'huge', '--once', '--ttl', '1s', '--', 'sh', '-c', `echo ${MARK}`], { timeoutMs: 20_000 });
    expect(r.code).toBe(1);
    expect(r.stdout).not.toContain(MARK);
    expect(r.stderr).toMatch(/term "9223372036854775807".*not an integer in \[0, 9007199254740991\]/);
    expect(lines(r.stderr)).toHaveLength(1);
    expect(sqliteTerm(box.db, 'huge')).toBe(`integer:${HUGE}`);
  });

  it('SQLite, the row tampered while leading: the child is stopped and tenure exits 1', async () => {
    const box = sandbox();
    const run = start(box, ['run', '--group', 'g', '--ttl', '1s', '--grace', '1s', '--', 'sh', '-c', `echo ${MARK}; exec sleep 60`]);
    await waitUntil('the child to start', () => run.stdout.includes(MARK), 15_000);
    setSqliteTerm(box.db, 'g', HUGE);
    const exit = await Promise.race([run.exited, new Promise<null>((r) => setTimeout(() => r(null), 15_000))]);
    expect(exit).toEqual({ code: 1, signal: null });
    expect(run.stderr).toMatch(/store error during renew: .*9223372036854775807/);
    expect(run.stderr.match(/store error during/g)).toHaveLength(1); // reported once, not again by the release
    expect(run.stderr).toMatch(/child \d+ exited/);
    expect(sqliteTerm(box.db, 'g')).toBe(`integer:${HUGE}`);
  });

  describe('PostgreSQL', () => {
    let db: TestDatabase;
    afterAll(async () => {
      await db?.drop();
    });

    for (const term of [HUGE, ABOVE_SAFE]) {
      it(`released row at term ${term}: exit 1 within the time of a few attempts (it hung before), CMD not run`, async () => {
        db ??= await createPostgresDatabase();
        const box = sandbox();
        const group = `g${term.length}${term.slice(-2)}`;
        expect((await tenure(box, ['run', '--store', db.url, '--group', group, '--once', '--ttl', '1s', '--', 'true'])).code).toBe(0);
        const client = new pg.Client({ connectionString: db.url });
        await client.connect();
        try {
          await client.query(`UPDATE tenure_leases SET term = ${term} WHERE name = $1`, [group]);
        } finally {
          await client.end();
        }
        const r = await tenure(box, ['run', '--store', db.url, '--group', group, '--once', '--ttl', '1s', '--', 'sh', '-c', `echo ${MARK}`], { timeoutMs: 20_000 });
        expect(r.code).toBe(1);
        expect(r.stdout).not.toContain(MARK);
        expect(r.stderr).toMatch(/store error during acquire: .*(cannot grow|not an integer in \[0, 9007199254740991\])/);
        expect(r.stderr).toMatch(/retrying cannot fix/);
      });
    }
  });
});

describe('tenure lock --wait 0', () => {
  it('takes a free lock every time (10 of 10): one attempt, whose answer counts', async () => {
    const box = sandbox();
    expect((await tenure(box, ['lock', 'L', '--', 'true'])).code).toBe(0); // the store file exists
    const codes: (number | null)[] = [];
    for (let i = 0; i < 10; i++) codes.push((await tenure(box, ['lock', 'L', '--wait', '0', '--', 'sh', '-c', 'exit 7'])).code);
    expect(codes).toEqual(Array(10).fill(7));
  });

  it('still exits 4 at once when the lock is held', async () => {
    const box = sandbox();
    const holder = start(box, ['lock', 'L', '--ttl', '2s', '--', 'sh', '-c', `echo ${MARK}; exec sleep 30`]);
    await waitUntil('the holder to run', () => holder.stdout.includes(MARK), 15_000);
    const t0 = Date.now();
    const r = await tenure(box, ['lock', 'L', '--wait', '0', '--', 'true']);
    expect(r.code).toBe(4);
    expect(Date.now() - t0).toBeLessThan(5000);
    holder.proc.kill('SIGTERM');
    await holder.exited;
  });
});
