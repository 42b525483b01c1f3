/**
 * GroupSet on memory, SQLite and PostgreSQL: one node leading many groups, campaigning for the
 * ones another node holds, renewing all of them in one renewMany per round, each group with its
 * own term, token and signal; a voluntary hand-over releases only after the group's work and
 * onLost finished; duplicate names are refused; disposal releases everything.
 */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { InvalidArgumentError } from '../../src/core/index.js';
import type { RenewManyItem, RenewResult, Store } from '../../src/core/index.js';
import { GroupSet } from '../../src/election/index.js';
import type { GroupContext } from '../../src/election/index.js';
import { MemoryStore } from '../../src/stores/memory/index.js';
import { backends } from '../contract/backends.js';

const chosen = backends.filter((b) => ['memory', 'sqlite', 'postgres'].includes(b.name));

function until(what: string, check: () => boolean, timeoutMs = 10_000): Promise<void> {
  const start = performance.now();
  return new Promise((resolve, reject) => {
    const tick = (): void => {
      if (check()) resolve();
      else if (performance.now() - start > timeoutMs) reject(new Error(`timed out after ${timeoutMs} ms waiting for ${what}`));
      else setTimeout(tick, 10);
    };
    tick();
  });
}

/** `backend` with its renew and renewMany calls counted. */
function counting(backend: Store): { store: Store; calls: { renew: number; renewMany: number; items: number } } {
  const calls = { renew: 0, renewMany: 0, items: 0 };
  const store = new Proxy(backend, {
    get(t, p) {
      if (p === 'renew') return (...a: Parameters<Store['renew']>) => (calls.renew++, t.renew(...a));
      if (p === 'renewMany' && t.renewMany) {
        return (owner: string, leases: readonly RenewManyItem[], ttlMs: number): Promise<RenewResult[]> => {
          calls.renewMany++;
          calls.items += leases.length;
          return t.renewMany!(owner, leases, ttlMs);
        };
      }
      const v: unknown = Reflect.get(t, p, t);
      return typeof v === 'function' ? (v as (...a: unknown[]) => unknown).bind(t) : v;
    },
  });
  return { store, calls };
}

for (const backend of chosen) {
  describe(`GroupSet on ${backend.name}`, () => {
    let raw: Store;
    let cleanup: () => Promise<void>;
    const ttlMs = 1000;

    beforeEach(async () => {
      ({ store: raw, cleanup } = await backend.open());
    });
    afterEach(async () => {
      await cleanup();
    });

    it('leads 200 groups with one renewMany per renew round, each with its own term, token and signal', async () => {
      const { store, calls } = counting(raw);
      const names = Array.from({ length: 200 }, (_, i) => `g/${i}`);
      // g/0 was held by someone else before, so its term here will be 2.
      const prev = await raw.acquire('g/0', 'old~1', 30_000);
      expect(await raw.release('g/0', 'old~1', prev.lease.term)).toBe(true);
      const gained = new Map<string, GroupContext>();
      // A longer TTL than the other scenarios: 200 leases in one statement on a loaded machine.
      const set = new GroupSet({ store, id: 'node', ttlMs: 3000, groups: names, onGained: (g, ctx) => void (gained.has(g) || gained.set(g, ctx)) });
      try {
        set.start();
        await until('every group gained', () => gained.size === 200);
        expect(set.held).toHaveLength(200);
        expect(gained.get('g/0')!.token).toEqual({ lease: 'g/0', term: 2 });
        expect(gained.get('g/1')!.token).toEqual({ lease: 'g/1', term: 1 });
        expect(new Set([...gained.values()].map((c) => c.signal)).size).toBe(200);
        const before = { ...calls };
        const rounds: number[] = [];
        set.leases.on('renewed', ({ count }) => rounds.push(count));
        await until('two renew rounds', () => rounds.length >= 2);
        expect(rounds.slice(0, 2)).toEqual([200, 200]);
        expect(calls.renew - before.renew).toBe(0);
        // Every renewMany since carried all 200 leases; one per round (a round may be in flight at either end).
        const sent = calls.renewMany - before.renewMany;
        expect(sent).toBeGreaterThanOrEqual(1);
        expect(calls.items - before.items).toBe(200 * sent);
        expect(Math.abs(sent - rounds.length)).toBeLessThanOrEqual(1);
        expect([...gained.values()].some((c) => c.signal.aborted)).toBe(false);
      } finally {
        await set.stop();
      }
      expect([...gained.values()].every((c) => c.signal.aborted)).toBe(true);
      expect(await raw.list('g/')).toEqual([]);
    });

    it('campaigns for a group another node holds and gains it when that node releases, with the next term', async () => {
      const other = await raw.acquire('c/a', 'other~1', 30_000);
      const set = new GroupSet({ store: raw, id: 'node', ttlMs, groups: ['c/a', 'c/b'] });
      try {
        set.start();
        await until('c/b gained', () => set.held.includes('c/b'));
        expect(set.held).toEqual(['c/b']);
        expect(await raw.release('c/a', 'other~1', other.lease.term)).toBe(true);
        // Woken by the store's push (memory, SQLite, PostgreSQL all have watch), well before the 30 s TTL.
        await until('c/a gained', () => set.held.includes('c/a'), 5000);
        expect(set.context('c/a')!.term).toBe(other.lease.term + 1);
      } finally {
        await set.stop();
      }
    });

    it('a group taken away behind its back ends alone (its signal, onLost "lost"); the others stay led', async () => {
      const lost: string[] = [];
      const set = new GroupSet({ store: raw, id: 'node', ttlMs, groups: ['l/a', 'l/b', 'l/c'], onLost: (g, reason) => void lost.push(`${g}:${reason}`) });
      try {
        set.start();
        await until('all gained', () => set.held.length === 3);
        const b = set.context('l/b')!;
        const a = set.context('l/a')!;
        expect(await raw.release('l/b', set.owner, b.term)).toBe(true);
        expect((await raw.acquire('l/b', 'thief~1', 30_000)).acquired).toBe(true);
        await set.leases.renewAll();
        await until('l/b lost', () => lost.length === 1);
        expect(lost).toEqual(['l/b:lost']);
        expect(b.signal.aborted).toBe(true);
        expect(a.signal.aborted).toBe(false);
        expect(set.held).toEqual(['l/a', 'l/c']);
      } finally {
        await set.stop();
      }
    });

    it('handOver releases the lease only after the work and onLost finished', async () => {
      const steps: string[] = [];
      let finishWork: () => void = () => {};
      const set = new GroupSet({
        store: raw,
        id: 'node',
        ttlMs,
        groups: ['h/a'],
        campaign: true,
        onGained: async (_g, ctx) => {
          await new Promise<void>((resolve) => {
            finishWork = resolve;
            ctx.signal.addEventListener('abort', () => steps.push('signal'), { once: true });
          });
          steps.push(`work done, lease owner ${(await raw.read('h/a'))?.owner === set.owner ? 'still us' : 'changed'}`);
        },
        onLost: async (_g, reason) => {
          steps.push(`onLost ${reason}, lease owner ${(await raw.read('h/a'))?.owner === set.owner ? 'still us' : 'changed'}`);
        },
      });
      try {
        set.start();
        await until('gained', () => set.held.length === 1);
        const handing = set.handOver('h/a');
        await until('signal', () => steps.includes('signal'));
        await new Promise((r) => setTimeout(r, 100));
        expect(await raw.read('h/a')).toMatchObject({ owner: set.owner }); // the work has not finished: not released
        finishWork();
        expect(await handing).toBe(true);
        expect(steps).toEqual(['signal', 'work done, lease owner still us', 'onLost handed-over, lease owner still us']);
        expect(await raw.read('h/a')).toBeNull();
      } finally {
        await set.stop();
      }
    });
  });
}

describe('GroupSet input and limits', () => {
  it('refuses thousands of groups with a duplicate name, naming it and where', () => {
    const names = Array.from({ length: 5000 }, (_, i) => `dup/${i}`);
    names[4321] = 'dup/17';
    names[4999] = 'dup/18';
    let error: unknown;
    try {
      new GroupSet({ store: new MemoryStore(), groups: names });
    } catch (err) {
      error = err;
    }
    expect(error).toBeInstanceOf(InvalidArgumentError);
    expect((error as Error).message).toMatch(/'dup\/17' is at index 17 and again at 4321 \(2 repeated names in 5000\)/);
  });

  it('refuses a bad group name, a duplicate add, and limits', () => {
    const set = new GroupSet({ store: new MemoryStore(), groups: ['a'], maxGroups: 2 });
    expect(() => set.add('a')).toThrow(/'a' is already in the set/);
    set.add('b');
    expect(() => set.add('c')).toThrow(/at most 2 groups/);
    expect(() => new GroupSet({ store: new MemoryStore(), groups: ['ok', ''] })).toThrow(InvalidArgumentError);
    expect(() => new GroupSet({ store: new MemoryStore(), groups: 'a' as unknown as string[] })).toThrow(/expected an array/);
    expect(() => new GroupSet({ store: new MemoryStore(), maxInFlight: 0 })).toThrow(/maxInFlight/);
  });

  it('async disposal drains and releases every group', async () => {
    const store = new MemoryStore();
    const signals: AbortSignal[] = [];
    {
      await using set = new GroupSet({ store, id: 'n', ttlMs: 500, groups: ['d/1', 'd/2'], onGained: (_g, ctx) => void signals.push(ctx.signal) });
      set.start();
      await until('gained', () => set.held.length === 2);
    }
    expect(signals.every((s) => s.aborted)).toBe(true);
    expect(await store.list('d/')).toEqual([]);
  });

  it('each group ends at its own deadline when the store stops answering (rule 2)', async () => {
    const memory = new MemoryStore();
    let hang = false;
    const store = new Proxy(memory, {
      get(t, p) {
        const v: unknown = Reflect.get(t, p, t);
        if (typeof v !== 'function') return v;
        return (...a: unknown[]) => (hang && p !== 'watch' ? new Promise(() => {}) : (v as (...x: unknown[]) => unknown).apply(t, a));
      },
    });
    const lostAt = new Map<string, number>();
    const set = new GroupSet({ store, id: 'n', ttlMs: 400, requestTimeoutMs: 1000, groups: ['t/a', 't/b'], onLost: (g) => void lostAt.set(g, performance.now()) });
    set.start();
    await until('gained', () => set.held.length === 2);
    const since = performance.now();
    hang = true;
    await until('both lost', () => lostAt.size === 2, 2000);
    // A lease whose last successful renew was sent before `since` ends at most ttl - margin (360 ms) later.
    for (const at of lostAt.values()) expect(at - since).toBeLessThan(400);
    hang = false;
    await set.stop();
  });
});
