/**
 * No credential of a store URL is ever shown: not the userinfo password, not a password (or other
 * secret) in the query string, on any scheme, in the `campaigning` line (text and --json), in
 * "cannot reach store", in a bad-URL message, in a store's refusal of a `?prefix=`.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { redactSecrets, redactUrl } from '../../src/core/index.js';
import { freePort } from '../fixtures/ports.js';
import { MYSQL_ADMIN_URL, createMysqlDatabase, createPostgresDatabase } from '../stores/sql-servers.js';
import type { TestDatabase } from '../stores/sql-servers.js';
import mysql from 'mysql2/promise';
import { cleanUp, sandbox, tenure } from './helpers.js';

afterAll(cleanUp);

const SECRET = 'S3cr3tPa55w0rd';

/** `url` with SECRET as its userinfo password, and as the value of `param` in the query. */
function withSecrets(url: string, param = 'password'): string {
  const u = new URL(url);
  u.username ||= 'tenure';
  u.password = SECRET;
  u.searchParams.set(param, SECRET);
  return u.toString();
}

async function mysqlAdmin<T>(fn: (c: mysql.Connection) => Promise<T>): Promise<T> {
  const c = await mysql.createConnection({ uri: MYSQL_ADMIN_URL });
  try {
    return await fn(c);
  } finally {
    await c.end();
  }
}

function expectRedacted(output: string): void {
  expect(output).not.toContain(SECRET);
  expect(output).toContain('***');
}

describe('redactUrl and redactSecrets', () => {
  it('redact userinfo passwords and secret query parameters on every scheme', () => {
    expect(redactUrl('postgres://u:p%40ss@h:5432/db?sslmode=require&password=x&sslpassword=y')).toBe('postgres://u:***@h:5432/db?sslmode=require&password=***&sslpassword=***');
    expect(redactUrl('mysql://root:pw@h/db?prefix=t_')).toBe('mysql://root:***@h/db?prefix=t_');
    expect(redactUrl('redis://secret@h:6379/0')).toBe('redis://***@h:6379/0');
    expect(redactUrl('rediss://default:pw@h:6380?tls=1&auth_token=z')).toBe('rediss://default:***@h:6380?tls=1&auth_token=***');
    expect(redactUrl('redlock://:pw@a:1,b:2,c:3?fence=1')).toBe('redlock://:***@a:1,b:2,c:3?fence=1');
    expect(redactUrl('etcd://root:pw@a:2379,b:2379?prefix=p&key=/k.pem')).toBe('etcd://root:***@a:2379,b:2379?prefix=p&key=***');
    expect(redactUrl('postgres://u@h/db')).toBe('postgres://u@h/db'); // a user name is not a secret
    expect(redactUrl('postgres://u:p@ss/word@h/db')).toBe('postgres://u:***@h/db'); // unescaped '@' and '/'
    expect(redactUrl('postgres://u:pw@[bad/x?Token=t#frag')).toBe('postgres://u:***@[bad/x?Token=***#frag');
    expect(redactUrl('sqlite:./a/b.db')).toBe('sqlite:./a/b.db');
  });

  it('redact every URL in a text, and the literal secrets of the given URLs', () => {
    const url = 'redis://:hunter22@h:1/?password=hunter22';
    expect(redactSecrets(`cannot reach store ${url}: auth failed for 'hunter22'.`, [url])).toBe("cannot reach store redis://:***@h:1/?password=***: auth failed for '***'.");
    expect(redactSecrets('see postgres://a:b@h/db, then retry')).toBe('see postgres://a:***@h/db, then retry');
  });
});

describe('tenure on network stores never prints a URL credential', () => {
  let pgDb: TestDatabase;
  let myDb: TestDatabase;
  beforeAll(async () => {
    [pgDb, myDb] = await Promise.all([createPostgresDatabase(), createMysqlDatabase()]);
  });
  afterAll(async () => {
    await Promise.all([pgDb?.drop(), myDb?.drop()]);
  });

  it('postgres: campaigning line (text and --json) and a refused ?prefix= (exit 2)', async () => {
    const box = sandbox();
    // The server trusts local connections, so the password is accepted and ignored.
    const url = withSecrets(pgDb.url);
    const run = await tenure(box, ['run', '--group', 'g', '--once', '--store', url, '--', 'true']);
    expect(run.code, run.stderr).toBe(0);
    expect(run.stderr).toMatch(/campaigning .*store postgres:\/\/[^:]+:\*\*\*@[^ ]+\?password=\*\*\*,/);
    expectRedacted(run.stderr);
    const json = await tenure(box, ['run', '--group', 'g', '--once', '--json', '--store', url, '--', 'true']);
    expect(json.code, json.stderr).toBe(0);
    expectRedacted(json.stderr);
    const badPrefix = await tenure(box, ['status', '--store', `${url}&prefix=no-dashes!`]);
    expect(badPrefix.code).toBe(2);
    expect(badPrefix.stderr).toMatch(/tablePrefix/);
    expectRedacted(badPrefix.stderr);
  });

  it('mysql: a user with a password', async () => {
    const box = sandbox();
    const user = `tenure_${myDb.name.slice(-8)}`;
    await mysqlAdmin(async (c) => {
      await c.query(`CREATE USER '${user}'@'%' IDENTIFIED BY '${SECRET}'`);
      await c.query(`GRANT ALL ON ${myDb.name}.* TO '${user}'@'%'`);
    });
    try {
      const host = new URL(myDb.url).host;
      for (const url of [`mysql://${user}:${SECRET}@${host}/${myDb.name}`]) {
        const run = await tenure(box, ['run', '--group', 'g', '--once', '--store', url, '--', 'true']);
        expect(run.code, run.stderr).toBe(0);
        expect(run.stderr).toMatch(/campaigning .*store mysql:\/\//);
        expectRedacted(run.stderr);
        const badPrefix = await tenure(box, ['status', '--store', `${url}${url.includes('?') ? '&' : '?'}prefix=a.b`]);
        expect(badPrefix.code, badPrefix.stderr).toBe(2);
        expectRedacted(badPrefix.stderr);
      }
    } finally {
      await mysqlAdmin((c) => c.query(`DROP USER IF EXISTS '${user}'@'%'`));
    }
  });

  it('redis: campaigning line with the password in the userinfo and in the query', async () => {
    const box = sandbox();
    const prefix = `tenure-redaction-${process.pid}-${Date.now()}:`;
    for (const url of [`redis://:${SECRET}@127.0.0.1:6379/?prefix=${prefix}`, `redis://127.0.0.1:6379/?password=${SECRET}&prefix=${prefix}`]) {
      const run = await tenure(box, ['run', '--group', 'g', '--once', '--json', '--store', url, '--', 'true']);
      // The server has no password: ioredis warns and goes on.
      expect(run.code, run.stderr).toBe(0);
      expectRedacted(run.stderr);
    }
  });

  it('postgres, mysql, redis, etcd: "cannot reach store" and the error lines', async () => {
    const box = sandbox();
    const port = await freePort();
    for (const base of [`postgres://127.0.0.1:${port}/db`, `mysql://127.0.0.1:${port}/db`, `redis://127.0.0.1:${port}/`, `etcd://127.0.0.1:${port}`]) {
      const url = base.startsWith('etcd') ? `etcd://root:${SECRET}@127.0.0.1:${port}` : withSecrets(base);
      const run = await tenure(box, ['run', '--group', 'g', '--once', '--store', url, '--', 'true'], { timeoutMs: 60_000 });
      expect(run.code, `${base}: ${run.stderr}`).toBe(1);
      expect(run.stderr).toMatch(/cannot (reach|open) store/);
      expectRedacted(run.stderr);
      const status = await tenure(box, ['status', '--store', url], { timeoutMs: 60_000 });
      expect(status.code, `${base}: ${status.stderr}`).toBe(1);
      expect(status.stderr).not.toContain(SECRET);
    }
  });

  it('bad URLs (exit 2) quote the URL without its credentials', async () => {
    const box = sandbox();
    const bad = [
      `postgres://u:${SECRET}@[bad/x`,
      `redis://:${SECRET}@[bad`,
      `etcd://u:${SECRET}@h:notaport`,
      `redlock://:${SECRET}@a:1,b:99999`,
      `mysql://u:${SECRET}@h/db?handover=on`,
      // A ?prefix= the store refuses is bad input too (exit 2), whatever the store.
      `etcd://root:${SECRET}@127.0.0.1:1?prefix=%01`,
      // An option the store does not know, even one named like a password, is refused, not ignored.
      `etcd://root:${SECRET}@127.0.0.1:1?password=${SECRET}`,
      `sqlite:./t.db?password=${SECRET}`,
      `redis://:${SECRET}@127.0.0.1:1/?prefix=${'x'.repeat(300)}`,
    ];
    for (const url of bad) {
      const r = await tenure(box, ['lock', 'L', '--wait', '1s', '--store', url, '--', 'true']);
      expect(r.code, `${url}: ${r.stderr}`).toBe(2);
      expect(r.stderr).not.toContain(SECRET);
    }
  });

  it('redlock: a lock that no server grants', async () => {
    const box = sandbox();
    const ports = [await freePort(), await freePort(), await freePort()];
    const url = `redlock://:${SECRET}@${ports.map((p) => `127.0.0.1:${p}`).join(',')}?password=${SECRET}`;
    const r = await tenure(box, ['lock', 'L', '--wait', '1s', '--json', '--store', url, '--', 'true'], { timeoutMs: 60_000 });
    expect(r.code).not.toBe(0);
    expect(r.stderr).not.toContain(SECRET);
  });
});
