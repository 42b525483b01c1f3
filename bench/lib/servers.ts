/**
 * Where the benchmarks' stores live: a fresh database per run on the machine's PostgreSQL and
 * MariaDB (dropped afterwards), a fresh key prefix on its Redis (deleted afterwards), and one
 * private single-member etcd (started on first use, stopped by `stopServers()` at the end of the
 * invocation) that every etcd benchmark shares, so they compare on the same server.
 *
 * The admin URLs are the tests' (TENURE_TEST_POSTGRES_URL, TENURE_TEST_MYSQL_URL,
 * TENURE_TEST_REDIS_URL override them).
 */
import { randomBytes } from 'node:crypto';
import { Redis } from 'ioredis';
import { deleteKeys, testRedisUrl } from '../../test/stores/redis-backend.js';
import { startEtcd } from '../../test/stores/etcd-harness.js';
import type { EtcdCluster } from '../../test/stores/etcd-harness.js';
import { createMysqlDatabase, createPostgresDatabase } from '../../test/stores/sql-servers.js';

export interface Prepared {
  /** The campaigner's first argument: a store URL. */
  readonly storeArg: string;
  cleanup(): Promise<void>;
}

export { testRedisUrl as redisUrl };

export function randomTag(): string {
  return randomBytes(4).toString('hex');
}

/** A new, empty PostgreSQL database; dropped on cleanup. */
export async function freshPostgres(): Promise<Prepared & { readonly url: string }> {
  const db = await createPostgresDatabase();
  return { storeArg: db.url, url: db.url, cleanup: () => db.drop() };
}

/** A new, empty MariaDB/MySQL database; dropped on cleanup. */
export async function freshMysql(): Promise<Prepared & { readonly url: string }> {
  const db = await createMysqlDatabase();
  return { storeArg: db.url, url: db.url, cleanup: () => db.drop() };
}

/** A fresh key prefix on the shared Redis; its keys are deleted on cleanup. */
export async function freshRedis(): Promise<Prepared & { readonly keyPrefix: string }> {
  const keyPrefix = `{tenure-bench-${randomTag()}}:`;
  const url = new URL(testRedisUrl);
  url.searchParams.set('prefix', keyPrefix);
  return {
    storeArg: url.toString(),
    keyPrefix,
    cleanup: async () => {
      const admin = new Redis(testRedisUrl);
      try {
        await deleteKeys(admin, keyPrefix);
      } finally {
        admin.disconnect();
      }
    },
  };
}

let etcd: Promise<EtcdCluster> | null = null;

/** The invocation's private etcd (one member, tmpfs data dir), started on first use. */
export function privateEtcd(): Promise<EtcdCluster> {
  etcd ??= startEtcd(1);
  return etcd;
}

/** A fresh key namespace on the private etcd (`etcd://host?prefix=NS`), with the namespace. */
export async function freshEtcd(): Promise<Prepared & { readonly namespace: string; readonly hosts: readonly string[] }> {
  const cluster = await privateEtcd();
  const namespace = `bench-${randomTag()}/`;
  // Keys are left behind: the private etcd and its data directory go away at the end of the run.
  return { storeArg: `${cluster.url}?prefix=${encodeURIComponent(namespace)}`, namespace, hosts: cluster.hosts, cleanup: async () => {} };
}

/** Stop what was started for this invocation. */
export async function stopServers(): Promise<void> {
  const started = etcd;
  etcd = null;
  if (started) await (await started).stop().catch(() => {});
}
