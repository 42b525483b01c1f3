/**
 * The Raft store with its nodes in three real processes, under kill -9: of the leader while a
 * client appends and others take and give back leases, and of a follower long enough that it
 * must catch up from a snapshot. Every run's client history is checked: each acknowledged append
 * is on every node at its seq, nothing is applied twice, and the whole history (acquire, renew,
 * release, append, read) is linearizable by the simulator's checker.
 */
import { readdirSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { delay, pollUntil } from '../../fixtures/harness.js';
import { ProcessCluster } from './process-cluster.js';
import { appender, checkLinearizable, checkStreams, finalStreams, leaseClient, summarize, type HistoryOp } from './lease-history.js';

const TTL = 60_000;
let cluster: ProcessCluster | undefined;

afterEach(async () => {
  await cluster?.close();
  cluster = undefined;
});

const okAppends = (ops: readonly HistoryOp[]): (HistoryOp & { kind: 'append' })[] =>
  ops.filter((o): o is HistoryOp & { kind: 'append' } => o.kind === 'append' && o.result.kind === 'ok');

/** Starts the appender and three lease clients; `finish()` stops them and waits. */
function workload(c: ProcessCluster, ops: HistoryOp[]): { finish(): Promise<void> } {
  let stop = false;
  const running = [
    appender(c, 1, 'load', TTL, ops, () => stop),
    ...[2, 3, 4].map((client) => leaseClient(c, client, ['a', 'b'], TTL, Number.POSITIVE_INFINITY, ops, () => stop)),
  ];
  return {
    async finish() {
      stop = true;
      await Promise.all(running);
    },
  };
}

/** The acceptance checks of every run: same streams everywhere, acks kept once, linearizable; and the checker bites on a tampered copy. */
async function verify(c: ProcessCluster, ops: readonly HistoryOp[]): Promise<void> {
  const streams = await finalStreams(c, ['s-load', 's-a', 's-b']);
  expect(checkStreams(ops, streams)).toEqual([]);
  const lin = checkLinearizable(ops, streams);
  expect(lin.report).toBe('');
  expect(lin.ok).toBe(true);
  // The same history with one acknowledged append moved one seq on: no longer linearizable.
  const i = ops.findIndex((o) => o.kind === 'append' && o.result.kind === 'ok' && o.result.seq > 2);
  const moved = ops.map((o, j) => (j === i && o.kind === 'append' && o.result.kind === 'ok' ? { ...o, result: { kind: 'ok' as const, seq: o.result.seq - 1 } } : o));
  expect(checkLinearizable(moved, streams).ok).toBe(false);
}

describe('raft store processes under kill -9', () => {
  it('a killed leader: a new one is elected, the client goes on, the old one restarts and catches up; no ack lost, nothing applied twice', async () => {
    cluster = await ProcessCluster.start();
    const c = cluster;
    const leader = await c.leader();
    const ops: HistoryOp[] = [];
    const load = workload(c, ops);
    await pollUntil('60 acknowledged appends', 30_000, () => okAppends(ops).length >= 60);

    const killedAt = performance.now();
    await c.kill(leader);
    const ackedAtKill = okAppends(ops).length;
    const next = await c.leader(15_000);
    expect(next).not.toBe(leader);
    const resumed = await pollUntil('an append acknowledged after the kill', 15_000, () => okAppends(ops).find((o) => o.call > killedAt));
    await pollUntil('40 more acknowledged appends', 30_000, () => okAppends(ops).length >= ackedAtKill + 40);

    await c.spawn(leader);
    await delay(1000);
    await load.finish();
    console.log(`kill -9 leader: writes resumed ${Math.round(resumed.ret! - killedAt)} ms after the kill; history ${JSON.stringify(summarize(ops))}`);
    await verify(c, ops);
  });

  it('a killed follower: writes go on with 2 of 3 without a refusal; it restarts and catches up from a snapshot', async () => {
    cluster = await ProcessCluster.start({ node: { snapshotEntries: 50, catchUpEntries: 10 } });
    const c = cluster;
    const leader = await c.leader();
    const follower = c.ids.find((id) => id !== leader)!;
    const ops: HistoryOp[] = [];
    const load = workload(c, ops);
    await pollUntil('50 acknowledged appends', 30_000, () => okAppends(ops).length >= 50);

    const before = await c.status(follower);
    const killedAt = performance.now();
    await c.kill(follower);
    const ackedAtKill = okAppends(ops).length;
    await pollUntil('120 appends acknowledged with the follower down', 30_000, () => okAppends(ops).length >= ackedAtKill + 120);
    const restartAt = performance.now();
    // With the follower down nothing was refused or left unanswered: a majority is up.
    const during = ops.filter((o) => o.call > killedAt && o.call < restartAt);
    expect(during.filter((o) => o.kind === 'append' && o.result.kind !== 'ok')).toEqual([]);
    const gaps = okAppends(during).map((o, i, all) => (i === 0 ? 0 : o.ret! - all[i - 1]!.ret!));
    console.log(`kill -9 follower: ${okAppends(during).length} appends while it was down, longest gap between acks ${Math.round(Math.max(...gaps))} ms`);

    await c.spawn(follower);
    // It caught up: it applies what the leader committed. The leader keeps only 10 entries behind
    // its snapshot (one per 50 entries), so the 120 appends (and the other clients' commands) it missed came as a snapshot: one newer than
    // anything it had is in its snapshot directory.
    const leaderStatus = (await c.status(leader))!;
    await pollUntil('the restarted follower to apply the leader commit', 20_000, async () => ((await c.status(follower))?.applied ?? 0) >= leaderStatus.commit);
    const snaps = readdirSync(join(c.dataDir(follower), 'snap')).filter((f) => f.endsWith('.snap')).map((f) => parseInt(f.slice(17, 33), 16));
    expect(Math.max(...snaps)).toBeGreaterThan(before!.applied + 50);
    await delay(500);
    await load.finish();
    console.log(`kill -9 follower: history ${JSON.stringify(summarize(ops))}`);
    await verify(c, ops);
  });

  it('all three killed and restarted on their data dirs: every acknowledged append, the held lease and its term are intact; terms never go back', async () => {
    cluster = await ProcessCluster.start();
    const c = cluster;
    await c.leader();
    const ops: HistoryOp[] = [];
    const load = workload(c, ops);
    await pollUntil('60 acknowledged appends', 30_000, () => okAppends(ops).length >= 60);
    const held = await c.request({ cmd: 'read', name: 'load' });
    expect(held.kind).toBe('ok');
    const lease = (held as { value: { owner: string; term: number } }).value;
    expect(lease.owner).toBe('client-1');

    const killedAt = performance.now();
    const terms = new Map<number, number>();
    for (const id of c.ids) terms.set(id, (await c.status(id))!.term);
    await Promise.all(c.ids.map((id) => c.kill(id)));
    const ackedAtKill = okAppends(ops).length;
    await Promise.all(c.ids.map((id) => c.spawn(id)));
    const leader = await c.leader(15_000);
    const restartedAt = performance.now();
    for (const id of c.ids) expect((await c.status(id))!.term).toBeGreaterThanOrEqual(terms.get(id)!);
    expect((await c.status(leader))!.term).toBeGreaterThan(Math.max(...terms.values()));
    // The lease outlived the restart with its owner and term (its TTL is a minute).
    const after = await c.request({ cmd: 'read', name: 'load' });
    expect(after).toMatchObject({ kind: 'ok', value: { owner: 'client-1', term: lease.term } });
    const resumed = await pollUntil('an append acknowledged after the restart', 15_000, () => okAppends(ops).find((o) => o.call > killedAt));
    await pollUntil('40 more acknowledged appends', 30_000, () => okAppends(ops).length >= ackedAtKill + 40);
    await load.finish();
    console.log(
      `kill -9 of all three: a leader ${Math.round(restartedAt - killedAt)} ms after the kill (restart included), writes resumed after ${Math.round(resumed.ret! - killedAt)} ms; history ${JSON.stringify(summarize(ops))}`,
    );
    await verify(c, ops);
  });
});
