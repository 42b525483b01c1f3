/**
 * Preferred-leader hand-over (`elector.transferTo(nodeId)`) on real stores, each candidate with
 * its own store client (its own connection): the named node wins every time among three
 * candidates, nobody else leads in between, and a named node that is gone does not leave the
 * group leaderless beyond the bound.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { InvalidArgumentError, NotLeaderError, TransferError } from '../../src/core/index.js';
import type { Store } from '../../src/core/index.js';
import { LeaderElector } from '../../src/election/index.js';
import { EtcdStore } from '../../src/stores/etcd/index.js';
import { MysqlStore } from '../../src/stores/mysql/index.js';
import { PostgresStore } from '../../src/stores/postgres/index.js';
import { SqliteStore } from '../../src/stores/sqlite/index.js';
import { startEtcd } from '../stores/etcd-harness.js';
import { createMysqlDatabase, createPostgresDatabase } from '../stores/sql-servers.js';

/** A store backend: `client()` opens one more client of the same, fresh, database. */
interface Place {
  client(): Store;
  drop(): Promise<void>;
}

const places: { name: string; open(): Promise<Place> }[] = [
  {
    name: 'sqlite',
    open: async () => {
      const dir = mkdtempSync(join(tmpdir(), 'tenure-transfer-'));
      return { client: () => new SqliteStore({ path: join(dir, 'tenure.db') }), drop: async () => rmSync(dir, { recursive: true, force: true }) };
    },
  },
  {
    name: 'postgres',
    open: async () => {
      const db = await createPostgresDatabase();
      return { client: () => new PostgresStore({ url: db.url }), drop: () => db.drop() };
    },
  },
  {
    // No push: candidates find the release at their next poll.
    name: 'mysql',
    open: async () => {
      const db = await createMysqlDatabase();
      return { client: () => new MysqlStore({ url: db.url }), drop: () => db.drop() };
    },
  },
  {
    // Hand-over in the release (the waiting room): the release must not give the lease to the
    // oldest waiter while the hint names another node.
    name: 'etcd',
    open: async () => {
      const cluster = await startEtcd(1);
      return { client: () => new EtcdStore({ hosts: cluster.hosts }), drop: () => cluster.stop() };
    },
  },
];

// The default hand-over bound is 3 TTLs. The 6-of-6 test failed on SQLite twice in CI (once on
// Node 24, once on Node 20: 'b did not take over xfer within 6000 ms'). The cause was the SQLite
// watch: a non-named winner's whole take-and-give-back fell between two of the named node's polls,
// which then saw the name free both times and told nothing, so the named node, having lost the
// race to that winner, slept out the winner's TTL; three such misses in a round passed the bound
// (p50 650 ms, p90 2 s, max 4 s per hand-over on an idle machine). The watch now tells a term that
// moved while the name looked free as a release (sqlite-store.test.ts); since then p50 44 ms,
// max 643 ms (a named node still holding back after its resign or a give-back in the round
// before, at most a renew interval). Since a held-back node reads the hint when told of a release
// (leader-elector.test.ts, "transferTo on a virtual clock"): p50 22 ms, max 44 ms on SQLite.
const ttlMs = 2000;

describe.each(places)('transferTo on $name', ({ open }) => {
  let teardown: (() => Promise<void>)[] = [];
  afterEach(async () => {
    for (const t of teardown.reverse()) await t().catch(() => {});
    teardown = [];
  });

  /** Three candidates a, b, c for `group`, each with its own client; every `elected` is logged. */
  async function cluster(group: string) {
    const place = await open();
    teardown.push(() => place.drop());
    const elected: { id: string; term: number }[] = [];
    const nodes = ['a', 'b', 'c'].map((id) => {
      const store = place.client();
      const elector = new LeaderElector({ store, group, id, ttlMs, retryMs: 20 });
      elector.on('elected', ({ term }) => elected.push({ id, term }));
      teardown.push(async () => {
        await elector.stop();
        await store.close();
      });
      elector.start();
      return { id, elector };
    });
    const leader = async (): Promise<(typeof nodes)[number]> => {
      for (let i = 0; i < 1000; i++) {
        const l = nodes.find((n) => n.elector.isLeader);
        if (l) return l;
        await new Promise((r) => setTimeout(r, 10));
      }
      throw new Error('no leader within 10 s');
    };
    return { nodes, elected, leader, place };
  }

  it('the named node wins 6 of 6 hand-overs among 3 candidates, and nobody else leads in between', async () => {
    const { nodes, elected, leader } = await cluster('xfer');
    let from = await leader();
    for (let round = 0; round < 6; round++) {
      const others = nodes.filter((n) => n !== from);
      const to = others[round % 2]!;
      const before = elected.length;
      const lease = await from.elector.transferTo(to.id);
      expect(lease.owner).toBe(to.elector.owner);
      // The named node's elector leads (it may still be reading the hint as the store shows it holder).
      expect(await leader()).toBe(to);
      expect(elected.slice(before).map((e) => e.id)).toEqual([to.id]);
      expect(from.elector.isLeader).toBe(false);
      from = to;
    }
  });

  it('a named node that is gone: transferTo rejects at the bound and another node leads soon after', async () => {
    const { nodes, leader } = await cluster('xfer-dead');
    const from = await leader();
    const timeoutMs = 1500;
    const started = performance.now();
    const err = await from.elector.transferTo('ghost', { timeoutMs }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(TransferError);
    expect(err).toMatchObject({ code: 'TRANSFER_FAILED', reason: 'timeout', target: 'ghost', group: 'xfer-dead' });
    expect(performance.now() - started).toBeGreaterThanOrEqual(timeoutMs - 50);
    const next = await leader();
    expect(nodes).toContain(next);
    // Leaderless at most the bound plus a candidate's poll (a TTL) and slack for a loaded machine.
    expect(performance.now() - started).toBeLessThan(timeoutMs + ttlMs + 5000);
  });

  it('refuses: not the leader, its own id, a bad id or bound, and a hint another leader still holds', async () => {
    const { nodes, leader, place } = await cluster('xfer-bad');
    const from = await leader();
    const follower = nodes.find((n) => n !== from)!;
    await expect(follower.elector.transferTo(from.id)).rejects.toBeInstanceOf(NotLeaderError);
    await expect(from.elector.transferTo(from.id)).rejects.toBeInstanceOf(InvalidArgumentError);
    await expect(from.elector.transferTo(from.elector.owner)).rejects.toBeInstanceOf(InvalidArgumentError);
    await expect(from.elector.transferTo('')).rejects.toBeInstanceOf(InvalidArgumentError);
    for (const timeoutMs of [0, -1, 1.5, 11 * 60 * 1000]) {
      await expect(from.elector.transferTo(follower.id, { timeoutMs })).rejects.toBeInstanceOf(InvalidArgumentError);
    }
    expect(from.elector.isLeader).toBe(true); // nothing was given up
    const other = place.client();
    teardown.push(() => other.close());
    // An elector made with transfers: false (as a Lock's) reads no hint and takes no hand-over.
    await expect(new LeaderElector({ store: other, group: 'xfer-bad', transfers: false }).transferTo('a')).rejects.toBeInstanceOf(InvalidArgumentError);
    await other.acquire('xfer-bad/transfer-to', 'old-leader~1', 30_000, { to: 'c' });
    await expect(from.elector.transferTo(follower.id)).rejects.toMatchObject({ code: 'TRANSFER_FAILED', reason: 'busy' });
    expect(from.elector.isLeader).toBe(true);
  });
});
