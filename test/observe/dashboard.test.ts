/**
 * dashboardHandler without a browser: mounted in node:http, Express and Fastify; the event stream's
 * snapshot and live updates; the token; credentials never shown; groups, follower adverts and the
 * term history as the shared source keeps them.
 */
import { createServer, request } from 'node:http';
import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import express from 'express';
import Fastify from 'fastify';
import { afterEach, describe, expect, it } from 'vitest';
import { DashboardSource, dashboardHandler, openStore } from '../../src/index.js';
import type { DashboardHandler, DashboardSnapshot, DashboardUpdate, TenureStore } from '../../src/index.js';
import { freePort } from '../fixtures/ports.js';

const cleanups: Array<() => Promise<void> | void> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

function listen(server: Server): Promise<string> {
  return new Promise((resolve) => server.listen(0, '127.0.0.1', () => resolve(`http://127.0.0.1:${(server.address() as AddressInfo).port}`)));
}

function get(url: string, headers: Record<string, string> = {}, method = 'GET'): Promise<{ status: number; headers: Record<string, unknown>; body: string }> {
  return new Promise((resolve, reject) => {
    const req = request(url, { method, headers }, (res) => {
      let body = '';
      res.on('data', (d: Buffer) => (body += d.toString()));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body }));
    });
    req.on('error', reject);
    req.end();
  });
}

/** Read server-sent events until `until` accepts one; resolves with all read so far. */
function events(url: string, until: (name: string, data: unknown) => boolean, timeoutMs = 5000): Promise<Array<{ name: string; data: unknown; at: number }>> {
  return new Promise((resolve, reject) => {
    const seen: Array<{ name: string; data: unknown; at: number }> = [];
    const timer = setTimeout(() => {
      req.destroy();
      reject(new Error(`no matching event within ${timeoutMs} ms: ${JSON.stringify(seen.map((e) => e.name))}`));
    }, timeoutMs);
    const req = request(url, (res) => {
      let buf = '';
      res.on('data', (d: Buffer) => {
        buf += d.toString();
        let end;
        while ((end = buf.indexOf('\n\n')) >= 0) {
          const frame = buf.slice(0, end);
          buf = buf.slice(end + 2);
          const name = /^event: (.*)$/m.exec(frame)?.[1];
          const data = /^data: (.*)$/m.exec(frame)?.[1];
          if (name === undefined || data === undefined) continue;
          const e = { name, data: JSON.parse(data) as unknown, at: Date.now() };
          seen.push(e);
          if (until(e.name, e.data)) {
            clearTimeout(timer);
            req.destroy();
            resolve(seen);
            return;
          }
        }
      });
    });
    req.on('error', (err) => {
      if (!req.destroyed) reject(err);
    });
    req.end();
  });
}

async function memoryDashboard(options: Partial<Parameters<typeof dashboardHandler>[0]> = {}): Promise<{ store: TenureStore; handler: DashboardHandler; url: string }> {
  const store = await openStore('memory:');
  const handler = dashboardHandler({ store, pollMs: 200, ...options });
  const server = createServer((req, res) => handler(req, res));
  const url = await listen(server);
  cleanups.push(async () => {
    await handler.close();
    server.closeAllConnections();
    await new Promise((r) => server.close(r));
    await store.close();
  });
  return { store, handler, url };
}

describe('dashboardHandler', () => {
  it('serves the page with a strict CSP, the state, and 404/405 for the rest', async () => {
    const { store, url } = await memoryDashboard();
    await store.acquire('billing', 'node-a~1', 60_000, { url: 'http://a' });
    const page = await get(`${url}/`);
    expect(page.status).toBe(200);
    expect(page.headers['content-type']).toMatch(/^text\/html/);
    expect(page.body).toContain('<title>tenure dashboard</title>');
    expect(page.body).not.toMatch(/<script src=|<link /); // nothing from elsewhere
    expect(String(page.headers['content-security-policy'])).toMatch(/default-src 'none'; script-src 'sha256-[^']+'/);
    const state = await (async () => {
      for (;;) {
        const s = JSON.parse((await get(`${url}/state.json`)).body) as DashboardSnapshot;
        if (s.groups.length > 0) return s;
        await new Promise((r) => setTimeout(r, 50));
      }
    })();
    expect(state.groups.map((g) => [g.name, g.leader?.owner, g.term])).toEqual([['billing', 'node-a~1', 1]]);
    expect(state.remaining.billing).toBeGreaterThan(50_000);
    expect((await get(`${url}/nothing-here`)).status).toBe(404);
    const post = await get(`${url}/`, {}, 'POST');
    expect(post.status).toBe(405);
    expect(post.headers.allow).toBe('GET, HEAD');
  });

  it('streams a snapshot, then the change of leader as soon as the store pushes it', async () => {
    const { store, url, handler } = await memoryDashboard({ pollMs: 60_000 });
    const a = await store.acquire('billing', 'node-a~1', 60_000);
    // A 60 s poll (this one finds the group): the update below can only come from the store's push.
    await handler.source.poll();
    let changedAt = 0;
    const seen = events(`${url}/events`, (name, data) => name === 'update' && (data as DashboardUpdate).groups.some((g) => g.leader?.owner === 'node-b~1'));
    setTimeout(() => {
      void (async () => {
        await store.release('billing', 'node-a~1', a.lease.term);
        changedAt = Date.now();
        await store.acquire('billing', 'node-b~1', 60_000);
      })();
    }, 200);
    const got = await seen;
    expect(got[0]!.name).toBe('snapshot');
    expect((got[0]!.data as DashboardSnapshot).groups[0]!.leader?.owner).toBe('node-a~1');
    const last = got.at(-1)!;
    const view = (last.data as DashboardUpdate).groups.find((g) => g.name === 'billing')!;
    expect(view.term).toBe(2);
    expect(view.sinceExact).toBe(true);
    expect(view.history.map(([, term, owner]) => [term, owner])).toEqual([[1, 'node-a~1'], [2, 'node-b~1']]);
    expect(last.at - changedAt).toBeLessThan(1000);
  });

  it('refuses requests without the token, and takes it as a Bearer header or ?token=', async () => {
    const { url, handler } = await memoryDashboard({ token: 'sesame-0123456789' });
    for (const path of ['/', '/events', '/state.json']) {
      const r = await get(url + path);
      expect(r.status).toBe(401);
      expect(r.headers['www-authenticate']).toMatch(/^Bearer/);
      expect((await get(`${url}${path}?token=sesame-012345678`)).status).toBe(401);
      expect((await get(url + path, { authorization: 'Bearer sesame-0123456789x' })).status).toBe(401);
    }
    expect((await get(`${url}/state.json`, { authorization: 'Bearer sesame-0123456789' })).status).toBe(200);
    expect((await get(`${url}/state.json?token=sesame-0123456789`)).status).toBe(200);
    expect(handler.clients).toBe(0);
    expect(() => dashboardHandler({ store: {} as TenureStore, token: 'short' })).toThrow(/token/);
  });

  it('mounts under a path in Express and in Fastify', async () => {
    const store = await openStore('memory:');
    await store.acquire('ingest', 'node-c~1', 60_000);
    const handler = dashboardHandler({ store, pollMs: 200 });
    const app = express();
    app.use('/ops/tenure', (req, res) => handler(req, res));
    const server = createServer(app);
    const base = await listen(server);
    const fastify = Fastify();
    fastify.get('/tenure/*', (req, reply) => {
      reply.hijack();
      handler(req.raw, reply.raw);
    });
    const port = await freePort();
    await fastify.listen({ port, host: '127.0.0.1' });
    cleanups.push(async () => {
      await handler.close();
      server.closeAllConnections();
      await new Promise((r) => server.close(r));
      await fastify.close();
      await store.close();
    });
    expect((await get(`${base}/ops/tenure/`)).body).toContain('tenure dashboard');
    const viaExpress = await events(`${base}/ops/tenure/events`, (name) => name === 'snapshot');
    expect(viaExpress[0]!.data).toMatchObject({ groups: [{ name: 'ingest' }] });
    expect((await get(`http://127.0.0.1:${port}/tenure/`)).body).toContain('tenure dashboard');
    const viaFastify = await events(`http://127.0.0.1:${port}/tenure/events`, (name) => name === 'snapshot');
    expect(viaFastify[0]!.data).toMatchObject({ groups: [{ name: 'ingest' }] });
  });

  it('never shows the credentials of the store URL, in its label or in its errors', async () => {
    const closed = await freePort();
    const storeUrl = `postgres://tenure:s3cret-pw@127.0.0.1:${closed}/nowhere?sslpassword=k3y-secret`;
    const store = await openStore(storeUrl);
    const source = new DashboardSource({ store, storeUrl, pollMs: 200, timeoutMs: 3000 });
    cleanups.push(async () => {
      source.close();
      await store.close();
    });
    await source.poll();
    const snap = source.snapshot();
    expect(snap.status.ok).toBe(false);
    expect(snap.status.error).toBeTruthy();
    expect(snap.store).toBe(`postgres://tenure:***@127.0.0.1:${closed}/nowhere?sslpassword=***`);
    expect(JSON.stringify(snap)).not.toMatch(/s3cret-pw|k3y-secret/);
  });
});

describe('DashboardSource', () => {
  it('groups follower adverts under their group, and keeps to --groups', async () => {
    const store = await openStore('memory:');
    const source = new DashboardSource({ store, groups: ['orders', 'ledger'], push: false, pollMs: 60_000 });
    cleanups.push(async () => {
      source.close();
      await store.close();
    });
    await store.acquire('orders', 'node-a~1', 60_000, { stream: 'orders-log' });
    await store.acquire('orders/followers/r1', 'r1~1', 60_000, { appliedSeq: 7, lagEntries: 3, lagAtLeast: true, lagMs: 120, endpoint: 'http://r1' });
    await store.acquire('orders/followers/r2', 'r2~1', 60_000, { appliedSeq: 0, lagEntries: 0, lagAtLeast: false, lagMs: Number.MAX_SAFE_INTEGER });
    await store.acquire('ledger/followers/r1', 'r1~2', 60_000, { appliedSeq: 1, lagEntries: 0, lagAtLeast: false, lagMs: 4 });
    await store.acquire('other', 'node-z~1', 60_000);
    const a = await store.acquire('orders', 'node-a~1', 60_000, { stream: 'orders-log' });
    for (let i = 0; i < 5; i++) await store.appendFenced({ lease: 'orders', term: a.lease.term }, 'orders-log', `e${i}`);
    await source.poll();
    const snap = source.snapshot();
    expect(snap.groups.map((g) => g.name)).toEqual(['ledger', 'orders']);
    const orders = snap.groups.find((g) => g.name === 'orders')!;
    expect(orders.followers).toEqual([
      { node: 'r1', owner: 'r1~1', appliedSeq: 7, lagEntries: 3, lagAtLeast: true, lagMs: 120, endpoint: 'http://r1' },
      { node: 'r2', owner: 'r2~1', appliedSeq: 0, lagEntries: 0, lagAtLeast: false, lagMs: null, endpoint: null },
    ]);
    expect(orders.stream).toEqual({ name: 'orders-log', head: 5 });
    // A group whose leader is gone but whose followers advertise is shown, leaderless.
    const ledger = snap.groups.find((g) => g.name === 'ledger')!;
    expect(ledger.leader).toBeNull();
    expect(ledger.stream).toEqual({ name: 'ledger', head: 0 });
  });

  it('keeps a group that lost its leader as leaderless, with its last term, and never shows a term going back', async () => {
    const store = await openStore('memory:');
    const source = new DashboardSource({ store, push: false, pollMs: 60_000 });
    cleanups.push(async () => {
      source.close();
      await store.close();
    });
    const a = await store.acquire('jobs', 'node-a~1', 60_000);
    await source.poll();
    await store.release('jobs', 'node-a~1', a.lease.term);
    await source.poll();
    const g = source.snapshot().groups[0]!;
    expect(g).toMatchObject({ name: 'jobs', leader: null, term: 1 });
    expect(g.sinceExact).toBe(false);
    expect(source.calls.list).toBe(2);
  });

  it('rejects bad options with errors that name them', async () => {
    const store = await openStore('memory:');
    cleanups.push(() => store.close());
    expect(() => new DashboardSource({ store, groups: [], pollMs: 1000 })).toThrow(/groups/);
    expect(() => new DashboardSource({ store, groups: ['a'], prefix: 'a' })).toThrow(/groups or prefix/);
    expect(() => new DashboardSource({ store, pollMs: 5 })).toThrow(/pollMs/);
    expect(() => new DashboardSource({ store: {} as TenureStore })).toThrow(/store/);
  });
});
