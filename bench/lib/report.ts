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

const f = (x: number): string => (Number.isFinite(x) ? x.toFixed(1) : '-');

function goalText(m: Metric): string {
  return m.goal ? `${m.goal.stat} <= ${m.goal.maxMs} (${m.goal.label})` : '';
}

function verdict(m: Metric): string {
  if (m.pass === undefined) return '';
  return m.pass ? 'PASS' : 'MISS';
}

const HEADER = ['metric', 'n', 'min', 'p50', 'mean', 'p99', 'max', 'goal (ms)', 'result'];

function rows(result: BenchResult): string[][] {
  return result.metrics.map((m) => [m.id, String(m.stats.n), f(m.stats.min), f(m.stats.p50), f(m.stats.mean), f(m.stats.p99), f(m.stats.max), goalText(m), verdict(m)]);
}

/** A plain-text table for the terminal. */
export function textTable(result: BenchResult): string {
  const all = [HEADER, ...rows(result)];
  const widths = HEADER.map((_, i) => Math.max(...all.map((r) => r[i]!.length)));
  const line = (r: string[]): string => r.map((c, i) => (i === 0 || i >= 7 ? c.padEnd(widths[i]!) : c.padStart(widths[i]!))).join('  ');
  const params = Object.entries(result.params)
    .map(([k, v]) => `${k}=${String(v)}`)
    .join(' ');
  const out = [`${result.name} (${result.target}; ${params}; all times in ms; ${(result.durationMs / 1000).toFixed(1)} s)`, line(HEADER), line(widths.map((w) => '-'.repeat(w)))];
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
    '',
  ];
  for (const r of results) {
    const params = Object.entries(r.params)
      .map(([k, v]) => `${k}=${String(v)}`)
      .join(', ');
    out.push(`## ${r.name}`, '', r.description, '', `Target: ${r.target}; ${params}; took ${(r.durationMs / 1000).toFixed(1)} s.`, '');
    out.push(`| ${HEADER.join(' | ')} |`, `| ${HEADER.map((_, i) => (i === 0 || i >= 7 ? '---' : '---:')).join(' | ')} |`);
    for (const row of rows(r)) out.push(`| ${row.join(' | ')} |`);
    out.push('');
    for (const m of r.metrics) out.push(`- **${m.id}**: ${m.description}`);
    for (const n of r.notes) out.push(`- note: ${n}`);
    out.push('');
  }
  return out.join('\n');
}
