/**
 * The SQL servers the tests use, and a fresh database per store instance (created on open,
 * dropped on cleanup), so every test isolates its data. Override the admin URLs with
 * TENURE_TEST_POSTGRES_URL / TENURE_TEST_MYSQL_URL.
 */
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import mysql from 'mysql2/promise';

export const PG_ADMIN_URL = process.env.TENURE_TEST_POSTGRES_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres';
export const MYSQL_ADMIN_URL = process.env.TENURE_TEST_MYSQL_URL ?? 'mysql://root@127.0.0.1:3306';

export interface TestDatabase {
  /** A URL for the new database. */
  readonly url: string;
  readonly name: string;
  drop(): Promise<void>;
}

function dbName(): string {
  return `tenure_test_${randomBytes(6).toString('hex')}`;
}

function withDatabase(adminUrl: string, name: string): string {
  const u = new URL(adminUrl);
  u.pathname = `/${name}`;
  return u.toString();
}

let pgAdmin: pg.Pool | null = null;
function pgAdminPool(): pg.Pool {
  if (!pgAdmin) {
    pgAdmin = new pg.Pool({ connectionString: PG_ADMIN_URL, max: 2, allowExitOnIdle: true, idleTimeoutMillis: 1000 });
    pgAdmin.on('error', () => {}); // an idle admin connection lost with the server is simply replaced
  }
  return pgAdmin;
}

export async function createPostgresDatabase(): Promise<TestDatabase> {
  const name = dbName();
  // The name is ours (hex), never user text; CREATE DATABASE takes no bind parameters.
  await pgAdminPool().query(`CREATE DATABASE ${name}`);
  return {
    url: withDatabase(PG_ADMIN_URL, name),
    name,
    drop: async () => {
      await pgAdminPool().query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
    },
  };
}

async function mysqlAdmin<T>(fn: (c: mysql.Connection) => Promise<T>): Promise<T> {
  const c = await mysql.createConnection({ uri: MYSQL_ADMIN_URL });
  try {
    return await fn(c);
  } finally {
    await c.end();
  }
}

export async function createMysqlDatabase(): Promise<TestDatabase> {
  const name = dbName();
  await mysqlAdmin((c) => c.query(`CREATE DATABASE ${name}`));
  return {
    url: withDatabase(MYSQL_ADMIN_URL, name),
    name,
    drop: async () => {
      await mysqlAdmin((c) => c.query(`DROP DATABASE IF EXISTS ${name}`));
    },
  };
}
