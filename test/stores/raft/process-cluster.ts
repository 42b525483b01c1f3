/**
 * A 3-node Raft store cluster of real processes (test/fixtures/raft-node-process.ts) for the fault
 * tests: each node in its own process on its own data directory and port, so a test can SIGKILL,
 * SIGSTOP and restart one, damage its files, or (with `proxies`) route every node's peer traffic
 * through a fault proxy per ordered pair of nodes, to cut one off.
 *
 * A test's client calls go through `request`, which goes to the node that leads: a follower's
 * NOT_LEADER names the leader and the request goes there; a refusal that wrote nothing
 * (NOT_LEADER, PROPOSAL_DROPPED, a dead node) is retried until the request's deadline; anything
 * else (no answer in time, the node died with the request in flight, STORE_UNAVAILABLE) is
 * ambiguous and returned as such, never retried (it may have been applied).
 */
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { FixtureProcess, delay } from '../../fixtures/harness.js';
import { freePort } from '../../fixtures/ports.js';
import type { RaftNodeCommand, RaftNodeProcessConfig } from '../../fixtures/raft-node-process.js';
import { FaultProxy } from '../../chaos/proxy/index.js';

export const PROCESS_SECRET = 'raft process test secret 0123456789';

/** A command without its request id (the cluster numbers them). */
export type Command = RaftNodeCommand extends infer C ? (C extends RaftNodeCommand ? Omit<C, 'rid'> : never) : never;

export type Reply =
  | { readonly ok: true; readonly value: unknown; readonly node: number }
  | { readonly ok: false; readonly code: string; readonly message: string; readonly leader: number | null; readonly node: number };

/** How a client request ended: answered by a leader, refused for sure (nothing written), or unknown. */
export type Outcome =
  | { readonly kind: 'ok'; readonly value: unknown; readonly node: number }
  | { readonly kind: 'refused'; readonly code: string; readonly message: string; readonly node: number }
  | { readonly kind: 'ambiguous'; readonly why: string; readonly node: number };

/** Codes that mean the command was not written: the request may go elsewhere. */
const NOT_WRITTEN = new Set(['NOT_LEADER', 'PROPOSAL_DROPPED', 'NODE_DOWN']);

export interface ProcessClusterOptions {
  readonly ids?: readonly number[];
  /** Route each node's traffic to each peer through its own fault proxy (`proxy(from, to)`). */
  readonly proxies?: boolean;
  /** Overrides of the node config (tick, election ticks, snapshotEntries, proposeTimeoutMs...). */
  readonly node?: Partial<Omit<RaftNodeProcessConfig, 'id' | 'listen' | 'peers' | 'dataDir' | 'secret' | 'clusterId'>>;
  /** Per node: a data directory other than the cluster's own (a small tmpfs). */
  readonly dataDirs?: Readonly<Record<number, string>>;
}

interface Pending {
  resolve(r: Reply): void;
  timer: NodeJS.Timeout;
}

export class ProcessCluster {
  readonly ids: readonly number[];
  readonly root = mkdtempSync(join(tmpdir(), 'tenure-raft-proc-'));
  readonly procs = new Map<number, FixtureProcess>();
  /** Nodes stopped with SIGSTOP: requests skip them. */
  readonly stopped = new Set<number>();
  /** The node a request asks first: the last one known to lead. */
  leaderHint: number;
  private readonly ports = new Map<number, number>();
  private readonly proxyMap = new Map<string, FaultProxy>();
  private readonly pending = new Map<number, Map<number, Pending>>();
  private rid = 0;
  private closing = false;
  /**
   * Each cluster its own: test files run side by side, ports are drawn per process, and a port a
   * killed node left may be handed to another file's node while this cluster's nodes still dial
   * it; the handshake refuses another cluster's node.
   */
  private readonly clusterId = `raft-process-test-${process.pid}-${randomBytes(6).toString('hex')}`;
  private readonly config: Omit<RaftNodeProcessConfig, 'id' | 'listen' | 'peers' | 'dataDir' | 'secret' | 'clusterId'>;

  private constructor(private readonly options: ProcessClusterOptions) {
    this.ids = options.ids ?? [1, 2, 3];
    this.leaderHint = this.ids[0]!;
    // A 500–1000 ms election timeout: at 200–400 ms, a machine at load 25 (2 cores, five engineers'
    // tests) starved the nodes' timers long enough for elections to follow one another, and runs
    // got under 8 acknowledged appends a second.
    this.config = { tickMs: 10, electionTicks: 50, heartbeatTicks: 5, proposeTimeoutMs: 2000, ...options.node };
  }

  static async start(options: ProcessClusterOptions = {}): Promise<ProcessCluster> {
    const c = new ProcessCluster(options);
    try {
      for (const id of c.ids) c.ports.set(id, await freePort());
      if (options.proxies) {
        for (const from of c.ids) {
          for (const to of c.ids) {
            if (from === to) continue;
            c.proxyMap.set(`${from}-${to}`, await FaultProxy.start({ target: { host: '127.0.0.1', port: c.ports.get(to)! }, name: `${from}->${to}` }));
          }
        }
      }
      await Promise.all(c.ids.map((id) => c.spawn(id)));
    } catch (err) {
      await c.close();
      throw err;
    }
    return c;
  }

  dataDir(id: number): string {
    return this.options.dataDirs?.[id] ?? join(this.root, `n${id}`);
  }

  /** The proxy that carries `from`'s connections to `to` (only with `proxies`). */
  proxy(from: number, to: number): FaultProxy {
    const p = this.proxyMap.get(`${from}-${to}`);
    if (p === undefined) throw new Error(`no proxy ${from}->${to}: start the cluster with proxies`);
    return p;
  }

  /** Blackhole (both ways) every path between `id` and the other nodes; `heal` undoes it. */
  async isolate(id: number): Promise<void> {
    for (const other of this.ids) {
      if (other === id) continue;
      await this.proxy(id, other).blackhole();
      await this.proxy(other, id).blackhole();
    }
  }

  async heal(): Promise<void> {
    for (const p of this.proxyMap.values()) await p.heal();
  }

  private nodeConfig(id: number): RaftNodeProcessConfig {
    const peers: Record<number, string> = {};
    for (const other of this.ids) {
      const proxy = this.proxyMap.get(`${id}-${other}`);
      peers[other] = proxy === undefined ? `127.0.0.1:${this.ports.get(other)!}` : `${proxy.endpoint.host}:${proxy.endpoint.port}`;
    }
    return { ...this.config, id, listen: `127.0.0.1:${this.ports.get(id)!}`, peers, dataDir: this.dataDir(id), secret: PROCESS_SECRET, clusterId: this.clusterId };
  }

  /** Starts node `id` (again) on its data directory; resolves once it is ready, rejects if it exits first. */
  async spawn(id: number, readyTimeoutMs = 20_000): Promise<FixtureProcess> {
    const p = this.launch(id);
    await p.waitFor('ready', readyTimeoutMs);
    return p;
  }

  /** Starts node `id` without waiting for it (for a start that must fail). */
  launch(id: number): FixtureProcess {
    const old = this.procs.get(id);
    if (old !== undefined && old.exit === null) throw new Error(`node ${id} is still running`);
    const p = new FixtureProcess(`raft-node-${id}`, 'raft-node-process', [JSON.stringify(this.nodeConfig(id))]);
    this.procs.set(id, p);
    this.stopped.delete(id);
    const waiting = new Map<number, Pending>();
    this.pending.set(id, waiting);
    // After the harness parsed a chunk (its listener was added first): hand replies to their
    // callers and drop them from the event list, which would otherwise grow with every request.
    p.child.stdout!.on('data', () => {
      for (let i = 0; i < p.events.length; ) {
        const e = p.events[i]!;
        if (e.ev !== 'reply') {
          i++;
          continue;
        }
        p.events.splice(i, 1);
        const w = typeof e.rid === 'number' ? waiting.get(e.rid) : undefined;
        if (w === undefined) continue;
        waiting.delete(e.rid as number);
        clearTimeout(w.timer);
        w.resolve(
          e.ok === true
            ? { ok: true, value: e.value, node: id }
            : { ok: false, code: String(e.code), message: String(e.message), leader: typeof e.leader === 'number' ? e.leader : null, node: id },
        );
      }
    });
    void p.exited.then(() => {
      for (const [rid, w] of waiting) {
        waiting.delete(rid);
        clearTimeout(w.timer);
        w.resolve({ ok: false, code: 'NODE_GONE', message: `node ${id} exited with the request in flight`, leader: null, node: id });
      }
    });
    return p;
  }

  running(id: number): boolean {
    const p = this.procs.get(id);
    return p !== undefined && p.exit === null;
  }

  /** Sends one command to node `id`; a reply, or NO_REPLY after `timeoutMs`, NODE_DOWN if it is not running. */
  call(id: number, command: Command, timeoutMs = this.config.proposeTimeoutMs + 3000): Promise<Reply> {
    const p = this.procs.get(id);
    const waiting = this.pending.get(id);
    if (p === undefined || waiting === undefined || p.exit !== null) {
      return Promise.resolve({ ok: false, code: 'NODE_DOWN', message: `node ${id} is not running`, leader: null, node: id });
    }
    const rid = ++this.rid;
    return new Promise<Reply>((resolve) => {
      const timer = setTimeout(() => {
        waiting.delete(rid);
        resolve({ ok: false, code: 'NO_REPLY', message: `node ${id}: no reply within ${timeoutMs} ms`, leader: null, node: id });
      }, timeoutMs);
      waiting.set(rid, { resolve, timer });
      p.send(JSON.stringify({ rid, ...command }));
    });
  }

  /**
   * A client request: to the leader as far as known, following NOT_LEADER, until `deadlineMs`
   * passes. Only refusals that wrote nothing are retried; the first ambiguous answer ends it.
   */
  async request(command: Command, deadlineMs = 10_000): Promise<Outcome> {
    const until = performance.now() + deadlineMs;
    let last: Reply | undefined;
    for (let attempt = 0; performance.now() < until; attempt++) {
      let target = this.leaderHint;
      if (!this.running(target) || this.stopped.has(target)) target = this.pickOther(target, attempt);
      const r = await this.call(target, command);
      if (r.ok) {
        this.leaderHint = target;
        return { kind: 'ok', value: r.value, node: target };
      }
      last = r;
      if (!NOT_WRITTEN.has(r.code)) {
        // Ask someone else next time: this node may be paused, dead or cut off.
        if (r.code === 'NO_REPLY' || r.code === 'NODE_GONE' || r.code === 'STORE_UNAVAILABLE') this.leaderHint = this.pickOther(target, attempt);
        return r.code === 'NO_REPLY' || r.code === 'NODE_GONE' || r.code === 'STORE_UNAVAILABLE'
          ? { kind: 'ambiguous', why: `${r.code}: ${r.message}`, node: target }
          : { kind: 'refused', code: r.code, message: r.message, node: target };
      }
      if (r.code === 'NOT_LEADER' && r.leader !== null && r.leader > 0 && r.leader !== target && this.running(r.leader) && !this.stopped.has(r.leader)) {
        this.leaderHint = r.leader;
        continue;
      }
      this.leaderHint = this.pickOther(target, attempt);
      await delay(10 + Math.min(attempt, 10) * 5);
    }
    return { kind: 'refused', code: last?.ok === false ? last.code : 'NO_LEADER', message: `no leader took the request within ${deadlineMs} ms`, node: last?.node ?? 0 };
  }

  /** A running, unpaused node, the `i`-th in turn: reads are linearizable on any member, so they need not go to the leader. */
  anyNode(i: number): number {
    const live = this.ids.filter((id) => this.running(id) && !this.stopped.has(id));
    return live.length === 0 ? this.leaderHint : live[i % live.length]!;
  }

  private pickOther(not: number, attempt: number): number {
    const live = this.ids.filter((id) => id !== not && this.running(id) && !this.stopped.has(id));
    return live.length === 0 ? not : live[attempt % live.length]!;
  }

  async status(id: number): Promise<{ isLeader: boolean; role: string; term: number; lead: number; commit: number; applied: number } | null> {
    const r = await this.call(id, { cmd: 'status' }, 2000);
    return r.ok ? (r.value as { isLeader: boolean; role: string; term: number; lead: number; commit: number; applied: number }) : null;
  }

  /** The one running, unpaused node that leads with its takeover applied, once all those nodes agree on it. */
  async leader(timeoutMs = 15_000, among: readonly number[] = this.ids): Promise<number> {
    const until = performance.now() + timeoutMs;
    let seen = '';
    for (;;) {
      const live = among.filter((id) => this.running(id) && !this.stopped.has(id));
      const statuses = await Promise.all(live.map(async (id) => ({ id, s: await this.status(id) })));
      const leaders = statuses.filter((x) => x.s?.isLeader);
      if (leaders.length === 1 && statuses.every((x) => x.s !== null && x.s.lead === leaders[0]!.id)) {
        this.leaderHint = leaders[0]!.id;
        return leaders[0]!.id;
      }
      seen = JSON.stringify(statuses);
      if (performance.now() > until) throw new Error(`no agreed ready leader among ${JSON.stringify(live)} within ${timeoutMs} ms; last statuses ${seen}`);
      await delay(20);
    }
  }

  async kill(id: number): Promise<void> {
    this.stopped.delete(id);
    await this.procs.get(id)?.kill();
  }

  pause(id: number): void {
    this.procs.get(id)?.signal('SIGSTOP');
    this.stopped.add(id);
  }

  resume(id: number): void {
    this.procs.get(id)?.signal('SIGCONT');
    this.stopped.delete(id);
  }

  /** Every entry of `stream` as node `id` reads it (linearizable on any member), page by page. */
  async readAll(id: number, stream: string): Promise<{ seq: number; lease: string; term: number; payload: string }[]> {
    const all: { seq: number; lease: string; term: number; payload: string }[] = [];
    for (let page = 0; page < 1000; page++) {
      const r = await this.readPage(id, stream, all.length);
      if (!r.ok) throw new Error(`node ${id}: readStream ${stream} after ${all.length}: ${r.code}: ${r.message}`);
      const entries = r.value as { seq: number; lease: string; term: number; payload: string }[];
      if (entries.length === 0) return all;
      all.push(...entries);
    }
    throw new Error(`node ${id}: stream ${stream} longer than 1000 pages`);
  }

  /**
   * One page of a stream. A read index not confirmed in time (STORE_UNAVAILABLE: its request
   * timeout is two election timeouts, short on a loaded machine) or refused while no leader is
   * known (PROPOSAL_DROPPED, during an election) writes nothing and is asked again, for up to 10 s.
   */
  private async readPage(id: number, stream: string, after: number): Promise<Reply> {
    const until = performance.now() + 10_000;
    for (;;) {
      const r = await this.call(id, { cmd: 'readStream', stream, after, limit: 5000 });
      if (r.ok || (r.code !== 'STORE_UNAVAILABLE' && r.code !== 'PROPOSAL_DROPPED') || performance.now() > until) return r;
      await delay(50);
    }
  }

  /** The store's log lines a node printed (`{"ev":"log"}`), this incarnation. */
  logs(id: number): string[] {
    return (this.procs.get(id)?.all('log') ?? []).map((e) => String(e.line));
  }

  /** True once `close` was called: the workload's clients stop quietly (a test that failed closes the cluster under them). */
  get isClosed(): boolean {
    return this.closing;
  }

  async close(): Promise<void> {
    this.closing = true;
    for (const id of this.stopped) this.procs.get(id)?.signal('SIGCONT');
    await Promise.all([...this.procs.values()].map((p) => p.kill()));
    for (const p of this.proxyMap.values()) await p.close();
    rmSync(this.root, { recursive: true, force: true });
  }
}
