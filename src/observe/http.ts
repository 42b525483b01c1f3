/**
 * `/metrics` and `/healthz` as plain node:http handlers `(req, res)`: mount them on a
 * `http.createServer`, in Express (`app.get('/healthz', healthHandler(...))`) or in Fastify
 * (`reply.hijack(); handler(req.raw, reply.raw)`). See docs/operations.md.
 *
 * /healthz answers 200 with one JSON entry per group, or 503 when any group this node LEADS is
 * unhealthy: suspended (its last renew failed; it may lose the lease at its deadline), stalled
 * (its work reported no progress within progressTimeoutMs), or not renewed for longer than
 * renewInterval + tolerance. A follower (not leading) is always healthy: it holds nothing that
 * can go wrong, and taking it out of a load balancer would not help.
 *
 * Lock handles may be listed too (beside or instead of electors): each is an entry under `locks`
 * by its name, unhealthy (503) while suspended or once lost; a released handle is healthy (the
 * application let it go).
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { createRequire } from 'node:module';
import { DriverMissingError, InvalidArgumentError } from '../core/index.js';
import { LeaderElector } from '../election/index.js';
import type { LockHandle } from '../locks/lock.js';
import type { Registry } from './metrics.js';

export type HttpHandler = (req: IncomingMessage, res: ServerResponse) => void;

export interface HealthHandlerOptions {
  /** Tolerance past the renew interval before a leader that has not renewed is unhealthy, ms (default: each elector's renew interval). */
  toleranceMs?: number;
}

/** One group's entry in the /healthz answer. */
export interface GroupHealth {
  readonly role: 'leader' | 'follower';
  readonly ok: boolean;
  readonly term: number | null;
  readonly suspended: boolean;
  readonly stalled: boolean;
  readonly remainingMs: number;
  readonly sinceRenewMs: number | null;
}

/** One lock handle's entry in the /healthz answer. */
export interface LockHealth {
  /** False while suspended and once lost. */
  readonly ok: boolean;
  /** True until lost or released. */
  readonly held: boolean;
  readonly lost: boolean;
  readonly term: number;
  readonly suspended: boolean;
  /** Time left on the lock's validity (rule 2: from the last good renew's send time), ms; 0 once lost or released. */
  readonly remainingMs: number;
}

/** What /healthz reports on: leader electors and lock handles, in any mix. */
export type HealthSubject = LeaderElector | LockHandle;

/** The /healthz body: `ok` is false (and the status 503) when any group this node leads, or any lock handle listed, is not ok. */
export interface HealthReport {
  readonly ok: boolean;
  readonly groups: Record<string, GroupHealth>;
  /** Lock handles by name (present when any was listed). */
  readonly locks?: Record<string, LockHealth>;
}

/** The health of one lock handle now. */
export function lockHealth(handle: LockHandle): LockHealth {
  const { held, lost, suspended } = handle;
  return { ok: !lost && !suspended, held, lost, term: handle.term, suspended, remainingMs: handle.remainingMs() };
}

/** The health of these electors and lock handles now, as /healthz reports it. */
export function healthReport(subjects: readonly HealthSubject[], options: HealthHandlerOptions = {}): HealthReport {
  const groups: Record<string, GroupHealth> = {};
  let locks: Record<string, LockHealth> | undefined;
  let ok = true;
  for (const subject of subjects) {
    if (!(subject instanceof LeaderElector)) {
      if (typeof subject !== 'object' || subject === null || typeof (subject as Partial<LockHandle>).remainingMs !== 'function') {
        throw new InvalidArgumentError('electors', 'expected LeaderElector instances or lock handles');
      }
      const h = lockHealth(subject);
      (locks ??= {})[subject.name] = h;
      ok &&= h.ok;
      continue;
    }
    const elector = subject;
    const h = options.toleranceMs === undefined ? elector.health() : elector.health(options.toleranceMs);
    groups[elector.group] = { role: h.isLeader ? 'leader' : 'follower', ok: h.ok, term: h.term, suspended: h.suspended, stalled: h.stalled, remainingMs: h.remainingMs, sinceRenewMs: h.sinceRenewMs };
    ok &&= h.ok;
  }
  return locks ? { ok, groups, locks } : { ok, groups };
}

/** A /healthz handler over these electors and lock handles (a function is read at each request, for groups and locks that come and go). */
export function healthHandler(electors: readonly HealthSubject[] | (() => readonly HealthSubject[]), options: HealthHandlerOptions = {}): HttpHandler {
  if (typeof electors !== 'function' && !Array.isArray(electors)) throw new InvalidArgumentError('electors', 'expected an array of LeaderElector or lock handles, or a function returning one');
  return (req, res) => {
    if (!readOnly(req, res)) return;
    const report = healthReport(typeof electors === 'function' ? electors() : electors, options);
    send(res, report.ok ? 200 : 503, 'application/json; charset=utf-8', req.method === 'HEAD' ? '' : JSON.stringify(report));
  };
}

/** A /metrics handler: the registry's text exposition (default: prom-client's global registry). */
export function metricsHandler(registry?: Registry): HttpHandler {
  const reg = registry ?? defaultRegistry();
  return (req, res) => {
    if (!readOnly(req, res)) return;
    reg.metrics().then(
      (text) => send(res, 200, reg.contentType, req.method === 'HEAD' ? '' : text),
      (err: unknown) => send(res, 500, 'text/plain; charset=utf-8', `metrics failed: ${err instanceof Error ? err.message : String(err)}\n`),
    );
  };
}

function defaultRegistry(): Registry {
  try {
    return (createRequire(import.meta.url)('prom-client') as { register: Registry }).register;
  } catch {
    throw new DriverMissingError('prom-client', 'metrics');
  }
}

/** GET and HEAD only; anything else is 405 with an Allow header. */
function readOnly(req: IncomingMessage, res: ServerResponse): boolean {
  if (req.method === 'GET' || req.method === 'HEAD') return true;
  res.setHeader('Allow', 'GET, HEAD');
  send(res, 405, 'text/plain; charset=utf-8', 'method not allowed\n');
  return false;
}

function send(res: ServerResponse, status: number, type: string, body: string): void {
  res.statusCode = status;
  res.setHeader('Content-Type', type);
  res.setHeader('Cache-Control', 'no-store');
  res.end(body);
}
