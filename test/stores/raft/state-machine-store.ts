/**
 * The Store interface over one in-process RaftStateMachine, as a single-node cluster would give
 * it: every call is encoded as the node would propose it, applied at the next index with the
 * "leader's" lease clock (the injected clock), and answered from the result. Lets the contract
 * suite run against the state machine's semantics before the node and transport exist.
 */
import { ClosedError, StaleTermError, checkAppendOptions, reportStale, systemClock } from '../../../src/core/index.js';
import type {
  AcquireResult,
  AppendFencedOptions,
  Clock,
  FencingToken,
  Lease,
  LeaseMeta,
  ReadStreamOptions,
  RenewManyItem,
  RenewResult,
  Store,
  StreamEntry,
  Unsubscribe,
  WatchListener,
} from '../../../src/core/index.js';
import { RaftStateMachine, encodeCommand, resultToError } from '../../../src/stores/raft/index.js';
import type { Operation, ResultValue } from '../../../src/stores/raft/index.js';

export class StateMachineStore implements Store {
  readonly kind = 'raft-state-machine';
  machine: RaftStateMachine;
  private readonly snapshotEach: boolean;
  private readonly clock: Clock;
  private readonly client: string;
  private index = 0;
  private seq = 0;
  private closed = false;
  private readonly watchers = new Map<string, Set<WatchListener>>();

  /**
   * `snapshotEach`: after every command the machine is replaced by a restore of its own snapshot,
   * as a follower that installs a snapshot between any two entries would be.
   */
  constructor(options: { clock?: Clock; machine?: RaftStateMachine; client?: string; snapshotEach?: boolean } = {}) {
    this.snapshotEach = options.snapshotEach ?? false;
    this.clock = options.clock ?? systemClock;
    this.machine = options.machine ?? new RaftStateMachine();
    this.client = options.client ?? 'client-1';
    this.index = this.machine.appliedIndex;
    // A cluster's first leader seeds the log clock once with its wall clock, so the log's time (and
    // so appendedAt) reads as ms since the epoch; after that it moves by monotonic durations only
    // (docs/raft-store.md, Time). Only a fresh machine is seeded; a given one keeps its time.
    this.seed = this.machine.logTimeMs === 0 ? Date.now() : this.machine.logTimeMs;
    this.startedAt = this.clock.now();
  }

  private readonly seed: number;
  private readonly startedAt: number;

  /** The leader's lease clock, whole ms: the seed plus the monotonic time since. */
  private timeMs(): number {
    return Math.floor(this.seed + (this.clock.now() - this.startedAt));
  }

  private propose(operation: Operation, stream?: string): Promise<ResultValue> {
    if (this.closed) return Promise.reject(new ClosedError('raft state machine store'));
    try {
      const seq = ++this.seq;
      const bytes = encodeCommand({ timeMs: this.timeMs(), session: { client: this.client, seq, ack: seq }, operation });
      const { result, events } = this.machine.apply(++this.index, bytes);
      if (this.snapshotEach) this.machine = RaftStateMachine.restore(this.machine.snapshot());
      for (const e of events) {
        if (e.kind !== 'lease' || (e.change !== 'acquired' && e.change !== 'released')) continue;
        for (const listener of [...(this.watchers.get(e.name) ?? [])]) queueMicrotask(() => listener(e.lease));
      }
      if (result === null) throw new Error('no result for a command');
      if (!result.ok) {
        const err = resultToError(result.error);
        throw err instanceof StaleTermError ? reportStale(err, { stream }) : err;
      }
      return Promise.resolve(result.value);
    } catch (err) {
      return Promise.reject(err as Error);
    }
  }

  private local<T>(fn: () => T): Promise<T> {
    if (this.closed) return Promise.reject(new ClosedError('raft state machine store'));
    try {
      return Promise.resolve(fn());
    } catch (err) {
      return Promise.reject(err as Error);
    }
  }

  acquire(name: string, owner: string, ttlMs: number, meta?: LeaseMeta): Promise<AcquireResult> {
    return this.propose({ op: 'acquire', name, owner, ttlMs, meta: meta as LeaseMeta }) as Promise<AcquireResult>;
  }
  renew(name: string, owner: string, term: number, ttlMs: number): Promise<RenewResult> {
    return this.propose({ op: 'renew', name, owner, term, ttlMs }) as Promise<RenewResult>;
  }
  renewMany(owner: string, leases: readonly RenewManyItem[], ttlMs: number): Promise<RenewResult[]> {
    return this.propose({ op: 'renewMany', owner, leases, ttlMs }) as Promise<RenewResult[]>;
  }
  release(name: string, owner: string, term: number): Promise<boolean> {
    return this.propose({ op: 'release', name, owner, term }) as Promise<boolean>;
  }
  appendFenced(token: FencingToken, stream: string, payload: string, options?: AppendFencedOptions): Promise<number> {
    let expectSeq: number | undefined;
    try {
      expectSeq = checkAppendOptions(options);
    } catch (err) {
      return Promise.reject(err as Error);
    }
    return this.propose(expectSeq === undefined ? { op: 'append', token, stream, payload } : { op: 'append', token, stream, payload, expectSeq }, stream) as Promise<number>;
  }
  readLast(stream: string): Promise<StreamEntry | null> {
    return this.local(() => this.machine.readLast(stream));
  }
  read(name: string): Promise<Lease | null> {
    return this.local(() => this.machine.read(name, this.timeMs()));
  }
  list(prefix?: string): Promise<Lease[]> {
    return this.local(() => this.machine.list(prefix, this.timeMs()));
  }
  readStream(stream: string, options?: ReadStreamOptions): Promise<StreamEntry[]> {
    return this.local(() => this.machine.readStream(stream, options));
  }
  watch(name: string, listener: WatchListener): Unsubscribe {
    let set = this.watchers.get(name);
    if (!set) this.watchers.set(name, (set = new Set()));
    set.add(listener);
    return () => {
      set.delete(listener);
    };
  }
  close(): Promise<void> {
    this.closed = true;
    this.watchers.clear();
    return Promise.resolve();
  }
}
