/**
 * The spare-lease pool of the etcd store: at most one etcd lease per name, granted ahead of need
 * for a tenure candidate of this process that lost an acquire and waits on a watch.
 *
 * Why: the acquire after a release then needs no LeaseGrant round trip (it sends a keepalive
 * with its txn), and a releasing holder can hand the name over to the spare (see `handover.ts`):
 * each spare carries a waiting-room key (`\0tenure/wait/N\0<hex>`, outside `N/`, so Go never sees
 * it) on its own lease.
 *
 * Invariants:
 * - A spare is granted SPARE_EXTRA_S longer than the TTL asked for and kept alive every quarter
 *   of its TTL, so at any moment it has at least the asked TTL left: a hand-over to it can be
 *   claimed with no round trip.
 * - No candidate key is ever put on a spare by this module: only an acquire that took it
 *   (`take`), or another process's release handing over to it, puts one.
 * - A spare is ready (`ready`, `take`) only once its waiting-room key is in; it is handed to an
 *   acquire only with at least SPARE_MARGIN_MS of its TTL left.
 * - Once a spare is taken, dropped or claimed (`done`), its timer and late answers leave it alone.
 * - A spare leaves by `retire`: its waiting-room key is deleted in a txn that checks no candidate
 *   key is on the lease, and only then is the lease revoked, so a lease a release handed over is
 *   never revoked from under its new holder. `leaveAll` lets `close` wait for those txns.
 * - Spares exist only for watched names (`isWatched`) on an open connection.
 */
import type { LeaseMeta } from '../../core/index.js';
import { ttlSecondsFor } from './connection.js';
import type { EtcdConnection, GrantedLease } from './connection.js';
import { encodeValue, sameLease } from './keys.js';

/**
 * An etcd lease granted ahead of need for a candidate that is waiting (it lost an acquire and
 * watches the name), kept alive every quarter of its TTL, so that the acquire after a release
 * needs no LeaseGrant round trip. No candidate key is attached to it until an acquire puts one.
 */
export interface Spare {
  readonly requestedSeconds: number;
  /** Who waits with it: written to its waiting-room key, so a releasing holder can hand over to it. */
  readonly owner: string;
  readonly ttlMs: number;
  readonly meta: LeaseMeta;
  /** Set once the lease is granted and its waiting-room key put. */
  lease: GrantedLease | null;
  /** Send time of the grant or of the last keepalive etcd answered, and the TTL it reset to. */
  aliveSince: number;
  ttlSeconds: number;
  cancelTimer: () => void;
  /** Taken by an acquire or dropped: timers and late answers leave it alone. */
  done: boolean;
}

/** A spare handed over to by a release, as the store adopts it: its lease and how long it lives. */
export interface AdoptedSpare {
  readonly leaseId: string;
  readonly ttlSeconds: number;
  readonly aliveSince: number;
}

/** A spare is used only with at least this much of its TTL left, so the keepalive sent with the acquire surely finds it alive. */
const SPARE_MARGIN_MS = 500;

/**
 * A spare lease is granted this much longer than the TTL asked for and kept alive every quarter
 * of its TTL, so that at any moment it has at least the asked TTL left (and the store's
 * CLAIM_SLACK_MS): a hand-over to it can be claimed with no round trip (see `claimHandover`).
 */
const SPARE_EXTRA_S = 1;

export class SpareLeases {
  private readonly spares = new Map<string, Spare>();
  /** Spares on their way out of a waiting room (see `retire`): `close` waits for them. */
  private readonly leaving = new Set<Promise<void>>();

  constructor(
    private readonly connection: EtcdConnection,
    /** Whether the store watches `name`: only a watched name keeps a spare. */
    private readonly isWatched: (name: string) => boolean,
  ) {}

  /** A spare of `name` for this TTL is ready (granted, in the waiting room). */
  ready(name: string, seconds: number): boolean {
    const spare = this.spares.get(name);
    return spare !== undefined && spare.lease !== null && spare.requestedSeconds === seconds;
  }

  /**
   * Grant a spare lease for `owner`, a candidate of `name` that waits on a watch, and put its
   * waiting-room key on it (see Spare and `handOver`).
   */
  prepare(name: string, seconds: number, owner: string, ttlMs: number, meta: LeaseMeta): void {
    if (!this.isWatched(name) || this.connection.isClosed) return;
    const have = this.spares.get(name);
    if (have && have.requestedSeconds === seconds && have.owner === owner && have.ttlMs === ttlMs && sameMeta(have.meta, meta)) return;
    if (have) void this.drop(name);
    const spare = newSpare(seconds, owner, ttlMs, meta);
    this.spares.set(name, spare);
    this.connection.grant(seconds + SPARE_EXTRA_S).then(
      (granted) => this.register(name, spare, granted, granted.sentAt, granted.ttlSeconds),
      () => {
        if (this.spares.get(name) === spare) this.spares.delete(name);
        spare.done = true;
      },
    );
  }

  /** Keep a lease granted for an acquire that lost as the spare of `name` (when watched). */
  keep(name: string, granted: GrantedLease, owner: string, ttlMs: number, meta: LeaseMeta): void {
    if (this.spares.has(name) || !this.isWatched(name) || this.connection.isClosed) {
      void this.connection.revoke(granted.id).catch(() => {});
      return;
    }
    const spare = newSpare(ttlSecondsFor(ttlMs), owner, ttlMs, meta);
    this.spares.set(name, spare);
    this.register(name, spare, granted, granted.sentAt, granted.ttlSeconds);
  }

  /** The spare of `name` for this TTL, if it has enough time left; it is the caller's from then on. */
  take(name: string, seconds: number): Spare | null {
    const spare = this.spares.get(name);
    if (!spare?.lease || spare.requestedSeconds !== seconds) return null;
    this.spares.delete(name);
    spare.done = true;
    spare.cancelTimer();
    if (this.connection.clock.now() - spare.aliveSince > spare.ttlSeconds * 1000 - SPARE_MARGIN_MS) {
      void this.retire(name, spare.lease.id);
      return null;
    }
    return spare;
  }

  /** Put a spare back as the spare of `name` (an acquire that used it lost the race). */
  restore(name: string, spare: Spare, aliveSince: number, ttlSeconds: number): void {
    if (this.spares.has(name) || !this.isWatched(name) || this.connection.isClosed) {
      void this.retire(name, spare.lease!.id);
      return;
    }
    spare.done = false;
    spare.aliveSince = aliveSince;
    spare.ttlSeconds = ttlSeconds;
    this.spares.set(name, spare);
    this.keepAlive(name, spare);
  }

  /**
   * A release handed `name` over to the spare on `leaseId`: it stops being a spare (no more
   * keepalives from its timer) and is the caller's. Null when `name`'s spare is not on that lease.
   */
  takeHandedOver(name: string, leaseId: string): AdoptedSpare | null {
    const spare = this.spares.get(name);
    if (!spare?.lease || !sameLease(spare.lease.id, leaseId)) return null;
    this.spares.delete(name);
    spare.done = true;
    spare.cancelTimer();
    return { leaseId: spare.lease.id, ttlSeconds: spare.ttlSeconds, aliveSince: spare.aliveSince };
  }

  /** Drop the spare of `name` when it waits for `owner` (a release must never hand a name to its holder). */
  dropOwnedBy(name: string, owner: string): void {
    if (this.spares.get(name)?.owner === owner) void this.drop(name);
  }

  /** `owner` stopped waiting for `name`: its spare leaves the waiting room (settles when it has, or failed to). */
  withdraw(name: string, owner: string): Promise<void> {
    return this.spares.get(name)?.owner === owner ? this.drop(name) : Promise.resolve();
  }

  drop(name: string): Promise<void> {
    const spare = this.spares.get(name);
    if (!spare) return Promise.resolve();
    this.spares.delete(name);
    spare.done = true;
    spare.cancelTimer();
    return spare.lease ? this.retire(name, spare.lease.id) : Promise.resolve();
  }

  /** Drop every spare; settles when all of them have left their waiting rooms (or failed to). */
  leaveAll(): Promise<unknown> {
    for (const name of [...this.spares.keys()]) void this.drop(name);
    return Promise.allSettled([...this.leaving]);
  }

  private keepAlive(name: string, spare: Spare): void {
    const conn = this.connection;
    spare.cancelTimer = conn.clock.setTimer(Math.max(100, (spare.ttlSeconds * 1000) / 4), () => {
      if (spare.done || !spare.lease) return;
      const sentAt = conn.clock.now();
      conn.keepAliveOnce(spare.lease.id).then(
        (ttlSeconds) => {
          if (spare.done) return;
          if (ttlSeconds === 0) {
            void this.drop(name);
            return;
          }
          spare.aliveSince = sentAt;
          spare.ttlSeconds = ttlSeconds;
          this.keepAlive(name, spare);
        },
        () => {
          if (!spare.done) this.keepAlive(name, spare);
        },
      );
    });
  }

  /** Put the spare's waiting-room key on its lease; the spare is ready (and kept alive) once it is in. */
  private register(name: string, spare: Spare, granted: GrantedLease, aliveSince: number, ttlSeconds: number): void {
    const conn = this.connection;
    if (spare.done) {
      void conn.revoke(granted.id).catch(() => {}); // nothing is on it yet
      return;
    }
    const value = encodeValue({ owner: spare.owner, term: 0, ttlMs: spare.ttlMs, meta: spare.meta });
    conn.txn(`wait for ${name}`, [], [{ request_put: { key: conn.layout.waiter(name, granted.id), value, lease: granted.id } }]).then(
      () => {
        spare.lease = granted;
        spare.aliveSince = aliveSince;
        spare.ttlSeconds = ttlSeconds;
        if (spare.done) {
          void this.retire(name, granted.id); // dropped meanwhile; a release may have seen the key
          return;
        }
        this.keepAlive(name, spare);
        conn.prepareKeepAlives(); // a hand-over is claimed by a keepalive: have its stream open
      },
      () => {
        if (this.spares.get(name) === spare) this.spares.delete(name);
        spare.done = true;
        void this.retire(name, granted.id);
      },
    );
  }

  /**
   * Revoke a spare lease, unless a release has handed `name` over to it: first its waiting-room
   * key is deleted, in a txn that checks no candidate key is on the lease (after that no release
   * can hand over to it, so the revoke deletes nothing but that key). A handed-over key is left
   * to its owner's acquire, or to expire: revoking it could pull the lease from under an acquire
   * that is claiming it.
   */
  private retire(name: string, leaseId: string): Promise<void> {
    const conn = this.connection;
    if (conn.isClosed) return Promise.resolve();
    const leaving = conn
      .txn(
        `leave ${name}`,
        [{ key: conn.layout.candidate(name, leaseId), target: 'Create', result: 'Equal', create_revision: 0 }],
        [{ request_delete_range: { key: conn.layout.waiter(name, leaseId) } }],
      )
      .then((res) => (res.succeeded ? conn.revoke(leaseId) : undefined))
      .catch(() => {})
      .finally(() => this.leaving.delete(leaving));
    this.leaving.add(leaving);
    return leaving;
  }
}

function newSpare(seconds: number, owner: string, ttlMs: number, meta: LeaseMeta): Spare {
  return { requestedSeconds: seconds, owner, ttlMs, meta, lease: null, aliveSince: 0, ttlSeconds: 0, cancelTimer: () => {}, done: false };
}

function sameMeta(a: LeaseMeta, b: LeaseMeta): boolean {
  return JSON.stringify(a) === JSON.stringify(b);
}
