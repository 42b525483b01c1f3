/**
 * Private etcd servers for tests: real `etcd` processes (Debian's etcd-server, 3.4) on free
 * ports with temporary data directories, killed when the test process exits.
 *
 * Timing flags: heartbeat 25 ms and election timeout 250 ms, so a 3-member cluster elects a new
 * raft leader quickly and etcd's minimum lease TTL is 1 s (it is 3/2 election timeouts rounded
 * up to whole seconds; 2 s with etcd's defaults).
 */
import { randomBytes } from 'node:crypto';
import { spawn } from 'node:child_process';
import type { ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { EtcdStore } from '../../src/stores/etcd/index.js';
import { freePort } from '../fixtures/ports.js';

export interface EtcdMember {
  readonly name: string;
  /** `127.0.0.1:PORT` for clients. */
  readonly host: string;
  /** Plain-HTTP `/health` (etcd's metrics listener), which answers whatever the client URL speaks. */
  readonly healthUrl: string;
  readonly peerUrl: string;
  readonly dataDir: string;
  process: ChildProcess | null;
}

export interface EtcdCluster {
  readonly members: EtcdMember[];
  /** Every member's `host:port`, in order. */
  readonly hosts: string[];
  /** `etcd://h1,h2,...` */
  readonly url: string;
  /** Stop one member (SIGKILL by default) and wait for it to exit. */
  kill(member: EtcdMember, signal?: NodeJS.Signals): Promise<void>;
  /** Restart a stopped member with its data. */
  restart(member: EtcdMember): Promise<void>;
  /** Pause (SIGSTOP) or resume (SIGCONT) a member: it keeps its sockets but answers nothing. */
  pause(member: EtcdMember): void;
  resume(member: EtcdMember): void;
  stop(): Promise<void>;
}

const live = new Set<ChildProcess>();
process.on('exit', () => {
  for (const p of live) p.kill('SIGKILL');
});

/**
 * Kill `pid` (and remove `dir`) once this test process is gone, however it went: vitest may end
 * a worker with a signal, and 'exit' handlers do not run then. `dir` is removed only when the
 * parent is gone: a member killed on purpose (a failover test) leaves the cluster's data alone.
 */
export function killWithParent(pid: number, dir?: string): void {
  const cleanup = dir ? `; kill -0 ${process.pid} 2>/dev/null || rm -rf '${dir.replace(/'/g, '')}'` : '';
  const watchdog = spawn('sh', ['-c', `while kill -0 ${process.pid} 2>/dev/null && kill -0 ${pid} 2>/dev/null; do sleep 0.5; done; kill -9 ${pid} 2>/dev/null${cleanup}`], {
    detached: true,
    stdio: 'ignore',
  });
  watchdog.unref();
}

/** The etcd binary is there (CI installs etcd-server and etcd-client with apt-get when missing). */
export function etcdInstalled(): boolean {
  return ['/usr/bin/etcd', '/usr/local/bin/etcd'].some((p) => existsSync(p)) || (process.env.PATH ?? '').split(':').some((d) => existsSync(join(d, 'etcd')));
}


function tempRoot(dataRoot?: string): string {
  // tmpfs when there is one: etcd fsyncs every commit, and tests commit a lot.
  const base = dataRoot ?? (existsSync('/dev/shm') ? '/dev/shm' : tmpdir());
  return mkdtempSync(join(base, 'tenure-etcd-'));
}

/** Options of a private etcd: TLS on the client URLs (PEM file paths). */
export interface EtcdStartOptions {
  readonly tls?: {
    readonly certFile: string;
    readonly keyFile: string;
    /** With it, clients must show a certificate signed by this CA (`--client-cert-auth`). */
    readonly clientCaFile?: string;
  };
  /**
   * Where the members' data directories go (default: tmpfs when there is one). A benchmark that
   * compares commit latency with tenure's WAL puts both on the same real disk.
   */
  readonly dataRoot?: string;
  /** `--heartbeat-interval`, ms (default 25). */
  readonly heartbeatMs?: number;
  /** `--election-timeout`, ms (default 250). */
  readonly electionMs?: number;
}

/** Start an etcd cluster of `size` members and wait until it has a raft leader. */
export async function startEtcd(size = 1, options: EtcdStartOptions = {}): Promise<EtcdCluster> {
  if (!etcdInstalled()) throw new Error('etcd is not installed: apt-get install -y etcd-server etcd-client');
  const root = tempRoot(options.dataRoot);
  const members: EtcdMember[] = [];
  for (let i = 0; i < size; i++) {
    const clientPort = await freePort();
    const peerPort = await freePort();
    const metricsPort = await freePort();
    members.push({
      name: `m${i}`,
      host: `127.0.0.1:${clientPort}`,
      healthUrl: `http://127.0.0.1:${metricsPort}/health`,
      peerUrl: `http://127.0.0.1:${peerPort}`,
      dataDir: join(root, `m${i}`),
      process: null,
    });
  }
  const tls = options.tls;
  const clientScheme = tls ? 'https' : 'http';
  const tlsArgs = tls
    ? ['--cert-file', tls.certFile, '--key-file', tls.keyFile, ...(tls.clientCaFile ? ['--client-cert-auth', '--trusted-ca-file', tls.clientCaFile] : [])]
    : [];
  const initialCluster = members.map((m) => `${m.name}=${m.peerUrl}`).join(',');
  const launch = (m: EtcdMember, state: 'new' | 'existing'): void => {
    const p = spawn(
      'etcd',
      [
        '--name', m.name,
        '--data-dir', m.dataDir,
        '--listen-client-urls', `${clientScheme}://${m.host}`,
        '--advertise-client-urls', `${clientScheme}://${m.host}`,
        '--listen-metrics-urls', new URL(m.healthUrl).origin,
        ...tlsArgs,
        '--listen-peer-urls', m.peerUrl,
        '--initial-advertise-peer-urls', m.peerUrl,
        '--initial-cluster', initialCluster,
        '--initial-cluster-state', state,
        '--initial-cluster-token', `tenure-${root.slice(-6)}`,
        '--heartbeat-interval', String(options.heartbeatMs ?? 25),
        '--election-timeout', String(options.electionMs ?? 250),
        '--log-level', 'error',
      ],
      { stdio: ['ignore', 'ignore', 'pipe'] },
    );
    let stderr = '';
    p.stderr?.on('data', (d: Buffer) => {
      stderr = (stderr + d.toString()).slice(-4000);
    });
    p.once('exit', (code, signal) => {
      live.delete(p);
      if (m.process === p) m.process = null;
      if (code !== 0 && signal === null && process.env.TENURE_ETCD_DEBUG) process.stderr.write(`etcd ${m.name} exited ${code}: ${stderr}\n`);
    });
    live.add(p);
    if (p.pid !== undefined) killWithParent(p.pid, root);
    m.process = p;
  };
  for (const m of members) launch(m, 'new');
  const cluster: EtcdCluster = {
    members,
    hosts: members.map((m) => m.host),
    url: `etcd://${members.map((m) => m.host).join(',')}`,
    async kill(m, signal = 'SIGKILL') {
      const p = m.process;
      if (!p) return;
      const exited = new Promise<void>((r) => p.once('exit', () => r()));
      if (signal === 'SIGKILL') p.kill('SIGCONT');
      p.kill(signal);
      await exited;
    },
    async restart(m) {
      if (m.process) return;
      launch(m, 'existing');
      await waitHealthy([m]);
    },
    pause(m) {
      m.process?.kill('SIGSTOP');
    },
    resume(m) {
      m.process?.kill('SIGCONT');
    },
    async stop() {
      await Promise.all(members.map((m) => cluster.kill(m)));
      rmSync(root, { recursive: true, force: true });
    },
  };
  try {
    await waitHealthy(members);
  } catch (err) {
    await cluster.stop();
    throw err;
  }
  return cluster;
}

async function waitHealthy(members: EtcdMember[], timeoutMs = 20_000): Promise<void> {
  const start = Date.now();
  for (const m of members) {
    for (;;) {
      try {
        const res = await fetch(m.healthUrl, { signal: AbortSignal.timeout(500) });
        const body = (await res.json()) as { health?: string };
        if (body.health === 'true') break;
      } catch {
        // not up yet
      }
      if (m.process === null) throw new Error(`etcd member ${m.name} exited during start`);
      if (Date.now() - start > timeoutMs) throw new Error(`etcd member ${m.name} not healthy within ${timeoutMs} ms`);
      await new Promise((r) => setTimeout(r, 50));
    }
  }
}

let shared: Promise<EtcdCluster> | null = null;

/** One single-member etcd per test process, started on first use. */
export function sharedEtcd(): Promise<EtcdCluster> {
  shared ??= startEtcd(1);
  return shared;
}

/** A name no other test uses: `base` and 8 random hex digits. */
export const unique = (base: string): string => `${base}-${randomBytes(4).toString('hex')}`;

export const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** Poll `cond` every 10 ms until it holds; throws after `timeoutMs`. */
export async function waitUntil(cond: () => boolean | Promise<boolean>, timeoutMs = 10_000): Promise<void> {
  const start = Date.now();
  while (!(await cond())) {
    if (Date.now() - start > timeoutMs) throw new Error('condition not met in time');
    await sleep(10);
  }
}

/** The candidate keys of election `name` as etcd holds them, oldest first (Go's layout: `name/<lease hex>`). */
export async function candidateKeys(admin: EtcdStore, name: string): Promise<{ key: string; leaseHex: string; rev: number; value: string }[]> {
  const res = await admin.client.getAll().prefix(`${name}/`).sort('Create', 'Ascend').exec();
  return res.kvs.map((kv) => ({ key: kv.key.toString(), leaseHex: BigInt(kv.lease).toString(16), rev: Number(kv.create_revision), value: kv.value.toString() }));
}
