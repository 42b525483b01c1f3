/**
 * `azblob://ACCOUNT:KEY@HOST[:PORT]/CONTAINER` (plain HTTP) or `azblobs://…` (HTTPS): an Azure
 * storage account's blob service, the account key percent-encoded (it holds `/`, `+` and `=`).
 * A host that is an IP address or `localhost` is addressed path-style, as Azurite serves it
 * (`http://HOST:PORT/ACCOUNT/CONTAINER`); any other host is Azure's own, addressed by host
 * (`https://HOST/CONTAINER`, such as `myaccount.blob.core.windows.net`).
 *
 * `azblob:///CONTAINER` takes the account from the connection string in the environment variable
 * TENURE_AZURE_CONNECTION_STRING instead, so that no key is written in a URL.
 */
import { InvalidArgumentError, redactUrl } from '../../core/index.js';
import type { StoreBackend } from '../backend.js';

export const CONNECTION_STRING_ENV = 'TENURE_AZURE_CONNECTION_STRING';

export interface AzureBlobOpenOptions {
  kind: 'azblob';
  /** The container holding the store's blobs (created on first use when missing). */
  container: string;
  /** `http(s)://…` of the account's blob service, with the account in the path for path-style hosts. */
  endpoint?: string;
  account?: string;
  /** The account key (base64). Never shown: messages redact it. */
  accountKey?: string;
  /** An Azure storage connection string, instead of endpoint, account and key. */
  connectionString?: string;
}

const CONTAINER = /^(?=.{3,63}$)[a-z0-9](?:[a-z0-9]|-(?!-))*[a-z0-9]$/;
const BASE64 = /^[A-Za-z0-9+/]+={0,2}$/;

/** A container name as Azure allows it: 3–63 of a-z 0-9 and single hyphens, starting and ending with a letter or digit. */
export function checkContainer(value: string): string {
  if (!CONTAINER.test(value)) {
    throw new InvalidArgumentError('store', `an Azure container name is 3 to 63 characters of a-z, 0-9 and single hyphens, starting and ending with a letter or digit, got '${value.slice(0, 80)}'`);
  }
  return value;
}

function decode(part: string, what: string, url: string): string {
  try {
    return decodeURIComponent(part);
  } catch {
    throw new InvalidArgumentError('store', `the ${what} in '${redactUrl(url)}' is not valid percent-encoding`);
  }
}

export function parseAzureBlobUrl(url: string, env: NodeJS.ProcessEnv = process.env): AzureBlobOpenOptions {
  const usage = `expected azblob://ACCOUNT:KEY@HOST[:PORT]/CONTAINER (azblobs:// for HTTPS, the key percent-encoded) or azblob:///CONTAINER with ${CONNECTION_STRING_ENV}`;
  const fromEnv = /^azblobs?:\/\/\/([^/?#]*)\/?$/i.exec(url);
  if (fromEnv) {
    const connectionString = env[CONNECTION_STRING_ENV];
    if (connectionString === undefined || connectionString.trim() === '') {
      throw new InvalidArgumentError('store', `azblob:///CONTAINER takes the account from ${CONNECTION_STRING_ENV}, which is not set`);
    }
    if (!/(^|;)\s*(AccountKey|SharedAccessSignature|BlobEndpoint|UseDevelopmentStorage)=/i.test(connectionString)) {
      throw new InvalidArgumentError('store', `${CONNECTION_STRING_ENV} is not an Azure storage connection string (no AccountKey, SharedAccessSignature or BlobEndpoint)`);
    }
    return { kind: 'azblob', container: checkContainer(decode(fromEnv[1]!, 'container', url)), connectionString: connectionString.trim() };
  }
  // The key may hold a raw '/' or '@': the userinfo ends at the last '@' before the host.
  const m = /^(azblobs?):\/\/([^:@]+):(.*)@([^@/?#]+)\/([^/?#]*)\/?$/is.exec(url);
  if (!m) throw new InvalidArgumentError('store', `${usage}, got '${redactUrl(url)}'`);
  const [, scheme, rawAccount, rawKey, host, rawContainer] = m as unknown as [string, string, string, string, string, string];
  const account = decode(rawAccount, 'account', url);
  if (!/^[a-z0-9]{3,24}$/.test(account)) throw new InvalidArgumentError('store', `an Azure storage account name is 3 to 24 of a-z and 0-9, got '${account.slice(0, 40)}'`);
  const accountKey = decode(rawKey, 'account key', url);
  if (!BASE64.test(accountKey) || accountKey.length % 4 !== 0) {
    throw new InvalidArgumentError('store', `the account key is not base64 (percent-encode its '/', '+' and '='), in '${redactUrl(url)}'`);
  }
  const hm = /^(\[[0-9a-f:.]+\]|[a-z0-9.-]+)(?::(\d{1,5}))?$/i.exec(host);
  if (!hm || (hm[2] !== undefined && (Number(hm[2]) < 1 || Number(hm[2]) > 65535))) {
    throw new InvalidArgumentError('store', `expected HOST or HOST:PORT (port 1-65535), got '${host.slice(0, 80)}'`);
  }
  const protocol = scheme.toLowerCase() === 'azblobs' ? 'https' : 'http';
  const pathStyle = /^(\[.*\]|\d{1,3}(\.\d{1,3}){3}|localhost)$/i.test(hm[1]!);
  const endpoint = pathStyle ? `${protocol}://${host}/${account}` : `${protocol}://${host}`;
  return { kind: 'azblob', container: checkContainer(decode(rawContainer, 'container', url)), endpoint, account, accountKey };
}

export const azureBlobBackend: StoreBackend<AzureBlobOpenOptions> = {
  kind: 'azblob',
  schemes: ['azblob', 'azblobs'],
  shown: ['azblob://', 'azblobs://'],
  parse: ({ url }) => parseAzureBlobUrl(url),
  async open(options) {
    const { AzureBlobStore } = await import('./azure-store.js');
    return new AzureBlobStore(options);
  },
};
