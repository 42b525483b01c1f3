/**
 * PostgreSQL under chaos: a private server from the installed binaries (initdb into the run's
 * directory, then `postgres` itself on a free port, as the `postgres` user when the suite runs as
 * root), with PostgreSQL's safe defaults kept: fsync on, synchronous_commit on, full_page_writes
 * on. Each node reaches it through its own fault proxy.
 *
 * `restart-store` kill -9s the postmaster and every backend at once (the whole process group, as
 * a crash of the host would) and starts it again on the same port: crash recovery replays the
 * WAL, so every acknowledged write must still be there. `slow` SIGSTOPs the whole group.
 */
import { execFileSync } from 'node:child_process';
import { chmodSync, chownSync, existsSync, mkdirSync } from 'node:fs';
import { join } from 'node:path';
import pg from 'pg';
import { PG_BIN } from '../../stores/pg-instance.js';
import type { Endpoint } from '../proxy/index.js';
import { PrivateServer } from './private-server.js';
import type { ChaosBackend, ChaosInstance } from './types.js';

/** The uid and gid of the `postgres` user when running as root (PostgreSQL refuses root), else null. */
function postgresUser(): { uid: number; gid: number } | null {
  if (process.getuid?.() !== 0) return null;
  const uid = Number(execFileSync('id', ['-u', 'postgres'], { encoding: 'utf8' }).trim());
  const gid = Number(execFileSync('id', ['-g', 'postgres'], { encoding: 'utf8' }).trim());
  return { uid, gid };
}

/** True when the server answers a query (not only accepts: it refuses while recovering). */
async function answers(endpoint: Endpoint): Promise<boolean> {
  const client = new pg.Client({ host: endpoint.host, port: endpoint.port, user: 'postgres', database: 'postgres', connectionTimeoutMillis: 1000 });
  client.on('error', () => {});
  try {
    await client.connect();
    await client.query('SELECT 1');
    return true;
  } catch {
    return false;
  } finally {
    await client.end().catch(() => {});
  }
}

export const postgresChaos: ChaosBackend = {
  name: 'postgres',
  faults: ['pause', 'kill', 'resign', 'slow', 'restart-store', 'cut', 'drop', 'blackhole', 'delay', 'one-way', 'tear'],
  ttlMs: 1500,
  unavailable: () => {
    if (!existsSync(join(PG_BIN, 'initdb')) || !existsSync(join(PG_BIN, 'postgres'))) return `PostgreSQL is not installed in ${PG_BIN} (set TENURE_TEST_PG_BIN)`;
    try {
      postgresUser();
    } catch {
      return 'running as root, but there is no postgres user to run the server as';
    }
    return null;
  },
  async start({ dir }): Promise<ChaosInstance> {
    const user = postgresUser();
    const data = join(dir, 'pgdata');
    mkdirSync(data, { mode: 0o700 });
    if (user) {
      chmodSync(dir, 0o755); // the server, running as postgres, must reach its data directory
      chownSync(data, user.uid, user.gid);
    }
    execFileSync(join(PG_BIN, 'initdb'), ['-D', data, '-U', 'postgres', '--auth=trust', '-E', 'UTF8', '--no-sync'], {
      stdio: 'ignore',
      ...(user ? { uid: user.uid, gid: user.gid } : {}),
    });
    const server = await PrivateServer.start({
      name: 'postgres',
      command: join(PG_BIN, 'postgres'),
      args: (port) => [
        '-D', data,
        '-p', String(port),
        '-k', data,
        '-c', 'listen_addresses=127.0.0.1',
        '-c', 'fsync=on',
        '-c', 'synchronous_commit=on',
        '-c', 'full_page_writes=on',
        '-c', 'max_connections=200',
        '-c', 'shared_buffers=32MB',
      ],
      logFile: join(dir, 'postgres.log'),
      ...(user ? { uid: user.uid, gid: user.gid } : {}),
      processGroup: true,
      stopSignal: 'SIGINT',
      ready: answers,
    });
    const url = (via: readonly Endpoint[] = [server.endpoint]): string => `postgres://postgres@${via[0]!.host}:${via[0]!.port}/postgres`;
    return {
      endpoints: [server.endpoint],
      url,
      slow: (ms) => server.pause(ms),
      restart: (downMs) => server.restart(downMs),
      stop: () => server.stop(),
    };
  },
};
