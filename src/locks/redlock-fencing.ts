/**
 * Generation clocks for Redlock: where the fencing token of each acquisition comes from.
 *
 * Redlock by itself only makes mutual exclusion likely under timing assumptions (bounded pauses,
 * bounded clock drift). A holder that pauses past its validity still believes it holds the lock,
 * so every write it makes must carry a token that the storage compares with the highest it has
 * accepted (safety rule 5). The token must come from something that orders acquisitions:
 *
 * - `quorumCounter()` (the default) — every server's acquire script bumps its own counter and
 *   returns it; the token is the highest of a majority's values, written back to a majority
 *   (counter := max(counter, token)) before the lock is returned. Two majorities share a server, so
 *   a later holder's token is higher, and any minority of servers may be down. One more parallel
 *   round trip per acquisition. A server that lost its data (restarted without persistence) is
 *   detected by its missing marker key and counted again only after a probation, resource by
 *   resource, once a write-back has raised its counter (docs/redis.md, "The quorum counter").
 * - `redisCounter({ instance })` — INCR of a counter on one of the Redlock servers, inside the
 *   same script as that server's SET NX, so tokens are ordered exactly as that server saw the
 *   key change hands, with no extra round trip. Strictly increasing as long as that one server
 *   keeps its data (AOF with `appendfsync always`, no failover to a lagging replica); while it is
 *   down no token can be issued, so locks are unavailable even with a quorum of the others.
 *   `redisCounter({ client })` does the same INCR on a separate Redis, one round trip after quorum.
 *   The counter key is the Redis store's term key (`{tenure}:term:RESOURCE` by default), so a
 *   RedisStore with the same key prefix on that server accepts these tokens in appendFenced.
 * - `storeLeaseClock(store)` — the term of a lease on the resource in any tenure Store, held for
 *   the lock's validity and renewed with each extension. As strong and as available as that store
 *   (etcd, PostgreSQL…); the store's own appendFenced fences with it. One round trip after quorum.
 * - `sequenceClock(next)` — anything else that hands out increasing numbers (a SQL sequence:
 *   `SELECT nextval('lock_tokens')`). One round trip after quorum; as durable as its source.
 */
import { checkTerm, checkTtl, limits } from '../core/index.js';
import type { Clock, Store } from '../core/index.js';
import type { Redis } from 'ioredis';
import { RedlockInstance } from './redlock-instance.js';
import type { QuorumKeys } from './redlock-instance.js';

/** What a generation clock gets for each acquisition that reached quorum. */
export interface GenerationContext {
  readonly resource: string;
  /** The lock's random value: unique per acquisition, usable as a lease owner. */
  readonly holder: string;
  /** How long the lock is still valid, ms. */
  readonly validityMs: number;
  /** The Redlock's servers, in the order given. */
  readonly instances: readonly RedlockInstance[];
  /** Per-call timeout, ms. */
  readonly timeoutMs: number;
  readonly clock: Clock;
}

export interface GenerationClock {
  /** Short name for messages ("redis-counter", "store-lease", "sequence"). */
  readonly kind: string;
  /** When set, the server at `instance` increments `counterKey(resource)` inside its acquire script. */
  readonly inScript?: { readonly instance: number; counterKey(resource: string): string };
  /** When set, every server keeps a counter (quorumCounter): the Redlock computes the token itself and never calls `next`. */
  readonly quorum?: QuorumCounterSpec;
  /**
   * The token for an acquisition that reached quorum (called only when the in-script counter did
   * not answer). Must be greater than every token handed out before. Throw when unavailable:
   * the acquisition then fails and is retried.
   */
  next(context: GenerationContext): Promise<number>;
  /** Keep what the clock holds for this acquisition alive after an extension; false means it was lost. */
  extend?(context: GenerationContext, term: number): Promise<boolean>;
  /** Let go of what the clock holds for this acquisition. Errors are ignored. */
  release?(context: GenerationContext, term: number): Promise<void>;
}

/** What the Redlock needs to run the quorum counter. */
export interface QuorumCounterSpec {
  keys(resource: string): QuorumKeys;
  /** How long a server found emptied is not counted, ms, for a lock of `ttlMs` with per-server timeout `timeoutMs`. */
  probationMs(ttlMs: number, timeoutMs: number): number;
}

export interface QuorumCounterOptions {
  /** Key prefix (default `{tenure}:`, the Redis store's). Counter: PREFIX `term:`RESOURCE, as the Redis store's term key. */
  keyPrefix?: string;
  /**
   * How long a server found without its marker (emptied, or new beside servers in use) is kept
   * out of the count, ms (default 30000). Never less than twice the lock's TTL plus twice the
   * per-server timeout; set it to at least the longest TTL any client uses.
   */
  probationMs?: number;
}

/**
 * The default generation clock: a counter on every server, the token taken from a majority and
 * written back to a majority. See the file comment and docs/redis.md.
 */
export function quorumCounter(options: QuorumCounterOptions = {}): GenerationClock {
  const prefix = options.keyPrefix ?? '{tenure}:';
  const probation = options.probationMs ?? 30_000;
  if (!Number.isInteger(probation) || probation < 0 || probation > limits.ttlMaxMs) {
    throw new RangeError(`quorumCounter: probationMs must be an integer number of ms in [0, ${limits.ttlMaxMs}], got ${probation}`);
  }
  return {
    kind: 'quorum-counter',
    quorum: {
      keys: (resource) => ({
        counter: `${prefix}term:${resource}`,
        trust: `${prefix}redlock-trusted:${resource}`,
        marker: `${prefix}redlock-marker`,
        probation: `${prefix}redlock-probation`,
      }),
      probationMs: (ttlMs, timeoutMs) => Math.min(limits.ttlMaxMs, Math.max(probation, 2 * ttlMs + 2 * timeoutMs)),
    },
    next: () => Promise.reject(new Error('the quorum counter is computed by the Redlock itself')),
  };
}

export interface RedisCounterOptions {
  /** Index of the Redlock server that keeps the counter (default 0). */
  instance?: number;
  /** Or a separate Redis that keeps it (one extra round trip per acquisition). */
  client?: Redis;
  /** Counter key prefix (default `{tenure}:`, the Redis store's default); the key is PREFIX + `term:` + resource. */
  keyPrefix?: string;
}

/** INCR on a designated Redis. See the file comment for what it guarantees. */
export function redisCounter(options: RedisCounterOptions = {}): GenerationClock {
  const prefix = options.keyPrefix ?? '{tenure}:';
  const counterKey = (resource: string): string => `${prefix}term:${resource}`;
  if (options.client) {
    const client = options.client;
    let separate: RedlockInstance | null = null;
    return {
      kind: 'redis-counter',
      next: async (ctx) => {
        separate ??= new RedlockInstance(client, ctx.clock);
        return separate.increment(counterKey(ctx.resource), ctx.timeoutMs);
      },
    };
  }
  const instance = options.instance ?? 0;
  if (!Number.isInteger(instance) || instance < 0) throw new RangeError(`redisCounter: instance must be an index >= 0, got ${instance}`);
  return {
    kind: 'redis-counter',
    inScript: { instance, counterKey },
    // The designated server answered the acquire without granting (its copy of the key had not
    // expired yet) although a quorum did: an INCR after quorum still orders tokens correctly.
    next: async (ctx) => {
      const server = ctx.instances[instance];
      if (!server) throw new Error(`no Redlock server at index ${instance}`);
      return server.increment(counterKey(ctx.resource), ctx.timeoutMs);
    },
  };
}

/** The term of a lease on the resource in `store`, owned by the acquisition's random value. */
export function storeLeaseClock(store: Store): GenerationClock {
  const ttl = (validityMs: number): number => checkTtl('ttlMs', Math.min(limits.ttlMaxMs, Math.max(limits.ttlMinMs, Math.floor(validityMs))));
  return {
    kind: `store-lease(${store.kind})`,
    next: async (ctx) => {
      const r = await store.acquire(ctx.resource, ctx.holder, ttl(ctx.validityMs));
      if (!r.acquired) throw new Error(`lease ${ctx.resource} in the ${store.kind} store is held by ${r.lease.owner} for ${Math.round(r.lease.remainingMs)} ms more`);
      return r.lease.term;
    },
    extend: async (ctx, term) => (await store.renew(ctx.resource, ctx.holder, term, ttl(ctx.validityMs))).renewed,
    release: async (ctx, term) => {
      await store.release(ctx.resource, ctx.holder, term);
    },
  };
}

/** Any source of increasing numbers, such as a SQL sequence. `next` must never repeat or go back. */
export function sequenceClock(next: (resource: string) => Promise<number | bigint | string>, kind = 'sequence'): GenerationClock {
  return {
    kind,
    next: async (ctx) => checkTerm('token.term', Number(await next(ctx.resource))),
  };
}
