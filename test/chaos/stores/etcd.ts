/**
 * etcd under chaos: a private 3-member cluster (every member its own `etcd` process on free
 * ports, data on tmpfs when there is one: etcd fsyncs every commit), each node behind one fault
 * proxy per member, so its client (which moves between the members it is given) sees every
 * member through its own proxies.
 *
 * Timing flags as test/stores/etcd-harness.ts: heartbeat 25 ms, election timeout 250 ms, so a
 * raft leader is re-elected quickly and etcd's minimum lease TTL is 1 s. etcd counts lease TTLs
 * in whole seconds (the store asks for ceil(ttl / 1 s)), lets a lease run up to ~0.5 s past it
 * (its expiry check runs every 500 ms) and extends every lease by its TTL when the raft leader
 * changes; the entry's TTL is 2 s, so the liveness bound (TTL + 1 s after the last heal) is not
 * dominated by that rounding.
 *
 * Faults: `kill-member` kill -9s one member (any, the raft leader included) and starts it again
 * with its data; `restart-store` kill -9s all three at once and starts them again; `slow`
 * SIGSTOPs all three for a while; plus the node and proxy faults.
 */
import { mkdtempSync, rmSync, existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Endpoint } from '../proxy/index.js';
import { PrivateServer, freePort, missingCommand } from './private-server.js';
import type { ChaosBackend, ChaosInstance } from './types.js';

const MEMBERS = 3;

async function healthy(endpoint: Endpoint): Promise<boolean> {
  const res = await fetch(`http://${endpoint.host}:${endpoint.port}/health`, { signal: AbortSignal.timeout(500) });
  const body = (await res.json()) as { health?: string };
  return body.health === 'true';
}

export const etcdChaos: ChaosBackend = {
  name: 'etcd',
  faults: ['pause', 'kill', 'resign', 'slow', 'restart-store', 'kill-member', 'cut', 'drop', 'blackhole', 'delay', 'one-way', 'tear'],
  ttlMs: 2000,
  unavailable: () => missingCommand('etcd'),
  async start({ dir }): Promise<ChaosInstance> {
    const dataRoot = mkdtempSync(join(existsSync('/dev/shm') ? '/dev/shm' : tmpdir(), 'tenure-chaos-etcd-'));
    const peers = await Promise.all(Array.from({ length: MEMBERS }, async (_, i) => ({ name: `m${i}`, peerUrl: `http://127.0.0.1:${await freePort()}` })));
    const initialCluster = peers.map((p) => `${p.name}=${p.peerUrl}`).join(',');
    const options = (i: number): Parameters<typeof PrivateServer.start>[0] => {
      const peer = peers[i]!;
      return {
        name: `etcd ${peer.name}`,
        command: 'etcd',
        args: (port) => [
          '--name', peer.name,
          '--data-dir', join(dataRoot, peer.name),
          '--listen-client-urls', `http://127.0.0.1:${port}`,
          '--advertise-client-urls', `http://127.0.0.1:${port}`,
          '--listen-peer-urls', peer.peerUrl,
          '--initial-advertise-peer-urls', peer.peerUrl,
          '--initial-cluster', initialCluster,
          '--initial-cluster-state', 'new', // ignored once the data directory exists
          '--initial-cluster-token', `tenure-chaos-${dataRoot.slice(-6)}`,
          '--heartbeat-interval', '25',
          '--election-timeout', '250',
          '--log-level', 'error',
        ],
        logFile: join(dir, `etcd-${peer.name}.log`),
        // Members start together: none is healthy before a quorum is up.
        ready: healthy,
      };
    };
    let servers: PrivateServer[];
    try {
      servers = await Promise.all(peers.map((_, i) => PrivateServer.start(options(i))));
    } catch (err) {
      rmSync(dataRoot, { recursive: true, force: true });
      throw err;
    }
    const endpoints = servers.map((s) => s.endpoint);
    const url = (via: readonly Endpoint[] = endpoints): string => `etcd://${via.map((e) => `${e.host}:${e.port}`).join(',')}`;
    return {
      endpoints,
      url,
      slow: async (ms) => {
        const held = await Promise.all(servers.map((s) => s.pause(ms)));
        const ok = held.filter((h): h is { from: number; to: number } => h !== null);
        return ok.length === 0 ? null : { from: Math.min(...ok.map((h) => h.from)), to: Math.max(...ok.map((h) => h.to)) };
      },
      restart: async (downMs) => {
        await Promise.all(servers.map((s) => s.kill()));
        await new Promise((r) => setTimeout(r, downMs));
        await Promise.all(servers.map((s) => s.start()));
      },
      members: {
        count: MEMBERS,
        kill: (i) => servers[i]!.kill(),
        start: (i) => servers[i]!.start(),
      },
      stop: async () => {
        await Promise.all(servers.map((s) => s.stop()));
        rmSync(dataRoot, { recursive: true, force: true });
      },
    };
  },
};
