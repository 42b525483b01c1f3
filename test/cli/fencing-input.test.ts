/**
 * The command line on input another program or a careless writer left behind: a lease row whose
 * meta is not JSON (listed, flagged, never hiding the others), and an append with a token of a
 * lease that does not own the stream (bad input, exit 2, nothing written).
 */
import pg from 'pg';
import { afterAll, describe, expect, it } from 'vitest';
import { SqliteStore } from '../../src/stores/sqlite/index.js';
import { openDatabase } from '../../src/stores/sqlite/driver.js';
import { PostgresStore } from '../../src/stores/postgres/index.js';
import { createPostgresDatabase } from '../stores/sql-servers.js';
import { cleanUp, lines, sandbox, tenure } from './helpers.js';

afterAll(cleanUp);

type Listed = { name: string; term: number; meta: Record<string, unknown> };

describe('tenure status with a lease row whose meta is not JSON', () => {
  it('SQLite: lists every lease, the bad one with its meta flagged as invalidMeta', async () => {
    const box = sandbox();
    const store = new SqliteStore({ path: box.db });
    await store.acquire('good', 'a~1', 60_000, { url: 'http://a' });
    await store.acquire('bad', 'b~1', 60_000, { url: 'http://b' });
    await store.close();
    const { db } = openDatabase(box.db);
    db.prepare('UPDATE tenure_leases SET meta = ? WHERE name = ?').run(`not json ${'x'.repeat(100)}`, 'bad');
    db.close();
    const json = await tenure(box, ['status', '--json']);
    expect(json.stderr).toBe('');
    expect(json.code).toBe(0);
    const leases = JSON.parse(json.stdout) as Listed[];
    expect(leases.map((l) => [l.name, l.meta])).toEqual([
      ['bad', { invalidMeta: `not json ${'x'.repeat(55)}` }],
      ['good', { url: 'http://a' }],
    ]);
    const text = await tenure(box, ['status']);
    expect(text.code).toBe(0);
    expect(lines(text.stdout).filter((l) => /^(bad|good)\s/.test(l))).toHaveLength(2);
    const one = await tenure(box, ['status', '--group', 'bad', '--json']);
    expect(one.code).toBe(0);
    expect(one.stdout).toContain('invalidMeta');
  });

  it('PostgreSQL: the same, also for meta that is JSON but not an object', async () => {
    const database = await createPostgresDatabase();
    const pool = new pg.Pool({ connectionString: database.url });
    // A client still closing when the database is dropped is cut by the server (57P01): expected
    // here, and not an unhandled error of the test run.
    pool.on('connect', (client) => client.on('error', () => {}));
    pool.on('error', () => {}); // and an idle client cut so is reported on the pool (pg-pool): the same
    try {
      const store = new PostgresStore({ pool });
      await store.acquire('good', 'a~1', 60_000, { v: 1 });
      await store.acquire('bad', 'b~1', 60_000);
      await store.acquire('array', 'c~1', 60_000);
      await store.close();
      await pool.query("UPDATE tenure_leases SET meta = '{broken' WHERE name = 'bad'");
      await pool.query("UPDATE tenure_leases SET meta = '[1,2]' WHERE name = 'array'");
      const json = await tenure(sandbox(), ['status', '--store', database.url, '--json']);
      expect(json.stderr).toBe('');
      expect(json.code).toBe(0);
      expect((JSON.parse(json.stdout) as Listed[]).map((l) => [l.name, l.meta])).toEqual([
        ['array', { invalidMeta: '[1,2]' }],
        ['bad', { invalidMeta: '{broken' }],
        ['good', { v: 1 }],
      ]);
    } finally {
      await pool.end();
      await database.drop();
    }
  });
});

describe('tenure status and log with terminal escapes in rows another program wrote', () => {
  it('print them escaped (\\u001b), so the terminal acts on none; --json keeps them exact', async () => {
    const box = sandbox();
    const store = new SqliteStore({ path: box.db });
    const term = (await store.acquire('plain', 'a~1', 60_000)).lease.term;
    expect(await store.appendFenced({ lease: 'plain', term }, 's', 'entry')).toBe(1);
    await store.close();
    const name = 'evil\u001b[31mRED\u001b]0;title\u0007';
    const owner = 'o\u001b[2J\u009b31m';
    const { db } = openDatabase(box.db);
    db.prepare('UPDATE tenure_leases SET name = ?, owner = ?, meta = ? WHERE name = ?').run(name, owner, JSON.stringify({ k: '\u009bX' }), 'plain');
    db.prepare('UPDATE tenure_streams SET lease = ?').run(name);
    db.close();
    // eslint-disable-next-line no-control-regex
    const controls = /[\u0000-\u0009\u000b-\u001f\u007f-\u009f]/;
    const text = await tenure(box, ['status']);
    expect(text.code).toBe(0);
    expect(text.stdout).not.toMatch(controls);
    expect(text.stdout).toContain('evil\\u001b[31mRED\\u001b]0;title\\u0007');
    expect(text.stdout).toContain('o\\u001b[2J\\u009b31m');
    expect(text.stdout).toContain('{"k":"\\u009bX"}');
    const json = await tenure(box, ['status', '--json']);
    expect((JSON.parse(json.stdout) as Listed[]).map((l) => [l.name, (l as Listed & { owner: string }).owner, l.meta])).toEqual([[name, owner, { k: '\u009bX' }]]);
    const log = await tenure(box, ['log', '--stream', 's']);
    expect(log.code).toBe(0);
    expect(log.stdout).not.toMatch(controls);
    expect(log.stdout).toContain('evil\\u001b[31mRED');
  });
});

describe('tenure append into a stream another lease owns', () => {
  it('exits 2 with one line naming the owner, and writes nothing', async () => {
    const box = sandbox();
    const store = new SqliteStore({ path: box.db });
    const g = (await store.acquire('g', 'a~1', 60_000)).lease.term;
    const h = (await store.acquire('h', 'b~1', 60_000)).lease.term;
    await store.close();
    expect((await tenure(box, ['append', '--stream', 's1', '--token', `h#${h}`, 'by h'])).code).toBe(0);
    const r = await tenure(box, ['append', '--stream', 's1', '--token', `g#${g}`, 'by g']);
    expect(r.code).toBe(2);
    expect(lines(r.stderr)).toHaveLength(1);
    expect(r.stderr).toContain('stream s1 belongs to lease h, not g');
    const log = await tenure(box, ['log', '--stream', 's1', '--json']);
    expect(lines(log.stdout).map((l) => (JSON.parse(l) as { payload: string }).payload)).toEqual(['by h']);
  });
});

describe('tenure with a redis:// URL naming a database the server does not have', () => {
  it('exits 2 with one line naming the database (nothing is written to database 0)', async () => {
    const r = await tenure(sandbox(), ['status', '--store', 'redis://127.0.0.1:6379/99']);
    expect(r.code).toBe(2);
    expect(lines(r.stderr)).toEqual(['tenure status: store: redis store 127.0.0.1:6379: database 99 does not exist on this server (ERR DB index is out of range)']);
    const junk = await tenure(sandbox(), ['status', '--store', 'redis://127.0.0.1:6379/abc']);
    expect(junk.code).toBe(2);
    expect(lines(junk.stderr)).toHaveLength(1);
  });
});
