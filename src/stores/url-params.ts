/**
 * The query options of a store URL, checked the one way every store that reads its own URL does
 * (etcd, ZooKeeper, Raft): each one known and given once. A misspelt option is refused, never
 * ignored (ignored, `?prefx=` would leave the app in the default key space), and a repeated one is
 * refused rather than read as its first value.
 */
import { InvalidArgumentError } from '../core/index.js';

/** Throws `fail(message)` (InvalidArgumentError on field `store` by default); a key is quoted cut to 40 characters (it may be anything). */
export function checkUrlParams(
  params: URLSearchParams,
  known: readonly string[],
  what: string,
  fail: (message: string) => Error = (message) => new InvalidArgumentError('store', message),
): void {
  for (const key of new Set(params.keys())) {
    if (!known.includes(key)) throw fail(`unknown ${what} '${key.slice(0, 40)}' (known: ${known.join(', ')})`);
    if (params.getAll(key).length > 1) throw fail(`${what} '${key}' is given twice`);
  }
}
