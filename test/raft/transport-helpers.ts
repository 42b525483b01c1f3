/**
 * Helpers of the Raft transport tests: transports on real loopback ports with their log lines
 * kept, a raw client and a raw peer server that speak the handshake by hand (to send what a real
 * transport never would), and waiting for a condition.
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePort } from '../fixtures/ports.js';
import type { Message } from '../../src/raft/core/types.js';
import { FrameKind, FrameReader, frame } from '../../src/raft/transport/frame.js';
import { decodeStep, encodeStep, handshakeMac, newIncarnation, newNonce } from '../../src/raft/transport/handshake.js';
import { RaftTransport, type TransportOptions } from '../../src/raft/transport/transport.js';

export const CLUSTER = 'test-cluster';
export const SECRET = 'correct horse battery staple';

export interface Node {
  readonly t: RaftTransport;
  readonly port: number;
  readonly logs: string[];
  readonly got: Message[];
}

/** A transport listening on 127.0.0.1:`port` (a fresh one if not given), collecting what it logs and receives. */
export async function node(id: number, peers: Record<number, number>, extra: Partial<TransportOptions> = {}, port?: number): Promise<Node> {
  const logs: string[] = [];
  const got: Message[] = [];
  const p = port ?? (await freePort());
  const t = await RaftTransport.listen({
    id,
    clusterId: CLUSTER,
    secret: SECRET,
    listen: { host: '127.0.0.1', port: p },
    peers: Object.fromEntries(Object.entries(peers).map(([k, v]) => [k, `127.0.0.1:${v}`])),
    log: (line) => logs.push(line),
    reconnectMinMs: 10,
    reconnectMaxMs: 100,
    ...extra,
  });
  t.onMessage((m) => got.push(m));
  return { t, port: p, logs, got };
}

/** Resolves once `cond` holds (polled every 5 ms); rejects after `ms` naming `what`. */
export async function until(what: string, cond: () => boolean, ms = 5000): Promise<void> {
  const deadline = performance.now() + ms;
  while (!cond()) {
    if (performance.now() > deadline) throw new Error(`timed out after ${ms} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 5));
  }
}

export const sleepMs = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** Resolves when the socket closes. */
export function closed(s: net.Socket): Promise<void> {
  return new Promise((r) => (s.destroyed && s.closed ? r() : s.once('close', () => r())));
}

/** A raw TCP client that connects and resolves with its socket (what it receives is discarded, so it sees the close). */
export function rawConnect(port: number): Promise<net.Socket> {
  return new Promise((resolve, reject) => {
    const s = net.connect({ host: '127.0.0.1', port }, () => resolve(s));
    s.resume();
    s.on('error', reject);
  });
}

export interface HandshakeAs {
  readonly id: number;
  readonly clusterId?: string;
  readonly secret?: string;
}

/**
 * A raw client that authenticates to node `acceptor` on `port` as `as.id` and resolves with the
 * open socket (frames after this are read by nobody: the caller writes what it likes).
 */
export function rawAuthenticated(port: number, acceptor: number, as: HandshakeAs): Promise<net.Socket> {
  return new Promise((resolve, reject) => {
    const s = net.connect({ host: '127.0.0.1', port });
    const nonce = newNonce();
    const clusterId = as.clusterId ?? CLUSTER;
    const secret = Buffer.from(as.secret ?? SECRET);
    const incarnation = newIncarnation();
    const reader = new FrameReader(1024, (_kind, body) => {
      const step = decodeStep(body);
      if (step.step === 'challenge') {
        const mac = handshakeMac(secret, 'dialer', { clusterId, dialer: as.id, acceptor, dialerNonce: nonce, acceptorNonce: step.nonce, dialerIncarnation: incarnation, acceptorIncarnation: step.incarnation });
        s.write(frame(FrameKind.handshake, encodeStep({ step: 'auth', mac })));
      } else if (step.step === 'accept') {
        s.removeAllListeners('data');
        s.removeAllListeners('close');
        s.resume();
        resolve(s);
      } else {
        reject(new Error(`handshake refused: ${JSON.stringify(step)}`));
      }
    });
    s.on('connect', () => s.write(frame(FrameKind.handshake, encodeStep({ step: 'hello', dialer: as.id, acceptor, clusterId, nonce, incarnation }))));
    s.on('data', (chunk: Buffer) => reader.push(chunk));
    s.on('error', reject);
    s.on('close', () => reject(new Error('closed during the handshake')));
  });
}

/**
 * A raw peer server for node `id`: it answers the handshake of whoever dials it, then calls
 * `onOpen` with the socket (and reads nothing more unless `onOpen` does).
 */
export async function rawPeerServer(id: number, onOpen: (s: net.Socket) => void): Promise<{ port: number; close: () => Promise<void> }> {
  const port = await freePort();
  const sockets = new Set<net.Socket>();
  const incarnation = newIncarnation();
  const server = net.createServer((s) => {
    sockets.add(s);
    s.on('error', () => {});
    const acceptorNonce = newNonce();
    let ctx: { dialer: number; dialerNonce: Uint8Array; dialerIncarnation: Uint8Array } | null = null;
    const reader = new FrameReader(1024, (_kind, body) => {
      const step = decodeStep(body);
      if (step.step === 'hello') {
        ctx = { dialer: step.dialer, dialerNonce: step.nonce, dialerIncarnation: step.incarnation };
        s.write(frame(FrameKind.handshake, encodeStep({ step: 'challenge', nonce: acceptorNonce, incarnation })));
      } else if (step.step === 'auth' && ctx) {
        const mac = handshakeMac(Buffer.from(SECRET), 'acceptor', { clusterId: CLUSTER, dialer: ctx.dialer, acceptor: id, dialerNonce: ctx.dialerNonce, acceptorNonce, dialerIncarnation: ctx.dialerIncarnation, acceptorIncarnation: incarnation });
        s.write(frame(FrameKind.handshake, encodeStep({ step: 'accept', mac })));
        s.removeAllListeners('data');
        reader.stop();
        onOpen(s);
      }
    });
    s.on('data', (chunk: Buffer) => reader.push(chunk));
  });
  await new Promise<void>((r) => server.listen(port, '127.0.0.1', () => r()));
  return {
    port,
    close: () =>
      new Promise<void>((r) => {
        for (const s of sockets) s.destroy();
        server.close(() => r());
      }),
  };
}

export interface Certs {
  readonly dir: string;
  readonly ca: string;
  readonly node1: { key: string; cert: string };
  readonly node2: { key: string; cert: string };
  /** A key and certificate from another CA, with the same names. */
  readonly rogue: { key: string; cert: string };
  /** Signed by the cluster's CA, for 127.0.0.1, but expired the day before it was made. */
  readonly expired: { key: string; cert: string };
  /** Signed by the cluster's CA for another name only (DNS:elsewhere.test), no IP. */
  readonly elsewhere: { key: string; cert: string };
  /** The path of a file in `dir`: `ca.crt`, `rogue-ca.crt`, `NAME.crt` and `NAME.key` for each pair above. */
  readonly file: (name: string) => string;
  readonly cleanup: () => void;
}

/** Whether the openssl command is available. */
export function hasOpenssl(): boolean {
  try {
    execFileSync('openssl', ['version'], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
}

/**
 * A CA, node certificates for 127.0.0.1 signed by it (two valid, one expired, one for another
 * name), and one signed by another CA (openssl, in a temp dir, as PEM text and as files).
 */
export function makeCerts(): Certs {
  const dir = mkdtempSync(join(tmpdir(), 'tenure-tls-'));
  const run = (...args: string[]): void => void execFileSync('openssl', args, { cwd: dir, stdio: 'pipe' });
  const ec = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes'];
  writeFileSync(join(dir, 'ext.cnf'), 'subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth,clientAuth\n');
  writeFileSync(join(dir, 'elsewhere.cnf'), 'subjectAltName=DNS:elsewhere.test\nextendedKeyUsage=serverAuth,clientAuth\n');
  for (const ca of ['ca', 'rogue-ca']) run('req', '-x509', ...ec, '-keyout', `${ca}.key`, '-out', `${ca}.crt`, '-days', '2', '-subj', `/CN=${ca}`);
  // -days -1: not after is a day before not before, so the certificate is expired from the start.
  for (const [name, ca, days, ext] of [
    ['node1', 'ca', '2', 'ext.cnf'],
    ['node2', 'ca', '2', 'ext.cnf'],
    ['rogue', 'rogue-ca', '2', 'ext.cnf'],
    ['expired', 'ca', '-1', 'ext.cnf'],
    ['elsewhere', 'ca', '2', 'elsewhere.cnf'],
  ] as const) {
    run('req', ...ec, '-keyout', `${name}.key`, '-out', `${name}.csr`, '-subj', `/CN=${name}`);
    run('x509', '-req', '-in', `${name}.csr`, '-CA', `${ca}.crt`, '-CAkey', `${ca}.key`, '-CAcreateserial', '-out', `${name}.crt`, '-days', days, '-extfile', ext);
  }
  const read = (f: string): string => readFileSync(join(dir, f), 'utf8');
  const pair = (n: string): { key: string; cert: string } => ({ key: read(`${n}.key`), cert: read(`${n}.crt`) });
  return {
    dir,
    ca: read('ca.crt'),
    node1: pair('node1'),
    node2: pair('node2'),
    rogue: pair('rogue'),
    expired: pair('expired'),
    elsewhere: pair('elsewhere'),
    file: (name) => join(dir, name),
    cleanup: () => rmSync(dir, { recursive: true, force: true }),
  };
}
