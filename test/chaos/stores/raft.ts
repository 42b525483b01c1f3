/**
 * The Raft store under chaos: a private 3-member cluster of `tenure raft serve` processes (the
 * built bin/tenure.js, every member on its own free loopback port with its own data directory),
 * each node behind one fault proxy per member, so its raft:// client (which moves between the
 * members it is given, following NOT_LEADER hints) sees every member through its own proxies. The
 * members talk to each other directly: the proxies cut a node off the store, not the store apart.
 *
 * The cluster secret: the members read it from TENURE_RAFT_SECRET in their environment (set here
 * for every incarnation, whatever the caller's environment holds); the nodes, the followers and the
 * runner's own reads get it through `?secret-file=` in the URL, so no process depends on the
 * environment it inherited.
 *
 * Timing as test/stores/raft/serve-cluster.ts (election timeout 1 s, heartbeat 100 ms: shorter
 * timeouts cause needless elections on this loaded machine). A member's kill -9 or stall costs a
 * new Raft election (1–2 s) before the store answers again, so the entry's TTL is 3 s: leases
 * outlive a Raft leader change, and the liveness bound (TTL + 1 s after the last heal) is not
 * dominated by it.
 *
 * Faults: `kill-member` kill -9s one member (the Raft leader included) and starts it again on its
 * data; `restart-store` kill -9s all three and starts them again (every acknowledged write was
 * fsynced by a majority, so nothing acknowledged may be lost); `slow` SIGSTOPs all three for a
 * while; plus the node and proxy faults.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';
import type { Endpoint } from '../proxy/index.js';
import { BIN } from '../../cli/helpers.js';
import { TIMING } from '../../stores/raft/serve-cluster.js';
import { PrivateServer, freePort } from './private-server.js';
import type { ChaosBackend, ChaosInstance } from './types.js';

const MEMBERS = 3;

export const raftChaos: ChaosBackend = {
  name: 'raft',
  faults: ['pause', 'kill', 'resign', 'slow', 'restart-store', 'kill-member', 'cut', 'drop', 'blackhole', 'delay', 'one-way', 'tear'],
  ttlMs: 3000,
  async start({ dir }): Promise<ChaosInstance> {
    const root = mkdtempSync(join(tmpdir(), 'tenure-chaos-raft-'));
    // A fresh secret per run: a member of another run on a reused port cannot talk to this one.
    const secret = randomBytes(24).toString('hex');
    const secretFile = join(root, 'secret');
    writeFileSync(secretFile, `${secret}\n`, { mode: 0o600 });
    const env: NodeJS.ProcessEnv = { ...process.env, TENURE_RAFT_SECRET: secret };
    delete env.TENURE_STORE;
    delete env.TENURE_DEBUG;
    const ports = await Promise.all(Array.from({ length: MEMBERS }, () => freePort()));
    const peers = ports.map((port, i) => `${i + 1}=127.0.0.1:${port}`).join(',');
    let servers: PrivateServer[];
    try {
      servers = await Promise.all(
        ports.map((port, i) =>
          PrivateServer.start({
            name: `raft member ${i + 1}`,
            command: process.execPath,
            port,
            args: (p) => [BIN, 'raft', 'serve', '--id', String(i + 1), '--listen', `127.0.0.1:${p}`, '--peers', peers, '--data', join(root, `n${i + 1}`), ...TIMING],
            env,
            logFile: join(dir, `raft-n${i + 1}.log`),
            readyTimeoutMs: 30_000,
          }),
        ),
      );
    } catch (err) {
      rmSync(root, { recursive: true, force: true });
      throw err;
    }
    const endpoints = servers.map((s) => s.endpoint);
    const url = (via: readonly Endpoint[] = endpoints): string => `raft://${via.map((e) => `${e.host}:${e.port}`).join(',')}?secret-file=${encodeURIComponent(secretFile)}`;
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
        rmSync(root, { recursive: true, force: true });
      },
    };
  },
};
