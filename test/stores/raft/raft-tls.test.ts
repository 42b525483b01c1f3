/**
 * rafts:// against `tenure raft serve` processes with mutual TLS (a throwaway CA and certificates
 * made by openssl in a temp dir): the cluster elects and serves the Store basics to a client with
 * a certificate; clients that trust another CA, show no certificate, one from another CA or an
 * expired one, name a host the node's certificate does not carry, or speak plaintext are each
 * refused at once with one clear error, as is a TLS client of a plaintext node; `tenure raft serve` refuses bad TLS flags with exit 2
 * before writing anything; no key and no secret appear in any output.
 */
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { StaleTermError, StoreUnavailableError, type Lease } from '../../../src/core/index.js';
import { openStore, type TenureStore } from '../../../src/open.js';
import { RaftTransport } from '../../../src/raft/transport/index.js';
import { RaftClientRefusedError, RaftClientStore } from '../../../src/stores/raft/index.js';
import { sandbox, tenure, waitUntil } from '../../cli/helpers.js';
import { hasOpenssl, makeCerts, type Certs } from '../../raft/transport-helpers.js';
import { SERVE_SECRET, ServeCluster } from './serve-cluster.js';

let certs: Certs;
let cluster: ServeCluster;
const opened: TenureStore[] = [];
/** Every error message a client got, checked for key material at the end. */
const messages: string[] = [];

function members(c: ServeCluster): string {
  return [...c.addresses.values()].join(',');
}

/** rafts://… of the cluster with the secret file and the given TLS query (files of `certs`). */
function url(c: ServeCluster, tls: Record<string, string>, scheme = 'rafts'): string {
  const q = new URLSearchParams({ 'secret-file': c.secretFile, ...tls });
  return `${scheme}://${members(c)}?${q.toString()}`;
}

async function open(u: string): Promise<TenureStore> {
  const s = await openStore(u);
  opened.push(s);
  return s;
}

/** The error of one acquire through `u`, which must be refused well before the client's deadline. */
async function refusal(u: string): Promise<Error> {
  const s = await open(u);
  const started = performance.now();
  const err = (await s.acquire('g', 'x~1', 5000).catch((e: unknown) => e)) as Error;
  expect(err).toBeInstanceOf(StoreUnavailableError);
  expect(performance.now() - started).toBeLessThan(5000);
  messages.push(err.message);
  return err;
}

/** The base64 lines of every private key made for the test: none may appear anywhere. */
function keyLines(): string[] {
  return ['node1', 'node2', 'rogue', 'expired', 'elsewhere', 'ca', 'rogue-ca'].flatMap((n) =>
    readFileSync(certs.file(`${n}.key`), 'utf8')
      .split('\n')
      .filter((l) => l !== '' && !l.startsWith('-----')),
  );
}

describe.skipIf(!hasOpenssl())('rafts:// against tenure raft serve with mutual TLS (needs the openssl command)', () => {
  beforeAll(async () => {
    certs = makeCerts();
    cluster = await ServeCluster.start([1, 2, 3], ['--tls-cert', certs.file('node1.crt'), '--tls-key', certs.file('node1.key'), '--tls-ca', certs.file('ca.crt')]);
  }, 60_000);
  afterAll(async () => {
    await Promise.all(opened.splice(0).map((s) => s.close()));
    await cluster?.close();
    certs?.cleanup();
  });

  const client = (): Record<string, string> => ({ ca: certs.file('ca.crt'), cert: certs.file('node2.crt'), key: certs.file('node2.key') });

  it('elects a leader over mutual TLS and serves the Store basics to a client with a certificate', async () => {
    for (const n of cluster.nodes.values()) expect(n.stdout).toMatch(/serving on 127\.0\.0\.1:\d+ \(cluster tenure, members 1,2,3, data .*, mutual TLS\)/);
    const store = await open(url(cluster, client()));
    const a = await store.acquire('tls-g', 'a~1', 60_000, { url: 'http://a' });
    expect(a).toMatchObject({ acquired: true, lease: { owner: 'a~1', term: 1, meta: { url: 'http://a' } } });
    expect(await store.acquire('tls-g', 'b~1', 60_000)).toMatchObject({ acquired: false, lease: { owner: 'a~1', term: 1 } });
    expect(await store.renew('tls-g', 'a~1', 1, 60_000)).toMatchObject({ renewed: true });

    const pushes: (Lease | null)[] = [];
    store.watch!('tls-g', (l) => pushes.push(l));
    const stale = { lease: 'tls-g', term: 1 };
    expect(await store.appendFenced(stale, 'tls-s', 'one')).toBe(1);
    await store.release('tls-g', 'a~1', 1);
    const b = await store.acquire('tls-g', 'b~1', 60_000);
    expect(b).toMatchObject({ acquired: true, lease: { owner: 'b~1', term: 2 } });
    expect(await store.appendFenced({ lease: 'tls-g', term: 2 }, 'tls-s', 'two')).toBe(2);
    await expect(store.appendFenced(stale, 'tls-s', 'late')).rejects.toBeInstanceOf(StaleTermError);
    expect((await store.readStream('tls-s')).map((e) => [e.seq, e.term, e.payload])).toEqual([
      [1, 1, 'one'],
      [2, 2, 'two'],
    ]);
    await waitUntil('the watch to see b~1', () => pushes.at(-1)?.owner === 'b~1', 20_000);

    // The command line: tenure raft status over rafts:// (files in the URL), and tenure status
    // with the files from the environment.
    const box = sandbox();
    const st = await tenure(box, ['raft', 'status', '--store', url(cluster, client()), '--json'], { env: cluster.env, timeoutMs: 30_000 });
    expect(st.code, st.stderr).toBe(0);
    const rows = JSON.parse(st.stdout) as { id: number; leader: number }[];
    expect(rows.map((r) => r.id).sort()).toEqual([1, 2, 3]);
    expect(new Set(rows.map((r) => r.leader)).size).toBe(1);
    const env = { ...cluster.env, TENURE_RAFT_TLS_CA: certs.file('ca.crt'), TENURE_RAFT_TLS_CERT: certs.file('node2.crt'), TENURE_RAFT_TLS_KEY: certs.file('node2.key') };
    const status = await tenure(box, ['status', '--store', `rafts://${members(cluster)}`, '--group', 'tls-g', '--json'], { env, timeoutMs: 30_000 });
    expect(status.code, status.stderr).toBe(0);
    expect(status.stdout).toContain('b~1');
    // The same without the environment's certificate: refused, exit 1, one clear line.
    const without = await tenure(box, ['status', '--store', `rafts://${members(cluster)}`, '--group', 'tls-g'], { env: { ...env, TENURE_RAFT_TLS_CERT: '', TENURE_RAFT_TLS_KEY: '' }, timeoutMs: 30_000 });
    expect(without.code).toBe(1);
    expect(without.stderr).toMatch(/refused the client: TLS client certificate not accepted/);
    messages.push(st.stderr, status.stderr, without.stderr);
  });

  it('refuses a client that trusts another CA: the node certificate is not accepted, at once', async () => {
    const err = await refusal(url(cluster, { ...client(), ca: certs.file('rogue-ca.crt') }));
    expect(err).toBeInstanceOf(RaftClientRefusedError);
    expect(err.message).toMatch(/^raft store node 127\.0\.0\.1:\d+ refused the client: its TLS certificate is not accepted: self-signed certificate in certificate chain$/);
    await waitUntil('the node to log the broken handshake', () => [...cluster.nodes.values()].some((n) => /TLS handshake from 127\.0\.0\.1:\d+ failed: the other end closed it \(does it trust the CA/.test(n.stderr)), 10_000);
  });

  it('refuses a client without a certificate, with one from another CA, and with an expired one; each node logs why', async () => {
    const none = await refusal(url(cluster, { ca: certs.file('ca.crt') }));
    const rogue = await refusal(url(cluster, { ...client(), cert: certs.file('rogue.crt'), key: certs.file('rogue.key') }));
    const expired = await refusal(url(cluster, { ...client(), cert: certs.file('expired.crt'), key: certs.file('expired.key') }));
    for (const err of [none, rogue, expired]) {
      expect(err).toBeInstanceOf(RaftClientRefusedError);
      expect(err.message).toMatch(/refused the client: TLS client certificate not accepted \(none, expired, or not signed by the cluster CA\)$/);
    }
    // The client heard the refusal as soon as it was written; the node's line may still be on its way.
    const logs = (): string => [...cluster.nodes.values()].map((n) => n.stderr).join('');
    const why = ['none presented', 'CERT_HAS_EXPIRED', '(UNABLE_TO_GET_ISSUER_CERT|UNABLE_TO_VERIFY_LEAF_SIGNATURE|UNABLE_TO_GET_ISSUER_CERT_LOCALLY)'];
    for (const w of why) {
      const line = new RegExp(`raft transport \\d: refused TLS connection from 127\\.0\\.0\\.1:\\d+: client certificate not accepted \\(${w}\\)\n`);
      await waitUntil(`a node to log ${w}`, () => line.test(logs()), 10_000);
    }
  });

  it('refuses a plaintext raft:// client with a clear error naming rafts://', async () => {
    const err = await refusal(`raft://${members(cluster)}?secret-file=${encodeURIComponent(cluster.secretFile)}`);
    expect(err).toBeInstanceOf(RaftClientRefusedError);
    expect(err.message).toMatch(/^raft store node 127\.0\.0\.1:\d+ refused the client: this node takes TLS connections only: connect with rafts:\/\/ \(or \?tls=1\), with the cluster's CA$/);
    await waitUntil('a node to log it', () => [...cluster.nodes.values()].some((n) => /not TLS, and this node takes TLS connections only/.test(n.stderr)));
  });

  it("checks the node's name: a servername its certificate does not carry is refused", async () => {
    const err = await refusal(url(cluster, { ...client(), servername: 'elsewhere.test' }));
    expect(err).toBeInstanceOf(RaftClientRefusedError);
    expect(err.message).toMatch(/its TLS certificate is not accepted: .*elsewhere\.test/);
  });

  it('tenure raft serve refuses bad TLS flags with exit 2 and one line, before writing anything', async () => {
    const box = sandbox();
    const base = ['raft', 'serve', '--id', '1', '--listen', '127.0.0.1:1', '--peers', '1=127.0.0.1:1'];
    const cases: { flags: string[]; says: RegExp }[] = [
      { flags: ['--tls-cert', certs.file('node1.crt'), '--tls-key', certs.file('node1.key')], says: /--tls-ca: TLS needs --tls-cert, --tls-key and --tls-ca together \(missing --tls-ca\)/ },
      { flags: ['--tls-clients-without-cert'], says: /--tls-clients-without-cert: needs TLS/ },
      { flags: ['--tls-cert', certs.file('node1.crt'), '--tls-key', join(certs.dir, 'missing.key'), '--tls-ca', certs.file('ca.crt')], says: /--tls-key: cannot read .*missing\.key: ENOENT/ },
      { flags: ['--tls-cert', certs.file('node1.crt'), '--tls-key', certs.file('node2.key'), '--tls-ca', certs.file('ca.crt')], says: /--tls-cert: the certificate, key and CA cannot be used together: .*key values mismatch/ },
      { flags: ['--tls-cert', certs.file('node1.key'), '--tls-key', certs.file('node1.key'), '--tls-ca', certs.file('ca.crt')], says: /--tls-cert: the certificate, key and CA cannot be used together/ },
      { flags: ['--tls-cert', certs.file('expired.crt'), '--tls-key', certs.file('expired.key'), '--tls-ca', certs.file('ca.crt')], says: /--tls-cert: the certificate in .*expired\.crt expired on / },
    ];
    for (const [i, c] of cases.entries()) {
      const data = join(box.dir, `data-${i}`);
      const r = await tenure(box, [...base, '--data', data, ...c.flags], { env: cluster.env });
      expect(r.code, r.stderr).toBe(2);
      expect(r.stderr.trim().split('\n')).toHaveLength(1);
      expect(r.stderr).toMatch(c.says);
      expect(r.stdout).toBe('');
      expect(existsSync(data)).toBe(false);
      messages.push(r.stderr);
    }
    // A client's flags and URL: bad input is exit 2 with one line too.
    for (const [args, says] of [
      [['raft', 'status', '--store', `rafts://${members(cluster)}?tls=0`], /tls=0 contradicts rafts:\/\//],
      [['raft', 'status', '--store', `rafts://${members(cluster)}?key=-----BEGIN%20PRIVATE%20KEY-----abc`], /key must be the path of a PEM file, not its content/],
      [['raft', 'status', '--peers', '1=127.0.0.1:1', '--tls-cert', certs.file('node2.crt')], /--tls-key: a client certificate needs both --tls-cert and --tls-key/],
    ] as const) {
      const r = await tenure(box, args, { env: cluster.env });
      expect(r.code, r.stderr).toBe(2);
      expect(r.stderr).toMatch(says);
      expect(r.stderr).not.toContain('abc');
      messages.push(r.stderr);
    }
  });

  it('no private key and no secret appear in any output: nodes, clients, commands', () => {
    const all = [...messages, ...[...cluster.nodes.values()].flatMap((n) => [n.stdout, n.stderr])].join('\n');
    expect(all.length).toBeGreaterThan(0);
    for (const line of keyLines()) expect(all).not.toContain(line);
    expect(all).not.toContain('PRIVATE KEY');
    expect(all).not.toContain(SERVE_SECRET);
  });
});

describe.skipIf(!hasOpenssl())('a node started with --tls-clients-without-cert (needs the openssl command)', () => {
  let c: ServeCluster | undefined;
  let tlsCerts: Certs | undefined;
  afterAll(async () => {
    await c?.close();
    tlsCerts?.cleanup();
  });

  it('serves a rafts:// client that shows no certificate but proves the secret, and still refuses a wrong secret', async () => {
    tlsCerts = makeCerts();
    c = await ServeCluster.start([1], ['--tls-cert', tlsCerts.file('node1.crt'), '--tls-key', tlsCerts.file('node1.key'), '--tls-ca', tlsCerts.file('ca.crt'), '--tls-clients-without-cert']);
    expect(c.nodes.get(1)!.stdout).toMatch(/mutual TLS \(clients may come without a certificate\)/);
    const s = await openStore(`rafts://${members(c)}?secret-file=${encodeURIComponent(c.secretFile)}&ca=${encodeURIComponent(tlsCerts.file('ca.crt'))}`);
    try {
      const r = await waitUntil('the single node to lead', async () => (await s.acquire('g', 'a~1', 60_000).catch(() => null)) ?? undefined, 20_000);
      expect(r).toMatchObject({ acquired: true, lease: { term: 1 } });
    } finally {
      await s.close();
    }
    const wrong = join(c.root, 'wrong');
    (await import('node:fs')).writeFileSync(wrong, 'not the secret, long enough');
    const w = await openStore(`rafts://${members(c)}?secret-file=${encodeURIComponent(wrong)}&ca=${encodeURIComponent(tlsCerts.file('ca.crt'))}`);
    try {
      await expect(w.acquire('g', 'b~1', 5000)).rejects.toThrow(/refused the client: authentication failed \(wrong secret\?\)/);
    } finally {
      await w.close();
    }
  });
});

describe.skipIf(!hasOpenssl())('a rafts:// client of a node without TLS (needs the openssl command)', () => {
  it('is refused at once with one clear error, and the node logs one line', async () => {
    const c = makeCerts();
    const logs: string[] = [];
    const t = await RaftTransport.listen({ id: 1, clusterId: 'tenure', secret: SERVE_SECRET, listen: '127.0.0.1:0', log: (l) => logs.push(l) });
    t.onClient(() => {});
    const client = new RaftClientStore({ members: [t.address], secret: SERVE_SECRET, timeoutMs: 5000, tls: { ca: c.ca } });
    try {
      const started = performance.now();
      const err = (await client.read('g').catch((e: unknown) => e)) as Error;
      expect(err).toBeInstanceOf(RaftClientRefusedError);
      expect(err.message).toMatch(/^raft store node 127\.0\.0\.1:\d+ refused the client: it answered a TLS handshake in the clear: the node serves without TLS \(connect with raft:\/\/, or start every node with --tls-cert, --tls-key and --tls-ca\)$/);
      expect(performance.now() - started).toBeLessThan(2000);
      await waitUntil('the log line', () => logs.length >= 1, 5000);
      expect(logs).toEqual([expect.stringMatching(/^raft transport 1: refused connection from 127\.0\.0\.1:\d+: a TLS handshake, but this node serves without TLS$/)]);
    } finally {
      await client.close();
      await t.close();
      c.cleanup();
    }
  });
});
