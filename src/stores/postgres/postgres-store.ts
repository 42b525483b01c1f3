/**
 * `postgres://…` — leases, fences and streams in PostgreSQL, through the user's `pg`.
 *
 * - Expiry is decided by the server's clock (`now()`); the server reports the remaining time
 *   (safety rule 1). The client's wall clock is never sent or compared.
 * - acquire, renew, release and renewMany are each ONE statement (its own short transaction), the
 *   term bumped inside it (rules 4, 6). appendFenced is one statement under a term the fence
 *   already holds (the usual case) and a second one only for the first append of a new term or a
 *   refusal; either way the fence is checked, and raised, in the same statement as the write it
 *   guards (rule 5).
 * - The schema is created on first use under `pg_advisory_xact_lock`, with a version row.
 * - Push: a trigger NOTIFYs on every change of holder or term, the new state in the payload; one
 *   dedicated connection LISTENs while anything is watched, and reconnects by itself when lost.
 * - Stream push: a statement trigger NOTIFYs each append's stream and head at commit; the same
 *   LISTEN connection tells `watchStream` listeners, and tells them the current head after every
 *   (re)connect. Entries carry `appended_at` by the server's `clock_timestamp()`.
 * - Hand-over: a candidate that waits on push (its acquire lost while this store watches the name)
 *   keeps a reservation, refreshed by those same acquires; the holder's release gives the lease to
 *   the freshest waiter in its own statement (term + 1, the reservation's expiry), and the waiter
 *   claims it with no round trip when the NOTIFY names it (see `claimHandover`).
 * - Statements are named prepared statements (planned once per connection) unless turned off.
 * - Any driver failure, and any call that takes longer than `timeoutMs`, rejects with
 *   StoreUnavailableError naming host:port: the outcome is unknown (rule 3).
 */
import {
  ClosedError,
  checkPurgePrefix,
  InvalidArgumentError,
  StaleTermError,
  StoreDataError,
  StoreUnavailableError,
  TenureError,
  VersionConflictError,
  checkAppendOptions,
  checkMs,
  checkName,
  checkOwner,
  checkPayload,
  checkReadOptions,
  checkRenewItems,
  checkTerm,
  checkToken,
  checkTtl,
  decodeMeta,
  decodeStreamEntry,
  decodeTerm,
  termExhausted,
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
  RenewManyItem,
  RenewResult,
  Store,
  StreamEntry,
  StreamHead,
  Unsubscribe,
  WatchListener,
} from '../../core/index.js';
import { PooledCalls } from '../pooled-calls.js';
import { loadPg } from './driver.js';
import type { PgNotification, PgPool, PgPoolClient, PgQueryResult } from './driver.js';
import { SCHEMA_VERSION, buildSql, checkPrefix } from './sql.js';
import type { PgSql } from './sql.js';

export interface PostgresStoreOptions {
  /** `postgres://user:pass@host:port/db?sslmode=…` — a pool is made from it (and closed by close()). */
  url?: string;
  /** Or the user's own `pg.Pool` (left open by close()). */
  pool?: PgPool;
  /** Extra `pg.Pool` config when `url` is given: `ssl`, `password`, `max`, … passed through as is. */
  poolConfig?: Record<string, unknown>;
  /** Table name prefix, an SQL identifier (default `tenure_`). */
  tablePrefix?: string;
  /** A call with no answer after this long rejects with StoreUnavailableError (outcome unknown) and its connection is dropped, ms (default 5000). */
  timeoutMs?: number;
  /** Delay before the LISTEN connection is re-opened after a loss, ms (default 250, doubling to 5 s). */
  reconnectMs?: number;
  /**
   * Send the store's statements as named prepared statements, parsed and planned once per
   * connection (default true). Turn off behind a pooler that cannot keep prepared statements
   * (PgBouncer in transaction mode before 1.21).
   */
  preparedStatements?: boolean;
  /**
   * Hand-over on release (default true): this store's releases hand the lease to a candidate
   * that waits on push, and its own waiting candidates keep a reservation so that they can be
   * handed one (false: neither). A graceful handoff is then one statement, and the waiter leads
   * without another round trip. A waiting candidate's acquires (about one per TTL) refresh its
   * reservation. A candidate that dies while waiting can be handed a lease that then lapses up to
   * 2 × TTL after its last acquire rather than 1 × TTL; a release prefers the freshest waiter.
   */
  handOver?: boolean;
}

/**
 * A waiting candidate's reservation (see `handOver`) lasts its TTL plus this factor of it past
 * the acquire that refreshed it: a candidate acquires about once per TTL while it waits.
 */
const RESERVE_EXTRA_TTLS = 1;
/** A hand-over is claimed without a round trip only with at least the TTL and this much left (else the claim is an acquire). */
const CLAIM_SLACK_MS = 50;
/** Tickets remembered per reservation (a release may read a refresh older than the last). */
const TICKETS_KEPT = 4;

const STATEMENTS = ['acquire', 'renew', 'renewMany', 'release', 'leave', 'read', 'readAny', 'list', 'appendFast', 'append', 'highest', 'streamLease', 'streamHead', 'readStream', 'readLast'] as const;
type StatementKey = (typeof STATEMENTS)[number];

/** A reservation this store keeps for a waiting candidate: what it asked for, and when each refresh was sent. */
interface Reservation {
  readonly ttlMs: number;
  readonly metaText: string;
  readonly extraMs: number;
  /** Ticket -> the store's clock (performance.now()) when the acquire that got it was sent. */
  readonly sentAt: Map<string, number>;
}

/** A NOTIFY (or a release through this object) that handed `name` over to `owner`. */
interface HandedOver {
  readonly owner: string;
  readonly term: number;
  readonly ticket: string;
}

/** What a watcher was last told: the term, and the owner while live. Terms only grow. */
interface WatchState {
  readonly term: number;
  readonly owner: string | null;
}

interface Watched {
  readonly listeners: Set<WatchListener>;
  last: WatchState;
}

const LISTEN_STOPPED = Symbol('stopped');

/** A stream watched through `watchStream`: its listeners and the highest head they were told. */
interface WatchedStream {
  readonly listeners: Set<(head: number) => void>;
  last: number;
}

export class PostgresStore implements Store {
  readonly kind = 'postgres';
  /** host:port, as named in error messages. */
  readonly endpoint: string;
  readonly tablePrefix: string;
  private readonly pool: PgPool;
  private readonly ownsPool: boolean;
  private readonly sql: PgSql;
  private readonly timeoutMs: number;
  private readonly reconnectMs: number;
  /** Statement name per key (empty when prepared statements are off). */
  private readonly names: Readonly<Record<StatementKey, string>> | null;
  /** Calls on pooled clients, within timeoutMs, after the schema check (see PooledCalls). */
  private readonly calls: PooledCalls<PgPoolClient>;
  private closed = false;
  private readonly watched = new Map<string, Watched>();
  private readonly watchedStreams = new Map<string, WatchedStream>();
  private listener: Promise<void> | null = null;
  private stopListening: (() => void) | null = null;
  private readonly handOver: boolean;
  /** name -> owner -> the reservation of a candidate waiting through this store. */
  private readonly reservations = new Map<string, Map<string, Reservation>>();
  /** name -> the hand-over last pushed for it, until claimed or superseded. */
  private readonly handedOver = new Map<string, HandedOver>();

  constructor(options: PostgresStoreOptions) {
    if ((options.url === undefined) === (options.pool === undefined)) {
      throw new InvalidArgumentError('postgres', 'expected exactly one of url (postgres://…) or pool (a pg.Pool)');
    }
    this.tablePrefix = checkPrefix(options.tablePrefix ?? 'tenure_');
    this.timeoutMs = checkMs('timeoutMs', options.timeoutMs ?? 5000, 10, 600_000);
    this.reconnectMs = checkMs('reconnectMs', options.reconnectMs ?? 250, 1, 60_000);
    this.sql = buildSql(this.tablePrefix);
    // Names are per connection and per statement text: the prefix and the schema version keep
    // stores with different prefixes (or versions) on one pool apart. <= 63 bytes (NAMEDATALEN).
    this.names =
      options.preparedStatements === false
        ? null
        : (Object.fromEntries(STATEMENTS.map((k) => [k, `tenure${SCHEMA_VERSION}.${this.tablePrefix}.${k}`])) as Record<StatementKey, string>);
    this.handOver = options.handOver ?? true;
    if (options.url !== undefined) {
      this.endpoint = endpointOf(options.url);
      const { Pool } = loadPg();
      this.pool = new Pool({
        connectionString: options.url,
        // The store's own timer (timeoutMs) bounds every call, connecting included; these only
        // make sure the pool and the server give up too, soon after it.
        connectionTimeoutMillis: this.timeoutMs + 1000,
        statement_timeout: this.timeoutMs + 1000,
        keepAlive: true,
        application_name: 'tenure',
        ...options.poolConfig,
      });
      // An idle client lost with the server (restart, failover) is dropped by the pool; without a
      // listener the 'error' event would end the process. The next call reports the failure.
      this.pool.on?.('error', () => {});
      this.ownsPool = true;
    } else {
      this.pool = options.pool!;
      const o = this.pool.options;
      this.endpoint = o?.connectionString ? endpointOf(o.connectionString) : `${o?.host ?? 'localhost'}:${o?.port ?? 5432}`;
      this.ownsPool = false;
    }
    // pg-pool drops its own 'error' listener from a client and resolves connect() in the same
    // synchronous step; ours is attached a microtask later. A FATAL that arrives in the same
    // packet as the end of startup (a server killed just then) would be emitted to no listener
    // and end the process. Every client keeps this one for life; failures still reach callers
    // through their queries' rejections. (Found by the chaos suite's restart-store fault.)
    this.pool.on?.('connect', (client: PgPoolClient) => {
      client.on('error', () => {});
    });
    const pool = this.pool;
    this.calls = new PooledCalls<PgPoolClient>({
      timeoutMs: this.timeoutMs,
      // A checked-out client whose connection dies emits 'error'; unheard, that would end the
      // process (a user's own pool may have clients without our lifelong listener). The failure
      // reaches the caller through the query's own rejection.
      checkout: () =>
        pool.connect().then((c) => {
          c.on('error', ignoreError);
          return c;
        }),
      handBack: (c, destroy) => {
        // Back in the pool, the pool listens again; a dropped client keeps our listener while it ends.
        if (!destroy) c.removeListener('error', ignoreError);
        c.release(destroy);
      },
      dropAfter: (err) => !isServerError(err),
      prepare: (c) => this.createSchema(c),
      timedOut: (operation) => new StoreUnavailableError(`postgres store ${this.endpoint}: ${operation} got no answer within ${this.timeoutMs} ms; the outcome is unknown`),
      failed: (operation, err) => this.translate(operation, err),
    });
  }

  /** Create or upgrade the tables now (otherwise done on first use). */
  migrate(): Promise<void> {
    return this.run('migrate', async () => {});
  }

  async acquire(name: string, owner: string, ttlMs: number, meta?: LeaseMeta): Promise<AcquireResult> {
    checkName('name', name);
    checkOwner('owner', owner);
    checkTtl('ttlMs', ttlMs);
    const metaText = encodeMeta('meta', meta);
    const claimed = this.claimHandover(name, owner, ttlMs, metaText);
    if (claimed) return claimed;
    // A candidate that waits on push keeps a reservation, so a release can hand it the lease.
    const extraMs = this.handOver && this.watched.has(name) ? Math.ceil(ttlMs * RESERVE_EXTRA_TTLS) : 0;
    const sentAt = performance.now();
    const r = await this.run('acquire', (c) => this.query(c, 'acquire', [name, owner, ttlMs, metaText, extraMs]));
    const row = first(r);
    // No row updated: the lease is free at term 2^53 - 1 (or beyond), and nothing was written.
    if (row.acquired === null) throw termExhausted('postgres', name, row.term);
    const lease = toLease(row);
    const acquired = row.acquired === true;
    if (acquired) {
      this.forgetReservation(name, owner);
      this.noteLocal(name, { term: lease.term, owner: lease.owner }, lease);
    } else if (row.ticket !== null && row.ticket !== undefined) {
      this.noteReservation(name, owner, ttlMs, metaText, extraMs, String(row.ticket), sentAt);
    }
    return { acquired, lease };
  }

  async renew(name: string, owner: string, term: number, ttlMs: number): Promise<RenewResult> {
    checkName('name', name);
    checkOwner('owner', owner);
    checkTerm('term', term);
    checkTtl('ttlMs', ttlMs);
    const r = await this.run('renew', (c) => this.query(c, 'renew', [name, owner, term, ttlMs]));
    const row = r.rows[0];
    if (!row) return { renewed: false, lease: null };
    return { renewed: row.renewed === true, lease: toLease(row) };
  }

  async renewMany(owner: string, leases: readonly RenewManyItem[], ttlMs: number): Promise<RenewResult[]> {
    checkOwner('owner', owner);
    checkTtl('ttlMs', ttlMs);
    checkRenewItems(leases);
    if (leases.length === 0) return [];
    const names = leases.map((l) => l.name);
    const terms = leases.map((l) => l.term);
    const r = await this.run('renewMany', (c) => this.query(c, 'renewMany', [owner, names, terms, ttlMs]));
    return r.rows.map((row) => (row.owner === null ? { renewed: false, lease: null } : { renewed: row.renewed === true, lease: toLease(row) }));
  }

  async release(name: string, owner: string, term: number): Promise<boolean> {
    checkName('name', name);
    checkOwner('owner', owner);
    checkTerm('term', term);
    const r = await this.run('release', (c) => this.query(c, 'release', [name, owner, term, this.handOver]));
    const row = r.rows[0];
    if (!row) return false;
    if (row.owner === null) this.noteLocal(name, { term, owner: null }, null);
    else {
      // Handed over to a waiting candidate (maybe one of this store's own).
      const lease = toLease(row);
      this.noteLocal(name, { term: lease.term, owner: lease.owner }, lease, row.handed === null ? undefined : String(row.handed));
    }
    return true;
  }

  async read(name: string): Promise<Lease | null> {
    checkName('name', name);
    const r = await this.run('read', (c) => this.query(c, 'read', [name]));
    const row = r.rows[0];
    return row ? toLease(row) : null;
  }

  /** Delete every lease, waiter, fence and stream entry whose name starts with `prefix`, in one transaction; how many rows went. */
  async purge(prefix: string): Promise<number> {
    checkPurgePrefix(prefix);
    return await this.run('purge', async (c) => {
      await c.query('BEGIN');
      try {
        let n = 0;
        for (const text of this.sql.purge) n += (await c.query(text, [prefix])).rowCount ?? 0;
        await c.query('COMMIT');
        return n;
      } catch (err) {
        await c.query('ROLLBACK').catch(() => {});
        throw err;
      }
    });
  }

  async list(prefix = ''): Promise<Lease[]> {
    if (typeof prefix !== 'string') throw new InvalidArgumentError('prefix', 'expected a string');
    const r = await this.run('list', (c) => this.query(c, 'list', [prefix]));
    return r.rows.map(toLease);
  }

  async appendFenced(token: FencingToken, stream: string, payload: string, options?: AppendFencedOptions): Promise<number> {
    checkToken('token', token);
    checkName('stream', stream);
    checkPayload('payload', payload);
    const expectSeq = checkAppendOptions(options);
    // PostgreSQL text cannot hold U+0000: the server would refuse it, and a driver error reads as
    // "outcome unknown". It is bad input, refused before anything is sent.
    if (payload.includes('\u0000')) throw new InvalidArgumentError('payload', 'must not contain NUL (U+0000): PostgreSQL text cannot hold it');
    const values = [token.lease, token.term, stream, payload, expectSeq ?? null];
    // Usually one statement (the term is already the fence's); the first append of a new term, and
    // a refusal, take a second one that raises the fence or says why not.
    const fast = await this.run('appendFenced', (c) => this.query(c, 'appendFast', values));
    if (fast.rows.length > 0) return this.appended(stream, Number(fast.rows[0]!.seq));
    // A refusal for the expected head that the statement's snapshot could not explain (the head
    // reached the expected value only after it) is tried again: nothing was written.
    for (let attempt = 1; ; attempt++) {
      const r = await this.run('appendFenced', (c) => this.query(c, 'append', values));
      const row = first(r);
      if (row.seq !== null && row.seq !== undefined) return this.appended(stream, Number(row.seq));
      const issued = Number(row.issued ?? 0);
      if (token.term > issued) {
        throw new InvalidArgumentError('token.term', `term ${token.term} was never issued for lease ${token.lease} (latest ${issued})`);
      }
      let highest = Number(row.highest ?? 0);
      if (highest <= token.term) {
        // Not stale by the statement's snapshot: the stream may belong to another lease, or the
        // snapshot predates the commit that raised the fence. Read both again (committed now).
        const owner = await this.run('appendFenced', (c) => this.query(c, 'streamLease', [stream]));
        const lease = owner.rows[0]?.lease;
        if (typeof lease === 'string' && lease !== token.lease) throw foreignStreamError(stream, lease, token.lease);
        const again = await this.run('appendFenced', (c) => this.query(c, 'highest', [token.lease]));
        highest = Math.max(highest, Number(again.rows[0]?.max_term ?? 0));
        if (expectSeq !== undefined && highest <= token.term) {
          const h = await this.run('appendFenced', (c) => this.query(c, 'streamHead', [stream]));
          const head = Number(h.rows[0]?.seq ?? 0);
          if (head !== expectSeq) throw new VersionConflictError(stream, expectSeq, head);
          if (attempt < 3) continue;
          throw new StoreUnavailableError(`postgres store ${this.endpoint}: append to ${stream} at head ${expectSeq} refused ${attempt} times with no reason found; nothing was written`);
        }
      }
      throw reportStale(new StaleTermError(token.lease, token.term, Math.max(highest, token.term + 1)), { stream });
    }
  }

  async readStream(stream: string, options?: ReadStreamOptions): Promise<StreamEntry[]> {
    checkName('stream', stream);
    const { after, limit } = checkReadOptions(options);
    const r = await this.run('readStream', (c) => this.query(c, 'readStream', [stream, after, limit]));
    return pageRows(stream, first(r).page).map((row) =>
      decodeStreamEntry('postgres', stream, { seq: row[0], lease: String(row[1]), term: row[2], payload: String(row[3]), appendedAt: row[4] }),
    );
  }

  /** The stream's head and the server's `clock_timestamp()` (the clock of `appendedAt`), in one statement. */
  async streamHead(stream: string): Promise<StreamHead> {
    checkName('stream', stream);
    const r = await this.run('streamHead', (c) => this.query(c, 'streamHead', [stream]));
    return headOf(first(r));
  }

  /**
   * Push for streams through LISTEN/NOTIFY (the trigger of schema 5): `listener` hears the new
   * head after appends by any writer, at their commit; appends through this object are told at
   * once. After the LISTEN connection is (re-)established the current head is read and told, so
   * an append made while it was down is not missed.
   */
  watchStream(stream: string, listener: (head: number) => void): Unsubscribe {
    checkName('stream', stream);
    if (this.closed) throw new ClosedError('postgres store');
    let w = this.watchedStreams.get(stream);
    if (!w) {
      w = { listeners: new Set(), last: 0 };
      this.watchedStreams.set(stream, w);
    }
    w.listeners.add(listener);
    this.startListening();
    const entry = w;
    return () => {
      entry.listeners.delete(listener);
      if (entry.listeners.size === 0 && this.watchedStreams.get(stream) === entry) this.watchedStreams.delete(stream);
      if (!this.listening()) this.stopListening?.();
    };
  }

  /** The stream's last entry: the primary key read backwards, one index probe. */
  async readLast(stream: string): Promise<StreamEntry | null> {
    checkName('stream', stream);
    const r = await this.run('readLast', (c) => this.query(c, 'readLast', [stream]));
    const row = r.rows[0];
    return row ? decodeStreamEntry('postgres', stream, { seq: row.seq, lease: String(row.lease), term: row.term, payload: String(row.payload), appendedAt: row.appended_at }) : null;
  }

  /**
   * Push through LISTEN/NOTIFY: `listener` hears of a release and of every new holder (never of a
   * plain renewal). Changes made through this store object are told at once; others' on their
   * NOTIFY. After the LISTEN connection is re-established, watched leases are read again so that
   * nothing missed while it was down stays unseen.
   */
  watch(name: string, listener: WatchListener): Unsubscribe {
    checkName('name', name);
    if (this.closed) throw new ClosedError('postgres store');
    let w = this.watched.get(name);
    if (!w) {
      w = { listeners: new Set(), last: { term: 0, owner: null } };
      this.watched.set(name, w);
    }
    w.listeners.add(listener);
    this.startListening();
    const entry = w;
    return () => {
      entry.listeners.delete(listener);
      if (entry.listeners.size === 0 && this.watched.get(name) === entry) {
        this.watched.delete(name);
        this.handedOver.delete(name);
        void this.leave([name]);
      }
      if (!this.listening()) this.stopListening?.();
    };
  }

  /**
   * `owner` stopped waiting for `name`: drop its reservation on the server (and free a lease
   * handed over to it, never claimed), whoever else in this process still watches the name.
   */
  async withdraw(name: string, owner: string): Promise<void> {
    if (this.handedOver.get(name)?.owner === owner) this.handedOver.delete(name);
    await this.leave([name], owner);
  }

  async close(): Promise<void> {
    if (this.closed) return;
    // Leave the waiting rooms first, so no release hands a lease to a closed store (bounded by
    // timeoutMs; a store that cannot reach the server closes anyway, and its reservations lapse).
    const leaving = this.leave([...this.reservations.keys()]);
    this.closed = true;
    this.watched.clear();
    this.watchedStreams.clear();
    this.handedOver.clear();
    this.stopListening?.();
    await Promise.all([this.listener, leaving]);
    if (this.ownsPool) await this.pool.end().catch(() => {});
  }

  // ---- internals ------------------------------------------------------------------------

  /** One of the store's statements, by name when prepared statements are on. */
  private query(c: PgPoolClient, key: StatementKey, values: unknown[]): Promise<PgQueryResult> {
    const text = this.sql[key];
    return this.names ? c.query({ name: this.names[key], text, values }) : c.query(text, values);
  }

  /**
   * Run `fn` on a pooled client, after making sure the schema exists, within `timeoutMs`.
   * A timed-out call's client is destroyed (its statement may still commit: "maybe").
   */
  private run<T>(operation: string, fn: (c: PgPoolClient) => Promise<T>): Promise<T> {
    if (this.closed) return Promise.reject(new ClosedError('postgres store'));
    return this.calls.run(operation, fn);
  }

  private async createSchema(c: PgPoolClient): Promise<void> {
    await c.query('BEGIN');
    try {
      // Serialize first use across processes: concurrent CREATE TABLE IF NOT EXISTS can collide.
      await c.query('SELECT pg_advisory_xact_lock(hashtext($1))', [this.sql.lockKey]);
      await c.query(`CREATE TABLE IF NOT EXISTS ${this.sql.schemaTable} (key text PRIMARY KEY, value text NOT NULL)`);
      const v = await c.query(`SELECT value FROM ${this.sql.schemaTable} WHERE key = 'version'`);
      const version = v.rows[0] ? Number(v.rows[0].value) : 0;
      if (version > SCHEMA_VERSION) {
        throw new TenureError('INVALID_ARGUMENT', `postgres store ${this.endpoint}: schema version ${version} is newer than this tenure (${SCHEMA_VERSION}); upgrade tenure`);
      }
      if (version < SCHEMA_VERSION) {
        for (const statement of this.sql.schema) await c.query(statement);
        await c.query(
          `INSERT INTO ${this.sql.schemaTable} (key, value) VALUES ('version', $1) ON CONFLICT (key) DO UPDATE SET value = excluded.value`,
          [String(SCHEMA_VERSION)],
        );
      }
      await c.query('COMMIT');
    } catch (err) {
      await c.query('ROLLBACK').catch(() => {});
      throw err;
    }
  }

  private translate(operation: string, err: unknown): Error {
    if (err instanceof TenureError) return err;
    // 22003 numeric_value_out_of_range: a term at the top of bigint (planted by hand) cannot be
    // bumped. An answer, not an outage: retrying gives the same.
    if ((err as { code?: unknown }).code === '22003') {
      return new StoreDataError(`postgres store ${this.endpoint}: ${operation}: a term cannot grow any further (${describe(err)})`);
    }
    return new StoreUnavailableError(`postgres store ${this.endpoint}: ${operation} failed: ${describe(err)}`, { cause: err });
  }

  // ---- hand-over ------------------------------------------------------------------------

  /**
   * Claim a lease that a release handed over to `owner` (see `release` in sql.ts), with no round
   * trip. The release gave it the expiry of `owner`'s reservation as of one refresh (the ticket),
   * which is at least that refresh's send time + TTL + extra, the refresh being an acquire of
   * ours sent before the server read its clock. With the TTL and CLAIM_SLACK_MS of that left now,
   * the lease lives past this call's start + TTL (safety rule 2), and nobody else can hold it
   * meanwhile: the server gives a live lease to no one else and only `owner` renews or releases
   * it. It must still be the state the watch last reported, asked for with the same TTL and meta.
   * Null otherwise: the acquire statement then decides (it extends our own live lease).
   */
  private claimHandover(name: string, owner: string, ttlMs: number, metaText: string): AcquireResult | null {
    const h = this.handedOver.get(name);
    if (!h || h.owner !== owner) return null;
    this.handedOver.delete(name); // one claim per hand-over
    const w = this.watched.get(name);
    const res = this.reservations.get(name)?.get(owner);
    const sentAt = res?.sentAt.get(h.ticket);
    if (!w || w.last.term !== h.term || w.last.owner !== owner || !res || sentAt === undefined) return null;
    if (res.ttlMs !== ttlMs || res.metaText !== metaText) return null;
    const left = sentAt + ttlMs + res.extraMs - performance.now();
    if (left < ttlMs + CLAIM_SLACK_MS) return null;
    this.forgetReservation(name, owner); // the release deleted it
    // A release hands over only while no hand-over hint is held (sql.ts, `release`): none to read.
    // (A release by tenure before 2026-11-29 did not check; the hint is a preference, never safety.)
    return { acquired: true, lease: { name, owner, term: h.term, meta: decodeMeta(metaText), ttlMs, remainingMs: Math.floor(left) }, noTransferHint: true };
  }

  private noteReservation(name: string, owner: string, ttlMs: number, metaText: string, extraMs: number, ticket: string, sentAt: number): void {
    if (!this.watched.has(name)) return; // unwatched meanwhile: its reservation is being left
    let byOwner = this.reservations.get(name);
    if (!byOwner) {
      byOwner = new Map();
      this.reservations.set(name, byOwner);
    }
    let res = byOwner.get(owner);
    if (!res || res.ttlMs !== ttlMs || res.metaText !== metaText || res.extraMs !== extraMs) {
      res = { ttlMs, metaText, extraMs, sentAt: new Map() };
      byOwner.set(owner, res);
    }
    res.sentAt.set(ticket, sentAt);
    if (res.sentAt.size > TICKETS_KEPT) res.sentAt.delete(res.sentAt.keys().next().value!);
  }

  private forgetReservation(name: string, owner: string): void {
    const byOwner = this.reservations.get(name);
    if (!byOwner?.delete(owner)) return;
    if (byOwner.size === 0) this.reservations.delete(name);
  }

  /**
   * Drop this store's reservations for `names` on the server, and free a lease handed over with
   * one of their tickets, never claimed (nobody here will take it up). Best effort: reservations
   * lapse anyway, and so does such a lease, at the reservation's expiry.
   */
  private async leave(names: readonly string[], only?: string): Promise<void> {
    const rows: [string, string, string][] = [];
    for (const name of names) {
      const byOwner = this.reservations.get(name);
      for (const [owner, res] of byOwner ?? []) {
        if (only !== undefined && owner !== only) continue;
        for (const ticket of res.sentAt.keys()) rows.push([name, owner, ticket]);
        byOwner!.delete(owner);
      }
      if (byOwner?.size === 0) this.reservations.delete(name);
    }
    if (rows.length === 0 || this.closed) return;
    const values = [rows.map((r) => r[0]), rows.map((r) => r[1]), rows.map((r) => r[2])];
    await this.run('leave', (c) => this.query(c, 'leave', values)).catch(() => {});
  }

  // ---- push -----------------------------------------------------------------------------

  /** Whether anything is watched (leases or streams): the LISTEN connection runs while so. */
  private listening(): boolean {
    return this.watched.size > 0 || this.watchedStreams.size > 0;
  }

  /** An append through this object: tell its stream's watchers now rather than on the NOTIFY. */
  private appended(stream: string, seq: number): number {
    this.tellStream(stream, seq, false);
    return seq;
  }

  /** Tell a stream's listeners its head: when it is higher than told, or always (`again`: after a reconnect). */
  private tellStream(stream: string, head: number, again: boolean): void {
    const w = this.watchedStreams.get(stream);
    if (!w || (!again && head <= w.last)) return;
    w.last = Math.max(w.last, head);
    for (const l of [...w.listeners]) queueMicrotask(() => l(head));
  }

  /** A change made through this object: tell watchers now rather than on the NOTIFY round trip. */
  private noteLocal(name: string, state: WatchState, lease: Lease | null, handed?: string): void {
    const w = this.watched.get(name);
    if (w) this.advance(name, w, state, lease, handed);
  }

  /**
   * Tell listeners iff `state` is newer than what they were last told. A free lease after a free
   * lease of an older term is told too: someone held it in between, which a watcher may have
   * learnt by its own acquire (a candidate that lost to it waits for the release). A newer state
   * that a release handed over (`handed`: the reservation's ticket) is remembered first, for the
   * claim its new holder's acquire makes when told.
   */
  private advance(name: string, w: Watched, state: WatchState, lease: Lease | null, handed?: string): void {
    const last = w.last;
    const newer = state.term > last.term || (state.term === last.term && last.owner !== null && state.owner === null);
    if (!newer) return;
    w.last = state;
    if (handed !== undefined && state.owner !== null) this.handedOver.set(name, { owner: state.owner, term: state.term, ticket: handed });
    else this.handedOver.delete(name);
    // Term 0 with no holder is a row never acquired: nothing to tell.
    if (last.owner === null && state.owner === null && state.term === 0) return;
    for (const l of [...w.listeners]) queueMicrotask(() => l(lease));
  }

  private async refresh(c: PgPoolClient, name: string): Promise<void> {
    const r = await this.query(c, 'readAny', [name]);
    const w = this.watched.get(name);
    const row = r.rows[0];
    if (!w || !row) return;
    const live = row.live === true;
    const lease = live ? toLease(row) : null;
    this.advance(name, w, { term: decodeTerm('postgres', name, row.term), owner: live ? String(row.owner) : null }, lease);
  }

  private startListening(): void {
    if (this.listener || this.closed) return;
    let stop!: () => void;
    const stopped = new Promise<typeof LISTEN_STOPPED>((resolve) => {
      stop = () => resolve(LISTEN_STOPPED);
    });
    this.stopListening = stop;
    this.listener = this.listenLoop(stopped).finally(() => {
      this.listener = null;
      this.stopListening = null;
      // A watch added while the loop was winding down needs a new one.
      if (this.listening() && !this.closed) this.startListening();
    });
  }

  private async listenLoop(stopped: Promise<typeof LISTEN_STOPPED>): Promise<void> {
    let backoff = this.reconnectMs;
    let isStopped = false;
    void stopped.then(() => (isStopped = true));
    while (!isStopped && !this.closed && this.listening()) {
      let client: PgPoolClient | null = null;
      let lostError: Error | undefined;
      try {
        const connecting = this.pool.connect();
        const first = await Promise.race([connecting, stopped]);
        if (first === LISTEN_STOPPED) {
          void connecting.then((c) => c.release(true), () => {});
          return;
        }
        client = first;
        const c = first;
        const lost = new Promise<'lost'>((resolve) => {
          c.on('error', (err: Error) => {
            lostError = err;
            resolve('lost');
          });
          c.on('end', () => resolve('lost'));
        });
        // Refreshes run one at a time, in NOTIFY order, on the LISTEN connection itself.
        let chain = Promise.resolve();
        c.on('notification', (msg: PgNotification) => {
          if (msg.channel === this.sql.streamChannel && msg.payload !== undefined) {
            const head = parseStreamPush(msg.payload);
            if (head) this.tellStream(head.stream, head.seq, false);
            return;
          }
          if (msg.channel !== this.sql.channel || msg.payload === undefined) return;
          const pushed = parsePush(msg.payload);
          if (!pushed || !this.watched.has(pushed.name)) return;
          // The payload carries the new state: no read needed (in order with any pending read).
          if (pushed.state) {
            const { name, state, lease, handed } = pushed;
            chain = chain.then(() => {
              const w = this.watched.get(name);
              if (w) this.advance(name, w, state, lease, handed);
            }).catch(() => {});
          } else chain = chain.then(() => this.refresh(c, pushed.name)).catch(() => {});
        });
        await this.calls.prepare(c);
        await c.query(`LISTEN "${this.sql.channel}"`);
        await c.query(`LISTEN "${this.sql.streamChannel}"`);
        backoff = this.reconnectMs;
        // Anything that changed before LISTEN (or while the connection was down) is read now.
        for (const name of [...this.watched.keys()]) chain = chain.then(() => this.refresh(c, name)).catch(() => {});
        for (const stream of [...this.watchedStreams.keys()]) {
          chain = chain
            .then(async () => {
              const r = await this.query(c, 'streamHead', [stream]);
              if (r.rows[0]) this.tellStream(stream, headOf(r.rows[0]).seq, true);
            })
            .catch(() => {});
        }
        const why = await Promise.race([lost, stopped]);
        await chain;
        if (why === LISTEN_STOPPED) {
          // Dropped rather than pooled: it carries this loop's listeners and LISTEN state.
          c.release(true);
          return;
        }
        c.release(lostError ?? true);
        client = null;
      } catch (err) {
        if (client) client.release(err instanceof Error ? err : true);
      }
      // Lost or failed to connect: wait, then reconnect (unless stopped meanwhile).
      const delay = new Promise<'retry'>((resolve) => {
        const t = setTimeout(() => resolve('retry'), backoff);
        t.unref();
      });
      backoff = Math.min(backoff * 2, 5000);
      if ((await Promise.race([delay, stopped])) === LISTEN_STOPPED) return;
    }
  }
}

/** The live lease in a row with name, owner, term, ttl_ms, meta, remaining_ms. */
function toLease(row: Record<string, unknown>): Lease {
  const name = String(row.name);
  return {
    name,
    owner: String(row.owner),
    term: decodeTerm('postgres', name, row.term),
    meta: decodeMeta(typeof row.meta === 'string' ? row.meta : null),
    ttlMs: Number(row.ttl_ms),
    remainingMs: Math.max(0, Math.floor(Number(row.remaining_ms))),
  };
}

/**
 * A NOTIFY payload (schema 2): `{n, t}` released, `{n, t, o, ttl, m, r}` a live holder, `{n}` too
 * large to carry (read the row). Anything else is treated as a bare name to read.
 */
export function parsePush(payload: string): { name: string; state?: WatchState; lease: Lease | null; handed?: string } | null {
  let v: unknown;
  try {
    v = JSON.parse(payload);
  } catch {
    return { name: payload, lease: null };
  }
  if (typeof v !== 'object' || v === null) return { name: payload, lease: null };
  const p = v as Record<string, unknown>;
  if (typeof p.n !== 'string') return { name: payload, lease: null };
  const name = p.n;
  if (typeof p.t !== 'number' || !Number.isSafeInteger(p.t)) return { name, lease: null };
  if (p.o === undefined || p.o === null) return { name, state: { term: p.t, owner: null }, lease: null };
  if (typeof p.o !== 'string' || typeof p.ttl !== 'number' || typeof p.r !== 'number' || typeof p.m !== 'string') return { name, lease: null };
  const lease = toLease({ name, owner: p.o, term: p.t, ttl_ms: p.ttl, meta: p.m, remaining_ms: p.r });
  // h: the reservation ticket of a hand-over (schema 3).
  const handed = typeof p.h === 'number' && Number.isSafeInteger(p.h) ? String(p.h) : undefined;
  return { name, state: { term: p.t, owner: p.o }, lease, ...(handed !== undefined ? { handed } : {}) };
}

/** A stream NOTIFY payload (schema 5): `{s: stream, q: head}`; null for anything else. */
export function parseStreamPush(payload: string): { stream: string; seq: number } | null {
  try {
    const v = JSON.parse(payload) as { s?: unknown; q?: unknown };
    if (typeof v.s !== 'string' || typeof v.q !== 'number' || !Number.isSafeInteger(v.q) || v.q < 1) return null;
    return { stream: v.s, seq: v.q };
  } catch {
    return null;
  }
}

/** A row of `streamHead`: seq (bigint as text) and now_ms. */
function headOf(row: Record<string, unknown>): StreamHead {
  const seq = Number(row.seq);
  const nowMs = Number(row.now_ms);
  if (!Number.isSafeInteger(seq) || seq < 0 || !Number.isFinite(nowMs)) throw new StoreDataError(`postgres store: unexpected stream head ${String(row.seq)} at ${String(row.now_ms)}`);
  return { seq, nowMs: Math.floor(nowMs) };
}

/** The rows of a `readStream` page, a json text of five-element arrays (see sql.ts). */
function pageRows(stream: string, page: unknown): (readonly unknown[])[] {
  let rows: unknown;
  try {
    rows = typeof page === 'string' ? JSON.parse(page) : undefined;
  } catch {
    rows = undefined;
  }
  if (!Array.isArray(rows) || !rows.every((row) => Array.isArray(row) && row.length === 5)) {
    throw new StoreDataError(`postgres store: stream ${JSON.stringify(stream)}: a page read back is not the list of entries tenure asked for (${String(page).slice(0, 80)})`);
  }
  return rows as (readonly unknown[])[];
}

function first(r: PgQueryResult): Record<string, unknown> {
  const row = r.rows[0];
  if (!row) throw new Error('the statement returned no row');
  return row;
}

/** An error the server answered with (the connection is still good), as opposed to a lost connection. */
/** The listener a checked-out client carries while a call uses it (see the store's constructor). */
function ignoreError(): void {}

function isServerError(err: unknown): boolean {
  if (!(err instanceof Error)) return false;
  const e = err as Error & { code?: unknown; severity?: unknown };
  // 57P01..57P03: the server is shutting down or restarting; the connection is gone.
  return typeof e.severity === 'string' && typeof e.code === 'string' && !e.code.startsWith('57P');
}

/** host:port of a postgres URL (the password is never part of it). */
export function endpointOf(url: string): string {
  try {
    const u = new URL(url);
    const host = u.hostname || u.searchParams.get('host') || 'localhost';
    return `${host}:${u.port || '5432'}`;
  } catch {
    return 'postgres';
  }
}

function describe(err: unknown): string {
  if (err instanceof AggregateError && err.errors.length > 0) return err.errors.map(describe).join('; ');
  if (err instanceof Error) {
    const code = (err as Error & { code?: unknown }).code;
    const text = err.message || (typeof code === 'string' ? code : err.name);
    return typeof code === 'string' && !text.includes(code) ? `${text} (${code})` : text;
  }
  return String(err);
}
