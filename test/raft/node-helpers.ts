/**
 * Helpers of the Raft node tests: a cluster of RaftNodes on real loopback ports and temporary
 * data directories, each applying entries to a list of strings (the state machine), which can be
 * closed and restarted on the same directory and port.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePort } from '../fixtures/ports.js';
import type { Entry } from '../../src/raft/core/index.js';
import { RaftNode, type RaftNodeOptions } from '../../src/raft/node/index.js';

export const CLUSTER = 'node-test';
export const SECRET = 'node test secret 0123456789';

const enc = new TextEncoder();
const dec = new TextDecoder();
export const bytes = (s: string): Uint8Array => enc.encode(s);

/** One member: its node (undefined while stopped) and its state machine, a list of applied strings. */
export interface Member {
  readonly id: number;
  readonly port: number;
  readonly dir: string;
  node: RaftNode<number> | undefined;
  applied: string[];
  restores: number;
  readonly logs: string[];
}

export type Extra = Partial<Omit<RaftNodeOptions<number>, 'apply' | 'snapshot' | 'restore'>>;

export class Cluster {
  readonly members = new Map<number, Member>();
  private readonly root = mkdtempSync(join(tmpdir(), 'tenure-node-'));

  constructor(private readonly extra: Extra = {}) {}

  /** Members `ids` on fresh ports, not started. */
  async define(ids: readonly number[]): Promise<void> {
    for (const id of ids) {
      this.members.set(id, { id, port: await freePort(), dir: join(this.root, `n${id}`), node: undefined, applied: [], restores: 0, logs: [] });
    }
  }

  peers(): Record<number, string> {
    return Object.fromEntries([...this.members.values()].map((m) => [m.id, `127.0.0.1:${m.port}`]));
  }

  async start(id: number, extra: Extra = {}): Promise<RaftNode<number>> {
    const m = this.members.get(id)!;
    // A restarted process starts with an empty state machine, restored from the snapshot.
    m.applied = [];
    m.node = await RaftNode.start<number>({
      id,
      dataDir: m.dir,
      listen: `127.0.0.1:${m.port}`,
      peers: this.peers(),
      clusterId: CLUSTER,
      secret: SECRET,
      tickMs: 10,
      electionTicks: 20,
      heartbeatTicks: 3,
      log: (line) => m.logs.push(line),
      transport: { reconnectMinMs: 10, reconnectMaxMs: 100 },
      ...this.extra,
      ...extra,
      apply: (entries: readonly Entry[]) => entries.map((e) => m.applied.push(dec.decode(e.data))),
      snapshot: () => enc.encode(JSON.stringify(m.applied)),
      restore: (data) => {
        m.restores++;
        m.applied = data.byteLength === 0 ? [] : (JSON.parse(dec.decode(data)) as string[]);
      },
    });
    return m.node;
  }

  async startAll(extra: Extra = {}): Promise<void> {
    await Promise.all([...this.members.keys()].map((id) => this.start(id, extra)));
  }

  async stop(id: number): Promise<void> {
    const m = this.members.get(id)!;
    await m.node?.close();
    m.node = undefined;
  }

  running(): RaftNode<number>[] {
    return [...this.members.values()].flatMap((m) => (m.node ? [m.node] : []));
  }

  /** The one leader among the running nodes, once every running node agrees on it. */
  async leader(ms = 10_000, among: readonly RaftNode<number>[] = this.running()): Promise<RaftNode<number>> {
    let found: RaftNode<number> | undefined;
    await until('one leader', () => {
      const leaders = among.filter((n) => n.isLeader);
      if (leaders.length !== 1) return false;
      found = leaders[0];
      return among.every((n) => n.leader === found!.id);
    }, ms);
    return found!;
  }

  async close(): Promise<void> {
    await Promise.all([...this.members.keys()].map((id) => this.stop(id)));
    rmSync(this.root, { recursive: true, force: true });
  }
}

/** Resolves once `cond` holds (polled every 5 ms); rejects after `ms` naming `what`. */
export async function until(what: string, cond: () => boolean, ms = 10_000): Promise<void> {
  const deadline = performance.now() + ms;
  while (!cond()) {
    if (performance.now() > deadline) throw new Error(`timed out after ${ms} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 5));
  }
}
