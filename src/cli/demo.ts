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
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { InvalidArgumentError, limits, parseDuration } from '../core/index.js';
import type { Lease } from '../core/index.js';
import type { TenureStore } from '../open.js';
import { durationOption, flagOption, integerOption, parseCommand, renderHelp, stringOption } from './args.js';
import type { CommandSpec } from './args.js';
import { signalExitCode } from './child.js';
import { NODES_FILE } from './demo-node.js';
import type { DemoNodeEvent } from './demo-node.js';
import { WriteHistory } from './demo-history.js';
import { DemoView } from './demo-view.js';
import type { DemoNodeView, DemoSummary } from './demo-view.js';
import { formatMs } from './output.js';
import type { CliIO } from './output.js';
import { onTermination } from './signals.js';
import type { TerminationSignal } from './signals.js';
import { openCliStore, storeTarget } from './store.js';
import { openDemoResource } from './demo-resource.js';
import type { DemoResource } from './demo-resource.js';
import { BROKER_PATHS, brokerUrl } from './demo-brokers.js';
import { DEMO_PATHS } from './demo-writer.js';
import type { DemoVia } from './demo-writer.js';

const GROUP = 'demo';
const STREAM = 'demo';
const DEFAULT_NODES = 3;
const DEFAULT_DURATION_MS = 15_000;
const DEFAULT_TTL_MS = 1000;
const TICK_MS = 100;
const POLL_MS = 20;

export const demoSpec: CommandSpec = {
  name: 'demo',
  usage: `demo [--nodes N] [--duration S] [--ttl D] [--via ${DEMO_PATHS.join('|')}] [--broker URL] [--json]`,
  summary: 'Watch election, takeover, a stale write refused and crash failover, live.',
  description: [
    'Starts N node processes on a fresh temporary SQLite store; the leader writes fenced entries.\n' +
      'The demo freezes the leader (SIGSTOP) past its TTL, shows the takeover with a higher term,\n' +
      'resumes the old leader and shows its stale write refused, then kills the new leader (kill -9)\n' +
      'and shows crash failover. It ends with a summary and checks: failover times, terms, refused\n' +
      'stale writes, entries and any safety violation. No process is left behind.',
    '--via picks the write path the story runs over: stream (tenure\'s fenced stream, the default);\n' +
      'sql (fencedUpdate of a row in SQLite: the check is in the UPDATE); http (fencedFetch to a\n' +
      'service process whose guard checks the token in its write\'s transaction, 409 when stale);\n' +
      'nats (JetStream), amqp (RabbitMQ), mqtt (MQTT v5): the token rides in the message metadata\n' +
      'and a fenced consumer, a process of its own, drops a lower term\'s message. The checks read\n' +
      'the resource\'s own record of the writes it applied (the stream, the row\'s history), never\n' +
      'the writers\' reports. The brokers default to this machine\'s (nats://127.0.0.1:4222,\n' +
      'amqp://guest:guest@127.0.0.1:5672, mqtt://127.0.0.1:1883); --broker URL or TENURE_DEMO_BROKER\n' +
      'points elsewhere. An unreachable broker is one line and exit code 1.',
    'On a terminal the view is live; otherwise it prints plain lines, or with --json one JSON summary\n' +
      '{ ok, failovers, terms, staleRejected, entries, violations, ... }. Exit code 0 when every step\n' +
      'happened and no violation was found, 1 otherwise, 130 when interrupted.',
  ],
  options: {
    nodes: { type: 'string', value: 'N', help: `number of node processes, 2 to 9 (default ${DEFAULT_NODES})` },
    duration: { type: 'string', value: 'S', help: 'how long to run, in seconds or as 20s, 1m (default 15; the steps take about 8 s)' },
    ttl: { type: 'string', value: 'D', help: 'lease time to live (default 1s)' },
    via: { type: 'string', value: 'PATH', help: `the write path: ${DEMO_PATHS.join(', ')} (default stream)` },
    broker: { type: 'string', value: 'URL', help: 'the broker for --via nats, amqp, mqtt (default: $TENURE_DEMO_BROKER, else the one on this machine)' },
    json: { type: 'boolean', help: 'print one JSON summary instead of the live view' },
  },
  examples: ['npx tenure demo', 'tenure demo --nodes 5 --duration 30 --json', 'tenure demo --via sql', 'tenure demo --via nats --broker nats://10.0.0.5:4222'],
};

class Interrupted extends Error {}

interface DemoNode extends DemoNodeView {
  proc: ChildProcess;
  /** Set before tenure stops or kills it, so its exit is not reported as a problem. */
  expectedExit: boolean;
  exited: Promise<void>;
  stderrTail: string[];
}

interface Failover {
  cause: 'pause' | 'crash';
  from: string;
  fromTerm: number;
  to: string;
  toTerm: number;
  ms: number;
}

export async function demoCommand(argv: readonly string[], io: CliIO): Promise<number> {
  const args = parseCommand(demoSpec, argv);
  if (args.help) {
    io.stdout.write(renderHelp(demoSpec));
    return 0;
  }
  const nodeCount = integerOption(args.values, 'nodes', DEFAULT_NODES, 2, 9);
  const durationMs = parseSeconds(stringOption(args.values, 'duration'));
  const ttlMs = durationOption(args.values, 'ttl', DEFAULT_TTL_MS, 100, 60_000);
  const json = flagOption(args.values, 'json');
  const via = parseVia(stringOption(args.values, 'via'));
  const brokerFlag = stringOption(args.values, 'broker');
  const brokerVia = BROKER_PATHS.find((p) => p === via);
  if (brokerFlag !== undefined && !brokerVia) throw new InvalidArgumentError('--broker', `is for --via ${BROKER_PATHS.join(', ')}, not --via ${via}`);
  const broker = brokerVia ? brokerUrl(brokerVia, brokerFlag, io.env) : undefined;
  const demo = new Demo(io, { nodeCount, durationMs, ttlMs, json, via, broker });
  return demo.run();
}

/** `--duration`: a bare number is seconds; otherwise a duration such as 20s or 1m. */
function parseSeconds(text: string | undefined): number {
  if (text === undefined) return DEFAULT_DURATION_MS;
  const ms = /^\s*\d+(\.\d+)?\s*$/.test(text) ? Math.round(Number(text) * 1000) : parseDuration('--duration', text);
  if (ms < 1000 || ms > 3_600_000) throw new InvalidArgumentError('--duration', `must be between 1 s and 1 h, got '${text}'`);
  return ms;
}

/** `--via`: one of the write paths, exactly. */
function parseVia(text: string | undefined): DemoVia {
  if (text === undefined) return 'stream';
  const via = DEMO_PATHS.find((p) => p === text);
  if (!via) throw new InvalidArgumentError('--via', `expected one of ${DEMO_PATHS.join(', ')}, got '${text}'`);
  return via;
}

interface DemoOptions {
  nodeCount: number;
  durationMs: number;
  ttlMs: number;
  json: boolean;
  via: DemoVia;
  /** The broker's URL, for the broker paths. */
  broker: string | undefined;
}

class Demo {
  private readonly nodes: DemoNode[] = [];
  private readonly failovers: Failover[] = [];
  private readonly violations: string[] = [];
  private readonly problems: string[] = [];
  private readonly pids: number[] = [];
  /** term -> owner, from the nodes' own `elected` reports. */
  private readonly electedBy = new Map<number, { owner: string; node: string }>();
  /** The checks on the resource's record of the writes it applied. */
  private readonly history = new WriteHistory(this.violations);
  private staleRejected = 0;
  private lease: Lease | null = null;
  private readonly startedAt = performance.now();
  private readonly interrupt = new AbortController();
  private received: TerminationSignal | null = null;
  private store: TenureStore | null = null;
  private resource: DemoResource | null = null;
  private dir = '';
  private storeUrl = '';
  private readonly view: DemoView;
  private readonly intervalMs: number;

  constructor(
    private readonly io: CliIO,
    private readonly options: DemoOptions,
  ) {
    const live = !options.json && (io.stdout as NodeJS.WriteStream).isTTY === true;
    this.view = new DemoView(io.stdout, live ? 'live' : options.json ? 'quiet' : 'plain', {
      nodes: options.nodeCount,
      ttlMs: options.ttlMs,
      durationMs: options.durationMs,
      group: GROUP,
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
      hurry: () => this.killAll('SIGKILL'),
    });
    let ticker: NodeJS.Timeout | null = null;
    try {
      this.dir = mkdtempSync(join(tmpdir(), 'tenure-demo-'));
      const target = storeTarget(`sqlite:${join(this.dir, 'tenure.db')}`, this.io.env);
      this.storeUrl = target.url;
      this.store = await openCliStore(target, 2000);
      this.resource = await openDemoResource({
        via: this.options.via,
        store: this.store,
        stream: STREAM,
        storeFile: join(this.dir, 'tenure.db'),
        dir: this.dir,
        group: GROUP,
        broker: this.options.broker,
        env: this.io.env,
        bin: binPath(),
        onSpawn: (pid) => this.addPid(pid),
        onRefused: (e) => this.refused(e.node, e.message, this.resource?.refusedWhere ?? ''),
        onNote: (text) => this.note(text),
      });
      this.view.start(target.display, this.resource.description);
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
      await this.resource?.close().catch(() => {});
      await this.store?.close();
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

  private async script(): Promise<void> {
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
  private async pauseStep(): Promise<void> {
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

  private spawnNode(name: string): void {
    const bin = binPath();
    const proc = spawn(
      process.execPath,
      [
        bin, 'demo-node', '--store', this.storeUrl, '--group', GROUP, '--stream', STREAM, '--id', name, '--ttl', String(this.options.ttlMs),
        '--interval', String(this.intervalMs), '--demo-dir', this.dir, ...(this.resource?.nodeArgs ?? []),
      ],
      { stdio: ['pipe', 'pipe', 'pipe'], env: { ...this.io.env, TENURE_STORE: this.storeUrl } },
    );
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

  private onNodeLine(node: DemoNode, proc: ChildProcess, line: string): void {
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

  private leader(): DemoNode | null {
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
      this.lease = await this.store.read(GROUP);
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

  private elapsed(): number {
    return performance.now() - this.startedAt;
  }

  private note(text: string): void {
    this.view.note(this.elapsed(), text);
  }

  /** Poll `check` until it returns something truthy; null after `timeoutMs`. Throws when interrupted. */
  private async waitFor<T>(check: () => T | null | false | undefined, timeoutMs: number): Promise<T | null> {
    const until = performance.now() + timeoutMs;
    for (;;) {
      if (this.interrupt.signal.aborted) throw new Interrupted();
      const value = check();
      if (value) return value;
      if (performance.now() >= until) return null;
      await delay(POLL_MS);
    }
  }

  private async sleep(ms: number): Promise<void> {
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
    };
  }

  private summary(): DemoSummary {
    const { termWriters } = this.history;
    const terms = [...new Set([...this.electedBy.keys(), ...termWriters.keys()])]
      .sort((a, b) => a - b)
      .map((term) => ({
        term,
        node: termWriters.get(term)?.node ?? this.electedBy.get(term)?.node ?? '?',
        entries: termWriters.get(term)?.entries ?? 0,
      }));
    const steps = this.failovers.length === 2 && this.staleRejected > 0;
    return {
      ok: this.violations.length === 0 && this.problems.length === 0 && steps && !this.received,
      via: this.options.via,
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

function signal(node: DemoNode, sig: NodeJS.Signals): void {
  if (node.proc.exitCode !== null || node.proc.signalCode !== null) return;
  try {
    node.proc.kill(sig);
  } catch {
    // already gone
  }
}

function delay(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, Math.max(0, ms)));
}

/** The tenure entry script, to start the nodes with. */
function binPath(): string {
  const bin = fileURLToPath(new URL('../../../bin/tenure.js', import.meta.url));
  if (existsSync(bin)) return bin;
  return process.argv[1] ?? bin;
}
