/**
 * Suspended, recovered and lost against a real Redis behind the fault proxy: a leader (and a lock
 * holder) whose renew fails reports `suspended` with the deadline unchanged, `recovered` with the
 * same term when the store comes back in time, and loses leadership (signal aborted) at the
 * deadline when it does not. /metrics and /healthz are scraped over real HTTP across the
 * transitions, and the logger gets one line per transition, without the store's password.
 * Stalled (progressTimeoutMs, stepDownOnStall) on the memory store: the store is not the point.
 */
import { createServer } from 'node:http';
import type { Server } from 'node:http';
import { randomBytes } from 'node:crypto';
import { Registry } from 'prom-client';
import { afterEach, describe, expect, it } from 'vitest';
import { Follower, InvalidArgumentError, LeaderElector, Lock, StoreUnavailableError, sqliteSink, collectMetrics, healthHandler, healthReport, metricsHandler, openStore } from '../../src/index.js';
import type { HealthReport, LeaderContext, LeaderElectorEvents, LockHandle, LockHandleEvents, TenureStore } from '../../src/index.js';
import type { Logger } from '../../src/core/index.js';
import { FaultProxy } from '../chaos/proxy/index.js';
import { openTestSqlite } from '../fixtures/sqlite-compat.js';

interface Line {
  level: string;
  fields: Record<string, unknown>;
  msg: string;
}

function captureLogger(): { logger: Logger; lines: Line[] } {
  const lines: Line[] = [];
  const at = (level: string) => (fields: object, msg?: string) => void lines.push({ level, fields: fields as Record<string, unknown>, msg: msg ?? '' });
  return { logger: { debug: at('debug'), info: at('info'), warn: at('warn'), error: at('error') }, lines };
}

/** The next `what` an emitter reports, registered by `register`, or a rejection after `ms`. */
function next<T>(register: (listener: (payload: T) => void) => unknown, what: string, ms: number): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`no ${what} within ${ms} ms`)), ms);
    register((payload) => {
      clearTimeout(timer);
      resolve(payload);
    });
  });
}

async function serve(routes: Record<string, ReturnType<typeof metricsHandler>>): Promise<{ url: string; server: Server }> {
  const server = createServer((req, res) => {
    const route = routes[req.url ?? ''];
    if (route) route(req, res);
    else res.writeHead(404).end();
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const address = server.address();
  if (!address || typeof address === 'string') throw new Error('no port');
  return { url: `http://127.0.0.1:${address.port}`, server };
}

async function get(url: string): Promise<{ status: number; body: string }> {
  const res = await fetch(url);
  return { status: res.status, body: await res.text() };
}

const cleanups: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

describe('suspended, recovered, lost on Redis behind the fault proxy', () => {
  it('a leader and a lock holder are suspended when renewals fail, recover with the same term, and are lost at the deadline', async () => {
    const proxy = await FaultProxy.start({ target: { host: '127.0.0.1', port: 6379 }, name: 'redis' });
    cleanups.push(() => proxy.close());
    const prefix = `t25h-${randomBytes(4).toString('hex')}:`;
    const store: TenureStore = await openStore(`redis://127.0.0.1:${proxy.endpoint.port}/?prefix=${prefix}`);
    cleanups.push(() => store.close());
    const { logger, lines } = captureLogger();
    // ttl 6 s: deadline = renew send + 5.4 s; renew every 2 s; retry every 500 ms; a call with no
    // answer fails after 2 s. Margins for a loaded machine: a suspension leaves > 3 s to recover.
    const timing = { ttlMs: 6000 };
    const elector = new LeaderElector({ store, group: 'jobs', id: 'n1', ...timing, logger });
    const registry = new Registry();
    const stopMetrics = collectMetrics({ elector }, { registry });
    cleanups.push(stopMetrics);
    const { url, server } = await serve({ '/metrics': metricsHandler(registry), '/healthz': healthHandler([elector]) });
    cleanups.push(() => new Promise<void>((r) => server.close(() => r())));

    const contexts: LeaderContext[] = [];
    const work = elector.runWhileLeader((ctx) => {
      contexts.push(ctx);
      return new Promise<void>((resolve) => ctx.signal.addEventListener('abort', () => resolve(), { once: true }));
    });
    cleanups.push(async () => {
      await elector.stop();
      await work;
    });
    const elected = await next<LeaderElectorEvents['elected']>((l) => elector.once('elected', l), 'elected', 10_000);
    const term = elected.term;
    const ctx = contexts[0]!;
    expect(ctx.remainingMs()).toBeGreaterThan(0);
    expect(ctx.remainingMs()).toBeLessThanOrEqual(5400);
    const lock = new Lock(store, 'jobs-lock', { id: 'n1', ...timing, logger });
    const handle: LockHandle = await lock.acquire({ waitMs: 5000 });
    cleanups.push(() => handle.release());
    const lockEvents: string[] = [];
    handle.on('suspended', () => lockEvents.push('suspended')).on('recovered', () => lockEvents.push('recovered')).on('lost', ({ reason }) => lockEvents.push(`lost:${reason}`));

    let health = await get(`${url}/healthz`);
    expect(health.status).toBe(200);
    expect(JSON.parse(health.body)).toMatchObject({ ok: true, groups: { jobs: { role: 'leader', term, suspended: false, stalled: false } } });
    let metrics = (await get(`${url}/metrics`)).body;
    expect(metrics).toMatch(/tenure_is_leader\{group="jobs"\} 1/);
    expect(metrics).toMatch(/tenure_suspended\{group="jobs"\} 0/);
    expect(metrics).toContain(`tenure_leader_info{group="jobs",owner="${elector.owner}"} 1`);
    expect(metrics).toMatch(/tenure_store_call_seconds_count\{group="jobs",operation="acquire",outcome="ok"\} 1/);

    // The store goes away: the next renews fail, both are suspended, still leader, same deadline.
    const suspended = next<LeaderElectorEvents['suspended']>((l) => elector.once('suspended', l), 'suspended', 10_000);
    const lockSuspended = next<LockHandleEvents['suspended']>((l) => handle.once('suspended', l), 'suspended', 10_000);
    await proxy.cut();
    const s = await suspended;
    await lockSuspended;
    expect(s.term).toBe(term);
    expect(s.remainingMs).toBeGreaterThan(0);
    expect(elector.isLeader).toBe(true);
    expect(elector.suspended).toBe(true);
    expect(handle.suspended).toBe(true);
    expect(ctx.signal.aborted).toBe(false);
    expect(handle.signal.aborted).toBe(false);
    // Rule 2: suspension never extends the deadline; remainingMs only counts down.
    const left1 = ctx.remainingMs();
    expect(left1).toBeLessThanOrEqual(s.remainingMs);
    health = await get(`${url}/healthz`);
    expect(health.status).toBe(503);
    expect(JSON.parse(health.body)).toMatchObject({ ok: false, groups: { jobs: { role: 'leader', ok: false, suspended: true } } });
    metrics = (await get(`${url}/metrics`)).body;
    expect(metrics).toMatch(/tenure_suspended\{group="jobs"\} 1/);
    expect(metrics).toMatch(/tenure_renew_failures_total\{group="jobs"\} [1-9]/);

    // Back before the deadline: recovered, same term, deadline moved on.
    const recovered = next<LeaderElectorEvents['recovered']>((l) => elector.once('recovered', l), 'recovered', 10_000);
    const lockRecovered = next<LockHandleEvents['recovered']>((l) => handle.once('recovered', l), 'recovered', 10_000);
    await proxy.heal();
    const r = await recovered;
    await lockRecovered;
    expect(r.term).toBe(term);
    expect(elector.term).toBe(term);
    expect(elector.suspended).toBe(false);
    expect(handle.suspended).toBe(false);
    expect(ctx.signal.aborted).toBe(false);
    expect(ctx.remainingMs()).toBeGreaterThan(left1);
    expect((await store.read('jobs'))?.term).toBe(term);
    health = await get(`${url}/healthz`);
    expect(health.status).toBe(200);
    metrics = (await get(`${url}/metrics`)).body;
    expect(metrics).toMatch(/tenure_suspended\{group="jobs"\} 0/);
    expect(metrics).toMatch(/tenure_leadership_changes_total\{group="jobs"\} 1/);

    // Away again, for good: suspended, then lost at the deadline (signals abort).
    const suspendedAgain = next<LeaderElectorEvents['suspended']>((l) => elector.once('suspended', l), 'suspended', 10_000);
    const deposed = next<LeaderElectorEvents['deposed']>((l) => elector.once('deposed', l), 'deposed', 20_000);
    const lockLost = next<LockHandleEvents['lost']>((l) => handle.once('lost', l), 'lost', 20_000);
    await proxy.cut();
    await suspendedAgain;
    const d = await deposed;
    expect(d).toMatchObject({ term, reason: 'deadline' });
    expect((await lockLost).reason).toBe('deadline');
    expect(ctx.signal.aborted).toBe(true);
    expect(handle.signal.aborted).toBe(true);
    expect(ctx.remainingMs()).toBe(0);
    expect(handle.remainingMs()).toBe(0);
    expect(lockEvents).toEqual(['suspended', 'recovered', 'suspended', 'lost:deadline']);
    metrics = (await get(`${url}/metrics`)).body;
    expect(metrics).toMatch(/tenure_is_leader\{group="jobs"\} 0/);
    expect(metrics).toMatch(/tenure_suspended\{group="jobs"\} 0/);
    expect(metrics).toMatch(/tenure_leadership_changes_total\{group="jobs"\} 2/);
    expect(metrics).toMatch(/tenure_store_call_seconds_count\{group="jobs",operation="renew",outcome="(?:error|timeout)"\} [1-9]/);
    health = await get(`${url}/healthz`);
    expect(health.status).toBe(200); // a follower is healthy
    expect(JSON.parse(health.body)).toMatchObject({ groups: { jobs: { role: 'follower', remainingMs: 0 } } });

    // One line per transition, in order, for the group (the lock's lines are under its own name).
    const transitions = lines.filter((l) => l.fields.group === 'jobs' && l.level !== 'debug' && l.fields.event !== 'store-error').map((l) => `${l.level}:${String(l.fields.event)}`);
    expect(transitions).toEqual(['info:elected', 'warn:suspended', 'info:recovered', 'warn:suspended', 'warn:lost']);
    const lockLines = lines.filter((l) => l.fields.group === 'jobs-lock' && l.level !== 'debug' && l.fields.event !== 'store-error').map((l) => String(l.fields.event));
    expect(lockLines).toEqual(['elected', 'suspended', 'recovered', 'suspended', 'lost']);
    for (const l of lines.filter((x) => x.fields.group === 'jobs')) {
      expect(l.fields).toMatchObject({ group: 'jobs', owner: elector.owner });
      if (l.fields.event !== 'leader-changed' && l.fields.event !== 'store-error') expect(l.fields.term).toBe(term);
    }
    expect(lines.find((l) => l.fields.event === 'lost' && l.fields.group === 'jobs')?.fields.reason).toBe('deadline');
    await proxy.heal();
  }, 60_000);
});

describe('follower lag metrics', () => {
  it("publishes the lag a Follower measures: entries and seconds on the store's clock", async () => {
    const store = await openStore('memory:');
    cleanups.push(() => store.close());
    const { lease } = await store.acquire('ledger', 'w~1', 60_000);
    for (let i = 0; i < 5; i++) await store.appendFenced({ lease: 'ledger', term: lease.term }, 'ledger', `e${i}`);
    const db = openTestSqlite(':memory:');
    cleanups.push(() => void db.close());
    const follower = new Follower({ store, stream: 'ledger', sink: sqliteSink(db), apply: () => {}, lagEveryMs: 0 });
    const registry = new Registry();
    cleanups.push(collectMetrics({ follower }, { registry }));
    await new Promise((r) => setTimeout(r, 20)); // the oldest entry is then at least 20 ms old
    await follower.measureLag();
    const text = await registry.metrics();
    expect(text).toMatch(/tenure_follower_lag_entries\{stream="ledger"\} 5/);
    const seconds = Number(/tenure_follower_lag_seconds\{stream="ledger"\} ([0-9.e-]+)/.exec(text)?.[1]);
    expect(seconds).toBeGreaterThanOrEqual(0.015);
    expect(seconds).toBeLessThan(60);
  });
});

describe('stalled leader work', () => {
  it('no progress for progressTimeoutMs: stalled (healthz 503); progress clears it', async () => {
    const store = await openStore('memory:');
    cleanups.push(() => store.close());
    const { logger, lines } = captureLogger();
    const elector = new LeaderElector({ store, group: 'etl', id: 'n1', ttlMs: 3000, progressTimeoutMs: 300, logger });
    let ctx: LeaderContext | null = null;
    const work = elector.runWhileLeader((c) => {
      ctx = c;
      c.progress();
      return new Promise<void>((resolve) => c.signal.addEventListener('abort', () => resolve(), { once: true }));
    });
    cleanups.push(async () => {
      await elector.stop();
      await work;
    });
    const stalled = await next<LeaderElectorEvents['stalled']>((l) => elector.once('stalled', l), 'stalled', 5000);
    expect(stalled.sinceProgressMs).toBeGreaterThanOrEqual(300);
    expect(stalled.stepDown).toBe(false);
    expect(elector.stalled).toBe(true);
    expect(elector.isLeader).toBe(true); // reported only
    const { url, server } = await serve({ '/healthz': healthHandler([elector]) });
    cleanups.push(() => new Promise<void>((r) => server.close(() => r())));
    let health = await get(`${url}/healthz`);
    expect(health.status).toBe(503);
    expect(JSON.parse(health.body)).toMatchObject({ ok: false, groups: { etl: { role: 'leader', stalled: true, suspended: false } } });
    const unstalled = next<LeaderElectorEvents['unstalled']>((l) => elector.once('unstalled', l), 'unstalled', 2000);
    ctx!.progress();
    await unstalled;
    expect(elector.stalled).toBe(false);
    health = await get(`${url}/healthz`);
    expect(health.status).toBe(200);
    expect(lines.filter((l) => l.fields.event === 'stalled' || l.fields.event === 'unstalled').map((l) => `${l.level}:${String(l.fields.event)}`)).toEqual(['warn:stalled', 'info:unstalled']);
  });

  it('with stepDownOnStall the stalled leader steps down: signal aborted, lease released at once', async () => {
    const store = await openStore('memory:');
    cleanups.push(() => store.close());
    const elector = new LeaderElector({ store, group: 'etl', id: 'n1', ttlMs: 10_000, progressTimeoutMs: 200, stepDownOnStall: true });
    let signal: AbortSignal | null = null;
    const work = elector.runWhileLeader((c) => {
      signal = c.signal;
      return new Promise<void>((resolve) => c.signal.addEventListener('abort', () => resolve(), { once: true }));
    });
    cleanups.push(async () => {
      await elector.stop();
      await work;
    });
    const { term } = await next<LeaderElectorEvents['elected']>((l) => elector.once('elected', l), 'elected', 5000);
    const deposed = await next<LeaderElectorEvents['deposed']>((l) => elector.once('deposed', l), 'deposed', 5000);
    expect(deposed).toMatchObject({ term, reason: 'stalled' });
    expect(signal!.aborted).toBe(true);
    // Released, not left to expire (ttl 10 s): the store shows no live holder of that term.
    await expect.poll(async () => (await store.read('etl'))?.term === term ? 'held' : 'released', { timeout: 2000 }).toBe('released');
  });

  it("log lines never carry a store URL's credentials", async () => {
    const store = await openStore('memory:');
    cleanups.push(() => store.close());
    const { logger, lines } = captureLogger();
    const elector = new LeaderElector({ store, group: 'creds', id: 'n1', ttlMs: 3000, logger });
    cleanups.push(() => elector.stop());
    elector.start();
    await next<LeaderElectorEvents['elected']>((l) => elector.once('elected', l), 'elected', 5000);
    // The store's renew starts failing with a driver message that quotes its URL, password and all.
    const renew = store.renew.bind(store);
    store.renew = () => Promise.reject(new StoreUnavailableError('redis store redis://app:hunter2secret@db.internal:6379/?password=hunter2secret: connection refused'));
    await next<LeaderElectorEvents['suspended']>((l) => elector.once('suspended', l), 'suspended', 5000);
    store.renew = renew;
    const line = lines.find((l) => l.fields.event === 'suspended');
    expect(line?.fields.reason).toBe('redis store redis://app:***@db.internal:6379/?password=***: connection refused');
    expect(JSON.stringify(lines)).not.toContain('hunter2secret');
  });

  it('rejects bad health options with one typed error', () => {
    const store = { kind: 'memory' } as unknown as TenureStore;
    const bad: [Partial<ConstructorParameters<typeof LeaderElector>[0]>, RegExp][] = [
      [{ progressTimeoutMs: -1 }, /progressTimeoutMs/],
      [{ progressTimeoutMs: Number.NaN }, /progressTimeoutMs/],
      [{ stepDownOnStall: 'yes' as unknown as boolean }, /stepDownOnStall/],
      [{ logger: {} as Logger }, /logger/],
    ];
    for (const [options, field] of bad) {
      let thrown: unknown = null;
      try {
        new LeaderElector({ store, group: 'g', ...options });
      } catch (err) {
        thrown = err;
      }
      expect(thrown).toBeInstanceOf(InvalidArgumentError);
      expect((thrown as InvalidArgumentError).message).toMatch(field);
    }
  });
});

describe('/healthz for lock handles', () => {
  it('reports each handle: held, suspended (503), recovered, released (200), lost (503)', async () => {
    const proxy = await FaultProxy.start({ target: { host: '127.0.0.1', port: 6379 }, name: 'redis' });
    cleanups.push(() => proxy.close());
    const prefix = `t25l-${randomBytes(4).toString('hex')}:`;
    const store: TenureStore = await openStore(`redis://127.0.0.1:${proxy.endpoint.port}/?prefix=${prefix}`);
    cleanups.push(() => store.close());
    // ttl 6 s: deadline = renew send + 5.4 s; a suspension leaves > 3 s to recover on a loaded machine.
    const timing = { ttlMs: 6000 };
    const a = await new Lock(store, 'lock-a', { id: 'n1', ...timing }).acquire({ waitMs: 5000 });
    const b = await new Lock(store, 'lock-b', { id: 'n1', ...timing }).acquire({ waitMs: 5000 });
    cleanups.push(() => a.release());
    cleanups.push(() => b.release());
    const { url, server } = await serve({ '/healthz': healthHandler(() => [a, b]) });
    cleanups.push(() => new Promise<void>((r) => server.close(() => r())));

    let health = await get(`${url}/healthz`);
    expect(health.status).toBe(200);
    let body = JSON.parse(health.body) as HealthReport;
    expect(body).toMatchObject({ ok: true, groups: {}, locks: { 'lock-a': { ok: true, held: true, lost: false, suspended: false, term: a.term }, 'lock-b': { ok: true, held: true } } });
    expect(body.locks!['lock-a']!.remainingMs).toBeGreaterThan(0);
    expect(body.locks!['lock-a']!.remainingMs).toBeLessThanOrEqual(5400);

    // The store goes away: both suspended, still held, 503.
    const suspended = Promise.all([a, b].map((h) => next<LockHandleEvents['suspended']>((l) => h.once('suspended', l), 'suspended', 10_000)));
    await proxy.cut();
    await suspended;
    health = await get(`${url}/healthz`);
    expect(health.status).toBe(503);
    body = JSON.parse(health.body) as HealthReport;
    expect(body).toMatchObject({ ok: false, locks: { 'lock-a': { ok: false, held: true, suspended: true, lost: false } } });

    // Back in time: recovered, 200; then lock-a released: still healthy (the application let it go).
    const recovered = Promise.all([a, b].map((h) => next<LockHandleEvents['recovered']>((l) => h.once('recovered', l), 'recovered', 10_000)));
    await proxy.heal();
    await recovered;
    health = await get(`${url}/healthz`);
    expect(health.status).toBe(200);
    await a.release();
    health = await get(`${url}/healthz`);
    expect(health.status).toBe(200);
    expect(JSON.parse(health.body)).toMatchObject({ ok: true, locks: { 'lock-a': { ok: true, held: false, lost: false, remainingMs: 0 }, 'lock-b': { ok: true, held: true } } });

    // Away for good: lock-b is lost at its deadline: 503, held false, lost true.
    const lost = next<LockHandleEvents['lost']>((l) => b.once('lost', l), 'lost', 20_000);
    await proxy.cut();
    expect((await lost).reason).toBe('deadline');
    health = await get(`${url}/healthz`);
    expect(health.status).toBe(503);
    expect(JSON.parse(health.body)).toMatchObject({ ok: false, locks: { 'lock-b': { ok: false, held: false, lost: true, suspended: false, remainingMs: 0 } } });
    await proxy.heal();
  }, 60_000);

  it('mixes electors and handles in one report, and refuses anything else with a typed error', async () => {
    const store = await openStore('memory:');
    cleanups.push(() => store.close());
    const elector = new LeaderElector({ store, group: 'g1', id: 'n1' });
    const handle = await new Lock(store, 'l1', { id: 'n1' }).acquire({ waitMs: 1000 });
    cleanups.push(() => handle.release());
    const report = healthReport([elector, handle]);
    expect(report).toMatchObject({ ok: true, groups: { g1: { role: 'follower', ok: true } }, locks: { l1: { ok: true, held: true } } });
    expect(healthReport([elector])).not.toHaveProperty('locks');
    expect(() => healthReport([{} as unknown as LockHandle])).toThrow(InvalidArgumentError);
  });
});
