/**
 * Deterministic simulation of a Bully or Ring group: 3 to 5 nodes with scattered ids, on a
 * virtual network that delays, drops, duplicates and reorders messages (and, when asked,
 * partitions the nodes); nodes crash and restart with the term they persisted. Every message
 * goes through the wire codec. After the fault phase comes a calm phase (healed, everyone up, no
 * loss), and the checker (checker.ts) judges the run. Every choice comes from one SeededRandom:
 * a seed replays exactly.
 */
import { randomInt, SeededRandom, type Random } from '../../../src/core/random.js';
import { BullyMachine } from '../../../src/election/classic/bully.js';
import type { ClassicMachine, ClassicOutput } from '../../../src/election/classic/machine.js';
import { decodeClassic, encodeClassic, type ClassicMessage, type NodeId } from '../../../src/election/classic/messages.js';
import { RingMachine } from '../../../src/election/classic/ring.js';
import { ElectionChecker, type Overlap, type Violation } from './checker.js';

export type Algorithm = 'bully' | 'ring';

export interface SimOptions {
  readonly seed: number;
  readonly algorithm: Algorithm;
  readonly nodes?: number;
  /** Partition the nodes during the fault phase (the elections are not safe then: split brain). */
  readonly partitions?: boolean;
  readonly faultMs?: number;
  readonly calmMs?: number;
}

export interface SimStats {
  messages: number;
  dropped: number;
  duplicated: number;
  crashes: number;
  partitions: number;
  elections: number;
  overlaps: number;
  splitBrains: number;
}

export interface SimResult {
  readonly seed: number;
  readonly algorithm: Algorithm;
  readonly members: readonly NodeId[];
  readonly violations: readonly Violation[];
  readonly overlaps: readonly Overlap[];
  readonly stats: SimStats;
  /** The last lines of the trace (for a failing seed's report). */
  readonly trace: readonly string[];
}

interface SimNode {
  readonly id: NodeId;
  machine: ClassicMachine | null;
  incarnation: number;
  persistedTerm: number;
  readonly timerGen: Map<string, number>;
}

interface Event {
  readonly at: number;
  readonly seq: number;
  readonly run: () => void;
}

class Queue {
  private items: Event[] = [];
  private seq = 0;
  now = 0;
  at(time: number, run: () => void): void {
    const e: Event = { at: Math.max(time, this.now), seq: this.seq++, run };
    let lo = 0;
    let hi = this.items.length;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      const o = this.items[mid]!;
      if (o.at < e.at || (o.at === e.at && o.seq < e.seq)) lo = mid + 1;
      else hi = mid;
    }
    this.items.splice(lo, 0, e);
  }
  runUntil(time: number): void {
    while (this.items.length > 0 && this.items[0]!.at <= time) {
      const e = this.items.shift()!;
      this.now = e.at;
      e.run();
    }
    this.now = time;
  }
}

/** Distinct ids, scattered (not 1..n), sorted. */
function pickIds(random: Random, n: number): NodeId[] {
  const ids = new Set<NodeId>();
  while (ids.size < n) ids.add(randomInt(random, 1, random.next() < 0.3 ? 2 ** 40 : 100));
  return [...ids].sort((a, b) => a - b);
}

export function runSeed(options: SimOptions): SimResult {
  const random = new SeededRandom(options.seed * 7919 + (options.algorithm === 'ring' ? 1 : 0) + (options.partitions === true ? 2 : 0));
  const n = options.nodes ?? 3 + (options.seed % 3);
  const members = pickIds(random, n);
  const faultMs = options.faultMs ?? 20_000;
  const calmMs = options.calmMs ?? 10_000;
  const q = new Queue();
  const checker = new ElectionChecker(members);
  const stats: SimStats = { messages: 0, dropped: 0, duplicated: 0, crashes: 0, partitions: 0, elections: 0, overlaps: 0, splitBrains: 0 };
  const trace: string[] = [];
  const log = (text: string): void => {
    trace.push(`t=${q.now} ${text}`);
    if (trace.length > 400) trace.splice(0, trace.length - 300);
  };

  let loss = 0;
  let maxDelay = 20;
  /** side[node]: nodes on different sides cannot talk. */
  const side = new Map<NodeId, number>(members.map((id) => [id, 0]));
  const separated = (a: NodeId, b: NodeId): boolean => side.get(a) !== side.get(b);
  const nodes = new Map<NodeId, SimNode>(members.map((id) => [id, { id, machine: null, incarnation: 0, persistedTerm: 0, timerGen: new Map() }]));

  const make = (node: SimNode): ClassicMachine => {
    const config = { id: node.id, members, random, initialTerm: node.persistedTerm };
    return options.algorithm === 'bully' ? new BullyMachine(config) : new RingMachine(config);
  };

  const perform = (node: SimNode, out: ClassicOutput): void => {
    // The term is persisted before anything that claims it is sent (as Raft's hard state).
    if (out.persistTerm !== undefined) node.persistedTerm = out.persistTerm;
    for (const e of out.events) {
      if (e.kind === 'elected') {
        stats.elections++;
        log(`n${node.id} elected term ${e.term}`);
        checker.elected(q.now, node.id, node.incarnation, e.term, separated);
      } else if (e.kind === 'deposed') {
        log(`n${node.id} deposed from term ${e.term} (${e.reason})`);
        checker.ended(q.now, node.id);
      }
    }
    for (const t of out.timers) {
      const gen = (node.timerGen.get(t.name) ?? 0) + 1;
      node.timerGen.set(t.name, gen);
      if (t.ms === null) continue;
      const inc = node.incarnation;
      q.at(q.now + t.ms, () => {
        if (node.machine === null || node.incarnation !== inc || node.timerGen.get(t.name) !== gen) return;
        node.timerGen.delete(t.name);
        step(node, { kind: 'timer', name: t.name });
      });
    }
    for (const m of out.messages) send(m);
  };

  const step = (node: SimNode, input: Parameters<ClassicMachine['step']>[0]): void => {
    if (node.machine === null) return;
    perform(node, node.machine.step(input));
  };

  const send = (m: ClassicMessage): void => {
    stats.messages++;
    const bytes = encodeClassic(m);
    const copies = random.next() < 0.02 ? 2 : 1;
    if (copies === 2) stats.duplicated++;
    for (let i = 0; i < copies; i++) {
      if (separated(m.from, m.to) || random.next() < loss) {
        stats.dropped++;
        continue;
      }
      const delay = random.next() < 0.03 ? randomInt(random, 100, 400) : randomInt(random, 1, maxDelay + 1);
      q.at(q.now + delay, () => {
        const to = nodes.get(m.to)!;
        if (to.machine === null || separated(m.from, m.to)) {
          stats.dropped++;
          return;
        }
        step(to, { kind: 'message', message: decodeClassic(bytes) });
      });
    }
  };

  const start = (node: SimNode): void => {
    node.incarnation++;
    node.timerGen.clear();
    node.machine = make(node);
    log(`n${node.id} starts (incarnation ${node.incarnation}, persisted term ${node.persistedTerm})`);
    step(node, { kind: 'start' });
  };
  const crash = (node: SimNode): void => {
    if (node.machine === null) return;
    stats.crashes++;
    log(`n${node.id} crashes`);
    node.machine = null;
    checker.ended(q.now, node.id);
  };

  // Nodes come up at scattered times.
  for (const node of nodes.values()) q.at(randomInt(random, 0, 300), () => start(node));

  // The fault plan.
  let t = 500;
  while (t < faultMs) {
    const at = t;
    const r = random.next();
    if (r < 0.4) {
      const node = nodes.get(members[randomInt(random, 0, n)]!)!;
      const down = randomInt(random, 200, 3000);
      q.at(at, () => {
        const up = [...nodes.values()].filter((x) => x.machine !== null).length;
        if (up <= 1 || node.machine === null) return;
        crash(node);
        q.at(Math.min(at + down, faultMs), () => {
          if (node.machine === null) start(node);
        });
      });
    } else if (r < 0.65) {
      const l = random.next() < 0.5 ? 0 : random.next() * 0.25;
      const d = randomInt(random, 1, 60);
      q.at(at, () => {
        loss = l;
        maxDelay = d;
        log(`network: loss ${l.toFixed(2)}, delay up to ${d} ms`);
      });
    } else if (r < 0.85 && options.partitions === true) {
      const sides = members.map(() => (random.next() < 0.5 ? 0 : 1));
      const lasts = randomInt(random, 500, 5000);
      q.at(at, () => {
        stats.partitions++;
        members.forEach((id, i) => side.set(id, sides[i]!));
        log(`partition: [${members.filter((_, i) => sides[i] === 0).join(' ')}] | [${members.filter((_, i) => sides[i] === 1).join(' ')}]`);
      });
      q.at(Math.min(at + lasts, faultMs), () => {
        for (const id of members) side.set(id, 0);
        log('partition healed');
      });
    }
    t += randomInt(random, 100, 1500);
  }

  let exception: unknown;
  try {
    q.runUntil(faultMs);
    // Calm: heal, everyone up, no loss.
    for (const id of members) side.set(id, 0);
    loss = 0;
    maxDelay = 10;
    // Half the seeds leave one node down for good (the leader, often): the rest must elect without it.
    const leftDown = random.next() < 0.5 ? members[randomInt(random, 0, n)]! : null;
    log(`calm: healed, no loss, every node up${leftDown === null ? '' : ` but n${leftDown}`}`);
    for (const node of nodes.values()) {
      if (node.id === leftDown) crash(node);
      else if (node.machine === null) start(node);
    }
    q.runUntil(faultMs + calmMs);
    const views = new Map<NodeId, { isLeader: boolean; leader: NodeId | null; term: number }>();
    for (const node of nodes.values()) if (node.machine !== null) views.set(node.id, { isLeader: node.machine.isLeader, leader: node.machine.leader, term: node.machine.term });
    checker.settled(q.now, views, leftDown === null ? n : n - 1);
  } catch (err) {
    exception = err;
  }
  const violations = [...checker.violations];
  if (exception !== undefined) violations.push({ kind: 'exception', at: q.now, message: exception instanceof Error ? (exception.stack ?? exception.message) : String(exception) });
  stats.overlaps = checker.overlaps.length;
  stats.splitBrains = checker.splitBrains.length;
  return { seed: options.seed, algorithm: options.algorithm, members, violations, overlaps: checker.overlaps, stats, trace: trace.slice(-60) };
}

/** A failing seed's report: how to reproduce it, what broke, the end of the trace. */
export function report(r: SimResult, partitions: boolean): string {
  return [
    `seed ${r.seed} (${r.algorithm}, members ${r.members.join(' ')}): ${r.violations.length} violation(s)`,
    `  reproduce: npx tsx test/sim/classic/cli.ts --algorithm ${r.algorithm} --from ${r.seed} --seeds 1${partitions ? ' --partitions' : ''}`,
    ...r.violations.slice(0, 5).map((v) => `  ${v.kind} at t=${v.at}: ${v.message}`),
    '  trace (last lines):',
    ...r.trace.map((l) => `    ${l}`),
  ].join('\n');
}
