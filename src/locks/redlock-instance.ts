/**
 * One Redis server of a Redlock quorum: the node-redlock-compatible key operations (the key is
 * the resource name as given, the value the holder's random token) plus the counter increment a
 * designated instance does inside its acquire script. Every call is bounded by a timeout on the
 * injected clock; an error or a timeout is an answer of "unknown", never of "granted".
 */
import { createHash } from 'node:crypto';
import { createRequire } from 'node:module';
import { DriverMissingError } from '../core/index.js';
import type { Clock } from '../core/index.js';
import type { Redis, RedisOptions } from 'ioredis';

/** SET NX PX, then INCR of the generation counter in the same script: the token is ordered exactly as the key's holders. */
const ACQUIRE_COUNTED = `
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return redis.call('INCR', KEYS[2])
end
return 0`;

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
const extendScript = new Script(EXTEND);
const releaseScript = new Script(RELEASE);

/** What one instance said: granted (with the counter value when it counted), refused, or unknown. */
export type InstanceReply =
  | { readonly kind: 'granted'; readonly term: number | null }
  | { readonly kind: 'refused' }
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
      const n = Number(await acquireCounted.run(this.client, [key, counterKey], [value, ttlMs]));
      return n > 0 ? { kind: 'granted', term: n } : { kind: 'refused' };
    });
  }

  extend(key: string, value: string, ttlMs: number, timeoutMs: number): Promise<InstanceReply> {
    return this.bounded(timeoutMs, async () => (Number(await extendScript.run(this.client, [key], [value, ttlMs])) === 1 ? { kind: 'granted', term: null } : { kind: 'refused' }));
  }

  release(key: string, value: string, timeoutMs: number): Promise<InstanceReply> {
    return this.bounded(timeoutMs, async () => (Number(await releaseScript.run(this.client, [key], [value])) === 1 ? { kind: 'granted', term: null } : { kind: 'refused' }));
  }

  /** INCR `counterKey`; throws on error or timeout. */
  async increment(counterKey: string, timeoutMs: number): Promise<number> {
    const reply = await this.bounded<InstanceReply>(timeoutMs, async () => ({ kind: 'granted', term: await this.client.incr(counterKey) }));
    if (reply.kind !== 'granted' || reply.term === null) throw new Error(`${this.address}: ${reply.kind === 'unknown' ? reply.reason : 'no counter value'}`);
    return reply.term;
  }

  private bounded<T extends InstanceReply>(timeoutMs: number, fn: () => Promise<T>): Promise<T | InstanceReply> {
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

const require = createRequire(import.meta.url);

interface IoredisCtor {
  new (options: RedisOptions): Redis;
}

/** The ioredis constructor, loaded only when a Redlock is opened from a URL. */
export function loadIoredis(): IoredisCtor {
  try {
    const mod = require('ioredis') as IoredisCtor & { default?: IoredisCtor };
    return mod.default ?? mod;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'MODULE_NOT_FOUND') throw new DriverMissingError('ioredis', 'redlock');
    throw err;
  }
}
