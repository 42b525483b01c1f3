import { Registry } from 'prom-client';
import { describe, expect, it } from 'vitest';
import { LeaderElector, StaleTermError, collectMetrics, openStore } from '../../src/index.js';

describe('metrics through prom-client', () => {
  it('publishes is_leader, term, renew latency, leadership changes and fenced rejections', async () => {
    const store = await openStore('memory:');
    const registry = new Registry();
    const elector = new LeaderElector({ store, group: 'billing', id: 'a', ttlMs: 300 });
    const stop = collectMetrics({ elector, store }, { registry });
    const elected = new Promise((r) => elector.once('elected', r));
    elector.start();
    await elected;
    await new Promise((r) => elector.once('renewed', r));
    const metrics = await registry.metrics();
    expect(metrics).toMatch(/tenure_is_leader\{group="billing"\} 1/);
    expect(metrics).toMatch(/tenure_term\{group="billing"\} 1/);
    expect(metrics).toMatch(/tenure_renew_latency_seconds_count\{group="billing"\} [1-9]/);
    expect(metrics).toMatch(/tenure_leadership_changes_total\{group="billing"\} 1/);

    await elector.stop();
    await store.acquire('billing', 'b~1', 5000);
    await store.appendFenced({ lease: 'billing', term: 2 }, 's', 'x');
    await expect(store.appendFenced({ lease: 'billing', term: 1 }, 's', 'y')).rejects.toBeInstanceOf(StaleTermError);
    const after = await registry.metrics();
    expect(after).toMatch(/tenure_is_leader\{group="billing"\} 0/);
    expect(after).toMatch(/tenure_leadership_changes_total\{group="billing"\} 2/);
    expect(after).toMatch(/tenure_fenced_rejections_total\{lease="billing"\} 1/);
    stop();
    await store.close();
  });
});
