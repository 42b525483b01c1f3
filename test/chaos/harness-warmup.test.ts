/**
 * The chaos harness (`tenure chaos`) injects at least one fault: a run whose warm-up took the
 * whole fault window (on a loaded machine, node starts and first elections can) used to end with
 * no fault at all and still report `pass`, a run that tested nothing. The harness runs compiled,
 * as users run it (its nodes are dist/src/chaos/node.js).
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { afterAll, beforeAll, expect, it } from 'vitest';
import type { ChaosReport, ChaosRunOptions } from '../../src/chaos/harness.js';
import type { TenureStore } from '../../src/index.js';
import { ensureBuilt, repoRoot } from './dist.js';

const dir = mkdtempSync(join(tmpdir(), 'tenure-chaos-warmup-'));
beforeAll(() => ensureBuilt(), 180_000);
afterAll(() => rmSync(dir, { recursive: true, force: true }));

it('injects one fault even when the warm-up took the whole fault window, says so, and the run still passes and cleans up', async () => {
  const built = (path: string): string => pathToFileURL(join(repoRoot, 'dist', 'src', path)).href;
  const { runChaosHarness } = (await import(built('chaos/harness.js'))) as { runChaosHarness(o: ChaosRunOptions): Promise<ChaosReport> };
  const { openStore } = (await import(built('open.js'))) as { openStore(url: string): Promise<TenureStore> };
  const url = `sqlite:${join(dir, 'tenure.db')}`;
  const store = await openStore(url);
  const lines: string[] = [];
  try {
    // A duration shorter than the quiet tail (TTL + 2 s): the fault window is over before the
    // nodes are up, as a slow warm-up leaves it (the CLI's shortest duration leaves 2 s).
    const report = await runChaosHarness({ store, url, nodes: 2, groups: 1, durationMs: 3000, ttlMs: 1000, faults: ['resign'], prefix: 'tenure-chaos-', seed: 7, log: (l) => lines.push(l) });
    expect(report.faults, lines.join('\n')).toHaveLength(1);
    expect(report.faults[0]).toMatchObject({ kind: 'resign' });
    expect(lines.join('\n')).toMatch(/warm-up took the fault window \(0\.0 s\): one fault anyway/);
    expect(report.verdict, lines.join('\n')).toBe('pass');
    expect(report.violations).toEqual([]);
    expect(report.accepted).toBeGreaterThan(0);
    expect(report.cleanup).toMatchObject({ left: 0, error: null });
  } finally {
    await store.close();
  }
}, 120_000);
