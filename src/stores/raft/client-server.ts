/**
 * A Raft store node's side of the store client protocol (client-protocol.ts): one instance per
 * authenticated client connection, which the transport hands over after the handshake.
 *
 * Writes are proposed with the client's own session (so the state machine dedupes a retried
 * seq); a node that is not the leader answers NOT_LEADER with the leader's address, no
 * forwarding. Reads wait for a read index on this node (linearizable on any member). Watches
 * are this node's own watchers, their changes pushed as frames. Everything is bounded: requests
 * unanswered per connection, watches per connection, bytes waiting to be written to a client
 * that stopped reading (past the bound the connection is closed; the client reconnects and
 * re-subscribes).
 */
import type { Lease, StreamEntry, StreamHead, Unsubscribe, WatchListener } from '../../core/index.js';
import type { ClientLink } from '../../raft/transport/index.js';
import type { Session } from './commands.js';
import {
  CLIENT_MAX_BUFFERED_BYTES,
  CLIENT_MAX_INFLIGHT,
  CLIENT_MAX_WATCHES,
  READ_PAGE_BYTES,
  checkRequest,
  decodeJson,
  encodeJson,
  errorToWire,
  peekRequestId,
  type ClientOperation,
  type ClientRequest,
  type Membership,
  type MemberStatus,
  type StreamPage,
  type WireError,
  WireFailure,
} from './client-protocol.js';

/** What a node's store offers its clients (RaftStore has it). */
export interface ServedStore {
  proposeFor(session: Session, operation: ClientOperation): Promise<unknown>;
  read(name: string): Promise<Lease | null>;
  list(prefix?: string): Promise<Lease[]>;
  readStream(stream: string, options?: { after?: number; limit?: number }): Promise<StreamEntry[]>;
  readLast(stream: string): Promise<StreamEntry | null>;
  streamHead(stream: string): Promise<StreamHead>;
  watch(name: string, listener: WatchListener): Unsubscribe;
  watchStream(stream: string, listener: (head: number) => void): Unsubscribe;
  memberStatus(): MemberStatus;
  changeMember(action: 'add' | 'promote' | 'remove', member: number, address: string | undefined, learner: boolean): Promise<Membership>;
}

/** Serves one client connection until it closes. */
export function serveClient(store: ServedStore, link: ClientLink): void {
  let inflight = 0;
  let closed = false;
  let nextWatch = 1;
  const watches = new Map<number, Unsubscribe>();

  const send = (value: unknown): void => {
    if (closed) return;
    link.send(encodeJson(value));
    if (link.bufferedBytes > CLIENT_MAX_BUFFERED_BYTES) link.close(`more than ${CLIENT_MAX_BUFFERED_BYTES} bytes of answers unread (the client stopped reading)`);
  };
  const fail = (id: number, error: WireError): void => send({ id, ok: false, error });

  link.onClose(() => {
    closed = true;
    for (const u of watches.values()) u();
    watches.clear();
  });

  link.onRequest((body) => {
    let o: Record<string, unknown>;
    try {
      o = decodeJson(body);
    } catch (err) {
      // Not JSON at all: a client that does not speak this protocol. One line, connection closed.
      link.close((err as Error).message);
      return;
    }
    let request: ClientRequest;
    try {
      request = checkRequest(o);
    } catch (err) {
      const id = peekRequestId(o);
      if (id === undefined) link.close(`a request without an id: ${(err as Error).message}`);
      else fail(id, errorToWire(err));
      return;
    }
    if (inflight >= CLIENT_MAX_INFLIGHT) {
      fail(request.id, { code: 'BUSY', message: `more than ${CLIENT_MAX_INFLIGHT} requests in flight on one connection; nothing was done` });
      return;
    }
    inflight++;
    handle(request).then(
      (value) => send({ id: request.id, ok: true, value: value === undefined ? null : value }),
      (err: unknown) => fail(request.id, errorToWire(err)),
    ).finally(() => inflight--);
  });

  async function handle(r: ClientRequest): Promise<unknown> {
    switch (r.op) {
      case 'write':
        return store.proposeFor(r.session, r.operation);
      case 'read':
        return store.read(r.name);
      case 'list':
        return store.list(r.prefix);
      case 'readStream':
        return page(await store.readStream(r.stream, { ...(r.after !== undefined ? { after: r.after } : {}), ...(r.limit !== undefined ? { limit: r.limit } : {}) }));
      case 'readLast':
        return store.readLast(r.stream);
      case 'streamHead':
        return store.streamHead(r.stream);
      case 'watch': {
        if (watches.size >= CLIENT_MAX_WATCHES) throw new WireFailure({ code: 'BUSY', message: `more than ${CLIENT_MAX_WATCHES} watches on one connection` });
        const watch = nextWatch++;
        const unsubscribe =
          r.kind === 'lease' ? store.watch(r.name, (lease) => send({ watch, lease })) : store.watchStream(r.name, (head) => send({ watch, head }));
        watches.set(watch, unsubscribe);
        return watch;
      }
      case 'unwatch':
        watches.get(r.watch)?.();
        return watches.delete(r.watch);
      case 'status':
        return store.memberStatus();
      case 'member':
        return store.changeMember(r.action, r.member, r.address, r.learner === true);
    }
  }
}

/** Entries up to READ_PAGE_BYTES of payload (at least one); `more` when some were left for the next page. */
function page(entries: StreamEntry[]): StreamPage {
  let bytes = 0;
  for (let i = 0; i < entries.length; i++) {
    bytes += entries[i]!.payload.length;
    if (bytes > READ_PAGE_BYTES && i > 0) return { entries: entries.slice(0, i), more: true };
  }
  return { entries, more: false };
}
