/**
 * Which store a command uses (`--store`, else TENURE_STORE, else the embedded SQLite default) and
 * opening it with failures turned into one line that names the store.
 */
import { resolve } from 'node:path';
import { InvalidArgumentError, TenureError, redactSecrets, redactUrl } from '../core/index.js';
import { DEFAULT_STORE_URL, openStore, parseStoreUrl } from '../open.js';
import type { StoreOptions, TenureStore } from '../open.js';
import type { OptionSpec } from './args.js';

export const STORE_OPTION: OptionSpec = {
  type: 'string',
  value: 'URL',
  help: `store URL (default: $TENURE_STORE, else ${DEFAULT_STORE_URL})`,
};

/** The store could not be opened; the message names it. Exit code 1. */
export class StoreOpenError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'StoreOpenError';
  }
}

export interface StoreTarget {
  /** The URL as a child process should receive it: SQLite paths made absolute. */
  readonly url: string;
  /** The URL for messages: its credentials (password, secret query parameters) replaced by `***`. */
  readonly display: string;
  readonly options: StoreOptions;
}

/**
 * Pick and check the store URL. Throws InvalidArgumentError (exit 2) on an unknown scheme or a
 * malformed URL, before anything is opened.
 */
export function storeTarget(flag: string | undefined, env: NodeJS.ProcessEnv): StoreTarget {
  const given = flag ?? (env.TENURE_STORE && env.TENURE_STORE.trim() !== '' ? env.TENURE_STORE : DEFAULT_STORE_URL);
  let options: StoreOptions;
  try {
    options = parseStoreUrl(given);
  } catch (err) {
    if (err instanceof InvalidArgumentError) throw new InvalidArgumentError('--store', redactSecrets(err.message.replace(/^store: /, ''), [given]));
    throw err;
  }
  const url = options.kind === 'sqlite' ? `sqlite:${resolve(options.path)}` : given.trim();
  return { url, display: redactUrl(url), options };
}

/**
 * A store's error for the user: bad input in the URL (a `?prefix=` the store refuses) stays bad
 * input (exit 2); anything else becomes a StoreOpenError (exit 1) that names the store. Either
 * way no credential of the URL is shown.
 */
function storeFailure(what: string, target: StoreTarget, err: unknown): Error {
  const reason = redactSecrets(err instanceof Error ? err.message : String(err), [target.url]);
  if (err instanceof TenureError && err.code === 'INVALID_ARGUMENT') {
    return new InvalidArgumentError('--store', `${target.display}: ${reason.replace(/^store: /, '')}`);
  }
  return new StoreOpenError(`${what} ${target.display}: ${reason}`, { cause: err });
}

/**
 * Open the store. `timeoutMs` lets one-shot commands (append, log, status) wait longer for other
 * processes' SQLite transactions than the elector's calls do; `readOnly` (status, log) opens a
 * SQLite store without creating or writing anything: a missing file is an error, not a new store.
 */
export async function openCliStore(target: StoreTarget, timeoutMs?: number, readOnly = false): Promise<TenureStore> {
  const options: StoreOptions =
    target.options.kind === 'sqlite' ? { ...target.options, ...(timeoutMs !== undefined ? { timeoutMs } : {}), ...(readOnly ? { readOnly } : {}) } : target.options;
  try {
    return await openStore(options);
  } catch (err) {
    if (err instanceof TenureError && err.code === 'DRIVER_MISSING') throw err;
    // Store errors already name the store; raw system errors (mkdir, open) do not.
    throw storeFailure('cannot open store', target, err);
  }
}

/** How long the start-up check of `run` and `lock` waits for the store, ms. */
const PROBE_TIMEOUT_MS = 10_000;

/**
 * Check that the store answers before campaigning, so that a wrong or unreachable store is one
 * line and exit code 1 rather than a retry loop. Later outages are the elector's to ride out.
 */
export async function probeStore(store: TenureStore, target: StoreTarget, name: string): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  try {
    await Promise.race([
      store.read(name),
      new Promise<never>((_, reject) => {
        timer = setTimeout(() => reject(new Error(`no answer within ${PROBE_TIMEOUT_MS / 1000} s`)), PROBE_TIMEOUT_MS);
      }),
    ]);
  } catch (err) {
    if (err instanceof TenureError && err.code === 'INVALID_ARGUMENT') throw err; // about the name
    if (err instanceof TenureError && err.code === 'STORE_DATA') {
      throw new StoreOpenError(`store ${target.display} holds data tenure cannot use: ${redactSecrets(err.message, [target.url])}`, { cause: err });
    }
    throw storeFailure('cannot reach store', target, err);
  } finally {
    clearTimeout(timer);
  }
}
