/**
 * Shared by the HTTP fencing tests: one SQL database per dialect (with tenure's lease store in
 * it, to issue real terms), a fenced service on node:http, Express or Fastify writing one table
 * through the guard, and a raw HTTP client that can send what fetch refuses to (a repeated header).
 */
import { mkdtempSync, rmSync } from 'node:fs';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { openTestSqlite } from '../fixtures/sqlite-compat.js';
import express from 'express';
import Fastify from 'fastify';
import mysql from 'mysql2/promise';
import pg from 'pg';
import type { Store } from '../../src/core/index.js';
import { httpFence, mysqlDialect, postgresDialect, sqliteDialect } from '../../src/fencing/index.js';
import type { HttpFence, MysqlExecutor, PgQueryable, SqlDialect, SqliteDatabase } from '../../src/fencing/index.js';
import { MysqlStore } from '../../src/stores/mysql/index.js';
import { PostgresStore } from '../../src/stores/postgres/index.js';
import { SqliteStore } from '../../src/stores/sqlite/index.js';
import { createMysqlDatabase, createPostgresDatabase } from '../stores/sql-servers.js';

/** One dialect on a fresh database: the lease store, transactions, the app's tables. */
export interface Db<Tx> {
  readonly name: string;
  /** The database as a tenure store URL (for child processes). */
  readonly storeUrl: string;
  readonly dialect: SqlDialect<Tx>;
  readonly store: Store;
  /** A statement outside any transaction (setup, reads). */
  exec(sql: string, values?: unknown[]): Promise<void>;
  rows(sql: string, values?: unknown[]): Promise<Record<string, unknown>[]>;
  /** Run `fn` in a transaction on one connection: commit if it resolves, roll back if it throws. */
  inTx<T>(fn: (tx: Tx) => Promise<T>): Promise<T>;
  /** The same, the transaction begun by `begin` (the guard's begin(tx): BEGIN and the check together). */
  inBegunTx<T>(begin: (tx: Tx) => Promise<void>, fn: (tx: Tx) => Promise<T>): Promise<T>;
  /** A statement inside `fn`'s transaction. */
  txExec(tx: Tx, sql: string, values: unknown[]): Promise<void>;
  /** A runner of statements outside transactions, as the guard sees a pool (to prove it is refused). */
  readonly pool: Tx;
  /** An auto-increment primary key column type. */
  readonly serial: string;
  close(): Promise<void>;
}

export type AnyDb = Db<PgQueryable> | Db<MysqlExecutor> | Db<SqliteDatabase>;

export const databases: Record<string, () => Promise<AnyDb>> = {
  postgres: async () => {
    const db = await createPostgresDatabase();
    const pool = new pg.Pool({ connectionString: db.url, max: 12 });
    pool.on('error', () => {});
    const store = new PostgresStore({ pool });
    await store.list();
    const h: Db<PgQueryable> = {
      name: 'postgres',
      storeUrl: db.url,
      dialect: postgresDialect,
      store,
      pool,
      serial: 'bigserial PRIMARY KEY',
      exec: async (sql, values) => void (await pool.query(sql, values)),
      rows: async (sql, values) => (await pool.query(sql, values)).rows,
      inTx: async (fn) => {
        const c = await pool.connect();
        try {
          await c.query('BEGIN');
          const r = await fn(c);
          await c.query('COMMIT');
          return r;
        } catch (err) {
          await c.query('ROLLBACK').catch(() => {});
          throw err;
        } finally {
          c.release();
        }
      },
      inBegunTx: async (begin, fn) => {
        const c = await pool.connect();
        try {
          await begin(c);
          const r = await fn(c);
          await c.query('COMMIT');
          return r;
        } catch (err) {
          await c.query('ROLLBACK').catch(() => {});
          throw err;
        } finally {
          c.release();
        }
      },
      txExec: async (tx, sql, values) => void (await tx.query(sql, values)),
      close: async () => {
        await store.close();
        await pool.end();
        await db.drop();
      },
    };
    return h;
  },
  mysql: async () => {
    const db = await createMysqlDatabase();
    const pool = mysql.createPool({ uri: db.url, connectionLimit: 12 });
    const store = new MysqlStore({ pool });
    await store.list();
    const h: Db<MysqlExecutor> = {
      name: 'mysql',
      storeUrl: db.url,
      dialect: mysqlDialect,
      store,
      pool,
      serial: 'BIGINT AUTO_INCREMENT PRIMARY KEY',
      exec: async (sql, values) => void (await pool.query(sql, values)),
      rows: async (sql, values) => (await pool.query(sql, values))[0] as Record<string, unknown>[],
      inTx: async (fn) => {
        const c = await pool.getConnection();
        try {
          await c.beginTransaction();
          const r = await fn(c);
          await c.commit();
          return r;
        } catch (err) {
          await c.rollback().catch(() => {});
          throw err;
        } finally {
          c.release();
        }
      },
      inBegunTx: async (begin, fn) => {
        const c = await pool.getConnection();
        try {
          await begin(c);
          const r = await fn(c);
          await c.commit();
          return r;
        } catch (err) {
          await c.rollback().catch(() => {});
          throw err;
        } finally {
          c.release();
        }
      },
      txExec: async (tx, sql, values) => void (await tx.execute(sql, values as never)),
      close: async () => {
        await store.close();
        await pool.end();
        await db.drop();
      },
    };
    return h;
  },
  sqlite: async () => {
    const dir = mkdtempSync(join(tmpdir(), 'tenure-http-'));
    const path = join(dir, 'app.db');
    const store = new SqliteStore({ path });
    await store.list();
    const conn = openTestSqlite(path);
    conn.pragma('busy_timeout = 5000');
    const h: Db<SqliteDatabase> = {
      name: 'sqlite',
      storeUrl: `sqlite:${path}`,
      dialect: sqliteDialect,
      store,
      pool: conn,
      serial: 'INTEGER PRIMARY KEY AUTOINCREMENT',
      exec: async (sql, values) => void conn.prepare(sql).run(...(values ?? [])),
      rows: async (sql, values) => conn.prepare(sql).all(...(values ?? [])) as Record<string, unknown>[],
      // One connection: BEGIN IMMEDIATE takes the write lock for the whole check-and-write.
      inTx: async (fn) => {
        conn.exec('BEGIN IMMEDIATE');
        try {
          const r = await fn(conn);
          conn.exec('COMMIT');
          return r;
        } catch (err) {
          if (conn.inTransaction) conn.exec('ROLLBACK');
          throw err;
        }
      },
      inBegunTx: async (begin, fn) => {
        try {
          await begin(conn);
          const r = await fn(conn);
          conn.exec('COMMIT');
          return r;
        } catch (err) {
          if (conn.inTransaction) conn.exec('ROLLBACK');
          throw err;
        }
      },
      txExec: async (tx, sql, values) => void tx.prepare(sql).run(...values),
      close: async () => {
        conn.close();
        await store.close();
        rmSync(dir, { recursive: true, force: true });
      },
    };
    return h;
  },
};

/** Issue terms of `group` up to `upTo` through the lease store (acquire and release). */
export async function issue(store: Store, group: string, upTo: number): Promise<void> {
  for (let i = 0; ; i++) {
    const { lease } = await store.acquire(group, `issuer${i}~1`, 60_000);
    await store.release(group, lease.owner, lease.term);
    if (lease.term >= upTo) return;
  }
}

/** The app's tables: `items` (one row per id, its value and the term that wrote it) and `writes` (every applied write, in order). */
export async function createAppTables(db: AnyDb): Promise<void> {
  await db.exec('CREATE TABLE items (id INTEGER PRIMARY KEY, value VARCHAR(200) NOT NULL, term BIGINT NOT NULL)');
  await db.exec(`CREATE TABLE writes (seq ${db.serial}, item INTEGER NOT NULL, term BIGINT NOT NULL, value VARCHAR(200) NOT NULL)`);
}

/** The app's write: upsert item `id`, append to `writes`. The placeholders are the dialect's. */
async function write<Tx>(db: Db<Tx>, tx: Tx, id: number, value: string, term: number): Promise<void> {
  const p = (i: number): string => db.dialect.placeholder(i);
  const upsert =
    db.name === 'mysql'
      ? `INSERT INTO items (id, value, term) VALUES (?, ?, ?) ON DUPLICATE KEY UPDATE value = VALUES(value), term = VALUES(term)`
      : `INSERT INTO items (id, value, term) VALUES (${p(1)}, ${p(2)}, ${p(3)}) ON CONFLICT (id) DO UPDATE SET value = excluded.value, term = excluded.term`;
  await db.txExec(tx, upsert, [id, value, term]);
  await db.txExec(tx, `INSERT INTO writes (item, term, value) VALUES (${p(1)}, ${p(2)}, ${p(3)})`, [id, term, value]);
}

/** A running fenced service: PUT /items/:id with a JSON body `{ "value": … }`. */
export interface Service {
  readonly url: string;
  readonly fence: HttpFence<unknown>;
  close(): Promise<void>;
}

export type Framework = 'node:http' | 'express' | 'fastify';
export const frameworks: Framework[] = ['node:http', 'express', 'fastify'];

/**
 * The service on `framework`: the guard's check and the app's write in one transaction. `GET
 * /health` is unfenced (no token required), `PUT /optional/:id` takes a token if one comes.
 */
export async function startService<Tx>(framework: Framework, db: Db<Tx>, group: string): Promise<Service> {
  const fence = httpFence<Tx>({ dialect: db.dialect, group, required: (req) => !isOptionalRoute(req) && !isBoomRoute(req), onError: () => {} });
  await fence.ensureTable(db.pool);
  // node:http begins with the guard (guard.begin: BEGIN and the check together); Express and Fastify check in a transaction begun by hand.
  const apply = async (guard: { check(tx: Tx): Promise<void>; begin(tx: Tx): Promise<void>; token: { term: number } }, id: number, value: string): Promise<{ id: number; term: number }> => {
    const work = async (tx: Tx): Promise<{ id: number; term: number }> => {
      await write(db, tx, id, value, guard.token.term);
      return { id, term: guard.token.term };
    };
    if (framework === 'node:http') return db.inBegunTx((tx) => guard.begin(tx), work);
    return db.inTx(async (tx) => {
      await guard.check(tx);
      return work(tx);
    });
  };
  if (framework === 'node:http') {
    const server = http.createServer(
      fence.node(async (req, res) => {
        const m = /^\/(items|optional)\/(\d+)$/.exec(req.url ?? '');
        if (req.method === 'GET' && req.url === '/health') return void res.end('ok');
        if (req.url === '/boom') throw new Error('kaboom');
        if (req.method !== 'PUT' || !m) {
          res.statusCode = 404;
          return void res.end();
        }
        const body = JSON.parse(await readBody(req)) as { value: string };
        if (!req.fence) return void res.end(JSON.stringify({ unfenced: true }));
        const out = await apply(req.fence, Number(m[2]), body.value);
        res.setHeader('content-type', 'application/json');
        res.end(JSON.stringify(out));
      }),
    );
    return listen(server, fence as HttpFence<unknown>);
  }
  if (framework === 'express') {
    const app = express();
    app.use(express.json());
    app.get('/health', (_req, res) => void res.send('ok'));
    app.get('/boom', async () => {
      throw new Error('kaboom');
    });
    app.put(['/items/:id', '/optional/:id'], fence.express(), async (req, res) => {
      const guard = (req as { fence?: unknown }).fence === null ? null : fence.guard(req);
      if (!guard) return void res.json({ unfenced: true });
      res.json(await apply(guard, Number(req.params.id), (req.body as { value: string }).value));
    });
    app.use(fence.expressErrors());
    return listen(http.createServer(app), fence as HttpFence<unknown>);
  }
  const app = Fastify();
  await app.register(fence.fastify);
  app.get('/health', async () => 'ok');
  app.get('/boom', async () => {
    throw new Error('kaboom');
  });
  for (const path of ['/items/:id', '/optional/:id']) {
    app.put(path, async (request) => {
      const { fence: guard } = request as unknown as { fence: ReturnType<typeof fence.guard> | null };
      if (!guard) return { unfenced: true };
      return apply(guard, Number((request.params as { id: string }).id), (request.body as { value: string }).value);
    });
  }
  await app.listen({ port: 0, host: '127.0.0.1' });
  const port = (app.server.address() as AddressInfo).port;
  return { url: `http://127.0.0.1:${port}`, fence: fence as HttpFence<unknown>, close: () => app.close() };
}

function isBoomRoute(req: object): boolean {
  return ((req as { url?: string }).url ?? '') === '/boom';
}

function isOptionalRoute(req: object): boolean {
  return ((req as { url?: string }).url ?? '').startsWith('/optional/');
}

function readBody(req: http.IncomingMessage): Promise<string> {
  return new Promise((resolve, reject) => {
    let s = '';
    req.setEncoding('utf8');
    req.on('data', (c: string) => (s += c));
    req.on('end', () => resolve(s));
    req.on('error', reject);
  });
}

async function listen(server: http.Server, fence: HttpFence<unknown>): Promise<Service> {
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as AddressInfo).port;
  return {
    url: `http://127.0.0.1:${port}`,
    fence,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

export interface RawResponse {
  readonly status: number;
  readonly contentType: string;
  readonly text: string;
  json(): Record<string, unknown>;
}

/** A request with full control of the headers: an array value is sent as a repeated header. */
export function send(url: string, method: string, headers: Record<string, string | string[]>, body?: string): Promise<RawResponse> {
  return new Promise((resolve, reject) => {
    // A connection per request: after a 431 the server closes its socket, and a pooled client would reuse it.
    const req = http.request(url, { agent: false, method, headers: { ...(body !== undefined ? { 'content-type': 'application/json' } : {}), ...headers } }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (c: string) => (text += c));
      res.on('end', () =>
        resolve({ status: res.statusCode ?? 0, contentType: String(res.headers['content-type'] ?? ''), text, json: () => JSON.parse(text) as Record<string, unknown> }),
      );
    });
    req.on('error', reject);
    req.end(body);
  });
}
