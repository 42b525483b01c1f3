/**
 * `redis://` — one Redis (standalone, Sentinel-managed or Cluster) through ioredis.
 *
 * Every operation is one Lua script (see scripts.ts): atomic on the server, one round trip, expiry
 * by the server's own clock. Terms and fence high-water marks live in keys without a TTL, so they
 * survive the lease's expiry and release; they survive a restart or a failover only as far as
 * Redis persistence and replication keep them (docs/redis.md says what can be lost and why
 * fencing still protects the data).
 *
 * Push: takeover and release are published on a per-lease channel; `watch()` subscribes on a
 * duplicate connection, so a waiting candidate is woken at once instead of polling. A watched
 * lease that simply runs out is noticed by a local timer at its reported expiry.
 */
import {
  ClosedError,
  InvalidArgumentError,
  StaleTermError,
  StoreUnavailableError,
  TenureError,
  checkMs,
  checkName,
  checkOwner,
  checkPayload,
  checkReadOptions,
  checkTerm,
  checkToken,
  checkTtl,
  decodeMeta,
  encodeMeta,
} from '../../core/index.js';
import type {
  AcquireResult,
  FencingToken,
  Lease,
  LeaseMeta,
  ReadStreamOptions,
  RenewManyItem,
  RenewResult,
  Store,
  StreamEntry,
  Unsubscribe,
  WatchListener,
} from '../../core/index.js';
import { LuaScript, addressOf, loadIoredis, ownClientOptions } from './driver.js';
import type { RedisClient } from './driver.js';
import { acquireScript, appendScript, listScript, readScript, releaseScript, renewManyScript, renewScript } from './scripts.js';

export interface RedisStoreOptions {
  /** Your own ioredis client (plain, Sentinel or Cluster). It is not closed by `close()`. */
  client?: RedisClient;
  /** Or a URL (`redis://[user:pass@]host:port[/db]`, `rediss://…`); the store makes and owns the client. */
  url?: string;
  /**
   * Prefix of every key and channel of this store (default `{tenure}:`). Stores with different
   * prefixes on one Redis are independent. With a Cluster client it must contain a `{hash tag}`.
   */
  keyPrefix?: string;
  /** A call with no reply after this long fails with StoreUnavailableError (outcome unknown), ms. Default 5000. */
  commandTimeoutMs?: number;
}

export const DEFAULT_KEY_PREFIX = '{tenure}:';

/** A renewMany batch holds at most this many leases (one script, one round trip). */
const RENEW_MANY_MAX = 10_000;

/** list() looks at no more than this many lease names per call. */
const LIST_MAX_NAMES = 100_000;

interface Watched {
  readonly channel: string;
  readonly listeners: Set<WatchListener>;
  /** What listeners were last told (owner and term), or null for "nobody holds it". */
  last: { owner: string; term: number } | null;
  expiryTimer: NodeJS.Timeout | null;
}

export class RedisStore implements Store {
  readonly kind = 'redis';
  /** Where the store connects, for messages: `host:port`, a Sentinel group or Cluster nodes. */
  readonly address: string;
  readonly keyPrefix: string;
  private readonly client: RedisClient;
  private readonly ownsClient: boolean;
  private readonly commandTimeoutMs: number;
  /** ioredis prefixes KEYS itself when the client has `keyPrefix`; keys built inside a script must add it too. */
  private readonly clientKeyPrefix: string;
  private subscriber: RedisClient | null = null;
  private readonly watched = new Map<string, Watched>();
  private readonly channels = new Map<string, string>();
  /** A SUBSCRIBE in flight: writes wait for it so a watcher never misses a change made after watch() returned. */
  private subscribing: Promise<void> | null = null;
  private closed = false;

  constructor(options: RedisStoreOptions) {
    const prefix = options.keyPrefix ?? DEFAULT_KEY_PREFIX;
    if (typeof prefix !== 'string' || prefix.length > 100) throw new InvalidArgumentError('keyPrefix', 'expected a string of at most 100 characters');
    this.keyPrefix = prefix;
    this.commandTimeoutMs = checkMs('commandTimeoutMs', options.commandTimeoutMs ?? 5000, 1, 600_000);
    if (options.client) {
      this.client = options.client;
      this.ownsClient = false;
    } else if (typeof options.url === 'string' && options.url !== '') {
      const Redis = loadIoredis('redis');
      this.client = new Redis(options.url, ownClientOptions);
      this.ownsClient = true;
    } else {
      throw new InvalidArgumentError('client', 'expected an ioredis client or a url such as redis://127.0.0.1:6379');
    }
    this.address = addressOf(this.client);
    if (this.ownsClient) this.client.on('error', () => {}); // surfaced per call as StoreUnavailableError
    if (this.client.isCluster && !/\{[^{}]+\}/.test(prefix)) {
      throw new InvalidArgumentError('keyPrefix', `must contain a {hash tag} with a Cluster client so a store's keys share one slot, got '${prefix}'`);
    }
    const opts = this.client.options as { keyPrefix?: string; redisOptions?: { keyPrefix?: string } };
    this.clientKeyPrefix = opts.keyPrefix ?? opts.redisOptions?.keyPrefix ?? '';
  }

  async acquire(name: string, owner: string, ttlMs: number, meta?: LeaseMeta): Promise<AcquireResult> {
    checkName('name', name);
    checkOwner('owner', owner);
    checkTtl('ttlMs', ttlMs);
    const metaText = encodeMeta('meta', meta);
    const reply = await this.run(
      'acquire',
      acquireScript,
      [this.key('lease', name), this.key('term', name), this.key('names')],
      [name, owner, ttlMs, metaText, this.key('events', name)],
    );
    const lease = toLease(name, reply);
    if (lease === null) throw this.badReply('acquire', reply);
    return { acquired: reply[0] === 1, lease };
  }

  async renew(name: string, owner: string, term: number, ttlMs: number): Promise<RenewResult> {
    checkName('name', name);
    checkOwner('owner', owner);
    checkTerm('term', term);
    checkTtl('ttlMs', ttlMs);
    const reply = await this.run('renew', renewScript, [this.key('lease', name)], [owner, term, ttlMs]);
    return { renewed: reply[0] === 1, lease: toLease(name, reply) };
  }

  /** Renew a batch of leases held by `owner` in one script (one round trip), reporting each in order. */
  async renewMany(owner: string, leases: readonly RenewManyItem[], ttlMs: number): Promise<RenewResult[]> {
    checkOwner('owner', owner);
    checkTtl('ttlMs', ttlMs);
    checkRenewItems(leases);
    if (leases.length === 0) return [];
    const reply = await this.run(
      'renewMany',
      renewManyScript,
      leases.map((l) => this.key('lease', l.name)),
      [owner, ttlMs, ...leases.map((l) => l.term)],
    );
    if (reply.length !== leases.length) throw this.badReply('renewMany', reply);
    return leases.map((l, i) => {
      const one = reply[i];
      if (!Array.isArray(one)) throw this.badReply('renewMany', reply);
      return { renewed: one[0] === 1, lease: toLease(l.name, one as unknown[]) };
    });
  }

  async release(name: string, owner: string, term: number): Promise<boolean> {
    checkName('name', name);
    checkOwner('owner', owner);
    checkTerm('term', term);
    const reply = await this.call('release', () => releaseScript.run(this.client, [this.key('lease', name)], [owner, term, this.key('events', name)]));
    return reply === 1;
  }

  async read(name: string): Promise<Lease | null> {
    checkName('name', name);
    return toLease(name, await this.run('read', readScript, [this.key('lease', name)], []));
  }

  async list(prefix = ''): Promise<Lease[]> {
    if (typeof prefix !== 'string') throw new InvalidArgumentError('prefix', 'expected a string');
    // Byte 0xff never occurs in UTF-8, so `[prefix` .. `[prefix\xff` is exactly the names that start with prefix.
    const min = prefix === '' ? '-' : Buffer.from(`[${prefix}`);
    const max = prefix === '' ? '+' : Buffer.concat([Buffer.from(`[${prefix}`), Buffer.from([0xff])]);
    const reply = await this.call('list', () =>
      listScript.run(this.client, [this.key('names')], [min, max, this.clientKeyPrefix + this.key('lease', ''), LIST_MAX_NAMES]),
    );
    if (!Array.isArray(reply) || reply.length % 6 !== 0) throw this.badReply('list', reply);
    const out: Lease[] = [];
    for (let i = 0; i < reply.length; i += 6) {
      const name = String(reply[i]);
      const lease = toLease(name, [1, ...reply.slice(i + 1, i + 6)]);
      if (lease) out.push(lease);
    }
    return out.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  }

  async appendFenced(token: FencingToken, stream: string, payload: string): Promise<number> {
    checkToken('token', token);
    checkName('stream', stream);
    checkPayload('payload', payload);
    const reply = await this.call('appendFenced', () =>
      appendScript.run(this.client, [this.key('fence', token.lease), this.key('term', token.lease), this.key('stream', stream)], [token.term, token.lease, payload]),
    );
    if (!Array.isArray(reply) || typeof reply[1] !== 'number') throw this.badReply('appendFenced', reply);
    const [verdict, n] = reply as [string, number];
    if (verdict === 'stale') throw new StaleTermError(token.lease, token.term, n);
    if (verdict === 'unissued') {
      throw new InvalidArgumentError('token.term', `term ${token.term} was never issued for lease ${token.lease} (latest ${n})`);
    }
    return n;
  }

  async readStream(stream: string, options?: ReadStreamOptions): Promise<StreamEntry[]> {
    checkName('stream', stream);
    const { after, limit } = checkReadOptions(options);
    // Entry ids are `SEQ-0`, so the range starting at id `after+1` is exactly "seq > after".
    const rows = await this.call('readStream', () => this.client.xrange(this.key('stream', stream), `${after + 1}`, '+', 'COUNT', limit));
    return rows.map(([id, fields]) => {
      const f = new Map<string, string>();
      for (let i = 0; i + 1 < fields.length; i += 2) f.set(fields[i]!, fields[i + 1]!);
      return { stream, seq: Number(id.split('-')[0]), lease: f.get('lease') ?? '', term: Number(f.get('term')), payload: f.get('payload') ?? '' };
    });
  }

  watch(name: string, listener: WatchListener): Unsubscribe {
    checkName('name', name);
    if (this.closed) throw new ClosedError('redis store');
    let w = this.watched.get(name);
    if (!w) {
      w = { channel: this.key('events', name), listeners: new Set(), last: null, expiryTimer: null };
      this.watched.set(name, w);
      this.channels.set(w.channel, name);
      this.subscribe(w);
    }
    w.listeners.add(listener);
    const entry = w;
    return () => {
      entry.listeners.delete(listener);
      if (entry.listeners.size > 0 || this.watched.get(name) !== entry) return;
      this.watched.delete(name);
      this.channels.delete(entry.channel);
      if (entry.expiryTimer) clearTimeout(entry.expiryTimer);
      if (!this.closed) this.subscriber?.unsubscribe(entry.channel).catch(() => {});
    };
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    for (const w of this.watched.values()) if (w.expiryTimer) clearTimeout(w.expiryTimer);
    this.watched.clear();
    this.channels.clear();
    this.subscriber?.disconnect();
    this.subscriber = null;
    if (this.ownsClient) this.client.disconnect();
  }

  // ---- internals ------------------------------------------------------------------------

  private key(kind: 'lease' | 'term' | 'fence' | 'stream' | 'names' | 'events', name?: string): string {
    return name === undefined ? `${this.keyPrefix}${kind}` : `${this.keyPrefix}${kind}:${name}`;
  }

  private async run(op: string, script: LuaScript, keys: string[], args: (string | number)[], waitForSubscribe = true): Promise<unknown[]> {
    const reply = await this.call(op, () => script.run(this.client, keys, args), waitForSubscribe);
    if (!Array.isArray(reply)) throw this.badReply(op, reply);
    return reply as unknown[];
  }

  /**
   * One call to Redis, bounded by the command timeout. Driver and connection errors become
   * StoreUnavailableError naming the server: the outcome is unknown (safety rule 3).
   */
  private async call<T>(op: string, fn: () => Promise<T>, waitForSubscribe = true): Promise<T> {
    if (this.closed) throw new ClosedError('redis store');
    if (waitForSubscribe && this.subscribing) await this.subscribing;
    let timer: NodeJS.Timeout | undefined;
    try {
      return await Promise.race([
        fn(),
        new Promise<never>((_, reject) => {
          timer = setTimeout(
            () => reject(new StoreUnavailableError(`redis store ${this.address}: no answer to ${op} within ${this.commandTimeoutMs} ms`)),
            this.commandTimeoutMs,
          );
        }),
      ]);
    } catch (err) {
      if (err instanceof TenureError) throw err;
      if (this.closed) throw new ClosedError('redis store');
      const message = err instanceof Error ? err.message : String(err);
      throw new StoreUnavailableError(`redis store ${this.address}: ${op} failed: ${message}`, { cause: err });
    } finally {
      clearTimeout(timer);
    }
  }

  private badReply(op: string, reply: unknown): StoreUnavailableError {
    return new StoreUnavailableError(`redis store ${this.address}: unexpected reply to ${op}: ${JSON.stringify(reply)}`);
  }

  private ensureSubscriber(): RedisClient {
    if (this.subscriber) return this.subscriber;
    const sub = this.client.duplicate();
    sub.on('error', () => {});
    sub.on('message', (channel: string, message: string) => this.onMessage(channel, message));
    let connectedBefore = false;
    sub.on('ready', () => {
      // After a reconnect ioredis resubscribes, but what was published meanwhile is lost: re-read.
      if (connectedBefore) for (const name of this.watched.keys()) void this.recheck(name);
      connectedBefore = true;
    });
    this.subscriber = sub;
    return sub;
  }

  private subscribe(w: Watched): void {
    const sub = this.ensureSubscriber();
    const name = this.channels.get(w.channel) ?? '';
    // Subscribe, then read the lease as the baseline; writes through this store wait for both, so
    // every change they make arrives as a message after the baseline. Bounded by the command timeout.
    const ready = sub
      .subscribe(w.channel)
      .then(() => this.recheck(name, true))
      .catch(() => {}); // a failed SUBSCRIBE is retried by ioredis on reconnect; callers still get their replies
    const bounded = Promise.race([ready, new Promise<void>((r) => setTimeout(r, this.commandTimeoutMs).unref())]);
    const barrier: Promise<void> = (this.subscribing ? Promise.all([this.subscribing, bounded]) : bounded).then(() => {
      if (this.subscribing === barrier) this.subscribing = null;
    });
    this.subscribing = barrier;
  }

  private onMessage(channel: string, message: string): void {
    const name = this.channels.get(channel);
    if (name === undefined) return;
    this.deliver(name, message === '' ? null : parseLeaseMessage(name, message));
  }

  /** Read the lease and deliver it if it differs from what watchers were last told. */
  private async recheck(name: string, baselineOnly = false): Promise<void> {
    const w = this.watched.get(name);
    if (!w || this.closed) return;
    let lease: Lease | null;
    try {
      lease = toLease(name, await this.run('read', readScript, [this.key('lease', name)], [], false));
    } catch {
      return; // the next message or expiry check will try again
    }
    if (baselineOnly) {
      if (w.last === null && lease !== null) {
        w.last = { owner: lease.owner, term: lease.term };
        this.armExpiry(name, w, lease.remainingMs);
      }
      return;
    }
    this.deliver(name, lease);
  }

  private deliver(name: string, lease: Lease | null): void {
    const w = this.watched.get(name);
    if (!w) return;
    const before = w.last;
    if (before === null && lease === null) return;
    if (before !== null && lease !== null && before.owner === lease.owner && before.term === lease.term) {
      this.armExpiry(name, w, lease.remainingMs); // a renewal: only the expiry moved
      return;
    }
    w.last = lease ? { owner: lease.owner, term: lease.term } : null;
    if (lease) this.armExpiry(name, w, lease.remainingMs);
    else if (w.expiryTimer) clearTimeout(w.expiryTimer);
    for (const l of [...w.listeners]) l(lease);
  }

  private armExpiry(name: string, w: Watched, remainingMs: number): void {
    if (w.expiryTimer) clearTimeout(w.expiryTimer);
    w.expiryTimer = setTimeout(() => {
      w.expiryTimer = null;
      void this.recheck(name);
    }, Math.max(1, remainingMs) + 2);
    w.expiryTimer.unref();
  }
}

/** A renewMany batch: at most RENEW_MANY_MAX distinct valid names with valid terms. */
function checkRenewItems(leases: readonly RenewManyItem[]): void {
  if (!Array.isArray(leases)) throw new InvalidArgumentError('leases', 'expected an array of { name, term }');
  if (leases.length > RENEW_MANY_MAX) throw new InvalidArgumentError('leases', `at most ${RENEW_MANY_MAX} per call, got ${leases.length}`);
  const seen = new Set<string>();
  leases.forEach((l, i) => {
    checkName(`leases[${i}].name`, l?.name);
    checkTerm(`leases[${i}].term`, l?.term);
    if (seen.has(l.name)) throw new InvalidArgumentError(`leases[${i}].name`, `duplicate lease name '${l.name}'`);
    seen.add(l.name);
  });
}

/** A lease from a script reply {status, term, owner, ttl, pttl, meta}; null when the reply names no lease. */
function toLease(name: string, reply: unknown[]): Lease | null {
  if (reply.length < 6) return null;
  const [, term, owner, ttl, pttl, meta] = reply;
  return {
    name,
    owner: String(owner),
    term: Number(term),
    meta: decodeMeta(typeof meta === 'string' ? meta : null),
    ttlMs: Number(ttl),
    remainingMs: Math.max(0, Number(pttl)),
  };
}

/** A takeover message: owner, term, ttl and meta on lines. The remaining time is the full TTL as published. */
function parseLeaseMessage(name: string, message: string): Lease | null {
  const a = message.indexOf('\n');
  const b = message.indexOf('\n', a + 1);
  const c = message.indexOf('\n', b + 1);
  if (a < 0 || b < 0 || c < 0) return null;
  const ttlMs = Number(message.slice(b + 1, c));
  return {
    name,
    owner: message.slice(0, a),
    term: Number(message.slice(a + 1, b)),
    ttlMs,
    remainingMs: ttlMs,
    meta: decodeMeta(message.slice(c + 1)),
  };
}
