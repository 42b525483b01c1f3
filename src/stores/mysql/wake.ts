/**
 * Push hand-over for the MySQL store, with MariaDB/MySQL user-level locks (`GET_LOCK`): a hint,
 * never a correctness mechanism. The lease row stays the single source of truth; a wake lock only
 * makes a waiting candidate read it sooner.
 *
 * - Holder: while this store holds a lease, one dedicated connection (the store's "hold" session)
 *   holds the lease's wake lock, and releases it right after the lease's release statement. One
 *   session holds the wake locks of every lease the store holds (MariaDB >= 10.0.2 and MySQL >= 5.7
 *   let a session hold many). A lost session frees them all: waiters wake early, read the row, find
 *   the lease still held and go back to waiting (with a growing pause, see below).
 * - Waiter: each watched name has its own connection blocked in `GET_LOCK(wake lock, WAIT_S)` (a
 *   blocked connection can wait for one lock only), inside one CALL (`wake_wait`): when it
 *   returns, the server releases the lock at once (so the next waiter, and the next holder, can
 *   take it) and reads the lease row, in the same round trip; what it reads is what watchers are
 *   told. A wake that brought no news (the lease is still held by
 *   whom watchers were told: its holder does not hold the wake lock, e.g. it has just acquired and
 *   not taken it yet, its session was lost, or it is a store without wake locks) is followed by a
 *   pause that doubles from MIN_PAUSE_MS up to the fallback poll interval before waiting again,
 *   so a waiter never spins; `nudge` (the store's acquire lost to a holder, which takes the lock
 *   next) ends such a pause and starts the pauses afresh. A lost or killed wake connection falls
 *   back to polling the row through the pool at that interval until a new connection is open.
 * - Lock names: `tenure-wake:` and 43 characters of a SHA-256 over the database, the table
 *   prefix and the lease name (user-level locks are server-wide and at most 64 characters long),
 *   so any name, however long or hostile, fits and never meets another database's or prefix's.
 */
import { createHash } from 'node:crypto';
import type { MysqlConnection } from './driver.js';

/** Seconds a waiter blocks in one GET_LOCK before it reads the row anyway and waits again. */
const WAIT_S = 30;
/** Seconds of a waiter's first GET_LOCK after news (doubling to WAIT_S). */
const FIRST_WAIT_S = 0.05;
/** First pause after a wake that brought no news, ms (doubling to the fallback poll interval, at most MAX_PAUSE_MS). */
const MIN_PAUSE_MS = 10;
const MAX_PAUSE_MS = 1000;
/** Seconds a holder waits for its wake lock while a waiter briefly holds it (a waiter holds it one round trip). */
const HOLD_WAIT_S = 0.05;
/** First pause before a holder tries again to take a wake lock it could not take, ms (doubling to 1 s). */
const HOLD_RETRY_MS = 5;

/** The wake lock of lease `name` in `database` under table prefix `prefix`: 55 characters. */
export function wakeLockName(database: string, prefix: string, name: string): string {
  const digest = createHash('sha256').update(`${database}\0${prefix}\0${name}`).digest('base64url');
  return `tenure-wake:${digest}`;
}

/** A dedicated connection: its server thread id (for KILL) and database. */
interface Session {
  readonly c: MysqlConnection;
  readonly id: number;
  readonly db: string;
}

export interface WakeDeps {
  readonly tablePrefix: string;
  /** A dedicated connection (not from the store's call pool). */
  checkout(): Promise<MysqlConnection>;
  /** KILL CONNECTION `id` from another connection; best effort. */
  kill(id: number): Promise<void>;
  /** Read lease `name` through the pool and tell its watchers; true iff they were told something new. */
  poll(name: string): Promise<boolean>;
  /** Tell `name`'s watchers the row read on a wake connection; true iff that was news. */
  told(name: string, row: Record<string, unknown> | undefined): boolean;
  /** The readAny statement (one `?`: the name). */
  readonly readAny: string;
  /** The wakeWait CALL (`?`: the wake lock, seconds, the name). */
  readonly wakeWait: string;
  /**
   * Statements `releaseHere`'s callers run on the hold session: prepared there once it is open
   * (after its first take), so that a release, often the one a process makes, is one round trip.
   */
  readonly holdStatements?: readonly string[];
  /** Fallback poll interval, ms. */
  readonly pollMs: number;
  /** Bound on a statement on a dedicated connection other than the blocking GET_LOCK, ms. */
  readonly timeoutMs: number;
}

async function openSession(deps: WakeDeps): Promise<Session> {
  const c = await deps.checkout();
  // Failures reach the caller through its statements; an unheard 'error' event would end the process.
  c.on?.('error', () => {});
  try {
    const [rows] = await within(c.query('SELECT CONNECTION_ID() AS id, DATABASE() AS db'), deps.timeoutMs);
    const row = (rows as Record<string, unknown>[])[0];
    const id = Number(row?.id);
    if (!Number.isSafeInteger(id)) throw new Error('no connection id');
    return { c, id, db: row?.db === null || row?.db === undefined ? '' : String(row.db) };
  } catch (err) {
    c.destroy();
    throw err;
  }
}

/** `p`, or a rejection after `ms` (the caller then drops the connection). */
function within<T>(p: Promise<T>, ms: number): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    const t = setTimeout(() => reject(new Error(`no answer within ${ms} ms`)), ms);
    t.unref();
    p.then(
      (v) => {
        clearTimeout(t);
        resolve(v);
      },
      (err: unknown) => {
        clearTimeout(t);
        reject(err);
      },
    );
  });
}

function gotLock(result: [unknown, unknown]): number | null {
  const v = (result[0] as Record<string, unknown>[])[0]?.got;
  return v === null || v === undefined ? null : Number(v);
}

/** The holder side: one session holding the wake lock of every lease this store holds. */
export class WakeHolder {
  private session: Promise<Session> | null = null;
  /**
   * Leases this store holds (name -> the holder's term and owner): their wake locks are wanted.
   * The owner matters where one store serves several candidates of a name (electors of one group
   * in one process): a call of another owner must not let go of the holder's wake lock.
   */
  private readonly wanted = new Map<string, { readonly term: number; readonly owner: string }>();
  /** Wake locks the current session holds. */
  private readonly locked = new Set<string>();
  /** Names with a take queued or waiting to be tried again. */
  private readonly retries = new Map<string, { timer: NodeJS.Timeout | null; delay: number }>();
  /** Operations on the session, one at a time, in order. */
  private chain: Promise<void> = Promise.resolve();
  /** Operations queued on `chain` and not yet done. */
  private queued = 0;
  /** The session, once open (null while opening, lost or closed). */
  private current: Session | null = null;
  private closed = false;

  constructor(private readonly deps: WakeDeps) {}

  /** `owner` of this store now holds `name` at `term`: take its wake lock (in the background). */
  hold(name: string, term: number, owner: string): void {
    if (this.closed) return;
    const had = this.wanted.get(name);
    this.wanted.set(name, { term, owner });
    if (had === undefined || !this.locked.has(name)) this.sync(name);
  }

  /**
   * `owner`'s hold of `name` (at `term`) is over: release its wake lock, unless what this store
   * holds is another owner's or another term's.
   */
  drop(name: string, owner: string, term: number): void {
    const had = this.wanted.get(name);
    if (had === undefined || had.owner !== owner || had.term !== term) return;
    this.wanted.delete(name);
    this.sync(name);
  }

  /** `name` is held by `holder` now (an acquire or read here saw it): a hold of this store's that is not it is over. */
  heldBy(name: string, holder: { readonly owner: string; readonly term: number }): void {
    const had = this.wanted.get(name);
    if (had === undefined || (had.owner === holder.owner && had.term === holder.term)) return;
    this.wanted.delete(name);
    this.sync(name);
  }

  /**
   * Release lease `name` (held at `term`) and its wake lock in one round trip on the session that
   * holds the lock, so that waiters wake as the release commits: `call` runs the release
   * procedure there with the lock's name and says whether the lease was released. Null when that
   * cannot be done at once (the lock is not held here, or the session is busy or not open): the
   * caller then releases through the pool and calls `drop`. A failed call ends the session (its
   * locks go with it, waking the waiters) and rejects: the release may or may not have committed.
   */
  releaseHere(name: string, owner: string, term: number, call: (c: MysqlConnection, lock: string) => Promise<boolean>): Promise<boolean> | null {
    const s = this.current;
    const had = this.wanted.get(name);
    if (this.closed || s === null || this.queued > 0 || had?.owner !== owner || had.term !== term || !this.locked.has(name)) return null;
    this.wanted.delete(name);
    this.retries.delete(name);
    const released = this.enqueue(async () => {
      this.locked.delete(name);
      try {
        return await within(call(s.c, wakeLockName(s.db, this.deps.tablePrefix, name)), this.deps.timeoutMs);
      } catch (err) {
        this.lost(s);
        throw err;
      }
    });
    return released;
  }

  /** Names whose wake lock the session holds now (tests and diagnostics). */
  heldNames(): string[] {
    return [...this.locked];
  }

  async close(): Promise<void> {
    this.closed = true;
    this.wanted.clear();
    for (const r of this.retries.values()) if (r.timer) clearTimeout(r.timer);
    this.retries.clear();
    const s = this.session;
    this.session = null;
    this.current = null;
    this.locked.clear();
    // Ending the session frees every wake lock it holds: waiters wake and read the rows.
    if (s) await s.then((x) => x.c.destroy(), () => {});
  }

  private sync(name: string): void {
    if (this.closed) return;
    const retry = this.retries.get(name);
    if (retry?.timer) return; // a take is already scheduled; it syncs to what is wanted then
    void this.enqueue(() => this.apply(name)).catch(() => {});
  }

  /** Run `op` on the session after the operations queued before it. */
  private enqueue<T>(op: () => Promise<T>): Promise<T> {
    this.queued++;
    const result = this.chain.then(op).finally(() => this.queued--);
    this.chain = result.then(
      () => {},
      () => {},
    );
    return result;
  }

  private async apply(name: string): Promise<void> {
    if (this.closed) return;
    const want = this.wanted.has(name);
    if (want === this.locked.has(name)) {
      if (!want) this.retries.delete(name);
      return;
    }
    let s: Session;
    try {
      s = await this.open();
    } catch {
      if (want) this.again(name);
      return;
    }
    const lock = wakeLockName(s.db, this.deps.tablePrefix, name);
    try {
      if (want) {
        const got = gotLock(await within(s.c.query('SELECT GET_LOCK(?, ?) AS got', [lock, HOLD_WAIT_S]), this.deps.timeoutMs));
        if (got === 1) {
          this.retries.delete(name);
          this.locked.add(name);
          // Dropped while the take was on its way: release it now.
          if (!this.wanted.has(name)) this.sync(name);
        } else this.again(name);
      } else {
        this.locked.delete(name);
        this.retries.delete(name);
        await within(s.c.query('SELECT RELEASE_LOCK(?) AS got', [lock]), this.deps.timeoutMs);
      }
    } catch {
      this.lost(s);
      if (this.wanted.has(name)) this.again(name);
    }
  }

  /** Try to take `name`'s wake lock again later, with a doubling pause. */
  private again(name: string): void {
    if (this.closed || !this.wanted.has(name)) return;
    const r = this.retries.get(name) ?? { timer: null, delay: HOLD_RETRY_MS };
    if (r.timer) return;
    r.timer = setTimeout(() => {
      r.timer = null;
      this.sync(name);
    }, r.delay);
    r.timer.unref();
    r.delay = Math.min(r.delay * 2, 1000);
    this.retries.set(name, r);
  }

  private open(): Promise<Session> {
    if (!this.session) {
      const p = openSession(this.deps);
      this.session = p;
      p.then(
        (s) => {
          if (this.session === p && !this.closed) this.current = s;
          this.prepareHeld(s);
          // Lost later (server restart, KILL): every wake lock went with it; take them again.
          const onLost = (): void => this.lost(s);
          s.c.on?.('end', onLost);
          s.c.on?.('error', onLost);
        },
        () => {
          if (this.session === p) this.session = null;
        },
      );
    }
    return this.session;
  }

  /**
   * Prepare the hold statements on a new session, queued behind the take that opened it: a first
   * release there would otherwise pay a PREPARE round trip (traced: 0.5-0.8 ms of a hand-off).
   * A release that comes while this is queued goes through the pool (`releaseHere` is null).
   * Best effort: a failure leaves the session as it is.
   */
  private prepareHeld(s: Session): void {
    const sqls = this.deps.holdStatements ?? [];
    const prepare = s.c.prepareStatement?.bind(s.c);
    if (!prepare || sqls.length === 0) return;
    void this.enqueue(async () => {
      if (this.current !== s) return;
      for (const sql of sqls) await within(prepare(sql), this.deps.timeoutMs);
    }).catch(() => {
      // Left to `execute`, which prepares on first use as before. Not a reason to end the session:
      // an error that stays (a dropped procedure) would then open a session after session, and
      // a session that stopped answering is found by the next take or release, each bounded.
    });
  }

  /** The session failed: drop it, and take every wanted wake lock again on a new one. */
  private lost(s: Session): void {
    void this.session?.then((cur) => {
      if (cur !== s) return;
      this.session = null;
      this.current = null;
      s.c.destroy();
      this.locked.clear();
      for (const name of this.wanted.keys()) this.again(name);
    }, () => {});
  }
}

/** The waiter side for one watched name: a connection blocked in GET_LOCK on its wake lock. */
export class Waker {
  private stopped = false;
  private session: Session | null = null;
  private wakeUp: (() => void) | null = null;
  /** Cuts a no-news pause short (see `nudge`); null while not in one. */
  private cutPause: (() => void) | null = null;
  /** Set by `nudge`: the next wait starts afresh (shortest pause and wait). */
  private nudged = false;
  /** Rejects at stop(): a dropped connection's pending statement may never be answered. */
  private readonly stopping: Promise<never>;
  private stopNow!: (err: Error) => void;
  readonly done: Promise<void>;
  /** Wakes seen (GET_LOCK returned the lock), for tests and diagnostics. */
  wakes = 0;
  /** True while its connection is blocked in GET_LOCK. */
  blocked = false;

  constructor(
    readonly name: string,
    private readonly deps: WakeDeps,
  ) {
    this.stopping = new Promise<never>((_, reject) => (this.stopNow = reject));
    this.stopping.catch(() => {});
    this.done = this.loop();
  }

  /**
   * The store learnt, by a call of its own, that `name` has a (new) holder, which takes its wake
   * lock right after its acquire: wait on it now rather than after a no-news pause. Those pauses
   * double while the lock is free (up to a second, e.g. through a long spell with the lease free),
   * and a release that lands during one is heard only when it ends: a candidate that lost to a
   * holder that gives up at once (a quick hand-off after a start) would hear of it a second late.
   * A waiter blocked in GET_LOCK, or polling after a lost connection, is left as it is.
   */
  nudge(): void {
    if (this.stopped) return;
    this.nudged = true;
    this.cutPause?.();
  }

  /** Stop waiting: the blocked GET_LOCK is killed on the server and the connection dropped. */
  async stop(): Promise<void> {
    if (this.stopped) return this.done;
    this.stopped = true;
    this.stopNow(new Error('stopped'));
    this.wakeUp?.();
    const s = this.session;
    if (s) {
      await this.deps.kill(s.id).catch(() => {});
      s.c.destroy();
    }
    await this.done;
  }

  private async loop(): Promise<void> {
    const maxPause = Math.min(this.deps.pollMs, MAX_PAUSE_MS);
    let pause = MIN_PAUSE_MS;
    // After news the waits are short, doubling to WAIT_S: a new holder takes the wake lock only
    // after its acquire, and a wait that times out reads the row, so watchers learn of it soon.
    let waitS = FIRST_WAIT_S;
    while (!this.stopped) {
      let s = this.session;
      try {
        if (!s) {
          const opening = openSession(this.deps);
          s = await Promise.race([opening, this.stopping]).catch((err: unknown) => {
            void opening.then((x) => x.c.destroy(), () => {});
            throw err;
          });
          this.session = s;
          // Whatever changed while no connection waited is read now.
          if (this.deps.told(this.name, await this.read(s))) {
            pause = MIN_PAUSE_MS;
            waitS = FIRST_WAIT_S;
          }
        }
        const lock = wakeLockName(s.db, this.deps.tablePrefix, this.name);
        this.blocked = true;
        let row: Record<string, unknown> | undefined;
        try {
          // One round trip: wait; when woken, the server lets the lock go (to the next waiter, and
          // the next holder) and reads the row at once; on a timeout it reads the row too.
          const [result] = await this.ask(s.c.execute(this.deps.wakeWait, [lock, waitS, this.name]), waitS * 1000 + this.deps.timeoutMs);
          row = Array.isArray(result) && Array.isArray(result[0]) ? (result[0] as Record<string, unknown>[])[0] : undefined;
        } finally {
          this.blocked = false;
        }
        if (this.stopped) break;
        if (!row) throw new Error('the wake_wait procedure reported nothing');
        const got = row.got === null || row.got === undefined ? null : Number(row.got);
        if (got === null) throw new Error('GET_LOCK was interrupted');
        if (got === 1) this.wakes++;
        if (this.deps.told(this.name, row)) {
          pause = MIN_PAUSE_MS;
          waitS = FIRST_WAIT_S;
        } else if (got === 1) {
          // The lock was free and nothing changed: the lease is free, or its holder does not hold
          // the wake lock (yet). Pause before trying again, so a waiter never spins.
          // A nudge (a holder is on its way) ends the pause and starts the next afresh.
          if (!this.nudged) await this.pauseFor(pause);
          if (this.nudged) {
            this.nudged = false;
            pause = MIN_PAUSE_MS;
            waitS = FIRST_WAIT_S;
          } else pause = Math.min(pause * 2, maxPause);
        } else {
          // Timed out: a holder holds the wake lock. Wait longer next time.
          pause = MIN_PAUSE_MS;
          waitS = Math.min(waitS * 2, WAIT_S);
        }
      } catch {
        if (this.stopped) break;
        // Lost (killed, server gone): poll through the pool until a new connection waits again.
        if (s) s.c.destroy();
        this.session = null;
        await this.deps.poll(this.name).catch(() => false);
        await this.sleep(this.deps.pollMs);
      }
    }
    const s = this.session;
    this.session = null;
    s?.c.destroy();
  }

  private async read(s: Session): Promise<Record<string, unknown> | undefined> {
    const [rows] = await this.ask(s.c.execute(this.deps.readAny, [this.name]), this.deps.timeoutMs);
    return (rows as Record<string, unknown>[])[0];
  }

  /** A statement's answer, within `ms`, unless stopped first. */
  private ask<T>(p: Promise<T>, ms: number): Promise<T> {
    return Promise.race([within(p, ms), this.stopping]);
  }

  /** A no-news pause: `ms`, or until `nudge` or `stop`. */
  private async pauseFor(ms: number): Promise<void> {
    const slept = this.sleep(ms);
    this.cutPause = this.wakeUp;
    try {
      await slept;
    } finally {
      this.cutPause = null;
    }
  }

  private sleep(ms: number): Promise<void> {
    return new Promise<void>((resolve) => {
      const t = setTimeout(() => {
        this.wakeUp = null;
        resolve();
      }, ms);
      t.unref();
      this.wakeUp = () => {
        clearTimeout(t);
        this.wakeUp = null;
        resolve();
      };
    });
  }

  /** Its connection's server thread id while it has one (tests: KILL it). */
  threadId(): number | null {
    return this.session?.id ?? null;
  }
}
