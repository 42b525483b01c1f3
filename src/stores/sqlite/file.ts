/**
 * Checks on the database path made before SQLite sees it, so that a careless path gets one clear
 * error instead of a side effect: SQLite would create a missing file (even for a read-only look),
 * open a device such as /dev/null and put a `-journal` file beside it, and Node's recursive mkdir
 * loops forever under /proc.
 */
import { mkdirSync, statSync } from 'node:fs';
import type { Stats } from 'node:fs';
import { dirname } from 'node:path';
import { StoreUnavailableError } from '../../core/index.js';

function statOf(path: string): Stats | undefined {
  try {
    return statSync(path, { throwIfNoEntry: false });
  } catch (err) {
    // ENOTDIR: a component of the path is a file; EACCES: cannot look. Either way: not there for us.
    if ((err as NodeJS.ErrnoException).code === 'ENOTDIR') return undefined;
    throw new StoreUnavailableError(`sqlite store: cannot look at ${path}: ${(err as Error).message}`, { cause: err });
  }
}

function kindOf(s: Stats): string {
  if (s.isDirectory()) return 'a directory';
  if (s.isCharacterDevice()) return 'a character device';
  if (s.isBlockDevice()) return 'a block device';
  if (s.isFIFO()) return 'a named pipe';
  if (s.isSocket()) return 'a socket';
  return 'not a regular file';
}

/** The nearest ancestor of `path` that exists, with its stat. */
function nearestExisting(path: string): { dir: string; stat: Stats } {
  let dir = dirname(path);
  for (;;) {
    const s = statOf(dir);
    if (s) return { dir, stat: s };
    const up = dirname(dir);
    if (up === dir) throw new StoreUnavailableError(`sqlite store: no existing directory above ${path}`);
    dir = up;
  }
}

/**
 * `path` (absolute) is an existing regular file, or (unless `mustExist`) does not exist yet and
 * its directory exists or is created here, one level at a time. Throws StoreUnavailableError
 * with one line otherwise; nothing is created then.
 */
export function prepareDatabaseFile(path: string, mustExist: boolean): void {
  const s = statOf(path);
  if (s) {
    if (!s.isFile()) throw new StoreUnavailableError(`sqlite store: ${path} is ${kindOf(s)}, not a database file`);
    return;
  }
  const { dir, stat } = nearestExisting(path);
  if (!stat.isDirectory()) {
    const what = mustExist ? `no such store file ${path}` : `cannot create ${path}`;
    throw new StoreUnavailableError(`sqlite store: ${what} (${dir} is ${kindOf(stat)}, not a directory)`);
  }
  if (mustExist) throw new StoreUnavailableError(`sqlite store: no such store file ${path}`);
  // Create the missing directories one level at a time (no recursive mkdir: under /proc it loops).
  const missing: string[] = [];
  for (let d = dirname(path); d !== dir; d = dirname(d)) missing.unshift(d);
  for (const d of missing) {
    try {
      mkdirSync(d);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'EEXIST' && statOf(d)?.isDirectory()) continue;
      throw new StoreUnavailableError(`sqlite store: cannot create directory ${d} for ${path}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`, { cause: err });
    }
  }
}
