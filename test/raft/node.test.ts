import { afterEach, describe, expect, it } from 'vitest';
import { systemClock, type Clock } from '../../src/core/index.js';
import { ProposalDroppedError } from '../../src/raft/core/index.js';
import { ProposalLostError, RaftNotLeaderError, RaftTimeoutError, type RaftNode } from '../../src/raft/node/index.js';
import { DiskFullError } from '../../src/raft/wal/index.js';
import { CountingFs, noSpace } from './wal-fixtures.js';
import { bytes, Cluster, until } from './node-helpers.js';

let cluster: Cluster | undefined;
afterEach(async () => {
  await cluster?.close();
  cluster = undefined;
});

async function three(extra: ConstructorParameters<typeof Cluster>[0] = {}): Promise<Cluster> {
  cluster = new Cluster(extra);
  await cluster.define([1, 2, 3]);
  await cluster.startAll();
  return cluster;
}

const lists = (c: Cluster): string[][] => [...c.members.values()].filter((m) => m.node).map((m) => m.applied);

describe('RaftNode', () => {
  it('three nodes elect one leader and apply proposals in the same order on all', async () => {
    const c = await three();
    const leader = await c.leader();
    const results = await Promise.all(Array.from({ length: 50 }, (_, i) => leader.propose(bytes(`v${i}`))));
    // Indexes are distinct and increasing in proposal order; each resolved once applied.
    const indexes = results.map((r) => r.index);
    expect(new Set(indexes).size).toBe(50);
    expect([...indexes].sort((a, b) => a - b)).toEqual(indexes);
    const want = Array.from({ length: 50 }, (_, i) => `v${i}`);
    expect(c.members.get(leader.id)!.applied).toEqual(want);
    await until('every node applied all 50', () => lists(c).every((l) => l.length === 50));
    for (const l of lists(c)) expect(l).toEqual(want);
    // The result is what apply returned: the list's length after the entry.
    expect(results[49]!.result).toBe(50);
  });

  it('a follower refuses a proposal naming the leader', async () => {
    const c = await three();
    const leader = await c.leader();
    const follower = c.running().find((n) => n !== leader)!;
    const err = await follower.propose(bytes('x')).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(RaftNotLeaderError);
    expect((err as RaftNotLeaderError).leader).toBe(leader.id);
    expect((err as RaftNotLeaderError).leaderAddress).toBe(`127.0.0.1:${c.members.get(leader.id)!.port}`);
    expect((err as RaftNotLeaderError).code).toBe('NOT_LEADER');
  });

  it('after the leader closes, the others elect a new leader and commit', async () => {
    const c = await three();
    const old = await c.leader();
    await old.propose(bytes('before'));
    await c.stop(old.id);
    const next = await c.leader();
    expect(next.id).not.toBe(old.id);
    const r = await next.propose(bytes('after'));
    expect(r.index).toBeGreaterThan(0);
    await until('both survivors applied', () => lists(c).every((l) => l.join() === 'before,after'));
  });

  it('restarting all three from their data directories loses nothing committed', async () => {
    const c = await three({ snapshotEntries: 20, catchUpEntries: 5 });
    const leader = await c.leader();
    for (let i = 0; i < 30; i++) await leader.propose(bytes(`a${i}`));
    await until('all applied 30', () => lists(c).every((l) => l.length === 30));
    for (const id of [1, 2, 3]) await c.stop(id);
    await c.startAll();
    const want = Array.from({ length: 30 }, (_, i) => `a${i}`);
    // Each restored its snapshot (at 20+) and re-applied the entries after it.
    await until('restarted nodes re-applied the log', () => lists(c).every((l) => l.length === 30));
    for (const l of lists(c)) expect(l).toEqual(want);
    for (const m of c.members.values()) expect(m.restores).toBe(1);
    const next = await c.leader();
    await next.propose(bytes('later'));
    await until('all applied the new entry', () => lists(c).every((l) => l.join() === [...want, 'later'].join()));
  });

  it('a follower far behind the compacted log catches up by snapshot', async () => {
    const c = await three({ snapshotEntries: 10, catchUpEntries: 0 });
    const leader = await c.leader();
    const laggard = [1, 2, 3].find((id) => id !== leader.id)!;
    await c.stop(laggard);
    for (let i = 0; i < 40; i++) await leader.propose(bytes(`b${i}`));
    expect(leader.status().firstIndex).toBeGreaterThan(10);
    const restoresBefore = c.members.get(laggard)!.restores;
    await c.start(laggard);
    const want = Array.from({ length: 40 }, (_, i) => `b${i}`);
    await until('the laggard caught up', () => c.members.get(laggard)!.applied.length === 40);
    expect(c.members.get(laggard)!.applied).toEqual(want);
    // It had no snapshot of its own: the state came from the leader's.
    expect(c.members.get(laggard)!.restores).toBe(restoresBefore + 1);
    await leader.propose(bytes('next'));
    await until('the laggard follows on', () => c.members.get(laggard)!.applied.length === 41);
  });

  it('a partitioned old leader never confirms a read index; the majority moves on', async () => {
    const c = await three({ requestTimeoutMs: 1500 });
    const old = await c.leader();
    await old.propose(bytes('one'));
    expect(await old.readIndex()).toBeGreaterThan(0);
    const others = c.running().filter((n) => n !== old);
    // Cut the old leader off both ways (a peer that is not in the list is refused at connect).
    for (const n of others) {
      (old as unknown as { transport: { removePeer(id: number): void } }).transport.removePeer(n.id);
      (n as unknown as { transport: { removePeer(id: number): void } }).transport.removePeer(old.id);
    }
    const read = old.readIndex().then(
      () => 'resolved',
      (e: unknown) => e,
    );
    const next = await c.leader(10_000, others);
    await next.propose(bytes('two'));
    const outcome = await read;
    expect(outcome).not.toBe('resolved');
    expect(outcome instanceof RaftTimeoutError || outcome instanceof ProposalDroppedError).toBe(true);
    // And the old leader takes no writes.
    await expect(old.propose(bytes('stale'))).rejects.toBeInstanceOf(RaftNotLeaderError);
    expect(c.members.get(old.id)!.applied).toEqual(['one']);
  });

  it('transferLeadership hands leadership to the named node', async () => {
    const c = await three();
    const leader = await c.leader();
    const to = c.running().find((n) => n !== leader)!;
    await leader.transferLeadership(to.id);
    const now = await c.leader();
    expect(now.id).toBe(to.id);
    await now.propose(bytes('from the new leader'));
  });

  it('a read index on a follower waits for the commits before it', async () => {
    const c = await three();
    const leader = await c.leader();
    const follower: RaftNode<number> = c.running().find((n) => n !== leader)!;
    const r = await leader.propose(bytes('w'));
    const index = await follower.readIndex();
    expect(index).toBeGreaterThanOrEqual(r.index);
    expect(c.members.get(follower.id)!.applied).toContain('w');
  });

  it('a node added by a conf change learns the state and votes; a removed one is dropped', async () => {
    cluster = new Cluster({ snapshotEntries: 5, catchUpEntries: 0 });
    const c = cluster;
    await c.define([1, 2, 3, 4]);
    const addr4 = `127.0.0.1:${c.members.get(4)!.port}`;
    // The initial members do not know node 4.
    await Promise.all([1, 2, 3].map((id) => c.start(id, { peers: Object.fromEntries(Object.entries(c.peers()).filter(([k]) => k !== '4')) })));
    const leader = await c.leader();
    for (let i = 0; i < 12; i++) await leader.propose(bytes(`c${i}`));
    // A joining node is told where the members are (it learns the membership itself from the leader).
    await c.start(4, { join: true });
    const cs = await leader.addMember(4, addr4);
    expect(cs.voters).toContain(4);
    await leader.propose(bytes('with four'));
    await until('node 4 caught up', () => c.members.get(4)!.applied.length === 13);
    expect(c.members.get(4)!.applied.at(-1)).toBe('with four');
    const victim = [1, 2, 3].find((id) => id !== leader.id)!;
    const after = await leader.removeMember(victim);
    expect(after.voters).not.toContain(victim);
    await c.stop(victim);
    await leader.propose(bytes('without'));
    await until('node 4 applied it', () => c.members.get(4)!.applied.at(-1) === 'without');
  });

  it('closing rejects waiting work with ClosedError and later calls at once', async () => {
    const c = await three();
    const leader = await c.leader();
    await leader.close();
    await expect(leader.propose(bytes('x'))).rejects.toMatchObject({ code: 'CLOSED' });
    await expect(leader.readIndex()).rejects.toMatchObject({ code: 'CLOSED' });
  });
});

describe('RaftNode on a full disk', () => {
  it('a leader whose disk fills refuses proposals with DiskFullError, the others carry on, and it recovers', async () => {
    const fss = new Map([1, 2, 3].map((id) => [id, new CountingFs()]));
    cluster = new Cluster();
    const c = cluster;
    await c.define([1, 2, 3]);
    await Promise.all([1, 2, 3].map((id) => c.start(id, { storage: { fs: fss.get(id)! } })));
    const leader = await c.leader();
    await leader.propose(bytes('before'));
    fss.get(leader.id)!.beforeWrite = () => {
      throw noSpace();
    };
    // Taken by the core, but its save fails: it waits (and cannot commit through this node).
    const first = leader.propose(bytes('during')).then(
      (r) => r,
      (e: unknown) => e,
    );
    await until('the disk-full state', () => leader.status().diskFull !== undefined);
    await expect(leader.propose(bytes('refused'))).rejects.toBeInstanceOf(DiskFullError);
    expect(c.members.get(leader.id)!.logs.some((l) => l.includes('disk full'))).toBe(true);
    // The others no longer hear from it and elect one of themselves.
    const others = c.running().filter((n) => n !== leader);
    const next = await c.leader(10_000, others);
    await next.propose(bytes('elsewhere'));
    // Space returns: the stalled save goes through and the node rejoins as a follower.
    fss.get(leader.id)!.beforeWrite = undefined;
    await until('recovered', () => leader.status().diskFull === undefined);
    await until('the old leader applied the new entry', () => c.members.get(leader.id)!.applied.includes('elsewhere'));
    const outcome = await first;
    // Its entry was either replicated before the stall or replaced: never silently half-done.
    if (outcome instanceof Error) expect(outcome).toBeInstanceOf(ProposalLostError);
    else expect(c.members.get(next.id)!.applied).toContain('during');
    expect(c.members.get(leader.id)!.applied).toEqual(c.members.get(next.id)!.applied);
  });
});

describe('RaftNode group commit', () => {
  it('proposals made together share the leader\'s fsyncs', async () => {
    const fss = new Map([1, 2, 3].map((id) => [id, new CountingFs()]));
    cluster = new Cluster();
    const c = cluster;
    await c.define([1, 2, 3]);
    await Promise.all([1, 2, 3].map((id) => c.start(id, { storage: { fs: fss.get(id)! } })));
    const leader = await c.leader();
    await leader.propose(bytes('warm'));
    const fs = fss.get(leader.id)!;
    fs.reset();
    await Promise.all(Array.from({ length: 256 }, (_, i) => leader.propose(bytes(`g${i}`))));
    // All 256 were proposed in one turn: one Ready holds them, one fdatasync makes them durable.
    expect(fs.fdatasyncs).toBeLessThanOrEqual(4);
    expect(c.members.get(leader.id)!.applied.length).toBe(257);
  });
});

describe('RaftNode timing', () => {
  it("the leader's appends are on the wire before its own fdatasync runs", async () => {
    const fss = new Map([1, 2, 3].map((id) => [id, new CountingFs()]));
    // No heartbeats or campaigns of their own within the test: only the proposal's messages are sent.
    cluster = new Cluster({ electionTicks: 2000, heartbeatTicks: 1000 });
    const c = cluster;
    await c.define([1, 2, 3]);
    await Promise.all([1, 2, 3].map((id) => c.start(id, { storage: { fs: fss.get(id)! } })));
    c.members.get(1)!.node!.campaign();
    const leader = await c.leader();
    await leader.propose(bytes('warm'));
    const sent = (): number => leader.status().transport.peers.reduce((n, p) => n + p.sent, 0);
    const before = sent();
    let atSync: number | undefined;
    fss.get(leader.id)!.beforeFdatasync = () => {
      atSync ??= sent();
    };
    await leader.propose(bytes('early'));
    // One append per follower was written while the leader had not yet flushed the entry itself.
    expect(atSync).toBeGreaterThanOrEqual(before + 2);
  });

  it('ticks keep to their grid when every timer fires late: the election timeout stays as set', async () => {
    // Every timer fires 8 ms late, as on a loaded machine. Re-armed tick by tick, the 30 ticks of
    // this election timeout (random 0: exactly 30 ticks of 10 ms) would take at least 540 ms.
    const late: Clock = { now: () => systemClock.now(), setTimer: (ms, fn) => systemClock.setTimer(ms + 8, fn) };
    cluster = new Cluster({ clock: late, random: { next: () => 0 }, electionTicks: 30 });
    await cluster.define([1, 2, 3]);
    const t0 = performance.now();
    const node = await cluster.start(1);
    await until('a campaign', () => node.status().role !== 'follower', 5000);
    const ms = performance.now() - t0;
    expect(ms).toBeGreaterThanOrEqual(295);
    // 300 ms plus the last timer's lateness; room for a loaded machine, far below 540.
    expect(ms).toBeLessThan(480);
  });
});

describe('RaftNode options', () => {
  it('bad options give one typed error naming the field, and a busy port leaves nothing open', async () => {
    cluster = new Cluster();
    const c = cluster;
    await c.define([1, 2, 3]);
    await expect(c.start(1, { heartbeatTicks: 30, electionTicks: 30 })).rejects.toMatchObject({ code: 'INVALID_ARGUMENT', field: 'heartbeatTicks' });
    await expect(c.start(1, { id: 0 })).rejects.toMatchObject({ code: 'INVALID_ARGUMENT', field: 'id' });
    await expect(c.start(1, { peers: { 0: '127.0.0.1:1' } })).rejects.toMatchObject({ code: 'INVALID_ARGUMENT', field: 'peers' });
    const first = await c.start(1);
    // A second node on the same port fails to bind; its WAL (in another directory) is closed again.
    const m2 = c.members.get(2)!;
    const err = await c.start(2, { listen: `127.0.0.1:${c.members.get(1)!.port}` }).catch((e: unknown) => e);
    expect((err as { code?: string }).code).toBe('EADDRINUSE');
    m2.node = undefined;
    expect(first.status().role).toBeDefined();
  });
});
