/**
 * The Azure Blob backend as the contract suite runs it: one private Azurite per test process
 * (test/fixtures/azurite.ts), a fresh container per store.
 */
import { randomBytes } from 'node:crypto';
import type { Backend } from '../contract/backends.js';
import { AzureBlobStore, grantedTtlMs, AZURE_MIN_LEASE_MS } from '../../src/stores/azure/index.js';
import { AZURITE_ACCOUNT, AZURITE_KEY, sharedAzurite } from '../fixtures/azurite.js';

const noPush = 'Azure Blob storage has no push';

export const azureBlobBackend: Backend = {
  name: 'azblob',
  capabilities: {
    renewMany: 'not implemented: every blob lease is renewed by its own request',
    watch: `${noPush}: an elector's candidates poll (at most every TTL)`,
    streamPush: `${noPush}: a Follower polls readStream`,
    streamClock: true,
  },
  // A blob lease lasts 15 to 60 whole seconds: a lease that must lapse is a 15 s one.
  minTtlMs: AZURE_MIN_LEASE_MS,
  expiryLagMs: 100,
  grantedTtlMs,
  open: async () => {
    const azurite = await sharedAzurite();
    const container = `contract-${randomBytes(6).toString('hex')}`;
    const store = new AzureBlobStore({ endpoint: `http://127.0.0.1:${azurite.port}/${AZURITE_ACCOUNT}`, account: AZURITE_ACCOUNT, accountKey: AZURITE_KEY, container });
    return {
      store,
      cleanup: async () => {
        await store.close();
        const admin = new AzureBlobStore({ endpoint: `http://127.0.0.1:${azurite.port}/${AZURITE_ACCOUNT}`, account: AZURITE_ACCOUNT, accountKey: AZURITE_KEY, container });
        await admin.container.deleteIfExists();
        await admin.close();
      },
    };
  },
};
