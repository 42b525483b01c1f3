/**
 * `sqlite:PATH` — the embedded default: many processes on one host share one database file.
 *
 * WAL journal, every change in one `BEGIN IMMEDIATE` transaction (so the read and the write that
 * decide a term or a fence cannot interleave with another process), and `synchronous=FULL` so a
 * committed term survives power loss and never goes back (safety rule 4). A process killed
 * mid-transaction leaves nothing behind: SQLite rolls the hot journal back.
 *
 * Contention is waiting, never an error. SQLite's own busy handler is unfair (a waiter sleeps 1,
 * 2, 5, 10… ms while the holder commits and takes the lock again at once) and blocks the thread
 * while it waits, so the store does not use it (`busy_timeout = 0`): a call that finds the write
 * lock taken polls for it in a short slice (2 ms for lease calls, 1 ms for appends and reads),
 * then yields to the event loop (lease calls for one turn, appends for a jittered back-off), and
 * tries again until its `timeoutMs`. So timers, the elector's deadline among them, keep firing.
 * A waiting lease call raises a flag that appends in every process respect (LeaseWaitFlag), so a
 * renewal gets through a neighbour appending flat out.
 *
 * Push: other processes' commits are noticed through `PRAGMA data_version`, polled only while
 * someone watches; a watched lease that runs out is reported too. Appends by any SqliteStore of
 * the same file in this process are told to its stream watchers at once (`watchStream`).
 *
 * Append times (`appendedAt`) are this host's wall clock (Date.now()), as is `streamHead().nowMs`:
 * SQLite is single-host, so one OS clock serves every writer and reader (safety rule 1). A step of
 * the wall clock shows as a jump in a follower's lag in ms, never in expiry (leases keep their
 * monotonic clock).
 */
import { randomUUID } from 'node:crypto';
import { resolve } from 'node:path';
import {
  ClosedError,
  checkPurgePrefix,
  InvalidArgumentError,
  StaleTermError,
  StoreUnavailableError,
  VersionConflictError,
  checkAppendOptions,
  checkMs,
  checkName,
  checkOwner,
  checkPayload,
  checkReadOptions,
  checkRenewItems,
  checkTerm,
  checkToken,
  checkTtl,
  decideAcquire,
  decideFence,
  reportStale,
  decideRelease,
  renewLease,
  decodeMeta,
  decodeStreamEntry,
  decodeTerm,
  encodeMeta,
  foreignStreamError,
  isLive,
  toLease,
} from '../../core/index.js';
import type {
  AcquireResult,
  AppendFencedOptions,
  FencingToken,
  Lease,
  LeaseMeta,
  LeaseRow,
  ReadStreamOptions,
  RenewManyItem,
  RenewResult,
  Store,
  StreamEntry,
  StreamHead,
  Unsubscribe,
  WatchListener,
} from '../../core/index.js';
import { openDatabase } from './driver.js';
import type { SqliteDatabase, SqliteDriverName, SqlRow, SqliteStatement } from './driver.js';
import { StreamReaderThread } from './stream-reader.js';
import { hostClock } from './host-clock.js';
import { LeaseWaitFlag } from './lease-flag.js';
import { prepareDatabaseFile } from './file.js';
import type { HostClock } from './host-clock.js';

export interface SqliteStoreOptions {
  /**
   * Database file; created with its directory when missing (unless `readOnly`). A path that
   * exists but is not a regular file (a directory, /dev/null) is refused.
   */
  path: string;
  /**
   * Look only (`tenure status`, `tenure log`): the file must already be a tenure database, and
   * nothing is created or written — no directory, no file, no schema, no journal. Writes reject.
   */
  readOnly?: boolean;
  /**
   * How long one call may wait, in all, for other processes' transactions (a locked database),
   * ms (default 5000; 0 = try once). Waiting never blocks the event loop for more than a couple of
   * milliseconds at a time (see `SqliteStore`); a call still locked out at the end fails with
   * StoreUnavailableError, having written nothing. Opening waits at least SETUP_BUSY_TIMEOUT_MS:
   * the first processes on a new file race to create it.
   */
  timeoutMs?: number;
  /** The earlier name of `timeoutMs` (used when `timeoutMs` is not given). */
  busyTimeoutMs?: number;
  /** How often watchers check for other processes' changes, ms (default 20). */
  pollMs?: number;
  /** Force a driver; by default node:sqlite when available, else better-sqlite3. */
  driver?: SqliteDriverName;
}

/**
 * 1: leases, fences, streams.
 * 2: stream entries carry `appended_at` (ms since the epoch, the host's wall clock). Migrating
 *    1 -> 2 adds the column and gives the entries already there the migration's time. A version 1
 *    file still opens read-only (its entries read with an unknown append time, 0).
 */
const SCHEMA_VERSION = '2';
const SCHEMA_VERSIONS_READABLE = ['1', '2'];

/**
 * Appends committed by any SqliteStore in this process, per database file: each store with
 * stream watchers listens here, so a writer in the same process is told without waiting for the
 * data_version poll.
 */
const localAppends = new Map<string, Set<(stream: string, seq: number) => void>>();

/** The default of `timeoutMs`, ms: as long as the SQL servers' stores wait for an answer. */
const DEFAULT_TIMEOUT_MS = 5000;

/**
 * How a call waits for the write lock. `lease`: acquire, renew, release, whose delay can cost a
 * leader its lease: they poll in longer slices and yield only for one event-loop turn between
 * them. `bulk`: appends, which back off (jittered, growing) between shorter slices, and stand
 * back while another process's lease call waits, so that a process appending flat out leaves
 * room for the lease calls of others. `read`: reads, which wait like appends but need no write
 * lock (WAL) and so meet a busy database only in rare moments, and hold nobody back.
 */
type Priority = 'lease' | 'bulk' | 'read';

/** Smallest page a catch-up read sends to the worker thread: below it the hand-over costs more than it saves. */
const THREAD_MIN_LIMIT = 256;
/** Streams whose last full page is remembered (a catch-up in progress each); past it the memory starts over. */
const FULL_PAGE_STREAMS = 1024;

/** Longest synchronous polling slice, ms, by priority: how long a waiting call may block the thread. */
const SLICE_MS: Record<Priority, number> = { lease: 2, bulk: 1, read: 1 };
/** Pause between two polls of the lock within a slice, ms (jittered ±50%): lease calls look more often. */
const POLL_GAP_MS: Record<Priority, number> = { lease: 0.1, bulk: 0.5, read: 0.5 };
/** Back-off between the slices of a bulk call, ms: 0.5, 1, 2… up to this, jittered to 50–100%. */
const BULK_BACKOFF_MAX_MS = 4;
/**
 * While other processes contend for the lock (this store met it taken within the last
 * CONTENDED_MS), a bulk call that follows this store's previous bulk commit within POLITE_GAP_MS
 * starts only after that gap: the lock is then free for a moment after each commit, for the
 * waiting lease calls (and appends) of others, instead of being taken again by the same process
 * within microseconds, which is what makes SQLite's own busy handling unfair.
 */
const CONTENDED_MS = 100;
/** SQLite's default automatic checkpoint threshold, pages of WAL. */
const WAL_AUTOCHECKPOINT_PAGES = 1000;
/** Lease commits (which skip the automatic checkpoint) between two passive checkpoints of a store. */
const LEASE_COMMITS_PER_CHECKPOINT = 200;
const POLITE_GAP_MS = 1;

/**
 * Each write: how it waits for the lock, and whether its commit is synced to disk before it
 * returns. Term changes (acquire) and stream entries must survive a power loss (safety rule 4:
 * a term never goes back). Renewals and releases need not: a power loss stops every process of
 * the host, every holder with them, and on Linux the lease clock's epoch changes with the boot, so
 * every lease has expired on the next open anyway. Not waiting for the disk keeps a renewal's
 * transaction, and its hold on the write lock, to a fraction of a millisecond. A later synced
 * commit syncs these too (the WAL is written in order).
 */
const WRITES = {
  acquire: { priority: 'lease', durable: true },
  renew: { priority: 'lease', durable: false },
  renewMany: { priority: 'lease', durable: false },
  release: { priority: 'lease', durable: false },
  appendFenced: { priority: 'bulk', durable: true },
} as const satisfies Record<string, { priority: Priority; durable: boolean }>;

/**
 * How long opening waits for another process's lock, at least, ms. Processes started together
 * on a new file (every node of a `tenure run`, or two `tenure lock`s) all switch it to WAL and
 * create the tables; on a loaded machine one of them can hold the lock longer than a write's
 * busy timeout, and the others must wait for it rather than fail to open.
 */
const SETUP_BUSY_TIMEOUT_MS = 10_000;

/** SQLITE_BUSY from either driver (better-sqlite3: code 'SQLITE_BUSY'; node:sqlite: errcode 5). */
function isBusy(err: unknown): boolean {
  const e = err as { code?: unknown; errcode?: unknown; message?: unknown };
  return e.code === 'SQLITE_BUSY' || e.errcode === 5 || (typeof e.message === 'string' && e.message.includes('database is locked'));
}

/** Thrown (and caught) in place of trying an append while another process's lease call waits. */
class LeaseWaiting extends Error {}

function rollbackQuietly(db: SqliteDatabase): void {
  try {
    db.exec('ROLLBACK');
  } catch {
    // no transaction was open
  }
}

/** Block this thread for `ms` (only while opening, as SQLite's own busy wait does). */
function sleepSync(ms: number): void {
  Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms);
}

interface Statements {
  getLease: SqliteStatement;
  putLease: SqliteStatement;
  listLeases: SqliteStatement;
  getFence: SqliteStatement;
  putFence: SqliteStatement;
  lastSeq: SqliteStatement;
  firstEntryLease: SqliteStatement;
  insertEntry: SqliteStatement;
  readEntries: SqliteStatement;
  readLastEntry: SqliteStatement;
  dataVersion: SqliteStatement;
}

/** A stream watched through `watchStream`: its listeners and the highest head they were told. */
interface WatchedStream {
  readonly listeners: Set<(head: number) => void>;
  last: number;
}

interface Watched {
  readonly listeners: Set<WatchListener>;
  /**
   * What the last look found: the live lease's owner, term and expiry; or, with owner null, the
   * name free at that term (-1: not known). A term that moved while the name looked free both
   * times was a whole hold between two polls: told as a release, or a candidate that lost the
   * race to it would sleep out that hold's TTL.
   */
  last: { owner: string | null; term: number; expiresAtMs: number };
}

export class SqliteStore implements Store {
  readonly kind = 'sqlite';
  readonly path: string;
  readonly driver: SqliteDriverName;
  private readonly db: SqliteDatabase;
  private clock: HostClock;
  private readonly st: Statements;
  private readonly pollMs: number;
  private readonly timeoutMs: number;
  private readonly readOnly: boolean;
  private readonly watched = new Map<string, Watched>();
  private readonly watchedStreams = new Map<string, WatchedStream>();
  /** Its key in `localAppends`: the file (an in-memory database is its own store's alone). */
  private readonly appendsKey: string;
  /** This store's entry in `localAppends` while it has stream watchers. */
  private readonly onLocalAppend = (stream: string, seq: number): void => this.tellStream(stream, seq);
  /** False for a version 1 file opened read-only: its entries have no append time. */
  private hasAppendTimes = true;
  private pollTimer: NodeJS.Timeout | null = null;
  private lastDataVersion = -1;
  /** When a call of this store last found the database locked (performance.now()). */
  private contendedAt = -Infinity;
  /** When this store's last bulk call succeeded (performance.now()). */
  private bulkDoneAt = -Infinity;
  /** Lease commits since this store last scheduled a checkpoint (see checkpointLater). */
  private leaseCommits = 0;
  /** Raised by this store's waiting lease calls, respected by its bulk calls (see LeaseWaitFlag). */
  private readonly leaseWait: LeaseWaitFlag;
  /** Catch-up page reads off the main thread (none for an in-memory database: it is this connection's alone). */
  private readonly reader: StreamReaderThread | null;
  /** Per stream, the last position of the last read that filled its page: a read after it is a catch-up. */
  private readonly fullPageEnds = new Map<string, number>();
  private closed = false;

  constructor(options: SqliteStoreOptions) {
    if (typeof options.path !== 'string' || options.path.length === 0) {
      throw new InvalidArgumentError('path', 'expected a database file path, such as ./.tenure/tenure.db');
    }
    this.timeoutMs =
      options.timeoutMs !== undefined || options.busyTimeoutMs === undefined
        ? checkMs('timeoutMs', options.timeoutMs ?? DEFAULT_TIMEOUT_MS, 0, 600_000)
        : checkMs('busyTimeoutMs', options.busyTimeoutMs, 0, 600_000);
    this.pollMs = checkMs('pollMs', options.pollMs ?? 20, 1, 60_000);
    this.path = options.path === ':memory:' ? options.path : resolve(options.path);
    this.appendsKey = this.path === ':memory:' ? `:memory:${randomUUID()}` : this.path;
    this.readOnly = options.readOnly === true;
    if (this.path !== ':memory:') prepareDatabaseFile(this.path, this.readOnly);
    this.clock = hostClock();
    this.leaseWait = LeaseWaitFlag.beside(this.path);
    let opened: ReturnType<typeof openDatabase>;
    try {
      opened = openDatabase(this.path, options.driver);
    } catch (err) {
      if (err instanceof Error && 'code' in err && err.code === 'DRIVER_MISSING') throw err;
      throw new StoreUnavailableError(`sqlite store: cannot open ${this.path}: ${(err as Error).message}`, { cause: err });
    }
    this.db = opened.db;
    this.driver = opened.driver;
    const setupMs = Math.max(this.timeoutMs, SETUP_BUSY_TIMEOUT_MS);
    const giveUpAt = performance.now() + setupMs;
    for (let attempt = 1; ; attempt++) {
      try {
        if (attempt === 1) this.db.exec(`PRAGMA busy_timeout = ${setupMs}`);
        if (this.readOnly) {
          this.checkSchema();
        } else {
          this.db.exec('PRAGMA journal_mode = WAL');
          this.db.exec('PRAGMA synchronous = FULL');
          this.createSchema();
        }
        // From here on the store waits for locks itself (see `run`), without blocking the thread long.
        this.db.exec('PRAGMA busy_timeout = 0');
        break;
      } catch (err) {
        // SQLite answers "busy" at once, without waiting out the busy timeout, where waiting
        // could deadlock: switching a new file to WAL while another process holds its write
        // lock does. Open is synchronous (so is SQLite's own busy wait): try again shortly.
        if (isBusy(err) && performance.now() < giveUpAt) {
          rollbackQuietly(this.db);
          sleepSync(Math.min(5 * attempt, 50));
          continue;
        }
        this.db.close();
        throw new StoreUnavailableError(`sqlite store: cannot set up ${this.path}: ${(err as Error).message}`, { cause: err });
      }
    }
    this.st = this.prepare();
    this.reader = this.path === ':memory:' ? null : new StreamReaderThread(this.path, this.driver, this.readEntriesOffThread(), this.timeoutMs);
  }

  async acquire(name: string, owner: string, ttlMs: number, meta?: LeaseMeta): Promise<AcquireResult> {
    checkName('name', name);
    checkOwner('owner', owner);
    checkTtl('ttlMs', ttlMs);
    const metaText = encodeMeta('meta', meta);
    const metaValue = decodeMeta(metaText);
    return this.write('acquire', () => {
      const now = this.clock.now();
      const decision = decideAcquire(this.getRow(name), name, owner, ttlMs, metaValue, now);
      if (!decision.acquired) return { acquired: false, lease: toLease(decision.row, now) };
      this.putRow(decision.row);
      return { acquired: true, lease: toLease(decision.row as LeaseRow & { owner: string }, now) };
    }, (result) => result.acquired && this.notifyLocal(name, result.lease, result.lease.term));
  }

  async renew(name: string, owner: string, term: number, ttlMs: number): Promise<RenewResult> {
    checkName('name', name);
    checkOwner('owner', owner);
    checkTerm('term', term);
    checkTtl('ttlMs', ttlMs);
    return this.write('renew', () => {
      const now = this.clock.now();
      return renewLease(this.getRow(name), owner, term, ttlMs, now, (row) => this.putRow(row));
    });
  }

  /** Every lease of the batch renewed or reported in one transaction. */
  async renewMany(owner: string, leases: readonly RenewManyItem[], ttlMs: number): Promise<RenewResult[]> {
    checkOwner('owner', owner);
    checkTtl('ttlMs', ttlMs);
    checkRenewItems(leases);
    if (leases.length === 0) return this.query('renewMany', () => []);
    return this.write('renewMany', () => {
      const now = this.clock.now();
      return leases.map(({ name, term }): RenewResult => {
        return renewLease(this.getRow(name), owner, term, ttlMs, now, (row) => this.putRow(row));
      });
    });
  }

  async release(name: string, owner: string, term: number): Promise<boolean> {
    checkName('name', name);
    checkOwner('owner', owner);
    checkTerm('term', term);
    return this.write('release', () => {
      const next = decideRelease(this.getRow(name), owner, term, this.clock.now());
      if (next === null) return false;
      this.putRow(next);
      return true;
    }, (released) => released && this.notifyLocal(name, null, term));
  }

  async read(name: string): Promise<Lease | null> {
    checkName('name', name);
    return this.query('read', () => {
      const now = this.clock.now();
      const row = this.getRow(name);
      return isLive(row, now) ? toLease(row, now) : null;
    });
  }

  /** Delete every lease, fence and stream entry whose name starts with `prefix`, in one transaction; how many rows went. */
  async purge(prefix: string): Promise<number> {
    checkPurgePrefix(prefix);
    if (this.readOnly) throw new StoreUnavailableError(`sqlite store ${this.path}: opened read-only, cannot purge`);
    return await this.run('purge', 'bulk', () =>
      this.transaction(() => {
        // substr, not LIKE: the prefix is user text and never a pattern.
        let n = 0;
        for (const [table, column] of [['tenure_leases', 'name'], ['tenure_fences', 'name'], ['tenure_streams', 'stream']] as const) {
          n += Number(this.db.prepare(`DELETE FROM ${table} WHERE substr(${column}, 1, length(?)) = ?`).run(prefix, prefix).changes);
        }
        return n;
      }),
    );
  }

  async list(prefix = ''): Promise<Lease[]> {
    if (typeof prefix !== 'string') throw new InvalidArgumentError('prefix', 'expected a string');
    return this.query('list', () => {
      const now = this.clock.now();
      const out: Lease[] = [];
      // Prefix match by range so user text is never a LIKE pattern.
      for (const r of this.st.listLeases.all(prefix, now)) {
        const row = rowToLease(r);
        if (row.name.startsWith(prefix) && isLive(row, now)) out.push(toLease(row, now));
      }
      return out;
    });
  }

  async appendFenced(token: FencingToken, stream: string, payload: string, options?: AppendFencedOptions): Promise<number> {
    checkToken('token', token);
    checkName('stream', stream);
    checkPayload('payload', payload);
    const expectSeq = checkAppendOptions(options);
    return this.write('appendFenced', () => {
      const highest = Number(this.st.getFence.get(token.lease)?.max_term ?? 0);
      const leaseTerm = this.getRow(token.lease)?.term ?? 0;
      const verdict = decideFence(token.term, highest, leaseTerm);
      if (verdict === 'stale') throw reportStale(new StaleTermError(token.lease, token.term, highest), { stream });
      if (verdict === 'unissued') {
        throw new InvalidArgumentError('token.term', `term ${token.term} was never issued for lease ${token.lease} (latest ${leaseTerm})`);
      }
      // A stream belongs to the lease of its first entry (inside this write transaction).
      const first = this.st.firstEntryLease.get(stream);
      if (first && String(first.lease) !== token.lease) throw foreignStreamError(stream, String(first.lease), token.lease);
      const head = Number(this.st.lastSeq.get(stream)?.seq ?? 0);
      // The compare-and-set on the head, in the same transaction; refused before the fence moves.
      if (expectSeq !== undefined && expectSeq !== head) throw new VersionConflictError(stream, expectSeq, head);
      if (token.term > highest) this.st.putFence.run(token.lease, token.term);
      const seq = head + 1;
      this.st.insertEntry.run(stream, seq, token.lease, token.term, payload, Date.now());
      return seq;
    }).then((seq) => {
      for (const tell of localAppends.get(this.appendsKey) ?? []) tell(stream, seq);
      return seq;
    });
  }

  /** The stream's head and this host's wall clock (the clock of `appendedAt`). */
  async streamHead(stream: string): Promise<StreamHead> {
    checkName('stream', stream);
    return this.query('streamHead', () => ({ seq: Number(this.st.lastSeq.get(stream)?.seq ?? 0), nowMs: Date.now() }));
  }

  /**
   * Push for streams: appends by any SqliteStore of this file in this process are told at once;
   * other processes' commits are noticed by the `PRAGMA data_version` poll every `pollMs`, which
   * then reads the heads of the watched streams.
   */
  watchStream(stream: string, listener: (head: number) => void): Unsubscribe {
    checkName('stream', stream);
    if (this.closed) throw new ClosedError('sqlite store');
    let w = this.watchedStreams.get(stream);
    if (!w) {
      let last = 0;
      try {
        last = Number(this.st.lastSeq.get(stream)?.seq ?? 0);
      } catch {
        last = 0; // busy: the poll reads it
      }
      w = { listeners: new Set(), last };
      this.watchedStreams.set(stream, w);
    }
    w.listeners.add(listener);
    let local = localAppends.get(this.appendsKey);
    if (!local) localAppends.set(this.appendsKey, (local = new Set()));
    local.add(this.onLocalAppend);
    this.startPolling();
    const entry = w;
    return () => {
      entry.listeners.delete(listener);
      if (entry.listeners.size === 0 && this.watchedStreams.get(stream) === entry) this.watchedStreams.delete(stream);
      if (this.watchedStreams.size === 0) this.stopLocalAppends();
      if (this.watched.size === 0 && this.watchedStreams.size === 0) this.stopPolling();
    };
  }

  async readStream(stream: string, options?: ReadStreamOptions): Promise<StreamEntry[]> {
    checkName('stream', stream);
    const { after, limit } = checkReadOptions(options);
    let entries: StreamEntry[] | null = null;
    // A read that continues a full page is a catch-up: read it on the worker thread, so the page
    // before it is applied on this one meanwhile (see StreamReaderThread).
    if (limit >= THREAD_MIN_LIMIT && this.fullPageEnds.get(stream) === after && this.reader?.usable) {
      entries = await this.reader.read(stream, after, limit);
    }
    entries ??= await this.query('readStream', () =>
      this.st.readEntries
        .all(stream, after, limit)
        .map((r) => decodeStreamEntry('sqlite', stream, { seq: r.seq, lease: String(r.lease), term: r.term, payload: String(r.payload), appendedAt: r.appended_at })),
    );
    if (limit >= THREAD_MIN_LIMIT && entries.length === limit) {
      if (this.fullPageEnds.size >= FULL_PAGE_STREAMS && !this.fullPageEnds.has(stream)) this.fullPageEnds.clear();
      this.fullPageEnds.set(stream, entries[entries.length - 1]!.seq);
    } else {
      this.fullPageEnds.delete(stream);
    }
    return entries;
  }

  /** The stream's last entry, by the primary key read backwards (no scan). */
  async readLast(stream: string): Promise<StreamEntry | null> {
    checkName('stream', stream);
    return this.query('readLast', () => {
      const r = this.st.readLastEntry.get(stream);
      return r ? decodeStreamEntry('sqlite', stream, { seq: r.seq, lease: String(r.lease), term: r.term, payload: String(r.payload), appendedAt: r.appended_at }) : null;
    });
  }

  watch(name: string, listener: WatchListener): Unsubscribe {
    checkName('name', name);
    if (this.closed) throw new ClosedError('sqlite store');
    let w = this.watched.get(name);
    if (!w) {
      let last: Watched['last'];
      try {
        last = seen(this.getRow(name), this.clock.now());
      } catch {
        last = { owner: null, term: -1, expiresAtMs: 0 }; // busy, or a row tenure cannot use: the poll compares from nothing
      }
      w = { listeners: new Set(), last };
      this.watched.set(name, w);
    }
    w.listeners.add(listener);
    this.startPolling();
    const entry = w;
    return () => {
      entry.listeners.delete(listener);
      if (entry.listeners.size === 0) this.watched.delete(name);
      if (this.watched.size === 0 && this.watchedStreams.size === 0) this.stopPolling();
    };
  }

  /** The schema is created or checked when the store opens; this only confirms it is open. */
  async migrate(): Promise<void> {
    if (this.closed) throw new ClosedError('sqlite store');
  }

  close(): Promise<void> {
    if (!this.closed) {
      this.closed = true;
      this.stopPolling();
      this.stopLocalAppends();
      this.watched.clear();
      this.watchedStreams.clear();
      this.fullPageEnds.clear();
      this.db.close();
      if (this.reader) return this.reader.close();
    }
    return Promise.resolve();
  }

  // ---- internals ------------------------------------------------------------------------

  private createSchema(): void {
    // Fast path, no write lock: many processes open the same file at once (tenure run on every
    // node), and the schema and clock epoch are almost always already in place.
    if (this.schemaCurrent()) return;
    this.transaction(() => {
      this.db.exec(`
        CREATE TABLE IF NOT EXISTS tenure_schema (key TEXT PRIMARY KEY, value TEXT NOT NULL);
        CREATE TABLE IF NOT EXISTS tenure_leases (
          name TEXT PRIMARY KEY, owner TEXT, term INTEGER NOT NULL, expires_at REAL NOT NULL,
          ttl_ms INTEGER NOT NULL, meta TEXT NOT NULL);
        CREATE TABLE IF NOT EXISTS tenure_fences (name TEXT PRIMARY KEY, max_term INTEGER NOT NULL);
        CREATE TABLE IF NOT EXISTS tenure_streams (
          stream TEXT NOT NULL, seq INTEGER NOT NULL, lease TEXT NOT NULL, term INTEGER NOT NULL,
          payload TEXT NOT NULL, appended_at INTEGER NOT NULL DEFAULT 0, PRIMARY KEY (stream, seq));`);
      const version = this.db.prepare("SELECT value FROM tenure_schema WHERE key = 'version'").get();
      if (version && !SCHEMA_VERSIONS_READABLE.includes(String(version.value))) {
        throw new Error(`database schema version ${String(version.value)} is not ${SCHEMA_VERSION}; upgrade tenure`);
      }
      // 1 -> 2: append times; the entries already there get the migration's (the best bound known).
      const columns = this.db.prepare('PRAGMA table_info(tenure_streams)').all();
      if (!columns.some((c) => c.name === 'appended_at')) {
        this.db.exec('ALTER TABLE tenure_streams ADD COLUMN appended_at INTEGER NOT NULL DEFAULT 0');
        this.db.prepare('UPDATE tenure_streams SET appended_at = ? WHERE appended_at = 0').run(Date.now());
      }
      this.db.prepare("INSERT OR REPLACE INTO tenure_schema (key, value) VALUES ('version', ?)").run(SCHEMA_VERSION);
      const epoch = this.db.prepare("SELECT value FROM tenure_schema WHERE key = 'clock'").get();
      if (!epoch || epoch.value !== this.clock.epoch) {
        // Expiry times from another clock epoch (an earlier boot) mean nothing now: expire them all.
        // Terms are kept, so they still never go back.
        this.db.prepare('UPDATE tenure_leases SET expires_at = 0').run();
        this.db.prepare("INSERT OR REPLACE INTO tenure_schema (key, value) VALUES ('clock', ?)").run(this.clock.epoch);
      }
    });
  }

  /**
   * Read-only open: the file must hold tenure's tables at this schema version. Leases written in
   * another clock epoch (before the last boot) are all expired, as a writable open would mark them;
   * here nothing is written, so they are only read as expired.
   */
  private checkSchema(): void {
    let rows: SqlRow[];
    try {
      rows = this.db.prepare("SELECT key, value FROM tenure_schema WHERE key IN ('version', 'clock')").all();
    } catch (err) {
      if (isBusy(err)) throw err;
      throw new Error(`${this.path} is not a tenure store (${(err as Error).message})`, { cause: err });
    }
    const get = (key: string): unknown => rows.find((r) => r.key === key)?.value;
    if (!SCHEMA_VERSIONS_READABLE.includes(String(get('version')))) throw new Error(`${this.path}: database schema version ${String(get('version'))} is not ${SCHEMA_VERSION}`);
    this.hasAppendTimes = get('version') === SCHEMA_VERSION;
    if (get('clock') !== this.clock.epoch) this.clock = { epoch: this.clock.epoch, now: () => Number.MAX_VALUE };
  }

  private schemaCurrent(): boolean {
    try {
      const rows = this.db.prepare("SELECT key, value FROM tenure_schema WHERE key IN ('version', 'clock')").all();
      const get = (key: string): unknown => rows.find((r) => r.key === key)?.value;
      return get('version') === SCHEMA_VERSION && get('clock') === this.clock.epoch;
    } catch {
      return false; // no schema table yet
    }
  }

  private prepare(): Statements {
    const p = (sql: string): SqliteStatement => this.db.prepare(sql);
    return {
      // The term as text: exact at any size and in either driver, checked by decodeTerm.
      getLease: p(`SELECT name, owner, ${TERM_TEXT}, expires_at, ttl_ms, meta FROM tenure_leases WHERE name = ?`),
      putLease: p(
        `INSERT INTO tenure_leases (name, owner, term, expires_at, ttl_ms, meta) VALUES (?, ?, ?, ?, ?, ?)
         ON CONFLICT (name) DO UPDATE SET owner = excluded.owner, term = excluded.term,
           expires_at = excluded.expires_at, ttl_ms = excluded.ttl_ms, meta = excluded.meta`,
      ),
      listLeases: p(
        `SELECT name, owner, ${TERM_TEXT}, expires_at, ttl_ms, meta FROM tenure_leases WHERE name >= ? AND owner IS NOT NULL AND expires_at > ? ORDER BY name`,
      ),
      getFence: p('SELECT max_term FROM tenure_fences WHERE name = ?'),
      putFence: p('INSERT INTO tenure_fences (name, max_term) VALUES (?, ?) ON CONFLICT (name) DO UPDATE SET max_term = excluded.max_term'),
      lastSeq: p('SELECT max(seq) AS seq FROM tenure_streams WHERE stream = ?'),
      firstEntryLease: p('SELECT lease FROM tenure_streams WHERE stream = ? AND seq = 1'),
      // A version 1 file opened read-only has no append times; its store refuses writes before
      // running any statement (see write), so nothing is prepared for them.
      insertEntry: !this.hasAppendTimes ? p('SELECT 1 WHERE 0') : p('INSERT INTO tenure_streams (stream, seq, lease, term, payload, appended_at) VALUES (?, ?, ?, ?, ?, ?)'),
      readEntries: p(
        `SELECT CAST(seq AS TEXT) AS seq, lease, CAST(term AS TEXT) AS term, payload, ${this.hasAppendTimes ? 'appended_at' : '0 AS appended_at'} FROM tenure_streams WHERE stream = ? AND seq > ? ORDER BY tenure_streams.seq LIMIT ?`,
      ),
      readLastEntry: p(
        `SELECT CAST(seq AS TEXT) AS seq, lease, CAST(term AS TEXT) AS term, payload, ${this.hasAppendTimes ? 'appended_at' : '0 AS appended_at'} FROM tenure_streams WHERE stream = ? ORDER BY tenure_streams.seq DESC LIMIT 1`,
      ),
      dataVersion: p('PRAGMA data_version'),
    };
  }

  /**
   * readEntries for the worker thread: a position or term that is a safe integer comes back as a
   * number (no text to parse), anything else as text, which the main thread's decoding refuses
   * exactly as it does on its own reads.
   */
  private readEntriesOffThread(): string {
    const safe = (column: string, min: number): string =>
      `CASE WHEN typeof(${column}) = 'integer' AND ${column} BETWEEN ${min} AND ${Number.MAX_SAFE_INTEGER} THEN ${column} ELSE CAST(${column} AS TEXT) END`;
    return (
      `SELECT ${safe('seq', 1)} AS seq, lease, ${safe('term', 0)} AS term, payload, ${this.hasAppendTimes ? 'appended_at' : '0 AS appended_at'} ` +
      'FROM tenure_streams WHERE stream = ? AND seq > ? ORDER BY tenure_streams.seq LIMIT ?'
    );
  }

  private getRow(name: string): LeaseRow | undefined {
    const r = this.st.getLease.get(name);
    return r ? rowToLease(r) : undefined;
  }

  private putRow(row: LeaseRow): void {
    const invariant = this.getRow(row.name);
    // Safety rule 4, asserted where it is maintained: a term never goes back.
    if (invariant && row.term < invariant.term) throw new Error(`term went back for ${row.name}: ${row.term} < ${invariant.term}`);
    this.st.putLease.run(row.name, row.owner, row.term, row.expiresAtMs, row.ttlMs, JSON.stringify(row.meta));
  }

  /**
   * One `BEGIN IMMEDIATE` transaction. `durable` false: committed without waiting for the disk
   * (see WRITES). `checkpoint` false: this commit does not run SQLite's automatic WAL checkpoint
   * (copying the WAL into the database and syncing it, tens of milliseconds on a busy disk, on
   * this thread); lease calls leave it to appends, or to `checkpointLater`.
   */
  private transaction<T>(fn: () => T, durable = true, checkpoint = true): T {
    if (!durable) this.db.exec('PRAGMA synchronous = NORMAL');
    if (!checkpoint) this.db.exec('PRAGMA wal_autocheckpoint = 0');
    try {
      this.db.exec('BEGIN IMMEDIATE');
      let result: T;
      try {
        result = fn();
      } catch (err) {
        this.db.exec('ROLLBACK');
        throw err;
      }
      this.db.exec('COMMIT');
      return result;
    } finally {
      if (!durable) this.db.exec('PRAGMA synchronous = FULL');
      if (!checkpoint) this.db.exec(`PRAGMA wal_autocheckpoint = ${WAL_AUTOCHECKPOINT_PAGES}`);
    }
  }

  /**
   * After LEASE_COMMITS_PER_CHECKPOINT lease commits without an automatic checkpoint, run a
   * passive one soon, after the call has answered: without appends (a store used only for
   * election) nothing else would, and the WAL would grow without end.
   */
  private checkpointLater(): void {
    if (++this.leaseCommits < LEASE_COMMITS_PER_CHECKPOINT) return;
    this.leaseCommits = 0;
    setTimeout(() => {
      if (this.closed) return;
      try {
        this.db.exec('PRAGMA wal_checkpoint(PASSIVE)');
      } catch {
        // busy or failing: the next one will try again
      }
    }, 0).unref();
  }

  /** One write transaction; driver failures become StoreUnavailableError (nothing was committed). */
  private write<T>(operation: keyof typeof WRITES, fn: () => T, after?: (result: T) => void): Promise<T> {
    const { priority, durable } = WRITES[operation];
    if (this.readOnly) return Promise.reject(new StoreUnavailableError(`sqlite store ${this.path}: opened read-only, cannot ${operation}`));
    return this.run(operation, priority, () => {
      const result = this.transaction(fn, durable, priority !== 'lease');
      if (priority === 'lease') this.checkpointLater();
      after?.(result);
      return result;
    });
  }

  private query<T>(operation: string, fn: () => T): Promise<T> {
    return this.run(operation, 'read', fn);
  }

  /**
   * Run one synchronous driver call, starting in its own event-loop turn: the driver is
   * synchronous, so a loop of `await store.appendFenced(...)` would otherwise run on microtasks
   * alone and starve timers — including the elector's deadline timer that aborts leader work
   * (safety rule 2).
   *
   * A call that finds the database locked by another process waits for it (contention is not an
   * error): it polls the lock for one short slice (SLICE_MS, blocking), then yields to the event
   * loop and tries again — a lease call after one turn, a bulk call after a jittered back-off —
   * until `timeoutMs` has passed since the call began. A busy answer comes before anything is
   * written (BEGIN IMMEDIATE fails, or the transaction is rolled back), so every retry is safe.
   */
  private run<T>(operation: string, priority: Priority, fn: () => T): Promise<T> {
    const giveUpAt = performance.now() + this.timeoutMs;
    return new Promise<T>((resolve, reject) => {
      let slices = 0;
      const attempt = (): void => {
        if (this.closed) {
          reject(new ClosedError('sqlite store'));
          return;
        }
        const sliceEnd = Math.min(performance.now() + SLICE_MS[priority], giveUpAt);
        for (;;) {
          try {
            // An append stands back while another process's lease call waits for the lock.
            if (priority === 'bulk' && this.leaseWait.isUp()) throw new LeaseWaiting();
            resolve(fn());
            if (priority === 'bulk') this.bulkDoneAt = performance.now();
            else if (priority === 'lease') this.leaseWait.lower();
            return;
          } catch (err) {
            if (!isBusy(err) && !(err instanceof LeaseWaiting)) {
              reject(this.translate(err));
              return;
            }
            const now = performance.now();
            this.contendedAt = now;
            if (priority === 'lease') this.leaseWait.raise();
            if (now >= giveUpAt) {
              reject(
                new StoreUnavailableError(
                  `sqlite store ${this.path}: ${operation} found the database locked by other processes for ${this.timeoutMs} ms; nothing was written`,
                  { cause: err },
                ),
              );
              return;
            }
            if (now >= sliceEnd || err instanceof LeaseWaiting) break;
          }
          sleepSync(POLL_GAP_MS[priority] * (0.5 + Math.random()));
        }
        slices++;
        if (priority === 'lease') setImmediate(attempt);
        else {
          const backoff = Math.min(2 ** (slices - 2), BULK_BACKOFF_MAX_MS) * (0.5 + Math.random() / 2);
          setTimeout(attempt, Math.min(backoff, Math.max(0, giveUpAt - performance.now())));
        }
      };
      const now = performance.now();
      if (priority === 'bulk' && now - this.contendedAt < CONTENDED_MS && now - this.bulkDoneAt < POLITE_GAP_MS) setTimeout(attempt, POLITE_GAP_MS);
      else setImmediate(attempt);
    });
  }

  private translate(err: unknown): Error {
    if (err instanceof Error && 'code' in err && typeof err.code === 'string' && !err.code.startsWith('SQLITE') && !err.code.startsWith('ERR_SQLITE')) {
      return err; // our own typed errors
    }
    const message = err instanceof Error ? err.message : String(err);
    return new StoreUnavailableError(`sqlite store ${this.path}: ${message}`, { cause: err });
  }

  /** This store changed the name (`lease` taken, or null: released at `term`): tell its watchers at once. */
  private notifyLocal(name: string, lease: Lease | null, term: number): void {
    const w = this.watched.get(name);
    if (!w) return;
    const now = this.clock.now();
    w.last = lease ? { owner: lease.owner, term, expiresAtMs: now + lease.remainingMs } : { owner: null, term, expiresAtMs: 0 };
    for (const l of [...w.listeners]) queueMicrotask(() => l(lease));
  }

  private startPolling(): void {
    if (this.pollTimer || this.closed) return;
    this.pollTimer = setInterval(() => this.poll(), this.pollMs);
    this.pollTimer.unref();
  }

  private stopLocalAppends(): void {
    const local = localAppends.get(this.appendsKey);
    if (!local) return;
    local.delete(this.onLocalAppend);
    if (local.size === 0) localAppends.delete(this.appendsKey);
  }

  /** Tell a stream's listeners a head higher than the last they were told. */
  private tellStream(stream: string, head: number): void {
    const w = this.watchedStreams.get(stream);
    if (!w || head <= w.last) return;
    w.last = head;
    for (const l of [...w.listeners]) queueMicrotask(() => l(head));
  }

  private stopPolling(): void {
    if (this.pollTimer) clearInterval(this.pollTimer);
    this.pollTimer = null;
  }

  private poll(): void {
    if (this.closed) return;
    try {
      const version = Number(this.st.dataVersion.get()?.data_version ?? 0);
      const changed = version !== this.lastDataVersion;
      this.lastDataVersion = version;
      // Another connection committed: read the heads of the watched streams (one indexed read each).
      if (changed) for (const stream of this.watchedStreams.keys()) this.tellStream(stream, Number(this.st.lastSeq.get(stream)?.seq ?? 0));
      const now = this.clock.now();
      for (const [name, w] of this.watched) {
        const expired = w.last.owner !== null && w.last.expiresAtMs <= now;
        if (!changed && !expired) continue;
        const row = this.getRow(name);
        const before = w.last;
        w.last = seen(row, now);
        if (before.owner === w.last.owner && before.term === w.last.term) continue; // a renewal, or still free
        const lease = isLive(row, now) ? toLease(row, now) : null;
        for (const l of [...w.listeners]) l(lease);
      }
    } catch {
      // A busy or failing database is retried on the next tick; callers see errors on their own calls.
    }
  }
}

/** A watched name as a look at its row finds it (see Watched.last). */
function seen(row: LeaseRow | undefined, now: number): Watched['last'] {
  if (isLive(row, now)) return { owner: row.owner, term: row.term, expiresAtMs: row.expiresAtMs };
  return { owner: null, term: row?.term ?? 0, expiresAtMs: 0 };
}

/**
 * A lease row's term, read as text so that neither driver rounds or rejects a term beyond 2^53 - 1
 * before decodeTerm sees it (better-sqlite3 would round it, node:sqlite throw a RangeError).
 */
const TERM_TEXT = 'CAST(term AS TEXT) AS term';

function rowToLease(r: SqlRow): LeaseRow {
  const name = String(r.name);
  return {
    name,
    owner: r.owner === null || r.owner === undefined ? null : String(r.owner),
    term: decodeTerm('sqlite', name, r.term),
    expiresAtMs: Number(r.expires_at),
    ttlMs: Number(r.ttl_ms),
    meta: decodeMeta(r.meta === null || r.meta === undefined ? null : String(r.meta)),
  };
}

