/**
 * The deterministic simulation in CI: thousands of seeded runs of the real LeaderElector and the
 * real MemoryStore on one virtual clock, with delayed and lost replies, stalled and crashed
 * processes and store outages; plus proof that the checker fails when something is broken.
 *
 * TENURE_SIM_SEEDS overrides the number of seeds of the sweep (default 2000), TENURE_SIM_MACHINE_SEEDS
 * that of the pure machine's sweep (`--mode machine`, default 1000).
 */
import { spawn } from 'node:child_process';
import { availableParallelism } from 'node:os';
import { describe, expect, it } from 'vitest';
import { step } from '../../src/election/elector-machine.js';
import { runMachineSeed } from './machine-simulation.js';
import type { MachineSimOptions } from './machine-simulation.js';
import { makePlan } from './plan.js';
import type { Variant } from './plan.js';
import { failureReport } from './report.js';
import { runSeed } from './simulation.js';
import type { SimResult } from './simulation.js';

const SEEDS = Number(process.env.TENURE_SIM_SEEDS ?? 2000);
const MACHINE_SEEDS = Number(process.env.TENURE_SIM_MACHINE_SEEDS ?? 1000);
/** The sweep runs in child processes, two at a time: a run is single-threaded and the machine has two cores. */
const PROCESSES = Math.max(1, Math.min(2, availableParallelism()));

interface CliRun {
  readonly status: number | null;
  readonly stdout: string;
  readonly stderr: string;
}

/** `npm run sim -- ARGS`, without npm. */
function cli(...args: string[]): Promise<CliRun> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, ['--import', 'tsx', 'test/sim/cli.ts', ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.setEncoding('utf8').on('data', (chunk: string) => (stdout += chunk));
    child.stderr.setEncoding('utf8').on('data', (chunk: string) => (stderr += chunk));
    child.on('error', reject);
    child.on('close', (status) => resolve({ status, stdout, stderr }));
  });
}

async function sweep(from: number, count: number, variant: Variant = 'none'): Promise<string[]> {
  const reports: string[] = [];
  for (let seed = from; seed < from + count; seed++) {
    const result = await runSeed(seed, { variant });
    if (result.violations.length > 0) reports.push(failureReport(result, 80));
  }
  return reports;
}

/** The first seed from 0 whose run breaks the way `pattern` says, with its result. */
async function firstFailing(variant: Variant, pattern: RegExp, limit = 100): Promise<SimResult> {
  for (let seed = 0; seed < limit; seed++) {
    const result = await runSeed(seed, { variant });
    if (result.violations.some((v) => pattern.test(v.message))) return result;
  }
  throw new Error(`no seed below ${limit} caught the ${variant} variant`);
}

/** Seeds 0..count-1 through the sim command, split over PROCESSES children; every one must pass. */
async function sweepCli(count: number, ...args: string[]): Promise<void> {
  const per = Math.ceil(count / PROCESSES);
  const parts = Array.from({ length: PROCESSES }, (_, i) => ({ from: i * per, count: Math.min(per, count - i * per) })).filter((p) => p.count > 0);
  const runs = await Promise.all(parts.map((p) => cli('--seeds', String(p.count), '--from', String(p.from), '--trace', '80', '--quiet', ...args)));
  for (const run of runs) {
    // On failure the command's output names each failing seed with its violations and last events.
    expect(run.stdout.trim().split('\n').at(-1), `${run.stdout}\n${run.stderr}`).toMatch(/, violations 0$/);
    expect(run.status, run.stderr).toBe(0);
  }
}

describe('simulation: LeaderElector on MemoryStore under seeded faults', () => {
  it(`seeds 0..${SEEDS - 1} keep every invariant (${PROCESSES} processes of the sim command)`, async () => {
    await sweepCli(SEEDS);
  }, 300_000);

  it('holds at the boundary: margin 0 with true clocks never overlaps (100 seeds)', async () => {
    const failures = await sweep(0, 100, 'margin-zero');
    expect(failures.length, failures[0]).toBe(0);
  });

  it('is a pure function of the seed: the same seed gives the same trace, whatever ran before', async () => {
    for (const seed of [0, 4, 24, 321]) {
      const first = await runSeed(seed);
      await runSeed(seed + 1); // something else in between
      const again = await runSeed(seed);
      expect(again.trace.events.length).toBe(first.trace.events.length);
      expect(again.trace.digest()).toBe(first.trace.digest());
      expect(again.violations).toEqual(first.violations);
      expect(again.stats).toEqual(first.stats);
    }
  });
});

describe('simulation: the checker fails when the system is broken', () => {
  it('catches a store that accepts a stale leader’s write (no fencing where the write lands)', async () => {
    const result = await firstFailing('unfenced', /accepted term \d+ after term \d+/);
    const again = await runSeed(result.seed, { variant: 'unfenced' });
    expect(again.violations).toEqual(result.violations);
    expect(again.trace.digest()).toBe(result.trace.digest());
  });

  it('catches a store that acknowledges a stale write it never made', async () => {
    const result = await firstFailing('fake-ack', /was told .* is seq \d+, but the stream has/);
    expect((await runSeed(result.seed, { variant: 'fake-ack' })).violations).toEqual(result.violations);
  });

  it('catches two leaders at once when the margin is 0 and one clock runs slow', async () => {
    const result = await firstFailing('slow-clock', /two leaders at once/);
    expect((await runSeed(result.seed, { variant: 'slow-clock' })).violations).toEqual(result.violations);
    const report = failureReport(result, 30);
    expect(report).toContain(`FAIL seed ${result.seed}`);
    expect(report).toContain(`reproduce: npm run sim -- --seeds 1 --from ${result.seed} --variant slow-clock`);
    expect(report.split('\n').filter((line) => /^\s+\d+(\.\d+)?\s{2}\S+\s+/.test(line)).length).toBe(30 + 10); // 10 after the violation
  });
});

describe('simulation: regressions it found in LeaderElector', () => {
  // Both seeds failed on the elector as first written; they pass since the fix. The scenario
  // each was found in is asserted too, so a change to plan generation cannot hollow them out.

  // These two find their seed (the first from 0 that shows the situation) rather than naming one:
  // any change to what the elector sends reshuffles which seeds do (seeds 4 and 24 stopped
  // showing theirs when a won election started reading the hand-over hint).
  it('a leader whose work fails releases at once and never leads the resigned term again', async () => {
    const result = await firstSeedWith((texts) => texts.some((t) => /DEPOSED from term \d+: resigned/.test(t)));
    expect(result.violations, failureReport(result, 80)).toEqual([]);
  });

  it('a release delayed past its timeout cannot free the lease of a later leadership', async () => {
    const result = await firstSeedWith(
      (texts) =>
        texts.some((t) => /^→ release alpha term 1 \(request delayed \d+ ms\)$/.test(t)) &&
        texts.some((t) => t.startsWith('alpha: store error in release: sim store: no answer')),
    );
    expect(result.violations, failureReport(result, 80)).toEqual([]);
  });
});

/** The first seed from 0 whose trace shows what `shows` looks for; fails when none of the first `limit` does. */
async function firstSeedWith(shows: (texts: readonly string[]) => boolean, limit = 400): Promise<SimResult> {
  for (let seed = 0; seed < limit; seed++) {
    const result = await runSeed(seed);
    if (shows(result.trace.events.map((e) => e.text))) return result;
  }
  throw new Error(`no seed in 0..${limit - 1} shows the situation`);
}

describe('simulation: the command line', () => {
  it('prints a failing seed with its trace and exits 1', async () => {
    const { seed } = await firstFailing('fake-ack', /was told/);
    const run = await cli('--seeds', '1', '--from', String(seed), '--variant', 'fake-ack', '--trace', '20');
    expect(run.status).toBe(1);
    expect(run.stdout).toContain(`FAIL seed ${seed}`);
    expect(run.stdout).toContain('last 20 of');
    expect(run.stdout.trim().split('\n').at(-1)).toMatch(/^sim: seeds .*, violations [1-9]\d*$/);
  });

  it('prints the same trace for a seed as a run in this process (--full)', async () => {
    const run = await cli('--seeds', '1', '--from', '7', '--full');
    expect(run.status, run.stderr).toBe(0);
    expect(run.stdout).toContain(`${(await runSeed(7)).trace.format()}\n`);
  });

  it('rejects bad usage with exit 2 and one clear line', async () => {
    const run = await cli('--seeds', 'many');
    expect(run.status).toBe(2);
    expect(run.stderr.split('\n')[0]).toBe("sim: --seeds expects an integer >= 1, got 'many'");
  });
});

/** The first seed from 0 whose machine-mode run breaks the way `pattern` says. */
function firstMachineFailing(pattern: RegExp, options: MachineSimOptions, limit = 200): SimResult {
  for (let seed = 0; seed < limit; seed++) {
    const result = runMachineSeed(seed, options);
    if (result.violations.some((v) => pattern.test(v.message))) return result;
  }
  throw new Error(`no seed below ${limit} broke as ${pattern}`);
}

/** A copy of the machine with one defect: each must be caught by the machine simulation. */
const broken: Record<string, typeof step> = {
  'ignores its deadline timer': (c, s, e, now) => (e.type === 'timer' && e.timer === 'deadline' ? { state: s, effects: [] } : step(c, s, e, now)),
  'forgets the terms it gave up': (c, s, e, now) => {
    const r = step(c, s, e, now);
    return { state: { ...r.state, retiredTerm: 0 }, effects: r.effects };
  },
  'never hears that its retirement is done': (c, s, e, now) => (e.type === 'retired' ? { state: s, effects: [] } : step(c, s, e, now)),
  'dates a renewed deadline from the reply': (c, s, e, now) => {
    const r = step(c, s, e, now);
    const l = r.state.leader;
    if (e.type !== 'renew-ok' || !l || s.loop.kind !== 'renew') return r;
    return { state: { ...r.state, leader: { ...l, deadline: now + c.timing.ttlMs - c.timing.marginMs } }, effects: r.effects };
  },
};

describe('simulation: the pure elector machine stepped directly (--mode machine)', () => {
  it(`seeds 0..${MACHINE_SEEDS - 1} keep every invariant (${PROCESSES} processes of the sim command)`, async () => {
    await sweepCli(MACHINE_SEEDS, '--mode', 'machine');
  }, 300_000);

  it('holds at the boundary: margin 0 with true clocks never overlaps (50 seeds)', () => {
    for (let seed = 0; seed < 50; seed++) {
      const result = runMachineSeed(seed, { variant: 'margin-zero' });
      expect(result.violations, failureReport(result, 80)).toEqual([]);
    }
  });

  it('is a pure function of the seed, and uses the shell sim’s plan plus faults of its own', () => {
    for (const seed of [0, 4, 24, 699]) {
      const first = runMachineSeed(seed);
      runMachineSeed(seed + 1);
      const again = runMachineSeed(seed);
      expect(again.trace.digest()).toBe(first.trace.digest());
      expect(again.violations).toEqual(first.violations);
      const shell = makePlan(seed);
      expect({ ...first.plan, mode: 'shell', lostRequestChance: 0, storeErrorChance: 0, listenerFaultChance: 0, clockRates: shell.clockRates }).toEqual(shell);
    }
  });

  it('exercises what it claims: drift, lost requests, store errors, throwing listeners, late answers, retirements', () => {
    const seen = { drift: 0, lostRequest: 0, storeError: 0, listener: 0, lateAnswer: 0, retired: 0, elections: 0 };
    for (let seed = 0; seed < 100; seed++) {
      const r = runMachineSeed(seed);
      if (r.plan.clockRates.some((rate) => rate !== 1)) seen.drift++;
      seen.elections += r.stats.elections;
      for (const { text } of r.trace.events) {
        if (text.endsWith('(request lost)')) seen.lostRequest++;
        else if (text.includes('cannot read (simulated)') && text.includes('store error')) seen.storeError++;
        else if (text.endsWith('listener throws (simulated)')) seen.listener++;
        else if (text.includes(': late answer to ')) seen.lateAnswer++;
        else if (/DEPOSED from term \d+: error/.test(text)) seen.retired++;
      }
    }
    for (const [what, count] of Object.entries(seen)) expect(count, what).toBeGreaterThan(10);
  });

  it('catches two leaders at once when the margin is 0 and one clock runs slow', () => {
    const result = firstMachineFailing(/two leaders at once/, { variant: 'slow-clock' });
    expect(failureReport(result, 10)).toContain(`reproduce: npm run sim -- --seeds 1 --from ${result.seed} --mode machine --variant slow-clock`);
  });

  it('catches a store without fencing, and one that acknowledges a stale write', () => {
    firstMachineFailing(/accepted term \d+ after term \d+/, { variant: 'unfenced' });
    firstMachineFailing(/was told .* is seq \d+, but the stream has/, { variant: 'fake-ack' });
  });

  const expected: Record<keyof typeof broken, RegExp> = {
    'ignores its deadline timer': /the machine's deadline timer is \d+ but the shell's is unset/,
    'forgets the terms it gave up': /elected for term (\d+) after giving up term \1 \(a released term is never led again\)/,
    'never hears that its retirement is done': /stalled: the loop waits in retire with nothing to wake it/,
    'dates a renewed deadline from the reply': /renewed term \d+ until [\d.]+ on renew-ok, rule 2 allows/,
  };
  for (const [defect, pattern] of Object.entries(expected)) {
    it(`catches a machine that ${defect}`, () => {
      firstMachineFailing(pattern, { step: broken[defect] });
    });
  }

  it('seed 2686214852: a write sent at the very instant of the deadline on a drifting clock is not "after" it (float rounding)', () => {
    const result = runMachineSeed(2686214852);
    expect(result.plan.clockRates.some((rate) => rate !== 1)).toBe(true);
    expect(result.stats.lateSends).toBeGreaterThan(0);
    expect(result.violations, failureReport(result, 80)).toEqual([]);
  });

  it('seed 114: an acquire that hands back a term the elector gave up releases it, so the group gets a leader', () => {
    // Seed 699 until the machine read hand-over hints (its draws moved the schedule): the same
    // story, checked from the trace: a release of term T fails, a later acquire hands back T, and
    // the elector releases it again rather than renew a term it gave up.
    const result = runMachineSeed(114);
    const texts = result.trace.events.map((e) => e.text);
    const handsBack = texts.some((text, i) => {
      const t = /^store: release alpha term (\d+) -> StoreDataError/.exec(text)?.[1];
      if (t === undefined) return false;
      const j = texts.findIndex((x, k) => k > i && x === `store: acquire alpha -> acquired term ${t}`);
      return j > 0 && texts.slice(j + 1, j + 4).includes(`→ release alpha term ${t}`);
    });
    expect(handsBack).toBe(true);
    expect(result.violations, failureReport(result, 80)).toEqual([]);
  });
});
