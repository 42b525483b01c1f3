/**
 * Partitions: N shards spread over the live nodes, each shard led by exactly one node.
 *
 * Membership is a lease per node (`NAME/member/NODE_ID`), renewed with the node's shard leases
 * (`NAME/shard/SHARD`) in one LeaseSet. Every `reconcileMs` a node reads every live lease under
 * `NAME/` in one `list` call, computes the target owner of each shard from the live member ids
 * alone (`assignShards`: deterministic, balanced to within one shard, so all nodes agree without
 * talking), then:
 *  - a shard it leads whose target is another node is handed over voluntarily: its signal aborts,
 *    its work and onLost finish (the drain), and only then is its lease released;
 *  - a shard targeted to it that no live lease holds is acquired (a dead node's shards become
 *    free when their leases expire in the store, so they are taken over by expiry).
 * One shard is never led by two nodes: a lease has one owner (the store decides), and each
 * leadership has its own term, the fencing token of everything done for the shard.
 */
import { InvalidArgumentError, StoreUnavailableError, checkMs, checkName, checkOwner, limits, nodeIdOf, systemClock, systemRandom } from '../core/index.js';
import type { Clock, Lease, LeaseMeta, Random, Store, Timing, TimingOptions, Unsubscribe } from '../core/index.js';
import { hostname } from 'node:os';
import { TypedEmitter } from '../core/typed-emitter.js';
import { GroupSet, checkDistinctNames } from './group-set.js';
import type { GroupContext, GroupLossReason } from './group-set.js';

/** What a shard's work receives when the node gains it (its own term, token and signal). */
export interface ShardContext extends GroupContext {
  readonly shard: string;
}

export type ShardGained = (shard: string, ctx: ShardContext) => void | Promise<void>;
export type ShardLost = (shard: string, reason: GroupLossReason) => void | Promise<void>;

export interface PartitionsOptions extends TimingOptions {
  store: Store;
  /** This node's stable id (one member per id). Default: hostname-pid. */
  id?: string;
  /** How many shards (named '0' .. 'N-1'), or their names (distinct). At most 100,000. */
  shards: number | readonly string[];
  /** Name of the partition set: its leases are `NAME/member/ID` and `NAME/shard/SHARD`. Default 'partitions'. */
  name?: string;
  onGained?: ShardGained;
  onLost?: ShardLost;
  /** Published with the node's membership lease. */
  meta?: LeaseMeta;
  /** Time between two looks at the membership and the shards, ms. Default max(10, ttl / 10). */
  reconcileMs?: number;
  /** Longest wait for a shard's work and onLost before its lease is released anyway, ms. Default ttlMs. */
  drainMs?: number;
  clock?: Clock;
  random?: Random;
}

/** What the node saw at its last look. */
export interface PartitionView {
  /** Live member node ids, sorted. */
  readonly members: readonly string[];
  /** Shards this node leads after the look, sorted. */
  readonly held: readonly string[];
  /** How many shards the assignment gives this node (0 when it is not a member). */
  readonly target: number;
  /** Shards no live lease holds, as the look found them. */
  readonly free: number;
}

export interface PartitionsEvents {
  gained: { shard: string; term: number };
  lost: { shard: string; term: number; reason: GroupLossReason };
  view: PartitionView;
  /** A look failed (the store did not answer): nothing changed; the next look tries again. */
  'reconcile-failed': { error: Error };
  'callback-failed': { shard: string; callback: 'onGained' | 'onLost'; error: unknown };
}

export const PARTITION_LIMITS = { maxShards: 100_000 } as const;

/** 32-bit FNV-1a of `text`, then a final avalanche so that near names spread. */
function hash32(text: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < text.length; i++) {
    h ^= text.charCodeAt(i);
    h = Math.imul(h, 0x01000193);
  }
  h ^= h >>> 16;
  h = Math.imul(h, 0x85ebca6b);
  h ^= h >>> 13;
  h = Math.imul(h, 0xc2b2ae35);
  h ^= h >>> 16;
  return h >>> 0;
}

/**
 * The target owner of every shard, a pure function of the shard names and the live node ids, so
 * that every node computes the same answer from the same membership. Balanced: each node gets
 * floor(N/k) or ceil(N/k) shards. Each shard goes to the node that ranks it highest by rendezvous
 * hash among the nodes with room left (shards taken in the order of their own hash), so a change
 * of membership moves few shards beyond those it must.
 */
export function assignShards(shards: readonly string[], nodes: readonly string[]): Map<string, string> {
  const out = new Map<string, string>();
  const k = nodes.length;
  if (k === 0) return out;
  const byNodeHash = [...new Set(nodes)].sort((a, b) => hash32(a) - hash32(b) || (a < b ? -1 : a > b ? 1 : 0));
  const base = Math.floor(shards.length / byNodeHash.length);
  const extra = shards.length % byNodeHash.length;
  const room = new Map<string, number>(byNodeHash.map((n, i) => [n, base + (i < extra ? 1 : 0)]));
  const order = [...shards].sort((a, b) => hash32(a) - hash32(b) || (a < b ? -1 : a > b ? 1 : 0));
  for (const shard of order) {
    let best: string | null = null;
    let bestScore = -1;
    for (const n of byNodeHash) {
      if (room.get(n)! <= 0) continue;
      const score = hash32(`${shard}\u0000${n}`);
      if (score > bestScore || (score === bestScore && best !== null && n < best)) {
        best = n;
        bestScore = score;
      }
    }
    // Total room equals the number of shards, so some node always has room.
    out.set(shard, best!);
    room.set(best!, room.get(best!)! - 1);
  }
  return out;
}

/** The shard names `shards` stands for, checked: a count in [1, 100,000] or distinct names. */
export function shardNames(shards: unknown): string[] {
  if (typeof shards === 'number') {
    if (!Number.isInteger(shards) || shards < 1 || shards > PARTITION_LIMITS.maxShards) {
      throw new InvalidArgumentError('shards', `expected a whole number of shards in [1, ${PARTITION_LIMITS.maxShards}] or an array of shard names, got ${String(shards)}`);
    }
    return Array.from({ length: shards }, (_, i) => String(i));
  }
  if (!Array.isArray(shards)) throw new InvalidArgumentError('shards', `expected a number of shards or an array of shard names, got ${shards === null ? 'null' : typeof shards}`);
  if (shards.length === 0) throw new InvalidArgumentError('shards', 'expected at least one shard name, got an empty array');
  return checkDistinctNames('shards', shards, PARTITION_LIMITS.maxShards);
}

export class Partitions extends TypedEmitter<PartitionsEvents> implements AsyncDisposable {
  readonly id: string;
  readonly name: string;
  readonly shards: readonly string[];
  readonly timing: Timing;
  private readonly store: Store;
  private readonly groups: GroupSet;
  private readonly clock: Clock;
  private readonly random: Random;
  private readonly reconcileMs: number;
  private readonly meta: LeaseMeta | undefined;
  private readonly memberLease: string;
  private readonly shardOf = new Map<string, string>();
  private cancelLoop: (() => void) | null = null;
  private looking: Promise<void> | null = null;
  private handingOver = new Set<Promise<unknown>>();
  /** Shards targeted to this node that another still holds, watched (where the store pushes) so a release is taken at once. */
  private readonly awaiting = new Map<string, Unsubscribe>();
  private lastView: PartitionView = { members: [], held: [], target: 0, free: 0 };
  private started = false;
  private stopping: Promise<void> | null = null;

  constructor(options: PartitionsOptions) {
    super();
    this.shards = shardNames(options.shards);
    this.name = checkName('name', options.name ?? 'partitions');
    this.id = checkOwner('id', options.id ?? `${hostname()}-${process.pid}`);
    if (this.id.includes('/')) throw new InvalidArgumentError('id', `a partition node id cannot contain '/', got '${this.id}'`);
    this.store = options.store;
    this.clock = options.clock ?? systemClock;
    this.random = options.random ?? systemRandom;
    this.meta = options.meta;
    this.memberLease = checkName('name', `${this.name}/member/${this.id}`);
    const leaseNames = this.shards.map((s) => {
      const lease = checkName('shards', `${this.name}/shard/${s}`);
      this.shardOf.set(lease, s);
      return lease;
    });
    const onGained = options.onGained;
    const onLost = options.onLost;
    const { store, ttlMs, renewIntervalMs, marginMs, retryMs, requestTimeoutMs, drainMs, clock, random } = options;
    this.groups = new GroupSet({
      ...{ store, ttlMs, renewIntervalMs, marginMs, retryMs, requestTimeoutMs, drainMs, clock, random },
      id: this.id,
      groups: leaseNames,
      campaign: false,
      maxGroups: PARTITION_LIMITS.maxShards,
      ...(onGained ? { onGained: (lease: string, ctx: GroupContext) => onGained(this.shardOf.get(lease)!, { ...ctx, shard: this.shardOf.get(lease)! }) } : {}),
      ...(onLost ? { onLost: (lease: string, reason: GroupLossReason) => onLost(this.shardOf.get(lease)!, reason) } : {}),
    });
    this.timing = this.groups.timing;
    this.reconcileMs = checkMs('reconcileMs', options.reconcileMs ?? Math.max(10, Math.floor(this.timing.ttlMs / 10)), 1, limits.ttlMaxMs);
    this.groups.on('gained', ({ group, term }) => this.emit('gained', { shard: this.shardOf.get(group)!, term }));
    this.groups.on('lost', ({ group, term, reason }) => this.emit('lost', { shard: this.shardOf.get(group)!, term, reason }));
    this.groups.on('callback-failed', ({ group, callback, error }) => this.emit('callback-failed', { shard: this.shardOf.get(group)!, callback, error }));
    // Losing membership (a pause past the TTL) means a new look at once: rejoin, give shards back.
    this.groups.leases.on('ended', ({ name }) => {
      if (name === this.memberLease && this.started && !this.stopping) this.schedule(0);
    });
  }

  /** The incarnation id the node's leases are held under. */
  get owner(): string {
    return this.groups.owner;
  }

  /** Shards this node leads now, sorted. */
  get held(): string[] {
    return this.groups.held.map((l) => this.shardOf.get(l)!).sort();
  }

  /** What the last look saw. */
  get view(): PartitionView {
    return this.lastView;
  }

  /** The context of a shard this node leads now, or null. */
  context(shard: string): ShardContext | null {
    const ctx = this.groups.context(`${this.name}/shard/${shard}`);
    return ctx ? { ...ctx, shard } : null;
  }

  /** Join: take the membership lease, look once, and keep looking every reconcileMs until stop(). */
  async start(): Promise<void> {
    if (this.started || this.stopping) return;
    this.started = true;
    this.groups.start();
    await this.look();
    if (!this.stopping) this.schedule(this.reconcileMs);
  }

  /** Leave: stop looking, drain every shard led (signals first), release them and the membership. */
  stop(): Promise<void> {
    this.stopping ??= (async () => {
      this.cancelLoop?.();
      this.cancelLoop = null;
      for (const unwatch of this.awaiting.values()) unwatch();
      this.awaiting.clear();
      await this.looking;
      await Promise.allSettled([...this.handingOver]);
      await this.groups.stop();
    })();
    return this.stopping;
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.stop();
  }

  /** Look once now (also what the loop does); resolves with what it saw. */
  async reconcile(): Promise<PartitionView> {
    await this.look();
    return this.lastView;
  }

  private schedule(ms: number): void {
    if (this.stopping) return;
    this.cancelLoop?.();
    const jitter = Math.floor(this.random.next() * Math.max(1, this.reconcileMs / 10));
    this.cancelLoop = this.clock.setTimer(ms + jitter, () => {
      this.cancelLoop = null;
      void this.look().finally(() => {
        if (!this.stopping && this.cancelLoop === null) this.schedule(this.reconcileMs);
      });
    });
  }

  private look(): Promise<void> {
    this.looking ??= this.lookOnce().finally(() => {
      this.looking = null;
    });
    return this.looking;
  }

  private async lookOnce(): Promise<void> {
    if (this.stopping) return;
    try {
      if (this.groups.leases.get(this.memberLease) === null) await this.groups.leases.attempt(this.memberLease, this.meta);
      if (this.stopping) return;
      const live = await this.withTimeout(this.store.list(`${this.name}/`));
      if (this.stopping) return;
      this.apply(live);
    } catch (err) {
      if (err instanceof StoreUnavailableError && this.stopping) return;
      this.emit('reconcile-failed', { error: err as Error });
    }
  }

  /** Decide from one list of the live leases: hand over what is not ours, acquire what is free and ours. */
  private apply(live: readonly Lease[]): void {
    const memberPrefix = `${this.name}/member/`;
    const members: string[] = [];
    const holders = new Map<string, string>();
    for (const l of live) {
      if (l.name.startsWith(memberPrefix)) {
        const id = l.name.slice(memberPrefix.length);
        // A member lease's owner is that node's incarnation; anything else is not a member.
        if (nodeIdOf(l.owner) === id) members.push(id);
      } else if (this.shardOf.has(l.name)) holders.set(l.name, l.owner);
    }
    members.sort();
    const target = assignShards(this.shards, members);
    const mine = this.groups.leases.get(this.memberLease) !== null && members.includes(this.id);
    let targetCount = 0;
    let free = 0;
    for (const [lease, shard] of this.shardOf) {
      const to = mine ? target.get(shard) : undefined;
      const holder = holders.get(lease);
      if (holder === undefined) free++;
      const handedToUs = to === this.id && holder !== undefined && holder !== this.owner;
      if (handedToUs) this.awaitRelease(lease);
      else this.stopAwaiting(lease);
      if (to === this.id) {
        targetCount++;
        // Free, or ours in the store but not yet here (a late acquire reply): acquire reconciles it.
        if (holder === undefined || holder === this.owner) this.tryAcquire(lease);
      } else if (this.groups.context(lease) !== null) {
        const p = this.groups.handOver(lease);
        this.handingOver.add(p);
        void p.finally(() => this.handingOver.delete(p));
      }
    }
    this.lastView = { members, held: this.held, target: targetCount, free };
    this.emit('view', this.lastView);
  }

  /**
   * Watch a shard the last look targeted to this node while its old leader drains it: when the
   * store pushes its release, acquire at once instead of at the next look. Stores without push
   * (MySQL) take it at the next look.
   */
  private awaitRelease(lease: string): void {
    if (!this.store.watch || this.awaiting.has(lease) || this.stopping) return;
    this.awaiting.set(
      lease,
      this.store.watch(lease, (now) => {
        if (now !== null || this.stopping) return;
        this.stopAwaiting(lease);
        this.tryAcquire(lease);
      }),
    );
  }

  private stopAwaiting(lease: string): void {
    const unwatch = this.awaiting.get(lease);
    if (unwatch === undefined) return;
    this.awaiting.delete(lease);
    unwatch();
  }

  private tryAcquire(lease: string): void {
    void this.groups.tryAcquire(lease).catch((error: unknown) => {
      if (!this.stopping) this.emit('reconcile-failed', { error: error as Error });
    });
  }

  private withTimeout<T>(promise: Promise<T>): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      const cancel = this.clock.setTimer(this.timing.requestTimeoutMs, () =>
        reject(new StoreUnavailableError(`${this.store.kind} store: no answer to list within ${this.timing.requestTimeoutMs} ms`)),
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

/** One node's share of a partition set, as the store's live leases show it. */
export interface PartitionOwner {
  /** The node id (from its incarnation). */
  readonly id: string;
  /** Whether the node holds a live membership lease. */
  readonly member: boolean;
  /** Shards it leads, sorted (numerically when the names are numbers). */
  readonly shards: readonly string[];
}

/**
 * Who leads which shard of the partition set `name`, from live leases (a `store.list(name + '/')`):
 * every member and every node leading a shard, sorted by id. `tenure status --partitions` shows it.
 */
export function partitionOwners(leases: readonly Lease[], name: string): PartitionOwner[] {
  const memberPrefix = `${name}/member/`;
  const shardPrefix = `${name}/shard/`;
  const byId = new Map<string, { member: boolean; shards: string[] }>();
  const entry = (id: string): { member: boolean; shards: string[] } => {
    let e = byId.get(id);
    if (!e) byId.set(id, (e = { member: false, shards: [] }));
    return e;
  };
  for (const l of leases) {
    if (l.name.startsWith(memberPrefix)) {
      const id = l.name.slice(memberPrefix.length);
      if (nodeIdOf(l.owner) === id) entry(id).member = true;
    } else if (l.name.startsWith(shardPrefix)) entry(nodeIdOf(l.owner)).shards.push(l.name.slice(shardPrefix.length));
  }
  const byName = (a: string, b: string): number => (/^\d+$/.test(a) && /^\d+$/.test(b) ? Number(a) - Number(b) : a < b ? -1 : a > b ? 1 : 0);
  return [...byId.entries()].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)).map(([id, e]) => ({ id, member: e.member, shards: e.shards.sort(byName) }));
}
