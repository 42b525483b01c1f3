/**
 * The `etcd3` npm package, loaded only when an etcd store is used (an optional peer dependency).
 */
import { loadDriver } from '../../core/driver.js';
import type * as Etcd3Module from 'etcd3';

export type { Etcd3, IKeyValue, IResponseHeader, ICompare, IRequestOp, Watcher, IOptions } from 'etcd3';

let loaded: typeof Etcd3Module | null = null;

/** The etcd3 module; throws DriverMissingError when it is not installed. */
export function loadEtcd3(): typeof Etcd3Module {
  loaded ??= loadDriver<typeof Etcd3Module>('etcd3', 'etcd');
  return loaded;
}
