/**
 * The `@azure/storage-blob` npm package, loaded only when an Azure Blob store is used (an
 * optional peer dependency).
 */
import { loadDriver } from '../../core/driver.js';
import type * as AzureBlobModule from '@azure/storage-blob';

export type { ContainerClient, BlockBlobClient, AppendBlobClient, BlobDownloadResponseParsed } from '@azure/storage-blob';

let loaded: typeof AzureBlobModule | null = null;

/** The @azure/storage-blob module; throws DriverMissingError when it is not installed. */
export function loadAzureBlob(): typeof AzureBlobModule {
  loaded ??= loadDriver<typeof AzureBlobModule>('@azure/storage-blob', 'azblob');
  return loaded;
}
