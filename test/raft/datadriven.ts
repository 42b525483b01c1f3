/**
 * A runner for scenario files in the datadriven style of etcd-io/raft:
 *
 *     # comment lines and blank lines between cases are kept
 *     command arg key=value
 *     ----
 *     expected output (no blank lines; ends at a blank line)
 *
 * With RAFT_REWRITE=1 (or DATADRIVEN_REWRITE=1) the expected output is replaced by what the code printed.
 */
import { readFileSync, writeFileSync } from 'node:fs';

export interface Case {
  /** Comment and blank lines before the command, kept on rewrite. */
  prefix: string[];
  command: string;
  /** 1-based line of the command, for failure messages. */
  line: number;
  expected: string;
}

export function parseCases(text: string): Case[] {
  const lines = text.split('\n');
  const cases: Case[] = [];
  let prefix: string[] = [];
  let i = 0;
  while (i < lines.length) {
    const l = lines[i]!;
    if (l.trim() === '' || l.startsWith('#')) {
      prefix.push(l);
      i++;
      continue;
    }
    const command = l;
    const line = i + 1;
    i++;
    if (lines[i] !== '----') throw new Error(`line ${line}: expected ---- after the command`);
    i++;
    const out: string[] = [];
    while (i < lines.length && lines[i]!.trim() !== '') out.push(lines[i++]!);
    cases.push({ prefix, command, line, expected: out.join('\n') });
    prefix = [];
  }
  return cases;
}

export function formatCases(cases: readonly Case[], actual: readonly string[]): string {
  const parts: string[] = [];
  cases.forEach((c, k) => {
    // Normalize the blank line that separates cases: exactly one, written after each output.
    const prefix = k === 0 ? c.prefix : c.prefix.slice(1);
    for (const p of prefix) parts.push(p);
    parts.push(c.command, '----', actual[k] ?? c.expected, '');
  });
  return parts.join('\n');
}

export const rewrite = process.env.RAFT_REWRITE === '1' || process.env.DATADRIVEN_REWRITE === '1';

/** Runs every case of `file` through `run`; returns the mismatches (and rewrites the file if asked). */
export function runFile(file: string, run: (command: string) => string): { mismatches: { case: Case; actual: string }[]; panics: string[] } {
  const cases = parseCases(readFileSync(file, 'utf8'));
  const actual: string[] = [];
  const mismatches: { case: Case; actual: string }[] = [];
  const panics: string[] = [];
  for (const c of cases) {
    let out: string;
    try {
      out = run(c.command);
    } catch (err) {
      out = `panic: ${err instanceof Error ? err.message : String(err)}`;
      panics.push(`line ${c.line}: ${c.command}: ${out}`);
    }
    actual.push(out);
    if (out !== c.expected) mismatches.push({ case: c, actual: out });
  }
  if (rewrite) writeFileSync(file, formatCases(cases, actual));
  return { mismatches, panics };
}
