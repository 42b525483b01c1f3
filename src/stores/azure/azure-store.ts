/**
 * `azblob://ACCOUNT:KEY@HOST:PORT/CONTAINER` — the Store interface on Azure Blob storage, where
 * a lease is a blob lease.
 *
 * - Each lease name N is one block blob (`leases/<sha256 N>`). Its blob lease IS the lease:
 *   Azure (or Azurite) decides expiry on its own clock (safety rule 1). The blob lease id is
 *   derived from (N, owner, term) (`leaseIdOf`), so renew and release, which present that id,
 *   are compare-and-set on owner and term (rule 6), and a new term is a new id.
 * - The term lives in the blob's metadata. A new holder takes the blob lease under If-Match on
 *   the ETag of the read that found the lease free, then writes term + 1 with that lease id
 *   (only the lease holder can write a leased blob): the term moves exactly when the lease
 *   changes hands, and a racer that read the same free state gets 409 (rule 4).
 * - A reader believes the metadata's holder only after the service confirms the lease id of
 *   (owner, term) is the active one, so the instant between a new holder's lease and its
 *   metadata write never shows the previous holder as live.
 * - Azure's limits, stated: a blob lease lasts 15 to 60 s, so a TTL is rounded up to whole
 *   seconds of at least 15 s (`grantedTtlMs`) and a TTL over 60 s is refused; there is no push
 *   (no `watch`, no `watchStream`: pollers poll); a broken lease blocks for its break period.
 * - Fenced streams are per-lease journals (`journal.ts`), where an append is one conditional
 *   write (rule 5).
 */
import {
  ClosedError,
  InvalidArgumentError,
  StoreDataError,
  StoreUnavailableError,
  checkAppendOptions,
  checkName,
  checkOwner,
  checkPurgePrefix,
  checkPayload,
  checkReadOptions,
  checkTerm,
  checkMs,
  checkToken,
  checkTtl,
  decodeMeta,
  decodeTerm,
  encodeMeta,
  nextTerm,
} from '../../core/index.js';
import type { AcquireResult, AppendFencedOptions, FencingToken, Lease, LeaseMeta, ReadStreamOptions, RenewResult, Store, StreamEntry, StreamHead, Unsubscribe, WatchListener } from '../../core/index.js';
import { Blobs, bodyText, isAnswer } from './blobs.js';
import type { AppendBlobClient, BlockBlobClient, ContainerClient } from './driver.js';
import { Journals } from './journal.js';
import { blobNames, fromB64, leaseIdOf, toB64 } from './names.js';

/** The shortest blob lease Azure grants, ms. */
export const AZURE_MIN_LEASE_MS = 15_000;
/** The longest finite blob lease Azure grants, ms. */
export const AZURE_MAX_LEASE_MS = 60_000;

/**
 * The TTL a blob lease gives for a requested `ttlMs`: rounded up to whole seconds, at least 15 s.
 * A TTL over 60 s is refused (InvalidArgumentError): rounding it down would let the lease expire
 * before the holder's own deadline.
 */
export function grantedTtlMs(ttlMs: number): number {
  if (ttlMs > AZURE_MAX_LEASE_MS) {
    throw new InvalidArgumentError('ttlMs', `an Azure blob lease lasts 15 s to 60 s; a TTL must be at most ${AZURE_MAX_LEASE_MS} ms on azblob://, got ${ttlMs}`);
  }
  return Math.max(AZURE_MIN_LEASE_MS, Math.ceil(ttlMs / 1000) * 1000);
}

export interface AzureBlobStoreOptions {
  /** The container's name (with `endpoint`, `account`, `accountKey` or `connectionString`), or the user's own ContainerClient. */
  readonly container: string | ContainerClient;
  /** The blob service, such as `http://127.0.0.1:10000/devstoreaccount1` (Azurite) or `https://ACCOUNT.blob.core.windows.net`. */
  readonly endpoint?: string;
  readonly account?: string;
  readonly accountKey?: string;
  readonly connectionString?: string;
  /** Deadline of each call to the blob service, ms (default 5000); past it the outcome is unknown (StoreUnavailableError). */
  readonly requestTimeoutMs?: number;
  /**
   * Azure has no push. With this set (ms, 5 to 600000), `watch()` polls the watched leases at
   * this interval, so a LeaderElector's candidates learn of a release within about one interval
   * instead of at their next attempt (at most a TTL later). Absent: no `watch`.
   */
  readonly watchPollMs?: number;
}

/** The lease blob as one download found it. */
interface Snapshot {
  readonly etag: string;
  /** Azure's lease state: available, leased, expired, breaking, broken. */
  readonly state: string;
  readonly term: number;
  readonly owner: string | null;
  readonly ttlMs: number;
  /** The service's time when the holder last recorded itself (acquire or renew), ms; 0 unknown. */
  readonly atMs: number;
  readonly meta: LeaseMeta;
  /** The service's time of this download (its `Date`, whole seconds), ms. */
  readonly dateMs: number;
}

/** How long a reader waits for a new holder to record its term before calling the lease unknown, ms. */
const TRANSITION_WAIT_MS = 5000;
/** The pause between reads of a lease in transition, ms: doubling from 20 to 320, with jitter, so waiting racers do not crowd the holder's write out. */
function transitionStepMs(round: number): number {
  return Math.min(320, 20 * 2 ** Math.min(round, 4)) * (0.5 + Math.random());
}
const MAX_ACQUIRE_ROUNDS = 100;

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

export class AzureBlobStore implements Store {
  readonly kind = 'azblob';
  private readonly blobs: Blobs;
  private readonly journals: Journals;
  /** The meta this process last recorded per (name, owner, term), so a renew reports it without a download. */
  private readonly metaOf = new Map<string, LeaseMeta>();

  /** Present only when `watchPollMs` was given. */
  readonly watch?: (name: string, listener: WatchListener) => Unsubscribe;
  private readonly watched = new Map<string, { readonly listeners: Set<WatchListener>; term: number; owner: string | null }>();
  private pollTimer: NodeJS.Timeout | null = null;
  private polling = false;

  constructor(options: AzureBlobStoreOptions) {
    const requestTimeoutMs = checkMs('requestTimeoutMs', options.requestTimeoutMs ?? 5000, 1, 600_000);
    this.blobs = new Blobs({ ...options, requestTimeoutMs });
    this.journals = new Journals(this.blobs, (lease) => this.issuedTerm(lease));
    if (options.watchPollMs !== undefined) {
      const pollMs = checkMs('watchPollMs', options.watchPollMs, 5, 600_000);
      this.watch = (name, listener) => this.pollWatch(name, listener, pollMs);
    }
  }

  /** The container the store keeps its blobs in. */
  get container(): ContainerClient {
    return this.blobs.container;
  }

  async acquire(name: string, owner: string, ttlMs: number, meta?: LeaseMeta): Promise<AcquireResult> {
    checkName('name', name);
    checkOwner('owner', owner);
    checkTtl('ttlMs', ttlMs);
    const metaText = encodeMeta('meta', meta);
    const granted = grantedTtlMs(ttlMs);
    const waitUntil = performance.now() + TRANSITION_WAIT_MS;
    let waits = 0;
    for (let round = 0; round < MAX_ACQUIRE_ROUNDS; round++) {
      const snap = await this.snapshot(name);
      if (snap === null) {
        await this.createLeaseBlob(name);
        continue;
      }
      const live = snap.state === 'leased' || snap.state === 'breaking';
      if (live && snap.owner === owner && snap.state === 'leased') {
        const lease = await this.extendOwn(name, owner, snap.term, granted, metaText);
        if (lease) return { acquired: true, lease };
        await sleep(transitionStepMs(waits++));
        continue;
      }
      if (live) {
        const holder = await this.confirmHolder(name, snap);
        if (holder) {
          // The watchers hear of the holder this acquire met: a poll that never sees it (taken
          // and let go between two polls) must still tell its release, or a candidate that lost
          // to it would sleep out a blob lease (15-60 s) instead of one poll.
          this.noteLocal(name, holder.term, holder.owner, holder);
          return { acquired: false, lease: holder };
        }
        // Leased, but not by the recorded holder: a new holder between its lease and its term
        // write, maybe this very owner after an answer that was lost (rule 3): try its next id.
        if (snap.state === 'leased') {
          const mine = await this.take(name, owner, nextTerm(name, snap.term), granted, metaText, snap.etag).catch((err: unknown) => {
            if (isAnswer(err, 409) || isAnswer(err, 412)) return null;
            throw this.blobs.unexpected(err);
          });
          if (mine) return { acquired: true, lease: mine };
        }
        if (performance.now() > waitUntil) throw this.unknownHolder(name);
        await sleep(transitionStepMs(waits++));
        continue;
      }
      const lease = await this.take(name, owner, nextTerm(name, snap.term), granted, metaText, snap.etag).catch((err: unknown) => {
        // Another node took it (409) or the blob changed since the read (412): read again.
        if (isAnswer(err, 409) || isAnswer(err, 412)) return null;
        throw this.blobs.unexpected(err);
      });
      if (lease) {
        this.noteLocal(name, lease.term, owner, lease);
        return { acquired: true, lease };
      }
    }
    throw new StoreUnavailableError(`${this.blobs.label}: acquire of ${name} gave up after ${MAX_ACQUIRE_ROUNDS} contended rounds`);
  }

  async renew(name: string, owner: string, term: number, ttlMs: number): Promise<RenewResult> {
    checkName('name', name);
    checkOwner('owner', owner);
    checkTerm('term', term);
    checkTtl('ttlMs', ttlMs);
    const granted = grantedTtlMs(ttlMs);
    const id = leaseIdOf(name, owner, term);
    const sentAt = performance.now();
    let meta = this.metaOf.get(metaKey(name, owner, term));
    try {
      if (meta === undefined) {
        // Renewed by a process that did not acquire: the meta comes from the blob, read with the
        // lease id (so only while this lease is the active one).
        const res = await this.blobs.call(`renew ${name}`, (abortSignal) => this.leaseBlob(name).download(0, undefined, { abortSignal, conditions: { leaseId: id } }));
        meta = decodeMeta(await bodyText(res));
      }
      // The write with the lease id is the check that this lease is the active one: Azure would
      // renew an expired lease nobody took since, which the contract calls lost.
      await this.blobs.call(`renew ${name}`, (abortSignal) =>
        this.leaseBlob(name).setMetadata(this.record(name, owner, term, granted, this.blobs.serverNowMs()), { abortSignal, conditions: { leaseId: id } }),
      );
      // Acquiring with the active lease's own id renews it with the (maybe new) duration.
      await this.blobs.call(`renew ${name}`, (abortSignal) => this.leaseBlob(name).getBlobLeaseClient(id).acquireLease(granted / 1000, { abortSignal }));
    } catch (err) {
      if (isAnswer(err, 412) || isAnswer(err, 409) || isAnswer(err, 404)) return { renewed: false, lease: await this.read(name) };
      throw this.blobs.unexpected(err);
    }
    this.metaOf.set(metaKey(name, owner, term), meta);
    return { renewed: true, lease: { name, owner, term, meta, ttlMs: granted, remainingMs: Math.max(0, granted - Math.ceil(performance.now() - sentAt)) } };
  }

  async release(name: string, owner: string, term: number): Promise<boolean> {
    checkName('name', name);
    checkOwner('owner', owner);
    checkTerm('term', term);
    const id = leaseIdOf(name, owner, term);
    try {
      // Only the active lease: Azure would also release an expired lease nobody took since.
      await this.blobs.call(`release ${name}`, (abortSignal) => this.leaseBlob(name).getProperties({ abortSignal, conditions: { leaseId: id } }));
      await this.blobs.call(`release ${name}`, (abortSignal) => this.leaseBlob(name).getBlobLeaseClient(id).releaseLease({ abortSignal }));
    } catch (err) {
      if (isAnswer(err, 412) || isAnswer(err, 409) || isAnswer(err, 404)) return false;
      throw this.blobs.unexpected(err);
    }
    this.metaOf.delete(metaKey(name, owner, term));
    this.noteLocal(name, term, null, null);
    return true;
  }

  async read(name: string): Promise<Lease | null> {
    checkName('name', name);
    const waitUntil = performance.now() + TRANSITION_WAIT_MS;
    let waits = 0;
    for (;;) {
      const snap = await this.snapshot(name);
      if (snap === null || (snap.state !== 'leased' && snap.state !== 'breaking')) return null;
      const holder = await this.confirmHolder(name, snap);
      if (holder) return holder;
      if (performance.now() > waitUntil) throw this.unknownHolder(name);
      await sleep(transitionStepMs(waits++));
    }
  }

  async list(prefix = ''): Promise<Lease[]> {
    if (typeof prefix !== 'string') throw new InvalidArgumentError('prefix', `expected a string, got ${typeof prefix}`);
    const names: string[] = [];
    try {
      await this.blobs.call('list leases', async (abortSignal) => {
        for await (const item of this.blobs.container.listBlobsFlat({ prefix: blobNames.leasesPrefix, includeMetadata: true, abortSignal })) {
          const state = item.properties.leaseState;
          if (state !== 'leased' && state !== 'breaking') continue;
          const name = fromB64(item.metadata?.['name']);
          if (name !== null && name.startsWith(prefix)) names.push(name);
        }
        return {};
      });
    } catch (err) {
      throw this.blobs.unexpected(err);
    }
    names.sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
    const leases = await Promise.all(names.map((n) => this.read(n)));
    return leases.filter((l): l is Lease => l !== null);
  }

  async appendFenced(token: FencingToken, stream: string, payload: string, options?: AppendFencedOptions): Promise<number> {
    checkToken('token', token);
    checkName('stream', stream);
    checkPayload('payload', payload);
    const expectSeq = checkAppendOptions(options);
    if (this.blobs.isClosed) throw new ClosedError(this.blobs.label);
    return this.journals.append(token, stream, payload, expectSeq);
  }

  async readStream(stream: string, options?: ReadStreamOptions): Promise<StreamEntry[]> {
    checkName('stream', stream);
    const { after, limit } = checkReadOptions(options);
    if (this.blobs.isClosed) throw new ClosedError(this.blobs.label);
    const entries = await this.journals.entries(stream);
    return entries.slice(after, after + limit);
  }

  /**
   * The stream's head and the service's time, on the clock of `appendedAt`: the latest `Date`
   * the service sent (whole seconds) moved on by local monotonic time, so a lag in ms is good to
   * about a second (the header's resolution), never measured on a host's wall clock.
   */
  async streamHead(stream: string): Promise<StreamHead> {
    checkName('stream', stream);
    if (this.blobs.isClosed) throw new ClosedError(this.blobs.label);
    return this.journals.head(stream);
  }

  async readLast(stream: string): Promise<StreamEntry | null> {
    checkName('stream', stream);
    if (this.blobs.isClosed) throw new ClosedError(this.blobs.label);
    return (await this.journals.entries(stream)).at(-1) ?? null;
  }

  /**
   * Delete every lease, journal and stream claim whose name starts with `prefix` (see
   * Store.purge): the blob names are hashes, so the lease and claim blobs are listed with their
   * metadata, which names them. A leased blob's lease is broken first (Azure refuses to delete a
   * leased blob otherwise): never purge names something still holds. Resolves with how many blobs
   * went. Claims written before claims named their stream are matched by their lease's name.
   */
  async purge(prefix: string): Promise<number> {
    checkPurgePrefix(prefix);
    if (this.blobs.isClosed) throw new ClosedError(this.blobs.label);
    const leases: { name: string; leased: boolean }[] = [];
    const claims: { stream: string | null; blob: string }[] = [];
    try {
      await this.blobs.call('purge: list leases', async (abortSignal) => {
        for await (const item of this.blobs.container.listBlobsFlat({ prefix: blobNames.leasesPrefix, includeMetadata: true, abortSignal })) {
          const name = fromB64(item.metadata?.['name']);
          const state = item.properties.leaseState;
          if (name !== null && name.startsWith(prefix)) leases.push({ name, leased: state === 'leased' || state === 'breaking' });
        }
        return {};
      });
      await this.blobs.call('purge: list stream claims', async (abortSignal) => {
        for await (const item of this.blobs.container.listBlobsFlat({ prefix: blobNames.streamsPrefix, includeMetadata: true, abortSignal })) {
          const stream = fromB64(item.metadata?.['name']);
          const lease = fromB64(item.metadata?.['lease']);
          if ((stream !== null && stream.startsWith(prefix)) || (stream === null && lease !== null && lease.startsWith(prefix))) claims.push({ stream, blob: item.name });
        }
        return {};
      });
    } catch (err) {
      throw this.blobs.unexpected(err);
    }
    let purged = 0;
    const remove = async (what: string, blob: BlockBlobClient | AppendBlobClient): Promise<void> => {
      try {
        const res = await this.blobs.call(what, (abortSignal) => blob.deleteIfExists({ abortSignal }));
        if (res.succeeded) purged++;
      } catch (err) {
        throw this.blobs.unexpected(err);
      }
    };
    for (const { name, leased } of leases) {
      const blob = this.leaseBlob(name);
      if (leased) {
        try {
          await this.blobs.call(`purge: break the lease of ${name}`, (abortSignal) => blob.getBlobLeaseClient().breakLease(0, { abortSignal }));
        } catch (err) {
          if (!isAnswer(err, 409) && !isAnswer(err, 404)) throw this.blobs.unexpected(err);
        }
      }
      await remove(`purge: delete the lease ${name}`, blob);
      await remove(`purge: delete the journal of ${name}`, this.journals.blob(name));
    }
    for (const claim of claims) await remove(`purge: delete the claim of ${claim.stream ?? claim.blob}`, this.blobs.container.getBlockBlobClient(claim.blob));
    // What this process remembered of them is gone with them.
    this.journals.forget(prefix);
    for (const key of [...this.metaOf.keys()]) if (key.startsWith(prefix)) this.metaOf.delete(key);
    return purged;
  }

  async close(): Promise<void> {
    this.stopPolling();
    this.watched.clear();
    this.blobs.close();
  }

  private pollWatch(name: string, listener: WatchListener, pollMs: number): Unsubscribe {
    checkName('name', name);
    if (this.blobs.isClosed) throw new ClosedError(this.blobs.label);
    let w = this.watched.get(name);
    if (!w) {
      w = { listeners: new Set(), term: 0, owner: null };
      this.watched.set(name, w);
    }
    w.listeners.add(listener);
    if (!this.pollTimer) {
      this.pollTimer = setInterval(() => void this.poll(), pollMs);
      this.pollTimer.unref();
      void this.poll();
    }
    const entry = w;
    return () => {
      entry.listeners.delete(listener);
      if (entry.listeners.size === 0 && this.watched.get(name) === entry) this.watched.delete(name);
      if (this.watched.size === 0) this.stopPolling();
    };
  }

  private stopPolling(): void {
    if (this.pollTimer) clearInterval(this.pollTimer);
    this.pollTimer = null;
  }

  private async poll(): Promise<void> {
    if (this.polling || this.blobs.isClosed) return;
    this.polling = true;
    try {
      for (const [name, w] of [...this.watched]) {
        const lease = await this.read(name).catch(() => undefined);
        if (lease === undefined) continue; // retried on the next tick; callers see failures on their own calls
        this.advance(name, w, lease === null ? w.term : lease.term, lease?.owner ?? null, lease);
      }
    } finally {
      this.polling = false;
    }
  }

  /** Tell the watchers of `name` a change this process made or saw, never an older state than the last told. */
  private noteLocal(name: string, term: number, owner: string | null, lease: Lease | null): void {
    const w = this.watched.get(name);
    if (w) this.advance(name, w, term, owner, lease);
  }

  private advance(name: string, w: { readonly listeners: Set<WatchListener>; term: number; owner: string | null }, term: number, owner: string | null, lease: Lease | null): void {
    // Terms only grow, and a term once released is not held again: a poll that read before a
    // local change must not tell the older state after it.
    if (term < w.term || (term === w.term && (owner === w.owner || (w.owner === null && owner !== null && w.term > 0)))) return;
    w.term = term;
    w.owner = owner;
    for (const listener of [...w.listeners]) {
      try {
        listener(lease);
      } catch {
        // a listener's failure is not the store's
      }
    }
    if (w.listeners.size === 0) this.watched.delete(name);
  }

  private leaseBlob(name: string) {
    return this.blobs.container.getBlockBlobClient(blobNames.lease(name));
  }

  /** The lease blob's metadata as tenure writes it (ASCII values; names and owners base64url). */
  private record(name: string, owner: string, term: number, grantedMs: number, atMs: number): Record<string, string> {
    return { tenure: '1', name: toB64(name), term: String(term), owner: toB64(owner), ttlms: String(grantedMs), at: String(atMs) };
  }

  /**
   * Take the free lease blob for `owner` with `term`: the blob lease under If-Match on the ETag
   * of the read that found it free (so the term read there is still the latest), then the term
   * written with the new lease's id.
   */
  private async take(name: string, owner: string, term: number, grantedMs: number, metaText: string, etag: string): Promise<Lease> {
    const id = leaseIdOf(name, owner, term);
    const blob = this.leaseBlob(name);
    const sentAt = performance.now();
    const taken = await this.blobs.call(`acquire ${name}`, (abortSignal) => blob.getBlobLeaseClient(id).acquireLease(grantedMs / 1000, { abortSignal, conditions: { ifMatch: etag } }));
    const atMs = taken.date instanceof Date ? taken.date.getTime() : this.blobs.serverNowMs();
    try {
      await this.blobs.call(`acquire ${name}`, (abortSignal) =>
        blob.upload(metaText, Buffer.byteLength(metaText), { abortSignal, metadata: this.record(name, owner, term, grantedMs, atMs), conditions: { leaseId: id } }),
      );
    } catch (err) {
      // The lease is ours but its term is maybe unwritten: a "maybe" (rule 3). The next acquire
      // of this owner finds the lease held under its next id and finishes the write.
      throw this.blobs.unexpected(err);
    }
    const meta = decodeMeta(metaText);
    this.metaOf.set(metaKey(name, owner, term), meta);
    return { name, owner, term, meta, ttlMs: grantedMs, remainingMs: Math.max(0, grantedMs - Math.ceil(performance.now() - sentAt)) };
  }

  /** A live renewal by the holder through acquire: new meta, the (maybe new) duration; null when it is not the holder after all. */
  private async extendOwn(name: string, owner: string, term: number, grantedMs: number, metaText: string): Promise<Lease | null> {
    const id = leaseIdOf(name, owner, term);
    const blob = this.leaseBlob(name);
    const sentAt = performance.now();
    try {
      await this.blobs.call(`acquire ${name}`, (abortSignal) =>
        blob.upload(metaText, Buffer.byteLength(metaText), { abortSignal, metadata: this.record(name, owner, term, grantedMs, this.blobs.serverNowMs()), conditions: { leaseId: id } }),
      );
      await this.blobs.call(`acquire ${name}`, (abortSignal) => blob.getBlobLeaseClient(id).acquireLease(grantedMs / 1000, { abortSignal }));
    } catch (err) {
      if (isAnswer(err, 412) || isAnswer(err, 409)) return null;
      throw this.blobs.unexpected(err);
    }
    const meta = decodeMeta(metaText);
    this.metaOf.set(metaKey(name, owner, term), meta);
    return { name, owner, term, meta, ttlMs: grantedMs, remainingMs: Math.max(0, grantedMs - Math.ceil(performance.now() - sentAt)) };
  }

  /**
   * The recorded holder of a live lease blob, once the service confirms that the lease id of
   * (owner, term) is the active one; null when it is not (a new holder has not written its term
   * yet, or a lease tenure did not take).
   */
  private async confirmHolder(name: string, snap: Snapshot): Promise<Lease | null> {
    if (snap.owner === null || snap.term === 0) return null;
    const id = leaseIdOf(name, snap.owner, snap.term);
    try {
      await this.blobs.call(`read ${name}`, (abortSignal) => this.leaseBlob(name).getProperties({ abortSignal, conditions: { leaseId: id } }));
    } catch (err) {
      if (isAnswer(err, 412) || isAnswer(err, 404)) return null;
      throw this.blobs.unexpected(err);
    }
    // What is left is known only to the service; from the holder's last record (the service's
    // time, whole seconds) it is at least ttl - (now - at) - 1 s. Never more than the TTL.
    const ttlMs = snap.ttlMs > 0 ? snap.ttlMs : AZURE_MIN_LEASE_MS;
    const left = snap.atMs > 0 ? ttlMs - (snap.dateMs - snap.atMs) - 1000 : ttlMs;
    const remainingMs = Math.min(ttlMs, Math.max(Math.min(500, ttlMs), left));
    return { name, owner: snap.owner, term: snap.term, meta: snap.meta, ttlMs, remainingMs };
  }

  /** The lease blob's state, term, holder and meta in one download; null when there is no blob. */
  private async snapshot(name: string): Promise<Snapshot | null> {
    let res;
    try {
      res = await this.blobs.call(`read ${name}`, (abortSignal) => this.leaseBlob(name).download(0, undefined, { abortSignal }));
    } catch (err) {
      if (isAnswer(err, 404)) return null;
      throw this.blobs.unexpected(err);
    }
    const text = await bodyText(res);
    const md = res.metadata ?? {};
    const where = `azblob store: the lease blob of ${JSON.stringify(name)} (${blobNames.lease(name)})`;
    if (md['tenure'] !== '1' || fromB64(md['name']) !== name) {
      throw new StoreDataError(`${where} is not a tenure lease blob: its metadata lacks tenure=1 and this name (written by another program?)`);
    }
    const term = decodeTerm('azblob', name, md['term']);
    let owner: string | null = null;
    if (md['owner'] !== undefined && md['owner'] !== '') {
      owner = fromB64(md['owner']);
      if (owner === null || owner === '') throw new StoreDataError(`${where} names an owner that is not base64url text (metadata written by hand?)`);
    }
    const num = (v: string | undefined): number => (v !== undefined && /^[0-9]{1,15}$/.test(v) ? Number(v) : 0);
    return {
      etag: res.etag ?? '',
      state: res.leaseState ?? 'available',
      term,
      owner,
      ttlMs: num(md['ttlms']),
      atMs: num(md['at']),
      meta: decodeMeta(text),
      dateMs: res.date instanceof Date ? res.date.getTime() : 0,
    };
  }

  /**
   * Create a missing lease blob at term 0. A lease whose journal exists has issued terms: its
   * blob was deleted (by hand), and starting its terms over would give a second holder a term
   * already used, so that is refused with StoreDataError instead.
   */
  private async createLeaseBlob(name: string): Promise<void> {
    if (await this.journals.exists(name)) {
      throw new StoreDataError(
        `azblob store: the lease blob of ${JSON.stringify(name)} (${blobNames.lease(name)}) is missing but its journal holds fenced writes: ` +
          'it was deleted by hand, and its terms cannot go on from where they were; restore the blob or delete the journal too',
      );
    }
    try {
      await this.blobs.call(`create the lease blob of ${name}`, (abortSignal) =>
        this.leaseBlob(name).upload('{}', 2, { abortSignal, metadata: { tenure: '1', name: toB64(name), term: '0', owner: '' }, conditions: { ifNoneMatch: '*' } }),
      );
    } catch (err) {
      if (isAnswer(err, 409) || isAnswer(err, 412)) return; // created by another node meanwhile
      throw this.blobs.unexpected(err);
    }
  }

  /** The latest term issued for `lease` (0 when never): the fence check's upper bound. */
  private async issuedTerm(lease: string): Promise<number> {
    try {
      const props = await this.blobs.call(`read the term of ${lease}`, (abortSignal) => this.leaseBlob(lease).getProperties({ abortSignal }));
      return decodeTerm('azblob', lease, props.metadata?.['term'] ?? '0');
    } catch (err) {
      if (isAnswer(err, 404)) return 0;
      throw this.blobs.unexpected(err);
    }
  }

  private unknownHolder(name: string): StoreUnavailableError {
    return new StoreUnavailableError(
      `${this.blobs.label}: the lease blob of ${name} is leased, but not under the lease id of its recorded holder for ${TRANSITION_WAIT_MS} ms ` +
        '(a holder stopped between taking the lease and writing its term, or a lease taken by another program); it frees when that lease ends',
    );
  }
}

function metaKey(name: string, owner: string, term: number): string {
  return `${name}\u0000${owner}\u0000${term}`;
}


