/**
 * `etcd://[user:password@]host:port[,host:port…][?prefix=P&tls=1&ca=PATH&cert=PATH&key=PATH]`
 * (or `etcds://…` for TLS): the members to talk to (the client moves between them), an optional
 * key namespace (default none, so `etcdctl elect G` joins tenure group G), etcd auth, and TLS with
 * an optional CA and client certificate (PEM files, read when the store is opened).
 */
import { readFile } from 'node:fs/promises';
import { InvalidArgumentError, redactUrl } from '../../core/index.js';
import type { StoreBackend } from '../backend.js';
import { checkUrlParams } from '../url-params.js';

export interface EtcdOpenOptions {
  kind: 'etcd';
  hosts: string[];
  namespace?: string;
  requestTimeoutMs?: number;
  auth?: { username: string; password: string };
  /** TLS to every member; files (PEM) are read when the store is opened. */
  tls?: { caFile?: string; certFile?: string; keyFile?: string };
}

function parseEtcdUrl(url: string): EtcdOpenOptions {
  const m = /^(etcds?):\/\/(?:([^@/?#]*)@)?([^@/?#]*)\/?(?:\?([^#]*))?$/i.exec(url);
  const hosts = (m?.[3] ?? '').split(',').filter((h) => h !== '');
  if (!m || hosts.length === 0 || hosts.some((h) => !/^[^:\s]+:\d{1,5}$/.test(h))) {
    throw new InvalidArgumentError('store', `expected etcd://[user:password@]host:port[,host:port…], such as etcd://127.0.0.1:2379, got '${redactUrl(url)}'`);
  }
  let auth: { username: string; password: string } | undefined;
  if (m[2] !== undefined) {
    const colon = m[2].indexOf(':');
    const username = safeDecode(colon < 0 ? m[2] : m[2].slice(0, colon));
    const password = colon < 0 ? null : safeDecode(m[2].slice(colon + 1));
    if (username === null || username === '' || password === null) {
      throw new InvalidArgumentError('store', `etcd auth needs user:password@ (percent-encoded), got '${redactUrl(url)}'`);
    }
    auth = { username, password };
  }
  const params = new URLSearchParams(m[4] ?? '');
  checkUrlParams(params, KNOWN_PARAMS, 'etcd:// parameter');
  const namespace = params.get('prefix');
  const flag = params.get('tls');
  if (flag !== null && !/^(1|0|true|false|on|off)$/i.test(flag)) throw new InvalidArgumentError('store', `tls must be 1 or 0, got '${flag}'`);
  const files = { caFile: params.get('ca'), certFile: params.get('cert'), keyFile: params.get('key') };
  const anyFile = Object.values(files).some((f) => f !== null);
  if (Object.values(files).some((f) => f === '')) throw new InvalidArgumentError('store', 'ca, cert and key need a file path');
  if ((files.certFile === null) !== (files.keyFile === null)) throw new InvalidArgumentError('store', 'a client certificate needs both cert and key');
  const tlsOn = flag === null ? m[1]!.toLowerCase() === 'etcds' || anyFile : /^(1|true|on)$/i.test(flag);
  if (!tlsOn && (anyFile || m[1]!.toLowerCase() === 'etcds')) throw new InvalidArgumentError('store', 'tls=0 contradicts etcds:// or ca, cert and key');
  const tls = Object.fromEntries(Object.entries(files).filter(([, v]) => v !== null)) as { caFile?: string; certFile?: string; keyFile?: string };
  return { kind: 'etcd', hosts, ...(namespace !== null ? { namespace } : {}), ...(auth ? { auth } : {}), ...(tlsOn ? { tls } : {}) };
}

const KNOWN_PARAMS: readonly string[] = ['prefix', 'tls', 'ca', 'cert', 'key'];

function safeDecode(s: string): string | null {
  try {
    return decodeURIComponent(s);
  } catch {
    return null;
  }
}

export const etcdBackend: StoreBackend<EtcdOpenOptions> = {
  kind: 'etcd',
  schemes: ['etcd', 'etcds'],
  shown: ['etcd://', 'etcds://'],
  parse: ({ url }) => parseEtcdUrl(url),
  async open(options) {
    const { EtcdStore } = await import('./index.js');
    const { tls, ...rest } = options;
    return new EtcdStore({
      ...rest,
      ...(tls
        ? {
            tls: {
              ...(tls.caFile !== undefined ? { ca: await readFile(tls.caFile) } : {}),
              ...(tls.certFile !== undefined ? { cert: await readFile(tls.certFile) } : {}),
              ...(tls.keyFile !== undefined ? { key: await readFile(tls.keyFile) } : {}),
            },
          }
        : {}),
    });
  },
};
