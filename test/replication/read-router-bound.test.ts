/**
 * The ReadRouter's staleness bound, exactly, on a memory store and a virtual clock: it comes from
 * the stream heads the router read itself (sent when, found what), never from the duration a
 * follower claims in its advert, which a write slowed in transit makes look smaller than it is.
 */
import { describe, expect, it } from 'vitest';
import { ReadRouter, VirtualClock } from '../../src/index.js';
import type { FencingToken, LeaseMeta, Store } from '../../src/index.js';
import { MemoryStore } from '../../src/stores/memory/index.js';

const GROUP = 'orders';
const STREAM = 'orders-log';

function world() {
  const clock = new VirtualClock(0);
  const store = new MemoryStore({ clock, wallClock: () => clock.now() });
  const commits = new Map<number, number>(); // seq -> instant appended
  let token: FencingToken | null = null;
  return {
    clock,
    store,
    commits,
    async at(ms: number): Promise<void> {
      await clock.runUntil(ms, async () => {});
    },
    async append(n = 1): Promise<number> {
      if (!token) {
        const r = await store.acquire(GROUP, 'leader~1', 3_600_000);
        token = { lease: GROUP, term: r.lease.term };
      }
      let seq = 0;
      for (let i = 0; i < n; i++) {
        seq = await store.appendFenced(token, STREAM, `e${i}`);
        commits.set(seq, clock.now());
      }
      return seq;
    },
    /** A follower's advert as written now: it claims lag 0, as one delayed in transit may. */
    async advert(nodeId: string, appliedSeq: number, meta: Partial<Record<string, unknown>> = {}): Promise<void> {
      const m = { appliedSeq, lagEntries: 0, lagAtLeast: false, lagMs: 0, stream: STREAM, endpoint: `http://${nodeId}`, ...meta };
      const r = await store.acquire(`${GROUP}/followers/${nodeId}`, `${nodeId}~1`, 3_600_000, m as LeaseMeta);
      expect(r.acquired).toBe(true);
    },
  };
}

describe('ReadRouter staleness bound', () => {
  it("is the time since the router's latest head read the follower had applied, whatever lag the follower claims", async () => {
    const w = world();
    const router = new ReadRouter({ store: w.store, group: GROUP, clock: w.clock });
    await w.append(3);
    await w.advert('f1', 3);
    expect(await router.route({ maxLagMs: 1000 })).toMatchObject({ role: 'follower', nodeId: 'f1', lagMs: 0, advertisedLagMs: 0 });

    await w.at(100);
    await w.append(); // entry 4, appended at 100: f1 lacks it from then on
    await w.at(500);
    await w.advert('f1', 3); // its advert lands now and claims lag 0 (sent long ago, say)
    await w.at(600);
    // The claim says 0 + 100 ms of advert age. The truth is 500 ms (entry 4 since 100). The bound
    // is 600: the last head read that f1 had applied was sent at 0.
    const t = await router.route({ maxLagMs: 1000 });
    expect(t).toMatchObject({ role: 'follower', nodeId: 'f1', lagMs: 600, advertisedLagMs: 0, appliedSeq: 3 });
    expect(t.role === 'follower' && t.lagMs).toBeGreaterThanOrEqual(600 - w.commits.get(4)!);
    expect(await router.route({ maxLagMs: 550 })).toMatchObject({ role: 'leader' });

    // It applies entry 4 and says so: fresh again from the head read at 600.
    await w.at(700);
    await w.advert('f1', 4);
    await w.at(750);
    expect(await router.route({ maxLagMs: 1000 })).toMatchObject({ role: 'follower', lagMs: 50 }); // its own claim (0 + 50 ms of advert age) is the larger now
  });

  it('a claim larger than the bound stands: a follower is never routed as fresher than it says', async () => {
    const w = world();
    const router = new ReadRouter({ store: w.store, group: GROUP, clock: w.clock });
    await w.append(2);
    await w.advert('f1', 2, { lagMs: 900 });
    await w.at(50);
    expect(await router.route({ maxLagMs: 5000 })).toMatchObject({ role: 'follower', lagMs: 950 });
    expect(await router.route({ maxLagMs: 900 })).toMatchObject({ role: 'leader' });
  });

  it('stays sound and finite for followers far behind, after many more head reads than it keeps', async () => {
    const w = world();
    const router = new ReadRouter({ store: w.store, group: GROUP, clock: w.clock });
    await w.append();
    await w.advert('probe', 0); // names the stream, so every listing reads its head
    await router.route({ maxLagMs: 60_000 }); // the first head read, at 0: head 1
    const lagging = [1, 2, 37, 120, 250, 399, 598, 700];
    for (let round = 1; round <= 800; round++) {
      await w.at(round * 10);
      await w.append();
      await router.route({ maxLagMs: 60_000 });
    }
    for (const applied of lagging) await w.advert(`f${applied}`, applied);
    await w.at(8005);
    const now = w.clock.now();
    const bounds = new Map<number, number>();
    for (let i = 0; i < 200; i++) {
      const t = await router.route({ maxLagMs: 60_000 });
      if (t.role === 'follower' && t.nodeId !== 'probe') bounds.set(t.appliedSeq, t.lagMs);
    }
    expect([...bounds.keys()].sort((a, b) => a - b)).toEqual(lagging);
    for (const applied of lagging) {
      const truth = now - w.commits.get(applied + 1)!; // it lacks entry applied+1 since its append
      const bound = bounds.get(applied)!;
      expect(bound).toBeGreaterThanOrEqual(truth);
      // Thinned samples loosen an old bound, within reason: never more than twice the truth plus a round.
      expect(bound).toBeLessThanOrEqual(2 * truth + 10);
    }
    // Recent ones stay exact to the round: the one at applied 799 (entry 800 at 8000 ms).
    await w.advert('recent', 799);
    const recent = await router.route({ maxLagMs: 30 });
    expect(recent).toMatchObject({ role: 'follower', nodeId: 'recent' });
  });

  it('routes no follower on claims alone: without a head read that proves a bound, the leader serves', async () => {
    const w = world();
    await w.append(3);
    await w.advert('f1', 3);
    // A store that cannot read a stream's head (a user's own Store without readLast or streamHead).
    const noHead = new Proxy(w.store, {
      get(target, prop) {
        if (prop === 'readLast' || prop === 'streamHead') return undefined;
        const v: unknown = Reflect.get(target, prop, target);
        return typeof v === 'function' ? (v as (...a: unknown[]) => unknown).bind(target) : v;
      },
    }) as Store;
    const router = new ReadRouter({ store: noHead, group: GROUP, clock: w.clock });
    expect(await router.route({ maxLagMs: 60_000 })).toMatchObject({ role: 'leader' });
    // By entries only it may still go to the follower, and says it has no bound.
    expect(await router.route({ maxLagEntries: 0 })).toMatchObject({ role: 'follower', lagMs: Infinity });
  });

  it('adverts of another stream, or naming garbage as their stream, are not routed to', async () => {
    const w = world();
    await w.append(3);
    await w.advert('other', 3, { stream: 'another-log' });
    await w.advert('junk', 3, { stream: 42 });
    await w.advert('bad', 3, { stream: 'x'.repeat(5000) });
    await w.advert('good', 3);
    const pinned = new ReadRouter({ store: w.store, group: GROUP, clock: w.clock, stream: STREAM });
    const loose = new ReadRouter({ store: w.store, group: GROUP, clock: w.clock });
    for (const router of [pinned, loose]) {
      const seen = new Set<string>();
      for (let i = 0; i < 40; i++) {
        const t = await router.route({ maxLagMs: 60_000 });
        seen.add(t.role === 'follower' ? t.nodeId : 'leader');
      }
      expect([...seen].sort()).toEqual(router === pinned ? ['good'] : ['good', 'other']);
    }
    expect(() => new ReadRouter({ store: w.store, group: GROUP, stream: '' })).toThrow(/stream/);
  });
});
