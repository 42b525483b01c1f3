/**
 * One ZooKeeper session: a `node-zookeeper-client` client, its requests as promises with a time
 * limit, and its end (closed by us, or expired by the server).
 *
 * A request that does not answer in time rejects with StoreUnavailableError (safety rule 3: it may
 * still apply). ZooKeeper errors come back as `ZkError` with the server's code, so the store can
 * tell a lost race (BadVersion, NodeExists, NoNode) from an unreachable server.
 */
import { StoreUnavailableError } from '../../core/index.js';
import { exactVersion, guardConnection, loadZookeeper } from './driver.js';
import type { Client, Stat, ZkEvent } from './driver.js';

/** ZooKeeper's error codes that the store handles (the rest become StoreUnavailableError). */
export const ZK = {
  CONNECTION_LOSS: -4,
  OPERATION_TIMEOUT: -7,
  NO_NODE: -101,
  BAD_VERSION: -103,
  NODE_EXISTS: -110,
  NOT_EMPTY: -111,
  SESSION_EXPIRED: -112,
  SESSION_MOVED: -118,
} as const;

/** A ZooKeeper answer that is an error code: the request was decided (not a "maybe"). */
export class ZkError extends Error {
  constructor(
    readonly code: number,
    readonly zkName: string,
    readonly path: string,
  ) {
    super(`ZooKeeper ${zkName} (${code})${path ? ` at ${path}` : ''}`);
    this.name = 'ZkError';
  }
}

/** One operation of a multi (`transaction`), as the store builds it. */
export type MultiOp =
  | { readonly op: 'create'; readonly path: string; readonly data: Buffer; readonly mode: 'persistent' | 'ephemeral-sequential' }
  | { readonly op: 'set'; readonly path: string; readonly data: Buffer; readonly version: number }
  | { readonly op: 'check'; readonly path: string; readonly version: number }
  | { readonly op: 'remove'; readonly path: string; readonly version: number };

export interface SessionOptions {
  /** `host:port,host:port` (no chroot: the store prefixes its paths itself). */
  readonly hosts: string;
  /** Asked session timeout, ms; the server clamps it to [2, 20] ticks (or its min/maxSessionTimeout). */
  readonly sessionTimeoutMs: number;
  /** Time limit of one request, and of the first connect, ms. */
  readonly requestTimeoutMs: number;
  /** `user:password` for the digest scheme, if any. */
  readonly digest?: string;
}

/** The 8-byte big-endian long of a Stat (ctime, mtime, ephemeralOwner) as a number. */
export function statLong(buf: Buffer): number {
  return Number(buf.readBigInt64BE(0));
}

export class ZkSession {
  readonly client: Client;
  /** The session timeout the server granted, ms (known once connected). */
  negotiatedMs = 0;
  /** The server expired the session, or we closed it: every ephemeral node it made is gone. */
  ended = false;
  private readonly endListeners = new Set<() => void>();
  private lostTimer: NodeJS.Timeout | null = null;

  private constructor(
    client: Client,
    private readonly options: SessionOptions,
  ) {
    this.client = client;
    // An expired session never comes back: stop the client's reconnecting, the store opens a new one.
    client.on('expired', () => {
      client.close();
      this.end();
    });
    // Cut off for a whole session timeout: the server has expired the session by now (or will as
    // soon as it hears of it), so it is over here too, as Curator's LOST. This also ends a client
    // that does not get back to a restarted server (node-zookeeper-client 1.1 can keep retrying a
    // restarted standalone server without ever re-establishing its session).
    client.on('disconnected', () => {
      if (this.lostTimer || this.ended) return;
      this.lostTimer = setTimeout(() => this.close(), this.negotiatedMs || options.sessionTimeoutMs);
      this.lostTimer.unref?.();
    });
    client.on('connected', () => {
      if (this.lostTimer) clearTimeout(this.lostTimer);
      this.lostTimer = null;
    });
  }

  /** Connect and wait for the session, at most `requestTimeoutMs`. */
  static async open(options: SessionOptions): Promise<ZkSession> {
    const zk = loadZookeeper();
    const client = zk.createClient(options.hosts, { sessionTimeout: options.sessionTimeoutMs, spinDelay: 100, retries: 0 });
    guardConnection(client);
    const session = new ZkSession(client, options);
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => {
        client.close();
        reject(new StoreUnavailableError(`zookeeper: no session with ${options.hosts} within ${options.requestTimeoutMs} ms`));
      }, options.requestTimeoutMs);
      client.once('connected', () => {
        clearTimeout(timer);
        resolve();
      });
      client.connect();
    });
    if (options.digest !== undefined) client.addAuthInfo('digest', Buffer.from(options.digest));
    session.negotiatedMs = client.getSessionTimeout();
    return session;
  }

  /** Called once when the session ends (expired by the server or closed). */
  onEnd(listener: () => void): () => void {
    if (this.ended) {
      queueMicrotask(listener);
      return () => {};
    }
    this.endListeners.add(listener);
    return () => this.endListeners.delete(listener);
  }

  close(): void {
    if (!this.ended) this.client.close();
    this.end();
  }

  private end(): void {
    if (this.lostTimer) clearTimeout(this.lostTimer);
    this.lostTimer = null;
    if (this.ended) return;
    this.ended = true;
    for (const l of [...this.endListeners]) l();
    this.endListeners.clear();
  }

  /** Run one callback-style request with the time limit. */
  call<T>(what: string, path: string, run: (done: (err: unknown, value?: T) => void) => void): Promise<T> {
    if (this.ended) return Promise.reject(new StoreUnavailableError(`zookeeper: ${what} ${path}: the session has ended`));
    return new Promise<T>((resolve, reject) => {
      let settled = false;
      const timer = setTimeout(() => {
        settled = true;
        reject(new StoreUnavailableError(`zookeeper: ${what} ${path} did not answer within ${this.options.requestTimeoutMs} ms`));
      }, this.options.requestTimeoutMs);
      run((err, value) => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        if (err) reject(toError(err, what, path));
        else resolve(value as T);
      });
    });
  }

  getData(path: string, watcher?: (e: ZkEvent) => void): Promise<{ data: Buffer; stat: Stat }> {
    return this.call('getData', path, (done) => {
      const cb = (err: unknown, data: Buffer, stat: Stat): void => done(err, { data: data ?? Buffer.alloc(0), stat });
      if (watcher) this.client.getData(path, watcher, cb);
      else this.client.getData(path, cb);
    });
  }

  getChildren(path: string, watcher?: (e: ZkEvent) => void): Promise<string[]> {
    return this.call('getChildren', path, (done) => {
      const cb = (err: unknown, children: string[]): void => done(err, children);
      if (watcher) this.client.getChildren(path, watcher, cb);
      else this.client.getChildren(path, cb);
    });
  }

  exists(path: string, watcher?: (e: ZkEvent) => void): Promise<Stat | null> {
    return this.call('exists', path, (done) => {
      const cb = (err: unknown, stat: Stat): void => done(err, stat ?? null);
      if (watcher) this.client.exists(path, watcher, cb);
      else this.client.exists(path, cb);
    });
  }

  setData(path: string, data: Buffer, version: number): Promise<Stat> {
    return this.call('setData', path, (done) => this.client.setData(path, data, version, (err, stat) => done(err, stat)));
  }

  remove(path: string, version: number): Promise<void> {
    return this.call('remove', path, (done) => this.client.remove(path, version, (err) => done(err)));
  }

  /** Create the persistent node `path` and its parents; no error when it exists. */
  async ensure(path: string): Promise<void> {
    await this.call<string>('mkdirp', path, (done) => this.client.mkdirp(path, (err, p) => done(err, p)));
  }

  /** An atomic multi; resolves with the created paths (by op index), rejects with the first failing op's ZkError. */
  multi(ops: readonly MultiOp[]): Promise<(string | null)[]> {
    const zk = loadZookeeper();
    const tx = this.client.transaction();
    for (const o of ops) {
      if (o.op === 'create') {
        tx.create(o.path, o.data, o.mode === 'persistent' ? zk.CreateMode.PERSISTENT : zk.CreateMode.EPHEMERAL_SEQUENTIAL);
        continue;
      }
      if (o.op === 'set') tx.setData(o.path, o.data, o.version);
      else if (o.op === 'check') tx.check(o.path, o.version);
      else tx.remove(o.path, o.version);
      exactVersion(tx, o.version); // the driver sends version 0 as -1 (any version)
    }
    return this.call('multi', ops[0]?.path ?? '', (done) =>
      tx.commit((err, results: unknown) => {
        if (err) done(err);
        else done(null, (results as { path?: string }[]).map((r) => r.path ?? null));
      }),
    );
  }
}

function toError(err: unknown, what: string, path: string): Error {
  const e = err as { getCode?: () => number; getName?: () => string; message?: string };
  if (typeof e.getCode === 'function') {
    const code = e.getCode();
    if (code === ZK.CONNECTION_LOSS || code === ZK.OPERATION_TIMEOUT || code === ZK.SESSION_EXPIRED || code === ZK.SESSION_MOVED) {
      return new StoreUnavailableError(`zookeeper: ${what} ${path}: ${e.getName?.() ?? code}`, { cause: err });
    }
    return new ZkError(code, e.getName?.() ?? String(code), path);
  }
  return new StoreUnavailableError(`zookeeper: ${what} ${path}: ${e.message ?? String(err)}`, { cause: err });
}

/** True when `err` is the ZooKeeper error `code`. */
export function isZk(err: unknown, code: number): boolean {
  return err instanceof ZkError && err.code === code;
}
