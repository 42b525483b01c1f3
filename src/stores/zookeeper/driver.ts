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

/** The parts of node-zookeeper-client 1.1's (internal) ConnectionManager that the guard touches. */
interface ConnectionInternals {
  socket?: { destroy(): void; destroyed?: boolean };
  pendingBuffer: Buffer | null;
  pendingQueue: { callback?: (err: Error) => void }[];
  connect(): void;
  onSocketData(buffer: Buffer): void;
  guardedByTenure?: true;
}

/**
 * The largest reply frame tenure accepts from a server, bytes. ZooKeeper's own client refuses a
 * frame longer than `jute.maxbuffer` (1 MiB by default, 0xfffff); tenure's replies are far smaller
 * (a candidate list, a lease document), so a length beyond this is a garbled frame, not a reply.
 */
export const MAX_FRAME_BYTES = 16 * 1024 * 1024;

/**
 * node-zookeeper-client 1.1 reads replies from a stream of length-prefixed frames, and two things
 * in it let a cut connection end the process (found by the chaos suite, seed 2 with connection
 * faults on ZooKeeper: an uncaught ERR_OUT_OF_RANGE from `Record.deserialize` in `onSocketData`):
 *  - the bytes of a frame the connection was cut in the middle of stay in `pendingBuffer` and are
 *    glued in front of the next connection's first reply (the connect response), so the new
 *    connection reads garbage from its first byte;
 *  - a frame it cannot parse throws from its socket handler, where nothing catches it.
 *
 * The guard, on one client: every new connection starts with no pending bytes; a frame whose
 * length is negative or above MAX_FRAME_BYTES, or one that throws while it is read, ends that
 * connection as a lost one (the driver then reconnects and fails the requests in flight with
 * CONNECTION_LOSS, which the store reports as StoreUnavailableError: they may have applied), and
 * the request whose reply was being read when it threw is failed the same way, not left to time
 * out. The client is patched, not the module, so that other users of the package are untouched.
 */
export function guardConnection(client: object): void {
  const cm = (client as { connectionManager?: ConnectionInternals }).connectionManager;
  if (!cm || typeof cm.onSocketData !== 'function' || typeof cm.connect !== 'function' || !Array.isArray(cm.pendingQueue)) {
    throw new Error('node-zookeeper-client: this version has no ConnectionManager that tenure knows how to guard (1.1.x expected)');
  }
  if (cm.guardedByTenure) return;
  const exception = (loadZookeeper() as unknown as { Exception: ExceptionFactory & { CONNECTION_LOSS: number } }).Exception;
  const connect = cm.connect.bind(cm);
  const onSocketData = cm.onSocketData.bind(cm);
  const lost = (): void => {
    cm.pendingBuffer = null;
    if (cm.socket && !cm.socket.destroyed) cm.socket.destroy(); // the driver reconnects on 'close'
  };
  cm.connect = () => {
    cm.pendingBuffer = null;
    connect();
  };
  cm.onSocketData = (buffer: Buffer) => {
    const head = cm.pendingQueue[0];
    try {
      onSocketData(buffer);
    } catch {
      // The reply being read when it threw was taken off the queue and will never be answered.
      if (head && cm.pendingQueue[0] !== head && !cm.pendingQueue.includes(head)) head.callback?.(exception.create(exception.CONNECTION_LOSS));
      lost();
      return;
    }
    const pending = cm.pendingBuffer;
    if (pending && pending.length >= 4) {
      const size = pending.readInt32BE(0);
      if (size < 0 || size > MAX_FRAME_BYTES) lost();
    }
  };
  cm.guardedByTenure = true;
}

/** The part of node-zookeeper-client 1.1's Transaction that `exactVersion` touches. */
interface TransactionInternals {
  ops?: { version?: number }[];
}

/**
 * node-zookeeper-client 1.1's Transaction takes a check's, set's or remove's version as
 * `version || -1`: version 0 (a node never written since it was made) goes out as -1, "any
 * version", and the op passes whatever the node has become. The store's checks rest on version 0
 * like any other (a lease's fence and term counter sit at 0 until their first change), so after
 * adding such an op to `tx`, this sets the version the op carries to the one asked for.
 */
export function exactVersion(tx: object, version: number): void {
  const ops = (tx as TransactionInternals).ops;
  const last = Array.isArray(ops) ? ops[ops.length - 1] : undefined;
  if (!last || typeof last.version !== 'number') {
    throw new Error('node-zookeeper-client: this version has no Transaction ops that tenure knows how to set a version on (1.1.x expected)');
  }
  last.version = version;
}
