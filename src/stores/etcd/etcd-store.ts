/**
 * `etcd://host:port[,host:port…]` — the Store interface on etcd v3, written so that a tenure
 * lease is a member of etcd's own election and lock recipes.
 *
 * A lease named N is held by the key `N/<etcd lease id, lowercase hex>` with the lowest create
 * revision among the keys `N/<hex>` (Go's `concurrency.Election` and `concurrency.Mutex`, and so
 * `etcdctl elect N` and `etcdctl lock N`). `acquire` is Go's `Mutex.TryLock`: it never queues
 * and never jumps the queue, it only puts its key when there is no candidate at all, so a Go
 * or etcdctl candidate that is waiting keeps its place and a tenure node leads only when etcd's
 * own rule says so.
 *
 * - Expiry is etcd's (safety rule 1): each holder's key is attached to its own etcd lease with
 *   TTL ceil(ttlMs / 1000) s (at least etcd's minimum), kept alive by `renew`. etcd deletes the
 *   key when the lease runs out (its lessor checks every 500 ms), and never revives an expired
 *   lease, so a late keepalive cannot resurrect a holder.
 * - Terms are a per-name counter (`\0tenure/term/N`) bumped in the same txn that puts the
 *   holder's key, guarded by "no key under N/ changed since my read" (a range compare on mod
 *   revision) and "the counter did not move" (safety rule 4); or, with no read first, by "no
 *   key under N/ at all" and "the counter still holds the term last seen" (see `acquire`).
 * - Fencing (`appendFenced`) is one txn: the fence key's mod revision and the entry slot are
 *   compared, the fence raised and the entry put together (safety rule 5).
 * - Release and renew compare the holder key's create revision, so they only ever touch the
 *   caller's own key (safety rule 6).
 * - Hand-over: a tenure candidate waiting on a watch registers in the name's waiting room
 *   (`\0tenure/wait/N\0<hex>`, outside `N/`, so Go never sees it); a release then gives the
 *   lease to the oldest waiter in its own txn (next term, the waiter's own lease), and the
 *   waiter claims it without another commit. A graceful handoff is one commit (`handOver`).
 *
 * This file holds the Store calls and the state they share (the keys this process holds, the
 * leases it keeps alive, the watches, the term hints). Two concerns live beside it, each behind
 * a small class the store owns: the waiting room and the hand-over txn (`handover.ts`,
 * `WaitingRoom`) and the pool of spare leases waiting candidates keep ready (`spare-leases.ts`,
 * `SpareLeases`). The receiving side of a hand-over (`adoptIfHandedOver`, `claimHandover`)
 * stays here: it updates the held keys and kept-alive leases.
 */
import { randomBytes } from 'node:crypto';
import {
  ClosedError,
  InvalidArgumentError,
  StaleTermError,
  StoreDataError,
  StoreUnavailableError,
  VersionConflictError,
  checkAppendOptions,
  checkName,
  checkOwner,
  checkPayload,
  checkPurgePrefix,
  checkReadOptions,
  checkTerm,
  checkToken,
  checkTtl,
  decideFence,
  decodeMeta,
  decodeStreamEntry,
  decodeTerm,
  nextTerm,
  foreignStreamError,
  reportStale,
  encodeMeta,
} from '../../core/index.js';
import type {
  AcquireResult,
  AppendFencedOptions,
  FencingToken,
  Lease,
  LeaseMeta,
  ReadStreamOptions,
  RenewResult,
  Store,
  StreamEntry,
  Unsubscribe,
  WatchListener,
} from '../../core/index.js';
import { CandidateWatch } from './candidate-watch.js';
import { StreamWatch } from './stream-watch.js';
import { EtcdConnection, ttlSecondsFor } from './connection.js';
import type { EtcdConnectionOptions, TxnResponse } from './connection.js';
import type { Etcd3, ICompare, IKeyValue, IRequestOp } from './driver.js';
import { WaitingRoom } from './handover.js';
import type { HeldKey } from './handover.js';
import { decodeValue, encodeValue, leaseIdHex, prefixEnd, rangeStart, sameLease } from './keys.js';
import type { TenureValue } from './keys.js';
import { SpareLeases } from './spare-leases.js';

export type EtcdStoreOptions = EtcdConnectionOptions;

/** Bound on optimistic retries of one call under contention. */
const MAX_ATTEMPTS = 64;

/** A key under `N/` that is a candidate for N, with its decoded value (null when foreign). */
interface Candidate {
  readonly kv: IKeyValue;
  readonly value: TenureValue | null;
}

interface NameSnapshot {
  readonly revision: number;
  /** Candidates by create revision, lowest (the holder) first. */
  readonly candidates: Candidate[];
  readonly term: number;
  readonly termModRevision: number;
}

/** What this process last told etcd about a lease it holds: TTL (s) and when that was sent. */
interface OwnLease {
  ttlSeconds: number;
  sentAt: number;
  /** A spare (`spare-leases.ts`), granted longer than asked: the first renew moves the key to a lease of the asked TTL. */
  spare?: boolean;
}

interface Watched {
  readonly watch: CandidateWatch;
  readonly listeners: Set<WatchListener>;
  last: string | null;
  /** The holder key's value as last reported. */
  lastValue: Buffer | null;
}

/**
 * A hand-over to a spare of ours can be claimed with no round trip when the spare has at least
 * the TTL asked for plus this much left (spares are granted longer: see `spare-leases.ts`).
 */
const CLAIM_SLACK_MS = 100;

export class EtcdStore implements Store {
  readonly kind = 'etcd';
  readonly connection: EtcdConnection;
  private readonly own = new Map<string, OwnLease>();
  private readonly watched = new Map<string, Watched>();
  /** Streams watched through `watchStream`: one etcd watch each, its listeners and the highest head told. */
  private readonly watchedStreams = new Map<string, { readonly watch: StreamWatch; readonly listeners: Set<(head: number) => void>; last: number }>();
  private readonly appendQueues = new Map<string, Promise<unknown>>();
  private readonly held = new Map<string, HeldKey>();
  /** Spare leases of waiting candidates (`spare-leases.ts`). */
  private readonly spares: SpareLeases;
  /** Who waits for the names this process holds, and the hand-over txn (`handover.ts`). */
  private readonly room: WaitingRoom;
  /**
   * The last term this process saw issued per name (from a read, its own acquire, or a watch
   * event of a tenure holder). Never above etcd's counter; a guess the acquire txn checks.
   */
  private readonly termHints = new Map<string, number>();

  /** Give your own etcd3 client (`{ client }`) or members (`{ hosts: ['127.0.0.1:2379'] }`). */
  constructor(options: EtcdStoreOptions) {
    this.connection = new EtcdConnection(options);
    this.spares = new SpareLeases(this.connection, (name) => this.watched.has(name));
    this.room = new WaitingRoom(this.connection);
  }

  /** The etcd3 client in use (yours, or the one the store made from `hosts`). */
  get client(): Etcd3 {
    return this.connection.client;
  }

  async acquire(name: string, owner: string, ttlMs: number, meta?: LeaseMeta): Promise<AcquireResult> {
    checkName('name', name);
    checkOwner('owner', owner);
    checkTtl('ttlMs', ttlMs);
    const metaValue = decodeMeta(encodeMeta('meta', meta));
    const conn = this.connection;
    const seconds = ttlSecondsFor(ttlMs);
    const prefix = conn.layout.candidates(name);
    const termKey = conn.layout.term(name);
    // Handed over by the last holder's release (see `handOver`): claimed with at most one keepalive.
    const claimed = await this.claimHandover(name, owner, ttlMs, metaValue);
    if (claimed) return claimed;
    // Without a fresh read: when the watch says the name is free and a spare lease is ready, one
    // txn both tries the take-over and, should it fail, reads the name (its failure branch).
    let snap: NameSnapshot | null = null;
    for (let attempt = 0; attempt < MAX_ATTEMPTS; attempt++) {
      const hint = this.termHints.get(name);
      const blind = snap === null && hint !== undefined && this.looksFree(name) && this.spares.ready(name, seconds);
      if (!blind && snap === null) snap = await this.snapshot(name);
      if (snap) {
        const holder = snap.candidates[0];
        if (holder) {
          if (holder.value?.owner !== owner) {
            this.spares.prepare(name, seconds, owner, ttlMs, metaValue);
            return { acquired: false, lease: await this.describe(name, holder, snap.term) };
          }
          const lease = await this.extend(name, holder, ttlMs, metaValue);
          if (lease) return { acquired: true, lease };
          snap = null;
          continue; // our key went away between the read and the keepalive: decide again
        }
      }
      const lastTerm = snap ? snap.term : hint!;
      const term = nextTerm(name, lastTerm);
      const compare: ICompare[] = snap
        ? [
            // No candidate key under N/ was created, changed or deleted since the read.
            { key: rangeStart(prefix), range_end: prefixEnd(prefix), target: 'Mod', result: 'Less', mod_revision: snap.revision + 1 },
            { key: termKey, target: 'Mod', result: 'Equal', mod_revision: snap.termModRevision },
          ]
        : [
            // No key at all under N/ (an empty range compares as create revision 0)...
            { key: rangeStart(prefix), range_end: prefixEnd(prefix), target: 'Create', result: 'Equal', create_revision: 0 },
            // ...and the counter still says the term we last saw (it only ever goes up).
            lastTerm > 0
              ? { key: termKey, target: 'Value', result: 'Equal', value: Buffer.from(String(lastTerm)) }
              : { key: termKey, target: 'Mod', result: 'Equal', mod_revision: 0 },
          ];
      // A spare lease is renewed by a keepalive sent with the txn (so etcd's expiry is at least
      // this call's start + TTL, safety rule 2); otherwise a new lease is granted first.
      const spare = this.spares.take(name, seconds);
      const granted = spare?.lease ?? (await conn.grant(seconds));
      const success: IRequestOp[] = [
        { request_put: { key: conn.layout.candidate(name, granted.id), value: encodeValue({ owner, term, ttlMs, meta: metaValue }), lease: granted.id } },
        { request_put: { key: termKey, value: Buffer.from(String(term)) } },
      ];
      // The spare leaves the waiting room as it takes the lease, so no release hands over to it.
      if (spare) success.push({ request_delete_range: { key: conn.layout.waiter(name, granted.id) } });
      success.push(this.room.readOp(name)); // whom our release can hand over to
      const sent = settle(conn.txn(`acquire ${name}`, compare, success, this.snapshotOps(name)));
      const keepAliveSentAt = conn.clock.now();
      const keptAlive = spare ? settle(conn.keepAliveOnce(granted.id)) : null;
      const outcome = await sent;
      if ('error' in outcome) {
        await keptAlive; // the outcome is unknown: the lease may now hold our key, so it is not reused
        throw outcome.error;
      }
      const res = outcome.value;
      let ttlSeconds = granted.ttlSeconds;
      let sentAt = granted.sentAt;
      if (!res.succeeded) {
        snap = this.parseSnapshot(name, res);
        if (spare) {
          const ka = await keptAlive!;
          // A release may have handed the name over to this very spare while the txn was on its way.
          const mine = snap.candidates.find((c) => sameLease(c.kv.lease, granted.id));
          if (mine?.value && 'value' in ka && ka.value > 0) this.adopt(name, mine.kv, mine.value, granted.id, ka.value, keepAliveSentAt);
          else if ('value' in ka && ka.value > 0) this.spares.restore(name, spare, keepAliveSentAt, ka.value);
          // (no answer: the spare is left to expire; a lease etcd no longer has is gone already)
        } else {
          this.spares.keep(name, granted, owner, ttlMs, metaValue);
        }
        continue;
      }
      if (keptAlive) {
        const ka = await keptAlive;
        if ('error' in ka) {
          // Put, but its lease may run out before this call's deadline: not a win (rule 3).
          this.noteHeld(name, owner, term, conn.layout.candidate(name, granted.id), res.header.revision, granted.id);
          throw conn.translate(`acquire ${name} (lease keepalive)`, ka.error);
        } else if (ka.value === 0) {
          snap = null; // the spare ran out before its keepalive: etcd deletes the key we put
          continue;
        } else {
          ttlSeconds = ka.value;
          sentAt = keepAliveSentAt;
        }
      }
      this.own.set(granted.id, { ttlSeconds, sentAt, spare: spare !== null });
      this.noteHeld(name, owner, term, conn.layout.candidate(name, granted.id), res.header.revision, granted.id);
      this.noteTerm(name, term);
      this.room.note(name, rangeKvs(res.responses[res.responses.length - 1]));
      return { acquired: true, lease: { name, owner, term, meta: metaValue, ttlMs, remainingMs: this.remainingOf(granted.id) } };
    }
    throw new StoreUnavailableError(`${conn.label}: acquire of ${name} gave up after ${MAX_ATTEMPTS} conflicting attempts`);
  }

  async renew(name: string, owner: string, term: number, ttlMs: number): Promise<RenewResult> {
    checkName('name', name);
    checkOwner('owner', owner);
    checkTerm('term', term);
    checkTtl('ttlMs', ttlMs);
    const snap = await this.snapshot(name);
    const holder = snap.candidates[0];
    if (holder && holder.value?.owner === owner && holder.value.term === term) {
      const lease = await this.extend(name, holder, ttlMs, holder.value.meta);
      if (lease) return { renewed: true, lease };
      return { renewed: false, lease: await this.read(name) };
    }
    return { renewed: false, lease: holder ? await this.describe(name, holder, snap.term) : null };
  }

  async release(name: string, owner: string, term: number): Promise<boolean> {
    checkName('name', name);
    checkOwner('owner', owner);
    checkTerm('term', term);
    const conn = this.connection;
    // The key this process put for (owner, term), if it did: one txn deletes it, compared on its
    // create revision, which names that put alone (owner and term never change on a key).
    const held = this.held.get(name);
    if (held && held.owner === owner && held.term === term) {
      if (await this.handOver(name, held)) return true;
      const own: ICompare = { key: held.key, target: 'Create', result: 'Equal', create_revision: held.createRevision };
      const room = conn.layout.waiters(name);
      // A plain release only while nobody waits: a waiter this process has not heard of yet (its
      // waiting-room watch lags the waiter's key) fails the txn, whose failure branch reads the
      // room, and the name is handed over after all. An empty range compares as create revision 0.
      let res = await conn.txn(
        `release ${name}`,
        [own, { key: room, range_end: prefixEnd(room), target: 'Create', result: 'Equal', create_revision: 0 }],
        [{ request_delete_range: { key: held.key, prev_kv: true } }],
        [{ request_range: { key: held.key, count_only: true } }, this.room.readOp(name)],
      );
      if (!res.succeeded && Number(res.responses[0]?.response_range?.count ?? 0) > 0) {
        this.room.note(name, rangeKvs(res.responses[1]));
        if (await this.handOver(name, held)) return true;
        // Only the holder's own spare waits, or the waiter went: release whoever waits.
        res = await conn.txn(`release ${name}`, [own], [{ request_delete_range: { key: held.key, prev_kv: true } }]);
      }
      if (this.held.get(name) === held) this.held.delete(name);
      this.syncWaiterWatch(name);
      if (res.succeeded) {
        const prev = res.responses[0]?.response_delete_range?.prev_kvs?.[0];
        if (prev) this.dropLease(prev.lease);
        return true;
      }
      // Gone already (expired, or released by a call that timed out): read to be sure.
    }
    const snap = await this.snapshot(name);
    const mine = snap.candidates.find((c) => c.value?.owner === owner && c.value.term === term);
    if (!mine) return false;
    const res = await conn.txn(
      `release ${name}`,
      [{ key: mine.kv.key, target: 'Create', result: 'Equal', create_revision: mine.kv.create_revision }],
      [{ request_delete_range: { key: mine.kv.key } }],
    );
    if (!res.succeeded) return false;
    this.dropLease(mine.kv.lease);
    return true;
  }

  async read(name: string): Promise<Lease | null> {
    checkName('name', name);
    const snap = await this.snapshot(name);
    const holder = snap.candidates[0];
    return holder ? this.describe(name, holder, snap.term) : null;
  }

  async list(prefix = ''): Promise<Lease[]> {
    if (typeof prefix !== 'string') throw new InvalidArgumentError('prefix', 'expected a string');
    const layout = this.connection.layout;
    const names = layout.namesFrom(prefix);
    const terms = layout.terms(prefix);
    const res = await this.connection.txn('list', [], [
      { request_range: { key: rangeStart(names), range_end: prefixEnd(names) } },
      { request_range: { key: terms, range_end: prefixEnd(terms) } },
    ]);
    const termOf = new Map<string, number>();
    for (const kv of rangeKvs(res.responses[1])) {
      const name = layout.nameOfTerm(kv.key);
      termOf.set(name, decodeTerm('etcd', name, kv.value.toString()));
    }
    const holders = new Map<string, IKeyValue>();
    for (const kv of rangeKvs(res.responses[0])) {
      const name = layout.nameOf(kv.key);
      if (name === null || kv.lease === '0' || !name.startsWith(prefix)) continue;
      const best = holders.get(name);
      if (!best || Number(kv.create_revision) < Number(best.create_revision)) holders.set(name, kv);
    }
    const sorted = [...holders.entries()].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
    return Promise.all(sorted.map(([name, kv]) => this.describe(name, { kv, value: decodeValue(kv.value) }, termOf.get(name) ?? 0)));
  }

  /**
   * Delete every lease, term, fence, waiting room and stream whose name starts with `prefix`.
   * Candidate keys are `N/<hex>`, so a range over the prefix would also take the keys of a name
   * that is the prefix less its last '/' ("run-1" under "run-1/"): they are read first (keys
   * only) and deleted one by one if their name starts with the prefix; keys under the prefix that
   * are not candidates (not tenure's, not etcdctl's) are left alone. The rest are exact ranges,
   * deleted in one transaction. The etcd leases the deleted candidates were attached to are left
   * to expire (a holder in another process is not told, as the Store contract says).
   */
  async purge(prefix: string): Promise<number> {
    checkPurgePrefix(prefix);
    const layout = this.connection.layout;
    const names = layout.namesFrom(prefix);
    const found = await this.connection.txn('purge', [], [{ request_range: { key: rangeStart(names), range_end: prefixEnd(names), keys_only: true } }]);
    const candidates = rangeKvs(found.responses[0]).filter((kv) => layout.nameOf(kv.key)?.startsWith(prefix) === true);
    let n = 0;
    const ops: IRequestOp[] = [
      ...candidates.map((kv) => ({ request_delete_range: { key: kv.key } })),
      ...layout.internalFrom(prefix).map((from) => ({ request_delete_range: { key: from, range_end: prefixEnd(from) } })),
    ];
    // etcd's default limit is 128 operations per transaction.
    for (let i = 0; i < ops.length; i += 100) {
      const res = await this.connection.txn('purge', [], ops.slice(i, i + 100));
      for (const r of res.responses) n += Number(r.response_delete_range?.deleted ?? 0);
    }
    return n;
  }

  async appendFenced(token: FencingToken, stream: string, payload: string, options?: AppendFencedOptions): Promise<number> {
    checkToken('token', token);
    checkName('stream', stream);
    checkPayload('payload', payload);
    const expectSeq = checkAppendOptions(options);
    if (this.connection.isClosed) throw new ClosedError(`${this.connection.label} store`);
    // Appends from this process to one stream go one at a time; other processes race by txn.
    const before = this.appendQueues.get(stream) ?? Promise.resolve();
    const mine = before.catch(() => {}).then(() => this.appendOnce(token, stream, payload, expectSeq));
    this.appendQueues.set(stream, mine);
    void mine.catch(() => {}).finally(() => {
      if (this.appendQueues.get(stream) === mine) this.appendQueues.delete(stream);
    });
    return mine;
  }

  async readStream(stream: string, options?: ReadStreamOptions): Promise<StreamEntry[]> {
    checkName('stream', stream);
    const { after, limit } = checkReadOptions(options);
    const layout = this.connection.layout;
    const { kvs } = await this.connection.range(`read stream ${stream}`, {
      key: layout.entry(stream, after + 1),
      range_end: prefixEnd(layout.entries(stream)),
      limit,
    });
    return kvs.map((kv) => decodeEtcdEntry(stream, layout.seqOf(kv.key), kv.value));
  }

  /** The stream's last entry: one range read of the entries' prefix, backwards, limit 1. */
  async readLast(stream: string): Promise<StreamEntry | null> {
    checkName('stream', stream);
    const layout = this.connection.layout;
    const entries = layout.entries(stream);
    const { kvs } = await this.connection.range(`read the last entry of stream ${stream}`, {
      key: entries,
      range_end: prefixEnd(entries),
      sort_target: 'Key',
      sort_order: 'Descend',
      limit: 1,
    });
    const kv = kvs[0];
    return kv ? decodeEtcdEntry(stream, layout.seqOf(kv.key), kv.value) : null;
  }

  /**
   * Push for streams from an etcd watch on the stream's entry keys: `listener` hears the new head
   * after appends by any writer. The head is read and told when the watch starts and whenever it
   * starts over (a reconnect, a compacted revision), so nothing appended meanwhile is missed.
   */
  watchStream(stream: string, listener: (head: number) => void): Unsubscribe {
    checkName('stream', stream);
    if (this.connection.isClosed) throw new ClosedError(`${this.connection.label} store`);
    let w = this.watchedStreams.get(stream);
    if (!w) {
      const entry = {
        listeners: new Set<(head: number) => void>(),
        last: 0,
        watch: new StreamWatch(this.connection, stream, (head, again) => {
          if (!again && head <= entry.last) return;
          entry.last = Math.max(entry.last, head);
          for (const l of [...entry.listeners]) l(head);
        }),
      };
      w = entry;
      this.watchedStreams.set(stream, entry);
      entry.watch.start();
    }
    w.listeners.add(listener);
    const entry = w;
    return () => {
      entry.listeners.delete(listener);
      if (entry.listeners.size === 0 && this.watchedStreams.get(stream) === entry) {
        this.watchedStreams.delete(stream);
        entry.watch.stop();
      }
    };
  }

  /**
   * Push from an etcd watch on `N/`: the listener hears every change of holder (a new owner or
   * term, or null when the holder's key is deleted by release or expiry), in revision order.
   * It is also told the holder found when the watch starts, if there is one.
   */
  watch(name: string, listener: WatchListener): Unsubscribe {
    checkName('name', name);
    if (this.connection.isClosed) throw new ClosedError(`${this.connection.label} store`);
    let w = this.watched.get(name);
    if (!w) {
      const entry: Watched = {
        listeners: new Set(),
        last: null,
        lastValue: null,
        watch: new CandidateWatch(
          this.connection,
          this.connection.layout.candidates(name),
          (kv) => kv.lease !== '0' && this.connection.layout.nameOf(kv.key) === name,
          (kv) => this.push(name, entry, kv),
        ),
      };
      w = entry;
      this.watched.set(name, entry);
      entry.watch.start();
      this.syncWaiterWatch(name);
    }
    w.listeners.add(listener);
    const entry = w;
    return () => {
      entry.listeners.delete(listener);
      if (entry.listeners.size === 0 && this.watched.get(name) === entry) {
        this.watched.delete(name);
        entry.watch.stop();
        this.room.follow(name, false);
        void this.spares.drop(name);
      }
    };
  }

  async close(): Promise<void> {
    if (this.connection.isClosed) return;
    this.room.cancelTimers();
    for (const [name, w] of this.watched) {
      w.watch.stop();
      this.room.follow(name, false);
    }
    this.watched.clear();
    for (const w of this.watchedStreams.values()) w.watch.stop();
    this.watchedStreams.clear();
    // Leave the waiting rooms before the connection goes, so no release hands over to a closed
    // store (bounded: a store that cannot reach etcd closes anyway, and its spares expire).
    const left = this.spares.leaveAll();
    let cancel = (): void => {};
    await Promise.race([left, new Promise<void>((r) => (cancel = this.connection.clock.setTimer(1000, r)))]);
    cancel();
    this.connection.close();
  }

  // ---- internals ------------------------------------------------------------------------

  /** The candidates of `name` and its term counter, read at one revision. */
  private async snapshot(name: string): Promise<NameSnapshot> {
    return this.parseSnapshot(name, await this.connection.txn(`read ${name}`, [], this.snapshotOps(name)));
  }

  private snapshotOps(name: string): IRequestOp[] {
    const layout = this.connection.layout;
    const prefix = layout.candidates(name);
    return [
      { request_range: { key: prefix, range_end: prefixEnd(prefix), sort_target: 'Create', sort_order: 'Ascend' } },
      { request_range: { key: layout.term(name) } },
      this.room.readOp(name),
    ];
  }

  /**
   * Follow the waiting room of `name` while this process holds it and watches it, so that a
   * release knows whom to hand over to (waiters do not need it).
   */
  private syncWaiterWatch(name: string): void {
    if (!this.watched.has(name)) return;
    const held = this.held.get(name);
    this.room.follow(name, held !== undefined);
    if (held) this.room.warm(name, held);
  }

  /** A snapshot from the answer to `snapshotOps` (run alone, or as the failure branch of a txn). */
  private parseSnapshot(name: string, res: TxnResponse): NameSnapshot {
    const layout = this.connection.layout;
    const candidates = rangeKvs(res.responses[0])
      .filter((kv) => kv.lease !== '0' && layout.nameOf(kv.key) === name)
      .map((kv) => ({ kv, value: decodeValue(kv.value) }));
    const termKv = rangeKvs(res.responses[1])[0];
    const term = termKv ? decodeTerm('etcd', name, termKv.value.toString()) : 0;
    this.termHints.set(name, term);
    this.room.note(name, rangeKvs(res.responses[2]));
    if (candidates[0]) this.adoptIfHandedOver(name, candidates[0].kv);
    return {
      revision: Number(res.header.revision),
      candidates,
      term,
      termModRevision: termKv ? Number(termKv.mod_revision) : 0,
    };
  }

  private noteTerm(name: string, term: number): void {
    if (term > (this.termHints.get(name) ?? -1)) this.termHints.set(name, term);
  }

  private noteHeld(name: string, owner: string, term: number, key: Buffer, createRevision: string, leaseId: string): void {
    this.held.set(name, { owner, term, key, createRevision, leaseId, handedOver: false, noHint: false });
    // A spare of the new holder's own (say, granted while this acquire was on its way) leaves
    // the waiting room: a release must never hand the name to its holder.
    this.spares.dropOwnedBy(name, owner);
    this.syncWaiterWatch(name);
  }

  /**
   * Release by handing over to the oldest tenure candidate in the waiting room (`WaitingRoom.handOver`),
   * then forget the key and the lease it left. Returns false, having changed nothing, when no
   * hand-over took place (a plain release follows).
   */
  private async handOver(name: string, held: HeldKey): Promise<boolean> {
    const done = await this.room.handOver(name, held);
    if (!done) return false;
    if (this.held.get(name) === held) this.held.delete(name);
    this.syncWaiterWatch(name);
    this.noteTerm(name, done.term);
    // Revoked a little later (`WaitingRoom.revokeSoon`): nothing is on it.
    if (done.emptiedLease !== null) {
      this.own.delete(done.emptiedLease);
      this.room.revokeSoon(done.emptiedLease);
    }
    return true;
  }

  /**
   * A key for `name` appeared on our spare lease: a release handed the name over to us. The
   * spare stops being a spare (no more keepalives from its timer: only its owner's acquire and
   * renews keep it alive from now on, so an owner that no longer campaigns lets it expire).
   */
  private adoptIfHandedOver(name: string, kv: IKeyValue): void {
    const value = decodeValue(kv.value);
    if (!value) return;
    const spare = this.spares.takeHandedOver(name, kv.lease);
    if (!spare) return;
    this.adopt(name, kv, value, spare.leaseId, spare.ttlSeconds, spare.aliveSince);
  }

  private adopt(name: string, kv: IKeyValue, value: TenureValue, leaseId: string, ttlSeconds: number, aliveSince: number): void {
    this.own.set(leaseId, { ttlSeconds, sentAt: aliveSince, spare: true });
    this.held.set(name, { owner: value.owner, term: value.term, key: kv.key, createRevision: kv.create_revision, leaseId, handedOver: true, noHint: value.noHint === true });
    this.syncWaiterWatch(name);
    this.noteTerm(name, value.term);
  }

  /**
   * Claim a lease handed over to `owner` (see `handOver`) in one round trip: a keepalive of its
   * lease, sent now. etcd restarts the TTL when it receives it, so its expiry is at least this
   * call's start + TTL (rule 2); and a lease etcd still has still carries our key, which the
   * watch reported: a key goes with its lease, and nobody else deletes it (release, resign and
   * unlock delete only the caller's own key, here and in Go). Null when there is nothing to
   * claim this way; the general path then decides.
   */
  private async claimHandover(name: string, owner: string, ttlMs: number, meta: LeaseMeta): Promise<AcquireResult | null> {
    const h = this.held.get(name);
    if (!h?.handedOver || h.owner !== owner) return null;
    const own = this.own.get(h.leaseId);
    const w = this.watched.get(name);
    const id = `${owner}@${h.term}`;
    // Only as the watch still reports it, and as it was written (else extend() updates it).
    const value = encodeValue({ owner, term: h.term, ttlMs, meta, noHint: h.noHint });
    if (!own || own.ttlSeconds < ttlSecondsFor(ttlMs) || w?.last !== id || !value.equals(w.lastValue ?? Buffer.alloc(0))) return null;
    const conn = this.connection;
    const sentAt = conn.clock.now();
    if (own.sentAt + own.ttlSeconds * 1000 - sentAt >= ttlMs + CLAIM_SLACK_MS) {
      // Our waiting lease, kept alive ahead of need with a longer TTL, still has more than the
      // TTL asked for left, counted from the send time of its last keepalive (etcd restarted
      // the TTL when it got it, later): etcd's expiry is already past this call's start + TTL
      // (rule 2), and the key the watch reported is on it. Nothing to send.
      h.handedOver = false;
      this.spares.dropOwnedBy(name, owner);
      return { acquired: true, lease: { name, owner, term: h.term, meta, ttlMs, remainingMs: this.remainingOf(h.leaseId) }, ...(h.noHint ? { noTransferHint: true } : {}) };
    }
    const ttlSeconds = await conn.keepAliveOnce(h.leaseId); // no answer: unknown (rule 3); the next acquire tries again
    if (this.held.get(name) !== h) return null;
    if (ttlSeconds === 0 || this.watched.get(name)?.last !== id) {
      this.held.delete(name); // expired, or the watch saw it go meanwhile: decide afresh
      this.syncWaiterWatch(name);
      this.own.delete(h.leaseId);
      return null;
    }
    h.handedOver = false;
    this.own.set(h.leaseId, { ttlSeconds, sentAt, spare: true });
    this.spares.dropOwnedBy(name, owner);
    return { acquired: true, lease: { name, owner, term: h.term, meta, ttlMs, remainingMs: this.remainingOf(h.leaseId) }, ...(h.noHint ? { noTransferHint: true } : {}) };
  }

  /**
   * `owner` stopped waiting for `name` (its elector stopped without leading): its spare leaves the
   * waiting room, so no release hands the name to a candidate that is gone.
   */
  withdraw(name: string, owner: string): Promise<void> {
    return this.spares.withdraw(name, owner);
  }

  /** Forget and revoke the lease of a key we deleted (only that key was on it). */
  private dropLease(leaseId: string): void {
    this.own.delete(leaseId);
    void this.connection.revoke(leaseId).catch(() => {});
  }

  /** The watch on `name` is running and reports no holder. */
  private looksFree(name: string): boolean {
    const w = this.watched.get(name);
    return w !== undefined && w.last === null;
  }

  /**
   * Keep the holder's etcd lease alive for `ttlMs` and confirm its key is still there; update
   * the value when meta or TTL changed. Returns null when the key is gone (expired, released).
   */
  private async extend(name: string, holder: Candidate, ttlMs: number, meta: LeaseMeta): Promise<Lease | null> {
    const conn = this.connection;
    const value = holder.value;
    if (!value) return null;
    const next = encodeValue({ ...value, ttlMs, meta });
    const changed = !next.equals(holder.kv.value);
    const needSeconds = ttlSecondsFor(ttlMs);
    const leaseId = holder.kv.lease;
    const ownLease = this.own.get(leaseId);
    const grantedSeconds = ownLease?.ttlSeconds ?? (await conn.timeToLive(leaseId))?.grantedSeconds ?? 0;
    const sameKey = { key: holder.kv.key, target: 'Create' as const, result: 'Equal' as const, create_revision: holder.kv.create_revision };
    // A spare's longer TTL served the take-over; from the first renew on, the TTL asked for.
    const oversized = ownLease?.spare === true && grantedSeconds > needSeconds;
    if (grantedSeconds >= needSeconds && !oversized) {
      const sentAt = conn.clock.now();
      const ttlSeconds = await conn.keepAliveOnce(leaseId);
      if (ttlSeconds === 0) {
        this.own.delete(leaseId);
        return null;
      }
      this.own.set(leaseId, { ttlSeconds, sentAt });
      // The keepalive proves the lease lives; the txn proves our key is still on it.
      const ops: IRequestOp[] = changed ? [{ request_put: { key: holder.kv.key, value: next, lease: leaseId } }] : [];
      const res = await conn.txn(`renew ${name}`, [sameKey], ops);
      if (!res.succeeded) return null;
      this.noteHeld(name, value.owner, value.term, holder.kv.key, holder.kv.create_revision, leaseId);
      return this.leaseOf(name, value.owner, value.term, ttlMs, meta, leaseId);
    }
    // etcd cannot lengthen (or shorten) a lease: move the key (and so its create revision and its
    // place) to a new lease with the TTL asked for, then drop the old lease, which then holds nothing.
    if (grantedSeconds === 0) return null;
    const granted = await conn.grant(needSeconds);
    const res = await conn.txn(
      `renew ${name}`,
      [sameKey, { key: holder.kv.key, target: 'Lease', result: 'Equal', lease: leaseId }],
      [{ request_put: { key: holder.kv.key, value: next, lease: granted.id } }],
    );
    if (!res.succeeded) {
      void conn.revoke(granted.id).catch(() => {});
      return null;
    }
    this.own.set(granted.id, { ttlSeconds: granted.ttlSeconds, sentAt: granted.sentAt });
    this.noteHeld(name, value.owner, value.term, holder.kv.key, holder.kv.create_revision, granted.id);
    this.own.delete(leaseId);
    void conn.revoke(leaseId).catch(() => {});
    return this.leaseOf(name, value.owner, value.term, ttlMs, meta, granted.id);
  }

  private leaseOf(name: string, owner: string, term: number, ttlMs: number, meta: LeaseMeta, leaseId: string): Lease {
    return { name, owner, term, meta, ttlMs, remainingMs: this.remainingOf(leaseId) };
  }

  /** Time left on a lease this process keeps alive: from the send time of its last grant or keepalive. */
  private remainingOf(leaseId: string): number {
    const own = this.own.get(leaseId);
    if (!own) return 0;
    return Math.max(0, Math.round(own.ttlSeconds * 1000 - (this.connection.clock.now() - own.sentAt)));
  }

  /**
   * The Lease a candidate key stands for. A foreign holder (a Go or etcdctl candidate) is
   * reported as owner `etcd:<lease hex>` with its value as `meta.value` and the name's current
   * term (it does not take terms: only tenure holders bump the counter).
   */
  private async describe(name: string, c: Candidate, term: number): Promise<Lease> {
    const leaseId = c.kv.lease;
    let remainingMs: number;
    let grantedMs: number;
    if (this.own.has(leaseId)) {
      remainingMs = this.remainingOf(leaseId);
      grantedMs = this.own.get(leaseId)!.ttlSeconds * 1000;
    } else {
      // etcd reports whole seconds, truncated: the lease ends within [ttl, ttl + 1) s.
      const ttl = await this.connection.timeToLive(leaseId);
      grantedMs = (ttl?.grantedSeconds ?? 0) * 1000;
      remainingMs = ttl ? Math.min(grantedMs, ttl.ttlSeconds * 1000 + 999) : 0;
    }
    if (c.value) {
      remainingMs = Math.min(remainingMs, Math.max(c.value.ttlMs, grantedMs));
      return { name, owner: c.value.owner, term: decodeTerm('etcd', name, c.value.term), meta: c.value.meta, ttlMs: c.value.ttlMs, remainingMs };
    }
    return { name, owner: foreignOwner(leaseId), term, meta: { value: c.kv.value.toString() }, ttlMs: grantedMs, remainingMs };
  }

  private push(name: string, w: Watched, kv: IKeyValue | null): void {
    let lease: Lease | null = null;
    if (kv) this.adoptIfHandedOver(name, kv);
    w.lastValue = kv ? kv.value : null;
    if (kv) {
      const value = decodeValue(kv.value);
      // A term tenure cannot use (another program's value): nothing to tell; calls report it.
      if (value && !Number.isSafeInteger(value.term)) return;
      if (value) this.noteTerm(name, value.term);
      lease = value
        ? { name, owner: value.owner, term: value.term, meta: value.meta, ttlMs: value.ttlMs, remainingMs: this.own.has(kv.lease) ? this.remainingOf(kv.lease) : value.ttlMs }
        : { name, owner: foreignOwner(kv.lease), term: 0, meta: { value: kv.value.toString() }, ttlMs: 0, remainingMs: 0 };
    }
    const id = lease ? `${lease.owner}@${lease.term}` : null;
    if (id === w.last) return; // a renewal or a meta update: same holder, same term
    w.last = id;
    for (const l of [...w.listeners]) l(lease);
  }

  private async appendOnce(token: FencingToken, stream: string, payload: string, expectSeq: number | undefined): Promise<number> {
    const conn = this.connection;
    const layout = conn.layout;
    const fenceKey = layout.fence(token.lease);
    const entries = layout.entries(stream);
    // Tells this append's own entry from any other: a resent txn must not count as a conflict.
    const appendId = randomBytes(8).toString('hex');
    for (let attempt = 0; attempt < MAX_ATTEMPTS; attempt++) {
      const read = await conn.txn(`append to ${stream}`, [], [
        { request_range: { key: layout.term(token.lease) } },
        { request_range: { key: fenceKey } },
        { request_range: { key: entries, range_end: prefixEnd(entries), sort_target: 'Key', sort_order: 'Descend', limit: 1, keys_only: true } },
        { request_range: { key: layout.entry(stream, 1) } },
      ]);
      const termKv = rangeKvs(read.responses[0])[0];
      const fenceKv = rangeKvs(read.responses[1])[0];
      const lastKv = rangeKvs(read.responses[2])[0];
      const firstKv = rangeKvs(read.responses[3])[0];
      const leaseTerm = termKv ? Number(termKv.value.toString()) : 0;
      const highest = fenceKv ? Number(fenceKv.value.toString()) : 0;
      const verdict = decideFence(token.term, highest, leaseTerm);
      if (verdict === 'stale') throw reportStale(new StaleTermError(token.lease, token.term, highest), { stream });
      if (verdict === 'unissued') {
        throw new InvalidArgumentError('token.term', `term ${token.term} was never issued for lease ${token.lease} (latest ${leaseTerm})`);
      }
      // A stream belongs to the lease of its first entry. Entries are never rewritten, and entry 1
      // is created only if absent (the Create compare below), so this read cannot go out of date.
      const owner = firstKv ? (JSON.parse(firstKv.value.toString()) as { lease?: unknown }).lease : undefined;
      if (typeof owner === 'string' && owner !== token.lease) throw foreignStreamError(stream, owner, token.lease);
      const head = lastKv ? layout.seqOf(lastKv.key) : 0;
      // The compare-and-set on the head: the txn below creates entry head + 1 only if it is still
      // free, and entries are never deleted, so "head as read" still holds when the txn succeeds.
      if (expectSeq !== undefined && expectSeq !== head) throw new VersionConflictError(stream, expectSeq, head);
      const seq = head + 1;
      const entryKey = layout.entry(stream, seq);
      const ops: IRequestOp[] = [];
      if (token.term > highest) ops.push({ request_put: { key: fenceKey, value: Buffer.from(String(token.term)) } });
      // at: the append time. etcd has no clock a client can read, so it is this host's wall clock
      // (informational: lag in ms is not measured on etcd, as it would compare two hosts' clocks).
      ops.push({ request_put: { key: entryKey, value: Buffer.from(JSON.stringify({ lease: token.lease, term: token.term, payload, id: appendId, at: Date.now() })) } });
      // The fence did not move and the slot is free: the check and the write are one step.
      const res = await conn.txn(
        `append to ${stream}`,
        [
          { key: fenceKey, target: 'Mod', result: 'Equal', mod_revision: fenceKv ? fenceKv.mod_revision : 0 },
          { key: entryKey, target: 'Create', result: 'Equal', create_revision: 0 },
        ],
        ops,
        [{ request_range: { key: entryKey } }],
      );
      if (res.succeeded) return seq;
      // The etcd3 client resends a call whose connection failed; when the first send had landed
      // the resend finds the slot taken by this very append, which is done then, not contended
      // (without this check it would be written again at the next slot).
      const taken = rangeKvs(res.responses[0])[0];
      if (taken && (JSON.parse(taken.value.toString()) as { id?: string }).id === appendId) return seq;
    }
    throw new StoreUnavailableError(`${conn.label}: append to ${stream} gave up after ${MAX_ATTEMPTS} conflicting attempts`);
  }
}

/** A promise's outcome as a value, so that it can be awaited later without an unhandled rejection. */
function settle<T>(p: Promise<T>): Promise<{ value: T } | { error: unknown }> {
  return p.then(
    (value) => ({ value }),
    (error: unknown) => ({ error }),
  );
}

function foreignOwner(leaseId: string): string {
  return `etcd:${leaseIdHex(leaseId)}`;
}

function rangeKvs(op: { response_range?: { kvs: IKeyValue[] } } | undefined): IKeyValue[] {
  return op?.response_range?.kvs ?? [];
}

/** A stream entry's value as tenure writes it (JSON: lease, term, payload); anything else is a StoreDataError. */
function decodeEtcdEntry(stream: string, seq: number, value: Buffer): StreamEntry {
  let parsed: unknown;
  try {
    parsed = JSON.parse(value.toString());
  } catch {
    parsed = null;
  }
  const e = (typeof parsed === 'object' && parsed !== null ? parsed : {}) as { lease?: unknown; term?: unknown; payload?: unknown; at?: unknown };
  if (typeof e.lease !== 'string' || typeof e.payload !== 'string') {
    throw new StoreDataError(`etcd store: entry ${seq} of stream ${JSON.stringify(stream)} is not a tenure stream entry (written by another program?)`);
  }
  return decodeStreamEntry('etcd', stream, { seq, lease: e.lease, term: e.term, payload: e.payload, appendedAt: e.at });
}
