/**
 * Redlock under chaos: three private redis-servers, each node reaching every one through its own
 * fault proxy. Redlock is a lock, not a Store, so this entry runs the `redlock` workload
 * (test/fixtures/chaos-node.ts): per group a node takes the Redlock named after the group, with
 * a fencing token from `redisCounter({ instance: 0 })` (the single-server counter, `redlock://…?fence=0`: an
 * INCR of `{tenure}:term:GROUP` inside server 0's acquire script), and appends to the group's
 * stream in a Redis store on server 0 (`redis://server0`), whose `appendFenced` checks exactly
 * those tokens (docs/redis.md). The checker then holds the same properties as for a Store.
 *
 * Configured as docs/redis.md calls safe for the generation clock and no safer: server 0 (the
 * counter, and the streams) runs with AOF and `appendfsync always`; servers 1 and 2 keep nothing
 * (`--save '' --appendonly no`), so a restarted one forgets the keys it granted and a second
 * quorum can form while the first holder still believes it holds the lock. Only the fencing
 * tokens stand between that and two writers.
 *
 * Faults: `kill-member` kill -9s one server (server 0 included: then no token can be issued and
 * the streams are down until it is back) and restarts it later; `restart-store` kill -9s all
 * three and starts them again (1 and 2 empty); `slow` SIGSTOPs server 0; `pause` stops a lock
 * holder past its validity; plus `kill` and the proxy faults on one node's connections to all
 * three servers.
 */
import { join } from 'node:path';
import type { Endpoint } from '../proxy/index.js';
import { PrivateServer, missingCommand } from './private-server.js';
import type { ChaosBackend, ChaosInstance } from './types.js';

const SERVERS = 3;

export const redlockChaos: ChaosBackend = {
  name: 'redlock',
  faults: ['pause', 'kill', 'resign', 'slow', 'restart-store', 'kill-member', 'cut', 'drop', 'blackhole', 'delay', 'one-way', 'tear'],
  ttlMs: 1500,
  workload: 'redlock',
  unavailable: () => missingCommand('redis-server'),
  async start({ dir }): Promise<ChaosInstance> {
    const servers = await Promise.all(
      Array.from({ length: SERVERS }, (_, i) =>
        PrivateServer.start({
          name: `redis-server ${i}`,
          command: 'redis-server',
          args: (port) => [
            '--port', String(port),
            '--bind', '127.0.0.1',
            '--dir', dir,
            '--save', '',
            ...(i === 0 ? ['--appendonly', 'yes', '--appendfsync', 'always', '--appendfilename', 'server0.aof', '--appenddirname', 'server0-aof'] : ['--appendonly', 'no']),
            '--dbfilename', `server${i}.rdb`,
          ],
          logFile: join(dir, `redis-server-${i}.log`),
        }),
      ),
    );
    const endpoints = servers.map((s) => s.endpoint);
    return {
      endpoints,
      url: (via = endpoints) => `redlock://${via.map((e) => `${e.host}:${e.port}`).join(',')}?fence=0`,
      streamUrl: (via: readonly Endpoint[] = endpoints) => `redis://${via[0]!.host}:${via[0]!.port}`,
      slow: (ms) => servers[0]!.pause(ms),
      restart: async (downMs) => {
        await Promise.all(servers.map((s) => s.kill()));
        await new Promise((r) => setTimeout(r, downMs));
        await Promise.all(servers.map((s) => s.start()));
      },
      members: {
        count: SERVERS,
        kill: (i) => servers[i]!.kill(),
        start: (i) => servers[i]!.start(),
      },
      stop: async () => {
        await Promise.all(servers.map((s) => s.stop()));
      },
    };
  },
};
