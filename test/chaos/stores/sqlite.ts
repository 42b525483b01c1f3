/**
 * SQLite under chaos: one database file on this host, shared by every node process.
 *
 * Faults: pause, kill, slow (a helper process holds BEGIN IMMEDIATE, the database's one write
 * lock, for the time asked). No restart-store (there is no server to restart) and no proxy
 * faults (there is no connection to cut).
 *
 * Caveat: a node SIGSTOPped inside a write transaction keeps the write lock until SIGCONT, so
 * every other node's writes fail meanwhile. That is SQLite, not a safety problem; the nemesis
 * always sends SIGCONT after a bounded pause.
 */
import { spawn } from 'node:child_process';
import { join } from 'node:path';
import { SqliteStore } from '../../../src/stores/sqlite/index.js';
import { fixture } from '../dist.js';
import type { ChaosBackend, ChaosInstance } from './types.js';

export const sqliteChaos: ChaosBackend = {
  name: 'sqlite',
  faults: ['pause', 'kill', 'resign', 'slow'],
  ttlMs: 1500,
  async start({ dir }): Promise<ChaosInstance> {
    const path = join(dir, 'tenure.db');
    // Create the schema once, so the nodes do not all race to migrate at start.
    await new SqliteStore({ path }).close();
    return {
      endpoints: [],
      url: () => `sqlite:${path}`,
      slow: (ms) => holdWriteLock(path, ms),
      stop: async () => {},
    };
  },
};

/** Hold the write lock of `path` for `ms` from a helper process; the interval it really held it. */
function holdWriteLock(path: string, ms: number): Promise<{ from: number; to: number } | null> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [fixture('chaos-sqlite-lock'), path, String(Math.round(ms))], { stdio: ['ignore', 'pipe', 'inherit'] });
    let out = '';
    child.stdout.on('data', (b: Buffer) => (out += b.toString()));
    const killer = setTimeout(() => child.kill('SIGKILL'), ms + 10_000);
    child.on('exit', () => {
      clearTimeout(killer);
      const from = /locked (\d+)/.exec(out);
      const to = /released (\d+)/.exec(out);
      resolve(from && to ? { from: Number(from[1]), to: Number(to[1]) } : null);
    });
  });
}
