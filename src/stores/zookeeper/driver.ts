/**
 * The `node-zookeeper-client` npm package, loaded only when a ZooKeeper store is used (an optional
 * peer dependency).
 */
import { loadDriver } from '../../core/driver.js';
import type * as ZkModule from 'node-zookeeper-client';

export type { Client, Stat, Event as ZkEvent } from 'node-zookeeper-client';

let loaded: typeof ZkModule | null = null;

/** The node-zookeeper-client module; throws DriverMissingError when it is not installed. */
export function loadZookeeper(): typeof ZkModule {
  if (!loaded) {
    loaded = loadDriver<typeof ZkModule>('node-zookeeper-client', 'zookeeper');
    tolerateNewErrorCodes(loaded);
  }
  return loaded;
}

interface ExceptionFactory {
  create(code: number, path?: string): Error & { code: number; name: string };
  SYSTEM_ERROR: number;
  patchedByTenure?: true;
}

/**
 * node-zookeeper-client 1.1 knows the error codes of ZooKeeper 3.4 only. A reply carrying a later
 * one (3.5+: SESSION_MOVED -118, REQUEST_TIMEOUT -122, THROTTLED -127, …), which a server sends
 * after a restart, made `Exception.create` throw inside the driver's socket handler: an uncaught
 * exception that ended the process (found by the chaos suite). Such a code becomes a SYSTEM_ERROR
 * exception that keeps the real code and says so: the request fails, the store answers
 * StoreUnavailableError, and the process lives.
 */
function tolerateNewErrorCodes(zk: typeof ZkModule): void {
  const factory = (zk as unknown as { Exception: ExceptionFactory }).Exception;
  if (!factory || typeof factory.create !== 'function' || factory.patchedByTenure) return;
  const original = factory.create.bind(factory);
  factory.create = (code: number, path?: string) => {
    try {
      return original(code, path);
    } catch {
      const error = original(factory.SYSTEM_ERROR, path);
      error.code = code;
      error.name = `UNKNOWN_${code}`;
      error.message = `Exception: ZooKeeper error code ${code} (unknown to node-zookeeper-client)${path ? `@${path}` : ''}`;
      return error;
    }
  };
  factory.patchedByTenure = true;
}
