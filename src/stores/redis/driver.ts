/**
 * ioredis, loaded only when a Redis store is opened from a URL (it is an optional peer
 * dependency), and the few client facts the store needs: a printable address and its Lua scripts
 * with their SHA1 (for EVALSHA).
 */
import { createHash } from 'node:crypto';
import { createRequire } from 'node:module';
import { DriverMissingError } from '../../core/index.js';
import type { Cluster, Redis, RedisOptions } from 'ioredis';

/** A client the store accepts: a plain, Sentinel-backed or Cluster ioredis client. */
export type RedisClient = Redis | Cluster;

interface IoredisModule {
  new (url: string, options?: RedisOptions): Redis;
  new (options: RedisOptions): Redis;
}

const require = createRequire(import.meta.url);

/** The ioredis constructor; throws DriverMissingError naming `store` when it is not installed. */
export function loadIoredis(store: string): IoredisModule {
  try {
    const mod = require('ioredis') as IoredisModule & { default?: IoredisModule };
    return mod.default ?? mod;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'MODULE_NOT_FOUND') throw new DriverMissingError('ioredis', store);
    throw err;
  }
}

/**
 * Options for clients tenure creates itself. A command sent while the connection is down fails at
 * once instead of waiting in the offline queue, so a down server shows as StoreUnavailableError
 * quickly rather than as a command that runs much later. No retries at all: a script that Redis
 * ran but whose reply was lost with the connection must not be sent again on reconnect (a fenced
 * append would be applied twice); it is reported as "maybe" instead (safety rule 3).
 */
export const ownClientOptions: RedisOptions = {
  maxRetriesPerRequest: 0,
  connectTimeout: 2000,
  retryStrategy: (times: number) => Math.min(times * 50, 500),
};

/** `host:port` of a client for error messages (never its password). */
export function addressOf(client: RedisClient): string {
  if (client.isCluster) {
    const nodes = (client as unknown as { startupNodes: unknown[] }).startupNodes;
    const text = nodes
      .map((n) => (typeof n === 'string' ? n : typeof n === 'number' ? `127.0.0.1:${n}` : hostPort(n as { host?: string; port?: number })))
      .join(',');
    return `cluster ${text}`;
  }
  const o = (client as Redis).options;
  if (o.sentinels && o.sentinels.length > 0) return `sentinel ${o.name ?? '?'} via ${o.sentinels.map((s) => hostPort(s)).join(',')}`;
  if (o.path) return o.path;
  return hostPort(o);
}

function hostPort(o: { host?: string | undefined; port?: number | undefined }): string {
  return `${o.host ?? 'localhost'}:${o.port ?? 6379}`;
}

/** A Lua script with its SHA1; the store runs it by EVALSHA and re-sends it by EVAL after NOSCRIPT. */
export class LuaScript {
  readonly sha: string;
  constructor(readonly name: string, readonly source: string) {
    this.sha = createHash('sha1').update(source).digest('hex');
  }
}
