/**
 * Every store `openStore` can open, by URL scheme and by `StoreOptions.kind`. A backend joins by
 * one folder under `stores/` (with a `backend.ts`: its schemes, URL parser and lazy opener) and
 * one line here; the contract suite adds it with one line in `test/contract/backends.ts`.
 * The order is the order of the "available: ..." list in error messages.
 */
import type { StoreBackend } from './backend.js';
import { sqliteBackend } from './sqlite/backend.js';
import { memoryBackend } from './memory/backend.js';
import { postgresBackend } from './postgres/backend.js';
import { mysqlBackend } from './mysql/backend.js';
import { redisBackend } from './redis/backend.js';
import { etcdBackend } from './etcd/backend.js';
import { raftBackend } from './raft/backend.js';
import { zookeeperBackend } from './zookeeper/backend.js';
import { azureBlobBackend } from './azure/backend.js';

export const storeBackends = [
  sqliteBackend,
  memoryBackend,
  postgresBackend,
  mysqlBackend,
  redisBackend,
  etcdBackend,
  raftBackend,
  zookeeperBackend,
  azureBlobBackend,
] as const;

export type { StoreBackend, StoreUrl } from './backend.js';

type OptionsOf<B> = B extends StoreBackend<infer O> ? O : never;

/** The options of any registered store: the union of each store folder's own. */
export type StoreOptions = OptionsOf<(typeof storeBackends)[number]>;

/**
 * Schemes that are not stores but that users may try where a store URL goes: the one clear
 * message each gets (shown after the stores in "available: ...").
 */
export const notStores: Readonly<Record<string, { shown: string; why: string }>> = {
  redlock: {
    shown: 'redlock:// for tenure lock',
    why: 'redlock://host:port,… is a lock over several Redis servers, not a store: open it with openRedlock(url)',
  },
};

/** The backend serving a URL scheme (lower case, without the colon), if any. */
export function backendForScheme(scheme: string): StoreBackend<StoreOptions> | undefined {
  return storeBackends.find((b) => b.schemes.includes(scheme));
}

/** The backend of a `StoreOptions.kind`, if any. */
export function backendForKind(kind: string): StoreBackend<StoreOptions> | undefined {
  return storeBackends.find((b) => b.kind === kind);
}

/** The schemes for messages: `sqlite:PATH, memory:, ... (and redlock:// for tenure lock)`. */
export function availableSchemes(): string {
  const others = Object.values(notStores).map((n) => n.shown);
  return storeBackends.flatMap((b) => b.shown).join(', ') + (others.length > 0 ? ` (and ${others.join(', ')})` : '');
}
