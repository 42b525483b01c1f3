/**
 * The commands of the Raft store's state machine, as they travel in the Raft log, and the results
 * the state machine answers with.
 *
 * A command is length-checked JSON behind a 6-byte header:
 *
 *   u8 0xC7 (magic) | u8 version (1) | u32le length of the JSON | UTF-8 JSON (exactly length bytes)
 *
 * JSON keeps the codec small and readable in a WAL dump; the header makes a truncated or foreign
 * entry fail before the parser sees it. Every field is checked on decode with the same checks the
 * other stores apply to a caller's input (src/core/validate.ts), so a command that a buggy or
 * hostile proposer put in the log is refused with the same typed error on every node, and never
 * changes state.
 *
 * Results are plain JSON-able data (they are kept in the dedupe table and so in snapshots); an
 * error travels as `ResultError` and becomes the typed TenureError again with `resultToError`.
 */
import {
  InvalidArgumentError,
  StaleTermError,
  StoreDataError,
  StoreUnavailableError,
  TenureError,
  VersionConflictError,
  checkAppendOptions,
  checkName,
  checkOwner,
  checkPayload,
  checkPurgePrefix,
  checkRenewItems,
  checkTerm,
  checkToken,
  checkTtl,
  decodeMeta,
  encodeMeta,
  limits,
} from '../../core/index.js';
import type { AcquireResult, FencingToken, LeaseMeta, RenewManyItem, RenewResult } from '../../core/index.js';

export const COMMAND_MAGIC = 0xc7;
export const COMMAND_VERSION = 1;
export const COMMAND_HEADER_BYTES = 6;
/**
 * The largest command accepted, bytes: a 1 MiB payload may grow up to 6x as JSON (a control
 * character escapes to `\u00XX`), plus the envelope. A larger entry is refused before parsing.
 */
export const COMMAND_MAX_BYTES = limits.payloadMaxBytes * 6 + 64 * 1024;
/** The most leases one renewMany command renews. */
export const RENEW_MANY_MAX = 10_000;

/** fatal: bytes that are not UTF-8 are refused, never read as U+FFFD (which could merge two names). */
const UTF8 = new TextDecoder('utf-8', { fatal: true });

/** The operation a command carries. */
export type Operation =
  | { readonly op: 'acquire'; readonly name: string; readonly owner: string; readonly ttlMs: number; readonly meta: LeaseMeta }
  | { readonly op: 'renew'; readonly name: string; readonly owner: string; readonly term: number; readonly ttlMs: number }
  | { readonly op: 'renewMany'; readonly owner: string; readonly leases: readonly RenewManyItem[]; readonly ttlMs: number }
  | { readonly op: 'release'; readonly name: string; readonly owner: string; readonly term: number }
  | { readonly op: 'append'; readonly token: FencingToken; readonly stream: string; readonly payload: string; readonly expectSeq?: number }
  /** Advances the log's time only: the leader proposes it when idle so followers' time moves. */
  | { readonly op: 'tick' }
  /** The first command of a new leader (its Raft term): live leases are refreshed (docs/raft-store.md). */
  | { readonly op: 'takeover'; readonly raftTerm: number }
  /** Store.purge: every lease, fence and stream whose name starts with `prefix` is deleted. */
  | { readonly op: 'purge'; readonly prefix: string };

/**
 * A client's session: `client` names it, `seq` numbers its commands (1, 2, …, one per command,
 * reused on a retry), `ack` is the lowest seq whose answer the client still waits for (answers
 * below it may be forgotten). Raft dissertation §6.3.
 */
export interface Session {
  readonly client: string;
  readonly seq: number;
  readonly ack: number;
}

/** One command as proposed: the leader's log time (ms), an optional session, the operation. */
export interface Command {
  /** The proposing leader's lease clock, ms (docs/raft-store.md, "Time"); never a wall clock. */
  readonly timeMs: number;
  readonly session?: Session | undefined;
  readonly operation: Operation;
}

/** A typed error as kept in a result. */
export type ResultError =
  | { readonly code: 'STALE_TERM'; readonly lease: string; readonly term: number; readonly currentTerm: number }
  | { readonly code: 'INVALID_ARGUMENT'; readonly field: string; readonly message: string }
  | { readonly code: 'VERSION_CONFLICT'; readonly stream: string; readonly expected: number; readonly current: number }
  | { readonly code: 'STORE_DATA'; readonly message: string }
  | { readonly code: 'STORE_UNAVAILABLE'; readonly message: string };

export type ResultValue = AcquireResult | RenewResult | readonly RenewResult[] | boolean | number | null;

export type CommandResult = { readonly ok: true; readonly value: ResultValue } | { readonly ok: false; readonly error: ResultError };

/** The typed error a result carries, to throw to the caller. */
export function resultToError(error: ResultError): TenureError {
  switch (error.code) {
    case 'STALE_TERM':
      return new StaleTermError(error.lease, error.term, error.currentTerm);
    case 'INVALID_ARGUMENT':
      return new InvalidArgumentError(error.field, error.message);
    case 'VERSION_CONFLICT':
      return new VersionConflictError(error.stream, error.expected, error.current);
    case 'STORE_DATA':
      return new StoreDataError(error.message);
    case 'STORE_UNAVAILABLE':
      return new StoreUnavailableError(error.message);
  }
}

/** A thrown error as a result; anything that is not one of the result's typed errors is rethrown (a bug). */
export function errorToResult(err: unknown): CommandResult {
  if (err instanceof StaleTermError) return { ok: false, error: { code: 'STALE_TERM', lease: err.lease, term: err.term, currentTerm: err.currentTerm } };
  if (err instanceof InvalidArgumentError) {
    const prefix = `${err.field}: `;
    const message = err.message.startsWith(prefix) ? err.message.slice(prefix.length) : err.message;
    return { ok: false, error: { code: 'INVALID_ARGUMENT', field: err.field, message } };
  }
  if (err instanceof VersionConflictError) return { ok: false, error: { code: 'VERSION_CONFLICT', stream: err.stream, expected: err.expected, current: err.current } };
  if (err instanceof StoreDataError) return { ok: false, error: { code: 'STORE_DATA', message: err.message } };
  if (err instanceof StoreUnavailableError) return { ok: false, error: { code: 'STORE_UNAVAILABLE', message: err.message } };
  throw err;
}

/** A non-negative safe integer (a time or a count). */
function checkCount(field: string, value: unknown): number {
  if (typeof value !== 'number' || !Number.isSafeInteger(value) || value < 0) {
    throw new InvalidArgumentError(field, `expected an integer >= 0, got ${String(value).slice(0, 40)}`);
  }
  return value;
}

function checkSession(value: unknown): Session {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) throw new InvalidArgumentError('session', 'expected { client, seq, ack }');
  const s = value as Record<string, unknown>;
  const client = checkOwner('session.client', s.client);
  const seq = checkTerm('session.seq', s.seq);
  const ack = checkTerm('session.ack', s.ack);
  if (ack > seq) throw new InvalidArgumentError('session.ack', `must be <= seq ${seq}, got ${ack}`);
  return { client, seq, ack };
}

function checkMetaValue(value: unknown): LeaseMeta {
  // encodeMeta refuses a non-object and more than 16 KiB; decodeMeta gives an independent copy.
  return decodeMeta(encodeMeta('meta', value as LeaseMeta | undefined));
}

/**
 * An operation checked field by field, as a store checks a caller's input: InvalidArgumentError
 * naming the field otherwise. Used before proposing (bad input never reaches the log) and again
 * when applying (an entry is only trusted once checked).
 */
export function checkOperation(value: unknown): Operation {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) throw new InvalidArgumentError('operation', 'expected an object');
  const o = value as Record<string, unknown>;
  switch (o.op) {
    case 'acquire':
      return { op: 'acquire', name: checkName('name', o.name), owner: checkOwner('owner', o.owner), ttlMs: checkTtl('ttlMs', o.ttlMs), meta: checkMetaValue(o.meta) };
    case 'renew':
      return { op: 'renew', name: checkName('name', o.name), owner: checkOwner('owner', o.owner), term: checkTerm('term', o.term), ttlMs: checkTtl('ttlMs', o.ttlMs) };
    case 'renewMany': {
      const owner = checkOwner('owner', o.owner);
      const ttlMs = checkTtl('ttlMs', o.ttlMs);
      checkRenewItems(o.leases as readonly RenewManyItem[], RENEW_MANY_MAX);
      const leases = (o.leases as readonly RenewManyItem[]).map(({ name, term }) => ({ name, term }));
      return { op: 'renewMany', owner, leases, ttlMs };
    }
    case 'release':
      return { op: 'release', name: checkName('name', o.name), owner: checkOwner('owner', o.owner), term: checkTerm('term', o.term) };
    case 'append': {
      const token = checkToken('token', o.token);
      const expectSeq = checkAppendOptions({ expectSeq: o.expectSeq as number | undefined });
      const append = { op: 'append', token: { lease: token.lease, term: token.term }, stream: checkName('stream', o.stream), payload: checkPayload('payload', o.payload) } as const;
      return expectSeq === undefined ? append : { ...append, expectSeq };
    }
    case 'tick':
      return { op: 'tick' };
    case 'takeover':
      return { op: 'takeover', raftTerm: checkTerm('raftTerm', o.raftTerm) };
    case 'purge':
      return { op: 'purge', prefix: checkPurgePrefix(o.prefix) };
    default:
      throw new InvalidArgumentError('operation.op', `unknown operation ${JSON.stringify(String(o.op).slice(0, 40))}`);
  }
}

/** Encodes a command for the log. Checks it first: InvalidArgumentError (nothing encoded) for bad input. */
export function encodeCommand(command: Command): Uint8Array {
  const timeMs = checkCount('timeMs', command.timeMs);
  const session = command.session === undefined ? undefined : checkSession(command.session);
  const operation = checkOperation(command.operation);
  const json = Buffer.from(JSON.stringify({ t: timeMs, s: session, o: operation }), 'utf8');
  if (json.length > COMMAND_MAX_BYTES) throw new InvalidArgumentError('command', `must be at most ${COMMAND_MAX_BYTES} bytes encoded, got ${json.length}`);
  const out = new Uint8Array(COMMAND_HEADER_BYTES + json.length);
  out[0] = COMMAND_MAGIC;
  out[1] = COMMAND_VERSION;
  new DataView(out.buffer).setUint32(2, json.length, true);
  out.set(json, COMMAND_HEADER_BYTES);
  return out;
}

/**
 * Decodes a command from the log. Anything but a well-formed command of this version is an
 * InvalidArgumentError (field `command`, or the field that is wrong), never another exception.
 */
export function decodeCommand(bytes: Uint8Array): Command {
  if (bytes.length < COMMAND_HEADER_BYTES) throw new InvalidArgumentError('command', `expected at least ${COMMAND_HEADER_BYTES} bytes, got ${bytes.length}`);
  if (bytes[0] !== COMMAND_MAGIC) throw new InvalidArgumentError('command', `not a Raft store command (first byte ${bytes[0]}, expected ${COMMAND_MAGIC})`);
  if (bytes[1] !== COMMAND_VERSION) throw new InvalidArgumentError('command', `command version ${bytes[1]} is not understood (this node speaks ${COMMAND_VERSION})`);
  const length = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength).getUint32(2, true);
  if (length !== bytes.length - COMMAND_HEADER_BYTES) {
    throw new InvalidArgumentError('command', `header says ${length} bytes of JSON, ${bytes.length - COMMAND_HEADER_BYTES} follow`);
  }
  if (length > COMMAND_MAX_BYTES) throw new InvalidArgumentError('command', `must be at most ${COMMAND_MAX_BYTES} bytes, got ${length}`);
  let parsed: unknown;
  try {
    parsed = JSON.parse(UTF8.decode(bytes.subarray(COMMAND_HEADER_BYTES)));
  } catch (err) {
    throw new InvalidArgumentError('command', `not UTF-8 JSON (${(err as Error).message.slice(0, 80)})`);
  }
  if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) throw new InvalidArgumentError('command', 'expected a JSON object');
  const c = parsed as Record<string, unknown>;
  return {
    timeMs: checkCount('timeMs', c.t),
    session: c.s === undefined ? undefined : checkSession(c.s),
    operation: checkOperation(c.o),
  };
}
