/**
 * LeaseSet suspended / recovered / lost, per lease, as the elector and lock handles have them: a
 * lease whose renewal fails as "maybe" is suspended (event, getter) with its deadline unchanged,
 * recovered with the same term when a renewal succeeds in time, and ends with reason `deadline`
 * when none does. On the memory store (renewals made to fail) and on PostgreSQL behind the fault
 * proxy (its connections cut).
 */
import { afterEach, describe, expect, it } from 'vitest';
import { StoreUnavailableError } from '../../src/core/index.js';
import type { RenewManyItem, RenewResult, Store } from '../../src/core/index.js';
import { LeaseSet } from '../../src/election/index.js';
import type { LeaseSetEvents } from '../../src/election/index.js';
import { PostgresStore } from '../../src/stores/postgres/index.js';
import { MemoryStore } from '../../src/stores/memory/index.js';
import { FaultProxy } from '../chaos/proxy/index.js';
import { createPostgresDatabase } from '../stores/sql-servers.js';

const cleanups: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

function next<K extends keyof LeaseSetEvents & string>(set: LeaseSet, event: K, ms: number): Promise<LeaseSetEvents[K]> {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`no ${event} within ${ms} ms`)), ms);
    set.once(event, (payload) => {
      clearTimeout(timer);
      resolve(payload);
    });
  });
}

/**
 * The scenario on any store: two leases held, `breakStore` makes renewals fail, both are
 * suspended (deadline unchanged), `healStore` brings them back (recovered, same term, deadline
 * moved on); broken again for good, both end at their deadlines.
 */
async function scenario(set: LeaseSet, breakStore: () => Promise<void> | void, healStore: () => Promise<void> | void): Promise<void> {
  const a = (await set.acquire('part/a'))!;
  const b = (await set.acquire('part/b'))!;
  expect(a.suspended).toBe(false);
  expect(a.remainingMs()).toBeGreaterThan(0);
  const events: string[] = [];
  set.on('suspended', ({ name }) => events.push(`suspended:${name}`));
  set.on('recovered', ({ name }) => events.push(`recovered:${name}`));
  set.on('ended', ({ name, reason }) => events.push(`ended:${name}:${reason}`));
  set.start();

  await breakStore();
  const suspended = await next(set, 'suspended', 10_000);
  expect(suspended.term).toBe(suspended.name === 'part/a' ? a.term : b.term);
  expect(suspended.remainingMs).toBeGreaterThan(0);
  expect(suspended.error).toBeInstanceOf(Error);
  await expect.poll(() => a.suspended && b.suspended, { timeout: 5000 }).toBe(true);
  expect(set.lease('part/a')?.suspended).toBe(true);
  expect(a.signal.aborted).toBe(false);
  // Rule 2: a suspension never extends the deadline; remainingMs only counts down.
  const left = a.remainingMs();
  expect(left).toBeLessThanOrEqual(suspended.remainingMs + 50);

  await healStore();
  const recovered = await next(set, 'recovered', 10_000);
  expect([a.term, b.term]).toContain(recovered.term);
  expect(recovered.suspendedMs).toBeGreaterThan(0);
  await expect.poll(() => !a.suspended && !b.suspended, { timeout: 5000 }).toBe(true);
  expect(a.signal.aborted).toBe(false);
  expect(a.remainingMs()).toBeGreaterThan(left);
  expect(set.lease('part/a')?.term).toBe(a.term);

  await breakStore();
  await expect.poll(() => a.signal.aborted && b.signal.aborted, { timeout: 15_000 }).toBe(true);
  expect(a.remainingMs()).toBe(0);
  expect(a.suspended).toBe(false);
  expect(set.lease('part/a')).toBeNull();
  const per = (name: string): string[] => events.filter((e) => e.endsWith(name) || e.includes(`${name}:`));
  for (const name of ['part/a', 'part/b']) expect(per(name)).toEqual([`suspended:${name}`, `recovered:${name}`, `suspended:${name}`, `ended:${name}:deadline`]);
}

/** A view of `target` whose methods run on `target` itself, with some replaced. */
function overriding<T extends object>(target: T, overrides: Partial<Record<keyof T, unknown>>): T {
  return new Proxy(target, {
    get(t, p) {
      if (Object.prototype.hasOwnProperty.call(overrides, p)) return overrides[p as keyof T];
      const v: unknown = Reflect.get(t, p, t);
      return typeof v === 'function' ? (v as (...a: unknown[]) => unknown).bind(t) : v;
    },
  });
}

describe('LeaseSet: suspended, recovered, lost per lease', () => {
  it('on the memory store whose renewals fail for a while', async () => {
    const memory = new MemoryStore();
    let failing = false;
    const store = overriding<Store>(memory, {
      renewMany: (owner: string, leases: readonly RenewManyItem[], ttlMs: number): Promise<RenewResult[]> =>
        failing ? Promise.reject(new StoreUnavailableError('memory store: unreachable (test)')) : memory.renewMany(owner, leases, ttlMs),
    });
    const set = new LeaseSet({ store, id: 'node', ttlMs: 1500 });
    cleanups.push(() => set.stop());
    await scenario(
      set,
      () => void (failing = true),
      () => void (failing = false),
    );
  }, 30_000);

  it('on PostgreSQL behind the fault proxy (connections cut, then healed)', async () => {
    const db = await createPostgresDatabase();
    cleanups.push(() => db.drop());
    const u = new URL(db.url);
    const proxy = await FaultProxy.start({ target: { host: u.hostname, port: Number(u.port || 5432) }, name: 'postgres' });
    cleanups.push(() => proxy.close());
    u.port = String(proxy.endpoint.port);
    const store = new PostgresStore({ url: u.toString() });
    cleanups.push(() => store.close());
    await store.migrate();
    // ttl 6 s (deadline = send + 5.4 s), renew every 2 s, retry every 500 ms, a call with no
    // answer fails after 2 s: a suspension leaves > 3 s to recover on a loaded machine.
    const set = new LeaseSet({ store, id: 'node', ttlMs: 6000 });
    cleanups.push(() => set.stop());
    await scenario(
      set,
      () => proxy.cut(),
      () => proxy.heal(),
    );
    await proxy.heal();
  }, 60_000);
});
