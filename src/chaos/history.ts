/**
 * The chaos suite's history: what each node process did, one JSON object per line, one file per
 * process incarnation. Written by src/chaos/node.ts, read by src/chaos/checker.ts.
 *
 * Times (`at`, `sentAt`) are Date.now() of the one host the run is on: they order events for the
 * report and the liveness check only; no safety decision depends on them.
 */
import { closeSync, openSync, writeSync } from 'node:fs';

export type Outcome = 'ok' | 'rejected' | 'ambiguous';

/** What a chaos node writes into its group's stream (as JSON): who, under which term, which attempt. */
export interface ChaosPayload {
  /** Node id (stable across restarts), e.g. `n3`. */
  readonly n: string;
  /** The lease owner (the elector's incarnation id). */
  readonly o: string;
  /** The term of the token the write was sent with. */
  readonly t: number;
  /** Attempt counter, per process incarnation and group, strictly increasing. */
  readonly c: number;
  /** 1 on a late write (sent with the old token after leadership ended, concurrently with newer work). */
  readonly l?: 1;
}

interface Base {
  /** Node id. */
  readonly node: string;
  /** Process incarnation: `n3.2` is node n3's third process (0-based restarts). */
  readonly proc: string;
  readonly at: number;
}

export type HistoryRecord =
  | (Base & {
      readonly k: 'start';
      readonly pid: number;
      /** Failed attempts to open the store before this start (the store refused or was busy). */
      readonly openRetries?: number;
      readonly openError?: string;
    })
  | (Base & { readonly k: 'elected'; readonly group: string; readonly owner: string; readonly term: number })
  | (Base & { readonly k: 'deposed'; readonly group: string; readonly owner: string; readonly term: number; readonly reason: string })
  | (Base & {
      readonly k: 'append';
      readonly group: string;
      readonly owner: string;
      readonly term: number;
      readonly counter: number;
      readonly payload: string;
      readonly sentAt: number;
      readonly outcome: Outcome;
      /** The sequence number the store acknowledged ('ok' only). */
      readonly seq?: number;
      /** The error's name and message ('rejected' and 'ambiguous'). */
      readonly error?: string;
      /** Sent after leadership had ended: the write that was already on its way (must be fenced). */
      readonly late?: boolean;
    })
  | (Base & { readonly k: 'stop' });

export type AppendRecord = Extract<HistoryRecord, { k: 'append' }>;

/** The stream a group's leader writes. */
export function streamOf(group: string): string {
  return `${group}.log`;
}

/**
 * Appends records to a history file. Records are buffered and written (no fsync) every
 * `flushMs` and at close: a kill -9 may lose the unwritten tail, which the checker tolerates.
 */
export class HistoryWriter {
  private readonly fd: number;
  private buffer: string[] = [];
  private readonly timer: NodeJS.Timeout;
  private closed = false;

  constructor(path: string, flushMs = 25) {
    this.fd = openSync(path, 'a');
    this.timer = setInterval(() => this.flush(), flushMs);
    this.timer.unref();
  }

  write(record: HistoryRecord): void {
    if (this.closed) return;
    this.buffer.push(JSON.stringify(record));
    if (this.buffer.length >= 512) this.flush();
  }

  flush(): void {
    if (this.buffer.length === 0 || this.closed) return;
    const text = `${this.buffer.join('\n')}\n`;
    this.buffer = [];
    writeSync(this.fd, text);
  }

  close(): void {
    if (this.closed) return;
    this.flush();
    this.closed = true;
    clearInterval(this.timer);
    closeSync(this.fd);
  }
}

/**
 * Parse one history file's text. A line cut short by kill -9 (only ever the last one) is
 * skipped; a bad line anywhere else is an error.
 */
export function parseHistory(text: string, file = 'history'): HistoryRecord[] {
  const lines = text.split('\n');
  const out: HistoryRecord[] = [];
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i]!;
    if (line.trim() === '') continue;
    try {
      out.push(JSON.parse(line) as HistoryRecord);
    } catch (err) {
      const last = lines.slice(i + 1).every((l) => l.trim() === '');
      if (last) break;
      throw new Error(`${file}:${i + 1}: not JSON: ${(err as Error).message}`);
    }
  }
  return out;
}
