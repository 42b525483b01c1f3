/**
 * A cluster of `tenure raft serve` processes (the built bin/tenure.js) on free loopback ports, each
 * with its own data directory under one temporary root, for the raft:// tests: start, kill -9 or
 * SIGTERM a node, start a node that joins later, and the raft:// URL of the members.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { BIN } from '../../cli/helpers.js';
import { freePort } from '../../fixtures/ports.js';

export const SERVE_SECRET = 'raft serve test secret 0123456789';

/**
 * Election timeout and heartbeat of the test clusters: on this machine (2 cores, load 15 to 22
 * from other test runs) a node can be off the CPU for longer than the default 300 ms, and each
 * needless election costs the calls in flight a NOT_LEADER hop and a takeover.
 */
export const TIMING: readonly string[] = ['--election-timeout', '1000ms', '--heartbeat', '100ms'];

export interface ServeNode {
  readonly id: number;
  readonly address: string;
  readonly proc: ChildProcess;
  stdout: string;
  stderr: string;
  readonly exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
}

export class ServeCluster {
  readonly nodes = new Map<number, ServeNode>();
  readonly addresses = new Map<number, string>();
  readonly root = mkdtempSync(join(tmpdir(), 'tenure-raft-serve-'));
  readonly env: NodeJS.ProcessEnv = { ...process.env, TENURE_RAFT_SECRET: SERVE_SECRET };

  /** A file holding the secret, for `?secret-file=` (the servers read it from the environment). */
  readonly secretFile = join(this.root, 'secret');

  constructor() {
    delete this.env.TENURE_STORE;
    delete this.env.TENURE_DEBUG;
    writeFileSync(this.secretFile, `${SERVE_SECRET}\n`, { mode: 0o600 });
  }

  /** Arguments added to every node's `tenure raft serve` (TLS flags, say). */
  nodeArgs: readonly string[] = [];

  /**
   * Where node `from` dials node `to` (default: `to`'s address). A test puts fault proxies here
   * to cut one node off from its peers while clients still reach it at its own address.
   */
  peerRoute: ((from: number, to: number) => string | undefined) | undefined;

  /** Starts nodes `ids` of a new cluster and resolves once each printed its serving line. */
  static async start(ids: readonly number[] = [1, 2, 3], nodeArgs: readonly string[] = [], options: { addresses?: ReadonlyMap<number, string>; peerRoute?: (from: number, to: number) => string | undefined } = {}): Promise<ServeCluster> {
    const c = new ServeCluster();
    c.nodeArgs = nodeArgs;
    c.peerRoute = options.peerRoute;
    for (const id of ids) c.addresses.set(id, options.addresses?.get(id) ?? `127.0.0.1:${await freePort()}`);
    try {
      await Promise.all(ids.map((id) => c.startNode(id)));
    } catch (err) {
      await c.close();
      throw err;
    }
    return c;
  }

  peers(ids: Iterable<number> = this.addresses.keys()): string {
    return [...ids].map((id) => `${id}=${this.addresses.get(id)!}`).join(',');
  }

  /** raft://…?secret-file=… of the given members (default: all known). */
  url(ids: Iterable<number> = this.addresses.keys()): string {
    return `raft://${[...ids].map((id) => this.addresses.get(id)!).join(',')}?secret-file=${encodeURIComponent(this.secretFile)}`;
  }

  /** Starts (or restarts) node `id`; `join` for a node to be added by `tenure raft add`. */
  async startNode(id: number, options: { join?: boolean } = {}): Promise<ServeNode> {
    if (!this.addresses.has(id)) this.addresses.set(id, `127.0.0.1:${await freePort()}`);
    const address = this.addresses.get(id)!;
    const peers = [...this.addresses.keys()].map((to) => `${to}=${(to !== id ? this.peerRoute?.(id, to) : undefined) ?? this.addresses.get(to)!}`).join(',');
    const args = [BIN, 'raft', 'serve', '--id', String(id), '--listen', address, '--peers', peers, '--data', join(this.root, `n${id}`), ...TIMING, ...this.nodeArgs, ...(options.join ? ['--join'] : [])];
    const proc = spawn(process.execPath, args, { env: this.env, stdio: ['ignore', 'pipe', 'pipe'] });
    const node: ServeNode = {
      id,
      address,
      proc,
      stdout: '',
      stderr: '',
      exited: new Promise((resolve) => proc.on('close', (code, signal) => resolve({ code, signal }))),
    };
    proc.stdout!.on('data', (d: Buffer) => (node.stdout += d.toString()));
    proc.stderr!.on('data', (d: Buffer) => (node.stderr += d.toString()));
    this.nodes.set(id, node);
    const deadline = Date.now() + 30_000;
    while (!node.stdout.includes('serving on')) {
      if (proc.exitCode !== null || proc.signalCode !== null) throw new Error(`node ${id} exited before serving: ${node.stderr}`);
      if (Date.now() > deadline) throw new Error(`node ${id} did not print its serving line within 30 s: ${node.stderr}`);
      await new Promise((r) => setTimeout(r, 20));
    }
    return node;
  }

  /** Sends `signal` to node `id` and waits for it to exit. */
  async stop(id: number, signal: NodeJS.Signals = 'SIGKILL'): Promise<{ code: number | null; signal: NodeJS.Signals | null }> {
    const node = this.nodes.get(id);
    if (!node) throw new Error(`node ${id} is not running`);
    this.nodes.delete(id);
    node.proc.kill(signal);
    return node.exited;
  }

  async close(): Promise<void> {
    await Promise.all([...this.nodes.keys()].map((id) => this.stop(id)));
    rmSync(this.root, { recursive: true, force: true });
  }
}
