/**
 * The `etcd3` npm package, loaded only when an etcd store is used (an optional peer dependency).
 */
import { createRequire } from 'node:module';
import { DriverMissingError } from '../../core/index.js';
import type * as Etcd3Module from 'etcd3';

export type { Etcd3, IKeyValue, IResponseHeader, ICompare, IRequestOp, Watcher, IOptions } from 'etcd3';

const require = createRequire(import.meta.url);
let loaded: typeof Etcd3Module | null = null;

/** The etcd3 module; throws DriverMissingError when it is not installed. */
export function loadEtcd3(): typeof Etcd3Module {
  if (loaded) return loaded;
  try {
    loaded = require('etcd3') as typeof Etcd3Module;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'MODULE_NOT_FOUND') throw new DriverMissingError('etcd3', 'etcd');
    throw err;
  }
  return loaded;
}
