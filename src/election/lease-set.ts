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
 * A lease whose renewal failed as "maybe" is `suspended` (event, and the getter on its HeldLease)
 * until a renewal succeeds before its deadline (`recovered`, same term) or the deadline passes
 * (`ended` with reason `deadline`): the same three states as a LeaderElector's and a lock handle's.
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
  /** True while held and its last renewal failed as "maybe": it holds only until its deadline (read live). */
  readonly suspended: boolean;
  /**
   * Time left on the lease's local validity, ms: the last successful acquire or renew's send time
   * + ttl - margin (safety rule 2), minus now; never negative, 0 once ended.
   */
  remainingMs(): number;
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
  /** A held lease's renewal failed as "maybe" (first failure since held or recovered): still held for `remainingMs`, the deadline unchanged. */
  suspended: { name: string; term: number; error: Error; remainingMs: number };
  /** A suspended lease was renewed before its deadline: same term, the deadline moved on. */
  recovered: { name: string; term: number; suspendedMs: number; remainingMs: number };
}

interface Entry {
  readonly name: string;
  readonly term: number;
  readonly token: FencingToken;
  readonly controller: AbortController;
  deadline: number;
  /** When its first failed renewal since it was held or recovered came back (clock ms), or null. */
  suspendedAt: number | null;
  cancelDeadline: () => void;
}

export class LeaseSet extends TypedEmitter<LeaseSetEvents> {
  readonly owner: string;
  readonly timing: Timing;
  private readonly store: Store;
  private readonly clock: Clock;
  private readonly entries = new Map<string, Entry>();
  /**
   * Leases the store may still hold for this owner though the set no longer acts on them: ended
   * at their local deadline (a renew that timed out may have succeeded), or acquired by a reply
   * that came after its deadline. stop() releases them too (compare-and-set on owner and term,
   * so a lease someone else holds now is left alone), so that none lingers for a TTL.
   */
  private readonly maybeHeld = new Map<string, number>();
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
    return [...this.entries.values()].map((e) => this.view(e));
  }

  /** The lease `name` while this set holds it, else null. */
  lease(name: string): HeldLease | null {
    const e = this.entries.get(name);
    return e ? this.view(e) : null;
  }

  /**
   * Try once to acquire `name` for this set. Resolves with the lease when this owner holds it
   * (new or already held), or null when another owner does or the reply came after its own
   * deadline. Store errors reject (outcome unknown: the next acquire reconciles).
   */
  async acquire(name: string, meta?: LeaseMeta): Promise<HeldLease | null> {
    return (await this.attempt(name, meta)).held;
  }

  /**
   * `acquire`, also telling who holds the lease when this owner did not get it (`holder`: the
   * live lease the store reported, with its time left; null when the reply came too late to act
   * on). A campaign uses `holder.remainingMs` to try again just after the lease can expire.
   */
  async attempt(name: string, meta?: LeaseMeta): Promise<{ held: HeldLease; holder: null } | { held: null; holder: Lease | null }> {
    checkName('name', name);
    if (this.stopped) throw new StoreUnavailableError(`lease set of ${this.owner} is stopped`);
    const existing = this.entries.get(name);
    if (existing) return { held: this.view(existing), holder: null };
    const sentAt = this.clock.now();
    const result = await this.withTimeout(`acquire of ${name}`, this.store.acquire(name, this.owner, this.timing.ttlMs, meta));
    if (!result.acquired) return { held: null, holder: result.lease };
    const already = this.entries.get(name);
    if (already) return { held: this.view(already), holder: null }; // two acquires of one name raced; both got the same lease
    const deadline = leaderDeadline(sentAt, this.timing);
    const now = this.clock.now();
    if (deadline <= now || this.stopped) {
      // Late: the store may hold it for us, but we must not act on it. Give it back.
      await this.withTimeout(`release of ${name}`, this.store.release(name, this.owner, result.lease.term)).catch(() => false);
      return { held: null, holder: null };
    }
    this.maybeHeld.delete(name);
    const entry: Entry = { name, term: result.lease.term, token: makeToken(name, result.lease.term), controller: new AbortController(), deadline, suspendedAt: null, cancelDeadline: () => {} };
    entry.cancelDeadline = this.clock.setTimer(deadline - now, () => this.end(entry, 'deadline', null));
    this.entries.set(name, entry);
    this.emit('acquired', { name, term: entry.term });
    return { held: this.view(entry), holder: null };
  }

  /** The lease held under `name` now, or null. */
  get(name: string): HeldLease | null {
    const e = this.entries.get(name);
    return e ? this.view(e) : null;
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
    const suspended: Array<{ e: Entry; error: Error }> = [];
    const recovered: Array<{ e: Entry; suspendedMs: number }> = [];
    batch.forEach((e, i) => {
      if (this.entries.get(e.name) !== e) return; // ended meanwhile: a late reply changes nothing
      const r = outcomes[i]!;
      if (r instanceof Error) {
        failed.push(e.name);
        error ??= r;
        if (e.suspendedAt === null) {
          e.suspendedAt = this.clock.now();
          suspended.push({ e, error: r });
        }
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
      if (e.suspendedAt !== null) {
        recovered.push({ e, suspendedMs: this.clock.now() - e.suspendedAt });
        e.suspendedAt = null;
      }
    });
    if (error) this.emit('renew-failed', { names: failed, error });
    // Per lease, after the round's bookkeeping, so a listener sees the set as it now is.
    for (const { e, error: err } of suspended) {
      if (this.entries.get(e.name) === e) this.emit('suspended', { name: e.name, term: e.term, error: err, remainingMs: this.remaining(e) });
    }
    for (const { e, suspendedMs } of recovered) {
      if (this.entries.get(e.name) === e) this.emit('recovered', { name: e.name, term: e.term, suspendedMs, remainingMs: this.remaining(e) });
    }
    if (renewed.length > 0) this.emit('renewed', { count: renewed.length, batched: this.batched, latencyMs: this.clock.now() - sentAt });
    return { renewed, lost, failed };
  }

  /**
   * Renew every `renewIntervalMs` (after a failed round, every `retryMs`) until stop(). The
   * interval runs from one round's start to the next's, so a slow round (10,000 leases in one
   * statement) does not stretch the cadence: still one round per interval, never two at once.
   */
  start(): void {
    if (this.cancelLoop || this.stopped) return;
    const next = (ms: number): void => {
      this.cancelLoop = this.clock.setTimer(ms, () => {
        const startedAt = this.clock.now();
        const round = this.renewAll().then(
          (r) => r.failed.length > 0,
          () => true,
        );
        this.renewing = round;
        void round.then((failed) => {
          const spentMs = this.clock.now() - startedAt;
          if (!this.stopped) next(failed ? this.timing.retryMs : Math.max(0, this.timing.renewIntervalMs - spentMs));
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
    return this.withTimeout(`release of ${name}`, this.store.release(name, this.owner, e.term), this.timing.ttlMs).catch(() => false);
  }

  /** Stop renewing, end every lease (signals first) and release them. */
  async stop(): Promise<void> {
    if (this.stopped) return;
    this.stopped = true;
    this.cancelLoop?.();
    this.cancelLoop = null;
    const all = [...this.entries.values()];
    for (const e of all) this.end(e, 'stopped', null);
    // Let a renewal still in flight finish before releasing (signals have fired already; its
    // answer is ignored), so that no store call of the set is left running after stop().
    await this.renewing;
    const toRelease = [...all.map((e) => ({ name: e.name, term: e.term })), ...[...this.maybeHeld].map(([name, term]) => ({ name, term }))];
    this.maybeHeld.clear();
    // Wait for the answers up to one TTL, not requestTimeoutMs: a loaded store answers late, and
    // stop() resolving before its releases landed would leave the leases readable as held. After
    // a TTL they have expired anyway, so a store that is down cannot hold stop() longer.
    await Promise.allSettled(toRelease.map((e) => this.withTimeout(`release of ${e.name}`, this.store.release(e.name, this.owner, e.term), this.timing.ttlMs)));
  }

  private view(e: Entry): HeldLease {
    const live = (): boolean => this.entries.get(e.name) === e;
    return {
      name: e.name,
      term: e.term,
      token: e.token,
      signal: e.controller.signal,
      get suspended(): boolean {
        return live() && e.suspendedAt !== null;
      },
      remainingMs: () => (live() ? this.remaining(e) : 0),
    };
  }

  private remaining(e: Entry): number {
    return Math.max(0, e.deadline - this.clock.now());
  }

  private end(e: Entry, reason: LeaseEndReason, holder: Lease | null): void {
    if (this.entries.get(e.name) !== e) return;
    this.entries.delete(e.name);
    if (reason === 'deadline') this.maybeHeld.set(e.name, e.term);
    e.cancelDeadline();
    e.controller.abort(new Error(`lease ${e.name} (term ${e.term}) ended: ${reason}`));
    this.emit('ended', { name: e.name, term: e.term, reason, holder });
  }

  /** `promise`, or StoreUnavailableError after requestTimeoutMs (its outcome unknown). */
  private withTimeout<T>(what: string, promise: Promise<T>, timeoutMs = this.timing.requestTimeoutMs): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      const cancel = this.clock.setTimer(timeoutMs, () =>
        reject(new StoreUnavailableError(`${this.store.kind} store: no answer to ${what} within ${timeoutMs} ms`)),
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
