/**
 * EtcdElection: Go's `concurrency.Election` in TypeScript, so a tenure node, Go services and
 * `etcdctl elect NAME` campaign in one election.
 *
 * - `campaign(value)` puts `<NAME>/<session lease hex>` with `value` under the session's lease
 *   and resolves when that key has the lowest create revision under `<NAME>/`; meanwhile it
 *   watches only the key just before its own.
 * - The fencing token is `{ lease: NAME, term: create revision of our key }` (Go's
 *   `Election.Rev()`). It is monotonic per election: a new key always gets a revision above every
 *   existing key, so the lowest live create revision never goes down, and it goes up whenever
 *   leadership changes hands. Guard your own etcd writes with `ownerCompare()`.
 * - `resign()` deletes our key iff its create revision is still ours; `proclaim(value)` rewrites
 *   it under the same compare.
 * - `leader()` and `observe()` read the lowest key, as Go's `Leader` and `Observe` do.
 * - Leadership ends (its `signal` aborts) when the session's keepalive deadline passes, when etcd
 *   says the lease is gone, when our key is deleted by anyone, or on resign/close.
 */
import { NotLeaderError, checkName, makeToken } from '../../core/index.js';
import type { FencingToken, Unsubscribe } from '../../core/index.js';
import { CandidateWatch } from './candidate-watch.js';
import { enter, leave, waitForTurn, watchOwnKey } from './candidacy.js';
import { EtcdConnection } from './connection.js';
import type { EtcdConnectionOptions } from './connection.js';
import type { ICompare, IKeyValue } from './driver.js';
import { leaseIdHex, prefixEnd } from './keys.js';
import { EtcdSession } from './session.js';
import type { EtcdSessionOptions } from './session.js';

export interface EtcdElectionOptions extends EtcdConnectionOptions, EtcdSessionOptions {
  /** The election's name; its keys are `<namespace><name>/<lease hex>` (`etcdctl elect NAME`). */
  name: string;
  /** Share a connection (for example an EtcdStore's `connection`) instead of `client`/`hosts`. */
  connection?: EtcdConnection;
}

/** A candidate key as Go's `Leader()` returns it. */
export interface EtcdCandidate {
  readonly key: string;
  readonly value: string;
  /** The key's create revision: its place in line, and the holder's fencing term. */
  readonly revision: number;
  /** The etcd lease the key lives under, in lowercase hex. */
  readonly lease: string;
}

export interface EtcdLeadership {
  readonly key: string;
  /** Create revision of our key. */
  readonly revision: number;
  /** `{ lease: name, term: revision }`. */
  readonly token: FencingToken;
  /** Aborts when leadership ends (deadline, lease lost, key deleted, resign, close). */
  readonly signal: AbortSignal;
}

interface Held {
  readonly key: Buffer;
  readonly revision: number;
  readonly controller: AbortController;
  readonly leadership: EtcdLeadership;
  stopWatching: () => void;
}

export class EtcdElection {
  readonly name: string;
  readonly connection: EtcdConnection;
  private readonly ownsConnection: boolean;
  private readonly sessionOptions: EtcdSessionOptions;
  private session: EtcdSession | null = null;
  private held: Held | null = null;
  /** Our key while campaigning or leading: what resign deletes. */
  private mine: { key: Buffer; revision: number } | null = null;

  constructor(options: EtcdElectionOptions) {
    this.name = checkName('name', options.name);
    this.ownsConnection = options.connection === undefined;
    this.connection = options.connection ?? new EtcdConnection(options);
    this.sessionOptions = { ...(options.ttlMs !== undefined ? { ttlMs: options.ttlMs } : {}), ...(options.marginMs !== undefined ? { marginMs: options.marginMs } : {}) };
  }

  /** The prefix of the election's keys, `<namespace><name>/`. */
  get prefix(): Buffer {
    return this.connection.layout.candidates(this.name);
  }

  /** The current leadership, or null. */
  get leadership(): EtcdLeadership | null {
    return this.held?.leadership ?? null;
  }

  /**
   * Join the election with `value` and resolve when this node leads. Rejects with the signal's
   * reason when `signal` aborts (our key is withdrawn first), with NotLeaderError when the
   * session ends while waiting, and with StoreUnavailableError when etcd cannot be reached.
   */
  async campaign(value: string, options: { signal?: AbortSignal } = {}): Promise<EtcdLeadership> {
    if (this.held && !this.held.controller.signal.aborted) return this.held.leadership;
    const session = await this.liveSession();
    const conn = this.connection;
    const key = conn.layout.candidate(this.name, session.leaseId);
    const entered = await enter(conn, this.prefix, key, Buffer.from(value), session.leaseId);
    this.mine = { key, revision: entered.revision };
    if (entered.previousValue !== null && !entered.previousValue.equals(Buffer.from(value))) {
      await this.rewrite(key, entered.revision, value, session.leaseId);
    }
    const waiting = AbortSignal.any([session.signal, ...(options.signal ? [options.signal] : [])]);
    try {
      await waitForTurn(conn, this.prefix, entered.revision, waiting);
      // Our turn, if our key is still there (the session may have ended while we waited).
      const check = await conn.range('campaign', { key });
      if (check.kvs[0]?.create_revision !== String(entered.revision) || !session.isLive) {
        throw new NotLeaderError(`campaign for ${this.name}: our key is gone (session ended)`);
      }
    } catch (err) {
      if (options.signal?.aborted) await this.withdraw(key, entered.revision);
      else if (this.mine?.key.equals(key)) this.mine = null;
      throw err;
    }
    return this.lead(session, key, entered.revision);
  }

  /** Publish a new value as leader (Go's Proclaim). Rejects with NotLeaderError when not leading. */
  async proclaim(value: string): Promise<void> {
    const held = this.held;
    if (!held || held.controller.signal.aborted || !this.session) throw new NotLeaderError(`not the leader of ${this.name}`);
    await this.rewrite(held.key, held.revision, value, this.session.leaseId);
  }

  /** Step down: abort the leadership signal, then delete our key iff it is still ours. */
  async resign(): Promise<void> {
    const mine = this.mine;
    this.endLeadership(new NotLeaderError(`resigned leadership of ${this.name}`));
    if (mine) await this.withdraw(mine.key, mine.revision);
  }

  /** The current leader (lowest create revision under the prefix), or null. */
  async leader(): Promise<EtcdCandidate | null> {
    const { kvs } = await this.connection.range(`leader of ${this.name}`, {
      key: this.prefix,
      range_end: prefixEnd(this.prefix),
      sort_target: 'Create',
      sort_order: 'Ascend',
      limit: 1,
    });
    return kvs[0] ? toCandidate(kvs[0]) : null;
  }

  /**
   * Push: `listener` hears the leader now (when there is one) and after every change of leader
   * or of its proclaimed value, and null when nobody leads.
   */
  observe(listener: (leader: EtcdCandidate | null) => void): Unsubscribe {
    const watch = new CandidateWatch(this.connection, this.prefix, () => true, (kv) => listener(kv ? toCandidate(kv) : null));
    watch.start();
    return () => watch.stop();
  }

  /**
   * A compare for your own etcd txn: true only while our key is the one we created, as Go's
   * `Mutex.IsOwner()`. Put it in the same txn as the write it guards (safety rule 5).
   */
  ownerCompare(): ICompare {
    const held = this.held;
    if (!held || held.controller.signal.aborted) throw new NotLeaderError(`not the leader of ${this.name}`);
    return { key: held.key, target: 'Create', result: 'Equal', create_revision: held.revision };
  }

  /** Resign, end the session (revoking its lease), and close the connection if this election made it. */
  async close(): Promise<void> {
    await this.resign().catch(() => {});
    await this.session?.close();
    this.session = null;
    if (this.ownsConnection) this.connection.close();
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }

  // ---- internals ------------------------------------------------------------------------

  private async liveSession(): Promise<EtcdSession> {
    if (this.session?.isLive) return this.session;
    this.session = await EtcdSession.create(this.connection, this.sessionOptions);
    return this.session;
  }

  private lead(session: EtcdSession, key: Buffer, revision: number): EtcdLeadership {
    const controller = new AbortController();
    const leadership: EtcdLeadership = {
      key: key.toString(),
      revision,
      token: makeToken(this.name, revision),
      signal: controller.signal,
    };
    const held: Held = { key, revision, controller, leadership, stopWatching: () => {} };
    this.held = held;
    const onSessionEnd = (): void => this.endLeadership(session.signal.reason as Error, held);
    session.signal.addEventListener('abort', onSessionEnd, { once: true });
    held.stopWatching = watchOwnKey(this.connection, key, revision, () =>
      this.endLeadership(new NotLeaderError(`leadership of ${this.name} ended: our key ${key.toString()} was deleted`), held),
    );
    controller.signal.addEventListener('abort', () => session.signal.removeEventListener('abort', onSessionEnd), { once: true });
    if (!session.isLive) onSessionEnd();
    return leadership;
  }

  private endLeadership(reason: Error, only?: Held): void {
    const held = this.held;
    if (!held || (only && only !== held)) return;
    this.held = null;
    held.stopWatching();
    held.controller.abort(reason);
  }

  private async withdraw(key: Buffer, revision: number): Promise<void> {
    if (this.mine?.key.equals(key) && this.mine.revision === revision) this.mine = null;
    await leave(this.connection, key, revision);
  }

  private async rewrite(key: Buffer, revision: number, value: string, leaseId: string): Promise<void> {
    const res = await this.connection.txn(
      `proclaim ${this.name}`,
      [{ key, target: 'Create', result: 'Equal', create_revision: revision }],
      [{ request_put: { key, value: Buffer.from(value), lease: leaseId } }],
    );
    if (!res.succeeded) {
      this.endLeadership(new NotLeaderError(`leadership of ${this.name} ended: our key is gone`));
      throw new NotLeaderError(`not the leader of ${this.name}: our key is gone`);
    }
  }
}

function toCandidate(kv: IKeyValue): EtcdCandidate {
  return { key: kv.key.toString(), value: kv.value.toString(), revision: Number(kv.create_revision), lease: leaseIdHex(kv.lease) };
}
