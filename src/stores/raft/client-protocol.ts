/**
 * The store client protocol: what a `raft://` client and a Raft store node say to each other on
 * the node's Raft port, after the transport's handshake (the client's hello names dialer id 0 and
 * proves the cluster secret by HMAC, like a peer; src/raft/transport/handshake.ts).
 *
 * Each request is one `clientRequest` frame, each answer and each watch push one `clientResponse`
 * frame (src/raft/transport/frame.ts); the body is UTF-8 JSON, like the commands in the log:
 *
 *   request   { id, op, ...fields }                 id: the client's number, echoed in the answer
 *   answer    { id, ok: true, value } | { id, ok: false, error: WireError }
 *   push      { watch, lease } (a lease watch: the live lease or null) | { watch, head } (a stream watch)
 *
 * Writes carry the client's own session `{ client, seq, ack }`: a retry of the same seq (after a
 * lost answer, or at a new leader) is answered from the state machine's dedupe table, never
 * applied twice (docs/raft-store.md, Sessions). Requests are answered in any order.
 */
import { InvalidArgumentError, TenureError } from '../../core/index.js';
import type { Lease, StreamEntry } from '../../core/index.js';
import { COMMAND_MAX_BYTES, errorToResult, resultToError } from './commands.js';
import type { Operation, ResultError, Session } from './commands.js';

/** The largest request a client sends, bytes: the largest command plus its envelope. */
export const CLIENT_REQUEST_MAX_BYTES = COMMAND_MAX_BYTES + 64 * 1024;
/** The largest answer or push a client reads, bytes (a readStream page is cut well below it). */
export const CLIENT_RESPONSE_MAX_BYTES = 64 * 1024 * 1024;
/** Requests one connection may have unanswered at a node; more are refused (`BUSY`, nothing done). */
export const CLIENT_MAX_INFLIGHT = 256;
/** Watches (lease and stream) one connection may hold at a node. */
export const CLIENT_MAX_WATCHES = 1024;
/** A readStream answer stops adding entries once their payloads pass this many bytes; the client reads on. */
export const READ_PAGE_BYTES = 4 * 1024 * 1024;
/** A node closes a client connection whose unread answers and pushes pass this many bytes (a reader that stopped). */
export const CLIENT_MAX_BUFFERED_BYTES = 64 * 1024 * 1024;

/** The operations a client may propose (tick and takeover are the leader's own). */
export type ClientOperation = Extract<Operation, { op: 'acquire' | 'renew' | 'renewMany' | 'release' | 'append' | 'purge' }>;
const CLIENT_OPS = new Set(['acquire', 'renew', 'renewMany', 'release', 'append', 'purge']);

export type MemberAction = 'add' | 'promote' | 'remove';

export type ClientRequest =
  | { readonly id: number; readonly op: 'write'; readonly session: Session; readonly operation: ClientOperation }
  | { readonly id: number; readonly op: 'read'; readonly name: string }
  | { readonly id: number; readonly op: 'list'; readonly prefix?: string }
  | { readonly id: number; readonly op: 'readStream'; readonly stream: string; readonly after?: number; readonly limit?: number }
  | { readonly id: number; readonly op: 'readLast'; readonly stream: string }
  | { readonly id: number; readonly op: 'streamHead'; readonly stream: string }
  | { readonly id: number; readonly op: 'watch'; readonly kind: 'lease' | 'stream'; readonly name: string }
  | { readonly id: number; readonly op: 'unwatch'; readonly watch: number }
  | { readonly id: number; readonly op: 'status' }
  | { readonly id: number; readonly op: 'member'; readonly action: MemberAction; readonly member: number; readonly address?: string; readonly learner?: boolean };

/** A readStream answer: entries, and whether the page was cut by size (read on after the last). */
export interface StreamPage {
  readonly entries: readonly StreamEntry[];
  readonly more: boolean;
}

/** One member's view, as `status` answers it (and `tenure raft status` prints it). */
export interface MemberStatus {
  readonly id: number;
  readonly address: string;
  readonly role: string;
  readonly term: number;
  readonly leader: number;
  readonly leaderAddress: string | null;
  readonly commit: number;
  readonly applied: number;
  /** This node leads and its takeover is applied: it takes writes. */
  readonly leaderReady: boolean;
  readonly voters: readonly number[];
  readonly learners: readonly number[];
  readonly lastIndex: number;
  readonly snapshotIndex: number;
}

/** Membership after a change: voters and learners. */
export interface Membership {
  readonly voters: readonly number[];
  readonly learners: readonly number[];
}

/**
 * An error as it travels: the state machine's typed results, plus what only the wire has.
 * NOT_LEADER: ask `address` (empty when no leader is known). PROPOSAL_DROPPED and BUSY: nothing
 * was done, a retry is safe. STORE_UNAVAILABLE: maybe done (rule 3); a write is retried with the
 * same seq.
 */
export type WireError =
  | ResultError
  | { readonly code: 'NOT_LEADER'; readonly leader: number; readonly address: string; readonly message: string }
  | { readonly code: 'PROPOSAL_DROPPED' | 'BUSY' | 'CLOSED'; readonly message: string };

export type ClientAnswer = { readonly id: number; readonly ok: true; readonly value: unknown } | { readonly id: number; readonly ok: false; readonly error: WireError };
export type ClientPush = { readonly watch: number; readonly lease: Lease | null } | { readonly watch: number; readonly head: number };

const UTF8 = new TextDecoder('utf-8', { fatal: true });

export function encodeJson(value: unknown): Buffer {
  return Buffer.from(JSON.stringify(value), 'utf8');
}

/** Parses a frame body as a JSON object; InvalidArgumentError (field `frame`) otherwise. */
export function decodeJson(body: Uint8Array): Record<string, unknown> {
  let parsed: unknown;
  try {
    parsed = JSON.parse(UTF8.decode(body));
  } catch (err) {
    throw new InvalidArgumentError('frame', `not UTF-8 JSON (${(err as Error).message.slice(0, 80)})`);
  }
  if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) throw new InvalidArgumentError('frame', 'expected a JSON object');
  return parsed as Record<string, unknown>;
}

function requestId(value: unknown): number {
  if (typeof value !== 'number' || !Number.isSafeInteger(value) || value < 0) throw new InvalidArgumentError('id', 'expected an integer >= 0');
  return value;
}

/** The request id of a body, if it has a usable one (to answer a malformed request by its id). */
export function peekRequestId(o: Record<string, unknown>): number | undefined {
  return typeof o.id === 'number' && Number.isSafeInteger(o.id) && o.id >= 0 ? o.id : undefined;
}

function str(field: string, value: unknown): string {
  if (typeof value !== 'string') throw new InvalidArgumentError(field, 'expected a string');
  return value;
}

function optionalCount(field: string, value: unknown): number | undefined {
  if (value === undefined) return undefined;
  if (typeof value !== 'number' || !Number.isSafeInteger(value) || value < 0) throw new InvalidArgumentError(field, 'expected an integer >= 0');
  return value;
}

/**
 * A request's shape checked: InvalidArgumentError naming the field otherwise. The values inside
 * (names, terms, the operation) are checked again where they are used, by the same checks every
 * store applies (src/core/validate.ts, commands.ts).
 */
export function checkRequest(o: Record<string, unknown>): ClientRequest {
  const id = requestId(o.id);
  switch (o.op) {
    case 'write': {
      const operation = o.operation as Record<string, unknown> | null;
      if (typeof operation !== 'object' || operation === null || !CLIENT_OPS.has(String(operation.op))) {
        throw new InvalidArgumentError('operation.op', `expected one of ${[...CLIENT_OPS].join(', ')}`);
      }
      return { id, op: 'write', session: o.session as Session, operation: operation as unknown as ClientOperation };
    }
    case 'read':
      return { id, op: 'read', name: str('name', o.name) };
    case 'list':
      return o.prefix === undefined ? { id, op: 'list' } : { id, op: 'list', prefix: str('prefix', o.prefix) };
    case 'readStream': {
      const after = optionalCount('after', o.after);
      const limit = optionalCount('limit', o.limit);
      return { id, op: 'readStream', stream: str('stream', o.stream), ...(after !== undefined ? { after } : {}), ...(limit !== undefined ? { limit } : {}) };
    }
    case 'readLast':
    case 'streamHead':
      return { id, op: o.op, stream: str('stream', o.stream) };
    case 'watch':
      if (o.kind !== 'lease' && o.kind !== 'stream') throw new InvalidArgumentError('kind', 'expected lease or stream');
      return { id, op: 'watch', kind: o.kind, name: str('name', o.name) };
    case 'unwatch': {
      const watch = optionalCount('watch', o.watch);
      if (watch === undefined) throw new InvalidArgumentError('watch', 'expected a watch id');
      return { id, op: 'unwatch', watch };
    }
    case 'status':
      return { id, op: 'status' };
    case 'member': {
      if (o.action !== 'add' && o.action !== 'promote' && o.action !== 'remove') throw new InvalidArgumentError('action', 'expected add, promote or remove');
      const member = o.member;
      if (typeof member !== 'number' || !Number.isSafeInteger(member) || member < 1) throw new InvalidArgumentError('member', 'expected a positive integer node id');
      const address = o.address === undefined ? undefined : str('address', o.address);
      if (o.action === 'add' && address === undefined) throw new InvalidArgumentError('address', 'adding a member needs its host:port');
      return { id, op: 'member', action: o.action, member, ...(address !== undefined ? { address } : {}), ...(o.learner === true ? { learner: true } : {}) };
    }
    default:
      throw new InvalidArgumentError('op', `unknown request ${JSON.stringify(String(o.op).slice(0, 40))}`);
  }
}

/** An answer that is only the wire's (BUSY), thrown where a request is served. */
export class WireFailure extends Error {
  constructor(readonly wire: WireError) {
    super(wire.code);
  }
}

/** A thrown error as it travels: typed store errors keep their fields; the rest by code. */
export function errorToWire(err: unknown): WireError {
  if (err instanceof WireFailure) return err.wire;
  if (err instanceof TenureError) {
    switch (err.code) {
      case 'STALE_TERM':
      case 'INVALID_ARGUMENT':
      case 'VERSION_CONFLICT':
      case 'STORE_DATA':
      case 'STORE_UNAVAILABLE': {
        const r = errorToResult(err);
        if (!r.ok) return r.error;
        break;
      }
      case 'NOT_LEADER': {
        const e = err as TenureError & { leader?: number; leaderAddress?: string };
        return { code: 'NOT_LEADER', leader: e.leader ?? 0, address: e.leaderAddress ?? '', message: err.message };
      }
      case 'PROPOSAL_DROPPED':
        return { code: 'PROPOSAL_DROPPED', message: err.message };
      case 'CLOSED':
        return { code: 'CLOSED', message: err.message };
    }
    // Disk full, a stopped node, a timeout: the write may or may not be in the log.
    return { code: 'STORE_UNAVAILABLE', message: err.message };
  }
  return { code: 'STORE_UNAVAILABLE', message: err instanceof Error ? err.message : String(err) };
}

/** Whether a wire error is one of the state machine's answers (final: never retried). */
export function isResultError(e: WireError): e is ResultError {
  return e.code === 'STALE_TERM' || e.code === 'INVALID_ARGUMENT' || e.code === 'VERSION_CONFLICT' || e.code === 'STORE_DATA';
}

/** The typed error of a final answer. */
export function wireToError(e: ResultError): TenureError {
  return resultToError(e);
}

