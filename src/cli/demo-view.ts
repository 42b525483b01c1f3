/**
 * What `tenure demo` shows: a live view redrawn in place on a terminal, plain timestamped lines
 * otherwise, nothing in JSON mode; and the summary at the end.
 */
import type { Writable } from 'node:stream';
import type { Lease } from '../core/index.js';
import { formatMs } from './output.js';

export type DemoNodeState = 'starting' | 'follower' | 'leader' | 'frozen' | 'resumed' | 'killed' | 'stopped';

export interface DemoNodeView {
  readonly name: string;
  pid: number;
  owner: string | null;
  state: DemoNodeState;
  /** The term this node leads (or believes it leads), else null. */
  term: number | null;
  /** Entries in the stream written by this node (all its incarnations). */
  wrote: number;
  staleRefused: number;
  /** Local monotonic instant of its last election. */
  electedAt: number | null;
  freezeAsked: boolean;
  /** What the view shows for it instead of `wrote N` (a follower's applied entry and lag). */
  detail?: string;
  /** What the view calls it while it does not lead, instead of `follower` (`standby`, when followers of the log run beside it). */
  idleLabel?: string;
}

/** min, median and max of a series of samples. */
export interface SampleStats {
  min: number;
  p50: number;
  max: number;
}

/** One follower of `tenure demo --scenario followers`, at the end of the run. */
export interface FollowerReport {
  name: string;
  /** Rows in its projection at the end. */
  entries: number;
  /** The last seq in its projection (0 when empty). */
  lastSeq: number;
  /** The projection holds exactly the log: the same seqs, terms and payloads, no duplicate, no gap. */
  equal: boolean;
  /** Times it was killed and started again. */
  restarts: number;
  /** For each restart, the last entry its projection had committed: where it went on from. */
  resumedAfter: number[];
  /** Its advertised lag over the run: entries and ms, and the ms as a sparkline (one character a time slice). */
  lag: { samples: number; entries: SampleStats; ms: SampleStats; spark: string };
}

/** The reads the demo's ReadRouter routed. */
export interface ReadsReport {
  count: number;
  /** The router's threshold: a follower serves only when its staleness bound is at most this, ms. */
  thresholdMs: number;
  /** Reads served per node (`leader` for the leader). */
  byTarget: Record<string, number>;
  /** The largest staleness bound a follower served under, ms. */
  maxLagServedMs: number;
  /** Reads with nowhere to go (no follower within the threshold and no leader). */
  unserved: number;
}

export interface DemoSummary {
  ok: boolean;
  /** The story (`tenure demo --scenario`): failover, or followers. */
  scenario: string;
  /** The write path the story ran over (`tenure demo --via`). */
  via: string;
  /** The store the nodes shared, credentials hidden (`tenure demo --store`). */
  store: string;
  /** The group and stream the run used (`demo`, or `demo-<random>` on a user's store). */
  group: string;
  nodes: number;
  ttlMs: number;
  durationMs: number;
  failovers: Array<{ cause: 'pause' | 'crash'; from: string; fromTerm: number; to: string; toTerm: number; ms: number }>;
  terms: Array<{ term: number; node: string; entries: number }>;
  staleRejected: number;
  entries: number;
  violations: string[];
  problems: string[];
  pids: number[];
  interrupted: boolean;
  /** `--scenario followers`: each follower's projection against the log, and its lag. */
  followers?: FollowerReport[];
  /** `--scenario followers`: the reads routed by lag. */
  reads?: ReadsReport;
}

export interface DemoViewState {
  elapsedMs: number;
  nodes: readonly DemoNodeView[];
  lease: Lease | null;
  entries: number;
  lastSeq: number;
  lastTerm: number;
  staleRejected: number;
  violations: number;
  /** What the record of applied writes is called: `stream`, `row history`, … */
  label: string;
  /** One more status line under the record's (the followers scenario: the reads routed). */
  status?: string;
}

interface Header {
  nodes: number;
  ttlMs: number;
  durationMs: number;
  group: string;
  color: boolean;
}

const EVENTS_SHOWN = 9;
const BAR_WIDTH = 16;

export class DemoView {
  private readonly notes: string[] = [];
  private drawnLines = 0;
  private storeUrl = '';
  private description = '';
  private last: DemoViewState | null = null;

  constructor(
    private readonly out: Writable,
    private readonly mode: 'live' | 'plain' | 'quiet',
    private readonly header: Header,
  ) {}

  /** `description`: what the nodes write to, when not the store's stream ('' for the stream). */
  start(storeUrl: string, description = ''): void {
    this.storeUrl = storeUrl;
    this.description = description;
    if (this.mode === 'plain') {
      const h = this.header;
      this.out.write(`tenure demo: ${h.nodes} nodes, group ${h.group}, ttl ${formatMs(h.ttlMs)}, about ${formatMs(h.durationMs)}, store ${storeUrl}\n`);
      if (description) this.out.write(`${description}\n`);
    }
    if (this.mode === 'live') this.out.write('\x1b[?25l');
  }

  note(elapsedMs: number, text: string): void {
    const line = `${formatSeconds(elapsedMs).padStart(6)}  ${text}`;
    if (this.mode === 'plain') this.out.write(`${line}\n`);
    this.notes.push(line);
    if (this.notes.length > 200) this.notes.shift();
  }

  render(state: DemoViewState): void {
    this.last = state;
    if (this.mode !== 'live') return;
    this.draw(this.frame(state, true));
  }

  finish(summary: DemoSummary): void {
    if (this.mode === 'live') {
      if (this.last) this.draw(this.frame(this.last, false));
      this.out.write('\x1b[?25h');
    }
    if (this.mode !== 'quiet') this.out.write(summaryText(summary, this.header.color));
  }

  private draw(lines: string[]): void {
    const columns = (this.out as NodeJS.WriteStream).columns ?? 100;
    const fitted = lines.map((l) => fit(l, columns - 1));
    const up = this.drawnLines > 0 ? `\x1b[${this.drawnLines}A` : '';
    this.out.write(`${up}\r\x1b[0J${fitted.join('\n')}\n`);
    this.drawnLines = fitted.length;
  }

  private frame(s: DemoViewState, running: boolean): string[] {
    const c = colors(this.header.color);
    const h = this.header;
    const lines = [
      `${c.bold('tenure demo')}  ${h.nodes} nodes · group ${h.group} · ttl ${formatMs(h.ttlMs)} · ${formatSeconds(s.elapsedMs)} of ~${formatSeconds(h.durationMs)}`,
      c.dim(`store ${this.storeUrl}`),
      ...(this.description ? [c.dim(this.description)] : []),
      '',
    ];
    const nameWidth = Math.max(0, ...s.nodes.map((n) => n.name.length));
    for (const n of s.nodes) {
      const state = stateLabel(n, c);
      const term = n.term !== null ? `term ${n.term}`.padEnd(8) : ''.padEnd(8);
      let lease = ''.padEnd(BAR_WIDTH + 9);
      if (s.lease && n.owner !== null && s.lease.owner === n.owner) {
        const left = Math.max(0, Math.min(1, s.lease.remainingMs / s.lease.ttlMs));
        const full = Math.round(left * BAR_WIDTH);
        lease = `${'█'.repeat(full)}${'░'.repeat(BAR_WIDTH - full)} ${(s.lease.remainingMs / 1000).toFixed(2)}s`.padEnd(BAR_WIDTH + 9);
      } else if (n.term !== null && (n.state === 'frozen' || n.state === 'resumed')) {
        lease = c.red('lease expired'.padEnd(BAR_WIDTH + 9));
      }
      const extra = n.staleRefused > 0 ? c.yellow(`  ${n.staleRefused} stale write${n.staleRefused > 1 ? 's' : ''} refused`) : '';
      const detail = n.detail ?? `wrote ${String(n.wrote).padStart(4)}`;
      lines.push(`  ${n.name.padEnd(nameWidth)}  ${`pid ${n.pid}`.padEnd(10)} ${state} ${term} ${lease}  ${detail}${extra}`);
    }
    const v = s.violations === 0 ? c.green('violations 0') : c.red(`violations ${s.violations}`);
    lines.push('', `  ${s.label}: ${s.entries} entries · last #${s.lastSeq} term ${s.lastTerm} · stale writes refused ${s.staleRejected} · ${v}`);
    if (s.status) lines.push(`  ${s.status}`);
    lines.push('');
    lines.push(...this.notes.slice(-EVENTS_SHOWN));
    if (running) lines.push('', c.dim('  Ctrl-C stops the demo and every node.'));
    return lines;
  }
}

function stateLabel(n: DemoNodeView, c: Colors): string {
  const width = 9;
  switch (n.state) {
    case 'leader':
      return c.green(c.bold('LEADER'.padEnd(width)));
    case 'frozen':
      return c.yellow('FROZEN'.padEnd(width));
    case 'resumed':
      return c.yellow('RESUMED'.padEnd(width));
    case 'killed':
      return c.red('KILLED'.padEnd(width));
    case 'stopped':
      return c.dim('stopped'.padEnd(width));
    case 'starting':
      return c.dim('starting'.padEnd(width));
    case 'follower':
      return (n.idleLabel ?? 'follower').padEnd(width);
  }
}

function summaryText(s: DemoSummary, color: boolean): string {
  const c = colors(color);
  const lines = ['', c.bold(s.interrupted ? 'Summary (interrupted)' : 'Summary')];
  if (s.failovers.length === 0) lines.push('  failovers    none');
  s.failovers.forEach((f, i) => {
    const what = f.cause === 'pause' ? 'leader frozen' : 'leader killed';
    lines.push(`  ${i === 0 ? 'failovers' : ''.padEnd(9)}    ${what}: ${f.from} (term ${f.fromTerm}) -> ${f.to} (term ${f.toTerm}) in ${formatMs(f.ms)}`);
  });
  if (s.via !== 'stream') lines.push(`  written via  ${s.via}`);
  if (s.followers) lines.push(...followerLines(s.followers, c));
  if (s.reads) lines.push(`  reads        ${routedReads(s.reads)}`);
  lines.push(`  terms        ${s.terms.map((t) => `${t.term} ${t.node} (${t.entries})`).join(' · ') || 'none'}`);
  lines.push(`  stale writes refused  ${s.staleRejected}`);
  lines.push(`  entries      ${s.entries}`);
  const held = `none: gap-free, terms never went back, one writer per term${s.followers ? ', projections equal the log' : ''}`;
  lines.push(`  violations   ${s.violations.length === 0 ? c.green(held) : c.red(String(s.violations.length))}`);
  for (const v of s.violations) lines.push(`    ${c.red(v)}`);
  for (const p of s.problems) lines.push(`  ${c.yellow(`note: ${p}`)}`);
  lines.push(s.ok ? c.green('  ok') : c.red(s.interrupted ? '  stopped early' : '  not ok'), '');
  return lines.join('\n');
}

function followerLines(followers: readonly FollowerReport[], c: Colors): string[] {
  return followers.map((f, i) => {
    const range = f.entries > 0 ? `#1..#${f.lastSeq}` : 'empty';
    const proj = f.equal ? c.green(`projection = log (${f.entries} entries, ${range})`) : c.red(`projection != log (${f.entries} entries, ${range})`);
    const lag = `lag min/p50/max ${stats(f.lag.entries)} entries, ${stats(f.lag.ms)} ms ${f.lag.spark}`;
    const restarts = f.restarts > 0 ? ` · restarted ${f.restarts}x (went on after #${f.resumedAfter.join(', #')})` : '';
    return `  ${i === 0 ? 'followers' : ''.padEnd(9)}    ${f.name}: ${proj} · ${lag}${restarts}`;
  });
}

function stats(s: SampleStats): string {
  return `${s.min}/${s.p50}/${s.max}`;
}

/** The reads routed, in one line: how many, to whom, the largest staleness served and the threshold. */
export function routedReads(r: ReadsReport): string {
  const targets = Object.entries(r.byTarget)
    .sort(([a], [b]) => a.localeCompare(b))
    .map(([name, n]) => `${name} ${n}`)
    .join(' · ');
  const unserved = r.unserved > 0 ? ` · ${r.unserved} with no target` : '';
  return `${r.count} routed (${targets || 'none served'}) · max lag served ${formatMs(r.maxLagServedMs)}, threshold ${formatMs(r.thresholdMs)}${unserved}`;
}

interface Colors {
  bold(t: string): string;
  dim(t: string): string;
  green(t: string): string;
  yellow(t: string): string;
  red(t: string): string;
}

function colors(on: boolean): Colors {
  const wrap = (code: number, reset: number) => (t: string) => (on ? `\x1b[${code}m${t}\x1b[${reset}m` : t);
  return { bold: wrap(1, 22), dim: wrap(2, 22), green: wrap(32, 39), yellow: wrap(33, 39), red: wrap(31, 39) };
}

function formatSeconds(ms: number): string {
  return `${(ms / 1000).toFixed(1)}s`;
}

// eslint-disable-next-line no-control-regex
const ANSI = /\x1b\[[0-9;?]*[A-Za-z]/g;

/** Cut a line to `width` visible characters (dropping its colors when it must be cut). */
function fit(line: string, width: number): string {
  const plain = line.replace(ANSI, '');
  if (plain.length <= width) return line;
  return plain.slice(0, Math.max(0, width - 1)) + '…';
}
