/**
 * `zk://[user:password@]host:port[,host:port…][/chroot][?timeout=DURATION]`: the servers of a
 * ZooKeeper ensemble (the client moves between them), an optional chroot every node of the store
 * lives under, digest auth, and the time limit of one request.
 */
import { InvalidArgumentError, parseDuration, redactUrl } from '../../core/index.js';
import type { StoreBackend } from '../backend.js';
import { checkUrlParams } from '../url-params.js';

export interface ZookeeperOpenOptions {
  kind: 'zookeeper';
  hosts: string[];
  chroot?: string;
  requestTimeoutMs?: number;
  digest?: string;
}

const USAGE = 'expected zk://[user:password@]host:port[,host:port…][/chroot], such as zk://127.0.0.1:2181/tenure';

function parseZkUrl(url: string): ZookeeperOpenOptions {
  const m = /^zk:\/\/(?:([^@/?#]*)@)?([^@/?#]*)(\/[^?#]*)?(?:\?([^#]*))?$/i.exec(url);
  const hosts = (m?.[2] ?? '').split(',').filter((h) => h !== '');
  if (!m || hosts.length === 0 || hosts.some((h) => !/^[A-Za-z0-9.\-[\]:]+:\d{1,5}$/.test(h) || Number(h.slice(h.lastIndexOf(':') + 1)) > 65535 || Number(h.slice(h.lastIndexOf(':') + 1)) === 0)) {
    throw new InvalidArgumentError('store', `${USAGE}, got '${redactUrl(url)}'`);
  }
  let chroot: string | undefined;
  if (m[3] !== undefined && m[3] !== '/') {
    const raw = m[3].replace(/\/+$/, '');
    let decoded: string;
    try {
      decoded = decodeURIComponent(raw);
    } catch {
      throw new InvalidArgumentError('store', `the chroot is not valid percent-encoding, got '${redactUrl(url)}'`);
    }
    // eslint-disable-next-line no-control-regex
    if (decoded.split('/').slice(1).some((part) => part === '' || part === '.' || part === '..' || /[\u0000-\u001f\u007f]/.test(part))) {
      throw new InvalidArgumentError('store', `the chroot must be /name[/name…] without empty, . or .. parts, got '${redactUrl(url)}'`);
    }
    chroot = decoded;
  }
  let digest: string | undefined;
  if (m[1] !== undefined) {
    const colon = m[1].indexOf(':');
    let user = '';
    let password = '';
    try {
      user = decodeURIComponent(colon < 0 ? m[1] : m[1].slice(0, colon));
      password = colon < 0 ? '' : decodeURIComponent(m[1].slice(colon + 1));
    } catch {
      user = '';
    }
    if (user === '' || colon < 0) throw new InvalidArgumentError('store', `ZooKeeper digest auth needs user:password@ (percent-encoded), got '${redactUrl(url)}'`);
    digest = `${user}:${password}`;
  }
  const params = new URLSearchParams(m[4] ?? '');
  let requestTimeoutMs: number | undefined;
  checkUrlParams(params, ['timeout'], 'zk:// parameter');
  const timeout = params.get('timeout');
  if (timeout !== null) {
    requestTimeoutMs = parseDuration('timeout', timeout);
    if (requestTimeoutMs < 10 || requestTimeoutMs > 600_000) throw new InvalidArgumentError('store', `timeout must be between 10ms and 10m, got '${timeout}'`);
  }
  return { kind: 'zookeeper', hosts, ...(chroot !== undefined ? { chroot } : {}), ...(digest !== undefined ? { digest } : {}), ...(requestTimeoutMs !== undefined ? { requestTimeoutMs } : {}) };
}

export const zookeeperBackend: StoreBackend<ZookeeperOpenOptions> = {
  kind: 'zookeeper',
  schemes: ['zk'],
  shown: ['zk://'],
  parse: ({ url }) => parseZkUrl(url),
  async open(options) {
    const { ZookeeperStore } = await import('./index.js');
    const { kind: _kind, ...rest } = options;
    return new ZookeeperStore(rest);
  },
};
