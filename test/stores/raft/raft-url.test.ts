/**
 * raft:// and rafts:// URLs: what parses, and every hostile form refused with one
 * InvalidArgumentError (field `store`) before anything connects; the secret and the TLS files are
 * looked for at open, never taken from the URL, and key material pasted in is never echoed.
 */
import { describe, expect, it } from 'vitest';
import { InvalidArgumentError } from '../../../src/core/index.js';
import { openStore, parseStoreUrl } from '../../../src/open.js';
import { parseRaftUrl, readRaftSecret, readRaftTls } from '../../../src/stores/raft/index.js';

describe('raft:// URLs', () => {
  it('reads members, cluster, secret-file and timeout', () => {
    expect(parseStoreUrl('raft://127.0.0.1:7001,127.0.0.1:7002,[::1]:7003')).toEqual({ kind: 'raft', members: ['127.0.0.1:7001', '127.0.0.1:7002', '[::1]:7003'] });
    expect(parseRaftUrl('RAFT://node-a.example:7001/?cluster=prod&secret-file=%2Fetc%2Ftenure%2Fsecret&timeout=3s')).toEqual({
      kind: 'raft',
      members: ['node-a.example:7001'],
      clusterId: 'prod',
      secretFile: '/etc/tenure/secret',
      timeoutMs: 3000,
    });
  });

  it('reads TLS: rafts://, tls=1, or any of ca, cert, key and servername', () => {
    expect(parseStoreUrl('rafts://h:1')).toEqual({ kind: 'raft', members: ['h:1'], tls: {} });
    expect(parseStoreUrl('raft://h:1?tls=1')).toEqual({ kind: 'raft', members: ['h:1'], tls: {} });
    expect(parseStoreUrl('raft://h:1?tls=0')).toEqual({ kind: 'raft', members: ['h:1'] });
    expect(parseRaftUrl('raft://h:1?ca=%2Fpki%2Fca.pem&cert=c.pem&key=k.pem&servername=raft.internal')).toEqual({
      kind: 'raft',
      members: ['h:1'],
      tls: { caFile: '/pki/ca.pem', certFile: 'c.pem', keyFile: 'k.pem', servername: 'raft.internal' },
    });
  });

  it.each([
    ['rafts://h:1?tls=0', /tls=0 contradicts rafts:\/\//],
    ['raft://h:1?tls=0&ca=x', /tls=0 contradicts/],
    ['raft://h:1?tls=maybe', /tls must be 1 or 0, got 'maybe'/],
    ['rafts://h:1?cert=c.pem', /a client certificate needs both cert and key/],
    ['rafts://h:1?key=k.pem', /a client certificate needs both cert and key/],
    ['rafts://h:1?ca=', /ca needs a file path/],
    ['rafts://h:1?servername=a%20b', /servername must be a host name/],
    ['rafts://h:1?key=-----BEGIN%20PRIVATE%20KEY-----MIGHAgEAMBMG&cert=c', /key must be the path of a PEM file, not its content/],
    ['rafts://h:1?cert=%0AMIGHAgEAMBMG&key=k', /cert must be the path of a PEM file, not its content/],
  ])('refuses %s', (url, why) => {
    let err: unknown;
    try {
      parseStoreUrl(url);
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(InvalidArgumentError);
    expect((err as Error).message).toMatch(why);
    expect((err as Error).message).not.toContain('MIGHAgEAMBMG');
  });

  it('reads the TLS files at open: those of the URL, else TENURE_RAFT_TLS_*; an unreadable one is named, never quoted', async () => {
    const env = { TENURE_RAFT_TLS_CA: '/nonexistent/env-ca.pem', TENURE_RAFT_TLS_CERT: '/nonexistent/env-cert.pem', TENURE_RAFT_TLS_KEY: '/nonexistent/env-key.pem' };
    await expect(readRaftTls({}, env)).rejects.toThrow(/cannot read the raft TLS (CA|certificate|key) file \/nonexistent\/env-/);
    await expect(readRaftTls({ caFile: '/nonexistent/url-ca.pem' }, {})).rejects.toThrow(/cannot read the raft TLS CA file \/nonexistent\/url-ca\.pem: ENOENT/);
    await expect(readRaftTls({}, { TENURE_RAFT_TLS_CERT: '/x.pem' })).rejects.toThrow(/a client certificate needs both TENURE_RAFT_TLS_CERT and TENURE_RAFT_TLS_KEY/);
    const pasted = (await readRaftTls({}, { TENURE_RAFT_TLS_KEY: '-----BEGIN PRIVATE KEY-----\nMIGHAgEAMBMG', TENURE_RAFT_TLS_CERT: '/x.pem' }).catch((e: unknown) => e)) as Error;
    expect(pasted).toBeInstanceOf(InvalidArgumentError);
    expect(pasted.message).toMatch(/the raft TLS key must be given as the path of a PEM file, not its content/);
    expect(pasted.message).not.toContain('MIGHAgEAMBMG');
    // No files at all: TLS with Node's root CAs and no client certificate.
    expect(await readRaftTls({ servername: 'raft.internal' }, {})).toEqual({ servername: 'raft.internal' });
  });

  it.each([
    ['raft://', /a member is empty/],
    ['raft://a:1,,b:2', /a member is empty/],
    ['raft://:7001', /member ':7001' is not host:port/],
    ['raft://host', /member 'host' is not host:port/],
    ['raft://h:0', /port 0, expected 1..65535/],
    ['raft://h:65536', /port 65536, expected 1..65535/],
    ['raft://h:123456', /is not host:port/],
    ['raft://h:1,H:1', /member H:1 is listed twice/],
    ['raft://h:1?secret=abc', /unknown option 'secret'/],
    ['raft://h:1?cluster=a&cluster=b', /option 'cluster' is given twice/],
    ['raft://h:1?secret-file=', /secret-file needs a path/],
    ['raft://h:1?timeout=soon', /timeout: expected a duration/],
    ['raft://h:1?timeout=5', /timeout: must be in \[100, 600000\] ms/],
    ['raft://user:pw@h:1', /is not host:port/],
    ['raft://h:1/path', /expected raft:\/\//],
  ])('refuses %s', (url, why) => {
    let err: unknown;
    try {
      parseStoreUrl(url);
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(InvalidArgumentError);
    expect((err as InvalidArgumentError).field).toBe('store');
    expect((err as Error).message).toMatch(why);
  });

  it('needs the secret at open: a file, else TENURE_RAFT_SECRET; missing is one clear error', async () => {
    await expect(readRaftSecret(undefined, {})).rejects.toThrow(/raft:\/\/ needs the cluster secret: \?secret-file=PATH in the URL, or TENURE_RAFT_SECRET/);
    expect(await readRaftSecret(undefined, { TENURE_RAFT_SECRET: 's'.repeat(16) })).toBe('s'.repeat(16));
    await expect(readRaftSecret('/nonexistent/secret')).rejects.toThrow(/cannot read the raft secret file \/nonexistent\/secret: ENOENT/);
    const saved = process.env.TENURE_RAFT_SECRET;
    delete process.env.TENURE_RAFT_SECRET;
    try {
      await expect(openStore('raft://127.0.0.1:1')).rejects.toBeInstanceOf(InvalidArgumentError);
      process.env.TENURE_RAFT_SECRET = 'short';
      await expect(openStore('raft://127.0.0.1:1')).rejects.toThrow(/secret: must be at least 16 bytes, got 5/);
    } finally {
      if (saved === undefined) delete process.env.TENURE_RAFT_SECRET;
      else process.env.TENURE_RAFT_SECRET = saved;
    }
  });
});
