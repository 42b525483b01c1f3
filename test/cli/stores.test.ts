/**
 * The command on the network stores: `tenure lock` over Redlock (three private Redis servers),
 * `tenure run --once` on redis://, and `tenure migrate` creating PostgreSQL and MySQL tables.
 */
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import pg from 'pg';
import mysql from 'mysql2/promise';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createMysqlDatabase, createPostgresDatabase } from '../stores/sql-servers.js';
import { freePort, startServers } from '../stores/redis-servers.js';
import type { RedisServer } from '../stores/redis-servers.js';
import { cleanUp, lines, sandbox, start, tenure, waitUntil } from './helpers.js';

afterAll(cleanUp);

describe('tenure lock --store redlock://', () => {
  let servers: RedisServer[] = [];
  beforeAll(async () => {
    servers = await startServers(3);
  });
  afterAll(async () => {
    await Promise.all(servers.map((s) => s.stop()));
  });

  it('runs the child with a fencing token while a quorum holds the lock, and excludes a second holder', async () => {
    const box = sandbox();
    const url = `redlock://${servers.map((s) => s.address).join(',')}`;
    const holder = start(box, ['lock', 'nightly', '--store', url, '--ttl', '3s', '--', process.execPath, '-e', 'console.log(process.env.TENURE_TOKEN); setTimeout(() => {}, 4000)']);
    await waitUntil('the holder\'s child to print its token', () => lines(holder.stdout).length > 0, 15_000);
    expect(lines(holder.stdout)[0]).toMatch(/^nightly#[1-9]\d*$/);
    const second = await tenure(box, ['lock', 'nightly', '--store', url, '--wait', '500ms', '--', process.execPath, '-e', 'process.exit(0)']);
    expect(second.code).toBe(4);
    expect(second.stderr).toMatch(/nightly/);
    const first = await holder.exited;
    expect(first.code).toBe(0);
    const after = await tenure(box, ['lock', 'nightly', '--store', url, '--wait', '5s', '--', process.execPath, '-e', 'process.exit(5)']);
    expect(after.code).toBe(5);
  });

  it('exits 1 with one line naming the URL (password hidden) when fewer than a quorum of servers answer, with or without --wait', async () => {
    const dead = [await freePort(), await freePort(), await freePort()].map((p) => `127.0.0.1:${p}`);
    const none = `redlock://:s3cret@${dead.join(',')}`;
    const one = `redlock://${servers[0]!.address},${dead[1]},${dead[2]}`;
    for (const [url, answered] of [[none, 0], [one, 1]] as const) {
      for (const wait of [[], ['--wait', '3s']]) {
        const box = sandbox();
        const startedAt = Date.now();
        const r = await tenure(box, ['lock', 'x', '--store', url, ...wait, '--', 'touch', 'ran'], { timeoutMs: 20_000 });
        const why = `${url} ${wait.join(' ')}: ${r.stderr}`;
        expect(r.code, why).toBe(1);
        expect(lines(r.stderr), why).toHaveLength(1);
        expect(r.stderr, why).toContain(`${answered} of 3 servers answered, a quorum is 2`);
        expect(r.stderr, why).toContain(`${dead[1]} unavailable`);
        expect(r.stderr, why).not.toContain('s3cret');
        if (url === none) expect(r.stderr, why).toContain(`cannot reach redlock://:***@${dead[0]}`);
        expect(Date.now() - startedAt, why).toBeLessThan(10_000);
        expect(existsSync(join(box.dir, 'ran')), why).toBe(false);
      }
    }
  });

  it('rejects a malformed redlock URL as bad usage', async () => {
    const r = await tenure(sandbox(), ['lock', 'x', '--store', 'redlock://', '--', 'true']);
    expect(r.code).toBe(2);
    expect(r.stderr.trim().split('\n')).toHaveLength(1);
  });

  it('runs a leader-only job once on redis://', async () => {
    const box = sandbox();
    const r = await tenure(box, ['run', '--group', 'g', '--once', '--store', `${servers[0]!.url}?prefix=clitest:`, '--', process.execPath, '-e', 'process.exit(process.env.TENURE_TERM === "1" ? 0 : 9)']);
    expect(r.code).toBe(0);
  });
});

describe('tenure migrate', () => {
  it('creates the PostgreSQL tables before first use', async () => {
    const db = await createPostgresDatabase();
    try {
      const r = await tenure(sandbox(), ['migrate', '--store', db.url]);
      expect(r.code).toBe(0);
      const client = new pg.Client({ connectionString: db.url });
      await client.connect();
      try {
        const { rows } = await client.query<{ n: string }>("SELECT count(*) AS n FROM information_schema.tables WHERE table_name LIKE 'tenure%'");
        expect(Number(rows[0]!.n)).toBeGreaterThanOrEqual(3);
      } finally {
        await client.end();
      }
    } finally {
      await db.drop();
    }
  });

  it('creates the MySQL tables before first use', async () => {
    const db = await createMysqlDatabase();
    try {
      const r = await tenure(sandbox(), ['migrate', '--store', db.url]);
      expect(r.code).toBe(0);
      const c = await mysql.createConnection({ uri: db.url });
      try {
        const [rows] = await c.query("SELECT count(*) AS n FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name LIKE 'tenure%'");
        expect(Number((rows as { n: number }[])[0]!.n)).toBeGreaterThanOrEqual(3);
      } finally {
        await c.end();
      }
    } finally {
      await db.drop();
    }
  });
});
