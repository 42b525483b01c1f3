/**
 * Azure Blob storage under chaos: one private Azurite (the blob service of the `azurite` npm
 * package) on a free port, each node behind its own fault proxy (the store addresses Azurite
 * path-style, so a proxy's address is as good as Azurite's own). `slow` stops the Azurite process
 * for a while (SIGSTOP/SIGCONT).
 *
 * The TTL is 15 s, a blob lease's shortest: Azure decides expiry, and a lease it grants cannot be
 * shorter, so a killed leader's lease blocks its group for up to 15 s and a run needs about
 * 90 s (`ciDurationMs`). A lease's age is known to the second only (the service's `Date`
 * header; the store counts it up to 1 s older, the safe side), so the read router's lag bound is
 * 3 s here (`readMaxLagMs`), where a 1 s bound would route no read to a follower.
 *
 * No `restart-store`: Azurite keeps its data in memory and saves it to disk on an interval
 * (LokiJS), so a kill -9 of the emulator loses acknowledged writes (terms among them), which
 * Azure's storage does not; restarting the emulator would test the emulator, not the store.
 */
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { PrivateServer } from './private-server.js';
import type { ChaosBackend, ChaosInstance } from './types.js';
import { AZURITE_ACCOUNT, AZURITE_KEY } from '../../fixtures/azurite.js';

const require = createRequire(import.meta.url);

function azuriteMain(): string | null {
  try {
    return join(dirname(require.resolve('azurite/package.json')), 'dist', 'src', 'blob', 'main.js');
  } catch {
    return null;
  }
}

export const azureChaos: ChaosBackend = {
  name: 'azblob',
  faults: ['pause', 'kill', 'resign', 'slow', 'cut', 'drop', 'blackhole', 'delay', 'one-way', 'tear'],
  ttlMs: 15_000,
  ciDurationMs: 90_000,
  readMaxLagMs: 3000,
  unavailable: () => (azuriteMain() === null ? "the 'azurite' package is not installed (npm ci installs it: a devDependency)" : null),
  async start({ dir }): Promise<ChaosInstance> {
    const main = azuriteMain()!;
    const server = await PrivateServer.start({
      name: 'azurite',
      command: process.execPath,
      args: (port) => [main, '--blobHost', '127.0.0.1', '--blobPort', String(port), '--inMemoryPersistence', '--loose', '--skipApiVersionCheck', '--disableTelemetry', '--silent'],
      cwd: dir,
      logFile: join(dir, 'azurite.log'),
    });
    const key = encodeURIComponent(AZURITE_KEY);
    return {
      endpoints: [server.endpoint],
      url: (via = [server.endpoint]) => `azblob://${AZURITE_ACCOUNT}:${key}@${via[0]!.host}:${via[0]!.port}/chaos`,
      slow: (ms) => server.pause(ms),
      stop: () => server.stop(),
    };
  },
};
