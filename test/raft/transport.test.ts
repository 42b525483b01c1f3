/**
 * The Raft transport between real transports on loopback: every message type crosses, large
 * snapshots cross in chunks, a peer that went away is dialed again, a peer that stops reading
 * costs only its own queue.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { systemClock, type Clock } from '../../src/core/clock.js';
import type { Random } from '../../src/core/random.js';
import { MESSAGE_TYPES } from '../../src/raft/transport/codec.js';
import { isLocalMessage, message, type Message } from '../../src/raft/core/types.js';
import { freePort } from '../fixtures/ports.js';
import { node, rawPeerServer, sleepMs, until, type Node } from './transport-helpers.js';

const open: Node[] = [];
const track = (n: Node): Node => (open.push(n), n);
afterEach(async () => {
  await Promise.all(open.splice(0).map((n) => n.t.close()));
});

/** A message from `from` to `to` with every field set. */
function full(type: Message['type'], from: number, to: number, n: number): Message {
  return message({
    type,
    from,
    to,
    term: 5 + n,
    logTerm: 4,
    index: 1000 + n,
    commit: 999,
    reject: n % 2 === 1,
    rejectHint: 77,
    entries: [
      { term: 5, index: 1001, type: 'normal', data: Uint8Array.from([n, 1, 2]) },
      { term: 5, index: 1002, type: 'confChange', data: new TextEncoder().encode('{"t":"auto","c":[]}') },
    ],
    snapshot: { metadata: { index: 900, term: 3, confState: { voters: [1, 2], learners: [3], votersOutgoing: [], learnersNext: [], autoLeave: false } }, data: Uint8Array.from([n, 9, 9]) },
    context: `ctx-${n}`,
    transferee: 2,
  });
}

const NETWORK_TYPES = MESSAGE_TYPES.filter((t) => !isLocalMessage(t));

async function pair(extra1 = {}, extra2 = {}): Promise<[Node, Node]> {
  const p1 = await freePort();
  const p2 = await freePort();
  const a = track(await node(1, { 2: p2 }, extra1, p1));
  const b = track(await node(2, { 1: p1 }, extra2, p2));
  return [a, b];
}

describe('Raft transport between two nodes', () => {
  it('carries every message type both ways, every field intact, in order', async () => {
    const [a, b] = await pair();
    const toB = NETWORK_TYPES.map((t, i) => full(t, 1, 2, i));
    const toA = NETWORK_TYPES.map((t, i) => full(t, 2, 1, i + 100));
    a.t.send(toB);
    b.t.send(toA);
    await until('both sides to receive all', () => b.got.length === toB.length && a.got.length === toA.length);
    expect(b.got).toEqual(toB);
    expect(a.got).toEqual(toA);
    // One connection for the pair, whichever side dialed first; nothing dropped or logged.
    const sa = a.t.stats();
    expect(sa.peers[0]).toMatchObject({ id: 2, connected: true, queued: 0, dropped: 0, sent: toB.length, received: toA.length });
    expect(b.t.stats().peers[0]).toMatchObject({ id: 1, connected: true, queued: 0, dropped: 0 });
    expect(a.logs).toEqual([]);
    expect(b.logs).toEqual([]);
  });

  it('both nodes dialing at once end with one connection, and messages sent meanwhile arrive', async () => {
    const [a, b] = await pair();
    for (let round = 0; round < 20; round++) {
      a.t.send([message({ type: 'heartbeat', from: 1, to: 2, term: 1, commit: round })]);
      b.t.send([message({ type: 'heartbeat', from: 2, to: 1, term: 1, commit: round })]);
      if (round === 0) await sleepMs(0);
    }
    await until('40 heartbeats', () => a.got.length === 20 && b.got.length === 20);
    // Each arrives once; order holds per connection, not across the two dials of the tie.
    expect(b.got.map((m) => m.commit).sort((x, y) => x - y)).toEqual([...Array(20).keys()]);
    expect(a.got.map((m) => m.commit).sort((x, y) => x - y)).toEqual([...Array(20).keys()]);
    // Give the losing connection time to close, then count what is left open.
    await sleepMs(100);
    expect(a.t.stats().peers[0]!.connected).toBe(true);
    expect(b.t.stats().peers[0]!.connected).toBe(true);
    a.t.send([message({ type: 'heartbeat', from: 1, to: 2, term: 1, commit: 99 })]);
    await until('one more', () => b.got.length === 21);
  });

  it('three nodes all sending to each other at once: every message arrives once', async () => {
    const ports = [await freePort(), await freePort(), await freePort()];
    const nodes = await Promise.all([1, 2, 3].map(async (id) => track(await node(id, Object.fromEntries([1, 2, 3].filter((p) => p !== id).map((p) => [p, ports[p - 1]!])), {}, ports[id - 1]))));
    for (let round = 0; round < 200; round++) {
      for (const [i, n] of nodes.entries()) {
        const from = i + 1;
        n.t.send([1, 2, 3].filter((to) => to !== from).map((to) => message({ type: 'app', from, to, term: 1, index: round, entries: [{ term: 1, index: round + 1, type: 'normal', data: new Uint8Array(100) }] })));
      }
      if (round % 20 === 0) await sleepMs(1);
    }
    await until('400 messages at each node', () => nodes.every((n) => n.got.length === 400), 10_000);
    for (const [i, n] of nodes.entries()) {
      // Order holds per connection; across the tie between two dials it may not (Raft allows it).
      for (const from of [1, 2, 3].filter((f) => f !== i + 1)) expect(n.got.filter((m) => m.from === from).map((m) => m.index).sort((x, y) => x - y)).toEqual([...Array(200).keys()]);
      expect(n.t.stats()).toMatchObject({ queued: 0, dropped: 0 });
      expect(n.logs).toEqual([]);
    }
  });

  it('sends a large snapshot in 1 MiB chunks and the peer gets it whole; messages sent meanwhile overtake it', async () => {
    const [a, b] = await pair({ snapshotChunkBytes: 1024 * 1024 });
    const data = new Uint8Array(3.5 * 1024 * 1024 + 17);
    for (let i = 0; i < data.length; i++) data[i] = (i * 31) & 0xff;
    const statuses: [number, boolean][] = [];
    a.t.onSnapshotStatus((peer, ok) => statuses.push([peer, ok]));
    const snap = message({ type: 'snap', from: 1, to: 2, term: 9, snapshot: { metadata: { index: 5000, term: 8, confState: { voters: [1, 2], learners: [], votersOutgoing: [], learnersNext: [], autoLeave: false } }, data } });
    a.t.send([snap]);
    // Sent while the snapshot has 4 chunks to go: the snapshot goes one chunk between batches of
    // other messages, so the heartbeat is on the wire before the snapshot's last chunk, whatever
    // the socket's buffer and the machine's load. (A heartbeat sent a tick later, as this test did
    // before, could find the whole snapshot already written on a slow machine.)
    const heartbeat = message({ type: 'heartbeat', from: 1, to: 2, term: 9, commit: 4999 });
    a.t.send([heartbeat]);
    await until('snapshot and heartbeat', () => b.got.length === 2, 10_000);
    expect(b.got[0]).toEqual(heartbeat);
    expect(b.got[1]!.snapshot!.metadata).toEqual(snap.snapshot!.metadata);
    expect(Buffer.from(b.got[1]!.snapshot!.data).equals(Buffer.from(data))).toBe(true);
    expect({ ...b.got[1], snapshot: undefined }).toEqual({ ...snap, snapshot: undefined });
    expect(statuses).toEqual([[2, true]]);
    expect(a.t.stats().peers[0]).toMatchObject({ sent: 2, queued: 0 });
    // 4 chunk frames and the heartbeat's.
    expect(a.t.stats().peers[0]!.sentFrames).toBe(5);
  });

  it('refuses a snapshot larger than the receiving bound: one log line, and the next connection works', async () => {
    const [a, b] = await pair({ snapshotChunkBytes: 64 * 1024 }, { maxSnapshotBytes: 100 * 1024 });
    // 16 MiB: far more than the socket buffers hold, so the refusal cuts it off midway.
    const data = new Uint8Array(16 * 1024 * 1024);
    const snap = message({ type: 'snap', from: 1, to: 2, term: 9, snapshot: { metadata: { index: 5, term: 8, confState: { voters: [1, 2], learners: [], votersOutgoing: [], learnersNext: [], autoLeave: false } }, data } });
    const statuses: [number, boolean][] = [];
    a.t.onSnapshotStatus((peer, ok) => statuses.push([peer, ok]));
    a.t.send([snap]);
    await until('b to log the refusal', () => b.logs.length === 1);
    expect(b.logs[0]).toMatch(/closed connection with peer 1 .*a snapshot of 16777216 bytes, more than the limit of 102400/);
    expect(b.got).toEqual([]);
    // The cut-off snapshot is reported failed and dropped (the core sends a fresh one), not resent in a loop.
    await until('a to see the connection gone', () => !a.t.stats().peers[0]!.connected);
    expect(statuses).toEqual([[2, false]]);
    expect(a.t.stats().peers[0]).toMatchObject({ queued: 0, dropped: 1 });
    a.t.send([message({ type: 'heartbeat', from: 1, to: 2, term: 9 })]);
    await until('the heartbeat over a new connection', () => b.got.length === 1);
    expect(b.logs).toHaveLength(1);
  });

  it('dials again after the peer closes, and delivers to it when it is back on the same port', async () => {
    const [a, b] = await pair();
    a.t.send([message({ type: 'heartbeat', from: 1, to: 2, term: 1, commit: 1 })]);
    await until('first heartbeat', () => b.got.length === 1);
    const unreachable: number[] = [];
    a.t.onUnreachable((p) => unreachable.push(p));
    await b.t.close();
    open.splice(open.indexOf(b), 1);
    await until('a to see the connection gone', () => a.t.stats().peers[0]!.connected === false);
    expect(unreachable).toContain(2);
    // Sent while b is down: queued, redialed with back-off.
    a.t.send([message({ type: 'heartbeat', from: 1, to: 2, term: 1, commit: 2 })]);
    await sleepMs(150);
    expect(a.t.stats().peers[0]).toMatchObject({ connected: false, queued: 1 });
    expect(a.logs.filter((l) => l.includes('cannot reach peer 2'))).toHaveLength(1);
    const b2 = track(await node(2, { 1: a.port }, {}, b.port));
    await until('the queued heartbeat to reach the restarted b', () => b2.got.length === 1, 5000);
    expect(b2.got[0]!.commit).toBe(2);
    expect(a.t.stats().peers[0]).toMatchObject({ connected: true, queued: 0, dropped: 0 });
    expect(a.t.stats().reconnects).toBe(1);
  });

  it('a peer that stops reading fills only its own bounded queue: drops are counted, the other peer is unaffected', async () => {
    const stalled: import('node:net').Socket[] = [];
    const slow = await rawPeerServer(3, (s) => {
      s.pause();
      stalled.push(s);
    });
    try {
      const p1 = await freePort();
      const p2 = await freePort();
      const a = track(await node(1, { 2: p2, 3: slow.port }, { maxQueuedMessages: 64, maxQueuedBytes: 1024 * 1024 }, p1));
      const b = track(await node(2, { 1: p1 }, {}, p2));
      const payload = new Uint8Array(64 * 1024);
      const app = (to: number, i: number): Message => message({ type: 'app', from: 1, to, term: 2, index: i, entries: [{ term: 2, index: i + 1, type: 'normal', data: payload }] });
      // 2000 appends of 64 KiB to each: 128 MiB to the stalled peer, far past the kernel's buffers
      // and the queue. Sent 8 at a time, as fast as b's connection drains them: b's queue never
      // holds more than 8, whatever the stalled peer's holds.
      const queuedFor = (id: number): number => a.t.stats().peers.find((p) => p.id === id)!.queued;
      for (let i = 0; i < 2000; i++) {
        a.t.send([app(3, i), app(2, i)]);
        if (i % 8 === 7) await until('b to drain', () => queuedFor(2) === 0, 5000);
      }
      await until('b to receive every append', () => b.got.length === 2000, 30_000);
      expect(b.got.map((m) => m.index)).toEqual([...Array(2000).keys()]);
      const s = a.t.stats();
      const p3 = s.peers.find((p) => p.id === 3)!;
      const p2s = s.peers.find((p) => p.id === 2)!;
      expect(stalled).toHaveLength(1);
      expect(p3.dropped).toBeGreaterThan(1000);
      expect(p3.queued).toBeLessThanOrEqual(64);
      expect(p3.queuedBytes).toBeLessThanOrEqual(1024 * 1024);
      expect(p3.sent + p3.queued + p3.dropped).toBe(2000);
      expect(p2s).toMatchObject({ dropped: 0, queued: 0, sent: 2000 });
      expect(s.dropped).toBe(p3.dropped);
    } finally {
      await slow.close();
    }
  }, 60_000);

  it("a connection from a peer's new incarnation replaces one to its old, even one the tie rule would keep", async () => {
    // Node 2's old incarnation: authenticated, then silent (as a host that vanished without closing).
    const silent: import('node:net').Socket[] = [];
    const old2 = await rawPeerServer(2, (s) => {
      s.pause();
      silent.push(s);
    });
    try {
      const a = track(await node(1, { 2: old2.port }));
      a.t.send([message({ type: 'heartbeat', from: 1, to: 2, term: 1, commit: 1 })]);
      await until('a to hold a connection to the old incarnation', () => silent.length === 1 && a.t.stats().peers[0]!.connected);
      // Node 2 restarts elsewhere and dials node 1. Node 1 dialed the old connection (the lower
      // id), which would win the tie; the new incarnation wins instead.
      const new2 = track(await node(2, { 1: a.port }));
      a.t.addPeer(2, `127.0.0.1:${new2.port}`);
      new2.t.send([message({ type: 'heartbeat', from: 2, to: 1, term: 1, commit: 2 })]);
      await until('a to hear the new incarnation', () => a.got.length === 1);
      a.t.send([message({ type: 'heartbeat', from: 1, to: 2, term: 1, commit: 3 })]);
      await until('the new incarnation to hear a', () => new2.got.length === 1);
      expect(new2.got[0]!.commit).toBe(3);
      expect([...a.logs, ...new2.logs]).toEqual([]);
    } finally {
      await old2.close();
    }
  });

  it('drops messages to nodes that are not peers, counted; removePeer discards the queue', async () => {
    const [a] = await pair();
    a.t.send([message({ type: 'heartbeat', from: 1, to: 7, term: 1 })]);
    expect(a.t.stats().droppedUnknownPeer).toBe(1);
    a.t.removePeer(2);
    a.t.send([message({ type: 'heartbeat', from: 1, to: 2, term: 1 })]);
    expect(a.t.stats()).toMatchObject({ peers: [], droppedUnknownPeer: 2 });
    a.t.addPeer(2, '127.0.0.1:1');
    expect(() => a.t.send([message({ type: 'heartbeat', from: 1, to: 2 }), message({ type: 'heartbeat', from: 3, to: 2 })])).toThrow(/must be from 1, got 3/);
    expect(() => a.t.send([message({ type: 'hup', from: 1, to: 2 })])).toThrow(/hup messages are local/);
    expect(a.t.stats().queued).toBe(0);
    await a.t.close();
    expect(() => a.t.send([])).toThrow(/closed/);
  });
});

describe('Raft transport reconnect timing', () => {
  it('redials with exponential back-off, jittered by the injected Random, capped, and reset by a connection', async () => {
    const delays: number[] = [];
    // The system clock, with every back-off delay (the timers shorter than the 5 s handshake limit) recorded.
    const clock: Clock = {
      now: () => systemClock.now(),
      setTimer: (ms, fn) => {
        if (ms < 5000) delays.push(ms);
        return systemClock.setTimer(ms, fn);
      },
    };
    const random: Random = { next: () => 0.5 };
    const port = await freePort();
    const a = track(await node(1, { 2: port }, { clock, random, reconnectMinMs: 4, reconnectMaxMs: 32 }));
    a.t.send([message({ type: 'heartbeat', from: 1, to: 2, term: 1, commit: 1 })]);
    await until('six redials', () => delays.length >= 6);
    // cap = min(32, 4 * 2^attempt); delay = cap/2 + random * cap/2 = 0.75 cap.
    expect(delays.slice(0, 6)).toEqual([3, 6, 12, 24, 24, 24]);
    expect(a.logs.filter((l) => l.includes('cannot reach peer 2'))).toHaveLength(1);
    // The peer comes up: the queued heartbeat goes through, and the next outage starts from the first delay.
    const b = track(await node(2, { 1: a.port }, {}, port));
    await until('the heartbeat', () => b.got.length === 1, 5000);
    await b.t.close();
    open.splice(open.indexOf(b), 1);
    await until('a to see b gone', () => a.t.stats().peers[0]!.connected === false);
    delays.length = 0;
    a.t.send([message({ type: 'heartbeat', from: 1, to: 2, term: 1, commit: 2 })]);
    await until('two more redials', () => delays.length >= 2);
    expect(delays.slice(0, 2)).toEqual([3, 6]);
  });
});
