/**
 * LeaseSet on every store, through the TenureStore openStore returns: several leases of one owner
 * renewed in one renewMany call where the store has it (one renew each otherwise), a lease taken
 * away behind its back ends with its signal, stop releases them all; and on the memory store a
 * store that never answers ends every lease at its local deadline (rule 2).
 */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { RenewManyItem, RenewResult, Store } from '../../src/core/index.js';
import { LeaseSet } from '../../src/election/index.js';
import { TenureStore } from '../../src/open.js';
import { MemoryStore } from '../../src/stores/memory/index.js';
import { backends } from '../contract/backends.js';

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

/** Counts the renew and renewMany calls that reach `backend`. */
function counting(backend: Store): { store: TenureStore; calls: { renew: number; renewMany: number } } {
  const calls = { renew: 0, renewMany: 0 };
  const counted = overriding<Store>(backend, {
    renew: (...a: Parameters<Store['renew']>) => {
      calls.renew++;
      return backend.renew(...a);
    },
    ...(backend.renewMany
      ? {
          renewMany: (owner: string, leases: readonly RenewManyItem[], ttlMs: number): Promise<RenewResult[]> => {
            calls.renewMany++;
            return backend.renewMany!(owner, leases, ttlMs);
          },
        }
      : {}),
  });
  return { store: new TenureStore(counted), calls };
}

for (const backend of backends) {
  describe(`LeaseSet on ${backend.name}`, () => {
    let raw: Store;
    let cleanup: () => Promise<void>;
    const ttlMs = Math.max(3000, backend.minTtlMs ?? 0);

    beforeEach(async () => {
      ({ store: raw, cleanup } = await backend.open());
    });
    afterEach(async () => {
      await cleanup();
    });

    it(`renews its leases together: ${backend.capabilities.renewMany === true ? 'one renewMany call' : 'one renew per lease (no renewMany)'}`, async () => {
      const { store, calls } = counting(raw);
      expect(typeof store.renewMany === 'function').toBe(backend.capabilities.renewMany === true);
      const set = new LeaseSet({ store, id: 'node', ttlMs });
      expect(set.batched).toBe(backend.capabilities.renewMany === true);
      try {
        await raw.acquire('p/3', 'other~1', 30_000);
        const got = await Promise.all(['p/1', 'p/2', 'p/3', 'p/4'].map((n) => set.acquire(n)));
        expect(got.map((g) => g?.term ?? null)).toEqual([1, 1, null, 1]);
        expect(set.held.map((h) => h.name).sort()).toEqual(['p/1', 'p/2', 'p/4']);
        const result = await set.renewAll();
        expect({ ...result, renewed: [...result.renewed].sort() }).toEqual({ renewed: ['p/1', 'p/2', 'p/4'], lost: [], failed: [] });
        if (backend.capabilities.renewMany === true) expect(calls).toEqual({ renew: 0, renewMany: 1 });
        else expect(calls).toEqual({ renew: 3, renewMany: 0 });
        for (const n of ['p/1', 'p/2', 'p/4']) expect(await raw.read(n)).toMatchObject({ owner: set.owner, term: 1 });
      } finally {
        await set.stop();
      }
    });

    it('ends a lease whose renewal is refused, with its signal; keeps the others', async () => {
      const set = new LeaseSet({ store: new TenureStore(raw), id: 'node', ttlMs });
      try {
        const a = (await set.acquire('q/a'))!;
        const b = (await set.acquire('q/b'))!;
        const ended: string[] = [];
        set.on('ended', ({ name, reason }) => ended.push(`${name}:${reason}`));
        // Someone releases q/b behind the set's back (as a misbehaving operator could) and takes it.
        expect(await raw.release('q/b', set.owner, b.term)).toBe(true);
        expect((await raw.acquire('q/b', 'other~1', 30_000)).acquired).toBe(true);
        const result = await set.renewAll();
        expect(result).toEqual({ renewed: ['q/a'], lost: ['q/b'], failed: [] });
        expect(b.signal.aborted).toBe(true);
        expect(a.signal.aborted).toBe(false);
        expect(ended).toEqual(['q/b:lost']);
        expect(set.held.map((h) => h.name)).toEqual(['q/a']);
      } finally {
        await set.stop();
      }
    });

    it('stop releases every lease and aborts every signal', async () => {
      const set = new LeaseSet({ store: new TenureStore(raw), id: 'node', ttlMs });
      const held = [(await set.acquire('r/1'))!, (await set.acquire('r/2'))!];
      set.start();
      await set.stop();
      expect(held.every((h) => h.signal.aborted)).toBe(true);
      expect(await raw.read('r/1')).toBeNull();
      expect(await raw.read('r/2')).toBeNull();
    });
  });
}

describe('LeaseSet timing (memory store)', () => {
  it('keeps renewing on its own while started', async () => {
    const store = new MemoryStore();
    const set = new LeaseSet({ store, id: 'node', ttlMs: 600 });
    const rounds: number[] = [];
    set.on('renewed', ({ count, batched }) => rounds.push(batched ? count : -1));
    const held = (await set.acquire('s/1'))!;
    set.start();
    await new Promise((r) => setTimeout(r, 1500)); // 2.5 TTLs: alive only if renewed
    expect(held.signal.aborted).toBe(false);
    expect(rounds.length).toBeGreaterThanOrEqual(2);
    expect(rounds.every((c) => c === 1)).toBe(true);
    await set.stop();
  });

  it('ends every lease at its local deadline when the store stops answering (rule 2), then a late reply changes nothing', async () => {
    const memory = new MemoryStore();
    let hang = false;
    const pending: Array<() => void> = [];
    const store = overriding<Store>(memory, {
      renewMany: (owner: string, leases: readonly RenewManyItem[], ttlMs: number): Promise<RenewResult[]> =>
        hang ? new Promise((resolve) => pending.push(() => void memory.renewMany(owner, leases, ttlMs).then(resolve))) : memory.renewMany(owner, leases, ttlMs),
    });
    const set = new LeaseSet({ store, id: 'node', ttlMs: 400, requestTimeoutMs: 5000 });
    const a = (await set.acquire('t/a'))!;
    const b = (await set.acquire('t/b'))!;
    const acquiredAt = performance.now();
    hang = true;
    const round = set.renewAll();
    const aborted = (signal: AbortSignal): Promise<number> =>
      new Promise((resolve) => signal.addEventListener('abort', () => resolve(performance.now() - acquiredAt), { once: true }));
    const endedAfter = await Promise.all([aborted(a.signal), aborted(b.signal)]);
    // At ttl - margin = 360 ms from each acquire's send time (both sent before acquiredAt), not later.
    for (const ms of endedAfter) expect(ms).toBeLessThan(400); // before the store could let anyone in
    expect(set.held).toEqual([]);
    for (const release of pending) release();
    expect(await round).toEqual({ renewed: [], lost: [], failed: [] });
    expect(set.held).toEqual([]);
    await set.stop();
  });
});
