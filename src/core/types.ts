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
}

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
   * InvalidArgumentError (nothing written). Returns the entry's sequence number.
   */
  appendFenced(token: FencingToken, stream: string, payload: string): Promise<number>;
  readStream(stream: string, options?: ReadStreamOptions): Promise<StreamEntry[]>;
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
  /** Optional push: `listener` is called after the lease changes hands, is released or renewed. */
  watch?(name: string, listener: WatchListener): Unsubscribe;
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
