import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it, onTestFinished } from 'vitest';
import { InvalidArgumentError, NotLeaderError, StaleTermError, onFencedRejection } from '../../../src/core/index.js';
import type { FencedRejection, Lease } from '../../../src/core/index.js';
import { RaftNotLeaderError } from '../../../src/raft/node/index.js';
import { COMMAND_MAX_BYTES, openRaftStore, type RaftStore } from '../../../src/stores/raft/index.js';
import { RaftCluster } from './raft-cluster.js';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function until(what: string, cond: () => boolean | Promise<boolean>, ms = 10_000): Promise<void> {
  const deadline = performance.now() + ms;
  while (!(await cond())) {
    if (performance.now() > deadline) throw new Error(`timed out after ${ms} ms waiting for ${what}`);
    await sleep(10);
  }
}

let cluster: RaftCluster | undefined;
afterEach(async () => {
  await cluster?.close();
  cluster = undefined;
});

async function started(extra?: ConstructorParameters<typeof RaftCluster>[0]): Promise<{ c: RaftCluster; leader: RaftStore; followers: RaftStore[] }> {
  const c = (cluster = await RaftCluster.start([1, 2, 3], extra));
  c.stores.get(1)!.campaign();
  const leader = await c.leader();
  return { c, leader, followers: [...c.stores.values()].filter((s) => s !== leader) };
}

describe('embedded Raft store: 3 nodes in one process', () => {
  it('a follower refuses writes with NotLeaderError naming the leader, and serves linearizable reads and pushes', async () => {
    const { leader, followers } = await started();
    const f = followers[0]!;
    const err = await f.acquire('g', 'a~1', 5000).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(NotLeaderError);
    expect(err).toBeInstanceOf(RaftNotLeaderError);
    expect((err as RaftNotLeaderError).leader).toBe(leader.id);
    expect((err as RaftNotLeaderError).leaderAddress).toBe(leader.status().node.leaderAddress);

    const heads: number[] = [];
    const seen: (string | null)[] = [];
    f.watchStream('s', (h) => heads.push(h));
    f.watch('g', (l) => seen.push(l ? `${l.owner}@${l.term}` : null));
    const { lease } = await leader.acquire('g', 'a~1', 5000);
    await leader.appendFenced({ lease: 'g', term: lease.term }, 's', 'one');
    // Read on the follower right after the leader acknowledged: the read index makes it see the write.
    const last = await f.readLast('s');
    expect(last).toMatchObject({ seq: 1, payload: 'one', lease: 'g', term: 1 });
    // A brand-new cluster's first leader seeded the log's time from its wall clock: ms since the epoch.
    expect(Math.abs(last!.appendedAt - Date.now())).toBeLessThan(10_000);
    expect(await f.read('g')).toMatchObject({ owner: 'a~1', term: 1 });
    expect((await f.streamHead('s')).seq).toBe(1);
    await until('the follower tells its watchers', () => heads.includes(1) && seen.length === 1);
    expect(seen).toEqual(['a~1@1']);
  });

  it('tells a watcher null when a lease expires by time (no entry marks it)', async () => {
    const { leader, followers } = await started();
    const seen: (Lease | null)[] = [];
    const seenOnFollower: (Lease | null)[] = [];
    leader.watch('e', (l) => seen.push(l));
    followers[0]!.watch('e', (l) => seenOnFollower.push(l));
    await leader.acquire('e', 'a~1', 200);
    await until('told the acquire', () => seen.length === 1);
    await until('told the expiry', () => seen.length === 2, 2000);
    expect(seen[1]).toBeNull();
    expect(await leader.read('e')).toBeNull();
    // A follower judges at its applied log time, moved by the leader's idle ticks: it is told too.
    await until('the follower told the expiry', () => seenOnFollower.length === 2, 3000);
    expect(seenOnFollower[1]).toBeNull();
  });

  it('refuses bad input before it reaches the log, and bad options with one typed error', async () => {
    const { leader } = await started();
    const tmp = mkdtempSync(join(tmpdir(), 'tenure-raft-store-opts-'));
    onTestFinished(() => rmSync(tmp, { recursive: true, force: true }));
    const before = leader.status().appliedIndex;
    await expect(leader.acquire('', 'a~1', 5000)).rejects.toBeInstanceOf(InvalidArgumentError);
    await expect(leader.appendFenced({ lease: 'g', term: 0 }, 's', 'x')).rejects.toBeInstanceOf(InvalidArgumentError);
    await expect(leader.renewMany('a~1', [{ name: 'x', term: 1 }, { name: 'x', term: 1 }], 5000)).rejects.toBeInstanceOf(InvalidArgumentError);
    expect(leader.status().appliedIndex - before).toBeLessThanOrEqual(1); // at most an idle tick
    await expect(
      openRaftStore({ id: 9, listen: '127.0.0.1:0', peers: {}, dataDir: '/nonexistent/x', secret: 'x'.repeat(20), node: { storage: { maxRecordBytes: COMMAND_MAX_BYTES } } }),
    ).rejects.toMatchObject({ code: 'INVALID_ARGUMENT', field: 'node.storage.maxRecordBytes' });
    // Bad options: one typed error naming the field, and nothing left listening on the port.
    const port = Number(leader.status().node.leaderAddress!.split(':')[1]);
    const base = { id: 9, listen: '127.0.0.1:0', peers: { 9: '127.0.0.1:0' }, dataDir: join(tmp, 'bad'), secret: 'x'.repeat(20) };
    await expect(openRaftStore({ ...base, id: 0 })).rejects.toMatchObject({ code: 'INVALID_ARGUMENT', field: 'id' });
    await expect(openRaftStore({ ...base, proposeTimeoutMs: -1 })).rejects.toMatchObject({ code: 'INVALID_ARGUMENT', field: 'proposeTimeoutMs' });
    await expect(openRaftStore({ ...base, idleTickMs: 0.5 })).rejects.toMatchObject({ code: 'INVALID_ARGUMENT', field: 'idleTickMs' });
    await expect(openRaftStore({ ...base, secret: 'short' })).rejects.toMatchObject({ code: 'INVALID_ARGUMENT' });
    // The leader's port is taken: the bind error, and the new store's WAL is closed again.
    await expect(openRaftStore({ ...base, listen: `127.0.0.1:${port}` })).rejects.toThrow();
    await using again = await openRaftStore({ ...base, dataDir: join(tmp, 'bad') });
    expect(again.kind).toBe('raft');
  });

  it('a leader closed: a new leader is elected, a lease held under the old one is still held (takeover), and a stale token is refused after a new term', async () => {
    const { c, leader: old } = await started();
    const { lease } = await old.acquire('g', 'a~1', 2000, { who: 'a' });
    expect(lease.term).toBe(1);
    expect(await old.appendFenced({ lease: 'g', term: 1 }, 's', 'under the old leader')).toBe(1);
    // The old leader's idle ticks (every 250 ms) carry the log's time about 1000-1200 ms on: without
    // the takeover the lease would have about 800-1050 ms left after the failover (the log's time
    // pauses across the gap); with it, nearly its full 2000 ms.
    await sleep(1200);
    const oldId = old.id;
    await c.stop(oldId);
    const leader = await c.leader();
    expect(leader.id).not.toBe(oldId);

    // Held: the takeover gave it at least its full TTL from the new leader's first command.
    const held = await leader.read('g');
    expect(held).toMatchObject({ owner: 'a~1', term: 1, meta: { who: 'a' } });
    expect(held!.remainingMs).toBeGreaterThan(1500);
    expect(held!.remainingMs).toBeLessThanOrEqual(2000);
    const other = await leader.acquire('g', 'b~1', 2000);
    expect(other).toMatchObject({ acquired: false, lease: { owner: 'a~1', term: 1 } });
    expect(await leader.appendFenced({ lease: 'g', term: 1 }, 's', 'under the new leader')).toBe(2);

    // The holder stops renewing; once it expires on the new leader's clock, b takes term 2.
    await until('the lease expires', async () => (await leader.read('g')) === null, 5000);
    const b = await leader.acquire('g', 'b~1', 5000);
    expect(b).toMatchObject({ acquired: true, lease: { owner: 'b~1', term: 2 } });
    expect(await leader.appendFenced({ lease: 'g', term: 2 }, 's', 'b')).toBe(3);
    const rejections: FencedRejection[] = [];
    const off = onFencedRejection((r) => rejections.push(r));
    try {
      const err = await leader.appendFenced({ lease: 'g', term: 1 }, 's', 'stale').catch((e: unknown) => e);
      expect(err).toBeInstanceOf(StaleTermError);
      expect(err).toMatchObject({ lease: 'g', term: 1, currentTerm: 2 });
    } finally {
      off();
    }
    expect(rejections).toHaveLength(1); // reported once, by the node that answered
    expect(rejections[0]).toMatchObject({ path: 'stream', stream: 's' });
    expect((await leader.readStream('s')).map((e) => e.payload)).toEqual(['under the old leader', 'under the new leader', 'b']);

    // The old leader comes back as a follower and catches up.
    const back = await c.open(oldId);
    await until('the old leader catches up', async () => (await back.readLast('s').catch(() => null))?.seq === 3);
    expect(await back.read('g')).toMatchObject({ owner: 'b~1', term: 2 });
    await expect(back.release('g', 'b~1', 2)).rejects.toBeInstanceOf(NotLeaderError);
  });

  it('restart of all three nodes from their data dirs loses no acknowledged write', async () => {
    // Small snapshots, so the restart restores a snapshot and replays the log after it.
    const extra = { node: { snapshotEntries: 25, catchUpEntries: 5 } };
    const { c, leader } = await started(extra);
    await leader.acquire('g', 'a~1', 60_000);
    await leader.acquire('h', 'b~1', 60_000);
    await leader.release('h', 'b~1', 1);
    await leader.acquire('h', 'c~1', 60_000); // term 2
    const acked = new Map<number, string>();
    for (let i = 0; i < 40; i++) acked.set(await leader.appendFenced({ lease: 'g', term: 1 }, 's', `seq-${i}`), `seq-${i}`);
    // Pipelined: 50 in flight at once, each acknowledged with its seq.
    const batch = await Promise.all(Array.from({ length: 50 }, (_, i) => leader.appendFenced({ lease: 'g', term: 1 }, 's', `batch-${i}`).then((seq) => [seq, `batch-${i}`] as const)));
    for (const [seq, p] of batch) acked.set(seq, p);
    expect(acked.size).toBe(90);
    expect(leader.status().node.snapshotIndex).toBeGreaterThan(1);

    await Promise.all([1, 2, 3].map((id) => c.stop(id)));
    await Promise.all([1, 2, 3].map((id) => c.open(id)));
    c.stores.get(2)!.campaign();
    const again = await c.leader();
    const entries = await again.readStream('s', { limit: 10_000 });
    expect(entries).toHaveLength(90);
    for (const e of entries) expect(e.payload).toBe(acked.get(e.seq));
    expect(await again.read('g')).toMatchObject({ owner: 'a~1', term: 1 });
    expect(await again.read('h')).toMatchObject({ owner: 'c~1', term: 2 });
    // Terms never go back: the next holder of h gets term 3; the fence of g still holds.
    await again.release('h', 'c~1', 2);
    expect((await again.acquire('h', 'd~1', 5000)).lease.term).toBe(3);
    expect(await again.appendFenced({ lease: 'g', term: 1 }, 's', 'after restart')).toBe(91);
    // Every node holds the same state: a follower's linearizable read agrees.
    for (const s of c.stores.values()) expect((await s.readLast('s'))!.payload).toBe('after restart');
  });
});
