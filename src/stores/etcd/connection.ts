/**
 * One etcd client as tenure uses it: raw KV, lease and watch calls with every failure turned
 * into StoreUnavailableError (safety rule 3: the outcome is unknown), a monotonic clock for the
 * send time of each lease grant and keepalive, and the key layout. Shared by the store and by
 * the Go-compatible election and mutex.
 */
import { ClosedError, InvalidArgumentError, StoreUnavailableError, TenureError, checkMs, systemClock } from '../../core/index.js';
import type { Clock } from '../../core/index.js';
import { hostPolicy, loadEtcd3 } from './driver.js';
import type { Etcd3, IKeyValue, IRequestOp, ICompare } from './driver.js';
import type * as RPC from 'etcd3';
import { KeyLayout } from './keys.js';

export interface EtcdConnectionOptions {
  /** Your own etcd3 client. tenure never closes it. */
  client?: Etcd3;
  /** Members to connect to, `host:port` or `http://host:port`, when no client is given. */
  hosts?: string | readonly string[];
  /** Prepended to every key tenure writes (default ''; keep '' to share elections with etcdctl). */
  namespace?: string;
  /** User and password for etcd's auth (`etcdctl auth enable`); tenure exchanges them for a token. Only for clients tenure creates. */
  auth?: { readonly username: string; readonly password: string };
  /**
   * Talk TLS (gRPC over HTTPS) to every member: `ca` (PEM) to verify the members (default: the
   * system's roots), `cert` and `key` (PEM) for a client certificate. `true` for TLS with the
   * defaults. Only for clients tenure creates.
   */
  tls?: boolean | { readonly ca?: Buffer; readonly cert?: Buffer; readonly key?: Buffer };
  /** A unary call with no answer after this long fails with StoreUnavailableError, ms (default 5000). Only for clients tenure creates. */
  requestTimeoutMs?: number;
  clock?: Clock;
}

/** A lease as granted: its id, the TTL etcd granted (s) and when the grant was sent (local monotonic ms). */
export interface GrantedLease {
  readonly id: string;
  readonly ttlSeconds: number;
  readonly sentAt: number;
}

export type TxnResponse = RPC.ITxnResponse;

interface KeepAliveChannel {
  readonly stream: RPC.IDuplexStream<RPC.ILeaseKeepAliveRequest, RPC.ILeaseKeepAliveResponse>;
  /** Callers waiting for an answer, per lease id, in the order their requests were written. */
  readonly waiting: Map<string, ((answer: number | Error) => void)[]>;
  closed: boolean;
  closedBy: Error | null;
}

/** A lease id in one spelling, whichever the client hands back. */
function leaseKey(id: string): string {
  try {
    return BigInt(id).toString();
  } catch {
    return id;
  }
}

/**
 * etcd measures lease TTLs in whole seconds and grants at least its minimum (1 s with a short
 * election timeout, 2 s with etcd's defaults). Rounding up keeps the store's expiry at or after
 * the holder's local deadline (safety rule 2).
 */
export function ttlSecondsFor(ttlMs: number): number {
  return Math.max(1, Math.ceil(ttlMs / 1000));
}

export class EtcdConnection {
  readonly client: Etcd3;
  readonly layout: KeyLayout;
  readonly clock: Clock;
  /** What the connection calls itself in errors: `etcd 127.0.0.1:2379,...`. */
  readonly label: string;
  private readonly ownsClient: boolean;
  private readonly requestTimeoutMs: number;
  /** The highest revision any answer carried. */
  lastRevision = 0;
  private closed = false;
  private keepAlives: Promise<KeepAliveChannel> | null = null;
  private keepAliveOpen: KeepAliveChannel | null = null;

  constructor(options: EtcdConnectionOptions) {
    const namespace = options.namespace ?? '';
    // eslint-disable-next-line no-control-regex
    if (typeof namespace !== 'string' || /[\u0000-\u001f]/.test(namespace)) {
      throw new InvalidArgumentError('namespace', 'expected a key prefix without control characters');
    }
    this.layout = new KeyLayout(namespace);
    this.clock = options.clock ?? systemClock;
    this.requestTimeoutMs = checkMs('requestTimeoutMs', options.requestTimeoutMs ?? 5000, 1, 600_000);
    if (options.client) {
      this.client = options.client;
      this.ownsClient = false;
      this.label = 'etcd';
    } else {
      const hosts = typeof options.hosts === 'string' ? options.hosts.split(',') : [...(options.hosts ?? [])];
      if (hosts.length === 0 || hosts.some((h) => h.trim() === '')) {
        throw new InvalidArgumentError('hosts', 'expected one or more etcd members such as 127.0.0.1:2379');
      }
      const tls = options.tls === true ? {} : options.tls || null;
      if (tls && (tls.cert === undefined) !== (tls.key === undefined)) {
        throw new InvalidArgumentError('tls', 'a client certificate needs both cert and key');
      }
      const auth = options.auth;
      if (auth !== undefined && (typeof auth.username !== 'string' || auth.username === '' || typeof auth.password !== 'string')) {
        throw new InvalidArgumentError('auth', 'expected { username, password } with a non-empty username');
      }
      const scheme = tls ? 'https' : 'http';
      const urls = hosts.map((h) => (/^https?:\/\//.test(h.trim()) ? h.trim() : `${scheme}://${h.trim()}`));
      const { Etcd3: Client } = loadEtcd3();
      const timeoutMs = this.requestTimeoutMs;
      this.client = new Client({
        hosts: urls,
        // The etcd3 types want a root certificate; gRPC takes none as "the system's roots".
        ...(tls && (tls.ca || tls.cert) ? { credentials: { rootCertificate: tls.ca as Buffer, ...(tls.key ? { privateKey: tls.key } : {}), ...(tls.cert ? { certChain: tls.cert } : {}) } } : {}),
        ...(auth ? { auth: { username: auth.username, password: auth.password } } : {}),
        dialTimeout: timeoutMs,
        faultHandling: { host: hostPolicy() },
        // gRPC deadlines are wall-clock instants by API; only unary calls get one (streams live on).
        defaultCallOptions: (context) => (context.isStream ? {} : { deadline: new Date(Date.now() + timeoutMs) }),
      });
      this.ownsClient = true;
      this.label = `etcd ${hosts.join(',')}`;
    }
  }

  get isClosed(): boolean {
    return this.closed;
  }

  /** Run one etcd call; anything but tenure's own errors becomes StoreUnavailableError. */
  async call<T>(what: string, fn: () => Promise<T>): Promise<T> {
    if (this.closed) throw new ClosedError(`${this.label} store`);
    try {
      const result = await fn();
      const header = (result as { header?: { revision?: string } } | undefined)?.header;
      if (header?.revision) this.lastRevision = Math.max(this.lastRevision, Number(header.revision));
      return result;
    } catch (err) {
      throw this.translate(what, err);
    }
  }

  translate(what: string, err: unknown): Error {
    if (err instanceof TenureError) return err;
    const message = err instanceof Error ? `${err.name}: ${err.message}` : String(err);
    return new StoreUnavailableError(`${this.label}: ${what} failed: ${message}`, { cause: err });
  }

  txn(what: string, compare: ICompare[], success: IRequestOp[], failure: IRequestOp[] = []): Promise<TxnResponse> {
    return this.call(what, () => this.client.kv.txn({ compare, success, failure }));
  }

  /** Every key in [key, end), in the order asked, read at one revision. */
  async range(what: string, request: RPC.IRangeRequest): Promise<{ kvs: IKeyValue[]; revision: number }> {
    const res = await this.call(what, () => this.client.kv.range(request));
    return { kvs: res.kvs, revision: Number(res.header.revision) };
  }

  async grant(ttlSeconds: number): Promise<GrantedLease> {
    const sentAt = this.clock.now();
    const res = await this.call('lease grant', () => this.client.leaseClient.leaseGrant({ TTL: ttlSeconds, ID: 0 }));
    if (res.error) throw new StoreUnavailableError(`${this.label}: lease grant failed: ${res.error}`);
    return { id: res.ID, ttlSeconds: Number(res.TTL), sentAt };
  }

  /**
   * One keepalive. Resolves to the lease's TTL in seconds as etcd reset it, or 0 when etcd no
   * longer has the lease (it expired or was revoked: etcd never revives an expired lease).
   *
   * Keepalives share one LeaseKeepAlive stream per connection (opening a stream per keepalive
   * costs more than the keepalive). etcd answers a stream's requests in order, so answers are
   * matched to callers per lease id, first in first out; a keepalive with no answer in time
   * closes the stream and fails every caller waiting on it, so a late answer can never be
   * taken for a later request's.
   */
  keepAliveOnce(id: string): Promise<number> {
    return this.call('lease keepalive', async () => {
      const channel = await this.keepAliveChannel();
      if (channel.closed) throw channel.closedBy ?? new StoreUnavailableError(`${this.label}: keepalive stream ended`);
      return new Promise<number>((resolve, reject) => {
        const key = leaseKey(id);
        let cancelTimer = (): void => {};
        const waiter = (answer: number | Error): void => {
          cancelTimer();
          if (answer instanceof Error) reject(answer);
          else resolve(answer);
        };
        const queue = channel.waiting.get(key) ?? [];
        channel.waiting.set(key, queue);
        queue.push(waiter);
        cancelTimer = this.clock.setTimer(this.requestTimeoutMs, () =>
          this.closeKeepAlives(channel, new StoreUnavailableError(`${this.label}: no keepalive answer within ${this.requestTimeoutMs} ms`)),
        );
        channel.stream.write({ ID: id });
      });
    });
  }

  /**
   * Open the keepalive stream ahead of need (a waiting candidate does, so that its first
   * keepalive, the one that claims a lease handed over to it, finds the stream open).
   */
  prepareKeepAlives(): void {
    if (this.closed) return;
    void this.keepAliveChannel().catch(() => {});
  }

  private keepAliveChannel(): Promise<KeepAliveChannel> {
    if (this.keepAlives) return this.keepAlives;
    let opening: Promise<KeepAliveChannel> | null = null;
    opening = (async (): Promise<KeepAliveChannel> => {
      const stream = await this.client.leaseClient.leaseKeepAlive();
      const channel: KeepAliveChannel = { stream, waiting: new Map(), closed: false, closedBy: null };
      stream.on('data', (res: RPC.ILeaseKeepAliveResponse) => {
        if (res.header?.revision) this.lastRevision = Math.max(this.lastRevision, Number(res.header.revision));
        const key = leaseKey(String(res.ID));
        const queue = channel.waiting.get(key);
        const waiter = queue?.shift();
        if (queue && queue.length === 0) channel.waiting.delete(key);
        waiter?.(Math.max(0, Number(res.TTL)));
      });
      stream.on('error', (err: Error) => this.closeKeepAlives(channel, this.translate('lease keepalive', err)));
      stream.on('end', () => this.closeKeepAlives(channel, new StoreUnavailableError(`${this.label}: keepalive stream ended`)));
      if (this.keepAlives === opening) this.keepAliveOpen = channel;
      if (this.closed) this.closeKeepAlives(channel, new ClosedError(`${this.label} store`));
      return channel;
    })();
    const mine = opening;
    this.keepAlives = mine;
    mine.catch(() => {
      if (this.keepAlives === mine) this.keepAlives = null;
    });
    return mine;
  }

  /** Close a keepalive stream and fail everyone waiting on it; the next keepalive opens another. */
  private closeKeepAlives(channel: KeepAliveChannel, reason: Error): void {
    if (channel.closed) return;
    channel.closed = true;
    channel.closedBy = reason;
    if (this.keepAliveOpen === channel) {
      this.keepAliveOpen = null;
      this.keepAlives = null;
    }
    // Half-close, then cancel: a cancel() while the stream is still writable makes it emit
    // CANCELLED, which the etcd3 client takes for a failed host and answers by closing every
    // channel to that host (watches included).
    try {
      channel.stream.end();
      channel.stream.cancel();
    } catch {
      // already closed
    }
    const waiting = [...channel.waiting.values()].flat();
    channel.waiting.clear();
    for (const w of waiting) w(reason);
  }

  /** Revoke a lease (deleting its keys); a lease etcd no longer has is already gone. */
  async revoke(id: string): Promise<void> {
    try {
      await this.call('lease revoke', () => this.client.leaseClient.leaseRevoke({ ID: id }));
    } catch (err) {
      if (isLeaseGone(err)) return;
      throw err;
    }
  }

  /** The lease's remaining and granted TTL in seconds, or null when etcd no longer has it. */
  async timeToLive(id: string): Promise<{ ttlSeconds: number; grantedSeconds: number } | null> {
    try {
      const res = await this.call('lease timetolive', () => this.client.leaseClient.leaseTimeToLive({ ID: id, keys: false }));
      const ttl = Number(res.TTL);
      if (ttl < 0) return null;
      return { ttlSeconds: ttl, grantedSeconds: Number(res.grantedTTL) };
    } catch (err) {
      if (isLeaseGone(err)) return null;
      throw err;
    }
  }

  close(): void {
    if (this.closed) return;
    this.closed = true;
    void this.keepAlives?.then((c) => this.closeKeepAlives(c, new ClosedError(`${this.label} store`)), () => {});
    if (this.ownsClient) this.client.close();
  }
}

function isLeaseGone(err: unknown): boolean {
  const cause = err instanceof StoreUnavailableError ? err.cause : err;
  return cause instanceof Error && (cause.name === 'EtcdLeaseInvalidError' || /lease not found/i.test(cause.message));
}

export function rev(kv: IKeyValue): number {
  return Number(kv.create_revision);
}
