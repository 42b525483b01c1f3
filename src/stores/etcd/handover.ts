/**
 * The hand-over waiting room of the etcd store, as a holder sees it: who waits for a name this
 * process holds, and the one txn in which a release gives the name to the oldest of them.
 *
 * A tenure candidate waiting on a watch puts a waiting-room key `\0tenure/wait/N\0<hex>` on its
 * own (spare) lease (see `spare-leases.ts`). The key is outside `N/`, so Go's
 * `concurrency.Election`/`Mutex` and etcdctl never see it. While this process holds N and
 * watches it, it follows N's waiting room (`follow`); its release then hands over (`handOver`):
 * one txn deletes the holder's key, puts the waiter's key on the waiter's own lease with the next
 * term, bumps the counter and empties the waiter's waiting-room key. The waiter hears it on its
 * watch and claims it with at most one keepalive (the store's `claimHandover`): no second commit,
 * no race between waiters.
 *
 * Invariants:
 * - A hand-over touches only the releaser's own key, compared on its create revision (rule 6).
 * - It never skips a queue: it happens only when the releaser's key is the only candidate under
 *   `N/` (a Go or etcdctl waiter keeps its place), else a plain release follows.
 * - It never overrides a hand-over hint: nothing may be held under `N/transfer-to/` (the hint
 *   LeaderElector.transferTo takes before it releases, of any age); the value it puts says so
 *   (`noHint`), and the winner skips its hint read (AcquireResult.noTransferHint).
 * - Once per store, a while after it first holds a watched name, the same txn is sent behind a
 *   guard no key passes (`warm`): nothing is written; the real one is then not the process's first.
 * - The waiter is taken only as last read (its key's mod revision), so its lease lives and its
 *   value (owner, TTL, meta) is current; never the holder itself, nor a key on the holder's lease.
 * - The next term is issued here once: the txn compares the counter with the held term (rule 4);
 *   at term 2^53 - 1 there is no next term and nothing is handed over.
 * - A failed guard changes nothing and forgets what was known of the waiting room (it was stale).
 * - The releaser's emptied lease is revoked REVOKE_DELAY_MS later, so the waiter's claim does not
 *   wait behind that revoke's commit; a store closed by then leaves the empty lease to expire.
 */
import { transferHintName } from '../../core/index.js';
import type { LeaseMeta } from '../../core/index.js';
import { CandidateWatch } from './candidate-watch.js';
import type { EtcdConnection } from './connection.js';
import type { ICompare, IKeyValue, IRequestOp } from './driver.js';
import { decodeValue, encodeValue, prefixEnd, rangeStart, sameLease } from './keys.js';

/** The key this process put for a lease it acquired: what `release` needs to delete it in one txn. */
export interface HeldKey {
  readonly owner: string;
  readonly term: number;
  readonly key: Buffer;
  readonly createRevision: string;
  readonly leaseId: string;
  /**
   * Put by another process's release, handing the lease over to our spare (see `handOver`), and
   * not yet confirmed by an acquire of its owner: the next acquire claims it (`claimHandover`).
   */
  handedOver: boolean;
  /** Handed over by a release that found no hand-over hint held (`TenureValue.noHint`). */
  noHint: boolean;
}

/** A waiting tenure candidate as read from the waiting room (`KeyLayout.waiters`). */
interface Waiter {
  readonly key: Buffer;
  readonly modRevision: string;
  readonly leaseId: string;
  readonly owner: string;
  readonly ttlMs: number;
  readonly meta: LeaseMeta;
}

/** What a hand-over did: the term it issued and the releaser's lease, now empty (when etcd returned it). */
export interface HandedOver {
  readonly term: number;
  readonly emptiedLease: string | null;
}

/** How long after it first holds a name a store warms the hand-over txn (see `warm`). */
const WARM_DELAY_MS = 250;

/** How long after a hand-over the releaser revokes its emptied lease (see `handOver`). */
const REVOKE_DELAY_MS = 200;

export class WaitingRoom {
  /** The waiting room of each name as last read (oldest first): whom a release can hand over to. */
  private readonly waiting = new Map<string, Waiter[]>();
  /** The watch on the waiting room of each name this process holds and watches. */
  private readonly watches = new Map<string, CandidateWatch>();
  /** Whether `warm` has run. */
  private warmed = false;
  /** Timers not fired yet, each as its cancel: revokes of emptied leases (`revokeSoon`) and the warm-up (`warm`). */
  private readonly timers = new Set<() => void>();

  constructor(private readonly connection: EtcdConnection) {}

  /** Reads the waiting room of `name`, oldest first (its answer goes to `note`). */
  readOp(name: string): IRequestOp {
    const prefix = this.connection.layout.waiters(name);
    return { request_range: { key: prefix, range_end: prefixEnd(prefix), sort_target: 'Create', sort_order: 'Ascend' } };
  }

  /** The waiting room of `name` as just read (oldest first). */
  note(name: string, kvs: IKeyValue[]): void {
    const waiters: Waiter[] = [];
    for (const kv of kvs) {
      const value = decodeValue(kv.value);
      if (!value || kv.lease === '0') continue;
      waiters.push({ key: kv.key, modRevision: kv.mod_revision, leaseId: kv.lease, owner: value.owner, ttlMs: value.ttlMs, meta: value.meta });
    }
    if (waiters.length > 0) this.waiting.set(name, waiters);
    else this.waiting.delete(name);
  }

  /**
   * Watch the waiting room of `name` (while this process holds it and watches it), or stop, so
   * that a release knows whom to hand over to (waiters do not need it).
   */
  follow(name: string, on: boolean): void {
    const watch = this.watches.get(name);
    if (on && !watch) {
      const w = new CandidateWatch(this.connection, this.connection.layout.waiters(name), (kv) => kv.lease !== '0', (kv) =>
        this.note(name, kv ? [kv] : []),
      );
      this.watches.set(name, w);
      w.start();
    } else if (!on && watch) {
      watch.stop();
      this.watches.delete(name);
    }
  }

  /**
   * Release by handing over (see the module comment) to the oldest waiter that is not the holder.
   * Returns null, having changed nothing, when the txn's guards fail, no one waits, or the held
   * term is 2^53 - 1 (the highest tenure issues).
   */
  async handOver(name: string, held: HeldKey): Promise<HandedOver | null> {
    // At term 2^53 - 1 there is no next term to hand over: a plain release, and the waiter's own
    // acquire reports the StoreDataError.
    if (held.term >= Number.MAX_SAFE_INTEGER) return null;
    const to = this.waiting.get(name)?.find((w) => w.owner !== held.owner && !sameLease(w.leaseId, held.leaseId));
    if (!to) return null;
    const { compare, success } = this.handOverTxn(name, held, to);
    const res = await this.connection.txn(`release ${name}`, compare, success);
    if (!res.succeeded) {
      // Stale knowledge (the waiter left, or someone queued): forget it; a plain release follows.
      this.waiting.delete(name);
      return null;
    }
    this.waiting.set(name, (this.waiting.get(name) ?? []).filter((w) => w !== to));
    const prev = res.responses[0]?.response_delete_range?.prev_kvs?.[0];
    return { term: held.term + 1, emptiedLease: prev ? prev.lease : null };
  }

  /** The hand-over txn of `held` to `to` (see the module comment): its guards and its writes. */
  private handOverTxn(name: string, held: HeldKey, to: Waiter): { compare: ICompare[]; success: IRequestOp[] } {
    const conn = this.connection;
    const prefix = conn.layout.candidates(name);
    const termKey = conn.layout.term(name);
    const next = held.term + 1;
    // The group's hand-over hint (`GROUP/transfer-to`, LeaderElector.transferTo) must not be held:
    // a leader handing over to a named node writes it, then releases, and that release must not
    // give the lease to the oldest waiter instead. Checked in the txn, so the waiter, told so in
    // its value, need not read the hint after its win (AcquireResult.noTransferHint).
    const hint = transferHintName(name);
    const hintPrefix = hint === null ? null : conn.layout.candidates(hint);
    const compare: ICompare[] = [
      // Our own key, the one this process put (rule 6)...
      { key: held.key, target: 'Create', result: 'Equal', create_revision: held.createRevision },
      // ...is the only candidate: nobody (Go, etcdctl) waits in line under N/ to be skipped...
      { key: rangeStart(prefix), range_end: prefixEnd(prefix), target: 'Create', result: 'Less', create_revision: String(Number(held.createRevision) + 1) },
      // ...the waiter is still there as we read it (so its lease lives, and its value is current)...
      { key: to.key, target: 'Mod', result: 'Equal', mod_revision: to.modRevision },
      // ...and the counter still says our term (rule 4: the next one is issued here, once)...
      { key: termKey, target: 'Value', result: 'Equal', value: Buffer.from(String(held.term)) },
    ];
    // ...and no hand-over hint is held (an empty range compares as create revision 0).
    if (hintPrefix !== null) compare.push({ key: hintPrefix, range_end: prefixEnd(hintPrefix), target: 'Create', result: 'Equal', create_revision: '0' });
    const success: IRequestOp[] = [
      { request_delete_range: { key: held.key, prev_kv: true } },
      { request_delete_range: { key: to.key } },
      {
        request_put: {
          key: conn.layout.candidate(name, to.leaseId),
          value: encodeValue({ owner: to.owner, term: next, ttlMs: to.ttlMs, meta: to.meta, noHint: hintPrefix !== null }),
          lease: to.leaseId,
        },
      },
      { request_put: { key: termKey, value: Buffer.from(String(next)) } },
    ];
    return { compare, success };
  }

  /**
   * Once per store, when it first holds a name it watches: build a hand-over txn of `held` and
   * send it with a guard that never holds (no key has a mod revision below 0), so nothing is
   * written. A release is most often a process's first and only one (a rolling restart): without
   * this, building and encoding the hand-over's messages for the first time in that process (the
   * gRPC layer generates its encoders on first use) added milliseconds to the hand-over itself.
   */
  warm(name: string, held: HeldKey): void {
    if (this.warmed) return;
    this.warmed = true;
    // Later, not now: a new holder's first moments are its claim and its first renews.
    this.later(WARM_DELAY_MS, () => {
      if (!this.connection.isClosed) this.sendWarm(name, held);
    });
  }

  private sendWarm(name: string, held: HeldKey): void {
    // Keys of no one (lease 0 is no lease), so the txn is well formed (no key twice) and the
    // guard is what keeps it from writing.
    const dummy: Waiter = { key: this.connection.layout.waiter(name, '0'), modRevision: '0', leaseId: '0', owner: held.owner, ttlMs: 1000, meta: {} };
    const { compare, success } = this.handOverTxn(name, held, dummy);
    const never: ICompare = { key: held.key, target: 'Mod', result: 'Less', mod_revision: '0' };
    void this.connection.txn(`warm ${name}`, [never, ...compare], success).catch(() => {});
  }

  /**
   * Revoke a lease emptied by a hand-over REVOKE_DELAY_MS from now: the waiter's claim (a
   * keepalive, which etcd answers once every committed entry is applied) should not wait for
   * this revoke's commit. Nothing is on the lease.
   */
  revokeSoon(leaseId: string): void {
    this.later(REVOKE_DELAY_MS, () => void this.connection.revoke(leaseId).catch(() => {}));
  }

  /** Run `fn` in `ms`, unless `cancelTimers` comes first. */
  private later(ms: number, fn: () => void): void {
    const cancel = this.connection.clock.setTimer(ms, () => {
      this.timers.delete(cancel);
      fn();
    });
    this.timers.add(cancel);
  }

  /** Cancel what has not run yet: revokes not sent (the store closes: the empty leases expire) and the warm-up. */
  cancelTimers(): void {
    for (const cancel of this.timers) cancel();
    this.timers.clear();
  }
}
