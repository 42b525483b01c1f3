import { describe, expect, it } from 'vitest';
import { LockTimeoutError, VirtualClock } from '../../src/core/index.js';
import { Lock } from '../../src/locks/index.js';
import { MemoryStore } from '../../src/stores/memory/index.js';

const flush = () => new Promise<void>((r) => setImmediate(r));

function world() {
  const clock = new VirtualClock();
  const store = new MemoryStore({ clock });
  const advance = (ms: number) => clock.runUntil(clock.now() + ms, flush);
  return { clock, store, advance };
}

describe('Lock', () => {
  it('excludes a second holder until the first releases, then hands over with a higher term', async () => {
    const w = world();
    const lock = new Lock(w.store, 'nightly', { ttlMs: 1000, clock: w.clock });
    const first = lock.acquire();
    await w.advance(1);
    const h1 = await first;
    expect(h1.term).toBe(1);
    let h2Got = false;
    const second = lock.acquire().then((h) => ((h2Got = true), h));
    await w.advance(3000);
    expect(h2Got).toBe(false);
    expect(h1.signal.aborted).toBe(false);
    await h1.release();
    expect(h1.signal.aborted).toBe(true);
    await w.advance(5);
    const h2 = await second;
    expect(h2.token).toEqual({ lease: 'nightly', term: 2 });
    await h2[Symbol.asyncDispose]();
  });

  it('gives up with LockTimeoutError after waitMs, leaving the holder alone', async () => {
    const w = world();
    const lock = new Lock(w.store, 'nightly', { ttlMs: 1000, clock: w.clock });
    const p1 = lock.acquire();
    await w.advance(1);
    const h1 = await p1;
    const waiting = lock.acquire({ waitMs: 500 }).catch((e: unknown) => e);
    await w.advance(600);
    const err = await waiting;
    expect(err).toBeInstanceOf(LockTimeoutError);
    expect((err as Error).message).toBe('lock nightly not acquired within 500 ms');
    expect(await w.store.read('nightly')).toMatchObject({ owner: expect.stringMatching(/~/), term: 1 });
    await h1.release();
  });

  it('gives up when the caller aborts, with the caller\'s reason', async () => {
    const w = world();
    const lock = new Lock(w.store, 'nightly', { ttlMs: 1000, clock: w.clock });
    const p1 = lock.acquire();
    await w.advance(1);
    const h1 = await p1;
    const ac = new AbortController();
    const waiting = lock.acquire({ signal: ac.signal }).catch((e: unknown) => e);
    await w.advance(100);
    ac.abort(new Error('shutting down'));
    await w.advance(1);
    expect(((await waiting) as Error).message).toBe('shutting down');
    await h1.release();
  });

  it('aborts the handle signal when the lock is lost and does not take it back', async () => {
    const w = world();
    const lock = new Lock(w.store, 'nightly', { ttlMs: 1000, clock: w.clock });
    const p = lock.acquire();
    await w.advance(1);
    const h = await p;
    await w.store.release('nightly', (await w.store.read('nightly'))!.owner, 1);
    await w.store.acquire('nightly', 'other~1', 10_000);
    await w.advance(500);
    expect(h.signal.aborted).toBe(true);
    await w.advance(5000);
    expect(await w.store.read('nightly')).toMatchObject({ owner: 'other~1', term: 2 });
    await w.advance(10_000);
    expect(await w.store.read('nightly')).toBeNull();
  });

  it('release() waits for a store that answers late (past requestTimeoutMs), so the name is free when it resolves', async () => {
    const clock = new VirtualClock();
    let releaseDelayMs = 600; // requestTimeoutMs is ttl / 3 = 333 ms here
    class SlowRelease extends MemoryStore {
      override async release(name: string, owner: string, term: number): Promise<boolean> {
        await new Promise<void>((r) => clock.setTimer(releaseDelayMs, r));
        return super.release(name, owner, term);
      }
    }
    const store = new SlowRelease({ clock });
    const advance = (ms: number) => clock.runUntil(clock.now() + ms, flush);
    const lock = new Lock(store, 'nightly', { ttlMs: 1000, clock });
    const p = lock.acquire();
    await advance(1);
    const h = await p;
    let released = false;
    const r = h.release().then(() => (released = true));
    await advance(400);
    expect(released).toBe(false);
    await advance(250);
    await r;
    expect(await store.read('nightly')).toBeNull();

    // A store that never answers holds release() no longer than the lease's own deadline.
    releaseDelayMs = 1e9;
    const p2 = lock.acquire();
    await advance(1);
    const h2 = await p2;
    const left = h2.remainingMs();
    expect(left).toBeGreaterThan(500);
    let released2 = false;
    void h2.release().then(() => (released2 = true));
    await advance(left - 5);
    expect(released2).toBe(false);
    await advance(10);
    expect(released2).toBe(true);
  });

  it('using() releases whatever the routine does', async () => {
    const w = world();
    const lock = new Lock(w.store, 'nightly', { ttlMs: 1000, clock: w.clock });
    const run = lock.using(async (h) => {
      expect(h.token.term).toBe(1);
      throw new Error('routine failed');
    }).catch((e: unknown) => e);
    await w.advance(1);
    expect(((await run) as Error).message).toBe('routine failed');
    expect(await w.store.read('nightly')).toBeNull();
  });
});
