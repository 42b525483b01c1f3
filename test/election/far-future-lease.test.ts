/**
 * A lease whose expiry is more than 2^31 ms away (a tampered row, a Redis lease another client set
 * with a huge PX) must not make a follower poll in a tight loop: Node fires a longer timer at
 * once, with a TimeoutOverflowWarning. A candidate asks again at most once per TTL of its own.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, beforeEach, describe, expect, it } from 'vitest';
import { Redis } from 'ioredis';
import type { Store } from '../../src/core/index.js';
import { LeaderElector } from '../../src/election/index.js';
import { SqliteStore } from '../../src/stores/sqlite/index.js';
import { openDatabase } from '../../src/stores/sqlite/driver.js';
import { redisBackend, testRedisUrl } from '../stores/redis-backend.js';
import type { RedisStore } from '../../src/stores/redis/index.js';
import { EtcdStore } from '../../src/stores/etcd/index.js';
import { etcdInstalled, sharedEtcd } from '../stores/etcd-harness.js';
import { randomBytes } from 'node:crypto';

const FAR_MS = 2 ** 40; // about 35 years
const TTL_MS = 500;
const WATCH_MS = 2500;

const warnings: string[] = [];
const onWarning = (w: Error): void => {
  warnings.push(`${w.name}: ${w.message}`);
};
beforeEach(() => {
  warnings.length = 0;
  process.on('warning', onWarning);
});
afterEach(() => {
  process.off('warning', onWarning);
});

const cleanups: (() => Promise<void>)[] = [];
afterAll(async () => {
  for (const c of cleanups) await c().catch(() => {});
});

/** Run a follower for WATCH_MS against a lease someone else holds far into the future; count its acquires. */
async function follow(store: Store, group: string): Promise<{ acquires: number; leader: boolean; remainingMs: number }> {
  let acquires = 0;
  const counted: Store = Object.create(store) as Store;
  counted.acquire = (...args) => {
    acquires++;
    return store.acquire(...args);
  };
  const elector = new LeaderElector({ store: counted, group, ttlMs: TTL_MS });
  elector.start();
  await new Promise((r) => setTimeout(r, WATCH_MS));
  const leader = elector.isLeader;
  await elector.stop();
  const lease = await store.read(group);
  return { acquires, leader, remainingMs: lease?.remainingMs ?? 0 };
}

describe('a follower facing a lease that ends more than 2^31 ms from now', () => {
  it('SQLite (a tampered row): polls at most about once per TTL, no TimeoutOverflowWarning', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'tenure-far-'));
    const path = join(dir, 'tenure.db');
    const store = new SqliteStore({ path });
    cleanups.push(async () => {
      await store.close();
      rmSync(dir, { recursive: true, force: true });
    });
    await store.acquire('far', 'other~1', 1000);
    const { db } = openDatabase(path);
    db.prepare(`UPDATE tenure_leases SET expires_at = expires_at + ${FAR_MS} WHERE name = 'far'`).run();
    db.close();
    const r = await follow(store, 'far');
    expect(r.leader).toBe(false);
    expect(r.remainingMs).toBeGreaterThan(2 ** 31);
    expect(r.acquires).toBeGreaterThanOrEqual(2);
    expect(r.acquires).toBeLessThanOrEqual(Math.ceil(WATCH_MS / TTL_MS) + 2);
    expect(warnings.filter((w) => w.includes('TimeoutOverflow'))).toEqual([]);
  });

  it('Redis (a lease another client set with a huge PX): polls at most about once per TTL, no TimeoutOverflowWarning', async () => {
    const { store, cleanup } = await redisBackend.open();
    cleanups.push(cleanup);
    const prefix = (store as RedisStore).keyPrefix;
    const admin = new Redis(testRedisUrl);
    cleanups.push(async () => void admin.disconnect());
    await admin.set(`${prefix}term:far`, '1');
    await admin.set(`${prefix}lease:far`, 'other~1\n1\n1000\n{}', 'PX', FAR_MS);
    const r = await follow(store, 'far');
    expect(r.leader).toBe(false);
    expect(r.remainingMs).toBeGreaterThan(2 ** 31);
    expect(r.acquires).toBeGreaterThanOrEqual(2);
    expect(r.acquires).toBeLessThanOrEqual(Math.ceil(WATCH_MS / TTL_MS) + 2);
    expect(warnings.filter((w) => w.includes('TimeoutOverflow'))).toEqual([]);
  });

  it.skipIf(!etcdInstalled())('etcd (a key under an etcd lease another client granted for 35 days): polls at most about once per TTL, no TimeoutOverflowWarning', async () => {
    const cluster = await sharedEtcd();
    const namespace = `far-${randomBytes(6).toString('hex')}/`;
    const store = new EtcdStore({ hosts: cluster.hosts, namespace });
    cleanups.push(async () => {
      await store.client.delete().prefix(namespace);
      await store.close();
    });
    // A Go-style candidate key, `NAME/<lease id in hex>`, under a lease of 3,000,000 s.
    const lease = store.client.lease(3_000_000, { autoKeepAlive: false });
    const id = await lease.grant();
    cleanups.push(async () => void (await lease.revoke().catch(() => {})));
    await lease.put(`${namespace}far/${BigInt(id).toString(16)}`).value('someone else');
    const r = await follow(store, 'far');
    expect(r.leader).toBe(false);
    expect(r.remainingMs).toBeGreaterThan(2 ** 31);
    expect(r.acquires).toBeGreaterThanOrEqual(2);
    expect(r.acquires).toBeLessThanOrEqual(Math.ceil(WATCH_MS / TTL_MS) + 2);
    expect(warnings.filter((w) => w.includes('TimeoutOverflow'))).toEqual([]);
  });
});
