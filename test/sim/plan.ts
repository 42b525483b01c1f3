/**
 * The plan of one simulated run, drawn from its seed alone: how many nodes and groups, the
 * timing, and every fault window. Dynamic choices during the run (each call's delay, a lost
 * reply) come from a second generator seeded from the same seed, so a seed is a pure function.
 */
import { SeededRandom, randomInt, resolveTiming } from '../../src/core/index.js';
import type { Random, Timing, TimingOptions } from '../../src/core/index.js';
import type { ResumeOrder } from './node-clock.js';

/**
 * `none` is the real system. `margin-zero` is the real system with marginMs 0: the boundary case,
 * where a deadline may touch the next leader's election but never overlap it; it must pass too.
 * The others are deliberately broken, to prove the checker fails:
 * - `unfenced`: the stream accepts every write whatever its term (no fencing where the write lands);
 * - `fake-ack`: the store wrapper answers a stale write with a success instead of StaleTermError;
 * - `slow-clock`: margin 0 and node n1's clock runs at 3/4 speed, so its deadline passes too late.
 */
export type Variant = 'none' | 'margin-zero' | 'unfenced' | 'fake-ack' | 'slow-clock';
export const variants: readonly Variant[] = ['none', 'margin-zero', 'unfenced', 'fake-ack', 'slow-clock'];

/**
 * What runs on each node: `shell`, the real LeaderElector (its promises, on a virtual clock), or
 * `machine`, the pure elector machine stepped directly by a promise-free event loop
 * (machine-simulation.ts), which also drifts clocks and loses requests.
 */
export type SimMode = 'shell' | 'machine';
export const modes: readonly SimMode[] = ['shell', 'machine'];

export interface OutageWindow {
  /** The node cut off from the store, or null when the store itself is down for everyone. */
  readonly node: string | null;
  readonly startMs: number;
  readonly endMs: number;
  /** `reject`: calls fail fast with StoreUnavailableError; `hang`: calls never answer. Nothing applies. */
  readonly mode: 'reject' | 'hang';
}

export interface PauseWindow {
  readonly node: string;
  readonly startMs: number;
  readonly endMs: number;
  readonly resumeOrder: ResumeOrder;
}

export interface CrashPlan {
  readonly node: string;
  readonly atMs: number;
  /** A new incarnation of the node starts this long after the crash. */
  readonly restartAfterMs: number;
}

export interface SimPlan {
  readonly seed: number;
  readonly variant: Variant;
  readonly mode: SimMode;
  readonly nodes: readonly string[];
  readonly groups: readonly string[];
  /** Passed to every LeaderElector. */
  readonly timingOptions: TimingOptions;
  /** The same, resolved with the elector's defaults. */
  readonly timing: Timing;
  /** When each node starts, virtual ms. */
  readonly startAtMs: readonly number[];
  /** Leader work appends once every [lo, hi] ms. */
  readonly appendEveryMs: readonly [number, number];
  readonly durationMs: number;
  /** Every fault stops here: paused nodes resume, the store answers, replies arrive promptly. */
  readonly faultsUntilMs: number;
  /** Chance that one leg (request or reply) of a store call is delayed. */
  readonly delayChance: number;
  readonly maxDelayMs: number;
  /** Chance that the store applies a call but its reply never arrives. */
  readonly lostChance: number;
  /** Chance, per append, that leader work throws (and the node resigns). */
  readonly workErrorChance: number;
  /** Chance that a request never reaches the store (machine mode; 0 in the shell's plans). */
  readonly lostRequestChance: number;
  /**
   * Each node's clock rate, local ms per virtual ms (machine mode; 1 in the shell's, but for
   * `slow-clock`). The store's clock is virtual time, so a rate below 1 is a client clock
   * running slow against the store's: safe down to 1 − margin/ttl (the documented bound: the
   * margin is what absorbs drift), drawn within it, and up to 1 + margin/ttl fast.
   */
  readonly clockRates: readonly number[];
  /**
   * Chance that the store answers a lease call with an error that is not "maybe" (a row tenure
   * cannot read: StoreDataError), nothing applied, and chance that a listener of the elector's
   * `leader-changed` event throws (machine mode; 0 in the shell's): both faults make a leader
   * retire (depose, release, back off).
   */
  readonly storeErrorChance: number;
  readonly listenerFaultChance: number;
  readonly outages: readonly OutageWindow[];
  readonly pauses: readonly PauseWindow[];
  readonly crashes: readonly CrashPlan[];
}

export function makePlan(seed: number, variant: Variant = 'none', mode: SimMode = 'shell'): SimPlan {
  const r: Random = new SeededRandom(seed);
  const pick = <T>(xs: readonly T[]): T => xs[Math.floor(r.next() * xs.length)]!;
  const chance = (p: number): boolean => r.next() < p;
  const weighted = (xs: readonly (readonly [number, number])[]): number => {
    let x = r.next() * xs.reduce((sum, [, w]) => sum + w, 0);
    for (const [value, w] of xs) if ((x -= w) < 0) return value;
    return xs[xs.length - 1]![0];
  };

  const nodes = Array.from({ length: pick([2, 3, 3, 3, 3, 4, 4, 5]) }, (_, i) => `n${i + 1}`);
  const groups = chance(0.6) ? ['alpha'] : ['alpha', 'beta'];
  // Short TTLs give the most elections per virtual minute but cost the most real time; keep them rarer.
  const ttlMs = weighted([
    [100, 2],
    [200, 5],
    [300, 8],
    [500, 12],
    [800, 12],
    [1000, 14],
    [1500, 10],
    [2000, 10],
    [3000, 10],
    [5000, 10],
  ]);

  let timingOptions: TimingOptions = { ttlMs };
  if (chance(0.6)) {
    const marginMs = randomInt(r, 1, Math.max(2, Math.floor(ttlMs / 4)));
    const room = ttlMs - marginMs;
    timingOptions = {
      ttlMs,
      marginMs,
      renewIntervalMs: randomInt(r, Math.max(1, Math.floor(room / 8)), Math.max(2, Math.floor(room * 0.6))),
      retryMs: randomInt(r, 1, Math.max(2, Math.floor(ttlMs / 5))),
      requestTimeoutMs: randomInt(r, Math.max(5, Math.floor(ttlMs / 10)), ttlMs + 1),
    };
  }
  if (variant === 'margin-zero' || variant === 'slow-clock') timingOptions = { ...timingOptions, marginMs: 0 };
  const timing = resolveTiming(timingOptions);

  const durationMs = 60_000;
  const faultsUntilMs = randomInt(r, 30_000, 45_001);
  const calm = chance(0.1);
  const window = (minMs: number, maxMs: number): { startMs: number; endMs: number } => {
    const startMs = randomInt(r, 0, faultsUntilMs);
    return { startMs, endMs: Math.min(faultsUntilMs, startMs + randomInt(r, minMs, maxMs)) };
  };

  const outages: OutageWindow[] = [];
  for (let i = calm ? 0 : randomInt(r, 0, 5); i > 0; i--) {
    const w = window(Math.floor(ttlMs * 0.2) + 1, ttlMs * 3);
    outages.push({ ...w, node: chance(0.5) ? null : pick(nodes), mode: chance(0.5) ? 'reject' : 'hang' });
  }
  const pauses: PauseWindow[] = [];
  for (let i = calm ? 0 : randomInt(r, 0, 5); i > 0; i--) {
    const w = window(Math.floor(ttlMs * 0.3) + 1, ttlMs * 3);
    pauses.push({ ...w, node: pick(nodes), resumeOrder: chance(0.5) ? 'arrival' : 'timers-first' });
  }
  const crashes: CrashPlan[] = [];
  if (!calm && chance(0.25)) {
    crashes.push({ node: pick(nodes), atMs: randomInt(r, 0, faultsUntilMs - 3 * ttlMs), restartAfterMs: randomInt(r, 0, 3 * ttlMs) });
  }

  // Machine mode's extra faults come from a generator of their own, so a seed's shell plan is
  // the same in both modes.
  const m: Random = new SeededRandom((seed ^ 0x5bd1e995) >>> 0);
  const drift = timing.marginMs / timing.ttlMs;
  const clockRates = nodes.map((node) => {
    if (variant === 'slow-clock' && node === 'n1') return 0.75;
    if (mode === 'shell' || calm || m.next() < 0.5) return 1;
    // Within the bound, kept a hair inside it so that float rounding of the virtual instants stays below the checker's epsilon.
    return 1 + (m.next() * 2 - 1) * drift * 0.999;
  });
  const machinePick = (xs: readonly number[]): number => (mode === 'shell' || calm ? 0 : xs[Math.floor(m.next() * xs.length)]!);
  const lostRequestChance = machinePick([0, 0, 0.005, 0.02]);
  const storeErrorChance = machinePick([0, 0, 0.002, 0.01]);
  const listenerFaultChance = machinePick([0, 0, 0.01, 0.05]);

  return {
    seed,
    variant,
    mode,
    nodes,
    groups,
    timingOptions,
    timing,
    startAtMs: nodes.map(() => randomInt(r, 0, ttlMs)),
    appendEveryMs: [Math.max(5, Math.floor(ttlMs / 10)), Math.max(10, Math.floor(ttlMs / 3))],
    durationMs,
    faultsUntilMs,
    delayChance: calm ? 0 : pick([0, 0.01, 0.05, 0.1, 0.2, 0.3]),
    maxDelayMs: randomInt(r, Math.floor(ttlMs / 10) + 1, 2 * ttlMs),
    lostChance: calm ? 0 : pick([0, 0, 0.005, 0.02, 0.05]),
    workErrorChance: calm ? 0 : pick([0, 0, 0.001, 0.005, 0.02]),
    lostRequestChance,
    clockRates,
    storeErrorChance,
    listenerFaultChance,
    outages,
    pauses,
    crashes,
  };
}

/** One readable paragraph describing a plan, printed with a failing seed. */
export function describePlan(plan: SimPlan): string {
  const t = plan.timing;
  const lines = [
    `seed ${plan.seed} mode ${plan.mode} variant ${plan.variant}: nodes ${plan.nodes.join(',')} groups ${plan.groups.join(',')}`,
    `  timing ttl ${t.ttlMs} margin ${t.marginMs} renew ${t.renewIntervalMs} retry ${t.retryMs} request-timeout ${t.requestTimeoutMs} (ms)`,
    `  faults until ${plan.faultsUntilMs} of ${plan.durationMs} ms: delay ${plan.delayChance} up to ${plan.maxDelayMs} ms, lost ${plan.lostChance}, work-error ${plan.workErrorChance}`,
  ];
  if (plan.mode === 'machine') {
    lines.push(`  lost requests ${plan.lostRequestChance}, store errors ${plan.storeErrorChance}, listener faults ${plan.listenerFaultChance}, clock rates ${plan.clockRates.map((r) => r.toFixed(4)).join(',')}`);
  }
  for (const o of plan.outages) lines.push(`  outage ${o.node ?? 'all'} ${o.mode} ${o.startMs}..${o.endMs}`);
  for (const p of plan.pauses) lines.push(`  pause ${p.node} ${p.startMs}..${p.endMs} resume ${p.resumeOrder}`);
  for (const c of plan.crashes) lines.push(`  crash ${c.node} at ${c.atMs}, restart after ${c.restartAfterMs} ms`);
  return lines.join('\n');
}
