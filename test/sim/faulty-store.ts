/**
 * A per-node Store in front of the one shared MemoryStore, which stays the single source of
 * truth. The wrapper is the network and the node's process boundary:
 *
 *  - a call leaves only when the node runs (a paused node's calls are held by its gate);
 *  - the request may be delayed; the store may be unreachable (reject fast, or hang forever);
 *  - the store applies the call atomically when the request lands;
 *  - the reply may be delayed, or lost after the store applied the change;
 *  - the reply reaches the node through its gate (held while the node is paused).
 */
import { StaleTermError, StoreUnavailableError, reportStale } from '../../src/core/index.js';
import type {
  AcquireResult,
  FencingToken,
  Lease,
  LeaseMeta,
  ReadStreamOptions,
  RenewResult,
  Store,
  StreamEntry,
  Unsubscribe,
  VirtualClock,
  WatchListener,
} from '../../src/core/index.js';
import type { MemoryStore } from '../../src/stores/memory/index.js';
import type { NodeClock } from './node-clock.js';
import type { Trace } from './trace.js';

export type StoreOp = 'acquire' | 'renew' | 'release' | 'read' | 'list' | 'append' | 'readStream' | 'watch';

/** What happens to one call on the wire. */
export interface CallFate {
  readonly requestDelayMs: number;
  readonly replyDelayMs: number;
  /** The store applies the call but the reply never reaches the node. */
  readonly lostReply: boolean;
  /** The request never reaches the store: nothing applies, no answer comes. */
  readonly lostRequest?: boolean;
}

export interface FaultPolicy {
  /** Drawn once per call, when it is sent. */
  fate(node: string, op: StoreOp): CallFate;
  /** Whether `node` can reach the store at this virtual instant, and if not how calls fail. */
  outage(node: string): 'reject' | 'hang' | null;
}

/** Where fenced streams live: the memory store itself, or (broken variant) an unfenced log. */
export type StreamBackend = Pick<Store, 'appendFenced' | 'readStream'>;

/** One node's link to the store. */
export interface WireOptions {
  readonly node: string;
  /** The shared virtual clock: the network's time. */
  readonly base: VirtualClock;
  /** The node's clock and gate. */
  readonly clock: NodeClock;
  readonly faults: FaultPolicy;
  readonly trace: Trace;
}

/** How a call ended at the store: the value it returned or the error it threw. */
export type Outcome<T> = { readonly ok: true; readonly value: T } | { readonly ok: false; readonly error: Error };

export interface FaultyStoreOptions extends WireOptions {
  readonly memory: MemoryStore;
  readonly streams: StreamBackend;
  /** Told when the store applies an append (writes or refuses it), by payload. */
  readonly onAppendApplied?: (payload: string) => void;
  /** Told of every release as the node sends it (before any delay). */
  readonly onRelease?: (name: string, owner: string, term: number) => void;
  /** Broken on purpose: answer a stale append with success instead of StaleTermError. */
  readonly fakeAckStale?: boolean;
}

export class FaultyStore implements Store {
  readonly kind = 'sim';
  private readonly o: FaultyStoreOptions;
  private readonly wire: Wire;

  constructor(options: FaultyStoreOptions) {
    this.o = options;
    this.wire = new Wire(options);
  }

  acquire(name: string, owner: string, ttlMs: number, meta?: LeaseMeta): Promise<AcquireResult> {
    return this.call(
      'acquire',
      `acquire ${name}`,
      () => this.o.memory.acquire(name, owner, ttlMs, meta),
      describeAcquire,
    );
  }

  renew(name: string, owner: string, term: number, ttlMs: number): Promise<RenewResult> {
    return this.call(
      'renew',
      `renew ${name} term ${term}`,
      () => this.o.memory.renew(name, owner, term, ttlMs),
      describeRenew,
    );
  }

  release(name: string, owner: string, term: number): Promise<boolean> {
    this.o.onRelease?.(name, owner, term);
    return this.call(
      'release',
      `release ${name} term ${term}`,
      () => this.o.memory.release(name, owner, term),
      (released) => (released ? 'released' : 'not held'),
    );
  }

  read(name: string): Promise<Lease | null> {
    return this.call('read', `read ${name}`, () => this.o.memory.read(name), (l) => (l ? describeLease(l) : 'free'));
  }

  list(prefix?: string): Promise<Lease[]> {
    return this.call('list', `list ${prefix ?? ''}`, () => this.o.memory.list(prefix), (ls) => `${ls.length} leases`);
  }

  appendFenced(token: FencingToken, stream: string, payload: string): Promise<number> {
    const apply = (): Promise<number> => {
      const written = this.o.streams.appendFenced(token, stream, payload);
      this.o.onAppendApplied?.(payload);
      if (!this.o.fakeAckStale) return written;
      return written.catch(async (err: unknown) => {
        if (!(err instanceof StaleTermError)) throw err;
        const entries = await this.o.streams.readStream(stream, { after: 0, limit: 10_000 });
        return entries.length; // a silent "success" pointing at someone else's entry
      });
    };
    // The model store is another process: its refusal reaches this node's feed (and so its
    // elector) when the reply does, through the node's gate — never while it is paused or crashed.
    return this.call('append', `append ${stream} ${payload} term ${token.term}`, apply, (seq) => `seq ${seq}`).catch((err: unknown) => {
      throw err instanceof StaleTermError ? reportStale(err, { stream }) : err;
    });
  }

  readStream(stream: string, options?: ReadStreamOptions): Promise<StreamEntry[]> {
    return this.call('readStream', `readStream ${stream}`, () => this.o.streams.readStream(stream, options), (es) => `${es.length} entries`);
  }

  watch(name: string, listener: WatchListener): Unsubscribe {
    return this.o.memory.watch(name, (lease) => this.wire.push(name, lease, listener));
  }

  close(): Promise<void> {
    return Promise.resolve();
  }

  private call<T>(op: StoreOp, what: string, apply: () => Promise<T>, describe: (value: T) => string): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      const settleWith = (settle: (outcome: Outcome<T>) => void): void => {
        apply().then(
          (value) => settle({ ok: true, value }),
          (err: unknown) => settle({ ok: false, error: err as Error }),
        );
      };
      this.wire.call(op, what, settleWith, describe, (outcome) => (outcome.ok ? resolve(outcome.value) : reject(outcome.error)));
    });
  }
}

/**
 * The network between one node and the store, and the node's process boundary: a call leaves
 * only when the node runs, its request may be delayed or lost, the store may be unreachable, the
 * store applies it when it lands, and the reply may be delayed or lost; every input reaches the
 * node through its gate. Callback-based, so both the promise-based FaultyStore and the
 * promise-free machine simulation drive it.
 */
export class Wire {
  constructor(private readonly o: WireOptions) {}

  /**
   * Send one call. `apply` runs when the request lands and hands the store's outcome to its
   * callback (at once or later); `answer` gets it back at the node unless the reply is lost.
   */
  call<T>(op: StoreOp, what: string, apply: (settle: (outcome: Outcome<T>) => void) => void, describe: (value: T) => string, answer: (outcome: Outcome<T>) => void): void {
    this.o.clock.deliver('io', () => this.send(op, what, apply, describe, answer));
  }

  /** A watch push from the store to this node: lost in an outage or by chance, else delayed. */
  push(name: string, lease: Lease | null, listener: (lease: Lease | null) => void): void {
    const { base, clock, faults, node, trace } = this.o;
    if (clock.isCrashed) return;
    const fate = faults.fate(node, 'watch');
    if (faults.outage(node) !== null || fate.lostReply) {
      trace.add(node, `push ${name} lost`);
      return;
    }
    base.setTimer(fate.replyDelayMs, () =>
      clock.deliver('io', () => {
        trace.add(node, `push ${name}: ${lease ? describeLease(lease) : 'free'}`);
        listener(lease);
      }),
    );
  }

  private send<T>(op: StoreOp, what: string, apply: (settle: (outcome: Outcome<T>) => void) => void, describe: (value: T) => string, answer: (outcome: Outcome<T>) => void): void {
    const { faults, node, trace } = this.o;
    const fate = faults.fate(node, op);
    if (fate.lostRequest) {
      trace.add(node, `→ ${what} (request lost)`);
      return;
    }
    trace.add(node, `→ ${what}${fate.requestDelayMs > 5 ? ` (request delayed ${fate.requestDelayMs} ms)` : ''}`);
    this.after(fate.requestDelayMs, () => {
      const outage = faults.outage(node);
      if (outage === 'hang') {
        trace.add(node, `✗ ${what}: store unreachable, no answer ever`);
        return;
      }
      if (outage === 'reject') {
        trace.add(node, `✗ ${what}: store unreachable, rejected`);
        this.reply(fate, () => answer({ ok: false, error: new StoreUnavailableError(`sim: store unreachable from ${node}`) }));
        return;
      }
      apply((outcome) => {
        const text = outcome.ok ? describe(outcome.value) : `${outcome.error.name}: ${outcome.error.message}`;
        trace.add(node, `store: ${what} -> ${text}${this.fateText(fate)}`);
        if (!fate.lostReply) this.reply(fate, () => answer(outcome));
      });
    });
  }

  private fateText(fate: CallFate): string {
    if (fate.lostReply) return ' (reply lost)';
    return fate.replyDelayMs > 5 ? ` (reply delayed ${fate.replyDelayMs} ms)` : '';
  }

  private reply(fate: CallFate, deliver: () => void): void {
    this.after(fate.replyDelayMs, () => this.o.clock.deliver('io', deliver));
  }

  /** Run `fn` after `ms` of network time; a zero-latency hop needs no timer (same instant). */
  private after(ms: number, fn: () => void): void {
    if (ms <= 0) fn();
    else this.o.base.setTimer(ms, fn);
  }
}

export function describeLease(lease: Lease): string {
  return `${lease.owner} term ${lease.term} for ${lease.remainingMs} ms`;
}

export function describeAcquire(r: AcquireResult): string {
  return r.acquired ? `acquired term ${r.lease.term}` : `refused: ${describeLease(r.lease)}`;
}

export function describeRenew(r: RenewResult): string {
  return r.renewed ? 'renewed' : `refused: ${r.lease ? describeLease(r.lease) : 'free'}`;
}

/**
 * Broken on purpose: a stream log with no fence at all, so a deposed leader's writes land after
 * its successor's. Only the `unfenced` variant uses it, to prove the checker notices.
 */
export class UnfencedStreams implements StreamBackend {
  private readonly streams = new Map<string, StreamEntry[]>();

  appendFenced(token: FencingToken, stream: string, payload: string): Promise<number> {
    let entries = this.streams.get(stream);
    if (!entries) this.streams.set(stream, (entries = []));
    entries.push({ stream, seq: entries.length + 1, lease: token.lease, term: token.term, payload, appendedAt: 0 });
    return Promise.resolve(entries.length);
  }

  readStream(stream: string, options?: ReadStreamOptions): Promise<StreamEntry[]> {
    const after = options?.after ?? 0;
    return Promise.resolve((this.streams.get(stream) ?? []).slice(after, after + (options?.limit ?? 1000)));
  }
}
