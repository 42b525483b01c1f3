/**
 * Every store tenure has, as the contract and chaos suites run them. A new backend joins by one
 * line here: a name and a factory that opens a fresh, isolated store.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Store } from '../../src/core/index.js';
import { MemoryStore } from '../../src/stores/memory/index.js';
import { SqliteStore } from '../../src/stores/sqlite/index.js';
import { PostgresStore } from '../../src/stores/postgres/index.js';
import { MysqlStore } from '../../src/stores/mysql/index.js';
import { createMysqlDatabase, createPostgresDatabase } from '../stores/sql-servers.js';
import { redisBackend } from '../stores/redis-backend.js';
import { etcdBackend } from '../stores/etcd-backend.js';
import { zookeeperBackend } from '../stores/zookeeper-backend.js';
import { azureBlobBackend } from '../stores/azure-backend.js';

/**
 * The optional parts of the Store interface a backend has: `true`, or why it has not (shown in
 * the test report beside each skipped scenario). The contract checks the declaration against the
 * store it opens, so it cannot drift; the per-store table in README.md lists the same.
 */
export interface Capabilities {
  /** `store.renewMany`: batched renewal in one round trip. */
  readonly renewMany: true | string;
  /** `store.watch`: push of lease changes. */
  readonly watch: true | string;
  /** `store.watchStream`: push of a stream's new head after appends. */
  readonly streamPush: true | string;
  /** `store.streamHead`: a stream's head with the store's own time (the clock of `appendedAt`). */
  readonly streamClock: true | string;
}

export interface Backend {
  readonly name: string;
  readonly capabilities: Capabilities;
  /** Open a fresh store with no leases or streams; `cleanup` removes whatever it made. */
  open(): Promise<{ store: Store; cleanup: () => Promise<void> }>;
  /**
   * The shortest TTL the store expires on time, ms (default: none beyond the 10 ms floor).
   * Scenarios that wait for a lease to expire use at least this TTL. etcd leases are whole
   * seconds with a minimum of 1 s, so a 50 ms lease cannot lapse in 80 ms there.
   */
  readonly minTtlMs?: number;
  /** How long past its TTL a lease may still read as live, ms (default 0; etcd revokes on a 500 ms cycle). */
  readonly expiryLagMs?: number;
  /**
   * The TTL the store grants for a requested one, ms (default: the requested TTL). An Azure blob
   * lease lasts whole seconds from 15 to 60, so azblob:// rounds a TTL up; `Lease.ttlMs` reports
   * the granted TTL.
   */
  readonly grantedTtlMs?: (ttlMs: number) => number;
}

function tempDir(prefix: string): { dir: string; remove: () => void } {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  return { dir, remove: () => rmSync(dir, { recursive: true, force: true }) };
}

export const backends: Backend[] = [
  { name: 'memory', capabilities: { renewMany: true, watch: true, streamPush: true, streamClock: true }, open: async () => ({ store: new MemoryStore(), cleanup: async () => {} }) },
  {
    name: 'sqlite',
    capabilities: { renewMany: true, watch: true, streamPush: true, streamClock: true },
    open: async () => {
      const t = tempDir('tenure-contract-');
      const store = new SqliteStore({ path: join(t.dir, 'tenure.db') });
      return { store, cleanup: async () => { await store.close(); t.remove(); } };
    },
  },
  { name: 'postgres', capabilities: { renewMany: true, watch: true, streamPush: true, streamClock: true }, open: async () => { const db = await createPostgresDatabase(); const store = new PostgresStore({ url: db.url }); return { store, cleanup: async () => { await store.close(); await db.drop(); } }; } },
  {
    name: 'mysql',
    capabilities: {
      renewMany: true,
      watch: true,
      streamPush: 'MySQL has no push; a Follower polls readStream',
      streamClock: true,
    },
    open: async () => { const db = await createMysqlDatabase(); const store = new MysqlStore({ url: db.url }); return { store, cleanup: async () => { await store.close(); await db.drop(); } }; } },
  redisBackend,
  etcdBackend,
  zookeeperBackend,
  azureBlobBackend,
];
