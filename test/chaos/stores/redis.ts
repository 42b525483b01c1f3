/**
 * Redis under chaos: one private redis-server on a free port (AOF with fsync always, so an
 * acknowledged write survives kill -9), each node behind its own fault proxy. `slow` stops the
 * server process for a while (SIGSTOP/SIGCONT); `restart-store` kill -9s it and starts it again.
 */
import { join } from 'node:path';
import { PrivateServer, missingCommand } from './private-server.js';
import type { ChaosBackend, ChaosInstance } from './types.js';

export const redisChaos: ChaosBackend = {
  name: 'redis',
  faults: ['pause', 'kill', 'resign', 'slow', 'restart-store', 'cut', 'drop', 'blackhole', 'delay', 'one-way', 'tear'],
  ttlMs: 1500,
  unavailable: () => missingCommand('redis-server'),
  async start({ dir }): Promise<ChaosInstance> {
    const server = await PrivateServer.start({
      name: 'redis-server',
      command: 'redis-server',
      args: (port) => ['--port', String(port), '--bind', '127.0.0.1', '--dir', dir, '--save', '', '--appendonly', 'yes', '--appendfsync', 'always'],
      logFile: join(dir, 'redis-server.log'),
    });
    return {
      endpoints: [server.endpoint],
      url: (via = [server.endpoint]) => `redis://${via[0]!.host}:${via[0]!.port}`,
      slow: (ms) => server.pause(ms),
      restart: (downMs) => server.restart(downMs),
      stop: () => server.stop(),
    };
  },
};
