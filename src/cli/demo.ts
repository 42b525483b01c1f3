/**
 * `tenure demo`: leader election and fencing, live, on this machine.
 *
 * N node processes share a fresh SQLite store; the leader writes fenced, over the path `--via`
 * names (the store's stream, a fenced SQL row, …: see demo-writer.ts and demo-resource.ts). The demo
 *  1. freezes the leader (SIGSTOP) between its leadership check and its write, past its TTL,
 *     and shows another node take over with a higher term;
 *  2. resumes it (SIGCONT) and shows its write refused as stale;
 *  3. kills the new leader (kill -9) and shows crash failover;
 *  4. checks the resource's own record of the writes it applied (the stream, the row's history):
 *     gap-free, terms never go back, one writer per term;
 * then prints a summary. Every node process is stopped at the end, also when interrupted.
 */
import { spawn } from 'node:child_process';
import type { ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { limits } from '../core/index.js';
import type { Lease } from '../core/index.js';
import type { TenureStore } from '../open.js';
import { signalExitCode } from './child.js';
import { startDemoRaftCluster } from './demo-raft.js';
import type { DemoRaftCluster } from './demo-raft.js';
import { NODES_FILE } from './demo-node.js';
import type { DemoNodeEvent } from './demo-node.js';
import { WriteHistory } from './demo-history.js';
import { DemoView } from './demo-view.js';
import type { DemoNodeView, DemoSummary } from './demo-view.js';
import { formatMs } from './output.js';
import type { CliIO } from './output.js';
import { onTermination } from './signals.js';
import type { TerminationSignal } from './signals.js';
import { openCliStore, probeStore, storeTarget } from './store.js';
import type { StoreTarget } from './store.js';
import { openDemoResource } from './demo-resource.js';
import type { DemoResource } from './demo-resource.js';
import type { DemoVia } from './demo-writer.js';

/** The group and stream on the demo's own fresh store; on a `--store` of the user's, a name of this run's own. */
const GROUP = 'demo';
const TICK_MS = 100;
const POLL_MS = 20;

class Interrupted extends Error {}

export interface DemoNode extends DemoNodeView {
  proc: ChildProcess;
  /** Set before tenure stops or kills it, so its exit is not reported as a problem. */
  expectedExit: boolean;
  exited: Promise<void>;
  stderrTail: string[];
}

export interface Failover {
  cause: 'pause' | 'crash';
  from: string;
  fromTerm: number;
  to: string;
  toTerm: number;
  ms: number;
}

export interface DemoOptions {
  nodeCount: number;
  durationMs: number;
  ttlMs: number;
  json: boolean;
  via: DemoVia;
  /** The broker's URL, for the broker paths. */
  broker: string | undefined;
  /** A store of the user's (`--store`), or undefined for a fresh temporary SQLite file. */
  store: StoreTarget | undefined;
  /** `--store raft`: a 3-member Raft store of the demo's own (tenure raft serve processes) instead. */
  raft?: boolean;
  /** Follower processes besides the N nodes (`--scenario followers`), 0 otherwise. */
  followers: number;
}

/**
 * The failover story, and the machinery every story shares: node processes, their reports, the
 * view, the watch on the store, stopping everything at the end. A story of its own (FollowersDemo)
 * overrides script(), and the hooks stepsDone(), afterShutdown() and summary().
 */
export class Demo {
  protected readonly nodes: DemoNode[] = [];
  protected readonly failovers: Failover[] = [];
  protected readonly violations: string[] = [];
  protected readonly problems: string[] = [];
  protected readonly pids: number[] = [];
  /** `--store raft`: the members the demo started. */
  private raft: DemoRaftCluster | null = null;
  /** term -> owner, from the nodes' own `elected` reports. */
  private readonly electedBy = new Map<number, { owner: string; node: string }>();
  /** The checks on the resource's record of the writes it applied. */
  protected readonly history = new WriteHistory(this.violations);
  protected staleRejected = 0;
  private lease: Lease | null = null;
  private readonly startedAt = performance.now();
  protected readonly interrupt = new AbortController();
  protected received: TerminationSignal | null = null;
  protected store: TenureStore | null = null;
  private resource: DemoResource | null = null;
  protected dir = '';
  protected storeUrl = '';
  /** The group and stream: `demo` on the demo's own store, `demo-<random>` on a user's. */
  protected readonly group: string;
  protected readonly view: DemoView;
  protected readonly intervalMs: number;

  constructor(
    protected readonly io: CliIO,
    protected readonly options: DemoOptions,
  ) {
    const live = !options.json && (io.stdout as NodeJS.WriteStream).isTTY === true;
    this.group = options.store ? `${GROUP}-${randomBytes(4).toString('hex')}` : GROUP;
    this.view = new DemoView(io.stdout, live ? 'live' : options.json ? 'quiet' : 'plain', {
      nodes: options.nodeCount + options.followers,
      ttlMs: options.ttlMs,
      durationMs: options.durationMs,
      group: this.group,
      color: live && !io.env.NO_COLOR,
    });
    this.intervalMs = Math.min(100, Math.max(50, Math.round(options.ttlMs / 12)));
  }

  async run(): Promise<number> {
    const removeHandlers = onTermination({
      stop: (sig) => {
        this.received = sig;
        this.interrupt.abort();
      },
      hurry: () => {
        this.killAll('SIGKILL');
        this.raft?.kill();
      },
    });
    let ticker: NodeJS.Timeout | null = null;
    try {
      this.dir = mkdtempSync(join(tmpdir(), 'tenure-demo-'));
      if (this.options.raft) {
        try {
          this.raft = await startDemoRaftCluster({ dir: this.dir, env: this.io.env, bin: binPath(), signal: this.interrupt.signal, onSpawn: (pid) => this.addPid(pid) });
        } catch (err) {
          if (this.received) return signalExitCode(this.received);
          throw err;
        }
      }
      const target = this.options.store ?? storeTarget(this.raft ? this.raft.url : `sqlite:${join(this.dir, 'tenure.db')}`, this.io.env);
      this.storeUrl = target.url;
      this.store = await openCliStore(target, 2000);
      // A store of the user's may be down or wrong: one line and exit 1, before any node starts.
      // The demo's own Raft store answers once its members have elected a leader.
      if (this.options.store || this.raft) await probeStore(this.store, target, this.group);
      this.resource = await openDemoResource({
        via: this.options.via,
        store: this.store,
        stream: this.group,
        storeFile: target.options.kind === 'sqlite' ? resolve(target.options.path) : join(this.dir, 'tenure.db'),
        dir: this.dir,
        group: this.group,
        broker: this.options.broker,
        env: this.io.env,
        bin: binPath(),
        onSpawn: (pid) => this.addPid(pid),
        onRefused: (e) => this.refused(e.node, e.message, this.resource?.refusedWhere ?? ''),
        onNote: (text) => this.note(text),
      });
      this.view.start(target.display, this.resource.description);
      if (this.options.store) this.note(`group and stream ${this.group} are this run's own; the stream stays in the store afterwards`);
      if (this.raft) this.note(`raft store: 3 members (tenure raft serve) started (pids ${this.raft.pids.join(', ')}), removed at the end`);
      if (this.resource.process) this.note(`${this.resource.process.name} started (pid ${this.resource.process.pid})`);
      ticker = setInterval(() => void this.tick(), TICK_MS);
      try {
        await this.script();
      } catch (err) {
        if (!(err instanceof Interrupted)) throw err;
        this.note('interrupted: stopping every node');
      }
    } finally {
      if (ticker) clearInterval(ticker);
      await this.shutdown();
      await this.tick(); // read what the nodes wrote last
      this.history.checkElections(this.electedBy);
      if (this.store) await this.afterShutdown(this.store);
      await this.resource?.close().catch(() => {});
      await this.store?.close();
      await this.raft?.stop();
      if (this.dir) rmSync(this.dir, { recursive: true, force: true });
      removeHandlers();
    }
    const summary = this.summary();
    this.view.finish(summary);
    if (this.options.json) this.io.stdout.write(`${JSON.stringify(summary)}\n`);
    if (this.received) return signalExitCode(this.received);
    return summary.ok ? 0 : 1;
  }

  // ---- the script -------------------------------------------------------------------------

  /** Every step of the story happened (the summary's `ok` also needs no violation and no problem). */
  protected stepsDone(): boolean {
    return this.failovers.length === 2 && this.staleRejected > 0;
  }

  /** One more line for the live view, under the record's. */
  protected statusLine(): string | undefined {
    return undefined;
  }

  /** Checks run once every process has stopped and the store was read a last time, before the directory goes. */
  protected async afterShutdown(_store: TenureStore): Promise<void> {}

  protected async script(): Promise<void> {
    const { ttlMs, durationMs } = this.options;
    for (let i = 1; i <= this.options.nodeCount; i++) this.spawnNode(`node-${i}`);
    const first = await this.waitFor(() => this.leader(), 15_000 + 5 * ttlMs);
    if (!first) {
      this.problems.push(`no node was elected within ${formatMs(15_000 + 5 * ttlMs)}`);
      return;
    }
    // Let the first leader write for a while, so the freeze interrupts steady work.
    const pauseAt = Math.max(durationMs * 0.2, 0);
    await this.waitFor(() => first.wrote >= 5 && this.elapsed() >= pauseAt, Math.max(pauseAt, 0) + 10 * this.intervalMs + 5000);

    await this.pauseStep();
    const killAt = Math.max(durationMs * 0.55, this.elapsed() + Math.max(1000, ttlMs));
    await this.sleep(killAt - this.elapsed());
    await this.crashStep();
    await this.sleep(Math.max(durationMs - this.elapsed(), Math.max(1000, ttlMs)));
  }

  /** Freeze the leader past its TTL, watch the takeover, resume it and watch its write refused. */
  protected async pauseStep(): Promise<void> {
    const { ttlMs } = this.options;
    let frozen: DemoNode | null = null;
    for (let attempt = 0; attempt < 3 && !frozen; attempt++) {
      const leader = await this.waitFor(() => this.leader(), 5 * ttlMs + 5000);
      if (!leader) break;
      leader.freezeAsked = true;
      signal(leader, 'SIGUSR2');
      const ok = await this.waitFor(() => leader.state === 'frozen' || !leader.freezeAsked, 5 * this.intervalMs + 3000);
      if (ok && leader.state === 'frozen') frozen = leader;
      leader.freezeAsked = false;
    }
    if (!frozen) {
      this.problems.push('the leader could not be frozen');
      return;
    }
    const term = frozen.term ?? 0;
    const frozenAt = performance.now();
    this.note(`${frozen.name} frozen (SIGSTOP) after checking it leads, before its next write; its lease (term ${term}) runs out within ${formatMs(ttlMs)}`);
    const next = await this.waitFor(() => this.leaderOtherThan(frozen, term), 10 * ttlMs + 10_000);
    if (next) {
      const ms = Math.round((next.electedAt ?? performance.now()) - frozenAt);
      this.failovers.push({ cause: 'pause', from: frozen.name, fromTerm: term, to: next.name, toTerm: next.term ?? 0, ms });
      this.note(`${next.name} took over with term ${next.term} ${formatMs(ms)} after the freeze`);
      // Keep the old leader frozen well past its TTL, while the new one writes.
      const since = next.wrote;
      await this.waitFor(() => performance.now() - frozenAt >= 2 * ttlMs && next.wrote >= since + 3, 2 * ttlMs + 5000);
    } else {
      this.problems.push(`no takeover within ${formatMs(10 * ttlMs + 10_000)} of freezing ${frozen.name}`);
    }
    signal(frozen, 'SIGCONT');
    frozen.state = 'resumed';
    this.note(`${frozen.name} resumed (SIGCONT) after ${formatMs(performance.now() - frozenAt)}; it still believes it leads term ${term} and writes`);
    if (!next) return;
    const refused = await this.waitFor(() => frozen.staleRefused > 0, 5000 + 5 * ttlMs);
    if (!refused) this.problems.push(`${frozen.name}'s write after resuming was not reported refused`);
    await this.waitFor(() => frozen.state !== 'resumed' && frozen.state !== 'leader', 5000 + 3 * ttlMs);
  }

  /** Kill the leader with SIGKILL and watch another node take over when its lease runs out. */
  private async crashStep(): Promise<void> {
    const { ttlMs } = this.options;
    const leader = await this.waitFor(() => this.leader(), 10 * ttlMs + 5000);
    if (!leader) {
      this.problems.push('no leader to kill');
      return;
    }
    const term = leader.term ?? 0;
    leader.expectedExit = true;
    signal(leader, 'SIGKILL');
    const killedAt = performance.now();
    leader.state = 'killed';
    leader.term = null;
    this.note(`${leader.name} killed (kill -9) while leading term ${term}`);
    const next = await this.waitFor(() => this.leaderOtherThan(leader, term), 10 * ttlMs + 10_000);
    if (!next) {
      this.problems.push(`no takeover within ${formatMs(10 * ttlMs + 10_000)} of killing ${leader.name}`);
      return;
    }
    const ms = Math.round((next.electedAt ?? performance.now()) - killedAt);
    this.failovers.push({ cause: 'crash', from: leader.name, fromTerm: term, to: next.name, toTerm: next.term ?? 0, ms });
    this.note(`${next.name} took over with term ${next.term} ${formatMs(ms)} after the crash`);
    await leader.exited;
    this.spawnNode(leader.name);
    this.note(`${leader.name} restarted as a new incarnation`);
  }

  // ---- nodes ------------------------------------------------------------------------------

  /**
   * Start (or restart) the process `name`: a `tenure demo-node` unless `command` names another
   * internal command and its arguments (the store, the demo directory and TENURE_STORE are added).
   * Its JSON lines go to onNodeLine; it is stopped with the others at the end.
   */
  protected spawnNode(name: string, command?: readonly string[]): void {
    const bin = binPath();
    const args = command ?? [
      'demo-node', '--group', this.group, '--stream', this.group, '--id', name, '--ttl', String(this.options.ttlMs),
      '--interval', String(this.intervalMs), ...(this.resource?.nodeArgs ?? []),
    ];
    const proc = spawn(process.execPath, [bin, ...args, '--store', this.storeUrl, '--demo-dir', this.dir], {
      stdio: ['pipe', 'pipe', 'pipe'],
      env: { ...(this.raft?.env ?? this.io.env), TENURE_STORE: this.storeUrl },
    });
    const existing = this.nodes.find((n) => n.name === name);
    const node: DemoNode = existing ?? {
      name,
      pid: 0,
      owner: null,
      state: 'starting',
      term: null,
      wrote: 0,
      staleRefused: 0,
      electedAt: null,
      freezeAsked: false,
      proc,
      expectedExit: false,
      exited: Promise.resolve(),
      stderrTail: [],
    };
    if (!existing) this.nodes.push(node);
    node.proc = proc;
    node.pid = proc.pid ?? 0;
    node.owner = null;
    node.state = 'starting';
    node.term = null;
    node.expectedExit = false;
    node.stderrTail = [];
    if (proc.pid) this.addPid(proc.pid);
    node.exited = new Promise<void>((resolve) => {
      proc.once('exit', (code, sig) => {
        if (node.proc === proc) {
          if (!node.expectedExit) {
            this.problems.push(`${name} exited unexpectedly (${sig ?? `code ${code}`})${node.stderrTail.length ? `: ${node.stderrTail.join(' | ')}` : ''}`);
          }
          if (node.state !== 'killed') node.state = 'stopped';
          node.term = null;
        }
        resolve();
      });
      proc.once('error', () => resolve());
    });
    proc.stdin?.on('error', () => {});
    createInterface({ input: proc.stdout! }).on('line', (line) => this.onNodeLine(node, proc, line));
    createInterface({ input: proc.stderr! }).on('line', (line) => {
      node.stderrTail.push(line);
      if (node.stderrTail.length > 5) node.stderrTail.shift();
    });
  }

  protected onNodeLine(node: DemoNode, proc: ChildProcess, line: string): void {
    if (node.proc !== proc) return;
    let e: DemoNodeEvent;
    try {
      e = JSON.parse(line) as DemoNodeEvent;
    } catch {
      return;
    }
    switch (e.event) {
      case 'hello':
        node.owner = e.owner;
        node.state = 'follower';
        this.note(`${node.name} started (pid ${e.pid}) as ${e.owner}`);
        break;
      case 'elected': {
        node.state = 'leader';
        node.term = e.term;
        node.electedAt = performance.now();
        const before = this.electedBy.get(e.term);
        if (before && before.owner !== node.owner) {
          this.violations.push(`term ${e.term} was won twice: by ${before.node} and by ${node.name}`);
        }
        this.electedBy.set(e.term, { owner: node.owner ?? '?', node: node.name });
        this.note(`${node.name} elected, term ${e.term}`);
        break;
      }
      case 'deposed':
        if (node.state !== 'killed') node.state = 'follower';
        node.term = null;
        this.note(`${node.name} stepped down from term ${e.term} (${e.reason})`);
        break;
      case 'freezing':
        node.state = 'frozen';
        break;
      case 'resumed':
        break;
      case 'freeze-skipped':
        node.freezeAsked = false;
        break;
      case 'stale':
        // Counted once: here when only the writer hears of it (the store, the SQL statement);
        // else the resource process reports it (the HTTP guard), and the writer just heard the 409.
        if (this.resource?.refusalsFrom === 'writer') this.refused(node.name, e.message, this.resource.refusedWhere);
        else this.note(`${node.name} heard its write refused (${e.message})`);
        break;
      case 'store-error':
        this.note(`${node.name}: store error: ${e.message}`);
        break;
      case 'stopped':
        break;
    }
  }

  /** A write refused as stale: counted for the node that sent it. */
  private refused(nodeName: string | null, message: string, where: string): void {
    const node = this.nodes.find((n) => n.name === nodeName);
    if (node) node.staleRefused++;
    this.staleRejected++;
    this.note(`${nodeName ?? 'a node'}'s write refused${where ? ` ${where}` : ''}: ${message}`);
  }

  /** A process the demo started: stopped at the end, listed for the nodes' clean-up if the demo dies. */
  private addPid(pid: number): void {
    this.pids.push(pid);
    writeFileSync(join(this.dir, NODES_FILE), JSON.stringify(this.pids));
  }

  protected leader(): DemoNode | null {
    return this.nodes.find((n) => n.state === 'leader') ?? null;
  }

  private leaderOtherThan(node: DemoNode, term: number): DemoNode | null {
    return this.nodes.find((n) => n !== node && n.state === 'leader' && (n.term ?? 0) > term) ?? null;
  }

  private killAll(sig: NodeJS.Signals): void {
    for (const n of this.nodes) {
      if (n.state === 'stopped' || n.state === 'killed') continue;
      n.expectedExit = true;
      signal(n, sig);
    }
  }

  /** Stop every node: resume the frozen, SIGTERM all, SIGKILL what is left after 3 s. */
  private async shutdown(): Promise<void> {
    for (const n of this.nodes) {
      n.expectedExit = true;
      signal(n, 'SIGCONT');
      signal(n, 'SIGTERM');
      n.proc.stdin?.end();
    }
    const all = Promise.all(this.nodes.map((n) => n.exited));
    const inTime = await Promise.race([all.then(() => true), delay(3000).then(() => false)]);
    if (!inTime) {
      for (const n of this.nodes) signal(n, 'SIGKILL');
      await Promise.race([all, delay(3000)]);
    }
  }

  // ---- watching the store -----------------------------------------------------------------

  private ticking = false;

  private async tick(): Promise<void> {
    if (this.ticking || !this.store || !this.resource) return;
    this.ticking = true;
    try {
      this.lease = await this.store.read(this.group);
      for (;;) {
        const batch = await this.resource.read(this.history.lastSeq, limits.readLimitMax);
        for (const e of batch) {
          const name = this.history.add(e);
          const writer = this.nodes.find((n) => n.name === name);
          if (writer) writer.wrote++;
        }
        if (batch.length < limits.readLimitMax) break;
      }
    } catch {
      // A busy database is read again on the next tick.
    } finally {
      this.ticking = false;
    }
    this.view.render(this.viewState());
  }

  // ---- helpers ----------------------------------------------------------------------------

  protected elapsed(): number {
    return performance.now() - this.startedAt;
  }

  protected note(text: string): void {
    this.view.note(this.elapsed(), text);
  }

  /** Poll `check` until it returns something truthy; null after `timeoutMs`. Throws when interrupted. */
  protected async waitFor<T>(check: () => T | null | false | undefined, timeoutMs: number): Promise<T | null> {
    const until = performance.now() + timeoutMs;
    for (;;) {
      if (this.interrupt.signal.aborted) throw new Interrupted();
      const value = check();
      if (value) return value;
      if (performance.now() >= until) return null;
      await delay(POLL_MS);
    }
  }

  protected async sleep(ms: number): Promise<void> {
    const until = performance.now() + ms;
    while (performance.now() < until) {
      if (this.interrupt.signal.aborted) throw new Interrupted();
      await delay(Math.min(POLL_MS * 5, until - performance.now()));
    }
    if (this.interrupt.signal.aborted) throw new Interrupted();
  }

  private viewState(): Parameters<DemoView['render']>[0] {
    return {
      elapsedMs: this.elapsed(),
      nodes: this.nodes,
      lease: this.lease,
      entries: this.history.entries,
      lastSeq: this.history.lastSeq,
      lastTerm: this.history.lastTerm,
      staleRejected: this.staleRejected,
      violations: this.violations.length,
      label: this.resource?.label ?? 'stream',
      status: this.statusLine(),
    };
  }

  protected summary(): DemoSummary {
    const { termWriters } = this.history;
    const terms = [...new Set([...this.electedBy.keys(), ...termWriters.keys()])]
      .sort((a, b) => a - b)
      .map((term) => ({
        term,
        node: termWriters.get(term)?.node ?? this.electedBy.get(term)?.node ?? '?',
        entries: termWriters.get(term)?.entries ?? 0,
      }));
    return {
      ok: this.violations.length === 0 && this.problems.length === 0 && this.stepsDone() && !this.received,
      scenario: 'failover',
      via: this.options.via,
      store: this.options.store?.display ?? (this.options.raft ? 'raft (3 local members, temporary)' : 'sqlite (temporary)'),
      group: this.group,
      nodes: this.options.nodeCount,
      ttlMs: this.options.ttlMs,
      durationMs: Math.round(this.elapsed()),
      failovers: this.failovers,
      terms,
      staleRejected: this.staleRejected,
      entries: this.history.entries,
      violations: this.violations,
      problems: this.problems,
      pids: this.pids,
      interrupted: this.received !== null,
    };
  }
}

/** Send `sig` to a node's process, unless it is gone. */
export function signal(node: DemoNode, sig: NodeJS.Signals): void {
  if (node.proc.exitCode !== null || node.proc.signalCode !== null) return;
  try {
    node.proc.kill(sig);
  } catch {
    // already gone
  }
}

export function delay(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, Math.max(0, ms)));
}

/** The tenure entry script, to start the nodes with. */
function binPath(): string {
  const bin = fileURLToPath(new URL('../../../bin/tenure.js', import.meta.url));
  if (existsSync(bin)) return bin;
  return process.argv[1] ?? bin;
}
