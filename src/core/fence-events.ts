/**
 * Every fenced write tenure refuses as stale is reported here, once, by the code that refused it
 * (each store's appendFenced, fencedUpdate and the other guards in tenure/fencing), and by a
 * writer that learns of a refusal from the other side (an HTTP 409 to a fenced fetch). Each
 * fenced write's latency is reported here too. `collectMetrics` counts them
 * (tenure_fenced_rejections_total{path,lease}, tenure_fenced_write_seconds{path}); an elector or
 * lock whose own token was refused steps down at once (rule: a stale rejection stops the writer).
 * A listener must not throw; one that does is ignored.
 */
import type { StaleTermError } from './errors.js';

/** The write path a fenced write took. */
export type FencedPath = 'stream' | 'sql' | 'http' | 'message';

export interface FencedRejection {
  readonly error: StaleTermError;
  /** Where the write was to land. */
  readonly path: FencedPath;
  /** `guard`: refused where the write lands (this process holds the resource); `writer`: this process's write was refused elsewhere and it was told. */
  readonly side: 'guard' | 'writer';
  /** The stream of a refused appendFenced. */
  readonly stream?: string;
  /** The table of a refused fencedUpdate. */
  readonly table?: string;
}

export type FencedRejectionListener = (rejection: FencedRejection) => void;

const listeners = new Set<FencedRejectionListener>();

/** Hear of every stale fenced write refused in this process; returns the way to stop. */
export function onFencedRejection(listener: FencedRejectionListener): () => void {
  listeners.add(listener);
  return () => {
    listeners.delete(listener);
  };
}

export interface StaleWhere {
  readonly stream?: string;
  readonly table?: string;
  /** Default: `stream` when a stream is named, `sql` when a table is, else `stream`. */
  readonly path?: FencedPath;
  /** Default `guard`. */
  readonly side?: 'guard' | 'writer';
}

/** Report a refusal and return its error, so a store can `throw reportStale(new StaleTermError(…), { stream })`. */
export function reportStale(error: StaleTermError, where: StaleWhere = {}): StaleTermError {
  const path: FencedPath = where.path ?? (where.table !== undefined ? 'sql' : 'stream');
  const rejection: FencedRejection = { error, path, side: where.side ?? 'guard', ...(where.stream !== undefined ? { stream: where.stream } : {}), ...(where.table !== undefined ? { table: where.table } : {}) };
  for (const listener of [...listeners]) {
    try {
      listener(rejection);
    } catch {
      // a listener's failure is not the writer's
    }
  }
  return error;
}

/**
 * One fenced write's outcome and latency (ms), for the latency histogram. `conflict`: a
 * compare-and-set on a stream's head (a state cell's version) found it moved, nothing written.
 */
export interface FencedWrite {
  readonly path: FencedPath;
  readonly lease: string;
  readonly ms: number;
  readonly outcome: 'ok' | 'stale' | 'conflict' | 'error';
}

export type FencedWriteListener = (write: FencedWrite) => void;

const writeListeners = new Set<FencedWriteListener>();

/** Hear of every fenced write's latency in this process; returns the way to stop. */
export function onFencedWrite(listener: FencedWriteListener): () => void {
  writeListeners.add(listener);
  return () => {
    writeListeners.delete(listener);
  };
}

/** Report a fenced write's latency (no-op when nobody listens). */
export function reportFencedWrite(write: FencedWrite): void {
  if (writeListeners.size === 0) return; // on every fenced write: no copy when nobody listens
  for (const listener of [...writeListeners]) {
    try {
      listener(write);
    } catch {
      // ignored, as above
    }
  }
}
