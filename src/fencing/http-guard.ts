/**
 * The server side of HTTP fencing: middleware for node:http, Express and Fastify that reads the
 * `Fencing-Token` header, refuses a malformed one (400), a missing one where the route requires
 * it (428) and a stale one (409) with an RFC 9457 problem body, and hands the handler a guard.
 *
 * The guard is the fence: `check(tx)` checks the token's term against the highest this service
 * has accepted for the group and records it, IN THE HANDLER'S OWN TRANSACTION, on the row of the
 * group in a fence table. A check run in another transaction, or before the write's transaction
 * began, is not fencing: a newer leader's write can land between the check and the write.
 *
 * How the check holds off a newer term until the write commits: the steady state (the term
 * already recorded) reads the group's row with a shared lock, so the writes of one term run in
 * parallel and a newer term's record waits for them to commit; a new term upserts the row to the
 * higher of the two terms and reads it back under an exclusive lock. On SQLite the writer's
 * BEGIN IMMEDIATE holds the database's write lock, which serializes the same way.
 *
 * Drivers are the caller's (pg, mysql2, better-sqlite3 / node:sqlite), as for fencedUpdate; no
 * import of express or fastify: the types below describe the few members used.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { InvalidArgumentError, NoTokenError, StaleTermError, StoreUnavailableError, checkName, checkSqlIdentifier } from '../core/index.js';
import type { FencingToken } from '../core/index.js';
import { refuse } from './context.js';
import type { SqlDialect } from './dialects.js';
import { FENCING_PROBLEMS, FENCING_TOKEN_HEADER, parseFencingHeader } from './http.js';
import type { FencingProblem } from './http.js';
import { termOf } from './rows.js';

/** What the middleware reads of a request: node's IncomingMessage (Express's `req`, Fastify's `request.raw`). */
export interface FencedRequestHead {
  /** Header names and values as received, alternating (every occurrence of a repeated header). */
  readonly rawHeaders: readonly string[];
}

/** What the middleware writes a problem to: node's ServerResponse (Express's `res`). */
export interface ProblemResponse {
  statusCode: number;
  readonly headersSent: boolean;
  setHeader(name: string, value: string): unknown;
  end(body: string): unknown;
}

/** The guard a fenced request's handler gets: the request's token and the check to run in its write's transaction. */
export interface HttpFenceGuard<Db> {
  /** The token the request carried (its group is the route's). */
  readonly token: FencingToken;
  /**
   * Check the token against the highest term accepted for the group and record it, inside `tx`,
   * the connection of the transaction the handler writes in (a pg Client after BEGIN, a mysql2
   * Connection after beginTransaction, a SQLite database after BEGIN IMMEDIATE). Call it before
   * the write, commit after it. Throws StaleTermError (reported: counted, path `http`) when a
   * higher term has been accepted: roll back. A term the lease table never issued is refused
   * with InvalidArgumentError (400), a contended fence row with StoreUnavailableError (503):
   * roll back, nothing was written.
   */
  check(tx: Db): Promise<void>;
  /**
   * Begin the write's transaction on `tx` (SQLite: BEGIN IMMEDIATE) and check, as `check` does,
   * in fewer round trips: on PostgreSQL the BEGIN and the steady-state check go in one. Then
   * write and commit; roll back when it throws (the transaction has begun).
   */
  begin(tx: Db): Promise<void>;
}

/** A request as the handler sees it: `fence` is the guard, or null when the route does not require a token and none came. */
export type Fenced<Req, Db> = Req & { fence: HttpFenceGuard<Db> | null };

export interface HttpFenceOptions<Db> {
  /** postgresDialect, mysqlDialect or sqliteDialect: the dialect of the `tx` the handlers pass to `check`. */
  readonly dialect: SqlDialect<Db>;
  /** The group (lease) whose terms fence these routes; a token for another group is refused with 400. */
  readonly group: string;
  /** Whether a request without the header is refused with 428 (default true); a function decides per request. */
  readonly required?: boolean | ((req: FencedRequestHead) => boolean);
  /** The fence table, `tenure_http_fences` by default (`TABLE` or `SCHEMA.TABLE`); create it with `ensureTable`. */
  readonly table?: string;
  /**
   * tenure's lease table in the same database (default `tenure_leases`), read when a new term is
   * first recorded, to refuse a term the lease store never issued (a forged token would
   * otherwise fence out the real leader). `null` when the leases live in another database or store.
   */
  readonly leaseTable?: string | null;
  /** Errors other than the fence's own escaping a node:http or Fastify handler: default console.error. The response is a 500. */
  readonly onError?: (err: unknown) => void;
}

/** The errors `check` throws that are the request's fault or a retry's matter, not the server's: answered as problems. */
const answered = new WeakMap<object, FencingProblem>();

/** How many groups' recorded terms a fence remembers (only to choose the cheaper path; never to decide). */
const SEEN_MAX = 10_000;

/** A fence for the routes of one group; see `httpFence`. */
export class HttpFence<Db> {
  readonly group: string;
  private readonly dialect: SqlDialect<Db>;
  private readonly required: (req: FencedRequestHead) => boolean;
  private readonly table: string;
  private readonly leaseTable: string | null;
  private readonly onError: (err: unknown) => void;
  /** Per group, the last term this process saw recorded: picks the shared-lock path; the database decides. */
  private readonly seen = new Map<string, number>();
  private readonly guards = new WeakMap<object, HttpFenceGuard<Db>>();

  constructor(options: HttpFenceOptions<Db>) {
    if (typeof options !== 'object' || options === null) throw new InvalidArgumentError('options', 'expected { dialect, group }');
    const d = options.dialect;
    if (typeof d !== 'object' || d === null || typeof d.raiseFence !== 'function') {
      throw new InvalidArgumentError('dialect', 'expected postgresDialect, mysqlDialect or sqliteDialect from tenure/fencing');
    }
    this.dialect = d;
    this.group = checkName('group', options.group);
    const required = options.required ?? true;
    if (typeof required !== 'boolean' && typeof required !== 'function') throw new InvalidArgumentError('required', 'expected a boolean or a function of the request');
    this.required = typeof required === 'boolean' ? () => required : required;
    this.table = tableName(d, 'table', options.table ?? 'tenure_http_fences');
    const leaseTable = options.leaseTable === undefined ? 'tenure_leases' : options.leaseTable;
    this.leaseTable = leaseTable === null ? null : tableName(d, 'leaseTable', leaseTable);
    this.onError = options.onError ?? ((err) => console.error('tenure http fence: handler failed:', err));
  }

  /** Create the fence table if it does not exist (run once at startup, outside any request's transaction). */
  async ensureTable(db: Db): Promise<void> {
    await this.dialect.update(db, this.dialect.fenceTableDdl(this.table), []);
  }

  /**
   * Read a request's Fencing-Token: its guard, null (no header on a route that does not require
   * one), or the problem to answer (400 malformed or another group's, 428 missing).
   */
  admit(req: FencedRequestHead): { readonly guard: HttpFenceGuard<Db> | null } | { readonly problem: FencingProblem } {
    const header = parseFencingHeader(headerValues(req));
    if (header.kind === 'missing') {
      if (!this.required(req)) return { guard: null };
      return {
        problem: problem(FENCING_PROBLEMS.required, 'Fencing token required', 428, `this route writes for group ${this.group}: send the header ${FENCING_TOKEN_HEADER}: ${this.group}#<term> of the current leader`, { group: this.group }),
      };
    }
    if (header.kind === 'malformed') {
      return { problem: problem(FENCING_PROBLEMS.malformed, 'Malformed fencing token', 400, header.detail, { group: this.group, termReceived: header.termReceived }) };
    }
    const { token } = header;
    if (token.lease !== this.group) {
      return {
        problem: problem(FENCING_PROBLEMS.wrongGroup, 'Fencing token of another group', 400, `the token is for group ${JSON.stringify(token.lease)}; this route is fenced by group ${JSON.stringify(this.group)}`, {
          group: this.group,
          termReceived: token.term,
        }),
      };
    }
    return { guard: this.makeGuard(token) };
  }

  /**
   * The guard the middleware attached to `req` (Express's req, node's req, Fastify's request);
   * NoTokenError when the request carried no token (a route that does not require one) or the
   * middleware did not run for it.
   */
  guard(req: object): HttpFenceGuard<Db> {
    const raw = (req as { raw?: unknown }).raw;
    const guard = this.guards.get(req) ?? (typeof raw === 'object' && raw !== null ? this.guards.get(raw) : undefined);
    if (!guard) throw new NoTokenError(`this request carried no ${FENCING_TOKEN_HEADER} for group ${this.group} (or the fence middleware did not run for it)`);
    return guard;
  }

  /** The problem to answer for an error a handler threw: a stale token (409), the guard's 400 and 503; null for any other error. */
  problemFor(err: unknown): FencingProblem | null {
    if (typeof err !== 'object' || err === null) return null;
    const known = answered.get(err);
    if (known) return known;
    if (err instanceof StaleTermError) return staleProblem(err);
    return null;
  }

  /** Write `p` as an `application/problem+json` response. */
  sendProblem(res: ProblemResponse, p: FencingProblem): void {
    res.statusCode = p.status;
    res.setHeader('content-type', 'application/problem+json');
    if (p.status === 503) res.setHeader('retry-after', '1');
    res.end(JSON.stringify(p));
  }

  /**
   * node:http: wrap a handler. The handler gets `req.fence` (see `Fenced`); a refused header is
   * answered before it runs; a StaleTermError (or the guard's other refusals) escaping it is
   * answered as a problem; any other error is a 500 and goes to `onError`.
   */
  node<Req extends FencedRequestHead = IncomingMessage, Res extends ProblemResponse = ServerResponse>(handler: (req: Fenced<Req, Db>, res: Res) => unknown): (req: Req, res: Res) => void {
    if (typeof handler !== 'function') throw new InvalidArgumentError('handler', 'expected (req, res) => …');
    return (req, res) => {
      const admitted = this.admit(req);
      if ('problem' in admitted) {
        this.sendProblem(res, admitted.problem);
        return;
      }
      const fenced = this.attach(req, admitted.guard);
      let result: unknown;
      try {
        result = handler(fenced, res);
      } catch (err) {
        this.failed(res, err);
        return;
      }
      if (result instanceof Promise) result.catch((err: unknown) => this.failed(res, err));
    };
  }

  /** Express: a middleware for the fenced routes (`app.post('/x', fence.express(), handler)` or `app.use(…)`). */
  express(): (req: FencedRequestHead, res: ProblemResponse, next: (err?: unknown) => void) => void {
    return (req, res, next) => {
      const admitted = this.admit(req);
      if ('problem' in admitted) {
        this.sendProblem(res, admitted.problem);
        return;
      }
      this.attach(req, admitted.guard);
      next();
    };
  }

  /**
   * Express: the error middleware that answers a StaleTermError (409) and the guard's other
   * refusals escaping a handler; register it after the routes (`app.use(fence.expressErrors())`).
   * Other errors go on to the next error handler.
   */
  expressErrors(): (err: unknown, req: FencedRequestHead, res: ProblemResponse, next: (err?: unknown) => void) => void {
    return (err, _req, res, next) => {
      const p = this.problemFor(err);
      if (p && !res.headersSent) this.sendProblem(res, p);
      else next(err);
    };
  }

  /**
   * Fastify: a plugin (`await app.register(fence.fastify)`) for every route of the instance it is
   * registered on, and its children: an onRequest hook answers a refused header before the body
   * is read and sets `request.fence`; an error handler answers a StaleTermError and the guard's
   * other refusals, and hands any other error to the one it replaces (Fastify's default).
   */
  get fastify(): FastifyFencePlugin {
    const plugin = (instance: FastifyLike, _opts: unknown, done: (err?: Error) => void): void => {
      instance.decorateRequest('fence', null);
      instance.addHook('onRequest', (request, reply, next) => {
        const admitted = this.admit(request.raw);
        if ('problem' in admitted) {
          const p = admitted.problem;
          reply.code(p.status).header('content-type', 'application/problem+json');
          if (p.status === 503) reply.header('retry-after', '1');
          reply.send(JSON.stringify(p));
          return;
        }
        this.attach(request, admitted.guard);
        if (admitted.guard) this.guards.set(request.raw, admitted.guard);
        next();
      });
      instance.setErrorHandler((error, _request, reply) => {
        const p = this.problemFor(error);
        if (!p) throw error;
        reply.code(p.status).header('content-type', 'application/problem+json');
        if (p.status === 503) reply.header('retry-after', '1');
        reply.send(JSON.stringify(p));
      });
      done();
    };
    // fastify-plugin's marker: the hook and error handler apply to the instance registering it, not a child scope.
    return Object.assign(plugin, { [Symbol.for('skip-override')]: true as const });
  }

  private attach<Req extends object>(req: Req, guard: HttpFenceGuard<Db> | null): Fenced<Req, Db> {
    if (guard) this.guards.set(req, guard);
    const fenced = req as Fenced<Req, Db>;
    fenced.fence = guard;
    return fenced;
  }

  private failed(res: ProblemResponse, err: unknown): void {
    const p = this.problemFor(err);
    if (p && !res.headersSent) {
      this.sendProblem(res, p);
      return;
    }
    this.onError(err);
    if (!res.headersSent) {
      res.statusCode = 500;
      res.setHeader('content-type', 'text/plain; charset=utf-8');
      res.end('internal server error\n');
    } else {
      (res as { destroy?: () => void }).destroy?.();
    }
  }

  private makeGuard(token: FencingToken): HttpFenceGuard<Db> {
    return Object.freeze({ token, check: (tx: Db) => this.check(tx, token), begin: (tx: Db) => this.begin(tx, token) });
  }

  private async check(tx: Db, token: FencingToken): Promise<void> {
    const d = this.dialect;
    checkTransaction(d, tx, true);
    if (this.steady(token)) {
      // Steady state: the term is (or is below) one recorded; a shared lock holds a newer term's record off until this commits.
      if (this.settled(token, await this.recorded(tx, token, d.lockShared))) return;
    }
    await this.raise(tx, token);
  }

  private async begin(tx: Db, token: FencingToken): Promise<void> {
    const d = this.dialect;
    checkTransaction(d, tx, false);
    if (this.steady(token)) {
      const rows = await this.explained(() => d.beginThenSelect(tx, (p) => `SELECT term FROM ${this.table} WHERE name = ${d.lease(p(token.lease))}${d.lockShared}`));
      if (this.settled(token, termOf(rows[0]?.term))) return;
    } else {
      await d.beginThenSelect(tx, () => 'SELECT 1');
    }
    await this.raise(tx, token);
  }

  /** Whether this process saw the token's term (or a higher one) recorded: then a shared-lock read decides (never an upgrade to exclusive). */
  private steady(token: FencingToken): boolean {
    const seen = this.seen.get(token.lease);
    return seen !== undefined && token.term <= seen;
  }

  /** After a shared-lock read of `current`: true when the token is the recorded term; StaleTermError when below. False: record it (the term seen was in a transaction that rolled back). */
  private settled(token: FencingToken, current: number | null): boolean {
    if (current === token.term) return true;
    if (current !== null && current > token.term) throw this.stale(token, current);
    return false;
  }

  /** Record a term not yet recorded (or find a higher one): issued?, raise the row to the higher term, read it back exclusively. */
  private async raise(tx: Db, token: FencingToken): Promise<void> {
    const d = this.dialect;
    if (this.leaseTable !== null) {
      const rows = await this.explained(() => d.select(tx, `SELECT term FROM ${this.leaseTable} WHERE name = ${d.lease(d.placeholder(1))}`, [token.lease]));
      const issued = termOf(rows[0]?.term);
      if (issued === null || token.term > issued) {
        const err = new InvalidArgumentError(FENCING_TOKEN_HEADER, `term ${token.term} was never issued for group ${token.lease} (latest ${issued ?? 'none'})`);
        answered.set(err, problem(FENCING_PROBLEMS.unissued, 'Fencing term never issued', 400, err.message, { group: token.lease, termReceived: token.term }));
        throw err;
      }
    }
    await this.explained(() => d.update(tx, d.raiseFence(this.table), [token.lease, token.term]));
    const current = await this.recorded(tx, token, d.lockExclusive);
    if (current !== null && current > token.term) throw this.stale(token, current);
    if (current !== token.term) throw new Error(`tenure http fence: the fence row of ${token.lease} reads ${String(current)} right after recording ${token.term}`);
    if (this.seen.size >= SEEN_MAX) this.seen.clear();
    this.seen.set(token.lease, token.term);
  }

  /** The group's recorded term, read with `lock`. */
  private async recorded(tx: Db, token: FencingToken, lock: string): Promise<number | null> {
    const d = this.dialect;
    const rows = await this.explained(() => d.select(tx, `SELECT term FROM ${this.table} WHERE name = ${d.lease(d.placeholder(1))}${lock}`, [token.lease]));
    return termOf(rows[0]?.term);
  }

  private stale(token: FencingToken, current: number): StaleTermError {
    const err = refuse(new StaleTermError(token.lease, token.term, current), 'http', 'guard');
    answered.set(err, staleProblem(err));
    return err;
  }

  /** A missing table is the setup's, said as such; a deadlock or lock timeout is a 503 to retry. */
  private async explained<T>(fn: () => Promise<T>): Promise<T> {
    try {
      return await fn();
    } catch (err) {
      const d = this.dialect;
      if (d.contended(err)) {
        const busy = new StoreUnavailableError(`the fence row of group ${this.group} was contended (deadlock or lock timeout): roll back; nothing was written; retry`, { cause: err });
        answered.set(busy, problem(FENCING_PROBLEMS.busy, 'Fence busy', 503, busy.message, { group: this.group }));
        throw busy;
      }
      const missing = d.missing(err);
      const last = (name: string): string => (name.split('.').pop() ?? name).replace(/^["`]|["`]$/g, '');
      if (missing?.kind === 'table' && last(missing.name) === last(this.table)) {
        throw new InvalidArgumentError('table', `no fence table ${this.table}: create it once at startup with fence.ensureTable(db)`);
      }
      if (missing?.kind === 'table' && this.leaseTable !== null && last(missing.name) === last(this.leaseTable)) {
        throw new InvalidArgumentError(
          'leaseTable',
          `no lease table ${this.leaseTable} in this database: name the store's (its table prefix + leases), or pass leaseTable: null when the leases live elsewhere (an unissued term is then not detected)`,
        );
      }
      throw err;
    }
  }
}

/** A fence for the routes writing for `options.group`; see HttpFence. */
export function httpFence<Db>(options: HttpFenceOptions<Db>): HttpFence<Db> {
  return new HttpFence(options);
}

/** The members of a Fastify instance the plugin uses. */
export interface FastifyLike {
  decorateRequest(name: 'fence', value: null): unknown;
  addHook(name: 'onRequest', hook: (request: FastifyRequestLike, reply: FastifyReplyLike, done: (err?: Error) => void) => void): unknown;
  setErrorHandler(handler: (error: never, request: FastifyRequestLike, reply: FastifyReplyLike) => void): unknown;
}

/** The members of a Fastify request the plugin uses. */
export interface FastifyRequestLike {
  readonly raw: FencedRequestHead;
}

/** The members of a Fastify reply the plugin uses. */
export interface FastifyReplyLike {
  code(status: number): FastifyReplyLike;
  header(name: string, value: string): FastifyReplyLike;
  send(payload: string): unknown;
}

export type FastifyFencePlugin = ((instance: FastifyLike, opts: unknown, done: (err?: Error) => void) => void) & { readonly [key: symbol]: true };

function problem(type: string, title: string, status: number, detail: string, extra: { group?: string; termReceived?: number | undefined; highestAccepted?: number }): FencingProblem {
  return {
    type,
    title,
    status,
    detail,
    ...(extra.group !== undefined ? { group: extra.group } : {}),
    ...(extra.termReceived !== undefined ? { termReceived: extra.termReceived } : {}),
    ...(extra.highestAccepted !== undefined ? { highestAccepted: extra.highestAccepted } : {}),
  };
}

function staleProblem(err: StaleTermError): FencingProblem {
  return problem(FENCING_PROBLEMS.stale, 'Stale fencing token', 409, `term ${err.term} of group ${err.lease} is stale: term ${err.currentTerm} has written here; the sender is no longer the leader`, {
    group: err.lease,
    termReceived: err.term,
    highestAccepted: err.currentTerm,
  });
}

/** Every value of the Fencing-Token header, as received (node joins repeats in `headers`; rawHeaders keeps them apart). */
function headerValues(req: FencedRequestHead): string[] {
  const raw = req.rawHeaders;
  if (!Array.isArray(raw)) throw new InvalidArgumentError('req', 'expected a node:http request (its rawHeaders)');
  const out: string[] = [];
  for (let i = 0; i + 1 < raw.length; i += 2) {
    const name = raw[i]!;
    if (name.length === 13 && name.toLowerCase() === 'fencing-token') out.push(raw[i + 1]!);
  }
  return out;
}

function tableName<Db>(d: SqlDialect<Db>, field: string, table: string): string {
  const parts = typeof table === 'string' ? table.split('.') : [];
  if (parts.length < 1 || parts.length > 2) throw new InvalidArgumentError(field, `expected TABLE or ${d.qualifier}.TABLE, got ${JSON.stringify(table)}`);
  return parts.map((p) => d.quote(checkSqlIdentifier(field, p, d.identifierMax))).join('.');
}

/** The obvious ways to run the check beside the write instead of in its transaction, refused. */
function checkTransaction<Db>(d: SqlDialect<Db>, tx: Db, inside: boolean): void {
  if (typeof tx !== 'object' || tx === null) throw new InvalidArgumentError('tx', `expected the ${d.name} connection of your write's transaction`);
  const t = tx as { getConnection?: unknown; connect?: unknown; totalCount?: unknown };
  if (typeof t.getConnection === 'function' || (typeof t.connect === 'function' && typeof t.totalCount === 'number')) {
    throw new InvalidArgumentError('tx', "expected the connection your write's transaction runs on, got a pool: a check in another transaction than the write's is not fencing");
  }
  if (inside && d.inTransaction(tx) === false) {
    throw new InvalidArgumentError('tx', `not in a transaction: begin the write's transaction first (${d.name === 'sqlite' ? 'BEGIN IMMEDIATE' : 'BEGIN'}), check, write, commit`);
  }
}
