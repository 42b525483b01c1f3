/**
 * The steps Go's `concurrency.Election` and `concurrency.Mutex` share, written to the same
 * protocol so Go programs, `etcdctl elect` / `etcdctl lock` and tenure wait in one queue:
 *
 * 1. put `<prefix><lease hex>` under the session's lease if it does not exist (else reuse it);
 *    its create revision is the candidate's place in line;
 * 2. wait until no key under the prefix has a lower create revision, watching only the newest
 *    key older than ours (the one just before us: no thundering herd) for its deletion;
 * 3. leave by deleting the key iff its create revision is still ours (Go's Resign does the same;
 *    Go's Mutex.Unlock deletes blindly, tenure compares so a retried unlock never deletes a newer
 *    holder's key).
 */
import { NotLeaderError } from '../../core/index.js';
import type { EtcdConnection } from './connection.js';
import type { IKeyValue, Watcher } from './driver.js';
import { prefixEnd } from './keys.js';

export interface Entered {
  readonly key: Buffer;
  /** Create revision of our key: our place in line, and (once we hold it) the fencing term. */
  readonly revision: number;
  /** The lowest candidate at the time we entered (Mutex's fast path), or null when none. */
  readonly holder: IKeyValue | null;
  /** The value our key had, when it existed before we entered. */
  readonly previousValue: Buffer | null;
}

/** Step 1: join the line (or find our key from an earlier campaign in the same session). */
export async function enter(conn: EtcdConnection, prefix: Buffer, key: Buffer, value: Buffer, leaseId: string): Promise<Entered> {
  const owner = { request_range: { key: prefix, range_end: prefixEnd(prefix), sort_target: 'Create' as const, sort_order: 'Ascend' as const, limit: 1 } };
  const res = await conn.txn(
    'campaign',
    [{ key, target: 'Create', result: 'Equal', create_revision: 0 }],
    [{ request_put: { key, value, lease: leaseId } }, owner],
    [{ request_range: { key } }, owner],
  );
  const holder = res.responses[1]?.response_range?.kvs[0] ?? null;
  if (res.succeeded) return { key, revision: Number(res.header.revision), holder, previousValue: null };
  const mine = res.responses[0]?.response_range?.kvs[0];
  if (!mine) throw new NotLeaderError('campaign: our key vanished while entering; try again');
  return { key, revision: Number(mine.create_revision), holder, previousValue: mine.value };
}

/**
 * Step 2 (Go's waitDeletes): resolve when no key under `prefix` was created before `revision`.
 * Rejects with `signal`'s reason when it aborts. A watch that etcd cancels (its revision was
 * compacted) or that reconnects just reads the line again, so nothing is missed.
 */
export async function waitForTurn(conn: EtcdConnection, prefix: Buffer, revision: number, signal: AbortSignal): Promise<void> {
  for (;;) {
    signal.throwIfAborted();
    const { kvs, revision: readAt } = await conn.range('wait for turn', {
      key: prefix,
      range_end: prefixEnd(prefix),
      max_create_revision: revision - 1,
      sort_target: 'Create',
      sort_order: 'Descend',
      limit: 1,
    });
    const before = kvs[0];
    if (!before) return;
    await waitDelete(conn, before.key, readAt, signal);
  }
}

/** Resolve once `key` is deleted at or after `fromRevision` (or the watch must be redone). */
function waitDelete(conn: EtcdConnection, key: Buffer, fromRevision: number, signal: AbortSignal): Promise<void> {
  return new Promise<void>((resolve, reject) => {
    const watcher = conn.client.watch().key(key).startRevision(String(fromRevision)).watcher();
    let disconnected = false;
    const finish = (err?: unknown): void => {
      signal.removeEventListener('abort', onAbort);
      watcher.removeAllListeners();
      watcher.on('error', () => {});
      void watcher.cancel().catch(() => {});
      if (err === undefined) resolve();
      else reject(err as Error);
    };
    const onAbort = (): void => finish(signal.reason);
    signal.addEventListener('abort', onAbort, { once: true });
    watcher.on('data', (res) => {
      if (res.events.some((ev) => ev.type === 'Delete')) finish();
    });
    watcher.on('disconnected', () => {
      disconnected = true;
    });
    watcher.on('connected', () => {
      if (disconnected) finish(); // the client may have resumed past events: read the line again
    });
    watcher.on('error', () => finish()); // cancelled by etcd (compacted): read the line again
  });
}

/** Step 3: delete our key iff it is still the one we created. Returns whether it was deleted. */
export async function leave(conn: EtcdConnection, key: Buffer, revision: number): Promise<boolean> {
  const res = await conn.txn(
    'resign',
    [{ key, target: 'Create', result: 'Equal', create_revision: revision }],
    [{ request_delete_range: { key } }],
  );
  return res.succeeded;
}

/**
 * Watch our own key: call `onGone` once it is deleted (by expiry, by an operator, by anyone).
 * Returns a function that stops watching.
 */
export function watchOwnKey(conn: EtcdConnection, key: Buffer, revision: number, onGone: () => void): () => void {
  let stopped = false;
  let watcher: Watcher | null = null;
  const start = (from: number): void => {
    if (stopped) return;
    const w = conn.client.watch().key(key).startRevision(String(from)).watcher();
    watcher = w;
    let disconnected = false;
    const recheck = (): void => {
      // Compacted or resumed past events: look at the key itself, then watch on from there.
      w.removeAllListeners();
      w.on('error', () => {});
      void w.cancel().catch(() => {});
      void conn
        .range('watch own key', { key })
        .then(({ kvs, revision: at }) => {
          if (stopped) return;
          if (kvs[0]?.create_revision === String(revision)) start(at + 1);
          else {
            stopped = true;
            onGone();
          }
        })
        .catch(() => {
          if (!stopped) conn.clock.setTimer(250, () => start(from));
        });
    };
    w.on('data', (res) => {
      if (stopped) return;
      if (res.events.some((ev) => ev.type === 'Delete' || ev.kv.create_revision !== String(revision))) {
        stopped = true;
        onGone();
      }
    });
    w.on('disconnected', () => {
      disconnected = true;
    });
    w.on('connected', () => {
      if (disconnected) recheck();
    });
    w.on('error', () => recheck());
  };
  start(revision);
  return () => {
    stopped = true;
    const w = watcher;
    watcher = null;
    if (w) {
      w.removeAllListeners();
      w.on('error', () => {});
      void w.cancel().catch(() => {});
    }
  };
}
