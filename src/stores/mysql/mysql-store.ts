/**
 * `mysql://…` — leases, fences and streams in MySQL 8 or MariaDB (>= 10.6), through `mysql2`.
 *
 * - Expiry is decided by the server's clock (`UTC_TIMESTAMP(6)`); the server reports the remaining
 *   time (safety rule 1). The client's wall clock is never sent or compared.
 * - acquire is one short transaction (`SELECT … FOR UPDATE`, decide, write) in which the term is
 *   bumped; renew, release and renewMany are one compare-and-set UPDATE each (rules 4, 6); the
 *   fence is checked in the same statement or transaction as the append (rule 5). appendFenced
 *   is one statement under the fence's current term (at the stream head the store remembers, or
 *   the table's), otherwise one CALL of a stored procedure; renewMany is one CALL. Transactions
 *   that lose a deadlock are rolled back by the server and retried.
 * - Statements go through mysql2's callback API under a mysql2 promise pool (see connector); calls
 *   are bounded by one shared timer (PooledCalls, as in the PostgreSQL store).
 * - The schema is created on first use under `GET_LOCK`, with a version row.
 * - Push by wake locks (MySQL has no LISTEN/NOTIFY; see wake.ts): while this store holds a lease,
 *   a dedicated session holds the lease's user-level lock (`GET_LOCK`) and releases it right after
 *   the lease's release; `watch()` keeps a connection per watched name blocked in `GET_LOCK` on it,
 *   so a graceful release wakes waiters at once. A hint only: the lease row decides everything.
 *   Names watched beyond `wakeConnections`, and a waiter whose connection was lost, are polled
 *   (every `watchPollMs`, when set). Candidates also wake at the server-reported expiry, as before.
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
  checkMs,
  checkName,
  checkOwner,
  VersionConflictError,
  checkAppendOptions,
  checkPayload,
  checkReadOptions,
  checkRenewItems,
  checkTerm,
  checkToken,
  checkTtl,
  termExhausted,
  decideFence,
  decodeMeta,
  decodeStreamEntry,
  decodeTerm,
  foreignStreamError,
  reportStale,
  encodeMeta,
  isLive,
  toLease,
} from '../../core/index.js';
import type {
  AcquireResult,
  AppendFencedOptions,
  FencingToken,
  Lease,
  LeaseMeta,
  LeaseRow,
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
import { connector, loadMysql2 } from './driver.js';
import type { MysqlConnection, MysqlPool, MysqlValue } from './driver.js';
import { SCHEMA_VERSION, buildSql, checkPrefix } from './sql.js';
import type { MysqlSql } from './sql.js';
import { WakeHolder, Waker } from './wake.js';
import type { WakeDeps } from './wake.js';

export interface MysqlStoreOptions {
  /** `mysql://user:pass@host:port/db` — a pool is made from it (and closed by close()). */
  url?: string;
  /** Or the user's own mysql2/promise pool (left open by close()). */
  pool?: MysqlPool;
  /** Extra mysql2 pool config when `url` is given: `ssl`, `password`, `connectionLimit`, … passed through. */
  poolConfig?: Record<string, unknown>;
  /** Table name prefix, an SQL identifier (default `tenure_`). */
  tablePrefix?: string;
  /** A call with no answer after this long rejects with StoreUnavailableError (outcome unknown) and its connection is dropped, ms (default 5000). */
  timeoutMs?: number;
  /**
   * Also poll every watched lease at this interval, ms (default: no polling). A waiter whose wake
   * connection was lost, or that is woken without news, polls at this interval (default 1000)
   * until it waits again.
   */
  watchPollMs?: number;
  /**
   * Push hand-over by user-level locks (see the module comment): this store holds a wake lock per
   * lease it holds, on one dedicated connection, and `watch()` waits on them (default true with
   * `url`; with `pool` false, as the dedicated connections would come from the user's pool).
   */
  wakeLocks?: boolean;
  /** Most names watched by push at once, each on its own connection (default 16); more are polled (`watchPollMs`). */
  wakeConnections?: number;
}

type Row = Record<string, unknown>;

interface Watched {
  readonly listeners: Set<WatchListener>;
  last: { term: number; owner: string | null };
}

/** Transactions that lost a deadlock or a race to insert the same new row: safe to run again. */
const RETRYABLE = new Set([1213 /* ER_LOCK_DEADLOCK */, 1062 /* ER_DUP_ENTRY */]);
/**
 * How often such a loser runs again, and the wait before each new attempt: a random share of a
 * doubling window capped at 100 ms, so that many writers appending to one stream at once (whose
 * gap locks deadlock each other) spread out instead of meeting again at once.
 */
const RETRY_ATTEMPTS = 25;
async function retryPause(err: unknown, attempt: number): Promise<boolean> {
  const errno = (err as { errno?: unknown }).errno;
  if (attempt >= RETRY_ATTEMPTS || typeof errno !== 'number' || !RETRYABLE.has(errno)) return false;
  await new Promise((r) => setTimeout(r, Math.random() * Math.min(100, 2 ** attempt)));
  return true;
}

/** Stream heads remembered per store (appends to other streams read the head from the table). */
const HEADS_KEPT = 1024;

export class MysqlStore implements Store {
  readonly kind = 'mysql';
  /** host:port, as named in error messages. */
  readonly endpoint: string;
  readonly tablePrefix: string;
  /** Present with wake locks (the default with `url`) or `watchPollMs`. */
  readonly watch?: (name: string, listener: WatchListener) => Unsubscribe;
  private readonly pool: MysqlPool;
  private readonly ownsPool: boolean;
  private readonly sql: MysqlSql;
  private readonly timeoutMs: number;
  /** Calls on pooled connections, within timeoutMs, after the schema check (see PooledCalls). */
  private readonly calls: PooledCalls<MysqlConnection>;
  private closed = false;
  private readonly watched = new Map<string, Watched>();
  /** Wake locks of the leases this store holds (null: no wake locks). */
  private readonly holder: WakeHolder | null = null;
  /** Per watched name with a wake connection, its waiter (at most wakeConnections). */
  private readonly wakers = new Map<string, Waker>();
  private readonly wakeConnections: number;
  private readonly wakeDeps: WakeDeps | null = null;
  /** The pool the dedicated connections come from (its own when made from `url`). */
  private readonly wakePool: MysqlPool | null = null;
  private pollTimer: NodeJS.Timeout | null = null;
  private polling = false;
  /** Per stream, the head this store last wrote or saw (see noteHead), least recently used first. */
  private readonly heads = new Map<string, number>();
  /** The lease each of the streams this store used last belongs to (the lease of entry 1, which never changes), up to HEADS_KEPT. */
  private readonly owners = new Map<string, string>();
  /** Streams with an append at a remembered head in flight. */
  private readonly headBusy = new Set<string>();

  constructor(options: MysqlStoreOptions) {
    if ((options.url === undefined) === (options.pool === undefined)) {
      throw new InvalidArgumentError('mysql', 'expected exactly one of url (mysql://…) or pool (a mysql2/promise pool)');
    }
    this.tablePrefix = checkPrefix(options.tablePrefix ?? 'tenure_');
    this.timeoutMs = checkMs('timeoutMs', options.timeoutMs ?? 5000, 10, 600_000);
    this.sql = buildSql(this.tablePrefix);
    if (options.url !== undefined) {
      const u = parseUrl(options.url);
      this.endpoint = `${u.hostname || 'localhost'}:${u.port || '3306'}`;
      const { createPool } = loadMysql2();
      this.pool = createPool({
        uri: options.url,
        connectTimeout: this.timeoutMs + 1000,
        enableKeepAlive: true,
        waitForConnections: true,
        ...options.poolConfig,
      });
      this.ownsPool = true;
    } else {
      this.pool = options.pool!;
      this.endpoint = poolEndpoint(this.pool);
      this.ownsPool = false;
    }
    this.calls = new PooledCalls<MysqlConnection>({
      timeoutMs: this.timeoutMs,
      checkout: connector(this.pool),
      handBack: (c, destroy) => (destroy ? c.destroy() : c.release()),
      dropAfter: (err) => !(err instanceof TenureError) && isFatal(err),
      prepare: (c) => this.createSchema(c),
      timedOut: (operation) => new StoreUnavailableError(`mysql store ${this.endpoint}: ${operation} got no answer within ${this.timeoutMs} ms; the outcome is unknown`),
      failed: (operation, err) => this.translate(operation, err),
    });
    const pollMs = options.watchPollMs === undefined ? undefined : checkMs('watchPollMs', options.watchPollMs, 5, 600_000);
    const wakeLocks = options.wakeLocks ?? options.url !== undefined;
    if (typeof wakeLocks !== 'boolean') throw new InvalidArgumentError('wakeLocks', `expected a boolean, got ${typeof wakeLocks}`);
    this.wakeConnections = checkCount('wakeConnections', options.wakeConnections ?? 16, 0, 10_000);
    if (wakeLocks) {
      if (options.url !== undefined) {
        const { createPool } = loadMysql2();
        this.wakePool = createPool({
          uri: options.url,
          connectTimeout: this.timeoutMs + 1000,
          enableKeepAlive: true,
          waitForConnections: true,
          ...options.poolConfig,
          connectionLimit: this.wakeConnections + 1,
        });
      } else this.wakePool = this.pool;
      const checkout = connector(this.wakePool);
      this.wakeDeps = {
        tablePrefix: this.tablePrefix,
        checkout: async () => {
          if (this.closed) throw new ClosedError('mysql store');
          // The tables and procedures first (once per store): a wait begun before they exist
          // (a watch on a new database, started beside the first acquire that creates them)
          // would fail its CALL and poll for a whole interval instead of waiting on the lock.
          await this.migrate();
          return checkout();
        },
        kill: (id) => this.calls.run('wake', async (c) => void (await c.query(`KILL CONNECTION ${Number(id)}`))),
        poll: (name) => this.run('watch', (c) => this.pollOne(c, name)),
        told: (name, row) => this.toldRow(name, row),
        readAny: this.sql.readAny,
        wakeWait: this.sql.wakeWait,
        holdStatements: [this.sql.releaseWake],
        pollMs: pollMs ?? 1000,
        timeoutMs: this.timeoutMs,
      };
      this.holder = new WakeHolder(this.wakeDeps);
    }
    if (wakeLocks || pollMs !== undefined) this.watch = (name, listener) => this.addWatch(name, listener, pollMs);
  }

  /** Names this store holds a wake lock for, and names watched by a blocked wake connection (tests and diagnostics). */
  wakeState(): { held: string[]; waiting: string[]; wakes: number } {
    const ws = [...this.wakers.values()];
    return { held: this.holder?.heldNames() ?? [], waiting: ws.filter((w) => w.blocked).map((w) => w.name), wakes: ws.reduce((n, w) => n + w.wakes, 0) };
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
    // One CALL, one round trip: the procedure locks the row, decides as every store does and
    // writes, in one transaction (see `acquire` in sql.ts). A deadlock victim is run again.
    const row = await this.run('acquire', (c) =>
      this.retrying(async () => {
        const reported = (await callRows(c, this.sql.acquire, [name, owner, ttlMs * 1000, ttlMs, metaText]))[0];
        if (!reported) throw new Error(`the acquire procedure reported nothing for lease ${name}`);
        return reported;
      }),
    );
    if (row.acquired === null || row.acquired === undefined) throw termExhausted('mysql', name, row.term);
    const acquired = Number(row.acquired) === 1;
    // Schema 7 reports the hand-over hint seen by the winning transaction (sql.ts, `acquire`).
    const result: AcquireResult = { acquired, lease: rowLease(row), ...(acquired && row.hinted != null && Number(row.hinted) === 0 ? { noTransferHint: true } : {}) };
    if (result.acquired) {
      this.holder?.hold(name, result.lease.term, owner);
      this.noteLocal(name, { term: result.lease.term, owner }, result.lease);
    } else if (result.lease.owner !== owner) {
      this.holder?.heldBy(name, result.lease);
      // Lost to a holder, which takes its wake lock next: a waiter of ours waits on it now.
      this.wakers.get(name)?.nudge();
    }
    return result;
  }

  async renew(name: string, owner: string, term: number, ttlMs: number): Promise<RenewResult> {
    checkName('name', name);
    checkOwner('owner', owner);
    checkTerm('term', term);
    checkTtl('ttlMs', ttlMs);
    const result = await this.run('renew', async (c): Promise<RenewResult> => {
      await c.execute(this.sql.renew, [ttlMs * 1000, ttlMs, name, owner, term]);
      // Renewed iff the lease is now ours, with this term, and live: no one else can extend it,
      // and a lease the UPDATE found expired cannot have come back to life since.
      const rows = await select(c, this.sql.readLive, [name]);
      const row = rows[0];
      if (!row) return { renewed: false, lease: null };
      const lease = rowLease(row);
      return { renewed: lease.owner === owner && lease.term === term, lease };
    });
    if (!result.renewed) this.holder?.drop(name, owner, term);
    return result;
  }

  async renewMany(owner: string, leases: readonly RenewManyItem[], ttlMs: number): Promise<RenewResult[]> {
    checkOwner('owner', owner);
    checkTtl('ttlMs', ttlMs);
    checkRenewItems(leases);
    if (leases.length === 0) return [];
    const batch = JSON.stringify(leases.map((l) => ({ n: l.name, t: l.term })));
    const results = await this.run('renewMany', async (c) => {
      // One CALL, one round trip: the procedure renews the whole batch with one UPDATE and
      // reports each lease with one SELECT on the same connection.
      const rows = await callRows(c, this.sql.renewMany, [batch, ttlMs * 1000, ttlMs, owner]);
      return rows.map((row): RenewResult => {
        if (row.name === null || row.name === undefined || Number(row.live) !== 1) return { renewed: false, lease: null };
        const lease = rowLease(row);
        return { renewed: lease.owner === owner && lease.term === Number(row.t), lease };
      });
    });
    if (this.holder) results.forEach((r, i) => r.renewed || this.holder!.drop(leases[i]!.name, owner, leases[i]!.term));
    return results;
  }

  async release(name: string, owner: string, term: number): Promise<boolean> {
    checkName('name', name);
    checkOwner('owner', owner);
    checkTerm('term', term);
    if (this.closed) throw new ClosedError('mysql store');
    // Where this store holds the lease's wake lock on an idle session: the release and the wake
    // lock's, one round trip there (waiters wake as the release commits).
    const here = this.holder?.releaseHere(name, owner, term, async (c, lock) => Number((await callRows(c, this.sql.releaseWake, [name, owner, term, lock]))[0]?.released) === 1);
    let released: boolean;
    if (here) {
      released = await here.catch((err: unknown) => {
        throw this.translate('release', err);
      });
    } else {
      released = await this.run('release', async (c) => affected(await c.execute(this.sql.release, [name, owner, term])) === 1);
      // Only now, after the row says so, are waiters woken: one woken earlier would find it held.
      this.holder?.drop(name, owner, term);
    }
    if (released) this.noteLocal(name, { term, owner: null }, null);
    return released;
  }

  async read(name: string): Promise<Lease | null> {
    checkName('name', name);
    return this.run('read', async (c) => {
      const row = (await select(c, this.sql.readLive, [name]))[0];
      return row ? rowLease(row) : null;
    });
  }

  /** Delete every lease, fence and stream entry whose name starts with `prefix`, in one transaction; how many rows went. */
  async purge(prefix: string): Promise<number> {
    checkPurgePrefix(prefix);
    return await this.run('purge', (c) =>
      this.transaction(c, async () => {
        let n = 0;
        for (const text of this.sql.purge) n += affected(await c.execute(text, [prefix, prefix]));
        return n;
      }),
    );
  }

  async list(prefix = ''): Promise<Lease[]> {
    if (typeof prefix !== 'string') throw new InvalidArgumentError('prefix', 'expected a string');
    return this.run('list', async (c) => (await select(c, this.sql.list, [prefix, prefix])).map(rowLease));
  }

  async appendFenced(token: FencingToken, stream: string, payload: string, options?: AppendFencedOptions): Promise<number> {
    checkToken('token', token);
    checkName('stream', stream);
    checkPayload('payload', payload);
    const expectSeq = checkAppendOptions(options);
    if (expectSeq !== undefined) return this.appendExpecting(token, stream, payload, expectSeq);
    return this.run('appendFenced', async (c) => {
      // The one-statement paths do not look at the stream's owner: they are taken only for a
      // stream known to belong to the token's lease (entry 1 never changes once written). A
      // stream not known yet, or another lease's, goes to the procedure, which checks under lock.
      let fenceMoved = this.owners.get(stream) !== token.lease;
      const known = fenceMoved ? undefined : this.heads.get(stream);
      if (known !== undefined && !this.headBusy.has(stream)) {
        // The stream head this store last wrote or saw: the entry goes at head + 1, and the
        // statement reads only the fence row (see appendAt in sql.ts). One call per stream at a
        // time, so that a failed call never leaves a gap under a later one.
        this.headBusy.add(stream);
        try {
          const seq = known + 1;
          if (affected(await c.execute(this.sql.appendAt, [stream, seq, token.lease, token.term, payload, token.lease, token.term])) === 1) {
            this.noteHead(stream, seq);
            return seq;
          }
          fenceMoved = true; // the fence does not hold exactly this term: the general case
        } catch (err) {
          this.heads.delete(stream);
          if ((err as { errno?: unknown }).errno !== 1062 /* ER_DUP_ENTRY: someone else wrote there */) throw err;
        } finally {
          this.headBusy.delete(stream);
        }
      }
      const seq = await this.retrying(async () => {
        if (!fenceMoved) {
          // Usually one statement: the term is already the fence's (see appendFast in sql.ts).
          const [fast] = await c.execute(this.sql.appendFast, [stream, stream, token.lease, token.term, payload, token.lease, token.term]);
          const written = fast as { affectedRows?: number; insertId?: number };
          if (written.affectedRows === 1) {
            const n = Number(written.insertId);
            if (!Number.isSafeInteger(n) || n < 1) throw new Error(`the append to ${stream} returned no sequence number`);
            return n;
          }
        }
        // Otherwise one CALL, one round trip: the procedure locks the fence row, checks and
        // raises the term, and writes the entry in one transaction (see sql.ts).
        const row = (await callRows(c, this.sql.append, [token.lease, token.term, stream, payload]))[0];
        if (!row) throw new Error(`the append procedure reported nothing for stream ${stream}`);
        const first = row.first === null || row.first === undefined ? null : text(row.first);
        if (first !== null) this.noteOwner(stream, first);
        if (row.seq !== null && row.seq !== undefined) {
          const n = Number(row.seq);
          if (!Number.isSafeInteger(n) || n < 1) throw new Error(`stream head for ${stream} returned no sequence number`);
          return n;
        }
        const highest = row.highest === null || row.highest === undefined ? 0 : Number(row.highest);
        const issued = row.issued === null || row.issued === undefined ? 0 : Number(row.issued);
        // The procedure looks at the stream only with a good token (see sql.ts).
        if (first !== null && first !== token.lease) throw foreignStreamError(stream, first, token.lease);
        if (decideFence(token.term, highest, issued) === 'stale') throw reportStale(new StaleTermError(token.lease, token.term, highest), { stream });
        throw new InvalidArgumentError('token.term', `term ${token.term} was never issued for lease ${token.lease} (latest ${issued})`);
      });
      this.noteHead(stream, seq);
      return seq;
    });
  }

  /**
   * appendFenced with a compare-and-set on the stream's head: one statement when the term is the
   * fence's and the head is as expected; otherwise one transaction that locks the fence row and
   * the stream's head, and refuses (stale, never issued, another lease's stream, head moved)
   * before writing anything, fence included.
   */
  private appendExpecting(token: FencingToken, stream: string, payload: string, expectSeq: number): Promise<number> {
    return this.run('appendFenced', async (c) => {
      try {
        const values = [stream, expectSeq + 1, token.lease, token.term, payload, token.lease, token.term, expectSeq, stream, expectSeq, token.lease];
        if (affected(await c.execute(this.sql.appendExpect, values)) === 1) {
          this.noteHead(stream, expectSeq + 1);
          return expectSeq + 1;
        }
      } catch (err) {
        // ER_DUP_ENTRY: entry E + 1 exists, the head moved. A deadlock (racing writers at one
        // head) rolled the statement back. Either way the transaction below decides.
        const errno = (err as { errno?: unknown }).errno;
        if (typeof errno !== 'number' || !RETRYABLE.has(errno)) throw err;
      }
      const seq = await this.transaction(c, async () => {
        const fence = (await select(c, this.sql.lockFence, [token.lease]))[0];
        const highest = fence ? Number(fence.max_term) : 0;
        if (token.term < highest) throw reportStale(new StaleTermError(token.lease, token.term, highest), { stream });
        if (token.term > highest) {
          const issued = Number((await select(c, this.sql.issued, [token.lease]))[0]?.issued ?? 0);
          if (token.term > issued) throw new InvalidArgumentError('token.term', `term ${token.term} was never issued for lease ${token.lease} (latest ${issued})`);
        }
        const head = Number((await select(c, this.sql.lockHead, [stream]))[0]?.head ?? 0);
        const owner = (await select(c, this.sql.firstLease, [stream]))[0];
        if (owner && text(owner.lease) !== token.lease) throw foreignStreamError(stream, text(owner.lease), token.lease);
        if (head !== expectSeq) throw new VersionConflictError(stream, expectSeq, head);
        if (token.term > highest) await c.execute(fence ? this.sql.raiseFence : this.sql.insertFence, fence ? [token.term, token.lease] : [token.lease, token.term]);
        await c.execute(this.sql.insertEntry, [stream, head + 1, token.lease, token.term, payload]);
        return head + 1;
      });
      this.noteHead(stream, seq);
      this.noteOwner(stream, token.lease);
      return seq;
    });
  }

  /**
   * Remember `seq` as written to `stream` (committed: every position up to it is taken, since
   * entries are only ever written at the head + 1). A remembered head is never above the table's,
   * so writing at it + 1 either extends the stream without a gap or collides with an entry
   * someone else wrote. The most recently used streams are kept, up to HEADS_KEPT.
   */
  private noteHead(stream: string, seq: number): void {
    const known = this.heads.get(stream);
    this.heads.delete(stream);
    this.heads.set(stream, known === undefined || seq > known ? seq : known);
    if (this.heads.size > HEADS_KEPT) this.heads.delete(this.heads.keys().next().value!);
  }

  /** Remember the lease `stream` belongs to (most recently used kept, up to HEADS_KEPT). */
  private noteOwner(stream: string, lease: string): void {
    this.owners.delete(stream);
    this.owners.set(stream, lease);
    if (this.owners.size > HEADS_KEPT) this.owners.delete(this.owners.keys().next().value!);
  }

  async readStream(stream: string, options?: ReadStreamOptions): Promise<StreamEntry[]> {
    checkName('stream', stream);
    const { after, limit } = checkReadOptions(options);
    return this.run('readStream', async (c) => {
      const entries = (await select(c, this.sql.readStream, [stream, after, limit])).map((row) =>
        decodeStreamEntry('mysql', stream, { seq: row.seq, lease: text(row.lease), term: row.term, payload: text(row.payload), appendedAt: row.appended_at }),
      );
      // InnoDB makes a commit visible to other sessions before its redo log is flushed: a reader
      // can see an append that a crash of the server (kill -9) then loses, and a follower that
      // applied it would hold an entry the log no longer has (found by the chaos suite). A write
      // committed on the same connection after the read flushes the log up to it, so every entry
      // read is durable once it returns; a server that restarted meanwhile fails the connection
      // and nothing is returned. Only reads that found entries pay it.
      if (entries.length > 0) await c.query(this.sql.durabilityBarrier);
      return entries;
    });
  }

  /**
   * The stream's last entry: the primary key read backwards, one index probe. Like readStream, an
   * entry is returned only after the durability barrier on the same connection (a state cell's
   * value is its stream's last entry: a reader must not act on one a server crash then loses).
   */
  async readLast(stream: string): Promise<StreamEntry | null> {
    checkName('stream', stream);
    return this.run('readLast', async (c) => {
      const row = (await select(c, this.sql.readLast, [stream]))[0];
      if (!row) return null;
      const entry = decodeStreamEntry('mysql', stream, { seq: row.seq, lease: text(row.lease), term: row.term, payload: text(row.payload), appendedAt: row.appended_at });
      await c.query(this.sql.durabilityBarrier);
      return entry;
    });
  }

  /**
   * The stream's head and the server's `NOW(3)` (the clock of `appendedAt`), ms since the epoch,
   * in one statement. MySQL has no push for streams (no `watchStream`): a Follower polls.
   */
  async streamHead(stream: string): Promise<StreamHead> {
    checkName('stream', stream);
    const row = await this.run('streamHead', async (c) => (await select(c, this.sql.streamHead, [stream]))[0]);
    const seq = Number(row?.seq);
    const nowMs = Number(row?.now_ms);
    if (!Number.isSafeInteger(seq) || seq < 0 || !Number.isSafeInteger(nowMs)) {
      throw new StoreDataError(`mysql store ${this.endpoint}: unexpected stream head ${String(row?.seq)} at ${String(row?.now_ms)}`);
    }
    return { seq, nowMs };
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.watched.clear();
    this.stopPolling();
    // Blocked waits are killed on the server (from a pooled connection) and their connections
    // dropped; the hold session's end frees its wake locks, waking other stores' waiters.
    const wakers = [...this.wakers.values()];
    this.wakers.clear();
    await Promise.all([...wakers.map((w) => w.stop()), this.holder?.close()]);
    if (this.wakePool && this.wakePool !== this.pool) await this.wakePool.end().catch(() => {});
    if (this.ownsPool) await this.pool.end().catch(() => {});
  }

  // ---- internals ------------------------------------------------------------------------

  /**
   * Run `fn` on a pooled connection, after making sure the schema exists, within `timeoutMs`.
   * A timed-out call's connection is destroyed (its statement may still commit: "maybe").
   */
  private run<T>(operation: string, fn: (c: MysqlConnection) => Promise<T>): Promise<T> {
    if (this.closed) return Promise.reject(new ClosedError('mysql store'));
    return this.calls.run(operation, fn);
  }

  /** `fn`, run again when it lost a deadlock or an insert race (rolled back whole by the server). */
  private async retrying<T>(fn: () => Promise<T>): Promise<T> {
    for (let attempt = 1; ; attempt++) {
      try {
        return await fn();
      } catch (err) {
        if (await retryPause(err, attempt)) continue;
        throw err;
      }
    }
  }

  /** One transaction; a deadlock victim (rolled back whole by the server) is run again. */
  private async transaction<T>(c: MysqlConnection, fn: () => Promise<T>): Promise<T> {
    for (let attempt = 1; ; attempt++) {
      await c.query('START TRANSACTION');
      try {
        const result = await fn();
        await c.query('COMMIT');
        return result;
      } catch (err) {
        await c.query('ROLLBACK').catch(() => {});
        if (await retryPause(err, attempt)) continue;
        throw err;
      }
    }
  }

  private async createSchema(c: MysqlConnection): Promise<void> {
    // Serialize first use across processes; DDL commits implicitly, so the lock is a named lock.
    const waitS = Math.max(1, Math.ceil(this.timeoutMs / 1000));
    const got = (await select(c, 'SELECT GET_LOCK(?, ?) AS got', [this.sql.lockName, waitS]))[0];
    if (Number(got?.got) !== 1) throw new Error(`could not take the schema lock ${this.sql.lockName} within ${waitS} s`);
    try {
      await c.query(`CREATE TABLE IF NOT EXISTS ${this.sql.schemaTable} (\`key\` VARCHAR(64) NOT NULL PRIMARY KEY, value VARCHAR(255) NOT NULL) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4`);
      const v = (await select(c, `SELECT value FROM ${this.sql.schemaTable} WHERE \`key\` = 'version'`, []))[0];
      const version = v ? Number(text(v.value)) : 0;
      if (version > SCHEMA_VERSION) {
        throw new TenureError('INVALID_ARGUMENT', `mysql store ${this.endpoint}: schema version ${version} is newer than this tenure (${SCHEMA_VERSION}); upgrade tenure`);
      }
      if (version < SCHEMA_VERSION) {
        for (const statement of this.sql.schema) await c.query(statement);
        // Version 5: added only when missing (MySQL has no ADD COLUMN IF NOT EXISTS).
        const has = await select(c, 'SELECT 1 AS x FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ? AND COLUMN_NAME = ?', [
          this.sql.streamsTable,
          'appended_at',
        ]);
        if (has.length === 0) await c.query(this.sql.addAppendedAt);
        await c.execute(
          `INSERT INTO ${this.sql.schemaTable} (\`key\`, value) VALUES ('version', ?) ON DUPLICATE KEY UPDATE value = VALUES(value)`,
          [String(SCHEMA_VERSION)],
        );
      }
    } finally {
      await c.execute('SELECT RELEASE_LOCK(?)', [this.sql.lockName]).catch(() => {});
    }
  }

  private translate(operation: string, err: unknown): Error {
    if (err instanceof TenureError) return err;
    return new StoreUnavailableError(`mysql store ${this.endpoint}: ${operation} failed: ${describe(err)}`, { cause: err });
  }

  // ---- optional polling watch ------------------------------------------------------------

  /** warm() has run. */
  private warmed = false;

  private addWatch(name: string, listener: WatchListener, pollMs: number | undefined): Unsubscribe {
    checkName('name', name);
    if (typeof listener !== 'function') throw new InvalidArgumentError('listener', 'expected a function');
    if (this.closed) throw new ClosedError('mysql store');
    let w = this.watched.get(name);
    if (!w) {
      w = { listeners: new Set(), last: { term: 0, owner: null } };
      this.watched.set(name, w);
    }
    w.listeners.add(listener);
    this.startWakers();
    this.warm();
    if (pollMs !== undefined && !this.pollTimer) {
      this.pollTimer = setInterval(() => void this.poll(), pollMs);
      this.pollTimer.unref();
      void this.poll();
    }
    const entry = w;
    let done = false;
    return () => {
      if (done) return;
      done = true;
      entry.listeners.delete(listener);
      if (entry.listeners.size === 0 && this.watched.get(name) === entry) {
        this.watched.delete(name);
        const waker = this.wakers.get(name);
        if (waker) {
          this.wakers.delete(name);
          void waker.stop();
          this.startWakers();
        }
      }
      if (this.watched.size === 0) this.stopPolling();
    };
  }

  /**
   * A candidate that waits on push answers a release with an acquire and, on a win, a read of
   * the hand-over hint (LeaderElector): have two pooled connections open, with those statements
   * prepared, before the release comes, rather than pay a new connection's handshake or a first
   * execution's PREPARE round trip in the handoff (traced across processes: 3-7 ms when a call
   * of the takeover opened a connection). Once per store, in the background, best effort.
   */
  private warm(): void {
    if (this.warmed || this.closed) return;
    this.warmed = true;
    const hot = [this.sql.acquire, this.sql.readLive, this.sql.renew, this.sql.release];
    const one = (): Promise<void> =>
      this.run('warm', async (c) => {
        if (c.prepareStatement) for (const sql of hot) await c.prepareStatement(sql);
      });
    void Promise.all([one(), one()]).catch(() => {});
  }

  /** Give watched names without a wake connection one, up to wakeConnections. */
  private startWakers(): void {
    if (!this.wakeDeps || this.closed) return;
    for (const name of this.watched.keys()) {
      if (this.wakers.size >= this.wakeConnections) return;
      if (!this.wakers.has(name)) this.wakers.set(name, new Waker(name, this.wakeDeps));
    }
  }

  /** Read `name` on `c` and tell its watchers; true iff that was news. */
  private async pollOne(c: MysqlConnection, name: string): Promise<boolean> {
    return this.toldRow(name, (await select(c, this.sql.readAny, [name]))[0]);
  }

  /** Tell `name`'s watchers what its row (a readAny row) says; true iff that was news to them. */
  private toldRow(name: string, row: Row | undefined): boolean {
    const w = this.watched.get(name);
    if (!row || row.name === null || row.name === undefined || !w) return false;
    const live = Number(row.live) === 1;
    return this.advance(w, { term: decodeTerm('mysql', name, row.term), owner: live ? text(row.owner) : null }, live ? rowLease(row) : null);
  }

  private stopPolling(): void {
    if (this.pollTimer) clearInterval(this.pollTimer);
    this.pollTimer = null;
  }

  private async poll(): Promise<void> {
    if (this.polling || this.closed) return;
    this.polling = true;
    try {
      await this.run('watch', async (c) => {
        for (const name of [...this.watched.keys()]) {
          // A name whose wake connection waits needs no poll.
          if (this.wakers.get(name)?.blocked) continue;
          await this.pollOne(c, name);
        }
      });
    } catch {
      // Retried on the next tick; callers see failures on their own calls.
    } finally {
      this.polling = false;
    }
  }

  private noteLocal(name: string, state: { term: number; owner: string | null }, lease: Lease | null): void {
    const w = this.watched.get(name);
    if (w) this.advance(w, state, lease);
  }

  /**
   * Tell listeners iff `state` is newer than what they were last told; whether it was newer. A
   * free lease after a free lease of an older term is told too: someone held it in between (a
   * term is issued only by an acquire), which a watcher may have learnt by its own acquire and
   * not by this watch (a candidate that lost to it waits for the release). Keeping quiet there
   * left a transferTo's named node waiting out a TTL for a release it was never told of.
   */
  private advance(w: Watched, state: { term: number; owner: string | null }, lease: Lease | null): boolean {
    const last = w.last;
    const newer = state.term > last.term || (state.term === last.term && last.owner !== null && state.owner === null);
    if (!newer) return false;
    w.last = state;
    // Term 0 with no holder is a row never acquired: nothing to tell.
    if (last.owner === null && state.owner === null && state.term === 0) return true;
    for (const l of [...w.listeners]) queueMicrotask(() => l(lease));
    return true;
  }
}

async function select(c: MysqlConnection, sql: string, values: MysqlValue[]): Promise<Row[]> {
  const [rows] = await c.execute(sql, values);
  return rows as Row[];
}

/** The rows of the first result set of a CALL (mysql2 returns [[rows…], header] for it). */
async function callRows(c: MysqlConnection, sql: string, values: MysqlValue[]): Promise<Row[]> {
  const [result] = await c.execute(sql, values);
  if (Array.isArray(result) && Array.isArray(result[0])) return result[0] as Row[];
  throw new Error('the stored procedure returned no result set');
}

function affected(result: [unknown, unknown]): number {
  return Number((result[0] as { affectedRows?: unknown }).affectedRows ?? 0);
}

/** VARBINARY columns come back as Buffers. */
function text(v: unknown): string {
  return Buffer.isBuffer(v) ? v.toString('utf8') : String(v);
}

/** A lease row in the relative frame of the statement: now = 0, expiry = remaining ms. */
function toRow(row: Row): LeaseRow {
  const name = text(row.name);
  return {
    name,
    owner: row.owner === null || row.owner === undefined ? null : text(row.owner),
    term: decodeTerm('mysql', name, row.term),
    expiresAtMs: Number(row.remaining_us) / 1000,
    ttlMs: Number(row.ttl_ms),
    meta: decodeMeta(row.meta === null || row.meta === undefined ? null : text(row.meta)),
  };
}

function rowLease(row: Row): Lease {
  const r = toRow(row);
  if (!isLive(r, 0)) return { ...toLease({ ...r, owner: r.owner ?? '' }, 0), remainingMs: 0 };
  const lease = toLease(r, 0);
  return { ...lease, remainingMs: Math.floor(lease.remainingMs) };
}

function parseUrl(url: string): URL {
  try {
    return new URL(url);
  } catch {
    throw new InvalidArgumentError('url', `expected mysql://user:password@host:port/database, got an unparsable URL`);
  }
}

/** host:port of a mysql2 pool, read from its config where mysql2 keeps it. */
function poolEndpoint(pool: MysqlPool): string {
  const cfg = (pool as { pool?: { config?: { connectionConfig?: { host?: unknown; port?: unknown } } } }).pool?.config?.connectionConfig;
  const host = typeof cfg?.host === 'string' ? cfg.host : 'localhost';
  const port = typeof cfg?.port === 'number' ? cfg.port : 3306;
  return `${host}:${port}`;
}

/** A connection-level failure (the connection cannot be reused), as opposed to a server error. */
function isFatal(err: unknown): boolean {
  const e = err as { fatal?: unknown; errno?: unknown; sqlState?: unknown };
  if (e?.fatal === true) return true;
  return typeof e?.sqlState !== 'string';
}

function describe(err: unknown): string {
  if (err instanceof AggregateError && err.errors.length > 0) return err.errors.map(describe).join('; ');
  if (err instanceof Error) {
    const code = (err as Error & { code?: unknown }).code;
    const msg = err.message || (typeof code === 'string' ? code : err.name);
    return typeof code === 'string' && !msg.includes(code) ? `${msg} (${code})` : msg;
  }
  return String(err);
}

function checkCount(field: string, value: unknown, min: number, max: number): number {
  if (typeof value !== 'number' || !Number.isInteger(value) || value < min || value > max) {
    throw new InvalidArgumentError(field, `expected an integer in [${min}, ${max}], got ${String(value)}`);
  }
  return value;
}
