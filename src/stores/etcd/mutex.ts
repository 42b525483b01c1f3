/**
 * EtcdMutex: Go's `concurrency.Mutex` in TypeScript, so tenure, Go services and
 * `etcdctl lock NAME` exclude each other.
 *
 * The key is `<NAME>/<session lease hex>` with an empty value, under the session's lease; the
 * lowest create revision holds the lock; a waiter watches only the key just before its own.
 * The fencing token is `{ lease: NAME, term: create revision of our key }` (Go's
 * `Mutex.Header().Revision` is the revision of the acquiring txn; the create revision is the
 * same number when the lock is taken uncontended and is the one that identifies the holder).
 * Unlock deletes our key iff its create revision is still ours.
 */
import { LockTimeoutError, NotLeaderError, checkMs, checkName, limits, makeToken } from '../../core/index.js';
import type { FencingToken } from '../../core/index.js';
import { enter, leave, waitForTurn, watchOwnKey } from './candidacy.js';
import { EtcdConnection } from './connection.js';
import type { EtcdConnectionOptions } from './connection.js';
import type { ICompare } from './driver.js';
import { EtcdSession } from './session.js';
import type { EtcdSessionOptions } from './session.js';

export interface EtcdMutexOptions extends EtcdConnectionOptions, EtcdSessionOptions {
  /** The lock's name; its keys are `<namespace><name>/<lease hex>` (`etcdctl lock NAME`). */
  name: string;
  connection?: EtcdConnection;
}

export interface EtcdLockHandle extends AsyncDisposable {
  readonly name: string;
  readonly key: string;
  readonly revision: number;
  readonly token: FencingToken;
  /** Aborts when the lock is lost (session deadline, lease gone, key deleted) or unlocked. */
  readonly signal: AbortSignal;
  /** A compare for your own etcd txn: true only while we hold the lock (Go's IsOwner). */
  ownerCompare(): ICompare;
  /** Delete our key iff it is still ours. Idempotent. */
  unlock(): Promise<void>;
}

export class EtcdMutex {
  readonly name: string;
  readonly connection: EtcdConnection;
  private readonly ownsConnection: boolean;
  private readonly sessionOptions: EtcdSessionOptions;
  private session: EtcdSession | null = null;

  constructor(options: EtcdMutexOptions) {
    this.name = checkName('name', options.name);
    this.ownsConnection = options.connection === undefined;
    this.connection = options.connection ?? new EtcdConnection(options);
    this.sessionOptions = { ...(options.ttlMs !== undefined ? { ttlMs: options.ttlMs } : {}), ...(options.marginMs !== undefined ? { marginMs: options.marginMs } : {}) };
  }

  /**
   * Wait in line and take the lock. Rejects with LockTimeoutError after `waitMs`, with the
   * signal's reason when `signal` aborts (our key is withdrawn in both cases), and with
   * StoreUnavailableError when etcd cannot be reached.
   */
  async lock(options: { signal?: AbortSignal; waitMs?: number } = {}): Promise<EtcdLockHandle> {
    const { waitMs } = options;
    if (waitMs !== undefined) checkMs('waitMs', waitMs, 0, limits.ttlMaxMs);
    const session = await this.liveSession();
    const conn = this.connection;
    const prefix = conn.layout.candidates(this.name);
    const key = conn.layout.candidate(this.name, session.leaseId);
    const entered = await enter(conn, prefix, key, Buffer.alloc(0), session.leaseId);
    if (entered.holder === null || Number(entered.holder.create_revision) === entered.revision) return this.handle(session, key, entered.revision);
    const timeout = new AbortController();
    const cancelTimer = waitMs === undefined ? () => {} : conn.clock.setTimer(waitMs, () => timeout.abort(new LockTimeoutError(this.name, waitMs)));
    const signals = [session.signal, timeout.signal, ...(options.signal ? [options.signal] : [])];
    try {
      await waitForTurn(conn, prefix, entered.revision, AbortSignal.any(signals));
    } catch (err) {
      await leave(conn, key, entered.revision).catch(() => {}); // as Go: release the key if the wait failed
      throw err;
    } finally {
      cancelTimer();
    }
    return this.handle(session, key, entered.revision);
  }

  /** Take the lock only if nobody holds it (Go's TryLock); null when it is held. */
  async tryLock(): Promise<EtcdLockHandle | null> {
    const session = await this.liveSession();
    const conn = this.connection;
    const key = conn.layout.candidate(this.name, session.leaseId);
    const entered = await enter(conn, conn.layout.candidates(this.name), key, Buffer.alloc(0), session.leaseId);
    if (entered.holder === null || Number(entered.holder.create_revision) === entered.revision) return this.handle(session, key, entered.revision);
    await leave(conn, key, entered.revision);
    return null;
  }

  /** End the session (revoking its lease: any lock held is released) and close what we made. */
  async close(): Promise<void> {
    await this.session?.close();
    this.session = null;
    if (this.ownsConnection) this.connection.close();
  }

  private async liveSession(): Promise<EtcdSession> {
    if (this.session?.isLive) return this.session;
    this.session = await EtcdSession.create(this.connection, this.sessionOptions);
    return this.session;
  }

  private handle(session: EtcdSession, key: Buffer, revision: number): EtcdLockHandle {
    const conn = this.connection;
    const controller = new AbortController();
    const lost = (reason: unknown): void => {
      stopWatching();
      session.signal.removeEventListener('abort', onSessionEnd);
      if (!controller.signal.aborted) controller.abort(reason);
    };
    const onSessionEnd = (): void => lost(session.signal.reason);
    session.signal.addEventListener('abort', onSessionEnd, { once: true });
    const stopWatching = watchOwnKey(conn, key, revision, () => lost(new NotLeaderError(`lock ${this.name} lost: our key was deleted`)));
    if (!session.isLive) onSessionEnd();
    let unlocked: Promise<void> | null = null;
    const unlock = (): Promise<void> =>
      (unlocked ??= (async () => {
        lost(new NotLeaderError(`lock ${this.name} released`));
        await leave(conn, key, revision);
      })().catch((err: unknown) => {
        unlocked = null; // a retry is safe: the delete compares our create revision
        throw err;
      }));
    return {
      name: this.name,
      key: key.toString(),
      revision,
      token: makeToken(this.name, revision),
      signal: controller.signal,
      ownerCompare: () => {
        if (controller.signal.aborted) throw new NotLeaderError(`lock ${this.name} is not held`);
        return { key, target: 'Create', result: 'Equal', create_revision: revision };
      },
      unlock,
      [Symbol.asyncDispose]: unlock,
    };
  }
}
