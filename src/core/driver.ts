/**
 * Loading an optional peer dependency (a store's driver) on first use. Not exported from the core
 * index: it is the stores' and Redlock's way to their drivers, not a part of the public surface.
 */
import { createRequire } from 'node:module';
import { DriverMissingError } from './errors.js';

const require = createRequire(import.meta.url);

/**
 * The package `pkg` (its default export when it has one); DriverMissingError naming `pkg` and
 * `store` (the store or layer that needs it) when it is not installed.
 */
export function loadDriver<T>(pkg: string, store: string): T {
  try {
    const mod = require(pkg) as T & { default?: T };
    return mod.default ?? mod;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'MODULE_NOT_FOUND') throw new DriverMissingError(pkg, store);
    throw err;
  }
}
