/**
 * An elector dropped without stop() — its store and clock gone with it, as a crashed node's in
 * the simulator — is garbage: the process-wide fenced-rejection feed it listens to holds it
 * weakly. (Before, every such elector stayed reachable from the feed with its whole world: the
 * shell simulator grew ~0.3 MB a seed and ran out of heap past ~15,000 seeds.) A stopped elector
 * leaves the feed at once, and one still referenced keeps hearing it.
 */
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { describe, expect, it } from 'vitest';
import { StaleTermError, VirtualClock, reportStale } from '../../src/core/index.js';
import { LeaderElector } from '../../src/election/index.js';
import { MemoryStore } from '../../src/stores/memory/index.js';

setFlagsFromString('--expose-gc');
const gc = runInNewContext('gc') as () => void;
const flush = (): Promise<void> => new Promise<void>((r) => setImmediate(r));
const advance = (clock: VirtualClock, ms: number): Promise<void> => clock.runUntil(clock.now() + ms, flush);

/** Start a leader in a world of its own and return only a weak reference to it. */
async function droppedLeader(): Promise<WeakRef<LeaderElector>> {
  const clock = new VirtualClock();
  const store = new MemoryStore({ clock });
  const elector = new LeaderElector({ store, group: 'g', id: 'n1', clock, ttlMs: 1000 });
  elector.start();
  for (let i = 0; i < 50 && !elector.isLeader; i++) await advance(clock, 10);
  expect(elector.isLeader).toBe(true);
  return new WeakRef(elector);
}

async function collect(): Promise<void> {
  for (let i = 0; i < 5; i++) {
    gc();
    await new Promise((r) => setTimeout(r, 5));
  }
}

describe('an elector dropped without stop()', () => {
  it('is collected: the fenced-rejection feed does not keep it (or its store and clock) alive', async () => {
    const refs = [];
    for (let i = 0; i < 10; i++) refs.push(await droppedLeader());
    await collect();
    expect(refs.filter((r) => r.deref() !== undefined)).toHaveLength(0);
    // The feed still works for the electors that are referenced: a refusal of a live leader's
    // own token deposes it at once.
    const clock = new VirtualClock();
    const store = new MemoryStore({ clock });
    const kept = new LeaderElector({ store, group: 'g', id: 'n1', clock, ttlMs: 1000 });
    kept.start();
    for (let i = 0; i < 50 && !kept.isLeader; i++) await advance(clock, 10);
    await collect();
    const deposed = new Promise<string>((resolve) => kept.once('deposed', ({ reason }) => resolve(reason)));
    const term = kept.term!;
    expect(term).toBeGreaterThanOrEqual(1);
    reportStale(new StaleTermError('g', term, term + 1));
    expect(await deposed).toBe('fenced');
    await kept.stop();
  });
});
