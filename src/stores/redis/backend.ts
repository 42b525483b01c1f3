/**
 * `redis://[user:pass@]host:port[/db][?prefix=P]` (or `rediss://` for TLS): `prefix` is the store's
 * key prefix (default `{tenure}:`); other query parameters are passed to ioredis.
 */
import { InvalidArgumentError, redactUrl } from '../../core/index.js';
import type { StoreBackend } from '../backend.js';

export interface RedisOpenOptions {
  kind: 'redis';
  url: string;
  keyPrefix?: string;
  commandTimeoutMs?: number;
}

function parseRedisUrl(url: string): RedisOpenOptions {
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    throw new InvalidArgumentError('store', `expected redis://host:port, got '${redactUrl(url)}'`);
  }
  if (parsed.hostname === '') throw new InvalidArgumentError('store', `redis needs a host, such as redis://127.0.0.1:6379, got '${redactUrl(url)}'`);
  // The database is a number (whether the server has it is checked on connect: RedisStore).
  const db = parsed.pathname.replace(/^\//, '');
  if (db !== '' && !/^\d{1,9}$/.test(db)) {
    throw new InvalidArgumentError('store', `redis database must be a number, such as redis://127.0.0.1:6379/0, got '/${db}'`);
  }
  const keyPrefix = parsed.searchParams.get('prefix');
  parsed.searchParams.delete('prefix');
  return { kind: 'redis', url: parsed.toString(), ...(keyPrefix !== null ? { keyPrefix } : {}) };
}

export const redisBackend: StoreBackend<RedisOpenOptions> = {
  kind: 'redis',
  schemes: ['redis', 'rediss'],
  shown: ['redis://'],
  parse: ({ url }) => parseRedisUrl(url),
  async open(options) {
    const { RedisStore } = await import('./index.js');
    return new RedisStore(options);
  },
};
