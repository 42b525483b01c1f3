/**
 * The fencing token over HTTP: the header `Fencing-Token: <group>#<term>`, the problem bodies
 * (RFC 9457, `application/problem+json`) a fenced server answers with, and the client side:
 * `fencedFetch` adds the header from the token context and turns a 409 naming a higher term into
 * a StaleTermError that steps the leader down; `fencingHeaders` gives the header to any other
 * client.
 *
 * The header is a convenience, not the fence: the fence is the server's check-and-record in the
 * same database transaction as its write (`http-guard.ts`).
 */
import { InvalidArgumentError, StaleTermError, checkName, limits, makeToken } from '../core/index.js';
import type { FencingToken } from '../core/index.js';
import { refuse, requireFence, timeFencedWrite } from './context.js';

/** The header's name (HTTP header names are case-insensitive). */
export const FENCING_TOKEN_HEADER = 'Fencing-Token';

/**
 * The longest header value a server accepts, in characters: a 200-character group whose every
 * character needs 4 UTF-8 bytes percent-encoded (12 characters each) plus `#` and 16 digits.
 */
export const FENCING_HEADER_MAX = limits.nameMaxLength * 12 + 17;

/** The problem types (RFC 9457 `type`) a fenced server answers with. */
export const FENCING_PROBLEMS = {
  /** 400: the header does not parse (not `GROUP#TERM`, a term out of 1..2^53-1, repeated, too long). */
  malformed: 'urn:tenure:problem:malformed-fencing-token',
  /** 400: the token is for another group than the one fencing this route. */
  wrongGroup: 'urn:tenure:problem:fencing-token-wrong-group',
  /** 400: the term was never issued by the lease table (a forged or mistyped token). */
  unissued: 'urn:tenure:problem:fencing-term-not-issued',
  /** 428: the route requires a Fencing-Token and none came. */
  required: 'urn:tenure:problem:fencing-token-required',
  /** 409: a higher term has written here; this writer is a deposed leader. */
  stale: 'urn:tenure:problem:stale-fencing-token',
  /** 503: the fence's row was contended (a deadlock between two new terms' first writes); nothing was written, retry. */
  busy: 'urn:tenure:problem:fence-busy',
} as const;

/** An RFC 9457 problem body as a fenced server sends it. */
export interface FencingProblem {
  readonly type: string;
  readonly title: string;
  readonly status: number;
  readonly detail: string;
  /** The group fencing the route. */
  readonly group?: string;
  /** The term the request carried, when it parsed. */
  readonly termReceived?: number;
  /** The highest term this server has accepted for the group, when known. */
  readonly highestAccepted?: number;
}

// Characters sent as they are: visible ASCII but `%` (the escape). A space is escaped too: HTTP
// trims a header value's surrounding whitespace, and ' a' is another group than 'a'.
const UNSAFE = /[^\x21-\x24\x26-\x7e]/gu;

/** The header value for `token`: `group#term`, the group percent-encoded (UTF-8) outside visible ASCII and for `%`. */
export function formatFencingHeader(token: FencingToken): string {
  const lease = checkName('token.lease', token.lease);
  return `${lease.replace(UNSAFE, (c) => encodeURIComponent(c))}#${token.term}`;
}

/** A Fencing-Token header as a server reads it. */
export type FencingHeader =
  | { readonly kind: 'missing' }
  | { readonly kind: 'malformed'; readonly detail: string; readonly termReceived?: number }
  | { readonly kind: 'token'; readonly token: FencingToken };

/**
 * Parse the Fencing-Token values of one request (every occurrence, in order: a repeated header
 * is malformed, never "the first" or "the last"). Strict: `GROUP#TERM`, GROUP percent-decoded and
 * a valid lease name (1..200 characters, no control characters), TERM digits only in 1..2^53-1,
 * the whole at most FENCING_HEADER_MAX characters.
 */
export function parseFencingHeader(values: readonly string[]): FencingHeader {
  if (values.length === 0) return { kind: 'missing' };
  if (values.length > 1) return { kind: 'malformed', detail: `the ${FENCING_TOKEN_HEADER} header came ${values.length} times; send it once` };
  const raw = values[0]!.trim();
  if (raw.length > FENCING_HEADER_MAX) return { kind: 'malformed', detail: `the ${FENCING_TOKEN_HEADER} header is ${raw.length} characters, at most ${FENCING_HEADER_MAX} allowed` };
  const at = raw.lastIndexOf('#');
  if (at <= 0) return { kind: 'malformed', detail: `expected GROUP#TERM such as billing#5, got ${quoted(raw)}` };
  const termText = raw.slice(at + 1);
  if (!/^[0-9]+$/.test(termText)) return { kind: 'malformed', detail: `the term must be digits only (1..${Number.MAX_SAFE_INTEGER}), got ${quoted(termText)}` };
  if (termText.length > 16 || termText.startsWith('0') || Number(termText) > Number.MAX_SAFE_INTEGER) {
    return { kind: 'malformed', detail: `the term must be in 1..${Number.MAX_SAFE_INTEGER} without leading zeros, got ${quoted(termText)}` };
  }
  const term = Number(termText);
  let group: string;
  try {
    group = decodeURIComponent(raw.slice(0, at));
  } catch {
    return { kind: 'malformed', detail: `the group is not valid percent-encoded UTF-8: ${quoted(raw.slice(0, at))}`, termReceived: term };
  }
  try {
    return { kind: 'token', token: makeToken(group, term) };
  } catch (err) {
    return { kind: 'malformed', detail: `the group is not a valid group name: ${err instanceof Error ? err.message : String(err)}`, termReceived: term };
  }
}

/** A value for an error message: JSON-quoted, at most 80 characters of it. */
function quoted(value: string): string {
  return JSON.stringify(value.length > 80 ? `${value.slice(0, 80)}…` : value);
}

/**
 * `{ 'Fencing-Token': 'group#term' }` for the running leadership (requireFence: NoTokenError
 * outside a leadership or after it ended; with `group`, also when the context's token is for
 * another group). For a client other than fetch; a 409 it gets back must be handed to
 * `checkFencedResponse` (or reported with `refuse(…, 'http', 'writer')`), never ignored.
 */
export function fencingHeaders(group?: string): Record<string, string> {
  const { token } = requireFence('fencingHeaders', group);
  return { [FENCING_TOKEN_HEADER]: formatFencingHeader(token) };
}

/** The largest problem body a fenced client reads, in bytes (a larger one is not a tenure server's). */
const PROBLEM_MAX_BYTES = 64 * 1024;

/**
 * If `response` is a fenced server's refusal of `token` (409, `application/problem+json`, naming
 * this group and a higher `highestAccepted` term), report it (`refuse(…, 'http', 'writer')`: the
 * elector or lock holding the token steps down) and throw the StaleTermError. Any other response
 * is returned untouched (a 409 that names no higher term is the application's own conflict).
 */
export async function checkFencedResponse(response: Response, token: FencingToken): Promise<Response> {
  if (response.status !== 409) return response;
  const type = response.headers.get('content-type') ?? '';
  if (!/^application\/problem\+json\s*(;|$)/i.test(type)) return response;
  const text = await boundedText(response.clone());
  if (text === null) return response;
  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch {
    return response;
  }
  if (typeof body !== 'object' || body === null) return response;
  const { group, highestAccepted } = body as { group?: unknown; highestAccepted?: unknown };
  if (group !== token.lease || typeof highestAccepted !== 'number' || !Number.isSafeInteger(highestAccepted) || highestAccepted <= token.term) return response;
  await response.body?.cancel().catch(() => {});
  throw refuse(new StaleTermError(token.lease, token.term, highestAccepted), 'http', 'writer');
}

async function boundedText(response: Response): Promise<string | null> {
  const declared = Number(response.headers.get('content-length') ?? '0');
  if (declared > PROBLEM_MAX_BYTES) return null;
  const reader = response.body?.getReader();
  if (!reader) return '';
  const chunks: Uint8Array[] = [];
  let size = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    size += value.byteLength;
    if (size > PROBLEM_MAX_BYTES) {
      await reader.cancel().catch(() => {});
      return null;
    }
    chunks.push(value);
  }
  return Buffer.concat(chunks).toString('utf8');
}

/** fetch's init, plus the group the request must be fenced by (NoTokenError if the context's token is another group's). */
export interface FencedRequestInit extends RequestInit {
  readonly group?: string;
}

/**
 * `fetch` (the global one, undici) with the header `Fencing-Token: <group>#<term>` of the running
 * leadership. Outside a leadership, or after it ended, it throws NoTokenError and sends nothing:
 * it never sends an unfenced request. A Fencing-Token already in `init.headers` or on a Request
 * is refused (InvalidArgumentError): the token comes from the context only.
 *
 * When the server refuses the token as stale (409 problem naming a higher term) the refusal is
 * reported (the elector or lock holding the token steps down at once) and StaleTermError is
 * thrown: a refused write never comes back as a response. Any other response is returned as is
 * (check `ok` yourself). The write's latency is reported (tenure_fenced_write_seconds{path="http"}).
 */
export async function fencedFetch(input: string | URL | Request, init: FencedRequestInit = {}): Promise<Response> {
  const { group, ...rest } = init;
  const { token } = requireFence('fencedFetch', group);
  // init.headers replaces a Request's own headers in fetch: start from the Request's when init has none.
  const headers = new Headers(rest.headers ?? (input instanceof Request ? input.headers : undefined));
  if (headers.has(FENCING_TOKEN_HEADER) || (input instanceof Request && input.headers.has(FENCING_TOKEN_HEADER))) {
    throw new InvalidArgumentError('headers', `fencedFetch sets ${FENCING_TOKEN_HEADER} from the token context; do not set it by hand`);
  }
  headers.set(FENCING_TOKEN_HEADER, formatFencingHeader(token));
  return timeFencedWrite('http', token.lease, async () => checkFencedResponse(await fetch(input, { ...rest, headers }), token));
}
