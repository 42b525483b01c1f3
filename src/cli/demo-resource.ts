/**
 * The resource `tenure demo` writes to, as the demo sees it: what the nodes are told to write to,
 * and the resource's own record of the writes it applied, in its order. The demo's safety checks
 * read that record, never the writers' reports.
 */
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { limits, redactUrl } from '../core/index.js';
import type { TenureStore } from '../open.js';
import { LEDGER_ROW, LEDGER_TABLE, openLedger, readLedger } from './demo-ledger.js';
import type { AppliedWrite } from './demo-ledger.js';
import type { DemoResourceEvent } from './demo-resource-process.js';
import type { DemoVia, ResourceVia } from './demo-writer.js';

export interface DemoResource {
  readonly via: DemoVia;
  /** What the view calls the record of applied writes (`stream`, `row history`, …). */
  readonly label: string;
  /** One line for the header: what the nodes write to and where the check happens. */
  readonly description: string;
  /** The arguments that tell a node where to write (`--via` and `--target`). */
  readonly nodeArgs: readonly string[];
  /**
   * Who reports a refused write: the writer (the store or the SQL statement refuses it, and only
   * the writer hears of it) or the resource process (the HTTP guard, the consumer).
   */
  readonly refusalsFrom: 'writer' | 'resource';
  /** Where a refusal the resource process reports happened, for the log (`at the consumer: dropped, never applied`). */
  readonly refusedWhere: string;
  /** The resource's own process, when it has one: what it is (`service`, `consumer`) and its pid. */
  readonly process?: { readonly name: string; readonly pid: number };
  /** Applied writes after `after`, in the order the resource applied them (at most `limit`). */
  read(after: number, limit: number): Promise<AppliedWrite[]>;
  close(): Promise<void>;
}

export interface DemoResourceSetup {
  readonly via: DemoVia;
  readonly store: TenureStore;
  readonly stream: string;
  /** The store's SQLite file: the `sql` path's row lives next to tenure_leases, so its term check can read them. */
  readonly storeFile: string;
  /** The demo's temporary directory: the service's own database goes there. */
  readonly dir: string;
  readonly group: string;
  /** The broker's URL (nats, amqp, mqtt). */
  readonly broker: string | undefined;
  readonly env: NodeJS.ProcessEnv;
  /** The tenure entry script, to start the resource process with. */
  readonly bin: string;
  /** A process was started (its pid, to stop it and to check it is gone). */
  onSpawn(pid: number): void;
  /** A write refused where it landed, as the resource process reports it. */
  onRefused(e: Extract<DemoResourceEvent, { event: 'refused' }>): void;
  /** Something for the view's log. */
  onNote(text: string): void;
}

/** Readers wait no longer than this for a node's transaction, ms (a busy read is retried next tick). */
const READ_BUSY_MS = 50;

export async function openDemoResource(s: DemoResourceSetup): Promise<DemoResource> {
  switch (s.via) {
    case 'stream':
      return {
        via: 'stream',
        label: 'stream',
        description: '',
        nodeArgs: [],
        refusalsFrom: 'writer',
        refusedWhere: '', // the stream's wording predates --via; kept as it was
        read: async (after, limit) => (await s.store.readStream(s.stream, { after, limit: Math.min(limit, limits.readLimitMax) })).map((e) => ({ seq: e.seq, term: e.term, payload: e.payload })),
        close: async () => {},
      };
    case 'sql': {
      const db = openLedger(s.storeFile, READ_BUSY_MS);
      return {
        via: 'sql',
        label: 'row history',
        description: `writes: fencedUpdate of row ${LEDGER_TABLE}.${LEDGER_ROW} (SQLite; the check is in the UPDATE)`,
        nodeArgs: ['--via', 'sql', '--target', s.storeFile],
        refusalsFrom: 'writer',
        refusedWhere: 'by the UPDATE',
        read: async (after, limit) => readLedger(db, after, limit),
        close: async () => db.close(),
      };
    }
    case 'http':
    case 'nats':
    case 'amqp':
    case 'mqtt':
      return openResourceProcess(s, s.via);
  }
}

/** How long the resource process may take to be ready (connect, create the stream or queue, subscribe), ms. */
const READY_MS = 15_000;
/** How long it may take to stop before it is killed, ms. */
const STOP_MS = 3000;

const DESCRIPTIONS: Readonly<Record<ResourceVia, (broker: string, url: string) => string>> = {
  http: (_b, url) => `writes: fencedFetch POST ${url}; the service's guard checks the token in its SQLite transaction (409 when stale)`,
  nats: (b) => `writes: JetStream publishes on ${redactUrl(b)} with the token in the headers; a fenced consumer applies them to row ${LEDGER_TABLE}.${LEDGER_ROW} (SQLite)`,
  amqp: (b) => `writes: RabbitMQ publishes on ${redactUrl(b)} with the token in the AMQP headers; a fenced consumer applies them to row ${LEDGER_TABLE}.${LEDGER_ROW} (SQLite)`,
  mqtt: (b) => `writes: MQTT v5 publishes on ${redactUrl(b)} with the token in the user properties; a fenced consumer applies them to row ${LEDGER_TABLE}.${LEDGER_ROW} (SQLite)`,
};

/**
 * Start `tenure demo-resource` (the service the nodes write to, or the consumer of their
 * messages) and wait until it is ready. Rejects with its one-line reason when it cannot start
 * (the broker unreachable).
 */
async function openResourceProcess(s: DemoResourceSetup, via: ResourceVia): Promise<DemoResource> {
  const file = join(s.dir, 'service.db');
  const db = openLedger(file, READ_BUSY_MS);
  const channel = randomBytes(5).toString('hex');
  const broker = s.broker ?? '';
  const args = [s.bin, 'demo-resource', '--via', via, '--db', file, '--group', s.group, ...(via === 'http' ? [] : ['--broker', broker, '--channel', channel])];
  const proc = spawn(process.execPath, args, { stdio: ['pipe', 'pipe', 'pipe'], env: s.env });
  proc.stdin.on('error', () => {});
  if (proc.pid) s.onSpawn(proc.pid);
  const stderr: string[] = [];
  createInterface({ input: proc.stderr }).on('line', (line) => {
    stderr.push(line);
    if (stderr.length > 5) stderr.shift();
  });
  const exited = new Promise<void>((resolve) => {
    proc.once('exit', () => resolve());
    proc.once('error', () => resolve());
  });
  let settle: (outcome: { ready: true; url?: string } | { ready: false; message: string }) => void = () => {};
  const started = new Promise<{ ready: true; url?: string } | { ready: false; message: string }>((resolve) => (settle = resolve));
  let stopping = false;
  createInterface({ input: proc.stdout }).on('line', (line) => {
    let e: DemoResourceEvent;
    try {
      e = JSON.parse(line) as DemoResourceEvent;
    } catch {
      return;
    }
    switch (e.event) {
      case 'ready':
        settle(e.url !== undefined ? { ready: true, url: e.url } : { ready: true });
        break;
      case 'failed':
        settle({ ready: false, message: e.message });
        break;
      case 'refused':
        s.onRefused(e);
        break;
      case 'error':
        s.onNote(`${via} resource: ${e.message}`);
        break;
      case 'stopped':
        break;
    }
  });
  void exited.then(() => {
    settle({ ready: false, message: `the ${via} resource process exited${stderr.length ? `: ${stderr.join(' | ')}` : ''}` });
    if (!stopping) s.onNote(`the ${via} resource process exited unexpectedly`);
  });
  const timer = setTimeout(() => settle({ ready: false, message: `the ${via} resource was not ready within ${READY_MS / 1000} s` }), READY_MS);
  const outcome = await started;
  clearTimeout(timer);

  const close = async (): Promise<void> => {
    stopping = true;
    if (proc.exitCode === null && proc.signalCode === null) {
      proc.kill('SIGTERM');
      proc.stdin.end();
      const inTime = await Promise.race([exited.then(() => true), new Promise<boolean>((r) => setTimeout(() => r(false), STOP_MS))]);
      if (!inTime) {
        proc.kill('SIGKILL');
        await exited;
      }
    }
    db.close();
  };
  if (!outcome.ready) {
    await close();
    throw new Error(outcome.message);
  }
  const url = outcome.url ?? '';
  return {
    via,
    label: 'row history',
    description: DESCRIPTIONS[via](broker, url),
    nodeArgs: via === 'http' ? ['--via', via, '--target', url] : ['--via', via, '--target', broker, '--channel', channel],
    refusalsFrom: 'resource',
    process: { name: via === 'http' ? 'service' : 'consumer', pid: proc.pid ?? 0 },
    refusedWhere: via === 'http' ? 'by the service (409)' : 'at the consumer (dropped, never applied)',
    read: async (after, limit) => readLedger(db, after, limit),
    close,
  };
}
