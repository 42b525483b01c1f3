/**
 * A 3-node embedded Raft store cluster in this process for tests and the bench: real loopback
 * ports, temporary data directories, nodes that can be closed and reopened on the same directory.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePort } from '../../fixtures/ports.js';
import { openRaftStore, type RaftStore, type RaftStoreOptions } from '../../../src/stores/raft/index.js';

export const SECRET = 'raft store test secret 0123456789';

export class RaftCluster {
  readonly stores = new Map<number, RaftStore>();
  readonly logs: string[] = [];
  private readonly ports = new Map<number, number>();
  private readonly root = mkdtempSync(join(tmpdir(), 'tenure-raft-store-'));

  constructor(private readonly extra: Partial<RaftStoreOptions> = {}) {}

  static async start(ids: readonly number[] = [1, 2, 3], extra: Partial<RaftStoreOptions> = {}): Promise<RaftCluster> {
    const c = new RaftCluster(extra);
    for (const id of ids) c.ports.set(id, await freePort());
    await Promise.all(ids.map((id) => c.open(id)));
    return c;
  }

  peers(): Record<number, string> {
    return Object.fromEntries([...this.ports].map(([id, port]) => [id, `127.0.0.1:${port}`]));
  }

  async open(id: number): Promise<RaftStore> {
    const store = await openRaftStore({
      id,
      listen: `127.0.0.1:${this.ports.get(id)!}`,
      peers: this.peers(),
      dataDir: join(this.root, `n${id}`),
      secret: SECRET,
      clusterId: 'raft-store-test',
      log: (line) => this.logs.push(line),
      ...this.extra,
      node: { tickMs: 10, electionTicks: 20, heartbeatTicks: 3, transport: { reconnectMinMs: 10, reconnectMaxMs: 100 }, ...this.extra.node },
    });
    this.stores.set(id, store);
    return store;
  }

  async stop(id: number): Promise<void> {
    const s = this.stores.get(id);
    this.stores.delete(id);
    await s?.close();
  }

  /** The running store that leads and takes writes, once every running node agrees on it. */
  async leader(ms = 10_000): Promise<RaftStore> {
    const deadline = performance.now() + ms;
    for (;;) {
      const running = [...this.stores.values()];
      const leaders = running.filter((s) => s.isLeader);
      if (leaders.length === 1 && running.every((s) => s.status().node.lead === leaders[0]!.id)) return leaders[0]!;
      if (performance.now() > deadline) throw new Error(`no ready leader within ${ms} ms`);
      await new Promise((r) => setTimeout(r, 5));
    }
  }

  async close(): Promise<void> {
    await Promise.all([...this.stores.keys()].map((id) => this.stop(id)));
    rmSync(this.root, { recursive: true, force: true });
  }
}
