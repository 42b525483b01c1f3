/**
 * zk:// URLs: what they read into, the one clear error each malformed one gets (with the password
 * redacted), and the command line on a private ZooKeeper: `tenure lock` and `tenure status`
 * through `--store zk://…/chroot`, and exit code 2 for a bad URL.
 */
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { InvalidArgumentError } from '../../src/core/index.js';
import { parseStoreUrl } from '../../src/open.js';
import { startZookeeper } from '../fixtures/zookeeper.js';
import type { ZookeeperServer } from '../fixtures/zookeeper.js';

const BIN = fileURLToPath(new URL('../../bin/tenure.js', import.meta.url));

function tenure(args: readonly string[]): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const p = spawn(process.execPath, [BIN, ...args], { env: { ...process.env, TENURE_STORE: '' }, stdio: ['ignore', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  p.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
  p.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
  return new Promise((resolve) => p.on('close', (code) => resolve({ code, stdout, stderr })));
}

describe('zk:// URL parsing', () => {
  it('reads hosts, chroot, digest auth and the request timeout', () => {
    expect(parseStoreUrl('zk://127.0.0.1:2181')).toEqual({ kind: 'zookeeper', hosts: ['127.0.0.1:2181'] });
    expect(parseStoreUrl('zk://a:2181,b:2182/apps/tenure')).toEqual({ kind: 'zookeeper', hosts: ['a:2181', 'b:2182'], chroot: '/apps/tenure' });
    expect(parseStoreUrl('ZK://a:2181/')).toEqual({ kind: 'zookeeper', hosts: ['a:2181'] });
    expect(parseStoreUrl('zk://u:p%40ss@a:2181/x?timeout=2s')).toEqual({ kind: 'zookeeper', hosts: ['a:2181'], chroot: '/x', digest: 'u:p@ss', requestTimeoutMs: 2000 });
  });

  it.each([
    ['zk://', 'no host'],
    ['zk://host', 'no port'],
    ['zk://host:99999', 'a port out of range'],
    ['zk://host:0', 'port 0'],
    ['zk://a:1,,b', 'a host without a port'],
    ['zk://a:2181//x', 'an empty chroot part'],
    ['zk://a:2181/x/../y', 'a .. chroot part'],
    ['zk://a:2181/%zz', 'bad percent-encoding'],
    ['zk://a:2181?timeout=fast', 'a bad timeout'],
    ['zk://a:2181?timeout=1', 'a timeout below 10 ms'],
    ['zk://a:2181?prefix=x', 'an unknown parameter'],
    ['zk://user@a:2181', 'a user without a password'],
  ])('refuses %s (%s) with one InvalidArgumentError', (url) => {
    expect(() => parseStoreUrl(url)).toThrow(InvalidArgumentError);
  });

  it('never shows the password in an error', () => {
    let message = '';
    try {
      parseStoreUrl('zk://user:s3cret@a:notaport');
    } catch (err) {
      message = (err as Error).message;
    }
    expect(message).toMatch(/zk:\/\//);
    expect(message).not.toContain('s3cret');
  });
});

describe('zk:// on the command line', () => {
  let server: ZookeeperServer;
  beforeAll(async () => {
    server = await startZookeeper();
  });
  afterAll(async () => {
    await server.stop();
  });

  it('tenure lock runs the command under a ZooKeeper lease, and tenure status shows the group', async () => {
    const url = `${server.url}/cli-${randomBytes(4).toString('hex')}`;
    const lock = await tenure(['lock', 'nightly', '--store', url, '--ttl', '5s', '--', process.execPath, '-e', 'console.log("term=" + process.env.TENURE_TERM)']);
    expect(lock.stderr).toContain('acquired lock nightly, term 1');
    expect(lock.stderr).toContain('released lock nightly');
    expect(lock.code).toBe(0);
    expect(lock.stdout.trim()).toBe('term=1');
    const status = await tenure(['status', '--store', url, '--json']);
    expect(status.code).toBe(0);
    expect(JSON.parse(status.stdout)).toBeDefined();
  });

  it('a malformed zk:// URL is exit 2 with one line, password redacted', async () => {
    const r = await tenure(['status', '--store', 'zk://u:s3cret@nohost']);
    expect(r.code).toBe(2);
    expect(r.stderr.trim().split('\n')).toHaveLength(1);
    expect(r.stderr).not.toContain('s3cret');
  });
});
