/**
 * PrivateServer, the start/kill/restart hook later network chaos backends use, on a real
 * redis-server when the machine has one (skipped otherwise), also through a FaultProxy.
 */
import { execFileSync } from 'node:child_process';
import net from 'node:net';
import { describe, expect, it } from 'vitest';
import { FaultProxy } from './proxy/index.js';
import type { Endpoint } from './proxy/index.js';
import { PrivateServer, canConnect } from './stores/private-server.js';

function have(command: string): boolean {
  try {
    execFileSync(command, ['--version'], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
}

/** Raw RESP PING; resolves with the reply line, rejects on close or after `ms`. */
function ping(endpoint: Endpoint, ms = 1000): Promise<string> {
  return new Promise((resolve, reject) => {
    const s = net.connect(endpoint.port, endpoint.host);
    let text = '';
    const timer = setTimeout(() => {
      s.destroy();
      reject(new Error('no answer'));
    }, ms);
    s.on('connect', () => s.write('*1\r\n$4\r\nPING\r\n'));
    s.on('data', (b: Buffer) => {
      text += b.toString();
      if (text.endsWith('\r\n')) {
        clearTimeout(timer);
        s.destroy();
        resolve(text.trim());
      }
    });
    s.on('error', (err) => {
      clearTimeout(timer);
      reject(err);
    });
  });
}

describe.skipIf(!have('redis-server'))('PrivateServer (redis-server)', () => {
  it('starts on a free port, pauses, dies with kill -9, restarts on the same port, also behind a proxy', async () => {
    const server = await PrivateServer.start({
      name: 'redis',
      command: 'redis-server',
      args: (port) => ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'],
      ready: async (e) => (await ping(e)) === '+PONG',
    });
    const proxy = await FaultProxy.start({ target: server.endpoint });
    try {
      expect(await ping(server.endpoint)).toBe('+PONG');
      expect(await ping(proxy.endpoint)).toBe('+PONG');
      const port = server.endpoint.port;
      const pid = server.pid;
      await server.kill();
      expect(server.running).toBe(false);
      expect(await canConnect(server.endpoint)).toBe(false);
      await expect(ping(proxy.endpoint, 500)).rejects.toThrow();
      await server.restart(100);
      expect(server.endpoint.port).toBe(port);
      expect(server.pid).not.toBe(pid);
      expect(await ping(proxy.endpoint)).toBe('+PONG');
      const paused = server.pause(400);
      await expect(ping(proxy.endpoint, 200)).rejects.toThrow('no answer');
      expect(await paused).not.toBeNull();
      expect(await ping(proxy.endpoint)).toBe('+PONG');
      await server.restart(0, false);
      expect(await ping(server.endpoint)).toBe('+PONG');
    } finally {
      await proxy.close();
      await server.stop();
    }
    expect(server.running).toBe(false);
  }, 30_000);
});
