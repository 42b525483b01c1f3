/**
 * `tenure lock --semaphore N`, `--read` / `--write`, `--lock-delay D` and `tenure run --semaphore
 * N` with real processes on a SQLite store; bad input is one line, exit 2, nothing run and
 * nothing written.
 */
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { cleanUp, lines, sandbox, start, tenure, waitUntil } from './helpers.js';
import type { Running } from './helpers.js';

afterAll(cleanUp);

async function stop(r: Running): Promise<void> {
  r.signal('SIGINT');
  expect((await r.exited).code).toBe(130);
}

describe('tenure lock: the lock family', () => {
  it('--semaphore 2: two holders at once, each on its own permit and token; a third waits (exit 4 after --wait)', async () => {
    const box = sandbox();
    const a = start(box, ['lock', 'exports', '--semaphore', '2', '--json', '--', 'sleep', '60']);
    const b = start(box, ['lock', 'exports', '--semaphore', '2', '--json', '--', 'sleep', '60']);
    const [ea, eb] = await Promise.all([waitUntil('a to acquire', () => a.events('acquired')[0]), waitUntil('b to acquire', () => b.events('acquired')[0])]);
    expect(new Set([ea.lease, eb.lease])).toEqual(new Set(['exports/permit/0', 'exports/permit/1']));
    expect(String(ea.token)).toContain(String(ea.lease));
    const c = await tenure(box, ['lock', 'exports', '--semaphore', '2', '--wait', '500ms', '--', 'touch', join(box.dir, 'ran')]);
    expect(c.code, c.stderr).toBe(4);
    expect(existsSync(join(box.dir, 'ran'))).toBe(false);
    await stop(a);
    const d = await tenure(box, ['lock', 'exports', '--semaphore', '2', '--wait', '10s', '--', 'sh', '-c', 'echo "$TENURE_GROUP" > granted']);
    expect(d.code, d.stderr).toBe(0);
    await stop(b);
  });

  it('--read and --write: readers share, a writer waits for them', async () => {
    const box = sandbox();
    const r1 = start(box, ['lock', 'catalog', '--read', '--json', '--', 'sleep', '60']);
    const r2 = start(box, ['lock', 'catalog', '--read', '--json', '--', 'sleep', '60']);
    await Promise.all([waitUntil('r1 to read', () => r1.events('acquired')[0]), waitUntil('r2 to read', () => r2.events('acquired')[0])]);
    const w = await tenure(box, ['lock', 'catalog', '--write', '--wait', '500ms', '--', 'touch', join(box.dir, 'wrote')]);
    expect(w.code, w.stderr).toBe(4);
    expect(existsSync(join(box.dir, 'wrote'))).toBe(false);
    await stop(r1);
    await stop(r2);
    const w2 = await tenure(box, ['lock', 'catalog', '--write', '--wait', '10s', '--', 'sh', '-c', 'echo "$TENURE_GROUP" > wrote']);
    expect(w2.code, w2.stderr).toBe(0);
    expect(existsSync(join(box.dir, 'wrote'))).toBe(true);
  });

  it('--lock-delay: a holder that vanished keeps the lock past its TTL; one that released does not', async () => {
    const box = sandbox();
    // Released: the next holder gets it at once (a single attempt).
    const first = await tenure(box, ['lock', 'job', '--ttl', '1s', '--lock-delay', '3s', '--', 'true']);
    expect(first.code, first.stderr).toBe(0);
    const second = await tenure(box, ['lock', 'job', '--ttl', '1s', '--lock-delay', '3s', '--wait', '0', '--', 'true']);
    expect(second.code, second.stderr).toBe(0);
    // Vanished (SIGKILL: no release): its lease lapses 1 s + 3 s after its last renew.
    const holder = start(box, ['lock', 'job', '--ttl', '1s', '--lock-delay', '3s', '--json', '--', 'sleep', '60']);
    const child = await waitUntil('the holder to start its child', () => holder.childPids()[0]);
    holder.signal('SIGKILL');
    await holder.exited;
    const killedAt = performance.now();
    try {
      process.kill(-child, 'SIGKILL');
    } catch {
      // gone
    }
    const next = await tenure(box, ['lock', 'job', '--ttl', '1s', '--wait', '30s', '--', 'true']);
    expect(next.code, next.stderr).toBe(0);
    // Its last renew was at most a renew interval (333 ms) before the kill; without the delay the
    // lock would be free within 1 s. A loose bound, so that a loaded machine cannot fail it.
    expect(performance.now() - killedAt).toBeGreaterThanOrEqual(2000);
  });

  it('refuses bad input with one line and exit 2, running nothing and writing nothing', async () => {
    const box = sandbox();
    const bad: string[][] = [
      ['--semaphore', '0'],
      ['--semaphore=-1'],
      ['--semaphore', '1.5'],
      ['--semaphore', 'three'],
      ['--semaphore', '5000'],
      ['--read', '--write'],
      ['--semaphore', '2', '--read'],
      ['--semaphore', '2', '--write'],
      ['--lock-delay=-1s'],
      ['--lock-delay', 'soon'],
      ['--semaphore', '2', '--store', 'redlock://127.0.0.1:1,127.0.0.1:2,127.0.0.1:3'],
      ['--read', '--store', 'redlock://127.0.0.1:1,127.0.0.1:2,127.0.0.1:3'],
    ];
    for (const flags of bad) {
      const r = await tenure(box, ['lock', 'x', ...flags, '--', 'touch', join(box.dir, 'ran')]);
      expect(r.code, `${flags.join(' ')}: ${r.stderr}`).toBe(2);
      expect(lines(r.stderr), flags.join(' ')).toHaveLength(1);
      expect(r.stderr).toMatch(/^tenure lock: /);
      expect(existsSync(join(box.dir, 'ran'))).toBe(false);
      expect(existsSync(box.db), `${flags.join(' ')} opened the store`).toBe(false);
    }
  });

  it('tenure run --semaphore 2: two of three processes run CMD; when one stops, the third takes its permit', async () => {
    const box = sandbox();
    const runs = ['a', 'b', 'c'].map(() => start(box, ['run', '--group', 'workers', '--semaphore', '2', '--ttl', '2s', '--json', '--', 'sleep', '60']));
    const running = (): Running[] => runs.filter((r) => r.childPids().length > 0);
    await waitUntil('two children', () => running().length === 2);
    const [first, second] = running();
    expect(new Set([first!.events('elected')[0]!.lease, second!.events('elected')[0]!.lease])).toEqual(new Set(['workers/permit/0', 'workers/permit/1']));
    const third = runs.find((r) => !running().includes(r))!;
    await stop(first!);
    await waitUntil('the third to start its child', () => third.childPids()[0]);
    expect(runs.filter((r) => r.exit === null && r.childPids().length > 0)).toHaveLength(2);
    await stop(second!);
    await stop(third);
  });

  it('tenure run refuses a bad --semaphore with exit 2, writing nothing', async () => {
    const box = sandbox();
    for (const flags of [['--semaphore', '0'], ['--semaphore=-2'], ['--semaphore', '2.5'], ['--semaphore', '1025']]) {
      const r = await tenure(box, ['run', '--group', 'g', ...flags, '--', 'touch', join(box.dir, 'ran')]);
      expect(r.code, `${flags.join(' ')}: ${r.stderr}`).toBe(2);
      expect(lines(r.stderr)).toHaveLength(1);
      expect(existsSync(join(box.dir, 'ran'))).toBe(false);
      expect(existsSync(box.db)).toBe(false);
    }
  });
});
