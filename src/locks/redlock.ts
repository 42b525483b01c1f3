/**
 * Redlock: a lock by quorum over N independent Redis servers (not replicas of each other),
 * compatible with node-redlock (`redlock` on npm) and fenced by a generation clock.
 *
 * One acquisition attempt:
 *  1. Send `SET resource value NX PX ttl` to every server at once (value: 16 random bytes in hex,
 *     the key: the resource name as given — exactly what node-redlock writes, so the two exclude
 *     each other). Each server gets `instanceTimeoutMs` to answer; silence counts as "no".
 *  2. With at least floor(N/2)+1 grants, the lock is valid until
 *        start + ttl − drift,   drift = round(driftFactor × ttl) + driftConstantMs
 *     where `start` is when the requests were sent (safety rule 2): `validity = ttl − elapsed − drift`.
 *     The drift term covers the servers' clocks running fast relative to ours (driftFactor 0.01 =
 *     1 %) and Redis's 1 ms expiry precision (driftConstantMs 2, as node-redlock).
 *  3. The fencing token comes from the generation clock (redlock-fencing.ts); by default the
 *     quorum counter: every server's acquire script bumps its own counter, the token is the
 *     highest of a majority's and is written back to a majority before the lock is returned.
 *  4. Otherwise the value is deleted everywhere by compare-and-delete and the attempt is retried
 *     after retryDelayMs ± retryJitterMs, until `waitMs` or the caller's signal ends the wait.
 *
 * While held, the lock is extended every ttl/3 (compare-and-pexpire on every server; a quorum of
 * successes moves the validity to send time + ttl − drift). `handle.signal` aborts when the
 * validity ends before an extension reached quorum, or as soon as a quorum can no longer be
 * reached because the key is gone or taken on too many servers. `handle.remainingMs()` reads the
 * validity left at any moment.
 *
 * Redlock is safe only under its timing assumptions; a paused holder can act after its lock
 * expired. Fencing tokens make that harmless where writes are checked (docs/redis.md).
 */
import { randomBytes } from 'node:crypto';
import {
  InvalidArgumentError,
  LockTimeoutError,
  NotLeaderError,
  StoreDataError,
  TypedEmitter,
  checkMs,
  checkName,
  checkTtl,
  limits,
  makeToken,
  sleep,
  systemClock,
  systemRandom,
  timingDefaults,
} from '../core/index.js';
import type { Clock, FencingToken, Random } from '../core/index.js';
import type { Redis } from 'ioredis';
import { RedlockInstance } from './redlock-instance.js';
import { counterExhausted } from './redlock-instance.js';
import type { InstanceReply, QuorumKeys, QuorumReply } from './redlock-instance.js';

/** A quorum-counter reply from a server whose counter can still grow. */
type CountedReply = Exclude<QuorumReply, { kind: 'exhausted' }>;
import { quorumCounter } from './redlock-fencing.js';
import type { GenerationClock, GenerationContext } from './redlock-fencing.js';
import type { AcquireOptions, LockHandle, LockHandleEvents } from './lock.js';
import type { DeposedReason } from '../election/index.js';

/** Defaults, in one place (README table). */
export const redlockDefaults = {
  /** Lock time to live, ms. */
  ttlMs: timingDefaults.ttlMs,
  /** Fraction of the TTL allowed for clock drift between us and the servers. */
  driftFactor: 0.01,
  /** Added to the drift: Redis expires with 1 ms precision, plus 1 ms for rounding. */
  driftConstantMs: 2,
  /** Base wait between attempts, ms. */
  retryDelayMs: 200,
  /** The wait varies by up to ± this much, so competing clients do not retry in lockstep, ms. */
  retryJitterMs: 100,
} as const;

export interface RedlockOptions {
  /** The independent Redis servers, usually 3 or 5 (an odd number tolerates the most failures). */
  clients: readonly Redis[];
  /** Default TTL of locks, ms (10000). */
  ttlMs?: number;
  driftFactor?: number;
  driftConstantMs?: number;
  retryDelayMs?: number;
  retryJitterMs?: number;
  /** How long each server gets to answer one request, ms. Default: ttl/20, clamped to [10, 200]. */
  instanceTimeoutMs?: number;
  /**
   * Where fencing tokens come from. Default: `quorumCounter()` (a counter on every server, the
   * token from a majority; one more parallel round trip). `redisCounter({ instance: 0 })` keeps it
   * on one server, in the same round trip, but then that server must be up for any lock.
   */
  fencing?: GenerationClock;
  /** Extend automatically while held (default true). */
  autoExtend?: boolean;
  /** Disconnect the clients on close() (openRedlock sets it for the clients it made). */
  ownsClients?: boolean;
  clock?: Clock;
  random?: Random;
}

export interface RedlockAcquireOptions extends AcquireOptions {
  /** This lock's TTL, ms (default: the Redlock's ttlMs). */
  ttlMs?: number;
  /** Extend automatically while held (default: the Redlock's autoExtend). */
  autoExtend?: boolean;
}

/** A held Redlock. `token` is the fencing token every write made under the lock must carry. */
export interface RedlockHandle extends LockHandle {
  readonly resource: string;
  /** The random value stored at the key on the servers. */
  readonly value: string;
  readonly ttlMs: number;
  /** Validity left now, ms (0 once lost or released). Safe to act only while it is comfortably > 0. */
  remainingMs(): number;
  /** Extend now (also done automatically). Resolves true when a quorum extended before the validity ended. */
  extend(ttlMs?: number): Promise<boolean>;
}

/** A lock was not acquired within its wait; the message says what the servers answered last. */
export class RedlockTimeoutError extends LockTimeoutError {
  readonly lastAttempt: string;
  constructor(resource: string, waitMs: number, lastAttempt: string) {
    super(resource, waitMs);
    this.lastAttempt = lastAttempt;
    this.message = `${this.message}: ${lastAttempt}`;
  }
}

interface Attempt {
  readonly handle?: RedlockHandle;
  readonly reason: string;
}

export class Redlock implements AsyncDisposable {
  readonly instances: readonly RedlockInstance[];
  /** floor(N/2) + 1. */
  readonly quorum: number;
  readonly fencing: GenerationClock;
  private readonly options: Required<Pick<RedlockOptions, 'ttlMs' | 'driftFactor' | 'driftConstantMs' | 'retryDelayMs' | 'retryJitterMs' | 'autoExtend'>>;
  private readonly instanceTimeoutMs: number | undefined;
  private readonly clock: Clock;
  private readonly random: Random;
  private readonly ownsClients: boolean;
  private readonly held = new Set<HeldRedlock>();
  private closed = false;

  constructor(options: RedlockOptions) {
    if (!Array.isArray(options.clients) || options.clients.length === 0) {
      throw new InvalidArgumentError('clients', 'expected at least one Redis client (usually 3 or 5 independent servers)');
    }
    this.clock = options.clock ?? systemClock;
    this.random = options.random ?? systemRandom;
    this.instances = options.clients.map((c) => new RedlockInstance(c, this.clock));
    this.quorum = Math.floor(this.instances.length / 2) + 1;
    const driftFactor = options.driftFactor ?? redlockDefaults.driftFactor;
    if (typeof driftFactor !== 'number' || !(driftFactor >= 0 && driftFactor < 0.5)) {
      throw new InvalidArgumentError('driftFactor', `must be a number in [0, 0.5), got ${String(driftFactor)}`);
    }
    this.options = {
      ttlMs: checkTtl('ttlMs', options.ttlMs ?? redlockDefaults.ttlMs),
      driftFactor,
      driftConstantMs: checkMs('driftConstantMs', options.driftConstantMs ?? redlockDefaults.driftConstantMs, 0, 60_000),
      retryDelayMs: checkMs('retryDelayMs', options.retryDelayMs ?? redlockDefaults.retryDelayMs, 1, 600_000),
      retryJitterMs: checkMs('retryJitterMs', options.retryJitterMs ?? redlockDefaults.retryJitterMs, 0, 600_000),
      autoExtend: options.autoExtend ?? true,
    };
    this.instanceTimeoutMs = options.instanceTimeoutMs === undefined ? undefined : checkMs('instanceTimeoutMs', options.instanceTimeoutMs, 1, 600_000);
    this.fencing = options.fencing ?? quorumCounter();
    if (this.fencing.inScript && this.fencing.inScript.instance >= this.instances.length) {
      throw new InvalidArgumentError('fencing', `the counter is on server ${this.fencing.inScript.instance}, but there are ${this.instances.length} servers`);
    }
    this.ownsClients = options.ownsClients ?? false;
  }

  /** The drift subtracted from a lock's validity, ms. */
  driftMs(ttlMs: number): number {
    return Math.round(this.options.driftFactor * ttlMs) + this.options.driftConstantMs;
  }

  /** The per-server timeout for a lock of `ttlMs`, ms. */
  timeoutFor(ttlMs: number): number {
    return this.instanceTimeoutMs ?? Math.min(200, Math.max(10, Math.floor(ttlMs / 20)));
  }

  /** A lock on `resource` with the same shape as `store.lock(name)`: `acquire({ waitMs, signal })` and `using(fn)`. */
  lock(resource: string, options: { ttlMs?: number; autoExtend?: boolean } = {}): RedlockLock {
    return new RedlockLock(this, checkName('resource', resource), options);
  }

  /**
   * Acquire `resource`, retrying until `waitMs` passes (RedlockTimeoutError, code LOCK_TIMEOUT,
   * naming what the servers answered) or `signal` aborts (rejects with its reason). Without either
   * it waits as long as it takes.
   */
  async acquire(resource: string, options: RedlockAcquireOptions = {}): Promise<RedlockHandle> {
    checkName('resource', resource);
    if (this.closed) throw new InvalidArgumentError('redlock', 'closed');
    const ttlMs = checkTtl('ttlMs', options.ttlMs ?? this.options.ttlMs);
    const waitMs = options.waitMs === undefined ? undefined : checkMs('waitMs', options.waitMs, 0, limits.ttlMaxMs);
    const autoExtend = options.autoExtend ?? this.options.autoExtend;
    const { signal } = options;
    const started = this.clock.now();
    for (;;) {
      if (signal?.aborted) throw signal.reason;
      const attempt = await this.attempt(resource, ttlMs, autoExtend);
      if (attempt.handle) {
        if (signal?.aborted) {
          await attempt.handle.release();
          throw signal.reason;
        }
        return attempt.handle;
      }
      const elapsed = this.clock.now() - started;
      if (waitMs !== undefined && elapsed >= waitMs) throw new RedlockTimeoutError(resource, waitMs, attempt.reason);
      const jitter = Math.round((this.random.next() * 2 - 1) * this.options.retryJitterMs);
      let delay = Math.max(1, this.options.retryDelayMs + jitter);
      if (waitMs !== undefined) delay = Math.min(delay, waitMs - elapsed);
      await sleep(this.clock, delay, signal);
    }
  }

  /** Acquire, run `fn` with the handle (watch `handle.signal`), release whatever happens. */
  async using<T>(resource: string, fn: (handle: RedlockHandle) => Promise<T> | T, options?: RedlockAcquireOptions): Promise<T> {
    const handle = await this.acquire(resource, options);
    try {
      return await fn(handle);
    } finally {
      await handle.release();
    }
  }

  /** Release every lock still held; disconnect the clients if this Redlock made them. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    await Promise.all([...this.held].map((h) => h.release()));
    if (this.ownsClients) for (const i of this.instances) i.client.disconnect();
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }

  // ---- one attempt ------------------------------------------------------------------------

  private async attempt(resource: string, ttlMs: number, autoExtend: boolean): Promise<Attempt> {
    const value = randomBytes(16).toString('hex');
    const timeoutMs = this.timeoutFor(ttlMs);
    const counter = this.fencing.inScript;
    const quorumSpec = this.fencing.quorum;
    const quorumKeys = quorumSpec?.keys(resource);
    const start = this.clock.now();
    const replies: (InstanceReply | QuorumReply)[] = await Promise.all(
      this.instances.map((inst, i) =>
        quorumKeys
          ? inst.lockQuorum(resource, value, ttlMs, timeoutMs, quorumKeys)
          : inst.lock(resource, value, ttlMs, timeoutMs, counter && counter.instance === i ? counter.counterKey(resource) : null),
      ),
    );
    const deadline = start + ttlMs - this.driftMs(ttlMs);
    const granted = replies.filter((r) => r.kind === 'granted').length;
    const fail = (reason: string): Attempt => {
      // Undo everywhere, including servers that did not answer: their SET may still land. The
      // release is queued behind it on the same connection, so it is not awaited here.
      void this.releaseEverywhere(resource, value, timeoutMs);
      return { reason };
    };
    // A counter at 2^53 - 1 (its script wrote nothing): no token can ever follow, so waiting
    // cannot help. Undo the other servers' grants and fail with the StoreDataError.
    const exhausted = replies.findIndex((r) => r.kind === 'exhausted');
    if (exhausted >= 0) {
      fail('');
      const key = quorumKeys ? quorumKeys.counter : counter!.counterKey(resource);
      throw counterExhausted(this.instances[exhausted]!.address, key, (replies[exhausted] as { counter: string }).counter);
    }
    if (granted < this.quorum) return fail(this.describe(replies, granted));
    if (this.clock.now() >= deadline) return fail(`quorum of ${granted}/${this.instances.length} came after the validity of ${ttlMs} ms had passed`);
    let term: number | null = null;
    if (quorumSpec && quorumKeys) {
      const outcome = await this.quorumToken(replies as CountedReply[], quorumKeys, quorumSpec.probationMs(ttlMs, timeoutMs), timeoutMs);
      if (outcome instanceof StoreDataError) {
        fail('');
        throw outcome;
      }
      if (typeof outcome === 'string') return fail(`quorum reached, but the quorum-counter generation clock gave no token: ${outcome}`);
      term = outcome;
      if (this.clock.now() >= deadline) return fail(`the fencing token came after the validity of ${ttlMs} ms had passed`);
    } else if (counter) {
      const r = replies[counter.instance];
      if (r?.kind === 'granted' && 'term' in r) term = r.term;
    }
    const context = (): GenerationContext => ({
      resource,
      holder: value,
      validityMs: deadline - this.clock.now(),
      instances: this.instances,
      timeoutMs,
      clock: this.clock,
    });
    if (term === null) {
      try {
        term = await this.fencing.next(context());
      } catch (err) {
        if (err instanceof StoreDataError) {
          fail(''); // a counter at its top (nothing written): waiting cannot help
          throw err;
        }
        return fail(`quorum reached, but the ${this.fencing.kind} generation clock gave no token: ${err instanceof Error ? err.message : String(err)}`);
      }
      if (this.clock.now() >= deadline) {
        void this.fencing.release?.(context(), term).catch(() => {});
        return fail(`the fencing token came after the validity of ${ttlMs} ms had passed`);
      }
    }
    const handle = new HeldRedlock(this, resource, value, ttlMs, makeToken(resource, term), deadline, autoExtend, context);
    this.held.add(handle);
    handle.signal.addEventListener('abort', () => this.held.delete(handle), { once: true });
    return { handle, reason: '' };
  }

  /**
   * The quorum counter's token for an acquisition that reached quorum: the highest counter among
   * a majority of servers that can vouch for theirs (a granting server's value was bumped by its
   * acquire script; a refusing one's is read, so one more than it), then written back to a
   * majority as max(counter, token). Returns the token, or why there is none (a StoreDataError
   * when the token would pass 2^53 - 1: then nothing was written back).
   */
  private async quorumToken(replies: readonly CountedReply[], keys: QuorumKeys, probationMs: number, timeoutMs: number): Promise<number | string | StoreDataError> {
    const answered = replies.filter((r): r is Exclude<CountedReply, { kind: 'unknown' }> => r.kind !== 'unknown');
    // A new deployment: every server answered and none has a marker yet. Otherwise a server
    // without one was emptied (or is new beside servers in use): it does not count.
    const genesis = answered.length === this.instances.length && answered.every((r) => r.marker === '');
    const counted = genesis ? answered : answered.filter((r) => r.trusted);
    if (counted.length < this.quorum) {
      const why = replies.map((r, i) => {
        const addr = this.instances[i]!.address;
        if (r.kind === 'unknown') return `${addr} unavailable (${r.reason})`;
        if (r.trusted) return `${addr} counted`;
        if (r.marker === '') return `${addr} re-seeding (no marker: emptied, or new beside servers in use)`;
        if (r.probation) return `${addr} re-seeding (in probation after it was found emptied)`;
        return `${addr} re-seeding (not yet vouched for on this resource)`;
      });
      return `${counted.length} of ${this.instances.length} servers can vouch for their counter, ${this.quorum} needed: ${why.join('; ')}`;
    }
    let token = 0;
    for (const r of counted) token = Math.max(token, r.kind === 'granted' ? r.counter : r.counter + 1);
    if (!Number.isSafeInteger(token) || token < 1) {
      // A refusing server's counter at 2^53 - 1 or beyond (set by hand): no token can follow it.
      return new StoreDataError(
        `redlock: resource ${JSON.stringify(keys.counter)}: the quorum counter gives token ${token}, not an integer in [1, ${Number.MAX_SAFE_INTEGER}]; ` +
          'no new token can be issued (nothing was written back)',
      );
    }
    const mode = genesis ? 'genesis' : 'reborn';
    // Vouch only for a reborn server this round's own read found past its probation.
    const vouch = (i: number): boolean => {
      const r = replies[i];
      return r !== undefined && r.kind !== 'unknown' && r.marker === 'reborn' && !r.probation;
    };
    const written = await Promise.all(this.instances.map((inst, i) => inst.writeBack(keys, token, mode, probationMs, vouch(i), timeoutMs)));
    const acked = written.filter((w) => w.kind === 'granted').length;
    if (acked < this.quorum) {
      const why = written.map((w, i) => `${this.instances[i]!.address} ${w.kind === 'unknown' ? `unavailable (${w.reason})` : 'written'}`);
      return `token ${token} written back to ${acked} of ${this.instances.length} servers, ${this.quorum} needed: ${why.join('; ')}`;
    }
    return token;
  }

  /** @internal Extend on every server; resolves with the grants and the send time. */
  async extendEverywhere(resource: string, value: string, ttlMs: number): Promise<{ sentAt: number; replies: InstanceReply[] }> {
    const sentAt = this.clock.now();
    const timeoutMs = this.timeoutFor(ttlMs);
    const replies = await Promise.all(this.instances.map((i) => i.extend(resource, value, ttlMs, timeoutMs)));
    return { sentAt, replies };
  }

  /** @internal Compare-and-delete on every server. Resolves with how many deleted it. */
  async releaseEverywhere(resource: string, value: string, timeoutMs: number): Promise<number> {
    const replies = await Promise.all(this.instances.map((i) => i.release(resource, value, timeoutMs)));
    return replies.filter((r) => r.kind === 'granted').length;
  }

  /** @internal */
  get timing(): { clock: Clock; retryDelayMs: number } {
    return { clock: this.clock, retryDelayMs: this.options.retryDelayMs };
  }

  /** Ask every server to answer a PING within `timeoutMs`: how many did, and what each said. */
  async reachable(timeoutMs = 1000): Promise<{ answered: number; detail: string }> {
    const replies = await Promise.all(this.instances.map((i) => i.ping(timeoutMs)));
    const detail = replies.map((r, i) => `${this.instances[i]!.address} ${r.kind === 'unknown' ? `unavailable (${r.reason})` : 'answered'}`).join('; ');
    return { answered: replies.filter((r) => r.kind === 'granted').length, detail };
  }

  private describe(replies: readonly (InstanceReply | QuorumReply)[], granted: number): string {
    const parts = replies.map((r, i) => {
      const addr = this.instances[i]!.address;
      if (r.kind === 'granted') return `${addr} granted`;
      if (r.kind === 'unknown') return `${addr} unavailable (${r.reason})`;
      return `${addr} held by another`;
    });
    return `${granted} of ${this.instances.length} servers granted, quorum is ${this.quorum}: ${parts.join('; ')}`;
  }
}

/** `redlock.lock(name)`: the same acquire/using shape as a store's Lock. */
export class RedlockLock {
  constructor(
    private readonly redlock: Redlock,
    readonly name: string,
    private readonly options: { ttlMs?: number; autoExtend?: boolean },
  ) {}

  acquire(options: AcquireOptions = {}): Promise<RedlockHandle> {
    return this.redlock.acquire(this.name, { ...this.options, ...options });
  }

  async using<T>(fn: (handle: RedlockHandle) => Promise<T> | T, options?: AcquireOptions): Promise<T> {
    return this.redlock.using(this.name, fn, { ...this.options, ...options });
  }
}

class HeldRedlock extends TypedEmitter<LockHandleEvents> implements RedlockHandle {
  readonly name: string;
  /** When the first of the extensions failing since the last success failed, or null (not suspended). */
  private suspendedAt: number | null = null;
  readonly term: number;
  private readonly controller = new AbortController();
  private deadline: number;
  private cancelDeadline: () => void = () => {};
  private cancelExtend: () => void = () => {};
  private released: Promise<void> | null = null;
  private wasLost = false;
  private extending: Promise<boolean> | null = null;
  private readonly clock: Clock;

  constructor(
    private readonly redlock: Redlock,
    readonly resource: string,
    readonly value: string,
    readonly ttlMs: number,
    readonly token: FencingToken,
    deadline: number,
    private readonly autoExtend: boolean,
    private readonly context: () => GenerationContext,
  ) {
    super();
    this.name = resource;
    this.term = token.term;
    this.clock = redlock.timing.clock;
    this.deadline = deadline;
    this.armDeadline();
    if (autoExtend) this.scheduleExtend(Math.floor(ttlMs / 3));
  }

  get signal(): AbortSignal {
    return this.controller.signal;
  }

  get held(): boolean {
    return !this.controller.signal.aborted;
  }

  get lost(): boolean {
    return this.wasLost;
  }

  /** True while held and the last extension did not reach a quorum: the lock holds only until its validity ends. */
  get suspended(): boolean {
    return this.suspendedAt !== null && !this.controller.signal.aborted;
  }

  remainingMs(): number {
    if (this.controller.signal.aborted) return 0;
    return Math.max(0, this.deadline - this.clock.now());
  }

  extend(ttlMs = this.ttlMs): Promise<boolean> {
    checkTtl('ttlMs', ttlMs);
    if (this.controller.signal.aborted) return Promise.resolve(false);
    this.extending ??= this.extendOnce(ttlMs)
      .then((ok) => {
        this.afterExtend(ok);
        return ok;
      })
      .finally(() => (this.extending = null));
    return this.extending;
  }

  release(): Promise<void> {
    this.released ??= (async () => {
      this.lose(`lock ${this.resource} term ${this.term} released`, 'stopped');
      await this.redlock.releaseEverywhere(this.resource, this.value, this.redlock.timeoutFor(this.ttlMs));
      // Compare-and-set on the holder's own value, so harmless if the clock already let go.
      await this.redlock.fencing.release?.(this.context(), this.term).catch(() => {});
    })();
    return this.released;
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.release();
  }

  private async extendOnce(ttlMs: number): Promise<boolean> {
    const { sentAt, replies } = await this.redlock.extendEverywhere(this.resource, this.value, ttlMs);
    if (this.controller.signal.aborted) return false; // a late reply changes nothing (safety rule 3)
    const granted = replies.filter((r) => r.kind === 'granted').length;
    const refused = replies.filter((r) => r.kind === 'refused').length;
    const n = replies.length;
    if (refused > n - this.redlock.quorum) {
      this.lose(`lock ${this.resource} term ${this.term} lost: the key is gone or taken on ${refused} of ${n} servers`, 'lost');
      return false;
    }
    if (granted < this.redlock.quorum) return false;
    const deadline = sentAt + ttlMs - this.redlock.driftMs(ttlMs);
    if (this.clock.now() >= deadline) return false;
    if (this.redlock.fencing.extend) {
      let kept: boolean;
      try {
        kept = await this.redlock.fencing.extend({ ...this.context(), validityMs: deadline - this.clock.now() }, this.term);
      } catch {
        return false; // retried until the validity ends
      }
      if (this.controller.signal.aborted) return false;
      if (!kept) {
        this.lose(`lock ${this.resource} term ${this.term} lost: the ${this.redlock.fencing.kind} generation clock no longer holds it`, 'lost');
        return false;
      }
    }
    // Invariant: validity only moves forward, because it is computed from a later send time.
    if (deadline > this.deadline) {
      this.deadline = deadline;
      this.armDeadline();
    }
    return true;
  }

  private scheduleExtend(inMs: number): void {
    this.cancelExtend();
    this.cancelExtend = this.clock.setTimer(inMs, () => {
      void this.extend().then((ok) => {
        if (this.controller.signal.aborted) return;
        if (ok) this.scheduleExtend(Math.floor(this.ttlMs / 3));
        // Not extended yet: retry soon, but never busily, until the validity runs out.
        else this.scheduleExtend(Math.max(5, Math.min(this.redlock.timing.retryDelayMs, Math.floor(this.remainingMs() / 4))));
      });
    });
  }

  private armDeadline(): void {
    this.cancelDeadline();
    this.cancelDeadline = this.clock.setTimer(Math.max(0, this.deadline - this.clock.now()), () =>
      this.lose(`lock ${this.resource} term ${this.term} lost: its validity ended before an extension reached a quorum`, 'deadline'),
    );
  }

  /** Suspended when an extension fails without losing the lock; recovered at the next that succeeds. The validity never moves for it. */
  private afterExtend(ok: boolean): void {
    if (this.controller.signal.aborted) return;
    if (ok && this.suspendedAt !== null) {
      const suspendedMs = this.clock.now() - this.suspendedAt;
      this.suspendedAt = null;
      this.emit('recovered', { term: this.term, suspendedMs, remainingMs: this.remainingMs() });
    } else if (!ok && this.suspendedAt === null) {
      this.suspendedAt = this.clock.now();
      this.emit('suspended', { term: this.term, error: new Error(`lock ${this.resource}: an extension did not reach a quorum in time`), remainingMs: this.remainingMs() });
    }
  }

  private lose(message: string, reason: DeposedReason): void {
    if (this.controller.signal.aborted) return;
    this.cancelDeadline();
    this.cancelExtend();
    this.controller.abort(new NotLeaderError(message));
    if (reason !== 'stopped') {
      this.wasLost = true;
      this.emit('lost', { term: this.term, reason });
    }
  }
}
