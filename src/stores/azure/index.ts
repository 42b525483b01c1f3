/**
 * `tenure/azure`: the Azure Blob lease store (`azblob://`), on Azure storage or Azurite.
 */
export { AzureBlobStore, grantedTtlMs, AZURE_MIN_LEASE_MS, AZURE_MAX_LEASE_MS, type AzureBlobStoreOptions } from './azure-store.js';
export { parseAzureBlobUrl, CONNECTION_STRING_ENV, type AzureBlobOpenOptions } from './backend.js';
