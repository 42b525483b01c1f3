/**
 * `raft://host:port[,host:port…][?cluster=ID&secret-file=PATH&timeout=MS]`: a client of a cluster
 * of Raft store nodes (`tenure raft serve`, or apps running `openRaftStore`), at the addresses
 * their Raft transports listen on. The cluster secret comes from `secret-file` (its content,
 * without the final line break) or else from TENURE_RAFT_SECRET; it never goes in the URL, so a
 * URL shown in a message or a process list gives nothing away.
 *
 * TLS, as `etcds://` and `rediss://` do it: `rafts://…`, or `raft://…?tls=1`, or any of
 * `ca=PATH`, `cert=PATH`, `key=PATH`, `servername=NAME` (PEM files, read when the store is
 * opened; a path missing from the URL is taken from TENURE_RAFT_TLS_CA, TENURE_RAFT_TLS_CERT,
 * TENURE_RAFT_TLS_KEY). Key material itself never goes in the URL: a value that looks like PEM
 * is refused without being shown.
 */
import { readFile } from 'node:fs/promises';
import { InvalidArgumentError, checkMs, parseDuration, redactUrl } from '../../core/index.js';
import type { StoreBackend } from '../backend.js';
import { checkUrlParams } from '../url-params.js';
import type { RaftClientTlsOptions } from './client-connection.js';

export interface RaftOpenOptions {
  kind: 'raft';
  /** `host:port` of each member, as given. */
  members: string[];
  clusterId?: string;
  /** The file holding the cluster secret; else TENURE_RAFT_SECRET. */
  secretFile?: string;
  timeoutMs?: number;
  /** TLS to every member: the files named in the URL (the environment fills in the rest at open). */
  tls?: RaftTlsFiles;
}

/** PEM files of a TLS client (paths), and the name the nodes' certificates must carry. */
export interface RaftTlsFiles {
  caFile?: string;
  certFile?: string;
  keyFile?: string;
  servername?: string;
}

/** The environment variable that holds the cluster secret when no file is named. */
export const RAFT_SECRET_ENV = 'TENURE_RAFT_SECRET';
/** The environment variables naming the TLS files of a `rafts://` client when its URL does not. */
export const RAFT_TLS_ENV = { ca: 'TENURE_RAFT_TLS_CA', cert: 'TENURE_RAFT_TLS_CERT', key: 'TENURE_RAFT_TLS_KEY' } as const;

const OPTIONS = ['cluster', 'secret-file', 'timeout', 'tls', 'ca', 'cert', 'key', 'servername'];
const USAGE = 'expected raft://host:port[,host:port…] (rafts:// for TLS) with the options cluster, secret-file, timeout, tls, ca, cert, key and servername';

function bad(why: string): InvalidArgumentError {
  return new InvalidArgumentError('store', `${why}; ${USAGE}`);
}

/** One member: `host:port` or `[v6]:port`, port 1..65535. */
function checkMember(text: string): string {
  const m = /^\[([0-9a-fA-F:.]+)\]:(\d{1,5})$/.exec(text) ?? /^([A-Za-z0-9._-]+):(\d{1,5})$/.exec(text);
  if (!m) throw bad(`member '${text.slice(0, 100)}' is not host:port`);
  const port = Number(m[2]);
  if (port < 1 || port > 65535) throw bad(`member '${text}' has port ${port}, expected 1..65535`);
  return text;
}

/**
 * Reads the URL into options; InvalidArgumentError (field `store`) for anything malformed. The
 * secret is looked for when the store is opened (`readRaftSecret`), so parsing reads no file and
 * no environment.
 */
export function parseRaftUrl(url: string): RaftOpenOptions {
  const m = /^(rafts?):\/\/([^/?#]*)\/?(?:\?([^#]*))?$/i.exec(url);
  if (!m) throw bad(`got '${redactUrl(url.slice(0, 200))}'`);
  const secureScheme = m[1]!.toLowerCase() === 'rafts';
  const list = m[2]!.split(',');
  if (list.length === 0 || list.some((h) => h === '')) throw bad('a member is empty');
  const members = list.map(checkMember);
  const seen = new Set<string>();
  for (const h of members) {
    const key = h.toLowerCase();
    if (seen.has(key)) throw bad(`member ${h} is listed twice`);
    seen.add(key);
  }
  const params = new URLSearchParams(m[3] ?? '');
  checkUrlParams(params, OPTIONS, 'option', bad);
  const out: RaftOpenOptions = { kind: 'raft', members };
  const cluster = params.get('cluster');
  if (cluster !== null) {
    if (cluster === '' || Buffer.byteLength(cluster) > 256) throw bad('cluster must be 1..256 bytes');
    out.clusterId = cluster;
  }
  const file = params.get('secret-file');
  if (file !== null) {
    if (file === '') throw bad('secret-file needs a path');
    out.secretFile = file;
  }
  const timeout = params.get('timeout');
  if (timeout !== null) {
    try {
      out.timeoutMs = checkMs('timeout', parseDuration('timeout', timeout), 100, 600_000);
    } catch (err) {
      throw new InvalidArgumentError('store', (err as Error).message);
    }
  }
  const tls = parseTls(params, secureScheme);
  if (tls !== undefined) out.tls = tls;
  return out;
}

/** The TLS options of a URL's query: undefined when it asks for none. */
function parseTls(params: URLSearchParams, secureScheme: boolean): RaftTlsFiles | undefined {
  const flag = params.get('tls');
  if (flag !== null && !/^(1|0|true|false|on|off)$/i.test(flag)) throw bad(`tls must be 1 or 0, got '${flag.slice(0, 20)}'`);
  const given = { caFile: params.get('ca'), certFile: params.get('cert'), keyFile: params.get('key'), servername: params.get('servername') };
  for (const [name, value] of [['ca', given.caFile], ['cert', given.certFile], ['key', given.keyFile]] as const) {
    if (value === null) continue;
    if (value === '') throw bad(`${name} needs a file path`);
    // A key pasted into the URL would be echoed by every message that shows the URL's path.
    if (/-----BEGIN|[\r\n]/.test(value)) throw bad(`${name} must be the path of a PEM file, not its content`);
  }
  if (given.servername !== null && !/^[A-Za-z0-9.-]{1,253}$/.test(given.servername)) throw bad('servername must be a host name');
  if ((given.certFile === null) !== (given.keyFile === null)) throw bad('a client certificate needs both cert and key');
  const asked = secureScheme || Object.values(given).some((v) => v !== null);
  const on = flag === null ? asked : /^(1|true|on)$/i.test(flag);
  if (!on && asked) throw bad('tls=0 contradicts rafts:// or ca, cert, key and servername');
  if (!on) return undefined;
  return Object.fromEntries(Object.entries(given).filter(([, v]) => v !== null)) as RaftTlsFiles;
}

/**
 * The PEM contents of a TLS client's files: those named in the URL, else those named by
 * TENURE_RAFT_TLS_CA / _CERT / _KEY. A file that cannot be read is named with the reason, never
 * quoted.
 */
export async function readRaftTls(files: RaftTlsFiles, env: NodeJS.ProcessEnv = process.env): Promise<RaftClientTlsOptions> {
  const fromEnv = (name: keyof typeof RAFT_TLS_ENV): string | undefined => {
    const v = env[RAFT_TLS_ENV[name]];
    return v === undefined || v === '' ? undefined : v;
  };
  const caFile = files.caFile ?? fromEnv('ca');
  // The certificate and its key come together: both from the URL, or both from the environment.
  const pairFromUrl = files.certFile !== undefined;
  const certFile = pairFromUrl ? files.certFile : fromEnv('cert');
  const keyFile = pairFromUrl ? files.keyFile : fromEnv('key');
  if ((certFile === undefined) !== (keyFile === undefined)) {
    throw new InvalidArgumentError('store', `a client certificate needs both ${RAFT_TLS_ENV.cert} and ${RAFT_TLS_ENV.key}`);
  }
  const read = async (what: string, file: string | undefined): Promise<Buffer | undefined> => {
    if (file === undefined) return undefined;
    if (/-----BEGIN|[\r\n]/.test(file)) throw new InvalidArgumentError('store', `the raft TLS ${what} must be given as the path of a PEM file, not its content`);
    try {
      return await readFile(file);
    } catch (err) {
      throw new InvalidArgumentError('store', `cannot read the raft TLS ${what} file ${file}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`);
    }
  };
  const [ca, cert, key] = await Promise.all([read('CA', caFile), read('certificate', certFile), read('key', keyFile)]);
  return { ...(ca ? { ca } : {}), ...(cert ? { cert } : {}), ...(key ? { key } : {}), ...(files.servername !== undefined ? { servername: files.servername } : {}) };
}

/** The secret of a `secret-file` (one trailing line break dropped), else of TENURE_RAFT_SECRET. */
export async function readRaftSecret(secretFile: string | undefined, env: NodeJS.ProcessEnv = process.env): Promise<string> {
  if (secretFile !== undefined) {
    let text: string;
    try {
      text = await readFile(secretFile, 'utf8');
    } catch (err) {
      throw new Error(`cannot read the raft secret file ${secretFile}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`);
    }
    return text.replace(/\r?\n$/, '');
  }
  const secret = env[RAFT_SECRET_ENV] ?? '';
  if (secret === '') throw new InvalidArgumentError('store', `raft:// needs the cluster secret: ?secret-file=PATH in the URL, or ${RAFT_SECRET_ENV} in the environment`);
  return secret;
}

export const raftBackend: StoreBackend<RaftOpenOptions> = {
  kind: 'raft',
  schemes: ['raft', 'rafts'],
  shown: ['raft://', 'rafts://'],
  parse: ({ url }) => parseRaftUrl(url),
  async open(options) {
    const { RaftClientStore } = await import('./client-store.js');
    const { parseAddress } = await import('../../raft/transport/index.js');
    const secret = await readRaftSecret(options.secretFile);
    const tls = options.tls ? await readRaftTls(options.tls) : undefined;
    return new RaftClientStore({
      ...(tls ? { tls } : {}),
      members: options.members.map((h) => parseAddress('store', h)),
      secret,
      ...(options.clusterId !== undefined ? { clusterId: options.clusterId } : {}),
      ...(options.timeoutMs !== undefined ? { timeoutMs: options.timeoutMs } : {}),
    });
  },
};
