/**
 * StateCell (Model A, shared state): one JSON document per group, written by the group's leader
 * and read or followed by everyone else.
 *
 * The cell is a fenced stream with one entry per write; its version is the seq of the entry that
 * holds the current document. A write is `appendFenced(token, stream, document, { expectSeq })`:
 * the store checks the token's term against the highest it accepted for the lease AND the
 * stream's head against the expected version in the same atomic step (safety rule 5), so a
 * deposed leader gets StaleTermError and a writer that lost a race gets VersionConflictError,
 * both with nothing written.
 *
 * Reading the current value is one read of the stream's last entry (`Store.readLast`, every
 * built-in store has it; a store without it is paged through from the last version this cell saw).
 * Followers that want every version in order read the stream after the last one they saw, so
 * none is skipped however fast the leader writes. They poll (`pollMs`), and are woken at once by
 * `wake()` and by writes through the same StateCell object; the one place where store push will
 * replace polling is `appendWaiter` below.
 *
 * Growth: the stream keeps every version (one entry per write, the document's size each), which
 * is what lets a follower see every version, and an audit read them back. There is no trim: a
 * cell is meant for a document that changes on decisions (membership, assignments, config), not
 * on every request. See docs/replication.md, "Model A - shared state".
 */
import {
  InvalidArgumentError,
  StoreDataError,
  StoreUnavailableError,
  VersionConflictError,
  checkMs,
  checkName,
  checkToken,
  limits,
} from '../core/index.js';
import type { FencingToken, JsonValue, Store, StreamEntry, Unsubscribe } from '../core/index.js';

/** One version of the cell: the document, the version (its entry's seq) and the token that wrote it. */
export interface CellVersion<T> {
  /** The seq of the entry holding this document in the cell's stream: 1, 2, 3… (0 = never written). */
  readonly version: number;
  readonly document: T;
  /** The fencing term of the leader that wrote this version. */
  readonly term: number;
  /** The lease (the group) the writing token was issued under. */
  readonly lease: string;
}

export interface StateCellOptions<T> {
  readonly store: Store;
  /** The group whose leader writes the cell: every write's token must be of this lease. */
  readonly group: string;
  /** The fenced stream holding the versions (default `<group>.state`). One cell per stream. */
  readonly stream?: string;
  /**
   * Check (and convert) each stored document before it is returned: throw to refuse it, and the
   * read fails with StoreDataError naming the version. Default: any JSON value is accepted as T.
   */
  readonly decode?: (value: JsonValue) => T;
  /** How often a follower (versions, subscribe) looks for a new version, ms: 1..60000 (default 100). `wake()` cuts it short. */
  readonly pollMs?: number;
  /** First wait after a store failure while following, ms (doubles up to 5 s): 1..60000 (default 100). */
  readonly retryMs?: number;
  /** Consecutive store failures a follower rides out before it gives up with the last one: 0..1000 (default 20). */
  readonly maxRetries?: number;
}

export interface CellWriteOptions {
  /**
   * The version the write replaces (compare-and-set): the version last read, 0 for a cell never
   * written. Required: a cell is never overwritten blind.
   */
  readonly expectedVersion: number;
}

export interface CellFollowOptions {
  /**
   * Deliver every version after this one, in order (0: the whole history). Default: start with
   * the current version (if any), then every later one.
   */
  readonly after?: number;
  /** Stop following when this aborts. */
  readonly signal?: AbortSignal;
}

export interface CellSubscribeOptions extends CellFollowOptions {
  /**
   * Told the error that stopped the subscription: a StoreDataError (a version that is not a
   * document, a gap), the listener's own throw, or the last store failure after `maxRetries`.
   * Required, so that a subscription never stops silently.
   */
  readonly onError: (error: Error) => void;
}

export interface CellUpdateOptions {
  /** Read-modify-write rounds before a VersionConflictError is passed on: 1..100 (default 10). */
  readonly maxAttempts?: number;
}

const DEFAULTS = { pollMs: 100, retryMs: 100, maxRetries: 20, maxAttempts: 10 } as const;
const RETRY_MAX_MS = 5000;
/** Versions read per call while following (bounds a follower's memory to one page). */
const PAGE = 500;
/** Nesting depth of a document, at most (a bound for the check, and for whoever reads it). */
const MAX_DEPTH = 64;

function wholeNumber(field: string, value: unknown, min: number, max: number): number {
  if (typeof value !== 'number' || !Number.isSafeInteger(value) || value < min || value > max) {
    throw new InvalidArgumentError(field, `expected a whole number in [${min}, ${max}], got ${String(value)}`);
  }
  return value;
}

/** `value` is plain JSON (no undefined, functions, NaN, class instances, cycles), at most MAX_DEPTH deep. */
function checkDocument(value: unknown, path: string, depth: number): void {
  if (depth > MAX_DEPTH) throw new InvalidArgumentError('document', `nested deeper than ${MAX_DEPTH} levels at ${path}`);
  if (value === null || typeof value === 'string' || typeof value === 'boolean') return;
  if (typeof value === 'number') {
    if (!Number.isFinite(value)) throw new InvalidArgumentError('document', `${path} is ${value}, which JSON cannot hold`);
    return;
  }
  if (Array.isArray(value)) {
    value.forEach((v, i) => checkDocument(v, `${path}[${i}]`, depth + 1));
    return;
  }
  if (typeof value === 'object') {
    const proto = Object.getPrototypeOf(value) as unknown;
    if (proto !== Object.prototype && proto !== null) throw new InvalidArgumentError('document', `${path} is not a plain object or array`);
    for (const [k, v] of Object.entries(value)) checkDocument(v, `${path}.${k}`, depth + 1);
    return;
  }
  throw new InvalidArgumentError('document', `${path} is a ${typeof value}, which JSON cannot hold`);
}

export class StateCell<T = JsonValue> {
  readonly group: string;
  readonly stream: string;
  private readonly store: Store;
  private readonly decodeFn: (value: JsonValue) => T;
  private readonly pollMs: number;
  private readonly retryMs: number;
  private readonly maxRetries: number;
  /** The newest entry this object has read or written (the start of a scan on a store without readLast). */
  private newest: StreamEntry | null = null;
  /** Followers waiting for a new version: each resolves its wait. */
  private readonly waiters = new Set<() => void>();

  constructor(options: StateCellOptions<T>) {
    if (typeof options !== 'object' || options === null) throw new InvalidArgumentError('options', 'expected an object');
    if (typeof options.store?.appendFenced !== 'function' || typeof options.store.readStream !== 'function') {
      throw new InvalidArgumentError('store', 'expected a Store');
    }
    if (options.decode !== undefined && typeof options.decode !== 'function') throw new InvalidArgumentError('decode', 'expected a function (value) => document');
    this.store = options.store;
    this.group = checkName('group', options.group);
    this.stream = checkName('stream', options.stream ?? `${options.group}.state`);
    this.decodeFn = options.decode ?? ((value) => value as T);
    this.pollMs = checkMs('pollMs', options.pollMs ?? DEFAULTS.pollMs, 1, 60_000);
    this.retryMs = checkMs('retryMs', options.retryMs ?? DEFAULTS.retryMs, 1, 60_000);
    this.maxRetries = wholeNumber('maxRetries', options.maxRetries ?? DEFAULTS.maxRetries, 0, 1000);
  }

  /**
   * The current version, or null when the cell was never written. One read of the stream's last
   * entry. Rejects with StoreDataError when that entry is not a document of this cell (not
   * JSON, refused by `decode`, or written under another lease), StoreUnavailableError when the
   * store did not answer.
   */
  async read(): Promise<CellVersion<T> | null> {
    const last = this.store.readLast ? await this.store.readLast(this.stream) : await this.scanToEnd();
    if (last && (this.newest === null || last.seq > this.newest.seq)) this.newest = last;
    return last ? this.decodeEntry(last) : null;
  }

  /**
   * Write `document` as the next version, iff `token` is not stale for the group AND the cell is
   * still at `expectedVersion`, both checked by the store in the same atomic step as the write.
   * Returns the version written (expectedVersion + 1).
   *
   * Rejects, with nothing written: StaleTermError (a newer leader has written under the group:
   * this one is deposed), VersionConflictError (the cell moved on; `current` is its version:
   * read again and decide anew, or use `update`), InvalidArgumentError (a token of another lease
   * or a term never issued, a document that is not JSON, is over 1 MiB or that `decode` refuses).
   * StoreUnavailableError
   * means the outcome is unknown: read the cell to see whether the version landed.
   */
  async write(token: FencingToken, document: T, options: CellWriteOptions): Promise<CellVersion<T>> {
    checkToken('token', token);
    if (token.lease !== this.group) {
      throw new InvalidArgumentError('token.lease', `the cell of group ${JSON.stringify(this.group)} is written with that group's token, got a token of lease ${JSON.stringify(token.lease)}`);
    }
    if (typeof options !== 'object' || options === null) throw new InvalidArgumentError('options', 'expected { expectedVersion }: the version this write replaces (0 for a new cell)');
    const expected = wholeNumber('expectedVersion', options.expectedVersion, 0, Number.MAX_SAFE_INTEGER - 1);
    checkDocument(document, 'document', 0);
    const payload = JSON.stringify(document);
    if (Buffer.byteLength(payload) > limits.payloadMaxBytes) {
      throw new InvalidArgumentError('document', `must be at most ${limits.payloadMaxBytes} bytes as JSON, got ${Buffer.byteLength(payload)}`);
    }
    // What followers will decode, checked before it is written: a document `decode` refuses is
    // bad input here, never garbage in the store for every reader after.
    let written: T;
    try {
      written = this.decodeFn(JSON.parse(payload) as JsonValue);
    } catch (err) {
      throw new InvalidArgumentError('document', `refused by decode: ${err instanceof Error ? err.message : String(err)}`);
    }
    const seq = await this.store.appendFenced(token, this.stream, payload, { expectSeq: expected });
    if (seq !== expected + 1) {
      // The store appended without the compare-and-set: a Store written before expectSeq existed.
      throw new StoreDataError(
        `state cell ${JSON.stringify(this.group)}: the store wrote version ${seq} where ${expected + 1} was expected; ` +
          `its appendFenced ignores { expectSeq }, so it cannot hold a state cell (store kind ${this.store.kind})`,
      );
    }
    // Its append time is the store's to tell; 0 (unknown) here, where only the seq and document matter.
    const entry: StreamEntry = { stream: this.stream, seq, lease: token.lease, term: token.term, payload, appendedAt: 0 };
    if (this.newest === null || seq > this.newest.seq) this.newest = entry;
    this.wake();
    return { version: seq, document: written, term: token.term, lease: token.lease };
  }

  /**
   * Read-modify-write: `next(current)` (current is null for a new cell) gives the document to
   * write over the version just read; on VersionConflictError the cell is read again and `next`
   * called again, up to `maxAttempts` rounds. StaleTermError ends it at once (deposed).
   */
  async update(token: FencingToken, next: (current: CellVersion<T> | null) => T | Promise<T>, options: CellUpdateOptions = {}): Promise<CellVersion<T>> {
    if (typeof next !== 'function') throw new InvalidArgumentError('next', 'expected a function (current) => document');
    const maxAttempts = wholeNumber('maxAttempts', options.maxAttempts ?? DEFAULTS.maxAttempts, 1, 100);
    for (let attempt = 1; ; attempt++) {
      const current = await this.read();
      const document = await next(current);
      try {
        return await this.write(token, document, { expectedVersion: current?.version ?? 0 });
      } catch (err) {
        if (err instanceof VersionConflictError && attempt < maxAttempts) continue;
        throw err;
      }
    }
  }

  /**
   * Every version in order, as an async iterator: the current one first (or every one after
   * `options.after`), then each new one as it is written, none skipped. Ends when the signal
   * aborts (or the loop breaks). Throws StoreDataError for a version that is not a document of
   * this cell or a gap in the stream, and the last store failure after `maxRetries` in a row.
   */
  async *versions(options: CellFollowOptions = {}): AsyncGenerator<CellVersion<T>, void, undefined> {
    const signal = options.signal;
    let seen: number;
    let lastTerm = 0;
    if (options.after !== undefined) {
      seen = wholeNumber('after', options.after, 0, Number.MAX_SAFE_INTEGER);
    } else {
      const current = await this.retrying(() => this.read(), signal);
      if (current === undefined) return;
      seen = current?.version ?? 0;
      if (current) {
        lastTerm = current.term;
        yield current;
      }
    }
    const waiter = this.appendWaiter(signal);
    try {
      while (!signal?.aborted) {
        const page = await this.retrying(() => this.store.readStream(this.stream, { after: seen, limit: PAGE }), signal);
        if (page === undefined) return;
        if (page.length === 0) {
          await waiter.wait(seen);
          continue;
        }
        for (const entry of page) {
          if (entry.seq !== seen + 1) {
            throw new StoreDataError(`state cell ${JSON.stringify(this.group)}: expected version ${seen + 1} after ${seen} in stream ${JSON.stringify(this.stream)}, the store returned ${entry.seq}`);
          }
          if (entry.term < lastTerm) {
            throw new StoreDataError(`state cell ${JSON.stringify(this.group)}: version ${entry.seq} has term ${entry.term}, lower than the term ${lastTerm} before it (the stream is not fenced)`);
          }
          const version = this.decodeEntry(entry);
          seen = entry.seq;
          lastTerm = entry.term;
          if (this.newest === null || entry.seq > this.newest.seq) this.newest = entry;
          yield version;
          if (signal?.aborted) return;
        }
      }
    } finally {
      waiter.close();
    }
  }

  /**
   * Call `listener` with every version in order (as `versions`), one at a time: the next is not
   * delivered before the listener's promise settles. Returns the unsubscribe function. Whatever
   * stops the subscription other than unsubscribing is told to `onError` (a listener that throws
   * stops it too).
   */
  subscribe(listener: (version: CellVersion<T>) => void | Promise<void>, options: CellSubscribeOptions): Unsubscribe {
    if (typeof listener !== 'function') throw new InvalidArgumentError('listener', 'expected a function (version) => void');
    if (typeof options?.onError !== 'function') throw new InvalidArgumentError('onError', 'expected a function (error) => void: a subscription must not stop silently');
    const stop = new AbortController();
    const outer = options.signal;
    const abort = (): void => stop.abort();
    if (outer?.aborted) stop.abort();
    else outer?.addEventListener('abort', abort, { once: true });
    const follow = async (): Promise<void> => {
      for await (const version of this.versions({ after: options.after, signal: stop.signal })) await listener(version);
    };
    follow()
      .catch((err: unknown) => {
        if (!stop.signal.aborted) options.onError(err instanceof Error ? err : new Error(String(err)));
      })
      .finally(() => outer?.removeEventListener('abort', abort));
    return () => stop.abort();
  }

  /** Look for a new version now instead of waiting out `pollMs` (call it when told of a write). */
  wake(): void {
    for (const resume of [...this.waiters]) resume();
  }

  /**
   * How one follower waits until the cell's stream may hold a version after `seen`: `pollMs`
   * passed, `wake()` was called (a write through this object calls it), or the signal aborted,
   * whichever comes first. Made once per follower (`versions`), closed when it ends.
   *
   * Store push is wired here, and only here. When the store has
   * `watchStream(stream, listener(head))` (PostgreSQL, Redis, etcd, SQLite, memory), this opens
   * one watch on `this.stream` for the follower's life, and `wait(seen)` also resumes as soon as a
   * head > `seen` is heard (or was heard since the last wait); the poll stays as the fallback for a
   * missed notification, so a follower learns of a write at most `pollMs` late, and usually at once.
   */
  private appendWaiter(signal: AbortSignal | undefined): { wait(seen: number): Promise<void>; close(): void } {
    if (typeof this.store.watchStream !== 'function') {
      return { wait: () => this.pause(this.pollMs, signal), close: () => {} };
    }
    let heard = 0;
    let resume: (() => void) | null = null;
    let unsubscribe: Unsubscribe | null = null;
    try {
      unsubscribe = this.store.watchStream(this.stream, (head) => {
        if (head > heard) heard = head;
        resume?.();
      });
    } catch {
      // A store that cannot watch now (closing) still polls.
      unsubscribe = null;
    }
    return {
      wait: (seen) => {
        if (heard > seen) return Promise.resolve();
        // wake() resumes every pause of this cell; the watch resumes this follower's own.
        const pause = this.pausable(this.pollMs, signal);
        resume = pause.resume;
        return pause.done.finally(() => {
          if (resume === pause.resume) resume = null;
        });
      },
      close: () => {
        resume = null;
        unsubscribe?.();
      },
    };
  }

  /** Sleep `ms`, cut short by wake() or the signal. */
  private pause(ms: number, signal: AbortSignal | undefined): Promise<void> {
    return this.pausable(ms, signal).done;
  }

  /** A pause (as `pause`) that its caller can also cut short itself, with `resume`. */
  private pausable(ms: number, signal: AbortSignal | undefined): { done: Promise<void>; resume: () => void } {
    if (signal?.aborted) return { done: Promise.resolve(), resume: () => {} };
    let finish: () => void = () => {};
    const done = new Promise<void>((resolve) => {
      finish = (): void => {
        clearTimeout(timer);
        this.waiters.delete(finish);
        signal?.removeEventListener('abort', finish);
        resolve();
      };
      const timer = setTimeout(finish, ms);
      this.waiters.add(finish);
      signal?.addEventListener('abort', finish, { once: true });
    });
    return { done, resume: finish };
  }

  /**
   * `call`, tried again after a store failure (StoreUnavailableError) with a doubling wait, up to
   * `maxRetries` failures in a row. Any other error is passed on at once. Undefined when the
   * signal aborted first.
   */
  private async retrying<R>(call: () => Promise<R>, signal: AbortSignal | undefined): Promise<R | undefined> {
    for (let failures = 0; ; ) {
      if (signal?.aborted) return undefined;
      try {
        return await call();
      } catch (err) {
        if (!(err instanceof StoreUnavailableError)) throw err;
        failures += 1;
        if (failures > this.maxRetries) throw err;
        await this.pause(Math.min(RETRY_MAX_MS, this.retryMs * 2 ** Math.min(failures - 1, 16)), signal);
      }
    }
  }

  /** The last entry without readLast: page forward from the newest entry this object knows. */
  private async scanToEnd(): Promise<StreamEntry | null> {
    let last = this.newest;
    for (;;) {
      const page = await this.store.readStream(this.stream, { after: last?.seq ?? 0, limit: limits.readLimitMax });
      if (page.length === 0) return last;
      last = page[page.length - 1]!;
      if (page.length < limits.readLimitMax) return last;
    }
  }

  private decodeEntry(entry: StreamEntry): CellVersion<T> {
    const where = `state cell ${JSON.stringify(this.group)}: version ${entry.seq} (stream ${JSON.stringify(this.stream)})`;
    if (entry.lease !== this.group) throw new StoreDataError(`${where} was written under lease ${JSON.stringify(entry.lease)}, not the group's`);
    let value: JsonValue;
    try {
      value = JSON.parse(entry.payload) as JsonValue;
    } catch {
      throw new StoreDataError(`${where} is not a JSON document: ${JSON.stringify(entry.payload.slice(0, 40))}${entry.payload.length > 40 ? '…' : ''}`);
    }
    let document: T;
    try {
      document = this.decodeFn(value);
    } catch (err) {
      throw new StoreDataError(`${where} was refused by decode: ${err instanceof Error ? err.message : String(err)}`);
    }
    return { version: entry.seq, document, term: entry.term, lease: entry.lease };
  }
}
