/**
 * One Redis server of a Redlock quorum: the node-redlock-compatible key operations (the key is
 * the resource name as given, the value the holder's random token) plus the counter increment a
 * designated instance does inside its acquire script. Every call is bounded by a timeout on the
 * injected clock; an error or a timeout is an answer of "unknown", never of "granted".
 */
import { createHash } from 'node:crypto';
import { StoreDataError } from '../core/index.js';
import type { Clock } from '../core/index.js';
import type { Redis } from 'ioredis';

/**
 * Counters never pass 2^53 - 1, the highest token tenure issues: an INCR that passes it (its reply,
 * a Lua double, is exact up to 2^53) is taken back by DECR (exact, on the server) in the same
 * atomic script, with anything else the script set, and the counter as stored is replied
 * instead: nothing is written. One comparison on a grant's path.
 */
const MAX_TOKEN = String(Number.MAX_SAFE_INTEGER);

/**
 * SET NX PX, then INCR of the generation counter in the same script: the token is ordered exactly
 * as the key's holders. Reply: the token, 0 when refused, {-1, counter} when the counter is at its top.
 */
const ACQUIRE_COUNTED = `
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  local n = redis.call('INCR', KEYS[2])
  if n > ${MAX_TOKEN} then
    redis.call('DECR', KEYS[2])
    redis.call('DEL', KEYS[1])
    return {-1, redis.call('GET', KEYS[2])}
  end
  return n
end
return 0`;

/** INCR of a counter on its own (redisCounter after quorum). Reply: the value, or {-1, counter} at its top. */
const INCREMENT = `
local n = redis.call('INCR', KEYS[1])
if n > ${MAX_TOKEN} then
  redis.call('DECR', KEYS[1])
  return {-1, redis.call('GET', KEYS[1])}
end
return n`;

/**
 * The quorum counter's acquire: SET NX PX; on a grant INCR the counter, else read it. Replies
 * {granted, counter, marker, trusted, probation}: `marker` is this server's origin ('genesis',
 * 'reborn' or '' when it has none: new or emptied), `trusted` whether its counter for this resource
 * may be counted (a genesis server's always; a reborn server's only once a write-back after its
 * probation vouched for it), `probation` 1 while a reborn server is in probation. A counter at
 * 2^53 - 1 is not bumped (see MAX_TOKEN): the key is not taken either, and the reply is
 * {-1, counter as stored}.
 * KEYS: resource, counter, trust, marker, probation. ARGV: value, ttl.
 */
const ACQUIRE_QUORUM = `
local granted = 0
local n
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  granted = 1
  n = redis.call('INCR', KEYS[2])
  if n > ${MAX_TOKEN} then
    redis.call('DECR', KEYS[2])
    redis.call('DEL', KEYS[1])
    return {-1, redis.call('GET', KEYS[2])}
  end
else
  n = tonumber(redis.call('GET', KEYS[2]) or '0')
end
local marker = redis.call('GET', KEYS[4]) or ''
local trusted = 0
local probation = redis.call('EXISTS', KEYS[5])
if marker == 'genesis' then
  trusted = 1
elseif marker == 'reborn' and probation == 0 and redis.call('EXISTS', KEYS[3]) == 1 then
  trusted = 1
end
return {granted, n, marker, trusted, probation}`;

/**
 * The quorum counter's write-back: counter := max(counter, token). A server without a marker gets
 * ARGV[2] ('genesis' only when every server answered without one: a new deployment; otherwise
 * 'reborn', with a probation key that lives ARGV[3] ms). A reborn server past its probation is
 * marked trusted for this resource when the acquisition's own read found it so too (ARGV[4] = '1':
 * the token was computed after the probation, never from counters read before it was emptied):
 * from now on its counter is at least every token issued.
 * KEYS: counter, trust, marker, probation. ARGV: token, mode, probationMs, vouch.
 */
const WRITE_BACK = `
local n = tonumber(redis.call('GET', KEYS[1]) or '0')
if n < tonumber(ARGV[1]) then redis.call('SET', KEYS[1], ARGV[1]) end
local marker = redis.call('GET', KEYS[3])
if not marker then
  redis.call('SET', KEYS[3], ARGV[2])
  if ARGV[2] == 'reborn' then redis.call('SET', KEYS[4], '1', 'PX', ARGV[3]) end
elseif marker == 'reborn' and ARGV[4] == '1' and redis.call('EXISTS', KEYS[4]) == 0 then
  redis.call('SET', KEYS[2], '1')
end
return 1`;

/** Extend iff the key still holds our token (compare-and-pexpire). */
const EXTEND = `
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0`;

/** Delete iff the key still holds our token (compare-and-delete), as node-redlock's unlock does. */
const RELEASE = `
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0`;

class Script {
  readonly sha: string;
  constructor(readonly source: string) {
    this.sha = createHash('sha1').update(source).digest('hex');
  }
  async run(client: Redis, keys: readonly string[], args: readonly (string | number)[]): Promise<unknown> {
    try {
      return await client.evalsha(this.sha, keys.length, ...keys, ...args);
    } catch (err) {
      if (!(err instanceof Error) || !err.message.startsWith('NOSCRIPT')) throw err;
      // The script cache was flushed or the server restarted: EVAL runs it and caches it again.
      return await client.eval(this.source, keys.length, ...keys, ...args);
    }
  }
}

const acquireCounted = new Script(ACQUIRE_COUNTED);
const acquireQuorum = new Script(ACQUIRE_QUORUM);
const incrementScript = new Script(INCREMENT);
const writeBackScript = new Script(WRITE_BACK);
const extendScript = new Script(EXTEND);
const releaseScript = new Script(RELEASE);

/**
 * What one instance said: granted (with the counter value when it counted), refused, unknown, or
 * exhausted: its counter is at 2^53 - 1 (or beyond, set by hand), no token can follow, and the
 * script wrote nothing (`counter` as the server keeps it).
 */
export type InstanceReply =
  | { readonly kind: 'granted'; readonly term: number | null }
  | { readonly kind: 'refused' }
  | { readonly kind: 'exhausted'; readonly counter: string }
  | { readonly kind: 'unknown'; readonly reason: string };

/** The keys of the quorum counter on one server, for one resource. */
export interface QuorumKeys {
  readonly counter: string;
  readonly trust: string;
  readonly marker: string;
  readonly probation: string;
}

/** Where a server stands for the quorum counter: '' = no marker (a new or an emptied server). */
export type QuorumMarker = 'genesis' | 'reborn' | '';

/** What one instance said to a quorum-counter acquire. */
export type QuorumReply =
  | { readonly kind: 'granted' | 'refused'; readonly counter: number; readonly marker: QuorumMarker; readonly trusted: boolean; readonly probation: boolean }
  | { readonly kind: 'exhausted'; readonly counter: string }
  | { readonly kind: 'unknown'; readonly reason: string };

export class RedlockInstance {
  readonly client: Redis;
  readonly address: string;
  private readonly clock: Clock;

  constructor(client: Redis, clock: Clock) {
    this.client = client;
    this.clock = clock;
    const o = client.options;
    this.address = o.path ? o.path : `${o.host ?? 'localhost'}:${o.port ?? 6379}`;
  }

  /** Take `key` with `value` for `ttlMs` iff it is free; with `counterKey`, also INCR it in the same script. */
  lock(key: string, value: string, ttlMs: number, timeoutMs: number, counterKey: string | null): Promise<InstanceReply> {
    if (counterKey === null) {
      return this.bounded(timeoutMs, async () => ((await this.client.set(key, value, 'PX', ttlMs, 'NX')) === 'OK' ? { kind: 'granted', term: null } : { kind: 'refused' }));
    }
    return this.bounded(timeoutMs, async () => {
      const reply = await acquireCounted.run(this.client, [key, counterKey], [value, ttlMs]);
      if (Array.isArray(reply)) return { kind: 'exhausted', counter: String(reply[1]) };
      const n = Number(reply);
      return n > 0 ? { kind: 'granted', term: n } : { kind: 'refused' };
    });
  }

  /** Take `key` iff free, bumping (or, when refused, reading) the quorum counter in the same script. */
  lockQuorum(key: string, value: string, ttlMs: number, timeoutMs: number, keys: QuorumKeys): Promise<QuorumReply> {
    return this.bounded<QuorumReply>(timeoutMs, async () => {
      const reply = (await acquireQuorum.run(this.client, [key, keys.counter, keys.trust, keys.marker, keys.probation], [value, ttlMs])) as [number, number, string, number, number];
      if (reply[0] === -1) return { kind: 'exhausted', counter: String(reply[1]) };
      const marker = reply[2] === 'genesis' || reply[2] === 'reborn' ? reply[2] : '';
      return { kind: reply[0] === 1 ? 'granted' : 'refused', counter: Number(reply[1]), marker, trusted: reply[3] === 1, probation: reply[4] === 1 };
    });
  }

  /** Raise the quorum counter to at least `token` (and mark or vouch for this server, see WRITE_BACK). */
  writeBack(keys: QuorumKeys, token: number, mode: 'genesis' | 'reborn', probationMs: number, vouch: boolean, timeoutMs: number): Promise<InstanceReply> {
    return this.bounded(timeoutMs, async () => {
      await writeBackScript.run(this.client, [keys.counter, keys.trust, keys.marker, keys.probation], [token, mode, probationMs, vouch ? '1' : '0']);
      return { kind: 'granted', term: null };
    });
  }

  /** PING within `timeoutMs`: granted when the server answered. */
  ping(timeoutMs: number): Promise<InstanceReply> {
    return this.bounded(timeoutMs, async () => {
      await this.client.ping();
      return { kind: 'granted', term: null };
    });
  }

  extend(key: string, value: string, ttlMs: number, timeoutMs: number): Promise<InstanceReply> {
    return this.bounded(timeoutMs, async () => (Number(await extendScript.run(this.client, [key], [value, ttlMs])) === 1 ? { kind: 'granted', term: null } : { kind: 'refused' }));
  }

  release(key: string, value: string, timeoutMs: number): Promise<InstanceReply> {
    return this.bounded(timeoutMs, async () => (Number(await releaseScript.run(this.client, [key], [value])) === 1 ? { kind: 'granted', term: null } : { kind: 'refused' }));
  }

  /** INCR `counterKey`; throws on error or timeout, StoreDataError (nothing written) when it is at 2^53 - 1. */
  async increment(counterKey: string, timeoutMs: number): Promise<number> {
    const reply = await this.bounded<InstanceReply>(timeoutMs, async () => {
      const n = await incrementScript.run(this.client, [counterKey], []);
      return Array.isArray(n) ? { kind: 'exhausted', counter: String(n[1]) } : { kind: 'granted', term: Number(n) };
    });
    if (reply.kind === 'exhausted') throw counterExhausted(this.address, counterKey, reply.counter);
    if (reply.kind !== 'granted' || reply.term === null) throw new Error(`${this.address}: ${reply.kind === 'unknown' ? reply.reason : 'no counter value'}`);
    return reply.term;
  }

  private bounded<T extends InstanceReply | QuorumReply>(timeoutMs: number, fn: () => Promise<T>): Promise<T | { kind: 'unknown'; reason: string }> {
    return new Promise((resolve) => {
      const cancel = this.clock.setTimer(timeoutMs, () => resolve({ kind: 'unknown', reason: `no answer within ${timeoutMs} ms` }));
      fn().then(
        (r) => {
          cancel();
          resolve(r);
        },
        (err: unknown) => {
          cancel();
          const message = err instanceof Error ? err.message : String(err);
          // ioredis's words for "no connection right now" (the offline queue is off) are obscure.
          resolve({ kind: 'unknown', reason: /enableOfflineQueue/.test(message) ? 'not connected' : message });
        },
      );
    });
  }
}

/** The error for a counter at 2^53 - 1 or beyond: no token can follow it, and nothing was written. */
export function counterExhausted(address: string, counterKey: string, counter: string): StoreDataError {
  return new StoreDataError(
    `redlock: the fencing counter ${JSON.stringify(counterKey)} on ${address} is at ${counter.slice(0, 40)}, ` +
      `at or beyond ${MAX_TOKEN}, the highest token tenure can issue; no new token can be issued (nothing was written)`,
  );
}

