/**
 * `zk://host:port[,host:port…][/chroot]` — the Store interface on ZooKeeper (layout: `layout.ts`).
 *
 * - A lease is held by the lowest ephemeral sequential node under `leases/<name>` (Curator's
 *   LeaderLatch layout). `acquire` never queues: it creates its node only when the name has no
 *   candidate at all, in one multi with the versioned set that bumps the term counter (safety
 *   rule 4), so two acquirers that both saw the name free cannot both create a node (the second
 *   multi fails on the counter's version). A foreign candidate (a Curator latch) that slipped in
 *   between has a lower sequence: the acquirer checks after its multi and steps back.
 * - Expiry: ZooKeeper decides it through the session (safety rule 1). Each lease's node lives in
 *   a session whose timeout the server granted at least as long as the lease's TTL, so a holder
 *   that is paused, killed or cut off loses the node no sooner than `sendTime + ttl` of its last
 *   renew (rule 2), and no later than the session timeout after. A live holder that stops renewing
 *   deletes its own node at `sendTime + ttl` (a local duration, never a wall clock). Sessions are
 *   shared by leases of the same TTL: one connection per distinct TTL in use.
 * - Renew and release are versioned sets and removes of the caller's own node (rule 6).
 * - Fenced appends are one multi: the fence node's versioned set (or check), the stream head's
 *   versioned set and the entry's create (rule 5).
 * - Push: `watch` and `watchStream` are ZooKeeper watches (re-armed after each event). A waiting
 *   candidate watches only the holder's node, which is the predecessor of any node it would make.
 * - Hand-off: requests on one session are answered in order, so reads that must see a write are
 *   sent right behind it, not after its answer. When the holder's node goes, the watch tells
 *   "free" at once and guesses the counter version a release would have left; then it reads the
 *   listing and the counter together. An acquire soon after a sight (or guess) of a free name
 *   takes it with one multi conditional on that version (a wrong or stale one loses the multi and
 *   the acquire reads as usual); the listings after that multi tell whether ours leads and
 *   whether a hand-over hint is held.
 */
import { randomUUID } from 'node:crypto';
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
  encodeMeta,
  foreignStreamError,
  nextTerm,
  reportStale,
  transferHintName,
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
  StreamHead,
  Unsubscribe,
  WatchListener,
} from '../../core/index.js';
import { Layout, decodeName, sortCandidates } from './layout.js';
import { ZK, ZkSession, isZk, statLong } from './session.js';
import type { MultiOp } from './session.js';
import type { ZkEvent } from './driver.js';

export interface ZookeeperStoreOptions {
  /** `host:port` of each server. */
  readonly hosts: readonly string[];
  /** Path every node of the store lives under (default none: the root). */
  readonly chroot?: string;
  /** Time limit of one request and of a connect, ms (default 5000). */
  readonly requestTimeoutMs?: number;
  /** `user:password` for ZooKeeper's digest auth. */
  readonly digest?: string;
}

/** What a tenure candidate node holds. */
interface NodeData {
  readonly owner: string;
  readonly term: number;
  readonly ttlMs: number;
  readonly meta: LeaseMeta;
}

/** A lease this store holds: its node, the session that owns it and the local deadline. */
interface Held {
  readonly name: string;
  readonly path: string;
  readonly session: ZkSession;
  data: NodeData;
  version: number;
  /** Monotonic ms (performance.now) when the last successful acquire or renew was sent. */
  sentAt: number;
  timer: NodeJS.Timeout | null;
}

const MAX_ATTEMPTS = 64;
/** How long a watch's sight of a free name may stand in for an acquire's own reads, ms (see acquire). */
const KNOWN_FREE_MS = 1000;
/** ZooKeeper's watch event type for a node that was deleted (`Event.NODE_DELETED`). */
const NODE_DELETED_EVENT = 2;
/**
 * The control session's timeout, ms. It owns no ephemeral node, so its timeout only bounds how
 * long it waits, cut off, before the store opens a new one (see ZkSession's lost timer).
 */
const CONTROL_SESSION_MS = 2000;

const now = (): number => performance.now();

export class ZookeeperStore implements Store {
  readonly kind = 'zookeeper';
  readonly layout: Layout;
  private readonly hosts: string;
  private readonly requestTimeoutMs: number;
  private readonly digest: string | undefined;
  private closed = false;
  /** Sessions by the TTL they were asked for. */
  private readonly sessions = new Map<number, Promise<ZkSession>>();
  private control: Promise<ZkSession> | null = null;
  private readonly held = new Map<string, Held>();
  private readonly watchers = new Set<{ arm: () => void }>();
  private readonly appendQueues = new Map<string, Promise<unknown>>();
  private readonly ensured = new Set<string>();
  private readonly removing = new Map<string, Promise<void>>();

  constructor(options: ZookeeperStoreOptions) {
    if (options.hosts.length === 0) throw new InvalidArgumentError('hosts', 'at least one host:port');
    this.hosts = options.hosts.join(',');
    this.layout = new Layout(options.chroot ?? '');
    this.requestTimeoutMs = options.requestTimeoutMs ?? 5000;
    this.digest = options.digest;
  }

  // ---- sessions ----

  private open(sessionTimeoutMs: number): Promise<ZkSession> {
    return ZkSession.open({ hosts: this.hosts, sessionTimeoutMs, requestTimeoutMs: this.requestTimeoutMs, ...(this.digest !== undefined ? { digest: this.digest } : {}) });
  }

  /** The session for reads, watches and streams (no ephemeral node of its own). */
  private async ctl(): Promise<ZkSession> {
    if (this.closed) throw new ClosedError('zookeeper store is closed');
    if (!this.control) {
      const p = this.open(CONTROL_SESSION_MS);
      this.control = p;
      p.then(
        (s) => {
          s.onEnd(() => {
            if (this.control === p) this.control = null;
            if (!this.closed) for (const w of this.watchers) w.arm();
          });
          if (this.closed) s.close();
        },
        () => {
          if (this.control === p) this.control = null;
        },
      );
    }
    return this.control;
  }

  /** A session that keeps a node at least `ttlMs` after the holder's last request. */
  private async sessionFor(ttlMs: number): Promise<ZkSession> {
    if (this.closed) throw new ClosedError('zookeeper store is closed');
    let p = this.sessions.get(ttlMs);
    if (!p) {
      p = this.open(ttlMs);
      const mine = p;
      this.sessions.set(ttlMs, p);
      p.then(
        (s) => {
          s.onEnd(() => {
            if (this.sessions.get(ttlMs) === mine) this.sessions.delete(ttlMs);
            // The server removed every node of the session: those leases are gone.
            for (const h of [...this.held.values()]) if (h.session === s) this.drop(h);
          });
          if (this.closed) s.close();
        },
        () => {
          if (this.sessions.get(ttlMs) === mine) this.sessions.delete(ttlMs);
        },
      );
    }
    const s = await p;
    if (s.negotiatedMs < ttlMs) {
      throw new InvalidArgumentError('ttlMs', `${ttlMs} ms is longer than the longest session the ZooKeeper server grants (${s.negotiatedMs} ms, its maxSessionTimeout): a lease cannot outlive its session`);
    }
    return s;
  }

  private async ensure(session: ZkSession, path: string): Promise<void> {
    if (this.ensured.has(path)) return;
    await session.ensure(path);
    this.ensured.add(path);
  }

  // ---- local deadlines ----

  private arm(h: Held): void {
    if (h.timer) clearTimeout(h.timer);
    const left = h.sentAt + h.data.ttlMs - now();
    h.timer = setTimeout(() => this.expire(h), Math.max(0, left));
    h.timer.unref?.();
  }

  /** Forget a held lease (its node is gone or going). */
  private drop(h: Held): void {
    if (h.timer) clearTimeout(h.timer);
    h.timer = null;
    if (this.held.get(h.name) === h) this.held.delete(h.name);
  }

  /** The holder let its TTL pass without renewing: its node goes, as a lease store's row would lapse. */
  private expire(h: Held): void {
    if (this.held.get(h.name) !== h) return;
    this.drop(h);
    const done = this.letGo(h.session, h.name, h.path, h.data.term, -1)
      .catch(() => false)
      .then((ok) => (ok ? undefined : this.removeOwn(h.session, h.path)))
      .finally(() => this.removing.delete(h.path));
    this.removing.set(h.path, done);
  }

  /**
   * Remove a node of ours whatever its version, retrying for as long as the session lives (the
   * node goes with it otherwise) and the store is open (closing ends the session). Giving up
   * earlier left an expired holder's node in place when the server was down for longer than the
   * retries (a restart on a loaded machine): the session resumed and kept it, and this store then
   * read its own expired lease as live (CI).
   */
  private async removeOwn(session: ZkSession, path: string): Promise<void> {
    for (let i = 0; !session.ended && !this.closed; i++) {
      try {
        await session.remove(path, -1);
        return;
      } catch (err) {
        if (isZk(err, ZK.NO_NODE)) return;
        await new Promise((r) => setTimeout(r, Math.min(1000, 100 * 2 ** Math.min(i, 4))));
      }
    }
  }

  /** Our lease on `name`, if its local deadline has not passed (a late timer is run now). */
  private live(name: string): Held | undefined {
    const h = this.held.get(name);
    if (h && now() >= h.sentAt + h.data.ttlMs) {
      this.expire(h);
      return undefined;
    }
    return h;
  }

  // ---- reading a name ----

  private describe(name: string, data: NodeData, held?: Held): Lease {
    const remainingMs = held ? Math.max(0, Math.round(held.sentAt + held.data.ttlMs - now())) : data.ttlMs;
    return { name, owner: data.owner, term: data.term, meta: data.meta, ttlMs: data.ttlMs, remainingMs };
  }

  /** The holder of `name` (the lowest candidate) with its data, or null. */
  private async holder(session: ZkSession, name: string): Promise<{ path: string; data: NodeData; version: number } | null> {
    const dir = this.layout.lease(name);
    for (let attempt = 0; attempt < MAX_ATTEMPTS; attempt++) {
      let children: string[];
      try {
        children = await session.getChildren(dir);
      } catch (err) {
        if (isZk(err, ZK.NO_NODE)) return this.listed(name, true);
        throw err;
      }
      const first = sortCandidates(children)[0];
      if (first === undefined) return this.listed(name, true);
      this.listed(name, false);
      const path = `${dir}/${first}`;
      try {
        const { data, stat } = await session.getData(path);
        const decoded = await this.decodeNode(session, name, data);
        this.observe(name, path, stat.version, this.describe(name, decoded));
        return { path, data: decoded, version: stat.version };
      } catch (err) {
        if (isZk(err, ZK.NO_NODE)) continue; // gone between the two reads
        throw err;
      }
    }
    throw new StoreUnavailableError(`zookeeper: the candidates of ${name} kept changing`);
  }

  /** Notes what the last listing of `name` found (free or not); null, for holder() to return. */
  private listed(name: string, free: boolean): null {
    if (free) this.listedFree.add(name);
    else this.listedFree.delete(name);
    return null;
  }

  /** A candidate's data; a foreign node (a Curator latch) is shown with the current term. */
  private async decodeNode(session: ZkSession, name: string, raw: Buffer): Promise<NodeData> {
    const text = raw.toString('utf8');
    let parsed: unknown = null;
    try {
      parsed = JSON.parse(text);
    } catch {
      parsed = null;
    }
    const p = parsed as Partial<NodeData> & { tenure?: number };
    if (p && typeof p === 'object' && p.tenure === 1 && typeof p.owner === 'string') {
      return { owner: p.owner, term: decodeTerm('zookeeper', name, p.term), ttlMs: typeof p.ttlMs === 'number' ? p.ttlMs : 0, meta: p.meta && typeof p.meta === 'object' ? p.meta : {} };
    }
    const { term } = await this.readTerm(session, name);
    return { owner: text === '' ? 'zookeeper:foreign' : `zookeeper:${text.slice(0, 100)}`, term, ttlMs: 0, meta: {} };
  }

  /** Whether `path` (a candidate node in `dir`) is the first candidate in `listing` (a getChildren of `dir`). */
  private async firstListed(listing: Promise<string[]>, dir: string, path: string): Promise<boolean> {
    try {
      const first = sortCandidates(await listing)[0];
      return first !== undefined && `${dir}/${first}` === path;
    } catch (err) {
      if (isZk(err, ZK.NO_NODE)) return false;
      throw err;
    }
  }

  /**
   * The term counter: `N` while term N's holder has it or lost it without letting go (its session
   * expired, its node was removed by hand), `N released` once it let go (release, or its own
   * deadline passed here).
   */
  private async readTerm(session: ZkSession, name: string): Promise<{ term: number; version: number; released: boolean }> {
    try {
      const { data, stat } = await session.getData(this.layout.term(name));
      const [text = '', mark] = data.toString('utf8').split(' ');
      return { term: decodeTerm('zookeeper', name, text), version: stat.version, released: mark === 'released' };
    } catch (err) {
      if (isZk(err, ZK.NO_NODE)) return { term: 0, version: -1, released: true };
      throw err;
    }
  }

  /** Remove our node and mark the term released, in one multi (false when the node was gone). */
  private async letGo(session: ZkSession, name: string, path: string, term: number, version: number): Promise<boolean> {
    try {
      await session.multi([
        { op: 'remove', path, version },
        { op: 'set', path: this.layout.term(name), data: Buffer.from(`${term} released`), version: -1 },
      ]);
      return true;
    } catch (err) {
      if (isZk(err, ZK.NO_NODE) || isZk(err, ZK.BAD_VERSION)) return false;
      throw err;
    }
  }

  /**
   * When this process last saw a holder's node change (its first sight of that version): the
   * holder's deadline is at most `ttl` after it, since the renew that made the version was sent
   * before. Used to wait out a holder that vanished without letting go.
   */
  private readonly seen = new Map<string, { path: string; version: number; at: number; lease: Lease }>();
  /** When this process first saw a name vacant without a release, per name and term. */
  private readonly vacantSince = new Map<string, { term: number; at: number }>();
  /** Names whose last listing here found no candidate: an acquire of one reads the term counter early. */
  private readonly listedFree = new Set<string>();
  /**
   * Names a watch here last saw with no candidate and the counter released, with the counter then;
   * or, told of the holder's node going, its guess at the counter a release left (see watch, take).
   */
  private readonly knownFree = new Map<string, { term: number; version: number; at: number }>();

  private observe(name: string, path: string, version: number, lease: Lease): void {
    const s = this.seen.get(name);
    if (s && s.path === path && s.version === version) return;
    this.seen.set(name, { path, version, at: now(), lease });
  }

  private encodeNode(d: NodeData): Buffer {
    return Buffer.from(JSON.stringify({ tenure: 1, owner: d.owner, term: d.term, ttlMs: d.ttlMs, meta: d.meta }));
  }

  // ---- Store ----

  async acquire(name: string, owner: string, ttlMs: number, meta?: LeaseMeta): Promise<AcquireResult> {
    checkName('name', name);
    checkOwner('owner', owner);
    checkTtl('ttlMs', ttlMs);
    const metaValue = decodeMeta(encodeMeta('meta', meta));
    const session = await this.sessionFor(ttlMs);
    for (let attempt = 0; attempt < MAX_ATTEMPTS; attempt++) {
      const mine = this.live(name);
      const sentAt = now();
      // A watch here last saw the name free and let go of, the counter at `version`: take it in
      // one multi, conditional on that version (every acquire since moved it, and a lost multi
      // reads the name as below): the listing and the counter read are spared.
      // Only a recent sight (KNOWN_FREE_MS): a counter removed by a purge and made again starts
      // its versions over, so an old one could match a newer counter's.
      const free = attempt === 0 && mine === undefined ? this.knownFree.get(name) : undefined;
      if (free) this.knownFree.delete(name);
      if (free && sentAt - free.at <= KNOWN_FREE_MS) {
        const taken = await this.take(session, name, owner, ttlMs, metaValue, free.term, free.version, sentAt, true);
        if (taken) return taken;
        continue;
      }
      const holding = this.holder(session, name);
      // Last listed free here (a watch told of a release, or the name is new): the term counter is
      // asked right behind the listing on the same session (ZooKeeper answers a session's requests
      // in order, so it reads a state at least as new as the listing's first read), and a free
      // lease is taken one round trip sooner. A candidate retrying a held lease pays no such read.
      const early = this.listedFree.has(name) || !this.seen.has(name) ? this.readTerm(session, name) : null;
      early?.catch(() => {});
      const current = await holding;
      const lapsing = current ? this.removing.get(current.path) : undefined;
      if (lapsing) {
        await lapsing; // our own expired node, on its way out
        continue;
      }
      if (current) {
        if (current.data.owner !== owner) {
          return { acquired: false, lease: this.describe(name, current.data, this.held.get(name)?.path === current.path ? this.held.get(name) : undefined) };
        }
        // A live renewal of our own: new meta and TTL, same term.
        if (mine && mine.path === current.path && ttlMs > mine.session.negotiatedMs) {
          return { acquired: false, lease: this.describe(name, current.data, mine) };
        }
        const data: NodeData = { ...current.data, ttlMs, meta: metaValue };
        try {
          const stat = await session.setData(current.path, this.encodeNode(data), current.version);
          const h = mine && mine.path === current.path ? mine : undefined;
          if (h) {
            h.data = data;
            h.version = stat.version;
            h.sentAt = sentAt;
            this.arm(h);
          }
          return { acquired: true, lease: this.describe(name, data, h) };
        } catch (err) {
          if (isZk(err, ZK.BAD_VERSION) || isZk(err, ZK.NO_NODE)) continue;
          throw err;
        }
      }
      if (mine) this.drop(mine); // its node is gone (removed by hand, or the session moved on)
      // Free: create the holder's node and bump the counter in one multi.
      // Not released in the early read: read again, after the listing that found it free (a
      // release between the two would otherwise look like a holder that vanished).
      let termRead = early === null ? null : await early;
      if (termRead === null || !termRead.released) termRead = await this.readTerm(session, name);
      const { term: last, version, released } = termRead;
      if (!released) {
        // Term `last`'s holder vanished without letting go: its session expired (then its deadline
        // has passed) or its node was removed by hand (then it may still think it leads until its
        // deadline). Wait until the deadline has surely passed: a TTL after this process first saw
        // its last renewal, or, never having seen it, a TTL (ours) after first seeing it vacant.
        const s = this.seen.get(name);
        let until: number;
        let lease: Lease;
        if (s && s.lease.term === last) {
          until = s.at + s.lease.ttlMs;
          lease = s.lease;
        } else {
          const v = this.vacantSince.get(name);
          const since = v && v.term === last ? v.at : now();
          if (!v || v.term !== last) this.vacantSince.set(name, { term: last, at: since });
          until = since + ttlMs;
          lease = { name, owner: 'zookeeper:vanished', term: last, meta: {}, ttlMs, remainingMs: 0 };
        }
        const left = Math.ceil(until - now());
        if (left > 0) return { acquired: false, lease: { ...lease, remainingMs: left } };
      }
      const taken = await this.take(session, name, owner, ttlMs, metaValue, last, version, sentAt);
      if (taken) return taken;
    }
    throw new StoreUnavailableError(`zookeeper: acquire of ${name} lost ${MAX_ATTEMPTS} races in a row`);
  }

  /**
   * Create the holder's node for the term after `last` and move the counter on from `version`, in
   * one multi: the acquire's answer, or null when the multi lost (another acquirer moved the
   * counter first, or a folder was missing): read again and retry.
   *
   * `unread`: `last` and `version` were not read just now (a watch's sight, or its guess at the
   * version a release left). The counter is then read right before the multi on the same session
   * (no round trip of its own), and a multi that won on a counter other than `last released` at
   * `version` (a guess that met another acquire's one move, which wrote the same next term) is
   * undone before anything is reported: its node is removed and the acquire reads as usual.
   */
  private async take(session: ZkSession, name: string, owner: string, ttlMs: number, metaValue: LeaseMeta, last: number, version: number, sentAt: number, unread = false): Promise<AcquireResult | null> {
    const dir = this.layout.lease(name);
    const term = nextTerm(name, last);
    const data: NodeData = { owner, term, ttlMs, meta: metaValue };
    const termOp: MultiOp =
      version < 0
        ? { op: 'create', path: this.layout.term(name), data: Buffer.from(String(term)), mode: 'persistent' }
        : { op: 'set', path: this.layout.term(name), data: Buffer.from(String(term)), version };
    const before = unread ? this.readTerm(session, name) : null;
    before?.catch(() => {});
    const creating = session.multi([termOp, { op: 'create', path: `${dir}/_c_${randomUUID()}-latch-`, data: this.encodeNode(data), mode: 'ephemeral-sequential' }]);
    // Asked right behind the multi on the same session, so answered after it (ZooKeeper answers
    // a session's requests in order) without a round trip of their own: the candidates, to see
    // ours leads, and the hand-over hint's, to tell the elector no hint was held once we won.
    const listing = session.getChildren(dir);
    const hintName = transferHintName(name);
    const hints = hintName === null ? null : session.getChildren(this.layout.lease(hintName));
    listing.catch(() => {});
    hints?.catch(() => {});
    let path: string;
    try {
      path = (await creating)[1]!;
    } catch (err) {
      if (isZk(err, ZK.NO_NODE)) {
        // The lease's folder or the terms folder is missing (the name's first acquire), or the
        // counter went between the read and the multi: make the folders (again: a purge may have
        // removed them since they were made here), retry.
        this.ensured.delete(dir);
        this.ensured.delete(`${this.layout.root}/terms`);
        await this.ensure(session, dir);
        await this.ensure(session, `${this.layout.root}/terms`);
        return null;
      }
      if (isZk(err, ZK.BAD_VERSION) || isZk(err, ZK.NODE_EXISTS)) return null; // another acquirer won the counter
      throw err;
    }
    if (before) {
      // What the multi's version check could not tell: the counter it moved on was a release's.
      const was = await before.catch(() => null);
      if (was === null || was.version !== version || !was.released || was.term !== last) {
        await this.removeOwn(session, path);
        return null;
      }
    }
    const h: Held = { name, path, session, data, version: 0, sentAt, timer: null };
    this.held.set(name, h);
    this.arm(h);
    // A foreign candidate made before ours leads by ZooKeeper's rule: step back. Ours first in
    // the listing is enough (its data is what we just wrote); another's is read for the answer.
    if (await this.firstListed(listing, dir, path)) {
      this.observe(name, path, 0, this.describe(name, data)); // as a read of it would (a new node's version is 0)
      // No hint candidate listed after the win: a hint read now would find none but one the winner writes itself.
      const noTransferHint = hints !== null && (await hints.then((c) => sortCandidates(c).length === 0, (err: unknown) => isZk(err, ZK.NO_NODE)));
      return { acquired: true, lease: this.describe(name, data, h), ...(noTransferHint ? { noTransferHint } : {}) };
    }
    const now2 = await this.holder(session, name);
    if (now2 && now2.path !== path) {
      this.drop(h);
      await this.removeOwn(session, path);
      return { acquired: false, lease: this.describe(name, now2.data) };
    }
    return { acquired: true, lease: this.describe(name, data, h) };
  }

  async renew(name: string, owner: string, term: number, ttlMs: number): Promise<RenewResult> {
    checkName('name', name);
    checkOwner('owner', owner);
    checkTerm('term', term);
    checkTtl('ttlMs', ttlMs);
    if (this.closed) throw new ClosedError('zookeeper store is closed');
    const h = this.live(name);
    if (!h || h.data.owner !== owner || h.data.term !== term) return { renewed: false, lease: await this.read(name) };
    if (ttlMs > h.session.negotiatedMs) {
      // The node's session would not keep it that long: a longer TTL needs a new acquire.
      return { renewed: false, lease: this.describe(name, h.data, h) };
    }
    const sentAt = now();
    const data: NodeData = { ...h.data, ttlMs };
    try {
      const stat = await h.session.setData(h.path, this.encodeNode(data), h.version);
      if (this.held.get(name) !== h) return { renewed: false, lease: null }; // expired locally meanwhile
      h.data = data;
      h.version = stat.version;
      h.sentAt = sentAt;
      this.arm(h);
      return { renewed: true, lease: this.describe(name, data, h) };
    } catch (err) {
      if (isZk(err, ZK.NO_NODE) || isZk(err, ZK.BAD_VERSION)) {
        // Removed by hand, or changed by someone else: not ours any more.
        this.drop(h);
        if (isZk(err, ZK.BAD_VERSION)) await this.removeOwn(h.session, h.path);
        return { renewed: false, lease: await this.read(name) };
      }
      throw err;
    }
  }

  async release(name: string, owner: string, term: number): Promise<boolean> {
    checkName('name', name);
    checkOwner('owner', owner);
    checkTerm('term', term);
    if (this.closed) throw new ClosedError('zookeeper store is closed');
    const h = this.live(name);
    if (h && h.data.owner === owner && h.data.term === term) {
      this.drop(h);
      return this.letGo(h.session, name, h.path, term, -1);
    }
    if (h) return false;
    // Held through another store (another process with the same owner): compare-and-delete by version.
    const session = await this.ctl();
    const current = await this.holder(session, name);
    if (!current || current.data.owner !== owner || current.data.term !== term) return false;
    return this.letGo(session, name, current.path, term, current.version);
  }

  async read(name: string): Promise<Lease | null> {
    checkName('name', name);
    const session = await this.ctl();
    const mine = this.live(name);
    const current = await this.holder(session, name);
    if (!current) return null;
    const h = mine && mine.path === current.path ? mine : undefined;
    // Expired here but its removal not yet seen by the server: not live.
    if (!h && this.expiredHere(current.path)) return null;
    return this.describe(name, current.data, h);
  }

  /** Nodes whose holder's TTL passed here, being removed: not live, whatever the server says yet. */
  private expiredHere(path: string): boolean {
    return this.removing.has(path);
  }

  async list(prefix = ''): Promise<Lease[]> {
    if (typeof prefix !== 'string') throw new InvalidArgumentError('prefix', 'expected a string');
    const session = await this.ctl();
    let children: string[];
    try {
      children = await session.getChildren(this.layout.leases());
    } catch (err) {
      if (isZk(err, ZK.NO_NODE)) return [];
      throw err;
    }
    const names = children
      .map(decodeName)
      .filter((n): n is string => n !== null && n.startsWith(prefix))
      .sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
    const leases = await Promise.all(names.map((n) => this.read(n)));
    return leases.filter((l): l is Lease => l !== null);
  }

  /**
   * Delete every lease (its candidates with it), term, fence and stream (its entries with it)
   * whose name starts with `prefix`: each name is one znode under leases/, terms/, fences/ or
   * streams/, removed with its children. A holder of a removed candidate sees its node go, as it
   * would if an operator removed it. Not one transaction: a node created meanwhile under a name
   * being removed is removed too (up to five tries).
   */
  async purge(prefix: string): Promise<number> {
    checkPurgePrefix(prefix);
    const session = await this.ctl();
    const root = this.layout.root;
    let n = 0;
    for (const dir of [this.layout.leases(), `${root}/terms`, `${root}/fences`, `${root}/streams`]) {
      let children: string[];
      try {
        children = await session.getChildren(dir);
      } catch (err) {
        if (isZk(err, ZK.NO_NODE)) continue;
        throw err;
      }
      for (const child of children) {
        const name = decodeName(child);
        if (name === null || !name.startsWith(prefix)) continue;
        const path = `${dir}/${child}`;
        n += await this.removeTree(session, path);
        for (const p of this.ensured) if (p === path || p.startsWith(`${path}/`)) this.ensured.delete(p);
      }
    }
    // What this store remembered of the purged names: they are new names now.
    for (const [name, h] of this.held) if (name.startsWith(prefix)) this.drop(h);
    for (const map of [this.seen, this.vacantSince]) for (const name of [...map.keys()]) if (name.startsWith(prefix)) map.delete(name);
    for (const name of [...this.listedFree]) if (name.startsWith(prefix)) this.listedFree.delete(name);
    for (const name of [...this.knownFree.keys()]) if (name.startsWith(prefix)) this.knownFree.delete(name);
    return n;
  }

  /** Remove `path` and its children (a lease's candidates, a stream's entries); how many nodes went. */
  private async removeTree(session: ZkSession, path: string): Promise<number> {
    let n = 0;
    for (let attempt = 1; ; attempt++) {
      let children: string[];
      try {
        children = await session.getChildren(path);
      } catch (err) {
        if (isZk(err, ZK.NO_NODE)) return n;
        throw err;
      }
      // Leaves (candidates, entries) a hundred at a time, in parallel.
      for (let i = 0; i < children.length; i += 100) {
        const gone = await Promise.all(children.slice(i, i + 100).map((c) => this.removeTree(session, `${path}/${c}`)));
        for (const g of gone) n += g;
      }
      try {
        await session.remove(path, -1);
        return n + 1;
      } catch (err) {
        if (isZk(err, ZK.NO_NODE)) return n;
        if (!isZk(err, ZK.NOT_EMPTY) || attempt >= 5) throw err;
      }
    }
  }

  async appendFenced(token: FencingToken, stream: string, payload: string, options?: AppendFencedOptions): Promise<number> {
    checkToken('token', token);
    checkName('stream', stream);
    checkPayload('payload', payload);
    const expectSeq = checkAppendOptions(options);
    const session = await this.ctl();
    // One append at a time per stream from this process: fewer lost races.
    const prev = this.appendQueues.get(stream) ?? Promise.resolve();
    const run = prev.then(
      () => this.appendOnce(session, token, stream, payload, expectSeq),
      () => this.appendOnce(session, token, stream, payload, expectSeq),
    );
    const tail = run.catch(() => {});
    this.appendQueues.set(stream, tail);
    void tail.then(() => {
      if (this.appendQueues.get(stream) === tail) this.appendQueues.delete(stream);
    });
    return run;
  }

  private async appendOnce(session: ZkSession, token: FencingToken, stream: string, payload: string, expectSeq: number | undefined): Promise<number> {
    const fencePath = this.layout.fence(token.lease);
    const streamPath = this.layout.stream(stream);
    await this.ensure(session, `${this.layout.root}/fences`);
    await this.ensure(session, `${this.layout.root}/streams`);
    for (let attempt = 0; attempt < MAX_ATTEMPTS; attempt++) {
      const [fence, issued, head] = await Promise.all([this.readFence(session, token.lease), this.readTerm(session, token.lease), this.readHead(session, stream)]);
      const verdict = decideFence(token.term, fence.term, issued.term);
      if (verdict === 'stale') throw reportStale(new StaleTermError(token.lease, token.term, fence.term), { stream });
      if (verdict === 'unissued') throw new InvalidArgumentError('token', `term ${token.term} was never issued for lease ${token.lease} (the latest is ${issued.term})`);
      if (head.lease !== null && head.lease !== token.lease) throw foreignStreamError(stream, head.lease, token.lease);
      if (expectSeq !== undefined && expectSeq !== head.seq) throw new VersionConflictError(stream, expectSeq, head.seq);
      const seq = head.seq + 1;
      const ops: MultiOp[] = [];
      const termText = Buffer.from(String(token.term));
      if (fence.version < 0) ops.push({ op: 'create', path: fencePath, data: termText, mode: 'persistent' });
      else if (token.term > fence.term) ops.push({ op: 'set', path: fencePath, data: termText, version: fence.version });
      else ops.push({ op: 'check', path: fencePath, version: fence.version });
      const headData = Buffer.from(JSON.stringify({ lease: token.lease, head: seq }));
      if (head.version < 0) ops.push({ op: 'create', path: streamPath, data: headData, mode: 'persistent' });
      else ops.push({ op: 'set', path: streamPath, data: headData, version: head.version });
      ops.push({ op: 'create', path: this.layout.entry(stream, seq), data: Buffer.from(JSON.stringify({ lease: token.lease, term: token.term, payload })), mode: 'persistent' });
      try {
        await session.multi(ops);
        return seq;
      } catch (err) {
        if (isZk(err, ZK.BAD_VERSION) || isZk(err, ZK.NODE_EXISTS) || isZk(err, ZK.NO_NODE)) continue; // someone appended or fenced meanwhile
        throw err;
      }
    }
    throw new StoreUnavailableError(`zookeeper: append to ${stream} lost ${MAX_ATTEMPTS} races in a row`);
  }

  private async readFence(session: ZkSession, lease: string): Promise<{ term: number; version: number }> {
    try {
      const { data, stat } = await session.getData(this.layout.fence(lease));
      return { term: decodeTerm('zookeeper', lease, data.toString('utf8')), version: stat.version };
    } catch (err) {
      if (isZk(err, ZK.NO_NODE)) return { term: 0, version: -1 };
      throw err;
    }
  }

  private async readHead(session: ZkSession, stream: string, watcher?: () => void): Promise<{ lease: string | null; seq: number; version: number }> {
    try {
      const { data, stat } = await session.getData(this.layout.stream(stream), watcher);
      const p = JSON.parse(data.toString('utf8')) as { lease?: unknown; head?: unknown };
      if (typeof p.lease !== 'string' || typeof p.head !== 'number' || !Number.isSafeInteger(p.head) || p.head < 0) throw new Error('bad head');
      return { lease: p.lease, seq: p.head, version: stat.version };
    } catch (err) {
      if (isZk(err, ZK.NO_NODE)) {
        if (watcher) await session.exists(this.layout.stream(stream), watcher);
        return { lease: null, seq: 0, version: -1 };
      }
      if (err instanceof Error && (err.message === 'bad head' || err instanceof SyntaxError)) {
        throw new StoreDataError(`zookeeper store: the head of stream ${JSON.stringify(stream)} is not tenure's (${this.layout.stream(stream)} written by hand?)`);
      }
      throw err;
    }
  }

  async readStream(stream: string, options?: ReadStreamOptions): Promise<StreamEntry[]> {
    checkName('stream', stream);
    const { after, limit } = checkReadOptions(options);
    const session = await this.ctl();
    const head = await this.readHead(session, stream);
    const last = Math.min(head.seq, after + limit);
    const seqs: number[] = [];
    for (let s = after + 1; s <= last; s++) seqs.push(s);
    return Promise.all(seqs.map((s) => this.readEntry(session, stream, s)));
  }

  private async readEntry(session: ZkSession, stream: string, seq: number): Promise<StreamEntry> {
    const { data, stat } = await session.getData(this.layout.entry(stream, seq));
    let p: { lease?: unknown; term?: unknown; payload?: unknown };
    try {
      p = JSON.parse(data.toString('utf8')) as typeof p;
    } catch {
      p = {};
    }
    if (typeof p.lease !== 'string' || typeof p.payload !== 'string') {
      throw new StoreDataError(`zookeeper store: entry ${seq} of stream ${JSON.stringify(stream)} is not tenure's (written by hand?)`);
    }
    return decodeStreamEntry('zookeeper', stream, { seq, lease: p.lease, term: p.term, payload: p.payload, appendedAt: statLong(stat.ctime) });
  }

  async readLast(stream: string): Promise<StreamEntry | null> {
    checkName('stream', stream);
    const session = await this.ctl();
    const head = await this.readHead(session, stream);
    return head.seq === 0 ? null : this.readEntry(session, stream, head.seq);
  }

  /** The head and the server's clock: a versionless set of a scratch node, whose mtime is the server's now. */
  async streamHead(stream: string): Promise<StreamHead> {
    checkName('stream', stream);
    const session = await this.ctl();
    const head = await this.readHead(session, stream);
    const clock = `${this.layout.root}/clock`;
    let stat;
    try {
      stat = await session.setData(clock, Buffer.alloc(0), -1);
    } catch (err) {
      if (!isZk(err, ZK.NO_NODE)) throw err;
      await this.ensure(session, clock);
      stat = await session.setData(clock, Buffer.alloc(0), -1);
    }
    return { seq: head.seq, nowMs: statLong(stat.mtime) };
  }

  watch(name: string, listener: WatchListener): Unsubscribe {
    checkName('name', name);
    let last: string | null | undefined;
    let lastTerm: number | null = null; // the term of the holder last told, while one is
    let freeTerm = 0; // the term counter when "free" was last told (or first seen)
    // The term counter as read while the holder's node at `path` was watched (once per holder).
    let held: { path: string; term: number; version: number; released: boolean } | null = null;
    const tell = (lease: Lease | null, counter = 0, released = true): void => {
      const key = lease ? `${lease.owner}@${lease.term}@${lease.ttlMs}@${JSON.stringify(lease.meta)}` : null;
      if (key === null) {
        // Free after free is news when the counter moved to a release: someone held it in
        // between, unseen by this watch, and a candidate that lost to them (learnt by its own
        // acquire) waits for this release. A counter moved but not released, with no candidate
        // listed, is an acquire that came right after the listing: its node fires the children
        // watch that listing armed, and the next round tells the holder.
        const moved = last === null && counter > freeTerm && released;
        if (released) freeTerm = Math.max(freeTerm, counter);
        if (last === undefined || (last === null && !moved)) {
          last = null;
          return;
        }
      } else if (key === last) {
        return;
      }
      // A holder followed by a newer term: the lease was free in between (an acquire takes only a
      // free lease), an instant a watch that re-arms after each firing can miss when a release and
      // the next acquire land within one re-read. Tell it, as every pushing store does.
      if (lease && lastTerm !== null && lease.term > lastTerm) listener(null);
      last = key;
      lastTerm = lease ? lease.term : null;
      listener(lease);
    };
    return this.rearming(async (again, stopped, deleted) => {
      // The holder's node went: tell "free" now, before any read, and let an acquire here try the
      // counter at the version a release would have left (the one read while it held, + 1). The
      // multi of that acquire is conditional on it, so a guess that is wrong loses the multi and
      // reads as usual: the holder vanished (no release moved the counter), or others came and
      // went. The one other single move, another's acquire, is caught by the counter read right
      // before that multi, and the multi undone (see take).
      if (deleted !== undefined && held !== null && held.path === deleted && !held.released && held.version >= 0 && !stopped()) {
        this.knownFree.set(name, { term: held.term, version: held.version + 1, at: now() });
        tell(null, held.term);
      }
      if (deleted !== undefined) held = null;
      const session = await this.ctl();
      const dir = this.layout.lease(name);
      await this.ensure(session, dir);
      // Only the holder's node is watched while there is one (it is the predecessor of any
      // node a waiting candidate would make: no herd on the queue behind it); its data
      // watch fires when it renews or goes. With no holder, the children tell who comes.
      // After the holder's node went, the name is most likely free: skip the plain listing.
      let first = deleted !== undefined ? undefined : sortCandidates(await session.getChildren(dir))[0];
      if (first === undefined) {
        // The armed listing and the counter, asked together: the server answers them in order,
        // so the counter is read no earlier than the listing, in one round trip for both.
        const listing = session.getChildren(dir, again);
        const counter = this.readTerm(session, name);
        counter.catch(() => {});
        const children = sortCandidates(await listing);
        if (children.length === 0) {
          const { term, version, released } = await counter;
          this.listed(name, true);
          if (released) this.knownFree.set(name, { term, version, at: now() });
          else this.knownFree.delete(name);
          if (!stopped()) tell(null, term, released);
          return;
        }
        // Taken already. After a plain listing found none: read again (this round's children
        // watch, if it fires, is then ignored). After a deletion: watch the new holder now (the
        // children watch set here fires once more at most, and re-reads as a later round would).
        if (deleted === undefined) return again();
        first = children[0]!;
      }
      try {
        const path = `${dir}/${first}`;
        const reading = session.getData(path, again);
        // The counter, once per holder, right behind (no round trip of its own): see above.
        const counter = held?.path === path ? null : this.readTerm(session, name);
        counter?.catch(() => {});
        const { data, stat } = await reading;
        const lease = this.describe(name, await this.decodeNode(session, name, data));
        if (counter) held = { path, ...(await counter) };
        this.observe(name, path, stat.version, lease);
        this.listed(name, false);
        this.knownFree.delete(name);
        if (!stopped()) tell(lease);
      } catch (err) {
        if (isZk(err, ZK.NO_NODE)) again();
        else throw err;
      }
    });
  }

  watchStream(stream: string, listener: (head: number) => void): Unsubscribe {
    checkName('stream', stream);
    return this.rearming(async (again, stopped) => {
      const head = await this.readHead(await this.ctl(), stream, again);
      if (!stopped()) listener(head.seq);
    });
  }

  /**
   * A watch kept on: `round` reads the state and sets one-shot ZooKeeper watches that call
   * `again` when they fire; a round that fails is tried again 200 ms later, and every watch is
   * re-armed when a session is replaced. A round superseded by a later arm re-arms nothing.
   */
  private rearming(round: (again: (event?: ZkEvent) => void, stopped: () => boolean, deleted: string | undefined) => Promise<void>): Unsubscribe {
    let stopped = false;
    let armed = 0;
    const w = {
      /** `deleted`: the path of the node whose deletion fired the watch. */
      arm: (deleted?: string): void => {
        if (stopped || this.closed) return;
        const mine = ++armed;
        // Fired by a ZooKeeper watch (with its event), by a failed round's retry or by a round itself (none).
        const again = (event?: ZkEvent): void => {
          if (mine === armed) w.arm(event?.getType() === NODE_DELETED_EVENT ? event.getPath() : undefined);
        };
        round(again, () => stopped, deleted).catch(() => {
          if (!stopped) setTimeout(() => again(), 200).unref?.();
        });
      },
    };
    this.watchers.add(w);
    w.arm();
    return () => {
      stopped = true;
      this.watchers.delete(w);
    };
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.watchers.clear();
    for (const h of [...this.held.values()]) this.drop(h);
    const all = [...this.sessions.values(), ...(this.control ? [this.control] : [])];
    this.sessions.clear();
    this.control = null;
    await Promise.all(all.map((p) => p.then((s) => s.close(), () => {})));
  }
}
