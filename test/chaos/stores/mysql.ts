/**
 * MySQL under chaos: a private MariaDB (or MySQL) server, `mariadb-install-db` into the run's
 * directory and `mariadbd` on a free port, with the durable InnoDB settings tenure's
 * documentation assumes (innodb_flush_log_at_trx_commit=1, doublewrite on). Each node reaches it
 * through its own fault proxy.
 *
 * `restart-store` kill -9s the server and starts it again on the same port (InnoDB crash
 * recovery: every acknowledged write must still be there); `slow` SIGSTOPs it for a while.
 */
import { execFileSync } from 'node:child_process';
import { join } from 'node:path';
import mysql from 'mysql2/promise';
import type { Endpoint } from '../proxy/index.js';
import { PrivateServer } from './private-server.js';
import type { ChaosBackend, ChaosInstance } from './types.js';

/** The first of `names` found on PATH or in /usr/sbin, or null. */
function which(names: readonly string[]): string | null {
  for (const name of names) {
    try {
      return execFileSync('sh', ['-c', `PATH="$PATH:/usr/sbin:/usr/local/sbin" command -v ${name}`], { encoding: 'utf8' }).trim() || null;
    } catch {
      // try the next
    }
  }
  return null;
}

const serverBinary = (): string | null => which(['mariadbd', 'mysqld']);
const installBinary = (): string | null => which(['mariadb-install-db', 'mysql_install_db']);

async function query(endpoint: Endpoint, sql: string): Promise<void> {
  const c = await mysql.createConnection({ host: endpoint.host, port: endpoint.port, user: 'root', connectTimeout: 1000 });
  try {
    await c.query(sql);
  } finally {
    await c.end().catch(() => {});
  }
}

export const mysqlChaos: ChaosBackend = {
  name: 'mysql',
  faults: ['pause', 'kill', 'resign', 'slow', 'restart-store', 'cut', 'drop', 'blackhole', 'delay', 'one-way', 'tear'],
  ttlMs: 1500,
  unavailable: () => (serverBinary() && installBinary() ? null : 'mariadbd/mysqld or mariadb-install-db is not installed'),
  async start({ dir }): Promise<ChaosInstance> {
    const data = join(dir, 'mysql-data');
    const user = process.getuid?.() === 0 ? ['--user=root'] : [];
    // --no-defaults: the machine's my.cnf (its datadir, socket, user) must not leak in.
    execFileSync(installBinary()!, ['--no-defaults', `--datadir=${data}`, ...user, '--auth-root-authentication-method=normal', '--skip-test-db', '--skip-name-resolve'], {
      stdio: 'ignore',
    });
    const server = await PrivateServer.start({
      name: 'mariadbd',
      command: serverBinary()!,
      args: (port) => [
        '--no-defaults',
        `--datadir=${data}`,
        ...user,
        `--port=${port}`,
        '--bind-address=127.0.0.1',
        `--socket=${join(dir, 'mysqld.sock')}`,
        `--pid-file=${join(dir, 'mysqld.pid')}`,
        '--skip-name-resolve',
        '--innodb-flush-log-at-trx-commit=1',
        '--innodb-doublewrite=1',
        '--innodb-buffer-pool-size=64M',
        '--max-connections=300',
      ],
      logFile: join(dir, 'mariadbd.log'),
      ready: async (endpoint) => {
        await query(endpoint, 'SELECT 1');
        return true;
      },
    });
    await query(server.endpoint, 'CREATE DATABASE IF NOT EXISTS tenure');
    const url = (via: readonly Endpoint[] = [server.endpoint]): string => `mysql://root@${via[0]!.host}:${via[0]!.port}/tenure`;
    return {
      endpoints: [server.endpoint],
      url,
      slow: (ms) => server.pause(ms),
      restart: (downMs) => server.restart(downMs),
      stop: () => server.stop(),
    };
  },
};
