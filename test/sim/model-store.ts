/**
 * The lease store of the machine simulation: the core's pure lease decisions (decideAcquire,
 * decideRenew, decideRelease, decideFence, the ones every real store applies) on plain maps,
 * answered at once on the store's clock (virtual time). No promises: what it does depends only
 * on the order in which requests land, which the simulation's network decides.
 */
import { StaleTermError, decideAcquire, decideFence, decideRelease, renewLease, toLease } from '../../src/core/index.js';
import type { AcquireResult, Clock, FencingToken, Lease, LeaseRow, RenewResult, StreamEntry } from '../../src/core/index.js';
import type { Variant } from './plan.js';

export class ModelStore {
  private readonly leases = new Map<string, LeaseRow>();
  /** Highest term accepted per lease, across its streams. */
  private readonly fences = new Map<string, number>();
  readonly streams = new Map<string, StreamEntry[]>();
  private readonly watchers = new Map<string, ((lease: Lease | null) => void)[]>();

  /** `unfenced` and `fake-ack` break the fence on purpose, as the shell simulation's variants do. */
  constructor(
    private readonly clock: Clock,
    private readonly variant: Variant = 'none',
  ) {}

  acquire(name: string, owner: string, ttlMs: number): AcquireResult {
    const now = this.clock.now();
    const decision = decideAcquire(this.leases.get(name), name, owner, ttlMs, {}, now);
    if (!decision.acquired) return { acquired: false, lease: toLease(decision.row, now) };
    this.leases.set(name, decision.row);
    const lease = toLease(decision.row as LeaseRow & { owner: string }, now);
    if (decision.newTerm) this.notify(name, lease);
    return { acquired: true, lease };
  }

  renew(name: string, owner: string, term: number, ttlMs: number): RenewResult {
    return renewLease(this.leases.get(name), owner, term, ttlMs, this.clock.now(), (row) => this.leases.set(name, row));
  }

  release(name: string, owner: string, term: number): boolean {
    const next = decideRelease(this.leases.get(name), owner, term, this.clock.now());
    if (next === null) return false;
    this.leases.set(name, next);
    this.notify(name, null);
    return true;
  }

  /** Throws StaleTermError for a term below the highest accepted (a plain Error for one never issued). */
  appendFenced(token: FencingToken, stream: string, payload: string): number {
    const entries = this.streams.get(stream) ?? [];
    this.streams.set(stream, entries);
    const highest = this.fences.get(token.lease) ?? 0;
    const verdict = this.variant === 'unfenced' ? 'ok' : decideFence(token.term, highest, this.leases.get(token.lease)?.term ?? 0);
    if (verdict === 'stale') {
      if (this.variant === 'fake-ack') return entries.length; // a silent "success" pointing at someone else's entry
      throw new StaleTermError(token.lease, token.term, highest);
    }
    if (verdict === 'unissued') throw new Error(`term ${token.term} was never issued for ${token.lease}`);
    this.fences.set(token.lease, Math.max(highest, token.term));
    entries.push({ stream, seq: entries.length + 1, lease: token.lease, term: token.term, payload, appendedAt: 0 });
    return entries.length;
  }

  /** `listener` hears every change of holder (a new term, a release), as a store's watch does. */
  watch(name: string, listener: (lease: Lease | null) => void): void {
    const list = this.watchers.get(name) ?? [];
    this.watchers.set(name, list);
    list.push(listener);
  }

  private notify(name: string, lease: Lease | null): void {
    for (const listener of this.watchers.get(name) ?? []) listener(lease);
  }
}
