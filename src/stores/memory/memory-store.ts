/**
 * `memory:` — every lease, fence and stream in one process's memory. For tests, simulation and
 * single-process use. Expiry follows the injected clock, which is the store's own clock.
 */
import {
  ClosedError,
  checkPurgePrefix,
  StaleTermError,
  InvalidArgumentError,
  VersionConflictError,
  checkAppendOptions,
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
  decideRelease,
  renewLease,
  decodeMeta,
  encodeMeta,
  foreignStreamError,
  isLive,
  reportStale,
  systemClock,
  toLease,
} from '../../core/index.js';
import type {
  AcquireResult,
  AppendFencedOptions,
  Clock,
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

export interface MemoryStoreOptions {
  /** The store's clock (default: the system's monotonic clock). */
  clock?: Clock;
  /**
   * The clock of entries' append times and of `streamHead().nowMs`, ms since the epoch (default
   * Date.now). One process, one clock: lag computed from the two never crosses machines.
   */
  wallClock?: () => number;
  /**
   * Report a refused stale append into this process's fenced-rejection feed (`onFencedRejection`),
   * as every store does where the refusal reaches the writer. Default true. A memory store that
   * stands for a store in other processes (the simulator's model of a remote store) sets false,
   * and its caller reports each refusal when the writer receives it.
   */
  reportRejections?: boolean;
}

export class MemoryStore implements Store {
  readonly kind = 'memory';
  private readonly clock: Clock;
  private readonly leases = new Map<string, LeaseRow>();
  private readonly fences = new Map<string, number>();
  private readonly streams = new Map<string, StreamEntry[]>();
  private readonly watchers = new Map<string, Set<WatchListener>>();
  private readonly streamWatchers = new Map<string, Set<(head: number) => void>>();
  private readonly wallClock: () => number;
  private readonly reportRejections: boolean;
  private closed = false;

  constructor(options: MemoryStoreOptions = {}) {
    this.clock = options.clock ?? systemClock;
    this.wallClock = options.wallClock ?? Date.now;
    this.reportRejections = options.reportRejections ?? true;
  }

  acquire(name: string, owner: string, ttlMs: number, meta?: LeaseMeta): Promise<AcquireResult> {
    return this.op(() => {
      checkName('name', name);
      checkOwner('owner', owner);
      checkTtl('ttlMs', ttlMs);
      const metaCopy = decodeMeta(encodeMeta('meta', meta));
      const now = this.clock.now();
      const decision = decideAcquire(this.leases.get(name), name, owner, ttlMs, metaCopy, now);
      if (!decision.acquired) return { acquired: false, lease: toLease(decision.row, now) };
      this.leases.set(name, decision.row);
      const lease = toLease(decision.row as LeaseRow & { owner: string }, now);
      if (decision.newTerm) this.notify(name, lease);
      return { acquired: true, lease };
    });
  }

  renew(name: string, owner: string, term: number, ttlMs: number): Promise<RenewResult> {
    return this.op(() => {
      checkName('name', name);
      checkOwner('owner', owner);
      checkTerm('term', term);
      checkTtl('ttlMs', ttlMs);
      const now = this.clock.now();
      return renewLease(this.leases.get(name), owner, term, ttlMs, now, (row) => this.leases.set(name, row));
    });
  }

  /** Every lease of the batch renewed or reported in one atomic step. */
  renewMany(owner: string, leases: readonly RenewManyItem[], ttlMs: number): Promise<RenewResult[]> {
    return this.op(() => {
      checkOwner('owner', owner);
      checkTtl('ttlMs', ttlMs);
      checkRenewItems(leases);
      const now = this.clock.now();
      return leases.map(({ name, term }): RenewResult => {
        return renewLease(this.leases.get(name), owner, term, ttlMs, now, (row) => this.leases.set(name, row));
      });
    });
  }

  release(name: string, owner: string, term: number): Promise<boolean> {
    return this.op(() => {
      checkName('name', name);
      checkOwner('owner', owner);
      checkTerm('term', term);
      const next = decideRelease(this.leases.get(name), owner, term, this.clock.now());
      if (next === null) return false;
      this.leases.set(name, next);
      this.notify(name, null);
      return true;
    });
  }

  read(name: string): Promise<Lease | null> {
    return this.op(() => {
      checkName('name', name);
      const now = this.clock.now();
      const row = this.leases.get(name);
      return isLive(row, now) ? toLease(row, now) : null;
    });
  }

  list(prefix = ''): Promise<Lease[]> {
    return this.op(() => {
      const now = this.clock.now();
      const out: Lease[] = [];
      for (const row of this.leases.values()) {
        if (row.name.startsWith(prefix) && isLive(row, now)) out.push(toLease(row, now));
      }
      return out.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
    });
  }

  /** Delete every lease, fence and stream whose name starts with `prefix`; how many went. */
  async purge(prefix: string): Promise<number> {
    checkPurgePrefix(prefix);
    return await this.op(() => {
      let n = 0;
      for (const map of [this.leases, this.fences, this.streams] as Map<string, unknown>[]) {
        for (const name of [...map.keys()]) if (name.startsWith(prefix) && map.delete(name)) n++;
      }
      return n;
    });
  }

  appendFenced(token: FencingToken, stream: string, payload: string, options?: AppendFencedOptions): Promise<number> {
    return this.op(() => {
      checkToken('token', token);
      checkName('stream', stream);
      checkPayload('payload', payload);
      const expectSeq = checkAppendOptions(options);
      const highest = this.fences.get(token.lease) ?? 0;
      const leaseTerm = this.leases.get(token.lease)?.term ?? 0;
      const verdict = decideFence(token.term, highest, leaseTerm);
      if (verdict === 'stale') {
        const error = new StaleTermError(token.lease, token.term, highest);
        throw this.reportRejections ? reportStale(error, { stream }) : error;
      }
      if (verdict === 'unissued') {
        throw new InvalidArgumentError('token.term', `term ${token.term} was never issued for lease ${token.lease} (latest ${leaseTerm})`);
      }
      let entries = this.streams.get(stream);
      const owner = entries?.[0]?.lease;
      if (owner !== undefined && owner !== token.lease) throw foreignStreamError(stream, owner, token.lease);
      const head = entries?.length ?? 0;
      if (expectSeq !== undefined && expectSeq !== head) throw new VersionConflictError(stream, expectSeq, head);
      this.fences.set(token.lease, token.term);
      if (!entries) this.streams.set(stream, (entries = []));
      const seq = entries.length + 1;
      entries.push({ stream, seq, lease: token.lease, term: token.term, payload, appendedAt: Math.floor(this.wallClock()) });
      this.notifyStream(stream, seq);
      return seq;
    });
  }

  readStream(stream: string, options?: ReadStreamOptions): Promise<StreamEntry[]> {
    return this.op(() => {
      checkName('stream', stream);
      const { after, limit } = checkReadOptions(options);
      // seq is 1-based and gap-free, so entry `after` sits at index `after`.
      return (this.streams.get(stream) ?? []).slice(after, after + limit);
    });
  }

  readLast(stream: string): Promise<StreamEntry | null> {
    return this.op(() => {
      checkName('stream', stream);
      return this.streams.get(stream)?.at(-1) ?? null;
    });
  }

  /** The stream's head and this store's wall clock, in one step. */
  streamHead(stream: string): Promise<StreamHead> {
    return this.op(() => {
      checkName('stream', stream);
      return { seq: this.streams.get(stream)?.length ?? 0, nowMs: Math.floor(this.wallClock()) };
    });
  }

  /** Push for streams: every append is told after its step (several may be told at once). */
  watchStream(stream: string, listener: (head: number) => void): Unsubscribe {
    checkName('stream', stream);
    if (this.closed) throw new ClosedError('memory store');
    let set = this.streamWatchers.get(stream);
    if (!set) this.streamWatchers.set(stream, (set = new Set()));
    set.add(listener);
    return () => {
      set.delete(listener);
      if (set.size === 0 && this.streamWatchers.get(stream) === set) this.streamWatchers.delete(stream);
    };
  }

  watch(name: string, listener: WatchListener): Unsubscribe {
    checkName('name', name);
    let set = this.watchers.get(name);
    if (!set) this.watchers.set(name, (set = new Set()));
    set.add(listener);
    return () => {
      set.delete(listener);
      if (set.size === 0) this.watchers.delete(name);
    };
  }

  close(): Promise<void> {
    this.closed = true;
    this.watchers.clear();
    this.streamWatchers.clear();
    return Promise.resolve();
  }

  /** Run `fn` as one atomic step; errors become rejections, as they would from a real store. */
  private op<T>(fn: () => T): Promise<T> {
    if (this.closed) return Promise.reject(new ClosedError('memory store'));
    try {
      return Promise.resolve(fn());
    } catch (err) {
      return Promise.reject(err as Error);
    }
  }

  private notifyStream(stream: string, head: number): void {
    const set = this.streamWatchers.get(stream);
    if (!set) return;
    for (const listener of [...set]) queueMicrotask(() => listener(head));
  }

  private notify(name: string, lease: Lease | null): void {
    const set = this.watchers.get(name);
    if (!set) return;
    // Deliver after the current step, never inside it, so a listener cannot re-enter the store mid-change.
    for (const listener of [...set]) queueMicrotask(() => listener(lease));
  }
}

