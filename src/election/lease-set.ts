/**
 * LeaseSet: several leases held by one owner (partitions, shards), renewed together — in one
 * round trip with `store.renewMany` where the store has it, else with one `renew` per lease, sent
 * together.
 *
 * Each lease keeps its own local deadline and AbortSignal, exactly as a LeaderElector's
 * leadership does:
 *  - rule 2: a lease acquired or renewed by a call sent at S ends locally at S + ttl - margin; a
 *    timer aborts its signal then, whether or not the store ever answers;
 *  - rule 3: a renewal that fails or times out changes nothing: the lease stays held until its
 *    deadline and the next round tries again; a refusal (`renewed: false`) ends it at once;
 *  - rule 6: renew and release are compare-and-set on owner and term (the store's own calls).
 * It does not campaign: `acquire` tries once; a caller that wants a name it did not get calls
 * again later (a many-group manager on top decides which names and when).
 */
import { StoreUnavailableError, checkName, leaderDeadline, makeIncarnation, makeToken, resolveTiming, systemClock, systemRandom } from '../core/index.js';
import type { Clock, FencingToken, Lease, LeaseMeta, Random, RenewResult, Store, Timing, TimingOptions } from '../core/index.js';
import { hostname } from 'node:os';
import { TypedEmitter } from '../core/typed-emitter.js';

export interface LeaseSetOptions extends TimingOptions {
  store: Store;
  /** Stable node id; a random suffix is added per instance (the incarnation). Default: hostname-pid. */
  id?: string;
  clock?: Clock;
  random?: Random;
}

/** One lease of the set while it is held. */
export interface HeldLease {
  readonly name: string;
  readonly term: number;
  readonly token: FencingToken;
  /** Aborts when the lease ends locally (deadline, refused renewal, release, stop). */
  readonly signal: AbortSignal;
}

/** Why a lease left the set. */
export type LeaseEndReason = 'deadline' | 'lost' | 'released' | 'stopped';

export interface LeaseSetEvents {
  acquired: { name: string; term: number };
  ended: { name: string; term: number; reason: LeaseEndReason; holder: Lease | null };
  /** A renewal round: how many leases it renewed, and whether it was one renewMany call. */
  renewed: { count: number; batched: boolean; latencyMs: number };
  /** A renewal call failed or timed out (outcome unknown): the leases stay held until their deadlines. */
  'renew-failed': { names: string[]; error: Error };
}

interface Entry {
  readonly name: string;
  readonly term: number;
  readonly token: FencingToken;
  readonly controller: AbortController;
  deadline: number;
  cancelDeadline: () => void;
}

export class LeaseSet extends TypedEmitter<LeaseSetEvents> {
  readonly owner: string;
  readonly timing: Timing;
  private readonly store: Store;
  private readonly clock: Clock;
  private readonly entries = new Map<string, Entry>();
  private cancelLoop: (() => void) | null = null;
  private renewing: Promise<unknown> | null = null;
  private stopped = false;

  constructor(options: LeaseSetOptions) {
    super();
    this.store = options.store;
    this.timing = resolveTiming(options);
    this.clock = options.clock ?? systemClock;
    this.owner = makeIncarnation(options.id ?? `${hostname()}-${process.pid}`, options.random ?? systemRandom);
  }

  /** True when renewals are one `renewMany` call (the store has it). */
  get batched(): boolean {
    return typeof this.store.renewMany === 'function';
  }

  /** The leases held now, by name. */
  get held(): HeldLease[] {
    return [...this.entries.values()].map(({ name, term, token, controller }) => ({ name, term, token, signal: controller.signal }));
  }

  /**
   * Try once to acquire `name` for this set. Resolves with the lease when this owner holds it
   * (new or already held), or null when another owner does or the reply came after its own
   * deadline. Store errors reject (outcome unknown: the next acquire reconciles).
   */
  async acquire(name: string, meta?: LeaseMeta): Promise<HeldLease | null> {
    checkName('name', name);
    if (this.stopped) throw new StoreUnavailableError(`lease set of ${this.owner} is stopped`);
    const existing = this.entries.get(name);
    if (existing) return this.view(existing);
    const sentAt = this.clock.now();
    const result = await this.withTimeout(`acquire of ${name}`, this.store.acquire(name, this.owner, this.timing.ttlMs, meta));
    if (!result.acquired) return null;
    const already = this.entries.get(name);
    if (already) return this.view(already); // two acquires of one name raced; both got the same lease
    const deadline = leaderDeadline(sentAt, this.timing);
    const now = this.clock.now();
    if (deadline <= now || this.stopped) return null; // late: may hold it, must not act on it
    const entry: Entry = { name, term: result.lease.term, token: makeToken(name, result.lease.term), controller: new AbortController(), deadline, cancelDeadline: () => {} };
    entry.cancelDeadline = this.clock.setTimer(deadline - now, () => this.end(entry, 'deadline', null));
    this.entries.set(name, entry);
    this.emit('acquired', { name, term: entry.term });
    return this.view(entry);
  }

  /**
   * Renew every held lease now: one `renewMany` where the store has it, else one `renew` per lease
   * sent together. A refused lease ends at once; a lease whose call failed or timed out stays
   * until its deadline (`failed`, outcome unknown). Resolves with the names of each outcome.
   */
  async renewAll(): Promise<{ renewed: string[]; lost: string[]; failed: string[] }> {
    const batch = [...this.entries.values()];
    if (batch.length === 0) return { renewed: [], lost: [], failed: [] };
    const sentAt = this.clock.now();
    let outcomes: Array<RenewResult | Error>;
    if (this.store.renewMany) {
      try {
        const results = await this.withTimeout('renewMany', this.store.renewMany(this.owner, batch.map((e) => ({ name: e.name, term: e.term })), this.timing.ttlMs));
        outcomes = batch.map((_, i) => results[i] ?? new StoreUnavailableError(`${this.store.kind} store: renewMany answered ${results.length} of ${batch.length}`));
      } catch (err) {
        outcomes = batch.map(() => err as Error);
      }
    } else {
      const settled = await Promise.allSettled(batch.map((e) => this.withTimeout(`renew of ${e.name}`, this.store.renew(e.name, this.owner, e.term, this.timing.ttlMs))));
      outcomes = settled.map((r) => (r.status === 'fulfilled' ? r.value : (r.reason as Error)));
    }
    const renewed: string[] = [];
    const lost: string[] = [];
    const failed: string[] = [];
    let error: Error | null = null;
    const deadline = leaderDeadline(sentAt, this.timing);
    batch.forEach((e, i) => {
      if (this.entries.get(e.name) !== e) return; // ended meanwhile: a late reply changes nothing
      const r = outcomes[i]!;
      if (r instanceof Error) {
        failed.push(e.name);
        error ??= r;
        return;
      }
      if (!r.renewed) {
        lost.push(e.name);
        this.end(e, 'lost', r.lease);
        return;
      }
      renewed.push(e.name);
      if (deadline > e.deadline) {
        e.cancelDeadline();
        e.deadline = deadline;
        e.cancelDeadline = this.clock.setTimer(deadline - this.clock.now(), () => this.end(e, 'deadline', null));
      }
    });
    if (error) this.emit('renew-failed', { names: failed, error });
    if (renewed.length > 0) this.emit('renewed', { count: renewed.length, batched: this.batched, latencyMs: this.clock.now() - sentAt });
    return { renewed, lost, failed };
  }

  /** Renew every `renewIntervalMs` (after a failed round, every `retryMs`) until stop(). */
  start(): void {
    if (this.cancelLoop || this.stopped) return;
    const next = (ms: number): void => {
      this.cancelLoop = this.clock.setTimer(ms, () => {
        const round = this.renewAll().then(
          (r) => r.failed.length > 0,
          () => true,
        );
        this.renewing = round;
        void round.then((failed) => {
          if (!this.stopped) next(failed ? this.timing.retryMs : this.timing.renewIntervalMs);
        });
      });
    };
    next(this.timing.renewIntervalMs);
  }

  /** Give `name` back (compare-and-set on owner and term); its signal aborts first. */
  async release(name: string): Promise<boolean> {
    const e = this.entries.get(name);
    if (!e) return false;
    this.end(e, 'released', null);
    return this.withTimeout(`release of ${name}`, this.store.release(name, this.owner, e.term)).catch(() => false);
  }

  /** Stop renewing, end every lease (signals first) and release them. */
  async stop(): Promise<void> {
    if (this.stopped) return;
    this.stopped = true;
    this.cancelLoop?.();
    this.cancelLoop = null;
    const all = [...this.entries.values()];
    for (const e of all) this.end(e, 'stopped', null);
    await Promise.allSettled(all.map((e) => this.withTimeout(`release of ${e.name}`, this.store.release(e.name, this.owner, e.term))));
    await this.renewing;
  }

  private view(e: Entry): HeldLease {
    return { name: e.name, term: e.term, token: e.token, signal: e.controller.signal };
  }

  private end(e: Entry, reason: LeaseEndReason, holder: Lease | null): void {
    if (this.entries.get(e.name) !== e) return;
    this.entries.delete(e.name);
    e.cancelDeadline();
    e.controller.abort(new Error(`lease ${e.name} (term ${e.term}) ended: ${reason}`));
    this.emit('ended', { name: e.name, term: e.term, reason, holder });
  }

  /** `promise`, or StoreUnavailableError after requestTimeoutMs (its outcome unknown). */
  private withTimeout<T>(what: string, promise: Promise<T>): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      const cancel = this.clock.setTimer(this.timing.requestTimeoutMs, () =>
        reject(new StoreUnavailableError(`${this.store.kind} store: no answer to ${what} within ${this.timing.requestTimeoutMs} ms`)),
      );
      promise.then(
        (v) => {
          cancel();
          resolve(v);
        },
        (err: unknown) => {
          cancel();
          reject(err as Error);
        },
      );
    });
  }
}
