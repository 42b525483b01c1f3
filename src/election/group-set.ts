/**
 * GroupSet: one node leading any number of groups. It campaigns for each group (acquire when
 * free; otherwise wait until the holder's lease can expire, or until the store pushes a release)
 * and keeps every group it holds in one LeaseSet, so that all of them are renewed together (one
 * `renewMany` per renew interval on stores that batch).
 *
 * Each group keeps its own deadline, signal and token (rules 2 and 7 per group): the LeaseSet
 * aborts a group's lease signal at its own `sendTime + ttl - margin`; the context handed to
 * `onGained` carries a signal that aborts with it (and on a voluntary hand-over, before the
 * lease is given back), and the group's fencing token.
 *
 * A group's life: campaign -> gained (onGained runs its work under ctx.signal) -> end (the signal
 * aborts) -> drain (the work's promise settles, then onLost runs; both bounded by drainMs) ->
 * for a voluntary end, release the lease only now -> campaign again (unless removed/stopped).
 * A group is never gained twice at once on one node: the next campaign starts after the drain.
 */
import { InvalidArgumentError, StoreUnavailableError, candidateDelay, checkMs, checkName, limits, systemClock, systemRandom } from '../core/index.js';
import type { Clock, FencingToken, Lease, LeaseMeta, Random, Store, Timing, TimingOptions, Unsubscribe } from '../core/index.js';
import { TypedEmitter } from '../core/typed-emitter.js';
import { LeaseSet } from './lease-set.js';
import type { HeldLease, LeaseEndReason } from './lease-set.js';

/** What a group's work receives when the node gains it. */
export interface GroupContext {
  readonly group: string;
  readonly term: number;
  /** The fencing token of this leadership: pass it with every write the work does. */
  readonly token: FencingToken;
  /** Aborts when the node stops leading the group (deadline, lost, hand-over, removal, stop). */
  readonly signal: AbortSignal;
}

/** Why a node stopped leading a group. */
export type GroupLossReason = 'deadline' | 'lost' | 'handed-over' | 'removed' | 'stopped';

/**
 * The work of a gained group. It may return a promise: the group is drained (and, when given up
 * voluntarily, released) only after that promise settles and `onLost` has run.
 */
export type GroupGained = (group: string, ctx: GroupContext) => void | Promise<void>;
export type GroupLost = (group: string, reason: GroupLossReason) => void | Promise<void>;

export interface GroupSetOptions extends TimingOptions {
  store: Store;
  /** Stable node id; a random suffix is added per instance (the incarnation). Default: hostname-pid. */
  id?: string;
  /** Groups to campaign for from `start()`; names must be distinct. More can be added with `add`. */
  groups?: readonly string[];
  /** Published with each group's lease. */
  meta?: LeaseMeta;
  onGained?: GroupGained;
  onLost?: GroupLost;
  /**
   * Campaign for every group on its own (default true). With false the set only holds what
   * `tryAcquire` gets, and `handOver` does not campaign again (Partitions decides instead).
   */
  campaign?: boolean;
  /** Longest wait for a group's work and onLost to finish before its lease is released anyway, ms. Default ttlMs. */
  drainMs?: number;
  /** At most this many acquire calls in flight at once, so a start with 10,000 groups does not flood the store. Default 32. */
  maxInFlight?: number;
  /** At most this many groups (default 100,000): every structure is bounded. */
  maxGroups?: number;
  clock?: Clock;
  random?: Random;
}

export interface GroupSetEvents {
  gained: { group: string; term: number };
  lost: { group: string; term: number; reason: GroupLossReason };
  /** onGained's work or onLost threw or rejected; the group still ends and drains normally. */
  'callback-failed': { group: string; callback: 'onGained' | 'onLost'; error: unknown };
  /** An acquire failed (outcome unknown): the group's campaign tries again after retryMs. */
  'campaign-failed': { group: string; error: Error };
}

type Phase = 'idle' | 'acquiring' | 'waiting' | 'held' | 'draining' | 'removed';

interface Group {
  readonly name: string;
  phase: Phase;
  lease: HeldLease | null;
  work: AbortController | null;
  running: Promise<unknown> | null;
  cancelWait: (() => void) | null;
  unwatch: Unsubscribe | null;
  /** Resolves when the current drain (if any) is over. */
  drained: Promise<void> | null;
}

/** Default limits, in one place. */
export const GROUP_SET_DEFAULTS = { maxInFlight: 32, maxGroups: 100_000 } as const;

/** An integer count in [min, max]; InvalidArgumentError naming `field` otherwise. */
export function checkCount(field: string, value: unknown, min: number, max: number): number {
  if (typeof value !== 'number' || !Number.isInteger(value) || value < min || value > max) {
    throw new InvalidArgumentError(field, `expected an integer in [${min}, ${max}], got ${typeof value === 'number' ? String(value) : typeof value}`);
  }
  return value;
}

/** Throws InvalidArgumentError naming the first repeated name (and how many repeat) in `names`. */
export function checkDistinctNames(field: string, names: readonly unknown[], maxCount: number): string[] {
  if (!Array.isArray(names)) throw new InvalidArgumentError(field, `expected an array of names, got ${typeof names}`);
  if (names.length > maxCount) throw new InvalidArgumentError(field, `at most ${maxCount} names, got ${names.length}`);
  const seen = new Map<string, number>();
  let first: { name: string; at: number; again: number } | null = null;
  let repeats = 0;
  names.forEach((n, i) => {
    const name = checkName(`${field}[${i}]`, n);
    const at = seen.get(name);
    if (at === undefined) seen.set(name, i);
    else {
      repeats++;
      first ??= { name, at, again: i };
    }
  });
  if (first !== null) {
    const f = first as { name: string; at: number; again: number };
    throw new InvalidArgumentError(field, `names must be distinct: '${f.name}' is at index ${f.at} and again at ${f.again} (${repeats} repeated name${repeats === 1 ? '' : 's'} in ${names.length})`);
  }
  return names as string[];
}

export class GroupSet extends TypedEmitter<GroupSetEvents> implements AsyncDisposable {
  /** The LeaseSet every group's lease is in (Partitions adds its membership lease to it). */
  readonly leases: LeaseSet;
  readonly timing: Timing;
  private readonly store: Store;
  private readonly clock: Clock;
  private readonly random: Random;
  private readonly groups = new Map<string, Group>();
  private readonly meta: LeaseMeta | undefined;
  private readonly onGained: GroupGained | undefined;
  private readonly onLost: GroupLost | undefined;
  private readonly campaign: boolean;
  private readonly drainMs: number;
  private readonly maxInFlight: number;
  private readonly maxGroups: number;
  private inFlight = 0;
  private readonly queue: Array<() => void> = [];
  /** Acquires sent and not yet answered: stop() waits for them, so that none is left held in the store. */
  private readonly pending = new Set<Promise<unknown>>();
  private started = false;
  private stopping: Promise<void> | null = null;

  constructor(options: GroupSetOptions) {
    super();
    this.store = options.store;
    this.leases = new LeaseSet(options);
    this.timing = this.leases.timing;
    this.clock = options.clock ?? systemClock;
    this.random = options.random ?? systemRandom;
    this.meta = options.meta;
    this.onGained = options.onGained;
    this.onLost = options.onLost;
    this.campaign = options.campaign ?? true;
    this.drainMs = checkMs('drainMs', options.drainMs ?? this.timing.ttlMs, 0, limits.ttlMaxMs);
    this.maxInFlight = checkCount('maxInFlight', options.maxInFlight ?? GROUP_SET_DEFAULTS.maxInFlight, 1, 10_000);
    this.maxGroups = checkCount('maxGroups', options.maxGroups ?? GROUP_SET_DEFAULTS.maxGroups, 1, 10_000_000);
    for (const name of checkDistinctNames('groups', options.groups ?? [], this.maxGroups)) this.groups.set(name, this.newGroup(name));
    this.leases.on('ended', ({ name, reason }) => {
      const g = this.groups.get(name);
      if (g && g.phase === 'held') void this.drain(g, reason === 'stopped' ? 'stopped' : reasonOf(reason), false);
    });
  }

  /** The incarnation id this node's leases are held under. */
  get owner(): string {
    return this.leases.owner;
  }

  /** Names of the groups led now (gained, not yet ending), sorted. */
  get held(): string[] {
    return [...this.groups.values()].filter((g) => g.phase === 'held').map((g) => g.name).sort();
  }

  /** Every group of the set, sorted. */
  get names(): string[] {
    return [...this.groups.keys()].sort();
  }

  /** The context of a group this node leads now, or null. */
  context(group: string): GroupContext | null {
    const g = this.groups.get(group);
    if (!g || g.phase !== 'held' || !g.lease || !g.work) return null;
    return { group, term: g.lease.term, token: g.lease.token, signal: g.work.signal };
  }

  /** Start renewing, and campaigning for every group (when `campaign` is on). */
  start(): void {
    if (this.started || this.stopping) return;
    this.started = true;
    this.leases.start();
    if (this.campaign) for (const g of this.groups.values()) this.campaignSoon(g, 0);
  }

  /** Add a group (campaigned for at once when started). A name already in the set is rejected. */
  add(group: string): void {
    checkName('group', group);
    if (this.stopping) throw new StoreUnavailableError(`group set of ${this.owner} is stopped`);
    if (this.groups.has(group)) throw new InvalidArgumentError('group', `'${group}' is already in the set`);
    if (this.groups.size >= this.maxGroups) throw new InvalidArgumentError('group', `the set holds at most ${this.maxGroups} groups (maxGroups)`);
    const g = this.newGroup(group);
    this.groups.set(group, g);
    if (this.started && this.campaign) this.campaignSoon(g, 0);
  }

  /** Stop campaigning for `group`; if led, drain it and release its lease. Resolves when done. */
  async remove(group: string): Promise<boolean> {
    const g = this.groups.get(group);
    if (!g) return false;
    this.groups.delete(group);
    this.stopWaiting(g);
    const wasHeld = g.phase === 'held';
    g.phase = 'removed';
    if (wasHeld) await this.drain(g, 'removed', true);
    else await g.drained;
    return true;
  }

  /**
   * One attempt to lead `group` (which must be in the set), without campaigning. Resolves true
   * when the node leads it after the call. Store errors reject (outcome unknown).
   */
  async tryAcquire(group: string): Promise<boolean> {
    const g = this.groups.get(group);
    if (!g) throw new InvalidArgumentError('group', `'${group}' is not in the set`);
    if (g.phase === 'held') return true;
    if (g.phase !== 'idle' && g.phase !== 'waiting') return false;
    this.stopWaiting(g);
    g.phase = 'acquiring';
    try {
      const r = await this.attemptFor(g);
      if (g.phase !== 'acquiring' || this.stopping) {
        // removed or stopped meanwhile: give back what we got
        if (r.held) await this.leases.release(group);
        return false;
      }
      if (r.held) {
        this.gain(g, r.held);
        return true;
      }
      g.phase = 'idle';
      return false;
    } catch (err) {
      if (g.phase === 'acquiring') g.phase = 'idle';
      throw err;
    }
  }

  /**
   * Give `group` up voluntarily: its signal aborts, its work and onLost finish (bounded by
   * drainMs), and only then is the lease released, so the next leader starts after this one
   * stopped. Resolves true when the node led it. With `campaign` on, the node campaigns for it
   * again after one TTL (another node that wants it gets it first).
   */
  async handOver(group: string): Promise<boolean> {
    const g = this.groups.get(group);
    if (!g || g.phase !== 'held') return false;
    await this.drain(g, 'handed-over', true);
    return true;
  }

  /** Stop campaigning, drain every led group (signals first), release every lease. */
  stop(): Promise<void> {
    this.stopping ??= (async () => {
      for (const g of this.groups.values()) this.stopWaiting(g);
      // An acquire answered after the drain would leave its lease held in the store for a TTL.
      while (this.pending.size > 0) await Promise.allSettled([...this.pending]);
      const held = [...this.groups.values()].filter((g) => g.phase === 'held');
      await Promise.allSettled(held.map((g) => this.drain(g, 'stopped', false)));
      await Promise.allSettled([...this.groups.values()].map((g) => g.drained));
      await this.leases.stop();
    })();
    return this.stopping;
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.stop();
  }

  private newGroup(name: string): Group {
    return { name, phase: 'idle', lease: null, work: null, running: null, cancelWait: null, unwatch: null, drained: null };
  }

  private gain(g: Group, lease: HeldLease): void {
    const work = new AbortController();
    g.phase = 'held';
    g.lease = lease;
    g.work = work;
    const onEnd = (): void => work.abort(lease.signal.reason);
    if (lease.signal.aborted) onEnd();
    else lease.signal.addEventListener('abort', onEnd, { once: true });
    this.emit('gained', { group: g.name, term: lease.term });
    const ctx: GroupContext = { group: g.name, term: lease.term, token: lease.token, signal: work.signal };
    g.running = this.onGained ? this.guard(g.name, 'onGained', () => this.onGained!(g.name, ctx)) : null;
  }

  /**
   * End a led group: abort its work, wait for the work and onLost (at most drainMs), then release
   * the lease when `release` (a voluntary end), then campaign again when the set still wants it.
   */
  private drain(g: Group, reason: GroupLossReason, release: boolean): Promise<void> {
    if (g.phase !== 'held' && !(g.phase === 'removed' && g.lease)) return g.drained ?? Promise.resolve();
    const lease = g.lease!;
    const removed = g.phase === 'removed';
    g.phase = removed ? 'removed' : 'draining';
    g.work!.abort(new Error(`group ${g.name} (term ${lease.term}) ended: ${reason}`));
    this.emit('lost', { group: g.name, term: lease.term, reason });
    const running = g.running;
    g.drained = (async () => {
      await this.bounded(running);
      await this.bounded(this.onLost ? this.guard(g.name, 'onLost', () => this.onLost!(g.name, reason)) : null);
      if (release && this.leases.get(g.name)?.term === lease.term) await this.leases.release(g.name);
      g.lease = null;
      g.work = null;
      g.running = null;
      if (g.phase === 'draining') {
        g.phase = 'idle';
        // After a voluntary hand-over, wait a TTL so that the node it was handed to gets it first.
        if (this.campaign && !this.stopping) this.campaignSoon(g, reason === 'handed-over' ? this.timing.ttlMs : 0);
      }
    })();
    return g.drained;
  }

  /** Campaign for `g` after `ms`: one attempt; if another holds it, wait for expiry or a push. */
  private campaignSoon(g: Group, ms: number): void {
    if (this.stopping || g.phase === 'removed') return;
    this.stopWaiting(g);
    g.phase = 'waiting';
    g.cancelWait = this.clock.setTimer(ms, () => {
      g.cancelWait = null;
      void this.campaignOnce(g);
    });
  }

  private async campaignOnce(g: Group): Promise<void> {
    if (g.phase !== 'waiting' || this.stopping) return;
    this.stopWaiting(g);
    g.phase = 'acquiring';
    let r: Awaited<ReturnType<LeaseSet['attempt']>>;
    try {
      r = await this.attemptFor(g);
    } catch (err) {
      if (g.phase !== 'acquiring') return;
      this.emit('campaign-failed', { group: g.name, error: err as Error });
      g.phase = 'idle';
      this.campaignSoon(g, this.timing.retryMs + this.jitter());
      return;
    }
    if (g.phase !== 'acquiring' || this.stopping) {
      if (r.held) await this.leases.release(g.name).catch(() => false);
      return;
    }
    if (r.held) {
      this.gain(g, r.held);
      return;
    }
    g.phase = 'idle';
    this.waitFor(g, r.holder);
  }

  /** Wait until `holder`'s lease can expire (or a push says it changed), then campaign again. */
  private waitFor(g: Group, holder: Lease | null): void {
    this.campaignSoon(g, holder ? candidateDelay(holder.remainingMs, this.timing, this.random) : this.timing.retryMs + this.jitter());
    if (this.store.watch && g.unwatch === null) {
      g.unwatch = this.store.watch(g.name, (lease) => {
        if (lease === null && g.phase === 'waiting') this.campaignSoon(g, this.jitter());
      });
    }
  }

  private stopWaiting(g: Group): void {
    g.cancelWait?.();
    g.cancelWait = null;
    g.unwatch?.();
    g.unwatch = null;
  }

  /** A few ms of jitter so that nodes woken together do not arrive in lockstep. */
  private jitter(): number {
    return Math.floor(this.random.next() * Math.min(50, Math.max(1, this.timing.ttlMs / 50)));
  }

  /** Run `fn` when fewer than maxInFlight store calls of the set's campaigns are in flight. */
  private limited<T>(fn: () => Promise<T>): Promise<T> {
    // Tracked from the moment it is queued, so that stop() waits for it (and what it gives back).
    const p = (async () => {
      if (this.inFlight >= this.maxInFlight) await new Promise<void>((resolve) => this.queue.push(resolve));
      this.inFlight++;
      try {
        return await fn();
      } finally {
        this.inFlight--;
        this.queue.shift()?.();
      }
    })();
    this.pending.add(p);
    void p.then(
      () => this.pending.delete(p),
      () => this.pending.delete(p),
    );
    return p;
  }

  /**
   * One acquire for `g`; a lease got for a group that was removed, or while the set is stopping,
   * is released within the same tracked operation (so stop() never leaves one held).
   */
  private attemptFor(g: Group): ReturnType<LeaseSet['attempt']> {
    return this.limited(async () => {
      const r = await this.leases.attempt(g.name, this.meta);
      if (r.held && (g.phase !== 'acquiring' || this.stopping)) await this.leases.release(g.name).catch(() => false);
      return r;
    });
  }

  /** `fn()` as a promise that never rejects: a failure is reported as 'callback-failed'. */
  private guard(group: string, callback: 'onGained' | 'onLost', fn: () => void | Promise<void>): Promise<void> {
    return (async () => fn())().catch((error: unknown) => this.emit('callback-failed', { group, callback, error }));
  }

  /** Wait for `p`, at most drainMs. */
  private bounded(p: Promise<unknown> | null): Promise<void> {
    if (p === null) return Promise.resolve();
    return new Promise<void>((resolve) => {
      const cancel = this.clock.setTimer(this.drainMs, resolve);
      void p.finally(() => {
        cancel();
        resolve();
      });
    });
  }
}

function reasonOf(reason: LeaseEndReason): GroupLossReason {
  return reason === 'deadline' ? 'deadline' : reason === 'lost' ? 'lost' : reason === 'released' ? 'handed-over' : 'stopped';
}
