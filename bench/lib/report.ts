/**
 * Results: one JSON file per benchmark run (bench/results/<name>-<timestamp>.json), a readable
 * table on stdout, and bench/results/latest.md covering the whole invocation.
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { cpus, loadavg, platform, release } from 'node:os';
import { join } from 'node:path';
import type { BenchResult, Metric } from './types.js';

export interface Environment {
  readonly node: string;
  readonly platform: string;
  readonly cpus: number;
  readonly cpuModel: string;
  /** 1-minute load average when the run started and ended: other work on the machine skews timings. */
  readonly loadAvg: { start: number; end: number };
}

export function environment(): Environment {
  const list = cpus();
  const load = Math.round(loadavg()[0]! * 100) / 100;
  return { node: process.version, platform: `${platform()} ${release()}`, cpus: list.length, cpuModel: list[0]?.model ?? 'unknown', loadAvg: { start: load, end: load } };
}

/** The environment with the end-of-run load average filled in. */
export function finish(env: Environment): Environment {
  return { ...env, loadAvg: { start: env.loadAvg.start, end: Math.round(loadavg()[0]! * 100) / 100 } };
}

/** A file-name-safe UTC timestamp, e.g. 20260123T081502Z. */
export function timestamp(date = new Date()): string {
  return date.toISOString().replace(/[-:]/g, '').replace(/\.\d+Z$/, 'Z');
}

export function writeJson(dir: string, result: BenchResult, env: Environment, stamp: string): string {
  mkdirSync(dir, { recursive: true });
  const file = join(dir, `${result.name}-${stamp}.json`);
  writeFileSync(file, `${JSON.stringify({ ...result, environment: env, timestamp: stamp }, null, 2)}\n`);
  return file;
}

/** A number in a metric's unit: ms and ratios with decimals, rates as whole numbers. */
function fmt(x: number, unit: Metric['unit']): string {
  if (!Number.isFinite(x)) return '-';
  if (unit === 'ops/s' || unit === 'count') return x.toFixed(0);
  if (unit === 'x') return x.toFixed(3);
  if (Math.abs(x) < 1) return x.toFixed(3);
  return Math.abs(x) < 10 ? x.toFixed(2) : x.toFixed(1);
}

function goalText(m: Metric): string {
  if (!m.goal) return '';
  const limit = m.goal.max !== undefined ? `<= ${fmt(m.goal.max, m.unit)}` : `>= ${fmt(m.goal.min ?? Number.NaN, m.unit)}`;
  return `${m.goal.stat} ${limit} (${m.goal.label})`;
}

function verdict(m: Metric): string {
  if (m.pass === undefined) return '';
  return m.pass ? 'PASS' : 'FAIL';
}

const HEADER = ['metric', 'unit', 'n', 'min', 'p50', 'mean', 'p99', 'max', 'goal', 'result'];
/** Columns from here on are left-aligned text (goal, result). */
const TEXT_FROM = 8;

function rows(result: BenchResult): string[][] {
  return result.metrics.map((m) => {
    const f = (x: number): string => fmt(x, m.unit);
    return [m.id, m.unit, String(m.stats.n), f(m.stats.min), f(m.stats.p50), f(m.stats.mean), f(m.stats.p99), f(m.stats.max), goalText(m), verdict(m)];
  });
}

/** A plain-text table for the terminal. */
export function textTable(result: BenchResult): string {
  const all = [HEADER, ...rows(result)];
  const widths = HEADER.map((_, i) => Math.max(...all.map((r) => r[i]!.length)));
  const line = (r: string[]): string => r.map((c, i) => (i <= 1 || i >= TEXT_FROM ? c.padEnd(widths[i]!) : c.padStart(widths[i]!))).join('  ');
  const params = Object.entries(result.params)
    .map(([k, v]) => `${k}=${String(v)}`)
    .join(' ');
  const out = [`${result.name} (${result.target}; ${params}; ${(result.durationMs / 1000).toFixed(1)} s)`, line(HEADER), line(widths.map((w) => '-'.repeat(w)))];
  for (const r of rows(result)) out.push(line(r));
  for (const m of result.metrics) out.push(`  ${m.id}: ${m.description}`);
  for (const n of result.notes) out.push(`  note: ${n}`);
  return out.join('\n');
}

/** The Markdown report of one invocation. */
export function markdown(results: readonly BenchResult[], env: Environment, stamp: string, command: string, files: readonly string[]): string {
  const out = [
    '# tenure benchmarks: latest run',
    '',
    `- when: ${stamp} (UTC)`,
    `- command: \`${command}\``,
    `- machine: ${env.cpus} × ${env.cpuModel}, ${env.platform}, Node ${env.node}`,
    `- 1-minute load average: ${env.loadAvg.start} at start, ${env.loadAvg.end} at end (on ${env.cpus} CPUs; other work on the machine skews the timings)`,
    `- raw results: ${files.map((p) => `\`${p}\``).join(', ')}`,
    '',
    'Percentiles are nearest-rank: with 20 samples p50 is the 10th smallest and p99 is the largest.',
    'Units: `ms` latencies; `ops/s` rates (each sample is one round of operations); `x` ratios (one per round); `count` counts.',
    '',
  ];
  const judged = results.flatMap((r) => r.metrics.filter((m) => m.pass !== undefined).map((m) => ({ r, m })));
  if (judged.length > 0) {
    out.push('## Goals', '', '| benchmark | metric | goal | measured | result |', '| --- | --- | --- | ---: | --- |');
    for (const { r, m } of judged) out.push(`| ${r.name} | ${m.id} | ${goalText(m)} | ${fmt(m.stats[m.goal!.stat], m.unit)} ${m.unit} | ${verdict(m)} |`);
    out.push('');
  }
  for (const r of results) {
    const params = Object.entries(r.params)
      .map(([k, v]) => `${k}=${String(v)}`)
      .join(', ');
    out.push(`## ${r.name}`, '', r.description, '', `Target: ${r.target}; ${params}; took ${(r.durationMs / 1000).toFixed(1)} s.`, '');
    out.push(`| ${HEADER.join(' | ')} |`, `| ${HEADER.map((_, i) => (i <= 1 || i >= TEXT_FROM ? '---' : '---:')).join(' | ')} |`);
    for (const row of rows(r)) out.push(`| ${row.join(' | ')} |`);
    out.push('');
    for (const m of r.metrics) out.push(`- **${m.id}**: ${m.description}`);
    for (const n of r.notes) out.push(`- note: ${n}`);
    out.push('');
  }
  return out.join('\n');
}
