/**
 * The live dashboard as a plain node:http handler `(req, res)`, for `tenure dashboard` and for
 * mounting in an existing app: `http.createServer(handler)`, Express `app.use('/tenure', handler)`,
 * Fastify `reply.hijack(); handler(req.raw, reply.raw)`. See docs/operations.md.
 *
 * Routes (by the last path segment, so it works under any mount path):
 *   `…/` (or `index.html`)  the page;
 *   `…/events`             server-sent events: `snapshot` at connect, then `update` per change;
 *   `…/state.json`         the snapshot as JSON.
 * Every viewer shares one DashboardSource (one poll loop, one set of watches).
 *
 * With a token, every request must carry it (`Authorization: Bearer T`, or `?token=T` for the
 * page and its EventSource, which cannot set headers), else 401; compared in constant time.
 */
import { createHash, timingSafeEqual } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { InvalidArgumentError } from '../core/index.js';
import { DASHBOARD_CSP, DASHBOARD_HTML } from './dashboard-page.js';
import { DashboardSource } from './dashboard-source.js';
import type { DashboardSourceOptions, DashboardUpdate } from './dashboard-source.js';

export interface DashboardOptions extends DashboardSourceOptions {
  /**
   * Required on every request when set (8..1024 printable ASCII characters, no spaces). Never
   * logged, never put in the page.
   */
  readonly token?: string;
  /** At most this many event streams at once (default 100); more are refused with 503. */
  readonly maxClients?: number;
  /** A comment line is sent on idle event streams this often, ms (default 15000). */
  readonly heartbeatMs?: number;
}

/** A node:http handler that also owns the shared poll loop: `close()` stops it and ends every stream. */
export interface DashboardHandler {
  (req: IncomingMessage, res: ServerResponse): void;
  /** The shared state and poll loop (its `calls` count the dashboard's own store calls). */
  readonly source: DashboardSource;
  /** Event streams open now. */
  readonly clients: number;
  /** Stop polling and watching, end every event stream. Does not close the store. */
  close(): Promise<void>;
}

const TOKEN = /^[\x21-\x7e]{8,1024}$/;
/** An event stream whose unsent output passes this is too slow to follow and is ended, bytes. */
const MAX_BUFFERED = 4 * 1024 * 1024;

/** Check a dashboard token: 8..1024 printable ASCII characters, no spaces. Throws InvalidArgumentError. */
export function checkDashboardToken(field: string, token: unknown): string {
  if (typeof token !== 'string' || !TOKEN.test(token)) {
    throw new InvalidArgumentError(field, 'expected 8..1024 printable ASCII characters without spaces');
  }
  return token;
}

/** The dashboard handler over `options.store`; it starts polling at once. */
export function dashboardHandler(options: DashboardOptions): DashboardHandler {
  if (typeof options !== 'object' || options === null) throw new InvalidArgumentError('options', 'expected an object');
  const tokenDigest = options.token === undefined ? null : digest(checkDashboardToken('token', options.token));
  const maxClients = options.maxClients ?? 100;
  if (!Number.isInteger(maxClients) || maxClients < 1 || maxClients > 100_000) throw new InvalidArgumentError('maxClients', `expected a whole number in [1, 100000], got ${String(maxClients)}`);
  const heartbeatMs = options.heartbeatMs ?? 15_000;
  if (!Number.isInteger(heartbeatMs) || heartbeatMs < 100 || heartbeatMs > 600_000) throw new InvalidArgumentError('heartbeatMs', `expected an integer number of ms in [100, 600000], got ${String(heartbeatMs)}`);
  const source = new DashboardSource(options);
  const streams = new Set<ServerResponse>();
  let closed = false;

  const broadcast = (update: DashboardUpdate): void => {
    if (streams.size === 0) return;
    const frame = `event: update\ndata: ${JSON.stringify(update)}\n\n`;
    for (const res of streams) {
      if (res.writableLength > MAX_BUFFERED) res.destroy();
      else res.write(frame);
    }
  };
  const unsubscribe = source.subscribe(broadcast);
  const heartbeat = setInterval(() => {
    for (const res of streams) res.write(': ping\n\n');
  }, heartbeatMs);
  heartbeat.unref();
  source.start();

  const handler = ((req: IncomingMessage, res: ServerResponse) => {
    const url = parseUrl(req.url);
    if (tokenDigest !== null && !authorized(req, url, tokenDigest)) {
      res.setHeader('WWW-Authenticate', 'Bearer realm="tenure dashboard"');
      send(res, 401, 'text/plain; charset=utf-8', 'unauthorized: this dashboard needs its token (Authorization: Bearer TOKEN, or ?token=TOKEN)\n');
      return;
    }
    if (req.method !== 'GET' && req.method !== 'HEAD') {
      res.setHeader('Allow', 'GET, HEAD');
      send(res, 405, 'text/plain; charset=utf-8', 'method not allowed\n');
      return;
    }
    const route = url === null ? null : lastSegment(url.pathname);
    if (route === '' || route === 'index.html') {
      res.setHeader('Content-Security-Policy', DASHBOARD_CSP);
      res.setHeader('X-Frame-Options', 'DENY');
      send(res, 200, 'text/html; charset=utf-8', req.method === 'HEAD' ? '' : DASHBOARD_HTML);
    } else if (route === 'state.json') {
      send(res, 200, 'application/json; charset=utf-8', req.method === 'HEAD' ? '' : JSON.stringify(source.snapshot()));
    } else if (route === 'events') {
      if (closed) return send(res, 503, 'text/plain; charset=utf-8', 'dashboard closed\n');
      if (streams.size >= maxClients) return send(res, 503, 'text/plain; charset=utf-8', 'too many dashboard viewers\n');
      res.statusCode = 200;
      res.setHeader('Content-Type', 'text/event-stream; charset=utf-8');
      res.setHeader('Cache-Control', 'no-store');
      res.setHeader('X-Accel-Buffering', 'no');
      res.setHeader('X-Content-Type-Options', 'nosniff');
      res.setHeader('Referrer-Policy', 'no-referrer');
      if (req.method === 'HEAD') return void res.end();
      res.flushHeaders();
      // The browser retries a lost stream after 1 s; the snapshot then brings it up to date.
      res.write(`retry: 1000\nevent: snapshot\ndata: ${JSON.stringify(source.snapshot())}\n\n`);
      streams.add(res);
      const drop = (): void => void streams.delete(res);
      res.on('close', drop);
      req.on('close', drop);
    } else {
      send(res, 404, 'text/plain; charset=utf-8', 'not found\n');
    }
  }) as DashboardHandler;

  Object.defineProperty(handler, 'source', { value: source });
  Object.defineProperty(handler, 'clients', { get: () => streams.size });
  Object.defineProperty(handler, 'close', {
    value: (): Promise<void> => {
      if (!closed) {
        closed = true;
        unsubscribe();
        clearInterval(heartbeat);
        source.close();
        for (const res of streams) res.end();
        streams.clear();
      }
      return Promise.resolve();
    },
  });
  return handler;
}

function digest(text: string): Buffer {
  return createHash('sha256').update(text).digest();
}

/** The token from the Authorization header or the `token` query parameter, compared in constant time. */
function authorized(req: IncomingMessage, url: URL | null, expected: Buffer): boolean {
  const header = req.headers.authorization;
  let given: string | null = null;
  if (typeof header === 'string') {
    const m = /^Bearer\s+(\S+)\s*$/i.exec(header);
    if (m) given = m[1]!;
  }
  given ??= url?.searchParams.get('token') ?? null;
  if (given === null) return false;
  // Digests of equal length: the comparison takes the same time whatever the token's length.
  return timingSafeEqual(digest(given), expected);
}

function parseUrl(raw: string | undefined): URL | null {
  try {
    return new URL(raw ?? '/', 'http://dashboard.invalid');
  } catch {
    return null;
  }
}

function lastSegment(pathname: string): string {
  return pathname.slice(pathname.lastIndexOf('/') + 1);
}

function send(res: ServerResponse, status: number, type: string, body: string): void {
  res.statusCode = status;
  res.setHeader('Content-Type', type);
  res.setHeader('Cache-Control', 'no-store');
  res.setHeader('X-Content-Type-Options', 'nosniff');
  res.setHeader('Referrer-Policy', 'no-referrer');
  res.end(body);
}
