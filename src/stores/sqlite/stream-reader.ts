/**
 * Catch-up reads of a stream on a worker thread.
 *
 * The SQLite driver is synchronous: a follower catching up reads a page and applies the last one
 * on the same thread, one after the other, and reading a page costs about as much as inserting
 * it (measured: 100,000 entries read in pages of 1,000 in 130–175 ms, inserted in 125–145 ms).
 * A page read here runs on a worker thread with its own read-only connection to the same file,
 * while the main thread applies the page before it; the page comes back packed (the numbers in
 * one transferred buffer, the payloads in one string), which costs the main thread about a third
 * of reading it itself.
 *
 * The store sends a read here only when it continues a full page (see SqliteStore.readStream), so
 * a follower's one-entry reads at the head keep the main thread's lower latency.
 *
 * Checks are the same as on the main thread: a page with a row whose position or term is not a
 * safe integer comes back as plain rows, decoded by `decodeStreamEntry` there, which refuses that
 * row with the StoreDataError a main-thread read gives. The worker's connection is `query_only`:
 * it cannot write.
 *
 * A worker that cannot start, cannot open the file, or dies answers nothing it was asked: those
 * reads, and every read after, are served by the main thread as before (`null` from `read`).
 */
import { createRequire } from 'node:module';
import { Worker } from 'node:worker_threads';
import { ClosedError, StoreUnavailableError, decodeAppendedAt, decodeStreamEntry } from '../../core/index.js';
import type { StreamEntry } from '../../core/index.js';
import type { SqliteDriverName } from './driver.js';

/** A page as the worker packs it (every row passed the integer checks). */
interface Packed {
  readonly id: number;
  /** seq, term and append time of each row, in that order. */
  readonly nums: Float64Array;
  /** The payloads: concatenated in `text` with each one's end offset, or one by one. */
  readonly text: string;
  readonly ends: Uint32Array | null;
  readonly payloads: readonly string[] | null;
  /** The distinct leases, and each row's index into them. */
  readonly leases: readonly string[];
  readonly leaseOf: Uint32Array;
}

/** A page with a row that failed the worker's checks: decoded (and refused) on the main thread. */
interface Unpacked {
  readonly id: number;
  readonly rows: readonly (readonly [unknown, string, unknown, string, unknown])[];
}

interface Failed {
  readonly id: number;
  readonly error: string;
}

/** The worker could not open the database: nothing it is asked will be answered. */
interface Unusable {
  readonly unusable: string;
}

/** The worker has opened the database and prepared its statement. */
interface Ready {
  readonly ready: true;
}

type Reply = Packed | Unpacked | Failed | Unusable | Ready;

/**
 * The worker, as plain JavaScript (an eval'd worker runs the same under tsx, vitest and the built
 * package). It opens the file with the store's driver and answers one page per message.
 */
const WORKER_SOURCE = String.raw`
const { parentPort, workerData } = require('node:worker_threads');
const MAX_TEXT = 1 << 24;
let db;
let read;
let arrays = false;
try {
  if (workerData.driver === 'node:sqlite') {
    const { DatabaseSync } = require('node:sqlite');
    db = new DatabaseSync(workerData.path);
  } else {
    const Database = require(workerData.module);
    db = new Database(workerData.path);
  }
  db.exec('PRAGMA busy_timeout = ' + workerData.busyMs);
  db.exec('PRAGMA query_only = 1');
  read = db.prepare(workerData.sql);
  if (typeof read.raw === 'function') { read.raw(true); arrays = true; }
  else if (typeof read.setReturnArrays === 'function') { read.setReturnArrays(true); arrays = true; }
  parentPort.postMessage({ ready: true });
} catch (err) {
  parentPort.postMessage({ unusable: String(err && err.message || err) });
  read = null;
}
const safe = (v, min) => typeof v === 'number' && Number.isSafeInteger(v) && v >= min;
parentPort.on('message', (m) => {
  if (read === null) return;
  let rows;
  try {
    rows = read.all(m.stream, m.after, m.limit);
  } catch (err) {
    parentPort.postMessage({ id: m.id, error: String(err && err.message || err) });
    return;
  }
  const n = rows.length;
  const nums = new Float64Array(n * 3);
  const leaseOf = new Uint32Array(n);
  const leases = [];
  const leaseIndex = new Map();
  const flat = new Array(n);
  let packable = true;
  let size = 0;
  for (let i = 0; i < n; i++) {
    const r = rows[i];
    const seq = arrays ? r[0] : r.seq;
    const lease = arrays ? r[1] : r.lease;
    const term = arrays ? r[2] : r.term;
    const payload = arrays ? r[3] : r.payload;
    const at = arrays ? r[4] : r.appended_at;
    const row = [seq, typeof lease === 'string' ? lease : String(lease), term, typeof payload === 'string' ? payload : String(payload), at];
    flat[i] = row;
    if (!packable) continue;
    // An append time that is not a number (written by hand) goes back as a plain row too: the
    // main thread's decodeAppendedAt reads it, as it reads every packed one.
    if (!safe(seq, 1) || !safe(term, 0) || typeof at !== 'number') { packable = false; continue; }
    nums[3 * i] = seq;
    nums[3 * i + 1] = term;
    nums[3 * i + 2] = at;
    let li = leaseIndex.get(row[1]);
    if (li === undefined) { li = leases.length; leases.push(row[1]); leaseIndex.set(row[1], li); }
    leaseOf[i] = li;
    size += row[3].length;
  }
  if (!packable) {
    parentPort.postMessage({ id: m.id, rows: flat });
    return;
  }
  let text = '';
  let ends = null;
  let payloads = null;
  if (size <= MAX_TEXT) {
    ends = new Uint32Array(n);
    for (let i = 0; i < n; i++) { text += flat[i][3]; ends[i] = text.length; }
  } else {
    payloads = flat.map((row) => row[3]);
  }
  const transfer = [nums.buffer, leaseOf.buffer];
  if (ends !== null) transfer.push(ends.buffer);
  parentPort.postMessage({ id: m.id, nums, text, ends, payloads, leases, leaseOf }, transfer);
});
`;

const requireHere = createRequire(import.meta.url);

/** Reads pages of a SQLite file's streams on one worker thread, started on first use. */
export class StreamReaderThread {
  private worker: Worker | null = null;
  /** Set once the worker cannot serve (failed to start or open, or died): the main thread reads. */
  private unusable = false;
  /** The worker has opened the file: reads are sent to it from now on. */
  private ready = false;
  private closed = false;
  private nextId = 1;
  /** Pages the worker answered, and reads it left to the main thread after being asked (it died). */
  readonly served = { pages: 0, handedBack: 0 };
  private readonly settledWaiters: ((ready: boolean) => void)[] = [];
  private readonly pending = new Map<number, { stream: string; resolve: (entries: StreamEntry[] | null) => void; reject: (err: Error) => void }>();

  constructor(
    private readonly path: string,
    private readonly driver: SqliteDriverName,
    private readonly sql: string,
    private readonly busyMs: number,
  ) {}

  /**
   * Whether a read may be sent here now. The first call starts the worker and answers false: the
   * main thread goes on reading while the thread starts (tens of ms), and sends reads here once it
   * has opened the file.
   */
  get usable(): boolean {
    if (this.unusable || this.closed) return false;
    if (!this.ready) this.start();
    return this.ready;
  }

  /**
   * Entries of `stream` after `after`, at most `limit`; `null` when the worker cannot serve, so the
   * caller reads on its own thread. A query that fails in the worker is StoreUnavailableError.
   */
  read(stream: string, after: number, limit: number): Promise<StreamEntry[] | null> {
    if (this.closed) return Promise.reject(new ClosedError('sqlite store'));
    const worker = this.unusable || !this.ready ? null : this.worker;
    if (worker === null) return Promise.resolve(null);
    const id = this.nextId++;
    return new Promise<StreamEntry[] | null>((resolve, reject) => {
      // Held while a read waits (a script awaiting only this read must not exit), let go when idle.
      if (this.pending.size === 0) worker.ref();
      this.pending.set(id, { stream, resolve, reject });
      worker.postMessage({ id, stream, after, limit });
    });
  }

  /** Resolves once the worker has opened the file (true) or cannot serve (false); starts it if need be. */
  settled(): Promise<boolean> {
    if (this.ready || this.unusable || this.closed) return Promise.resolve(this.ready);
    this.start();
    if (this.unusable) return Promise.resolve(false);
    return new Promise((resolve) => this.settledWaiters.push(resolve));
  }

  /** Stop the worker; reads still waiting are refused with ClosedError. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.settle(false);
    this.failAll((p) => p.reject(new ClosedError('sqlite store')));
    const w = this.worker;
    this.worker = null;
    if (w) await w.terminate();
  }

  private start(): Worker | null {
    if (this.worker) return this.worker;
    let module = '';
    if (this.driver === 'better-sqlite3') {
      try {
        module = requireHere.resolve('better-sqlite3');
      } catch {
        this.unusable = true;
        return null;
      }
    }
    let w: Worker;
    try {
      w = new Worker(WORKER_SOURCE, { eval: true, execArgv: [], workerData: { driver: this.driver, module, path: this.path, sql: this.sql, busyMs: this.busyMs } });
    } catch {
      this.unusable = true;
      return null;
    }
    w.unref();
    w.on('message', (reply: Reply) => this.onReply(reply));
    const giveUp = (): void => {
      if (this.worker !== w) return;
      this.worker = null;
      this.unusable = true;
      this.ready = false;
      this.settle(false);
      // Nothing asked of it will be answered: the main thread reads those pages.
      this.failAll((p) => {
        this.served.handedBack += 1;
        p.resolve(null);
      });
    };
    w.on('error', giveUp);
    w.on('exit', giveUp);
    this.worker = w;
    return w;
  }

  private settle(ready: boolean): void {
    for (const w of this.settledWaiters.splice(0)) w(ready);
  }

  private failAll(each: (p: { resolve: (entries: StreamEntry[] | null) => void; reject: (err: Error) => void }) => void): void {
    const waiting = [...this.pending.values()];
    this.pending.clear();
    for (const p of waiting) each(p);
  }

  private onReply(reply: Reply): void {
    if ('ready' in reply) {
      this.ready = !this.unusable && !this.closed;
      this.settle(this.ready);
      return;
    }
    if ('unusable' in reply) {
      this.unusable = true;
      this.ready = false;
      this.settle(false);
      const w = this.worker;
      this.worker = null;
      this.failAll((p) => p.resolve(null));
      void w?.terminate();
      return;
    }
    const p = this.pending.get(reply.id);
    if (!p) return;
    this.pending.delete(reply.id);
    if (this.pending.size === 0) this.worker?.unref();
    if ('error' in reply) {
      p.reject(new StoreUnavailableError(`sqlite store ${this.path}: readStream: ${reply.error}`));
      return;
    }
    this.served.pages += 1;
    try {
      p.resolve('rows' in reply ? unpacked(p.stream, reply) : unpack(p.stream, reply));
    } catch (err) {
      p.reject(err as Error);
    }
  }
}

function unpack(stream: string, page: Packed): StreamEntry[] {
  const n = page.leaseOf.length;
  const out = new Array<StreamEntry>(n);
  const { nums, ends, payloads, text, leases, leaseOf } = page;
  let start = 0;
  for (let i = 0; i < n; i++) {
    let payload: string;
    if (ends !== null) {
      const end = ends[i]!;
      payload = text.slice(start, end);
      start = end;
    } else {
      payload = payloads![i]!;
    }
    out[i] = { stream, seq: nums[3 * i]!, lease: leases[leaseOf[i]!]!, term: nums[3 * i + 1]!, payload, appendedAt: decodeAppendedAt(nums[3 * i + 2]!) };
  }
  return out;
}

function unpacked(stream: string, page: Unpacked): StreamEntry[] {
  return page.rows.map((r) => decodeStreamEntry('sqlite', stream, { seq: r[0], lease: r[1], term: r[2], payload: r[3], appendedAt: r[4] }));
}
