/**
 * `tenure demo --scenario followers`: a leader and a standby append, three followers apply the log
 * to SQLite projections of their own; one follower killed mid-apply goes on after its last commit,
 * the frozen leader's append is refused, reads are routed within the lag threshold, and every
 * projection equals the log (the demo compares each projection file with the stream it reads
 * from the store). No process is left behind, also when interrupted.
 */
import { spawn } from 'node:child_process';
import { afterAll, describe, expect, it } from 'vitest';
import { BIN, cleanUp, processAlive, sandbox, tenure, waitUntil } from './helpers.js';

afterAll(cleanUp);

interface LagStats {
  min: number;
  p50: number;
  max: number;
}

interface FollowersSummary {
  ok: boolean;
  scenario: string;
  failovers: Array<{ cause: string; from: string; fromTerm: number; to: string; toTerm: number; ms: number }>;
  terms: Array<{ term: number; node: string; entries: number }>;
  staleRejected: number;
  entries: number;
  violations: string[];
  problems: string[];
  pids: number[];
  interrupted: boolean;
  followers: Array<{
    name: string;
    entries: number;
    lastSeq: number;
    equal: boolean;
    restarts: number;
    resumedAfter: number[];
    lag: { samples: number; entries: LagStats; ms: LagStats; spark: string };
  }>;
  reads: { count: number; thresholdMs: number; byTarget: Record<string, number>; maxLagServedMs: number; unserved: number };
}

describe('tenure demo --scenario followers', () => {
  it('every projection equals the log, a follower killed mid-apply goes on after its last commit, the stale append is refused, reads stay within the threshold', { timeout: 120_000 }, async () => {
    const box = sandbox();
    const r = await tenure(box, ['demo', '--scenario', 'followers', '--duration', '6', '--json'], { timeoutMs: 110_000 });
    expect(r.code, r.stderr).toBe(0);
    const s = JSON.parse(r.stdout) as FollowersSummary;
    expect(s.scenario).toBe('followers');
    expect(s.violations).toEqual([]);
    expect(s.problems).toEqual([]);
    expect(s.ok).toBe(true);
    expect(s.interrupted).toBe(false);

    // The leader was frozen and replaced; its append after resuming was refused.
    expect(s.failovers.map((f) => f.cause)).toEqual(['pause']);
    expect(s.failovers[0]!.toTerm).toBeGreaterThan(s.failovers[0]!.fromTerm);
    expect(s.failovers[0]!.to).not.toBe(s.failovers[0]!.from);
    expect(s.staleRejected).toBeGreaterThanOrEqual(1);
    expect(s.terms.length).toBe(2);
    expect(s.terms.reduce((n, t) => n + t.entries, 0)).toBe(s.entries);

    // Each follower holds exactly the log: same seqs 1..N, N the log's length.
    expect(s.followers.map((f) => f.name)).toEqual(['follower-1', 'follower-2', 'follower-3']);
    for (const f of s.followers) {
      expect(f.equal).toBe(true);
      expect(f.entries).toBe(s.entries);
      expect(f.lastSeq).toBe(s.entries);
      expect(f.lag.samples).toBeGreaterThan(0);
      expect(f.lag.ms.min).toBeLessThanOrEqual(f.lag.ms.p50);
      expect(f.lag.ms.p50).toBeLessThanOrEqual(f.lag.ms.max);
      expect([...f.lag.spark].length).toBe(24);
    }
    // One follower was killed inside an apply and restarted; it went on after a committed entry.
    const restarted = s.followers.filter((f) => f.restarts > 0);
    expect(restarted.map((f) => f.name)).toEqual(['follower-2']);
    expect(restarted[0]!.resumedAfter).toHaveLength(1);
    expect(restarted[0]!.resumedAfter[0]!).toBeLessThan(s.entries);

    // Reads were routed, mostly to followers, never above the threshold.
    expect(s.reads.count).toBeGreaterThan(10);
    expect(s.reads.thresholdMs).toBe(500);
    const served = Object.values(s.reads.byTarget).reduce((n, c) => n + c, 0);
    expect(served).toBe(s.reads.count);
    const fromFollowers = s.reads.count - (s.reads.byTarget.leader ?? 0);
    expect(fromFollowers).toBeGreaterThan(0);
    expect(s.reads.maxLagServedMs).toBeLessThanOrEqual(s.reads.thresholdMs);

    // Two candidates, three followers and the restarted one: all gone.
    expect(s.pids.length).toBe(6);
    for (const pid of s.pids) expect(processAlive(pid)).toBe(false);
  });

  it('plain output shows the projections against the log, the lag, the reads and violations none', { timeout: 120_000 }, async () => {
    const box = sandbox();
    const r = await tenure(box, ['demo', '--scenario', 'followers', '--duration', '5'], { timeoutMs: 110_000 });
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toMatch(/follower-2 killed \(kill -9\) inside the apply of entry #(\d+)/);
    const killedAt = Number(/inside the apply of entry #(\d+)/.exec(r.stdout)![1]);
    const after = Number(/follower-2 restarted as a new incarnation: it goes on after #(\d+)/.exec(r.stdout)![1]);
    expect(after).toBeLessThan(killedAt);
    expect(r.stdout).toMatch(/node-\d's write refused: stale fencing token/);
    for (const name of ['follower-1', 'follower-2', 'follower-3']) expect(r.stdout).toMatch(new RegExp(`${name}: projection = log \\(\\d+ entries, #1\\.\\.#\\d+\\)`));
    expect(r.stdout).toMatch(/reads +\d+ routed \(.*follower-\d \d+.*\) · max lag served \d+ms, threshold 500ms/);
    expect(r.stdout).toContain('violations   none: gap-free, terms never went back, one writer per term, projections equal the log');
  });

  for (const sig of ['SIGINT', 'SIGKILL'] as const) {
    it(`leaves no process behind when it gets ${sig} right after a follower was killed mid-apply`, { timeout: 120_000 }, async () => {
      const box = sandbox();
      const demo = spawn(process.execPath, [BIN, 'demo', '--scenario', 'followers', '--duration', '30'], { cwd: box.dir, env: box.env, stdio: ['ignore', 'pipe', 'pipe'] });
      let out = '';
      demo.stdout.on('data', (d: Buffer) => (out += d.toString()));
      const exited = new Promise<number | null>((resolve) => demo.on('close', (code) => resolve(code)));
      await waitUntil('a follower to be killed mid-apply', () => /follower-2 killed \(kill -9\)/.test(out), 60_000);
      const pids = [...out.matchAll(/started \(pid (\d+)\)/g)].map((m) => Number(m[1]));
      expect(pids.length).toBeGreaterThanOrEqual(5);
      demo.kill(sig);
      const code = await exited;
      if (sig === 'SIGINT') {
        expect(code).toBe(130);
        expect(out).toContain('Summary (interrupted)');
      }
      const all = [...out.matchAll(/started \(pid (\d+)\)/g)].map((m) => Number(m[1]));
      await waitUntil('every process to be gone', () => all.every((pid) => !processAlive(pid)), 30_000);
    });
  }

  it('refuses an unknown --scenario, and --via other than stream with followers, with one line and exit code 2', async () => {
    const box = sandbox();
    for (const scenario of ['leaders', '', 'Followers']) {
      const r = await tenure(box, ['demo', '--scenario', scenario, '--json']);
      expect(r.code).toBe(2);
      expect(r.stdout).toBe('');
      expect(r.stderr.trim().split('\n')).toHaveLength(1);
      expect(r.stderr).toContain(`--scenario: expected one of failover, followers, got '${scenario}'`);
    }
    const r = await tenure(box, ['demo', '--scenario', 'followers', '--via', 'sql']);
    expect(r.code).toBe(2);
    expect(r.stderr.trim().split('\n')).toHaveLength(1);
    expect(r.stderr).toContain('--via stream only');
  });
});
