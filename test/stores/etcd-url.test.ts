/**
 * etcd URLs carry auth and TLS as the other stores' URLs do: `etcd://user:password@host:port`
 * against a private etcd with auth enabled, and `etcds://` / `?ca=&cert=&key=` against a private
 * etcd serving TLS with a CA made by openssl for the test (client certificates required).
 */
import { execFileSync, spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { InvalidArgumentError } from '../../src/core/index.js';
import { openStore, parseStoreUrl } from '../../src/open.js';
import { EtcdStore } from '../../src/stores/etcd/index.js';
import { etcdInstalled, startEtcd } from './etcd-harness.js';
import type { EtcdCluster } from './etcd-harness.js';

const BIN = fileURLToPath(new URL('../../bin/tenure.js', import.meta.url));
const PASSWORD = 'Pa55:w/rd@etcd';

/** Run `tenure ARGS`; resolve with its code and stderr. */
function tenure(args: readonly string[], cwd: string): Promise<{ code: number | null; stderr: string }> {
  const p = spawn(process.execPath, [BIN, ...args], { cwd, env: { ...process.env, TENURE_STORE: '' }, stdio: ['ignore', 'ignore', 'pipe'] });
  let stderr = '';
  p.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
  return new Promise((resolve) => p.on('close', (code) => resolve({ code, stderr })));
}

describe('etcd URL parsing', () => {
  it('reads user:password, etcds://, tls, ca, cert and key', () => {
    expect(parseStoreUrl(`etcd://root:${encodeURIComponent(PASSWORD)}@127.0.0.1:2379,127.0.0.1:2380?prefix=p/`)).toEqual({
      kind: 'etcd',
      hosts: ['127.0.0.1:2379', '127.0.0.1:2380'],
      namespace: 'p/',
      auth: { username: 'root', password: PASSWORD },
    });
    expect(parseStoreUrl('etcds://h:2379')).toEqual({ kind: 'etcd', hosts: ['h:2379'], tls: {} });
    expect(parseStoreUrl('etcd://h:2379?tls=1')).toEqual({ kind: 'etcd', hosts: ['h:2379'], tls: {} });
    expect(parseStoreUrl('etcd://h:2379?ca=/c.pem&cert=/a.pem&key=/k.pem')).toEqual({ kind: 'etcd', hosts: ['h:2379'], tls: { caFile: '/c.pem', certFile: '/a.pem', keyFile: '/k.pem' } });
    expect(parseStoreUrl('etcd://h:2379')).toEqual({ kind: 'etcd', hosts: ['h:2379'] });
  });

  it('rejects half credentials and contradictions', () => {
    for (const bad of ['etcd://root@h:2379', 'etcd://:pw@h:2379', 'etcd://h:2379?cert=/a.pem', 'etcds://h:2379?tls=0', 'etcd://h:2379?tls=maybe', 'etcd://h:2379?ca=', 'etcd://u:%zz@h:2379', 'etcd://h:2379?prefx=app/', 'etcd://h:2379?timeout=5000']) {
      expect(() => parseStoreUrl(bad), bad).toThrow(InvalidArgumentError);
    }
  });
});

describe.runIf(etcdInstalled())('etcd auth from the URL', () => {
  let cluster: EtcdCluster;
  let dir: string;
  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'tenure-etcd-auth-'));
    cluster = await startEtcd(1);
    // Auth as etcdctl would set it up: a root user with the root role, then auth enable.
    const admin = new EtcdStore({ hosts: cluster.hosts });
    await admin.client.role('root').create();
    await admin.client.user('root').create(PASSWORD);
    await admin.client.user('root').addRole('root');
    await admin.client.auth.authEnable();
    await admin.close();
  }, 60_000);
  afterAll(async () => {
    await cluster?.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  it('works with the right password, and is refused without one or with a wrong one', async () => {
    const host = cluster.hosts[0]!;
    const store = await openStore(`etcd://root:${encodeURIComponent(PASSWORD)}@${host}`);
    try {
      const r = await store.acquire('g', 'a~1', 5000);
      expect(r).toMatchObject({ acquired: true, lease: { term: 1 } });
      expect(await store.read('g')).toMatchObject({ owner: 'a~1', term: 1 });
    } finally {
      await store.close();
    }
    for (const url of [`etcd://${host}`, `etcd://root:wrong-password@${host}`]) {
      const bad = await openStore(url);
      try {
        await expect(bad.read('g'), url).rejects.toThrow(/user name is empty|authentication failed|permission denied|invalid/i);
      } finally {
        await bad.close();
      }
    }
  });

  it('tenure run: runs with the password, fails with one redacted line (exit 1) with a wrong one', async () => {
    const host = cluster.hosts[0]!;
    const ok = await tenure(['run', '--group', 'cli', '--once', '--store', `etcd://root:${encodeURIComponent(PASSWORD)}@${host}`, '--', 'true'], dir);
    expect(ok.code, ok.stderr).toBe(0);
    expect(ok.stderr).toContain('store etcd://root:***@');
    const wrong = await tenure(['run', '--group', 'cli', '--once', '--store', `etcd://root:WrongPassw0rd@${host}`, '--', 'true'], dir);
    expect(wrong.code, wrong.stderr).toBe(1);
    expect(wrong.stderr).toMatch(/cannot reach store etcd:\/\/root:\*\*\*@/);
    expect(wrong.stderr).not.toContain('WrongPassw0rd');
  }, 60_000);
});

function opensslInstalled(): boolean {
  try {
    execFileSync('openssl', ['version'], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
}

/** A CA, a server certificate for 127.0.0.1 and a client certificate, made with openssl (EC P-256, one day). */
function makeCertificates(dir: string): { ca: string; serverCert: string; serverKey: string; clientCert: string; clientKey: string } {
  const f = (name: string): string => join(dir, name);
  const ssl = (args: string[]): void => void execFileSync('openssl', args, { cwd: dir, stdio: 'ignore' });
  const ec = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes'];
  ssl(['req', '-x509', ...ec, '-keyout', f('ca.key'), '-out', f('ca.crt'), '-days', '1', '-subj', '/CN=tenure test CA']);
  for (const [who, ext] of [
    ['server', 'subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth,clientAuth\n'],
    ['client', 'extendedKeyUsage=clientAuth\n'],
  ] as const) {
    ssl(['req', ...ec, '-keyout', f(`${who}.key`), '-out', f(`${who}.csr`), '-subj', `/CN=tenure test ${who}`]);
    execFileSync('sh', ['-c', `printf '${ext}' > ${who}.ext`], { cwd: dir });
    ssl(['x509', '-req', '-in', f(`${who}.csr`), '-CA', f('ca.crt'), '-CAkey', f('ca.key'), '-CAcreateserial', '-out', f(`${who}.crt`), '-days', '1', '-extfile', f(`${who}.ext`)]);
  }
  return { ca: f('ca.crt'), serverCert: f('server.crt'), serverKey: f('server.key'), clientCert: f('client.crt'), clientKey: f('client.key') };
}

describe.runIf(etcdInstalled() && opensslInstalled())('etcd TLS from the URL', () => {
  let cluster: EtcdCluster;
  let dir: string;
  let certs: ReturnType<typeof makeCertificates>;
  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'tenure-etcd-tls-'));
    certs = makeCertificates(dir);
    cluster = await startEtcd(1, { tls: { certFile: certs.serverCert, keyFile: certs.serverKey, clientCaFile: certs.ca } });
  }, 60_000);
  afterAll(async () => {
    await cluster?.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  it('works with the CA and a client certificate, over etcds:// and over ?tls=1', async () => {
    const host = cluster.hosts[0]!;
    const q = `ca=${encodeURIComponent(certs.ca)}&cert=${encodeURIComponent(certs.clientCert)}&key=${encodeURIComponent(certs.clientKey)}`;
    for (const url of [`etcds://${host}?${q}`, `etcd://${host}?tls=1&${q}`]) {
      const store = await openStore(url);
      try {
        const r = await store.acquire('tls', `a~${url.length}`, 5000);
        expect(r.acquired || r.lease.owner.startsWith('a~'), url).toBe(true);
        expect((await store.read('tls'))?.owner).toMatch(/^a~/);
        await store.release('tls', r.lease.owner, r.lease.term);
      } finally {
        await store.close();
      }
    }
  });

  it('is refused without TLS, without the CA, or without a client certificate', async () => {
    const host = cluster.hosts[0]!;
    // Through the CLI: each is one line and exit code 1.
    for (const url of [`etcd://${host}`, `etcds://${host}?cert=${encodeURIComponent(certs.clientCert)}&key=${encodeURIComponent(certs.clientKey)}`, `etcds://${host}?ca=${encodeURIComponent(certs.ca)}`]) {
      const r = await tenure(['status', '--store', url], dir);
      expect(r.code, `${url}: ${r.stderr}`).toBe(1);
      expect(r.stderr.trim().split('\n'), r.stderr).toHaveLength(1);
    }
  }, 120_000);

  it('tenure run over etcds:// with a client certificate', async () => {
    const host = cluster.hosts[0]!;
    const url = `etcds://${host}?ca=${encodeURIComponent(certs.ca)}&cert=${encodeURIComponent(certs.clientCert)}&key=${encodeURIComponent(certs.clientKey)}`;
    const r = await tenure(['run', '--group', 'cli-tls', '--once', '--store', url, '--', 'true'], dir);
    expect(r.code, r.stderr).toBe(0);
    const missing = await tenure(['status', '--store', `etcds://${host}?ca=${encodeURIComponent(join(dir, 'nope.pem'))}`], dir);
    expect(missing.code, missing.stderr).toBe(1);
    expect(missing.stderr).toMatch(/nope\.pem/);
  }, 60_000);
});
