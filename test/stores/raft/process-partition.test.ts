/**
 * The Raft store's leader cut off from both followers while clients work: every node's peer
 * traffic goes through a fault proxy per ordered pair of nodes (test/chaos/proxy), and the
 * leader's four proxies hold every byte. The majority elects a new leader; the old one steps down
 * by CheckQuorum and acknowledges none of the writes sent to it; after the heal it rejoins as a
 * follower of the same leader as everyone. Then slow links (the proxies' delay): writes go on.
 * The workload's history is linearizable in both.
 *
 * `tc netem` would add loss and jitter below TCP, but this machine's kernel has no sch_netem
 * (`tc qdisc add dev lo root netem` in a private network namespace: "Specified qdisc kind is
 * unknown"), so faults are put between the nodes by the fault proxy.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { delay, pollUntil } from '../../fixtures/harness.js';
import { ProcessCluster } from './process-cluster.js';
import { appender, checkLinearizable, checkStreams, finalStreams, leaseClient, summarize, type HistoryOp } from './lease-history.js';

let cluster: ProcessCluster | undefined;

afterEach(async () => {
  await cluster?.close();
  cluster = undefined;
});

describe('raft store processes under a network partition', () => {
  it('an isolated leader steps down and acknowledges nothing; the majority elects a new one; after the heal it rejoins', async () => {
    cluster = await ProcessCluster.start({ proxies: true });
    const c = cluster;
    const old = await c.leader();
    const ops: HistoryOp[] = [];
    let stop = false;
    const load = [appender(c, 1, 'load', 60_000, ops, () => stop), ...[2, 3].map((client) => leaseClient(c, client, ['a', 'b'], 60_000, Number.POSITIVE_INFINITY, ops, () => stop))];
    await pollUntil('50 acknowledged appends', 30_000, () => ops.filter((o) => o.kind === 'append' && o.result.kind === 'ok').length >= 50);
    const got = await c.request({ cmd: 'acquire', name: 'cut', owner: 'client-8', ttlMs: 60_000 });
    expect(got).toMatchObject({ kind: 'ok', node: old, value: { acquired: true } });
    const term = (got as { value: { lease: { term: number } } }).value.lease.term;

    const cutAt = performance.now();
    await c.isolate(old);
    // Writes that reach the old leader now: it may still take them into its log, but never acknowledge them.
    const pending = Array.from({ length: 5 }, (_, i) => c.call(old, { cmd: 'append', token: { lease: 'cut', term }, stream: 's-cut', payload: `cut-off ${i}` }));
    const next = await c.leader(15_000, c.ids.filter((id) => id !== old));
    const electedMs = performance.now() - cutAt;
    expect(next).not.toBe(old);
    await pollUntil('the isolated leader to step down', 10_000, async () => (await c.status(old))?.role !== 'leader');
    const stepDownMs = performance.now() - cutAt;
    const answers = await Promise.all(pending);
    for (const a of answers) expect(a.ok).toBe(false);
    // Writes go on on the majority side.
    const before = ops.filter((o) => o.kind === 'append' && o.result.kind === 'ok').length;
    await pollUntil('30 appends acknowledged by the majority', 30_000, () => ops.filter((o) => o.kind === 'append' && o.result.kind === 'ok').length >= before + 30);

    await c.heal();
    const healedAt = performance.now();
    const leader = await c.leader(15_000);
    const rejoinMs = performance.now() - healedAt;
    expect((await c.status(old))!.lead).toBe(leader);
    // None of the cut-off writes made it into the log.
    expect(await c.readAll(old, 's-cut')).toEqual([]);
    expect(await c.readAll(leader, 's-cut')).toEqual([]);
    await delay(500);
    stop = true;
    await Promise.all(load);

    const streams = await finalStreams(c, ['s-load', 's-a', 's-b']);
    expect(checkStreams(ops, streams)).toEqual([]);
    const lin = checkLinearizable(ops, streams);
    expect(lin.report).toBe('');
    expect(lin.ok).toBe(true);
    console.log(
      `partition of the leader: new leader after ${Math.round(electedMs)} ms, old one stepped down after ${Math.round(stepDownMs)} ms ` +
        `(its writes: ${answers.map((a) => (a.ok ? 'OK' : a.code)).join(',')}), rejoined ${Math.round(rejoinMs)} ms after the heal; history ${JSON.stringify(summarize(ops))}`,
    );
  });

  it('slow links (30 ms on every link, then 500 ms each way on the leader\'s, past the election timeout): writes go on at the links\' pace, the history stays linearizable', async () => {
    cluster = await ProcessCluster.start({ proxies: true });
    const c = cluster;
    const old = await c.leader();
    const ops: HistoryOp[] = [];
    let stop = false;
    const load = [appender(c, 1, 'load', 60_000, ops, () => stop), ...[2, 3].map((client) => leaseClient(c, client, ['a', 'b'], 60_000, Number.POSITIVE_INFINITY, ops, () => stop))];
    const acked = (): number => ops.filter((o) => o.kind === 'append' && o.result.kind === 'ok').length;
    await pollUntil('30 acknowledged appends', 30_000, () => acked() >= 30);

    for (const from of c.ids) for (const to of c.ids) if (from !== to) await c.proxy(from, to).delay(30);
    const slowFrom = acked();
    await pollUntil('20 appends acknowledged over 30 ms links', 20_000, () => acked() >= slowFrom + 20);
    for (const other of c.ids) {
      if (other === old) continue;
      await c.proxy(old, other).delay(500);
      await c.proxy(other, old).delay(500);
    }
    const laggedFrom = acked();
    // Every message still arrives, in order, 500 ms late: heartbeats keep coming, so the leader keeps leading and a commit takes a second.
    await pollUntil('5 appends acknowledged with the leader 500 ms away', 20_000, () => acked() >= laggedFrom + 5);
    await c.heal();
    const leader = await c.leader(15_000);
    const healedFrom = acked();
    await pollUntil('20 appends acknowledged after the heal', 20_000, () => acked() >= healedFrom + 20);
    stop = true;
    await Promise.all(load);

    const streams = await finalStreams(c, ['s-load', 's-a', 's-b']);
    expect(checkStreams(ops, streams)).toEqual([]);
    const lin = checkLinearizable(ops, streams);
    expect(lin.report).toBe('');
    expect(lin.ok).toBe(true);
    console.log(`slow links: leader ${old} before, ${leader} after; history ${JSON.stringify(summarize(ops))}`);
  });
});
