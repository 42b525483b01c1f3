/**
 * Transition lines on stderr for the long-running commands (`run`, `lock`): one readable line
 * per event, or one JSON object per line with `--json`.
 */
import type { Writable } from 'node:stream';
import { redactSecrets } from '../core/index.js';
import type { StopReport } from './child.js';

export type EventFields = Record<string, string | number | boolean | null | undefined>;

/** How often the same store error is repeated while it persists, ms. */
const REPEAT_ERROR_MS = 10_000;

export class TransitionLog {
  private lastError: { text: string; at: number } | null = null;

  constructor(
    private readonly out: Writable,
    private readonly json: boolean,
    private readonly base: EventFields,
    private readonly prefix = 'tenure',
  ) {}

  /**
   * Report `event`; `text` is the human line, `fields` the JSON payload. Credentials of any URL in
   * either (a driver's error may quote one) are replaced by `***`.
   */
  event(event: string, text: string, fields: EventFields = {}): void {
    if (this.json) {
      const record: Record<string, unknown> = { time: new Date().toISOString(), event, ...this.base };
      for (const [k, v] of Object.entries(fields)) if (v !== undefined) record[k] = typeof v === 'string' ? redactSecrets(v) : v;
      this.out.write(`${JSON.stringify(record)}\n`);
    } else {
      this.out.write(`${this.prefix}: ${printable(redactSecrets(text))}\n`);
    }
  }

  /** Report an error that may repeat every retry: the same text at most once per 10 s. */
  error(event: string, text: string, fields: EventFields = {}): void {
    const now = performance.now();
    if (this.lastError && this.lastError.text === text && now - this.lastError.at < REPEAT_ERROR_MS) return;
    this.lastError = { text, at: now };
    this.event(event, text, fields);
  }
}

/**
 * Text for a terminal: control characters (C0, DEL, C1) as JSON escapes (`\n`, `\t`, `\u001b`;
 * C1, which JSON leaves as it is, as `\u009b`), so a name, owner, payload or message that came
 * from a store row, which another program may have written, cannot move the cursor, retitle the
 * window or clear the screen. Tabs included: a cell stays one cell.
 */
export function printable(text: string): string {
  // eslint-disable-next-line no-control-regex
  return text.replace(/[\u0000-\u001f\u007f-\u009f]/g, (c) => {
    const json = JSON.stringify(c).slice(1, -1);
    return json.length > 1 ? json : `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`;
  });
}

/** Rows as aligned columns (two spaces apart, the last one ragged), every cell made printable. */
export function printTable(out: Writable, rows: readonly (readonly string[])[]): void {
  const cells = rows.map((r) => r.map(printable));
  const widths = (cells[0] ?? []).map((_, i) => Math.max(...cells.map((r) => r[i]!.length)));
  for (const r of cells) out.write(`${r.map((cell, i) => (i === r.length - 1 ? cell : cell.padEnd(widths[i]!))).join('  ').trimEnd()}\n`);
}

/** `1234` -> `1.2s`, `950` -> `950ms`. */
export function formatMs(ms: number): string {
  if (ms < 1000) return `${Math.round(ms)}ms`;
  if (ms < 60_000) return `${(ms / 1000).toFixed(1)}s`;
  const m = Math.floor(ms / 60_000);
  const s = Math.round((ms % 60_000) / 1000);
  return `${m}m${String(s).padStart(2, '0')}s`;
}

/** A child's exit as words: `code 0`, `signal SIGTERM (143)`. */
export function describeExit(exit: { code: number; signal: NodeJS.Signals | null; error?: string }): string {
  if (exit.error) return `${exit.error} (${exit.code})`;
  return exit.signal ? `signal ${exit.signal} (${exit.code})` : `code ${exit.code}`;
}

/** Where a command writes and what environment it sees. */
export interface CliIO {
  readonly stdout: Writable;
  readonly stderr: Writable;
  readonly env: NodeJS.ProcessEnv;
}

/** How a supervising command reports stopping its child: SIGTERM to the group, SIGKILL after the grace. */
export function childStopReport(log: TransitionLog, graceMs: number): StopReport {
  return {
    onTerm: (pid) =>
      log.event('child-stopping', `stopping child ${pid}: SIGTERM to its process group, SIGKILL after ${formatMs(graceMs)}`, { pid, signal: 'SIGTERM', graceMs }),
    onKill: (pid) => log.event('child-killed', `child ${pid} still running after ${formatMs(graceMs)}: SIGKILL to its process group`, { pid, signal: 'SIGKILL' }),
  };
}
