/**
 * `redlock://host:port,host:port,host:port[?fence=quorum|N…]`: a Redlock over the listed servers.
 *
 * Redlock is opened on its own, not through openStore: it is a lock, not a Store. N independent
 * servers with no consensus among them cannot give what the Store interface promises — one term
 * sequence per lease decided atomically, a fenced append checked in the same step as the write.
 * Its fencing tokens come from a generation clock instead (redlock-fencing.ts).
 *
 * Query parameters:
 *   fence=quorum   (default) every server keeps a counter; tokens from a majority (one more
 *                  parallel round trip per acquisition; any minority of servers may be down)
 *   fence=N        the counter on server N alone (0-based) issues fencing tokens, in the acquire
 *                  round trip; no lock can be taken while server N is down
 *   probation=D    quorum counter: how long a server found emptied is left out (default 30s)
 *   prefix=P       counter key prefix (default `{tenure}:`, matching the Redis store)
 *   ttl=D          default lock TTL (1500, 1500ms, 10s…)
 *   timeout=D      per-server timeout
 * A password for every server may be given as `redlock://:PASSWORD@host:port,…`.
 */
import { InvalidArgumentError, checkTtl, parseDuration, redactSecrets, redactUrl, systemClock } from '../core/index.js';
import type { Redis, RedisOptions } from 'ioredis';
import { Redlock } from './redlock.js';
import type { RedlockOptions } from './redlock.js';
import { quorumCounter, redisCounter } from './redlock-fencing.js';
import { loadDriver } from '../core/driver.js';

export interface RedlockUrl {
  readonly servers: readonly { readonly host: string; readonly port: number }[];
  readonly password?: string;
  /** The server whose counter alone issues tokens (`fence=N`), or null for the quorum counter (the default). */
  readonly fenceInstance: number | null;
  readonly probationMs?: number;
  readonly keyPrefix?: string;
  readonly ttlMs?: number;
  readonly instanceTimeoutMs?: number;
}

/** Parse a redlock URL; throws InvalidArgumentError (field `store`) naming what is wrong, never showing a password. */
export function parseRedlockUrl(url: string): RedlockUrl {
  try {
    return parse(url);
  } catch (err) {
    if (err instanceof InvalidArgumentError) {
      const shown = redactUrl(url);
      const password = /^\s*redlock:\/\/([^@/?#]*)@/i.exec(url)?.[1];
      const message = err.message.replace(/^store: /, '').split(url).join(shown);
      throw new InvalidArgumentError('store', password ? message.split(password).join('***') : message);
    }
    throw err;
  }
}

function parse(url: string): RedlockUrl {
  const m = /^redlock:\/\/(?:(?:[^:@/]*):([^@/]*)@)?([^/?#]+)\/?(?:\?([^#]*))?$/i.exec(url.trim());
  if (!m) throw new InvalidArgumentError('store', `expected redlock://host:port,host:port,host:port, got '${redactUrl(url)}'`);
  const servers = m[2]!.split(',').map((part) => {
    const hp = /^(\[[^\]]+\]|[^:]+)(?::(\d+))?$/.exec(part.trim());
    if (!hp) throw new InvalidArgumentError('store', `bad server '${redactSecrets(part, [url])}' in '${redactUrl(url)}': expected host:port`);
    const port = hp[2] === undefined ? 6379 : Number(hp[2]);
    if (port < 1 || port > 65535) throw new InvalidArgumentError('store', `bad port in '${part}'`);
    return { host: hp[1]!.replace(/^\[|\]$/g, ''), port };
  });
  const params = new URLSearchParams(m[3] ?? '');
  let fenceInstance: number | null = null;
  const fence = params.get('fence');
  if (fence !== null && fence !== 'quorum') {
    if (!/^\d+$/.test(fence) || Number(fence) >= servers.length) {
      throw new InvalidArgumentError('store', `fence must be 'quorum' or a server index in [0, ${servers.length - 1}], got '${fence}'`);
    }
    fenceInstance = Number(fence);
  }
  const probation = params.get('probation');
  const ttl = params.get('ttl');
  const timeout = params.get('timeout');
  const prefix = params.get('prefix');
  return {
    servers,
    fenceInstance,
    ...(m[1] ? { password: decodeURIComponent(m[1]) } : {}),
    ...(prefix !== null ? { keyPrefix: prefix } : {}),
    ...(ttl !== null ? { ttlMs: checkTtl('ttl', parseDuration('ttl', ttl)) } : {}),
    ...(timeout !== null ? { instanceTimeoutMs: parseDuration('timeout', timeout) } : {}),
    ...(probation !== null ? { probationMs: parseDuration('probation', probation) } : {}),
  };
}

/**
 * Open a Redlock from a URL. Clients are made here, with no offline queue (a server that is down
 * answers "unavailable" at once instead of running a stale SET later), and closed by close().
 * Waits up to `connectTimeoutMs` (default 1000) for the servers to connect (not for one that
 * refuses); servers still down then count as unavailable until they come back.
 */
export async function openRedlock(url: string, options: Partial<Omit<RedlockOptions, 'clients'>> & { connectTimeoutMs?: number } = {}): Promise<Redlock> {
  const parsed = parseRedlockUrl(url);
  const Ioredis = loadDriver<new (options: RedisOptions) => Redis>('ioredis', 'redlock');
  const clients: Redis[] = parsed.servers.map(
    (s) =>
      new Ioredis({
        host: s.host,
        port: s.port,
        ...(parsed.password !== undefined ? { password: parsed.password } : {}),
        enableOfflineQueue: false,
        maxRetriesPerRequest: 0,
        connectTimeout: 1000,
        retryStrategy: (times: number) => Math.min(times * 50, 500),
      }),
  );
  for (const c of clients) c.on('error', () => {}); // reported per request as "unavailable (reason)"
  const connectTimeoutMs = options.connectTimeoutMs ?? 1000;
  await Promise.all(
    clients.map(
      (c) =>
        new Promise<void>((resolve) => {
          const done = (): void => {
            cancel();
            c.off('ready', done);
            c.off('error', done);
            resolve();
          };
          const cancel = (options.clock ?? systemClock).setTimer(connectTimeoutMs, done);
          c.once('ready', done);
          c.once('error', done); // refused: count it as unavailable now rather than wait
        }),
    ),
  );
  const { connectTimeoutMs: _ignored, ...rest } = options;
  return new Redlock({
    ...(parsed.ttlMs !== undefined ? { ttlMs: parsed.ttlMs } : {}),
    ...(parsed.instanceTimeoutMs !== undefined ? { instanceTimeoutMs: parsed.instanceTimeoutMs } : {}),
    fencing:
      parsed.fenceInstance === null
        ? quorumCounter({
            ...(parsed.keyPrefix !== undefined ? { keyPrefix: parsed.keyPrefix } : {}),
            ...(parsed.probationMs !== undefined ? { probationMs: parsed.probationMs } : {}),
          })
        : redisCounter({ instance: parsed.fenceInstance, ...(parsed.keyPrefix !== undefined ? { keyPrefix: parsed.keyPrefix } : {}) }),
    ...rest,
    clients,
    ownsClients: true,
  });
}
