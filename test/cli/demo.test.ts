/**
 * `tenure demo`: the JSON summary shows both failovers with higher terms, the stale write refused
 * and no safety violation; no node process is left behind, also when the demo is interrupted.
 */
import { spawn } from 'node:child_process';
import { afterAll, describe, expect, it } from 'vitest';
import { expectTheStory } from './demo-story.js';
import type { DemoSummaryJson as Summary } from './demo-story.js';
import { BIN, cleanUp, processAlive, sandbox, tenure, waitUntil } from './helpers.js';

afterAll(cleanUp);


describe('tenure demo', () => {
  it('prints one JSON summary: two failovers, a stale write refused, no violations', { timeout: 120_000 }, async () => {
    const box = sandbox();
    const r = await tenure(box, ['demo', '--nodes', '3', '--duration', '4', '--json'], { timeoutMs: 110_000 });
    expect(r.code, r.stderr).toBe(0);
    const summary = JSON.parse(r.stdout) as Summary;
    expect(summary.via).toBe('stream');
    expectTheStory(summary);
  });

  it('--via sql: the resumed leader\'s fenced UPDATE is refused in the statement, and the row\'s history has no stale write', { timeout: 120_000 }, async () => {
    const box = sandbox();
    const r = await tenure(box, ['demo', '--via', 'sql', '--duration', '4', '--json'], { timeoutMs: 110_000 });
    expect(r.code, r.stderr).toBe(0);
    const summary = JSON.parse(r.stdout) as Summary;
    expect(summary.via).toBe('sql');
    expectTheStory(summary);
  });

  it('--via sql shows where the check happens and what the writes landed on', { timeout: 120_000 }, async () => {
    const box = sandbox();
    const r = await tenure(box, ['demo', '--via', 'sql', '--duration', '3'], { timeoutMs: 110_000 });
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toContain('fencedUpdate of row demo_row.demo');
    expect(r.stdout).toMatch(/node-\d's write refused by the UPDATE: stale fencing token: term \d+ < \d+ for group demo/);
    // Frozen 2 s on a 1 s lease: its leadership ended at the deadline while it was stopped (rule 2),
    // which it acts on first when it resumes, before its refused write's answer.
    expect(r.stdout).toMatch(/stepped down from term \d+ \(deadline\)/);
    expect(r.stdout).toContain('written via  sql');
  });

  it('refuses an unknown --via with one line and exit code 2, before starting anything', async () => {
    const box = sandbox();
    for (const via of ['kafka', '', 'SQL', 'sql,http']) {
      const r = await tenure(box, ['demo', '--via', via, '--json']);
      expect(r.code).toBe(2);
      expect(r.stdout).toBe('');
      expect(r.stderr.trim().split('\n')).toHaveLength(1);
      expect(r.stderr).toContain(`--via: expected one of stream, sql`);
      expect(r.stderr).toContain(`got '${via}'`);
    }
  });

  for (const sig of ['SIGINT', 'SIGKILL'] as const) {
    it(`leaves no process behind when it gets ${sig} while a node is frozen`, { timeout: 120_000 }, async () => {
      const box = sandbox();
      const demo = spawn(process.execPath, [BIN, 'demo', '--duration', '20'], { cwd: box.dir, env: box.env, stdio: ['ignore', 'pipe', 'pipe'] });
      let out = '';
      demo.stdout.on('data', (d: Buffer) => (out += d.toString()));
      const exited = new Promise<number | null>((resolve) => demo.on('close', (code) => resolve(code)));
      await waitUntil('a node to be frozen', () => / frozen \(SIGSTOP\)/.test(out), 60_000);
      const pids = [...out.matchAll(/started \(pid (\d+)\)/g)].map((m) => Number(m[1]));
      expect(pids.length).toBe(3);
      demo.kill(sig);
      const code = await exited;
      if (sig === 'SIGINT') {
        expect(code).toBe(130);
        expect(out).toContain('Summary (interrupted)');
      }
      await waitUntil('every node to be gone', () => pids.every((pid) => !processAlive(pid)), 30_000);
    });
  }
});
