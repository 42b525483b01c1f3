/**
 * The lease record, the fencing token and the Store seam every backend implements.
 */

/** Small JSON the holder publishes (its URL, version, started-at) so followers can find it. */
export type LeaseMeta = { readonly [key: string]: JsonValue };
export type JsonValue = string | number | boolean | null | readonly JsonValue[] | { readonly [key: string]: JsonValue };

/**
 * A live lease as the store sees it at the moment it answered.
 * `remainingMs` is measured by the store's own clock (safety rule 1): never compare it with a
 * wall clock, only add it to a local monotonic instant.
 */
export interface Lease {
  readonly name: string;
  /** The holder's incarnation id (node id + per-process suffix). */
  readonly owner: string;
  /** The generation clock and fencing term; bumped by the store on every change of holder. */
  readonly term: number;
  readonly meta: LeaseMeta;
  /** The TTL of the last acquire or renew, in ms. */
  readonly ttlMs: number;
  /** Time left before the store lets another owner take the lease, in ms, as the store saw it. */
  readonly remainingMs: number;
}

export interface AcquireResult {
  /** True when `owner` holds the lease after the call (a new term or a live renewal of its own). */
  readonly acquired: boolean;
  /** The holder after the call: ours when acquired, the current live holder when not. */
  readonly lease: Lease;
  /**
   * True when the store gave the lease to this owner in one atomic step that also found no lease
   * named `transferHintName(name)` (the etcd and PostgreSQL stores' hand-over in a release; the
   * MySQL store's acquire, which reads the hint in its transaction), or that listed no hint
   * right behind its win, answered after it (ZooKeeper: one session answers in order). A hand-over hint
   * read after this win can then be skipped: it could only find a hint written after the win,
   * which only the winner may write. Absent (or false) means nothing is known: read it.
   */
  readonly noTransferHint?: boolean;
}

export interface RenewResult {
  readonly renewed: boolean;
  /** The live lease after the call, ours when renewed; whoever holds it (or null) when not. */
  readonly lease: Lease | null;
}

/** One entry of a fenced stream. */
export interface StreamEntry {
  readonly stream: string;
  /** Position in the stream, 1-based, gap-free, assigned by the store. */
  readonly seq: number;
  /** The lease name of the token that wrote it. */
  readonly lease: string;
  readonly term: number;
  readonly payload: string;
  /**
   * When the store accepted the entry, ms since the Unix epoch by the STORE's clock (PostgreSQL
   * `clock_timestamp()`, MySQL `NOW(3)`, Redis `TIME`, the host's clock for SQLite and memory; on
   * etcd, which has no readable clock, the appending client's wall clock). Compare it only with
   * `StreamHead.nowMs` of the same store (safety rule 1), never with a local wall clock. 0 when
   * unknown (an entry written before the store recorded append times and never migrated).
   */
  readonly appendedAt: number;
}

/** Options of `Store.appendFenced`. */
export interface AppendFencedOptions {
  /**
   * Compare-and-set on the stream's head: append only if the stream's last seq is exactly this
   * (0: the stream is empty), checked in the same atomic step as the fence. Otherwise the append
   * is refused with VersionConflictError carrying the current head, nothing written (no entry,
   * no fence raised). A stale term is reported as StaleTermError first, whatever the head.
   * A safe integer >= 0. Absent: append at the head, whatever it is.
   */
  readonly expectSeq?: number;
}

/** A stream's head and the store's own time, read in one step (see `Store.streamHead`). */
export interface StreamHead {
  /** The seq of the stream's last entry (0 for a stream never written). */
  readonly seq: number;
  /** The store's current time, ms since the Unix epoch, on the same clock as `StreamEntry.appendedAt`. */
  readonly nowMs: number;
}

/** Told a stream's head seq after appends (see `Store.watchStream`). */
export type StreamListener = (head: number) => void;

export interface ReadStreamOptions {
  /** Return entries with seq greater than this (default 0: from the start). */
  readonly after?: number;
  /** At most this many entries (default 1000, max 10000). */
  readonly limit?: number;
}

/** Called with the live lease after a change, or null when the lease was released or expired. */
export type WatchListener = (lease: Lease | null) => void;
export type Unsubscribe = () => void;

/**
 * The one seam for backends. Every method is atomic in the store; a rejected promise with
 * StoreUnavailableError means the outcome is unknown (safety rule 3).
 */
export interface Store {
  /** Short name of the backend ("memory", "sqlite", ...). */
  readonly kind: string;
  /**
   * Take the lease if it is free or expired (new term = previous term + 1), or extend it if
   * `owner` holds it live (same term). Otherwise report the live holder.
   */
  acquire(name: string, owner: string, ttlMs: number, meta?: LeaseMeta): Promise<AcquireResult>;
  /** Extend the lease iff `owner` holds it live with `term` (compare-and-set). */
  renew(name: string, owner: string, term: number, ttlMs: number): Promise<RenewResult>;
  /** Give the lease up iff `owner` holds it with `term`. Returns whether it did. The term is kept. */
  release(name: string, owner: string, term: number): Promise<boolean>;
  /** The live lease, or null when nobody holds it. */
  read(name: string): Promise<Lease | null>;
  /** Every live lease whose name starts with `prefix`, sorted by name. */
  list(prefix?: string): Promise<Lease[]>;
  /**
   * Append `payload` to `stream` iff `token.term` is >= the highest term accepted so far for
   * `token.lease`, in the same atomic step as the write. Rejects with StaleTermError (nothing
   * written) otherwise. A term the store never issued for the lease, and a stream whose first
   * entry was written under another lease (a stream belongs to one lease), are rejected with
   * InvalidArgumentError (nothing written). With `options.expectSeq`, also a compare-and-set on
   * the stream's head in that same step (VersionConflictError, nothing written, when it moved).
   * Returns the entry's sequence number.
   */
  appendFenced(token: FencingToken, stream: string, payload: string, options?: AppendFencedOptions): Promise<number>;
  readStream(stream: string, options?: ReadStreamOptions): Promise<StreamEntry[]>;
  /**
   * Optional: the stream's last entry (the one with the highest seq), or null for a stream never
   * written, in one indexed read (no scan of the stream). Every built-in store has it; without it
   * a reader must page through the stream with `readStream`.
   */
  readLast?(stream: string): Promise<StreamEntry | null>;
  /**
   * Optional batched renewal: extend every listed lease that `owner` holds live with the given
   * term, in one atomic step where the store allows (one statement on SQL), and report each
   * outcome in the order given, as `renew` would. A node holding many leases renews all of them
   * in one round trip per interval and learns in the same reply which ones it lost.
   * Names must be distinct.
   */
  renewMany?(owner: string, leases: readonly RenewManyItem[], ttlMs: number): Promise<RenewResult[]>;
  /**
   * Optional: create or upgrade the store's tables now (stores with a schema otherwise do it on
   * first use). Safe to call concurrently from many processes. `tenure migrate` calls it.
   */
  migrate?(): Promise<void>;
  /**
   * Optional: delete every lease, fence and stream whose name starts with `prefix` (a non-empty
   * string), in one transaction where the store allows; resolves with how many rows or keys went.
   * For tools that made their own names and must leave nothing behind (`tenure chaos`); never call
   * it on names something still uses (a holder of a purged lease is not told).
   */
  purge?(prefix: string): Promise<number>;
  /** Optional push: `listener` is called after the lease changes hands, is released or renewed. */
  watch?(name: string, listener: WatchListener): Unsubscribe;
  /**
   * Optional: `owner` no longer waits for `name` (its elector stopped without leading). A store
   * that keeps something for a waiting candidate (PostgreSQL's hand-over reservation) drops it
   * now, so no release hands the lease to a candidate that is gone. Best effort: never rejects.
   */
  withdraw?(name: string, owner: string): Promise<void>;
  /**
   * Optional push for streams: `listener` is called with the stream's new head seq after appends
   * (by any writer, in any process). Several appends may be told as one call with the latest head,
   * but the last append is always told. After a lost connection is re-established the store tells
   * the current head, so nothing appended meanwhile goes unnoticed. A listener may also be called
   * with a head it was told before. Stores without push (MySQL) leave it out: poll `readStream`.
   */
  watchStream?(stream: string, listener: (head: number) => void): Unsubscribe;
  /**
   * Optional: the stream's head and the store's current time in one step, so that a follower can
   * compute its lag in ms as `nowMs - appendedAt` with both instants on the store's clock (safety
   * rule 1). Stores with no readable clock (etcd) leave it out.
   */
  streamHead?(stream: string): Promise<StreamHead>;
  close(): Promise<void>;
}

/** One lease of a batched renewal: its name and the term the caller holds it with. */
export interface RenewManyItem {
  readonly name: string;
  readonly term: number;
}

/** The fencing token: the lease it was issued under and its term. */
export interface FencingToken {
  readonly lease: string;
  readonly term: number;
}
