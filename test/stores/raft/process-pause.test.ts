/**
 * The Raft store's leader process paused with SIGSTOP past its election timeout, then resumed,
 * while clients work: the others elect a new leader; a lease held through the pause is granted
 * to another owner only after the new leader waited a whole TTL (the takeover rule); the resumed
 * node serves no write and no stale read; the old holder's token is refused as stale. The
 * workload's history is linearizable.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { pollUntil } from '../../fixtures/harness.js';
import { ProcessCluster, type Reply } from './process-cluster.js';
import { appender, checkLinearizable, checkStreams, finalStreams, leaseClient, summarize, type HistoryOp } from './lease-history.js';

let cluster: ProcessCluster | undefined;

afterEach(async () => {
  await cluster?.close();
  cluster = undefined;
});

describe('raft store processes under SIGSTOP', () => {
  it('a paused leader is replaced, its held lease waits out a full TTL on the new leader, and once resumed it serves neither a write nor a stale read', async () => {
    cluster = await ProcessCluster.start();
    const c = cluster;
    const old = await c.leader();
    const ops: HistoryOp[] = [];
    let stop = false;
    const load = [appender(c, 1, 'load', 60_000, ops, () => stop), ...[2, 3].map((client) => leaseClient(c, client, ['a', 'b'], 60_000, Number.POSITIVE_INFINITY, ops, () => stop))];
    await pollUntil('50 acknowledged appends', 30_000, () => ops.filter((o) => o.kind === 'append' && o.result.kind === 'ok').length >= 50);

    // Client 9 holds `held` (TTL 3 s) and has written under it; outside the checked history, as its lease will expire.
    const TTL = 3000;
    const got = await c.request({ cmd: 'acquire', name: 'held', owner: 'client-9', ttlMs: TTL });
    expect(got).toMatchObject({ kind: 'ok', value: { acquired: true } });
    const term = (got as { value: { lease: { term: number } } }).value.lease.term;
    expect(await c.request({ cmd: 'append', token: { lease: 'held', term }, stream: 's-held', payload: 'before pause' })).toMatchObject({ kind: 'ok', value: 1 });

    const pausedAt = performance.now();
    c.pause(old);
    const next = await c.leader(15_000);
    expect(next).not.toBe(old);
    const electedAt = performance.now();

    // The takeover rule: client 10 is refused (client 9 still holds it, same term) until a full TTL after the pause.
    const first = await c.request({ cmd: 'acquire', name: 'held', owner: 'client-10', ttlMs: 60_000 });
    expect(first).toMatchObject({ kind: 'ok', value: { acquired: false, lease: { owner: 'client-9', term } } });
    let won: { ret: number; term: number } | undefined;
    for (let i = 0; i < 400 && won === undefined; i++) {
      const r = await c.request({ cmd: 'acquire', name: 'held', owner: 'client-10', ttlMs: 60_000 });
      const v = r.kind === 'ok' ? (r.value as { acquired: boolean; lease: { term: number } }) : undefined;
      if (v?.acquired) won = { ret: performance.now(), term: v.lease.term };
      else await new Promise((resolve) => setTimeout(resolve, 25));
    }
    expect(won).toBeDefined();
    expect(won!.term).toBeGreaterThan(term);
    expect(won!.ret - pausedAt).toBeGreaterThanOrEqual(TTL);
    expect(await c.request({ cmd: 'append', token: { lease: 'held', term: won!.term }, stream: 's-held', payload: 'new holder' })).toMatchObject({ kind: 'ok', value: 2 });

    // Queued while it is stopped, so it reads them the moment it runs again, before it can hear of the new term.
    const staleWrite = c.call(old, { cmd: 'append', token: { lease: 'held', term }, stream: 's-held', payload: 'paused leader write' });
    const staleRead = c.call(old, { cmd: 'read', name: 'held' });
    const resumedAt = performance.now();
    c.resume(old);
    const [w, r] = await Promise.all([staleWrite, staleRead]);
    expect(w.ok).toBe(false);
    // Before the core stopped relaying other nodes' read requests, this was once INVALID_ARGUMENT: the node had stopped. The message says what the node saw.
    expect(['NOT_LEADER', 'PROPOSAL_DROPPED', 'STORE_UNAVAILABLE'], `${JSON.stringify(w)}; node ${old} said: ${c.procs.get(old)!.stderr.slice(-1500)}`).toContain(
      (w as Reply & { ok: false }).code,
    );
    // A read it answers at all is linearizable: it names the new holder, never client 9.
    if (r.ok) expect(r.value).toMatchObject({ owner: 'client-10', term: won!.term });
    await pollUntil('the resumed node to follow', 10_000, async () => (await c.status(old))?.role === 'follower');
    expect(await c.leader(10_000)).not.toBe(old);
    const steppedDownMs = performance.now() - resumedAt;

    // The old holder's token, now that the new holder wrote, is refused where the write lands.
    expect(await c.request({ cmd: 'append', token: { lease: 'held', term }, stream: 's-held', payload: 'old token' })).toMatchObject({ kind: 'refused', code: 'STALE_TERM' });
    const held = await c.readAll(old, 's-held');
    expect(held.map((e) => e.payload)).toEqual(['before pause', 'new holder']);

    stop = true;
    await Promise.all(load);
    const streams = await finalStreams(c, ['s-load', 's-a', 's-b']);
    expect(checkStreams(ops, streams)).toEqual([]);
    const lin = checkLinearizable(ops, streams);
    expect(lin.report).toBe('');
    expect(lin.ok).toBe(true);
    console.log(
      `SIGSTOP leader: new leader ${Math.round(electedAt - pausedAt)} ms after the pause; held lease granted ${Math.round(won!.ret - pausedAt)} ms after the pause (TTL ${TTL}); ` +
        `resumed node a follower within ${Math.round(steppedDownMs)} ms (stale write: ${(w as { code: string }).code}, read: ${r.ok ? 'new holder' : (r as { code: string }).code}); history ${JSON.stringify(summarize(ops))}`,
    );
  });
});
