/**
 * The Raft transport inside TLS with mutual certificates, made by openssl in a temp dir: two
 * nodes whose certificates the cluster's CA signed talk; a node presenting a certificate from
 * another CA, an expired one or none is refused with one log line and told why; a plaintext
 * connection to a TLS node is told TLS is required, and a TLS one to a plaintext node is refused
 * by name; store clients may come without a certificate only where the node allows it.
 */
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import tls from 'node:tls';
import { message } from '../../src/raft/core/types.js';
import { FrameKind, FrameReader, frame } from '../../src/raft/transport/frame.js';
import { decodeStep, encodeStep, newIncarnation, newNonce, type HandshakeStep } from '../../src/raft/transport/handshake.js';
import { freePort } from '../fixtures/ports.js';
import { CLUSTER, hasOpenssl, makeCerts, node, sleepMs, until, type Certs, type Node } from './transport-helpers.js';

const openssl = hasOpenssl();
const open: Node[] = [];
const track = (n: Node): Node => (open.push(n), n);
let certs: Certs;

// Skipped only where the openssl command is missing: the certificates are made by it.
describe.skipIf(!openssl)('Raft transport over TLS with client certificates (needs the openssl command)', () => {
  beforeAll(() => {
    certs = makeCerts();
  });
  afterAll(() => certs?.cleanup());
  afterEach(async () => {
    await Promise.all(open.splice(0).map((n) => n.t.close()));
  });

  it('two nodes with certificates of the cluster CA exchange messages both ways', async () => {
    const p1 = await freePort();
    const p2 = await freePort();
    const a = track(await node(1, { 2: p2 }, { tls: { ...certs.node1, ca: certs.ca } }, p1));
    const b = track(await node(2, { 1: p1 }, { tls: { ...certs.node2, ca: certs.ca } }, p2));
    const data = new Uint8Array(3 * 1024 * 1024).fill(5);
    const snap = message({ type: 'snap', from: 1, to: 2, term: 2, snapshot: { metadata: { index: 10, term: 2, confState: { voters: [1, 2], learners: [], votersOutgoing: [], learnersNext: [], autoLeave: false } }, data } });
    a.t.send([message({ type: 'app', from: 1, to: 2, term: 2, index: 3, entries: [{ term: 2, index: 4, type: 'normal', data: Uint8Array.of(1, 2) }] }), snap]);
    b.t.send([message({ type: 'appResp', from: 2, to: 1, term: 2, index: 4 })]);
    await until('both to receive', () => b.got.length === 2 && a.got.length === 1, 10_000).catch((err) => {
      throw new Error(`${err}: ${JSON.stringify([a.logs, b.logs])}`);
    });
    expect(b.got[0]!.entries[0]!.data).toEqual(Uint8Array.of(1, 2));
    expect(b.got[1]!.snapshot!.data.byteLength).toBe(data.byteLength);
    expect(a.got[0]).toMatchObject({ type: 'appResp', index: 4 });
    expect([...a.logs, ...b.logs]).toEqual([]);
  });

  it('a node presenting a certificate from another CA is refused at the TLS handshake, one log line', async () => {
    const p1 = await freePort();
    const p2 = await freePort();
    const b = track(await node(2, { 1: p1 }, { tls: { ...certs.node2, ca: certs.ca } }, p2));
    // It trusts the cluster's CA (so it would accept b), but its own certificate is the rogue CA's.
    const rogue = track(await node(1, { 2: p2 }, { tls: { ...certs.rogue, ca: certs.ca }, reconnectMinMs: 60_000, reconnectMaxMs: 60_000 }, p1));
    rogue.t.send([message({ type: 'heartbeat', from: 1, to: 2, term: 1 })]);
    await until('b to log the refusal', () => b.logs.length === 1);
    expect(b.logs[0]).toMatch(/^raft transport 2: refused TLS connection from 127\.0\.0\.1:\d+: client certificate not accepted \(\w+\)$/);
    await sleepMs(100);
    expect(b.got).toEqual([]);
    expect(b.logs).toHaveLength(1);
    expect(rogue.t.stats().peers[0]).toMatchObject({ connected: false, queued: 1 });
    // The rogue node hears of it once, and why: the refusal comes inside TLS (its side of the
    // TLS handshake had ended before the server's check).
    expect(rogue.logs).toEqual([expect.stringMatching(/^raft transport 1: closed connection to peer 2 127\.0\.0\.1:\d+: the peer refused it: TLS client certificate not accepted/)]);

    // b keeps serving a node whose certificate the CA signed.
    await rogue.t.close();
    open.splice(open.indexOf(rogue), 1);
    const a = track(await node(1, { 2: p2 }, { tls: { ...certs.node1, ca: certs.ca } }, p1));
    a.t.send([message({ type: 'heartbeat', from: 1, to: 2, term: 1, commit: 7 })]);
    await until('the heartbeat', () => b.got.length === 1, 10_000);
    expect(b.got[0]!.commit).toBe(7);
  });

  it('an expired certificate of the cluster CA is refused, one log line naming CERT_HAS_EXPIRED', async () => {
    const p1 = await freePort();
    const p2 = await freePort();
    const b = track(await node(2, { 1: p1 }, { tls: { ...certs.node2, ca: certs.ca } }, p2));
    const old = track(await node(1, { 2: p2 }, { tls: { ...certs.expired, ca: certs.ca }, reconnectMinMs: 60_000, reconnectMaxMs: 60_000 }, p1));
    old.t.send([message({ type: 'heartbeat', from: 1, to: 2, term: 1 })]);
    await until('b to log the refusal', () => b.logs.length === 1);
    expect(b.logs[0]).toMatch(/^raft transport 2: refused TLS connection from 127\.0\.0\.1:\d+: client certificate not accepted \(CERT_HAS_EXPIRED\)$/);
    await until('the old node to hear why', () => old.logs.length === 1);
    expect(old.logs[0]).toMatch(/the peer refused it: TLS client certificate not accepted/);
    expect(b.got).toEqual([]);
  });

  it('a peer presenting no certificate is refused, and told so', async () => {
    const p2 = await freePort();
    const b = track(await node(2, { 1: 1 }, { tls: { ...certs.node2, ca: certs.ca } }, p2));
    // It trusts the CA (so the TLS handshake itself completes) but shows no certificate.
    const answer = await tlsHello(p2, { ca: certs.ca }, 1, 2);
    expect(answer).toEqual({ step: 'refuse', reason: 'certificate' });
    await until('b to log', () => b.logs.length === 1);
    expect(b.logs[0]).toMatch(/^raft transport 2: refused TLS connection from 127\.0\.0\.1:\d+: client certificate not accepted \(none presented\)$/);
  });

  it('with clientsWithoutCert a store client may come without a certificate, a peer still may not', async () => {
    const p2 = await freePort();
    const b = track(await node(2, { 1: 1 }, { tls: { ...certs.node2, ca: certs.ca, clientsWithoutCert: true } }, p2));
    b.t.onClient(() => {});
    // A store client's hello (dialer 0) gets the challenge: on to proving the secret.
    expect(await tlsHello(p2, { ca: certs.ca }, 0, 0)).toMatchObject({ step: 'challenge' });
    // A peer's hello without a certificate is refused, whatever it claims.
    expect(await tlsHello(p2, { ca: certs.ca }, 1, 2)).toEqual({ step: 'refuse', reason: 'certificate' });
    await until('b to log', () => b.logs.length === 1);
    expect(b.logs[0]).toMatch(/^raft transport 2: refused connection from 127\.0\.0\.1:\d+: node 1 presented no TLS client certificate \(peers need one\)$/);
    // A certificate from another CA is refused even here.
    expect(await tlsHello(p2, { ca: certs.ca, ...certs.rogue }, 0, 0)).toEqual({ step: 'refuse', reason: 'certificate' });
  });

  it('a plaintext peer on the TLS port is told TLS is required, one log line on each side', async () => {
    const p2 = await freePort();
    const b = track(await node(2, { 1: 1 }, { tls: { ...certs.node2, ca: certs.ca } }, p2));
    const plain = track(await node(1, { 2: p2 }, { reconnectMinMs: 60_000, reconnectMaxMs: 60_000, handshakeTimeoutMs: 2000 }));
    plain.t.send([message({ type: 'heartbeat', from: 1, to: 2, term: 1 })]);
    await until('b to log', () => b.logs.length === 1);
    expect(b.logs[0]).toMatch(/^raft transport 2: refused connection from 127\.0\.0\.1:\d+: not TLS, and this node takes TLS connections only$/);
    await until('the plaintext node to hear why', () => plain.logs.length === 1);
    expect(plain.logs[0]).toMatch(/^raft transport 1: closed connection to peer 2 127\.0\.0\.1:\d+: the peer refused it: this node takes TLS connections only$/);
    expect(b.got).toEqual([]);
  });

  it('a TLS peer on a plaintext port is refused by name, and the plaintext node keeps serving', async () => {
    const p1 = await freePort();
    const p2 = await freePort();
    const b = track(await node(2, { 1: p1 }, {}, p2));
    const secure = track(await node(1, { 2: p2 }, { tls: { ...certs.node1, ca: certs.ca }, reconnectMinMs: 60_000, reconnectMaxMs: 60_000 }, p1));
    secure.t.send([message({ type: 'heartbeat', from: 1, to: 2, term: 1 })]);
    await until('b to log', () => b.logs.length === 1);
    expect(b.logs[0]).toMatch(/^raft transport 2: refused connection from 127\.0\.0\.1:\d+: a TLS handshake, but this node serves without TLS$/);
    await until('the TLS node to log', () => secure.logs.length === 1);
    expect(secure.logs[0]).toMatch(/^raft transport 1: (cannot reach peer 2|connection to peer 2)/);
    await secure.t.close();
    open.splice(open.indexOf(secure), 1);
    const a = track(await node(1, { 2: p2 }, {}, p1));
    a.t.send([message({ type: 'heartbeat', from: 1, to: 2, term: 1, commit: 3 })]);
    await until('the heartbeat', () => b.got.length === 1, 10_000);
    expect(b.got[0]!.commit).toBe(3);
  });
});

/**
 * Opens a TLS connection to `port` (trusting `options.ca`, showing `options.cert` if given),
 * sends a hello as `dialer` to `acceptor`, and resolves with the first handshake step answered.
 */
function tlsHello(port: number, options: { ca: string; cert?: string; key?: string }, dialer: number, acceptor: number): Promise<HandshakeStep> {
  return new Promise((resolve, reject) => {
    const s = tls.connect({ host: '127.0.0.1', port, ...options }, () => {
      s.write(frame(FrameKind.handshake, encodeStep({ step: 'hello', dialer, acceptor, clusterId: CLUSTER, nonce: newNonce(), incarnation: newIncarnation() })));
    });
    const reader = new FrameReader(1024, (_kind, body) => {
      resolve(decodeStep(body));
      s.destroy();
    });
    s.on('data', (chunk: Buffer) => reader.push(chunk));
    s.on('error', reject);
    s.on('close', () => reject(new Error('closed without an answer')));
  });
}
