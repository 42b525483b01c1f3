/**
 * `tenure raft`: a standalone Raft store node (`serve`) and the cluster's administration
 * (`status`, `add`, `promote`, `remove`), over the same port the nodes use among themselves.
 * Clients and the admin commands prove the cluster secret at the handshake, like a peer
 * (docs/raft-store.md, "Standalone: tenure raft serve" and "raft:// clients").
 */
import { X509Certificate } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import { createSecureContext } from 'node:tls';
import { InvalidArgumentError, redactSecrets } from '../core/index.js';
import { parseAddress, type TransportTlsOptions } from '../raft/transport/index.js';
import { RAFT_SECRET_ENV, RAFT_TLS_ENV, parseRaftUrl, readRaftSecret, readRaftTls, type RaftTlsFiles } from '../stores/raft/backend.js';
import type { MemberStatus, Membership } from '../stores/raft/client-protocol.js';
import { UsageError, durationOption, flagOption, integerOption, parseCommand, renderHelp, stringOption } from './args.js';
import type { CommandSpec, OptionSpec, OptionValues } from './args.js';
import type { CliIO } from './output.js';
import { onTermination } from './signals.js';

const SECRET_FILE: OptionSpec = { type: 'string', value: 'PATH', help: `file holding the cluster secret (default: $${RAFT_SECRET_ENV})` };
const CLUSTER_ID: OptionSpec = { type: 'string', value: 'ID', help: 'the cluster id (default: tenure)' };
const TARGET = {
  store: { type: 'string', value: 'URL', help: 'raft://host:port,… (rafts:// for TLS) of the members (default: $TENURE_STORE)' },
  peers: { type: 'string', value: '1=H:P,…', help: 'the members by id, instead of --store' },
  'secret-file': SECRET_FILE,
  'cluster-id': CLUSTER_ID,
  'tls-ca': { type: 'string', value: 'PATH', help: `TLS to the members: the CA their certificates chain to (PEM; default with rafts://: $${RAFT_TLS_ENV.ca})` },
  'tls-cert': { type: 'string', value: 'PATH', help: `this client's TLS certificate, with --tls-key (default with rafts://: $${RAFT_TLS_ENV.cert})` },
  'tls-key': { type: 'string', value: 'PATH', help: `its key (default with rafts://: $${RAFT_TLS_ENV.key})` },
} as const satisfies Record<string, OptionSpec>;

export const raftServeSpec: CommandSpec = {
  name: 'raft serve',
  usage: 'raft serve --id N --listen H:P --peers 1=H:P,2=H:P,… --data DIR [--secret-file PATH] [--cluster-id ID] [--join] [--election-timeout MS] [--heartbeat MS] [--tls-cert PATH --tls-key PATH --tls-ca PATH [--tls-clients-without-cert]]',
  summary: 'Run one node of a Raft store cluster; clients use --store raft://H:P,… (the same addresses; rafts:// with TLS).',
  description: [
    `The cluster secret (at least 16 bytes) comes from --secret-file, else $${RAFT_SECRET_ENV}. A brand-new cluster starts from --peers (every node given the same list); a node to be added later with tenure raft add starts with --join (and --peers naming the members and itself).`,
    "With --tls-cert, --tls-key and --tls-ca (PEM files) the node takes TLS connections only: every peer must present a certificate the CA signed (mutual TLS), and so must rafts:// clients unless --tls-clients-without-cert; the cluster secret is still proven inside TLS. Every member of a cluster uses TLS or none does.",
    'Prints one line once serving; SIGTERM or SIGINT closes the node cleanly (exit 0).',
  ],
  options: {
    id: { type: 'string', value: 'N', help: "this node's id, a positive integer" },
    listen: { type: 'string', value: 'H:P', help: 'where to listen for peers and clients' },
    peers: { type: 'string', value: '1=H:P,…', help: "every member's address by id" },
    data: { type: 'string', value: 'DIR', help: 'data directory (WAL and snapshots), one node per directory' },
    'secret-file': SECRET_FILE,
    'cluster-id': CLUSTER_ID,
    join: { type: 'boolean', help: 'start empty and wait to be added (tenure raft add)' },
    'election-timeout': { type: 'string', value: 'MS', help: 'a follower that hears no leader this long campaigns (default 300ms; randomized up to twice it)' },
    heartbeat: { type: 'string', value: 'MS', help: "the leader's heartbeat interval (default 50ms), below the election timeout" },
    'tls-cert': { type: 'string', value: 'PATH', help: "this node's TLS certificate (PEM), for the names or addresses its peers and clients dial" },
    'tls-key': { type: 'string', value: 'PATH', help: 'its private key (PEM)' },
    'tls-ca': { type: 'string', value: 'PATH', help: "the CA that signed every member's certificate (PEM)" },
    'tls-clients-without-cert': { type: 'boolean', help: 'let rafts:// clients in without a client certificate, on the cluster secret alone (peers always need one)' },
  },
  required: ['id', 'listen', 'peers', 'data'],
  examples: [
    `${RAFT_SECRET_ENV}=… tenure raft serve --id 1 --listen 127.0.0.1:7001 --peers 1=127.0.0.1:7001,2=127.0.0.1:7002,3=127.0.0.1:7003 --data ./raft-1`,
  ],
};

export const raftStatusSpec: CommandSpec = {
  name: 'raft status',
  usage: 'raft status [--store raft://H:P,… | --peers 1=H:P,…] [--json]',
  summary: "Each member's id, address, role, term, commit and applied index, leader, voters and learners.",
  description: ['Exit code 0 when at least one member answered, 1 when none did. With --json: one JSON array, one object per listed address.'],
  options: { ...TARGET, json: { type: 'boolean', help: 'print JSON' } },
  examples: ['tenure raft status --store raft://127.0.0.1:7001,127.0.0.1:7002,127.0.0.1:7003 --json'],
};

export const raftAddSpec: CommandSpec = {
  name: 'raft add',
  usage: 'raft add --id N --addr H:P [--learner] [--store raft://H:P,… | --peers 1=H:P,…] [--json]',
  summary: 'Add a member (a voter, or with --learner a learner that gets the log but does not vote); sent to the leader.',
  description: ['Add a learner first, let it catch up (tenure raft status), then promote it: a voter that is far behind can stall commits.'],
  options: { ...TARGET, id: { type: 'string', value: 'N', help: "the new member's id" }, addr: { type: 'string', value: 'H:P', help: "the new member's --listen address" }, learner: { type: 'boolean', help: 'add as a learner' }, json: { type: 'boolean', help: 'print JSON' } },
  required: ['id', 'addr'],
  examples: ['tenure raft add --id 4 --addr 127.0.0.1:7004 --learner --store raft://127.0.0.1:7001'],
};

export const raftPromoteSpec: CommandSpec = {
  name: 'raft promote',
  usage: 'raft promote --id N [--store raft://H:P,… | --peers 1=H:P,…] [--json]',
  summary: 'Make a learner a voter; sent to the leader.',
  options: { ...TARGET, id: { type: 'string', value: 'N', help: "the learner's id" }, json: { type: 'boolean', help: 'print JSON' } },
  required: ['id'],
  examples: ['tenure raft promote --id 4 --store raft://127.0.0.1:7001'],
};

export const raftRemoveSpec: CommandSpec = {
  name: 'raft remove',
  usage: 'raft remove --id N [--store raft://H:P,… | --peers 1=H:P,…] [--json]',
  summary: 'Remove a member; sent to the leader.',
  options: { ...TARGET, id: { type: 'string', value: 'N', help: "the member's id" }, json: { type: 'boolean', help: 'print JSON' } },
  required: ['id'],
  examples: ['tenure raft remove --id 4 --store raft://127.0.0.1:7001'],
};

const SUBCOMMANDS: Readonly<Record<string, CommandSpec>> = { serve: raftServeSpec, status: raftStatusSpec, add: raftAddSpec, promote: raftPromoteSpec, remove: raftRemoveSpec };

export const raftSpec: CommandSpec = {
  name: 'raft',
  usage: 'raft serve|status|add|promote|remove [OPTIONS]',
  summary: "Run a Raft store node, and administer the cluster (tenure raft SUBCOMMAND --help).",
  description: Object.values(SUBCOMMANDS).map((s) => `tenure ${s.usage}\n  ${s.summary}`),
  options: {},
  positionals: { min: 1, max: 1, label: 'a subcommand (serve, status, add, promote or remove)' },
  examples: ['tenure raft serve --id 1 --listen 127.0.0.1:7001 --peers 1=127.0.0.1:7001,2=127.0.0.1:7002,3=127.0.0.1:7003 --data ./raft-1', 'tenure raft status --store raft://127.0.0.1:7001'],
};

/** `1=H:P,2=H:P`: positive ids, each once, each a host:port. */
export function parsePeers(field: string, text: string): Map<number, string> {
  const out = new Map<number, string>();
  for (const item of text.split(',')) {
    const m = /^\s*(\d{1,15})=(\S+)\s*$/.exec(item);
    if (!m) throw new InvalidArgumentError(field, `expected ID=HOST:PORT[,ID=HOST:PORT…], got '${item.slice(0, 100)}'`);
    const id = Number(m[1]);
    if (id < 1 || !Number.isSafeInteger(id)) throw new InvalidArgumentError(field, `node ids are positive integers, got ${m[1]}`);
    if (out.has(id)) throw new InvalidArgumentError(field, `node ${id} is listed twice`);
    const addr = parseAddress(field, m[2]!);
    if (addr.port === 0) throw new InvalidArgumentError(field, `node ${id} needs a port in [1, 65535]`);
    out.set(id, m[2]!);
  }
  return out;
}

export async function raftCommand(argv: readonly string[], io: CliIO): Promise<number> {
  const [sub, ...rest] = argv;
  if (sub === undefined) throw new UsageError('missing a subcommand: serve, status, add, promote or remove (see tenure raft --help)');
  if (sub === '--help' || sub === '-h') {
    io.stdout.write(renderHelp(raftSpec));
    return 0;
  }
  const spec = SUBCOMMANDS[sub];
  if (!spec) throw new UsageError(`unknown subcommand 'raft ${sub}' (serve, status, add, promote or remove; see tenure raft --help)`);
  const args = parseCommand(spec, rest);
  if (args.help) {
    io.stdout.write(renderHelp(spec));
    return 0;
  }
  if (sub === 'serve') return serve(args.values, io);
  return admin(sub, args.values, io);
}

async function secretOf(values: OptionValues, env: NodeJS.ProcessEnv): Promise<string> {
  const file = stringOption(values, 'secret-file');
  if (file === undefined && (env[RAFT_SECRET_ENV] ?? '') === '') {
    throw new InvalidArgumentError('--secret-file', `the cluster secret is needed: --secret-file PATH, or ${RAFT_SECRET_ENV} in the environment`);
  }
  try {
    return await readRaftSecret(file, env);
  } catch (err) {
    if (err instanceof InvalidArgumentError) throw err;
    throw new InvalidArgumentError('--secret-file', (err as Error).message);
  }
}

async function serve(values: OptionValues, io: CliIO): Promise<number> {
  const id = integerOption(values, 'id', 0, 1, Number.MAX_SAFE_INTEGER);
  const listen = stringOption(values, 'listen')!;
  parseAddress('--listen', listen);
  const peers = parsePeers('--peers', stringOption(values, 'peers')!);
  const join = flagOption(values, 'join');
  if (!join && !peers.has(id)) throw new InvalidArgumentError('--peers', `must name this node (${id}) too: every node of a new cluster is given the same list`);
  const clusterId = stringOption(values, 'cluster-id') ?? 'tenure';
  // The node ticks every 10 ms; the timeouts are whole ticks. Every node of a cluster should use
  // the same ones; a machine that stalls processes for longer than the election timeout (a
  // loaded host, a paused VM) sees needless elections with the default.
  const electionMs = durationOption(values, 'election-timeout', 300, 20, 60_000);
  const heartbeatMs = durationOption(values, 'heartbeat', 50, 10, 30_000);
  if (heartbeatMs * 2 > electionMs) throw new InvalidArgumentError('--heartbeat', `must be at most half the election timeout (${electionMs} ms), got ${heartbeatMs} ms`);
  const timing = { tickMs: 10, electionTicks: Math.round(electionMs / 10), heartbeatTicks: Math.round(heartbeatMs / 10) };
  const tls = await serveTls(values);
  const secret = await secretOf(values, io.env);
  const dataDir = stringOption(values, 'data')!;
  const { openRaftStore } = await import('../stores/raft/index.js');
  const log = (line: string): void => void io.stderr.write(`tenure raft serve: ${redactSecrets(line)}\n`);
  const store = await openRaftStore({ id, listen, peers, dataDir, secret, clusterId, log, ...(tls ? { tls } : {}), node: { ...timing, ...(join ? { join: true } : {}) } });
  const status = store.memberStatus();
  const security = tls ? `, mutual TLS${tls.clientsWithoutCert ? ' (clients may come without a certificate)' : ''}` : '';
  io.stdout.write(`tenure raft serve: node ${id} serving on ${status.address} (cluster ${clusterId}, members ${[...status.voters, ...status.learners].join(',') || 'none yet: waiting to be added'}, data ${dataDir}${security})\n`);
  await new Promise<void>((resolve) => {
    const remove = onTermination({
      stop: (signal) => {
        io.stderr.write(`tenure raft serve: ${signal}: closing node ${id}\n`);
        void store.close().finally(() => {
          remove();
          resolve();
        });
      },
    });
  });
  return 0;
}

/** A PEM file named by `flag`: its bytes, or InvalidArgumentError naming the file and why (never its content). */
async function pemFile(flag: string, path: string): Promise<Buffer> {
  if (path === '') throw new InvalidArgumentError(`--${flag}`, 'needs a file path');
  try {
    return await readFile(path);
  } catch (err) {
    throw new InvalidArgumentError(`--${flag}`, `cannot read ${path}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`);
  }
}

/**
 * The node's TLS from --tls-cert, --tls-key and --tls-ca (all three, or none), checked before
 * anything starts: files readable, the key matching the certificate, the certificate in its
 * validity period. Errors name the flag and the file, never a byte of the key.
 */
async function serveTls(values: OptionValues): Promise<TransportTlsOptions | undefined> {
  const paths = { 'tls-cert': stringOption(values, 'tls-cert'), 'tls-key': stringOption(values, 'tls-key'), 'tls-ca': stringOption(values, 'tls-ca') };
  const given = Object.entries(paths).filter(([, v]) => v !== undefined);
  const withoutCert = flagOption(values, 'tls-clients-without-cert');
  if (given.length === 0) {
    if (withoutCert) throw new InvalidArgumentError('--tls-clients-without-cert', 'needs TLS: --tls-cert, --tls-key and --tls-ca');
    return undefined;
  }
  if (given.length < 3) {
    const missing = Object.keys(paths).filter((k) => paths[k as keyof typeof paths] === undefined);
    throw new InvalidArgumentError(`--${missing[0]!}`, `TLS needs --tls-cert, --tls-key and --tls-ca together (missing ${missing.map((m) => `--${m}`).join(', ')})`);
  }
  const [cert, key, ca] = await Promise.all([pemFile('tls-cert', paths['tls-cert']!), pemFile('tls-key', paths['tls-key']!), pemFile('tls-ca', paths['tls-ca']!)]);
  try {
    createSecureContext({ cert, key, ca });
  } catch (err) {
    // OpenSSL's reason ("key values mismatch", "no start line"); it quotes nothing of the files.
    throw new InvalidArgumentError('--tls-cert', `the certificate, key and CA cannot be used together: ${(err as Error).message}`);
  }
  let own: X509Certificate;
  try {
    own = new X509Certificate(cert);
  } catch (err) {
    throw new InvalidArgumentError('--tls-cert', `${paths['tls-cert']!} is not a PEM certificate: ${(err as Error).message}`);
  }
  const now = Date.now();
  if (Date.parse(own.validTo) < now) throw new InvalidArgumentError('--tls-cert', `the certificate in ${paths['tls-cert']!} expired on ${own.validTo}`);
  if (Date.parse(own.validFrom) > now) throw new InvalidArgumentError('--tls-cert', `the certificate in ${paths['tls-cert']!} is not valid before ${own.validFrom}`);
  return { cert, key, ca, ...(withoutCert ? { clientsWithoutCert: true } : {}) };
}

/** A client's TLS from the admin flags, over what the URL gave (files of the flags win). */
function adminTls(values: OptionValues, fromUrl: RaftTlsFiles | undefined): RaftTlsFiles | undefined {
  const flags: RaftTlsFiles = {};
  const ca = stringOption(values, 'tls-ca');
  const cert = stringOption(values, 'tls-cert');
  const key = stringOption(values, 'tls-key');
  if ((cert === undefined) !== (key === undefined)) throw new InvalidArgumentError(cert === undefined ? '--tls-cert' : '--tls-key', 'a client certificate needs both --tls-cert and --tls-key');
  if (ca !== undefined) flags.caFile = ca;
  if (cert !== undefined && key !== undefined) {
    flags.certFile = cert;
    flags.keyFile = key;
  }
  if (fromUrl === undefined && Object.keys(flags).length === 0) return undefined;
  return { ...fromUrl, ...flags };
}

async function admin(sub: string, values: OptionValues, io: CliIO): Promise<number> {
  const peersText = stringOption(values, 'peers');
  const storeText = stringOption(values, 'store');
  if (peersText !== undefined && storeText !== undefined) throw new UsageError('give --store or --peers, not both');
  let members: string[];
  let clusterId = stringOption(values, 'cluster-id');
  let secretFile = stringOption(values, 'secret-file');
  let timeoutMs: number | undefined;
  let urlTls: RaftTlsFiles | undefined;
  if (peersText !== undefined) {
    members = [...parsePeers('--peers', peersText).values()];
  } else {
    const url = storeText ?? io.env.TENURE_STORE;
    if (url === undefined || url.trim() === '') throw new UsageError(`tenure raft ${sub} needs --store raft://H:P,… or --peers 1=H:P,…`);
    if (!/^rafts?:/i.test(url.trim())) throw new InvalidArgumentError('--store', 'tenure raft commands need a raft:// (or rafts://) URL');
    let o;
    try {
      o = parseRaftUrl(url.trim());
    } catch (err) {
      throw new InvalidArgumentError('--store', (err as Error).message.replace(/^store: /, ''));
    }
    members = o.members;
    clusterId ??= o.clusterId;
    secretFile ??= o.secretFile;
    timeoutMs = o.timeoutMs;
    urlTls = o.tls;
  }
  const tlsFiles = adminTls(values, urlTls);
  const secret = await secretOf({ 'secret-file': secretFile }, io.env);
  const tls = tlsFiles ? await readRaftTls(tlsFiles, io.env) : undefined;
  const { RaftClientStore } = await import('../stores/raft/client-store.js');
  const client = new RaftClientStore({
    members: members.map((m) => parseAddress('--store', m)),
    secret,
    ...(tls ? { tls } : {}),
    ...(clusterId !== undefined ? { clusterId } : {}),
    ...(timeoutMs !== undefined ? { timeoutMs } : {}),
    log: (line) => void io.stderr.write(`tenure raft ${sub}: ${line}\n`),
  });
  const json = flagOption(values, 'json');
  try {
    if (sub === 'status') {
      const rows = await client.memberStatuses();
      if (json) io.stdout.write(`${JSON.stringify(rows.map((r) => (r.status ? { ...r.status, address: r.address, reportedAddress: r.status.address } : { address: r.address, error: r.error })))}\n`);
      else printStatus(rows, io);
      return rows.some((r) => r.status) ? 0 : 1;
    }
    const id = integerOption(values, 'id', 0, 1, Number.MAX_SAFE_INTEGER);
    let membership: Membership;
    if (sub === 'add') {
      const addr = stringOption(values, 'addr')!;
      const a = parseAddress('--addr', addr);
      if (a.port === 0) throw new InvalidArgumentError('--addr', 'needs a port in [1, 65535]');
      membership = await client.changeMember('add', id, addr, flagOption(values, 'learner'));
    } else {
      membership = await client.changeMember(sub as 'promote' | 'remove', id);
    }
    if (json) io.stdout.write(`${JSON.stringify(membership)}\n`);
    else io.stdout.write(`voters ${membership.voters.join(',') || '-'}; learners ${membership.learners.join(',') || '-'}\n`);
    return 0;
  } finally {
    await client.close();
  }
}

function printStatus(rows: readonly { address: string; status?: MemberStatus; error?: string }[], io: CliIO): void {
  const table = [
    ['ID', 'ADDRESS', 'ROLE', 'TERM', 'COMMIT', 'APPLIED', 'LEADER', 'VOTERS', 'LEARNERS'],
    ...rows.map((r) =>
      r.status
        ? [String(r.status.id), r.address, r.status.role, String(r.status.term), String(r.status.commit), String(r.status.applied), r.status.leader === 0 ? '-' : String(r.status.leader), r.status.voters.join(','), r.status.learners.join(',') || '-']
        : ['?', r.address, `unreachable: ${r.error ?? ''}`, '', '', '', '', '', ''],
    ),
  ];
  const widths = table[0]!.map((_, i) => Math.max(...table.map((r) => r[i]!.length)));
  for (const r of table) io.stdout.write(`${r.map((c, i) => (i === r.length - 1 ? c : c.padEnd(widths[i]!))).join('  ').trimEnd()}\n`);
}
