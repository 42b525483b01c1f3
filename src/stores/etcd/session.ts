/**
 * EtcdSession: one etcd lease kept alive, as Go's `concurrency.Session`. Elections and mutexes
 * put their keys under it; when it ends, etcd deletes them.
 *
 * Deadline (safety rule 2): every keepalive is sent at a local monotonic instant S; the session
 * counts as live until S + ttl - margin of the last *successful* keepalive. When that passes
 * without a newer success, `signal` aborts, whether or not etcd ever answers; etcd's own expiry is
 * never earlier, because it restarts the TTL when it receives the keepalive (after S).
 */
import { InvalidArgumentError, NotLeaderError, StoreUnavailableError, checkMs, checkTtl, timingDefaults } from '../../core/index.js';
import type { EtcdConnection } from './connection.js';
import { ttlSecondsFor } from './connection.js';
import { leaseIdHex } from './keys.js';

export interface EtcdSessionOptions {
  /** Lease TTL, ms (default 10000). etcd grants whole seconds, at least its minimum (1-2 s). */
  ttlMs?: number;
  /** The session ends locally this long before etcd could expire the lease, ms (default ttl / 10). */
  marginMs?: number;
}

export class EtcdSession {
  /** The etcd lease id, decimal (as the etcd3 package writes it). */
  readonly leaseId: string;
  /** The lease id in lowercase hex, as Go writes it in candidate keys. */
  readonly leaseHex: string;
  readonly ttlMs: number;
  private readonly marginMs: number;
  private readonly controller = new AbortController();
  private deadline: number;
  private cancelDeadline: () => void = () => {};
  private cancelKeepAlive: () => void = () => {};
  private closed = false;

  private constructor(private readonly conn: EtcdConnection, leaseId: string, sentAt: number, ttlMs: number, marginMs: number) {
    this.leaseId = leaseId;
    this.leaseHex = leaseIdHex(leaseId);
    this.ttlMs = ttlMs;
    this.marginMs = marginMs;
    this.deadline = sentAt + ttlMs - marginMs;
    this.armDeadline();
    this.scheduleKeepAlive();
  }

  /** Grant a lease and keep it alive. Rejects with StoreUnavailableError when etcd does not answer. */
  static async create(conn: EtcdConnection, options: EtcdSessionOptions = {}): Promise<EtcdSession> {
    const ttlMs = checkTtl('ttlMs', options.ttlMs ?? timingDefaults.ttlMs);
    const marginMs = checkMs('marginMs', options.marginMs ?? Math.floor(ttlMs / 10), 0, ttlMs - 1);
    if (ttlMs < 1000) throw new InvalidArgumentError('ttlMs', `etcd leases are whole seconds: must be in [1000, 86400000] ms, got ${ttlMs}`);
    const granted = await conn.grant(ttlSecondsFor(ttlMs));
    return new EtcdSession(conn, granted.id, granted.sentAt, ttlMs, marginMs);
  }

  /** Aborts when the session ends: deadline passed, lease gone in etcd, or closed. */
  get signal(): AbortSignal {
    return this.controller.signal;
  }

  get isLive(): boolean {
    return !this.controller.signal.aborted;
  }

  /** Local monotonic instant at which the session ends unless a keepalive succeeds first. */
  get deadlineAt(): number {
    return this.deadline;
  }

  /** End the session and revoke its lease, which deletes every key under it. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.end(new NotLeaderError(`etcd session ${this.leaseHex} closed`));
    await this.conn.revoke(this.leaseId).catch(() => {});
  }

  private end(reason: Error): void {
    this.cancelDeadline();
    this.cancelKeepAlive();
    if (!this.controller.signal.aborted) this.controller.abort(reason);
  }

  private armDeadline(): void {
    this.cancelDeadline();
    this.cancelDeadline = this.conn.clock.setTimer(this.deadline - this.conn.clock.now(), () =>
      this.end(new StoreUnavailableError(`etcd session ${this.leaseHex}: no keepalive succeeded before its deadline`)),
    );
  }

  private scheduleKeepAlive(afterFailure = false): void {
    if (!this.isLive) return;
    const intervalMs = Math.max(1, Math.floor(this.ttlMs / 3));
    const retryMs = Math.max(1, Math.min(Math.floor(this.ttlMs / 10), 500));
    const left = this.deadline - this.conn.clock.now();
    const wait = afterFailure ? retryMs : Math.max(0, Math.min(intervalMs, left - retryMs));
    this.cancelKeepAlive = this.conn.clock.setTimer(wait, () => void this.keepAlive());
  }

  private async keepAlive(): Promise<void> {
    if (!this.isLive) return;
    const sentAt = this.conn.clock.now();
    let ttlSeconds: number;
    try {
      ttlSeconds = await this.conn.keepAliveOnce(this.leaseId);
    } catch {
      this.scheduleKeepAlive(true); // unknown outcome: the deadline stands, try again
      return;
    }
    if (!this.isLive) return;
    if (ttlSeconds === 0) {
      this.end(new NotLeaderError(`etcd session ${this.leaseHex}: the lease expired in etcd`));
      return;
    }
    const deadline = sentAt + this.ttlMs - this.marginMs;
    // A deadline only moves forward: it comes from a later send time.
    if (deadline > this.deadline) {
      this.deadline = deadline;
      this.armDeadline();
    }
    this.scheduleKeepAlive();
  }
}
