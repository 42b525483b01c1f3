/**
 * Hostile and mistaken connections to a Raft transport: each is closed with one log line (never
 * the secret), and the node keeps serving its real peer.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { SeededRandom } from '../../src/core/random.js';
import { message } from '../../src/raft/core/types.js';
import { encodeMessages } from '../../src/raft/transport/codec.js';
import { FrameKind, PROTOCOL_VERSION, frame } from '../../src/raft/transport/frame.js';
import { encodeStep, newIncarnation, newNonce } from '../../src/raft/transport/handshake.js';
import { freePort } from '../fixtures/ports.js';
import { CLUSTER, SECRET, closed, node, rawAuthenticated, rawConnect, sleepMs, until, type Node } from './transport-helpers.js';

const open: Node[] = [];
const track = (n: Node): Node => (open.push(n), n);
afterEach(async () => {
  await Promise.all(open.splice(0).map((n) => n.t.close()));
});

/** Nodes 1 and 2, peers of each other; b (node 2) is the one attacked. */
async function pair(extra2 = {}): Promise<[Node, Node]> {
  const p1 = await freePort();
  const p2 = await freePort();
  const a = track(await node(1, { 2: p2 }, {}, p1));
  const b = track(await node(2, { 1: p1 }, extra2, p2));
  return [a, b];
}

/** b still serves a: a heartbeat from a arrives. */
async function stillServes(a: Node, b: Node): Promise<void> {
  const before = b.got.length;
  a.t.send([message({ type: 'heartbeat', from: 1, to: 2, term: 3, commit: before })]);
  await until('b to still receive from a', () => b.got.length === before + 1);
}

function noSecretIn(lines: readonly string[]): void {
  for (const l of lines) expect(l).not.toContain(SECRET);
}

describe('Raft transport against hostile connections', () => {
  it('garbage on the port: each connection is closed with one log line', async () => {
    const [a, b] = await pair();
    const random = new SeededRandom(11);
    for (let i = 0; i < 5; i++) {
      const s = await rawConnect(b.port);
      s.on('error', () => {});
      s.write(Buffer.from(Uint8Array.from({ length: 4096 }, () => Math.floor(random.next() * 256))));
      await closed(s);
    }
    await until('five log lines', () => b.logs.length === 5);
    for (const l of b.logs) expect(l).toMatch(/^raft transport 2: closed connection from 127\.0\.0\.1:\d+: /);
    await stillServes(a, b);
    expect(b.logs).toHaveLength(5);
  });

  it('a frame claiming 4 GiB, before and after authentication: one log line each, nothing allocated', async () => {
    const [a, b] = await pair();
    const claim = Buffer.from([0xff, 0xff, 0xff, 0xff, PROTOCOL_VERSION, FrameKind.peerMessages]);
    const raw = await rawConnect(b.port);
    raw.on('error', () => {});
    raw.write(claim);
    await closed(raw);
    await until('a log line', () => b.logs.length === 1);
    expect(b.logs[0]).toMatch(/closed connection from 127\.0\.0\.1:\d+: a peer messages frame claims 4294967295 bytes, more than the limit of 1024$/);

    const authed = await rawAuthenticated(b.port, 2, { id: 1 });
    authed.on('error', () => {});
    authed.write(claim);
    await closed(authed);
    await until('a second log line', () => b.logs.length === 2);
    expect(b.logs[1]).toMatch(/closed connection with peer 1 \(127\.0\.0\.1:\d+\): a peer messages frame claims 4294967295 bytes, more than the limit of 67108864$/);
    await stillServes(a, b);
    expect(b.logs).toHaveLength(2);
  });

  it('a peer speaking an older protocol version is refused with one log line', async () => {
    const [a, b] = await pair();
    const hello = frame(FrameKind.handshake, encodeStep({ step: 'hello', dialer: 1, acceptor: 2, clusterId: CLUSTER, nonce: newNonce(), incarnation: newIncarnation() }));
    hello[4] = PROTOCOL_VERSION - 1;
    const s = await rawConnect(b.port);
    s.on('error', () => {});
    s.write(hello);
    await closed(s);
    await until('a log line', () => b.logs.length === 1);
    expect(b.logs[0]).toMatch(/closed connection from 127\.0\.0\.1:\d+: it speaks protocol version 0, this node speaks version 1$/);
    await stillServes(a, b);
  });

  it('an unknown peer id is refused with one log line on each side', async () => {
    const [a, b] = await pair();
    const stranger = track(await node(9, { 2: b.port }, { reconnectMinMs: 60_000, reconnectMaxMs: 60_000 }));
    stranger.t.send([message({ type: 'heartbeat', from: 9, to: 2, term: 1 })]);
    await until('both to log', () => b.logs.length === 1 && stranger.logs.length === 1);
    expect(b.logs[0]).toMatch(/refused connection from 127\.0\.0\.1:\d+: node id 9 is not a peer of this node$/);
    expect(stranger.logs[0]).toMatch(/closed connection to peer 2 127\.0\.0\.1:\d+: the peer refused it: unknown peer id$/);
    expect(b.got).toEqual([]);
    await stillServes(a, b);
  });

  it('a wrong secret is refused with one log line, and the secret is in no line', async () => {
    const [a, b] = await pair();
    const imposter = track(await node(1, { 2: b.port }, { secret: 'not the cluster secret!', reconnectMinMs: 60_000, reconnectMaxMs: 60_000 }));
    imposter.t.send([message({ type: 'heartbeat', from: 1, to: 2, term: 1 })]);
    await until('both to log', () => b.logs.length === 1 && imposter.logs.length === 1);
    expect(b.logs[0]).toMatch(/refused connection from 127\.0\.0\.1:\d+: node 1 did not prove the cluster secret \(wrong secret\?\)$/);
    expect(imposter.logs[0]).toMatch(/the peer refused it: authentication failed \(wrong secret\?\)$/);
    expect(b.got).toEqual([]);
    noSecretIn([...b.logs, ...imposter.logs]);
    expect(imposter.logs[0]).not.toContain('not the cluster secret!');
    await stillServes(a, b);
    expect(b.logs).toHaveLength(1);
  });

  it('a node that answers with a wrong secret is not trusted by the dialer', async () => {
    const p = await freePort();
    const dialer = track(await node(1, { 2: p }, { reconnectMinMs: 60_000, reconnectMaxMs: 60_000 }));
    const fake = track(await node(2, { 1: dialer.port }, { secret: 'another secret, sixteen+' }, p));
    dialer.t.send([message({ type: 'heartbeat', from: 1, to: 2, term: 1 })]);
    // The fake acceptor checks the dialer's proof first and refuses it, so no proof of its own is sent.
    await until('both to log', () => fake.logs.length === 1 && dialer.logs.length === 1);
    expect(fake.logs[0]).toMatch(/did not prove the cluster secret/);
    expect(dialer.logs[0]).toMatch(/the peer refused it/);
    expect(fake.got).toEqual([]);
  });

  it('a wrong cluster id is refused with one log line', async () => {
    const [a, b] = await pair();
    const other = track(await node(1, { 2: b.port }, { clusterId: 'other-cluster', reconnectMinMs: 60_000, reconnectMaxMs: 60_000 }));
    other.t.send([message({ type: 'heartbeat', from: 1, to: 2, term: 1 })]);
    await until('both to log', () => b.logs.length === 1 && other.logs.length === 1);
    expect(b.logs[0]).toMatch(/refused connection from 127\.0\.0\.1:\d+: node 1 is in cluster "other-cluster", this node in "test-cluster"$/);
    expect(other.logs[0]).toMatch(/the peer refused it: cluster id mismatch$/);
    expect(b.got).toEqual([]);
    await stillServes(a, b);
  });

  it('a connection that never finishes its handshake is closed after the timeout', async () => {
    const [a, b] = await pair({ handshakeTimeoutMs: 200 });
    const s = await rawConnect(b.port);
    s.on('error', () => {});
    const started = performance.now();
    await closed(s);
    expect(performance.now() - started).toBeGreaterThanOrEqual(150);
    await until('a log line', () => b.logs.length === 1);
    expect(b.logs[0]).toMatch(/closed connection from 127\.0\.0\.1:\d+: handshake not completed within 200 ms$/);
    await stillServes(a, b);
  });

  it('the handshake deadline runs from the TCP connect: a first byte late in it does not restart it', async () => {
    const [a, b] = await pair({ handshakeTimeoutMs: 400 });
    const s = await rawConnect(b.port);
    s.on('error', () => {});
    const started = performance.now();
    await sleepMs(300);
    s.write(Buffer.of(0)); // the first byte of a frame header, then nothing
    await closed(s);
    const took = performance.now() - started;
    expect(took).toBeGreaterThanOrEqual(350);
    expect(took).toBeLessThan(690); // not 300 + 400
    await until('a log line', () => b.logs.length === 1);
    expect(b.logs[0]).toMatch(/closed connection from 127\.0\.0\.1:\d+: handshake not completed within 400 ms$/);
    await stillServes(a, b);
  });

  it('a client request before the handshake and a message claiming another sender are refused', async () => {
    const [a, b] = await pair();
    const s = await rawConnect(b.port);
    s.on('error', () => {});
    s.write(frame(FrameKind.clientRequest, Buffer.from('{}')));
    await closed(s);
    await until('a log line', () => b.logs.length === 1);
    expect(b.logs[0]).toMatch(/a client request frame before authentication$/);

    const authed = await rawAuthenticated(b.port, 2, { id: 1 });
    authed.on('error', () => {});
    authed.write(frame(FrameKind.peerMessages, encodeMessages([message({ type: 'heartbeat', from: 3, to: 2, term: 1 })])));
    await closed(authed);
    await until('a second log line', () => b.logs.length === 2);
    expect(b.logs[1]).toMatch(/closed connection with peer 1 .*a heartbeat message from 3 to 2 on the connection of peer 1/);
    expect(b.got).toEqual([]);
    await sleepMs(10);
    await stillServes(a, b);
  });

  it('random frame bodies from an authenticated peer: each connection closed with one line naming a frame fault, never an unexpected error', async () => {
    const [a, b] = await pair();
    const random = new SeededRandom(99);
    for (let i = 0; i < 20; i++) {
      const authed = await rawAuthenticated(b.port, 2, { id: 1 });
      authed.on('error', () => {});
      const kind = i % 2 === 0 ? FrameKind.peerMessages : FrameKind.snapshotChunk;
      // A first byte of 1..3 makes the body a plausible batch count (or chunk flag), so decoding gets further in.
      const body = Uint8Array.from({ length: 1 + Math.floor(random.next() * 300) }, (_, k) => (k === 0 ? 1 + Math.floor(random.next() * 3) : Math.floor(random.next() * 256)));
      authed.write(frame(kind, body));
      await closed(authed);
      await until(`log line ${i + 1}`, () => b.logs.length === i + 1);
    }
    for (const l of b.logs) {
      expect(l).toMatch(/^raft transport 2: closed connection with peer 1 \(127\.0\.0\.1:\d+\): /);
      expect(l).not.toMatch(/unexpected error/);
    }
    expect(b.got).toEqual([]);
    await stillServes(a, b);
  });

  it('a snapshot chunk that does not continue the snapshot being received closes the connection', async () => {
    const [a, b] = await pair();
    const authed = await rawAuthenticated(b.port, 2, { id: 1 });
    authed.on('error', () => {});
    // flags 0 (not first), seq 0, offset 0: no snapshot was started.
    authed.write(frame(FrameKind.snapshotChunk, Uint8Array.of(0, 0, 0, 1, 2, 3)));
    await closed(authed);
    await until('a log line', () => b.logs.length === 1);
    expect(b.logs[0]).toMatch(/snapshot chunk 0 at offset 0 does not continue the snapshot being received$/);
    await stillServes(a, b);
  });

  it('a flood of connections that never authenticate: those past 64 are closed at once with one line, and the node keeps serving', async () => {
    const [a, b] = await pair({ handshakeTimeoutMs: 3000 });
    const sockets = await Promise.all(Array.from({ length: 80 }, () => rawConnect(b.port)));
    for (const s of sockets) s.on('error', () => {});
    const closedEarly = sockets.map((s) => ({ s, closed: false }));
    for (const c of closedEarly) c.s.once('close', () => (c.closed = true));
    await until('16 connections closed at accept', () => closedEarly.filter((c) => c.closed).length === 16, 2000);
    expect(b.logs).toHaveLength(1);
    expect(b.logs[0]).toMatch(/refusing connections: 64 are already in their handshake/);
    for (const s of sockets) s.destroy();
    await sleepMs(50);
    await stillServes(a, b);
  });
});
