/**
 * One scenario for every SQL server a test can take down: a node leads, the server goes away
 * (crash or immediate shutdown), comes back, and the node recovers by itself with a higher term,
 * while what it wrote before survives and its old term stays fenced off.
 */
import { expect } from 'vitest';
import { StaleTermError } from '../../src/core/index.js';
import type { Store } from '../../src/core/index.js';
import { LeaderElector } from '../../src/election/index.js';

export const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** Poll `cond` (which may query a server) every 10 ms; throws naming `what` after `timeoutMs`. */
export async function waitFor(cond: () => boolean | Promise<boolean>, timeoutMs: number, what: string): Promise<void> {
  const start = Date.now();
  while (!(await cond())) {
    if (Date.now() - start > timeoutMs) throw new Error(`${what}: not within ${timeoutMs} ms`);
    await sleep(10);
  }
}

export interface ServerOutage {
  /** Take the server away; resolves once it no longer answers (it may come back on its own later). */
  down(): Promise<void>;
  /** Resolves once the server answers again. */
  up(): Promise<void>;
}

/**
 * With a lease TTL of 1 s: leader work stops no later than one TTL after the server went away
 * (rule 2), the node is elected again by itself after the outage with a higher term (rule 4),
 * the entry written before the outage is still there, the old term is refused (rule 5).
 */
export async function leadThroughServerOutage(store: Store, outage: ServerOutage): Promise<void> {
  const elector = new LeaderElector({ store, group: 'g', id: 'node', ttlMs: 1000 });
  const elected: number[] = [];
  let abortedAt: number | null = null;
  void elector.runWhileLeader(({ signal, term }) => {
    elected.push(term);
    return new Promise<void>((resolve) =>
      signal.addEventListener('abort', () => {
        abortedAt ??= performance.now();
        resolve();
      }),
    );
  });
  try {
    await waitFor(() => elector.isLeader, 10_000, 'first election');
    const first = elector.term!;
    expect(await store.appendFenced({ lease: 'g', term: first }, 'log', 'before')).toBe(1);
    await sleep(400); // at least one renewal
    const downAt = performance.now();
    await outage.down();
    await waitFor(() => !elector.isLeader, 3000, 'leadership ends while the server is down');
    expect(abortedAt).not.toBeNull();
    expect(abortedAt! - downAt).toBeLessThanOrEqual(1000);
    await outage.up();
    await waitFor(() => elector.isLeader, 20_000, 're-election after the restart');
    const second = elector.term!;
    expect(second).toBeGreaterThan(first);
    expect(elected).toEqual([...elected].sort((a, b) => a - b));
    expect(await store.appendFenced({ lease: 'g', term: second }, 'log', 'after restart')).toBe(2);
    await expect(store.appendFenced({ lease: 'g', term: first }, 'log', 'stale')).rejects.toBeInstanceOf(StaleTermError);
    expect((await store.readStream('log')).map((e) => [e.term, e.payload])).toEqual([
      [first, 'before'],
      [second, 'after restart'],
    ]);
  } finally {
    await elector.stop();
  }
}
