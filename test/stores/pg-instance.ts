/**
 * A private PostgreSQL 15 instance from the installed binaries, on a free port in a temp dir,
 * for tests that stop and restart the server. PostgreSQL refuses to run as root, so when the
 * tests run as root the server runs as the `postgres` user.
 */
import { execFile } from 'node:child_process';
import { chmodSync, chownSync, existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { freePort } from '../fixtures/ports.js';

export { freePort };

const run = promisify(execFile);
export const PG_BIN = process.env.TENURE_TEST_PG_BIN ?? '/usr/lib/postgresql/15/bin';

export function pgBinariesAvailable(): boolean {
  return existsSync(join(PG_BIN, 'initdb')) && existsSync(join(PG_BIN, 'pg_ctl'));
}



export class PgInstance {
  readonly dir: string;
  readonly port: number;
  readonly url: string;
  private readonly asRoot: boolean;

  private constructor(dir: string, port: number, asRoot: boolean) {
    this.dir = dir;
    this.port = port;
    this.asRoot = asRoot;
    this.url = `postgres://postgres@127.0.0.1:${port}/postgres`;
  }

  static async create(): Promise<PgInstance> {
    const asRoot = process.getuid?.() === 0;
    const dir = mkdtempSync(join(tmpdir(), 'tenure-pg-'));
    chmodSync(dir, 0o700);
    if (asRoot) {
      const uid = Number((await run('id', ['-u', 'postgres'])).stdout.trim());
      const gid = Number((await run('id', ['-g', 'postgres'])).stdout.trim());
      chownSync(dir, uid, gid);
    }
    const port = await freePort();
    const pg = new PgInstance(dir, port, asRoot);
    await pg.exec('initdb', ['-D', join(dir, 'data'), '-U', 'postgres', '--auth=trust', '-E', 'UTF8', '--no-sync']);
    await pg.start();
    return pg;
  }

  private async exec(bin: string, args: string[]): Promise<void> {
    const file = join(PG_BIN, bin);
    if (this.asRoot) await run('runuser', ['-u', 'postgres', '--', file, ...args], { cwd: this.dir });
    else await run(file, args, { cwd: this.dir });
  }

  async start(): Promise<void> {
    const opts = `-p ${this.port} -k ${this.dir} -c listen_addresses=127.0.0.1 -c fsync=off`;
    await this.exec('pg_ctl', ['-D', join(this.dir, 'data'), '-o', opts, '-l', join(this.dir, 'log'), '-w', '-t', '30', 'start']);
  }

  /** `immediate` is a crash (no checkpoint, clients cut off); `fast` a clean shutdown. */
  async stop(mode: 'fast' | 'immediate' = 'fast'): Promise<void> {
    await this.exec('pg_ctl', ['-D', join(this.dir, 'data'), '-m', mode, '-w', '-t', '30', 'stop']);
  }

  async destroy(): Promise<void> {
    await this.stop('immediate').catch(() => {});
    rmSync(this.dir, { recursive: true, force: true });
  }
}
