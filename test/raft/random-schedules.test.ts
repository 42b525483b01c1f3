/**
 * Random schedules over a few cores: messages delayed, reordered, duplicated and dropped, nodes
 * partitioned and restarted, proposals, reads, transfers and compactions at random. After every
 * Ready the safety properties of the Raft paper are checked; after healing, the group must make
 * progress again. (The full simulator with a linearizability checker lives in test/sim.)
 */
import { describe, expect, it } from 'vitest';
import { SeededRandom, randomInt } from '../../src/core/random.js';
import {
  decodeConfChange,
  MemoryStorage,
  ProposalDroppedError,
  RawNode,
  type ConfChange,
  type ConfChangeSingle,
  type ConfState,
  type Entry,
  type Message,
  type NodeId,
} from '../../src/raft/core/index.js';

const decoder = new TextDecoder();
const encoder = new TextEncoder();
const key = (e: Entry): string => `${e.term}:${e.type}:${decoder.decode(e.data)}`;

interface SimNode {
  id: NodeId;
  storage: MemoryStorage;
  core: RawNode;
  applied: number;
  confState: ConfState;
  up: boolean;
}

class Cluster {
  readonly rng: SeededRandom;
  readonly nodes: SimNode[] = [];
  queue: Message[] = [];
  private group = new Map<NodeId, number>();
  private leaders = new Map<number, NodeId>();
  /** Committed (applied somewhere) entries by index. */
  readonly committed = new Map<number, string>();
  private proposals = 0;
  /** What the schedule exercised, to make sure the test does not silently test less. */
  readonly stats = { confChanges: 0, joint: 0, learners: 0, snapshots: 0, leaders: 0 };
  /** Answered read-index requests: the index must be committed eventually (checked at the end). */
  readonly readStates: { node: NodeId; index: number }[] = [];
  readonly seed: number;

  /** Whether membership changes are proposed at random. */
  readonly confChanges: boolean;

  /** `size` initial voters plus `spare` nodes that start outside the group (and may be added). */
  constructor(seed: number, size: number, spare: number, confChanges: boolean) {
    this.seed = seed;
    this.confChanges = confChanges;
    this.rng = new SeededRandom(seed);
    const voters = Array.from({ length: size }, (_, i) => i + 1);
    const cs: ConfState = { voters, learners: [], votersOutgoing: [], learnersNext: [], autoLeave: false };
    for (let id = 1; id <= size + spare; id++) {
      const member = id <= size;
      const storage = new MemoryStorage(member ? cs : undefined);
      if (member) {
        storage.applySnapshot({ metadata: { index: 1, term: 1, confState: cs }, data: new Uint8Array() });
        storage.setHardState({ term: 1, vote: 0, commit: 1 });
      }
      const n: SimNode = { id, storage, core: this.makeCore(id, storage), applied: member ? 1 : 0, confState: storage.initialState().confState, up: true };
      this.nodes.push(n);
    }
  }

  proposeConfChange(n: SimNode): void {
    const ids = this.nodes.map((x) => x.id);
    const pick = (): NodeId => ids[randomInt(this.rng, 0, ids.length)]!;
    const one = (): ConfChangeSingle => {
      const r = this.rng.next();
      return { type: r < 0.45 ? 'addNode' : r < 0.7 ? 'addLearner' : 'removeNode', nodeId: pick() };
    };
    const r = this.rng.next();
    const cc: ConfChange =
      r < 0.2
        ? { transition: 'explicit', changes: [] } // leave an explicit joint configuration
        : r < 0.6
          ? { transition: 'auto', changes: [one()] }
          : { transition: this.rng.next() < 0.5 ? 'auto' : 'explicit', changes: [one(), one()] };
    n.core.proposeConfChange(cc);
  }

  private makeCore(id: NodeId, storage: MemoryStorage, applied?: number): RawNode {
    return new RawNode({
      id,
      storage,
      applied,
      random: new SeededRandom(this.seed * 1000 + id),
      electionTick: 10,
      heartbeatTick: 2,
      maxSizePerMsg: 8,
      maxInflightMsgs: 4,
      maxUncommittedEntriesSize: 64,
    });
  }

  fail(msg: string): never {
    throw new Error(`seed ${this.seed}: ${msg}`);
  }

  node(id: NodeId): SimNode {
    return this.nodes[id - 1]!;
  }

  connected(a: NodeId, b: NodeId): boolean {
    return (this.group.get(a) ?? 0) === (this.group.get(b) ?? 0);
  }

  processReady(n: SimNode): void {
    while (n.core.hasReady()) {
      const rd = n.core.ready();
      if (rd.snapshot !== undefined) {
        n.storage.applySnapshot(rd.snapshot);
        this.stats.snapshots++;
      }
      n.storage.append(rd.entries);
      if (rd.hardState !== undefined) n.storage.setHardState(rd.hardState);
      if (rd.softState?.role === 'leader') this.checkNewLeader(n);
      this.queue.push(...rd.messages);
      if (rd.snapshot !== undefined) {
        n.applied = rd.snapshot.metadata.index;
        n.confState = rd.snapshot.metadata.confState;
      }
      for (const e of rd.committedEntries) {
        if (e.index !== n.applied + 1) this.fail(`node ${n.id} applies ${e.index} after ${n.applied} (ready: snap=${rd.snapshot?.metadata.index} committed=${rd.committedEntries.map((x) => x.index).join(',')} status=${JSON.stringify(n.core.status(), (k, v) => (v instanceof Map ? [...v] : v))})`);
        const seen = this.committed.get(e.index);
        if (seen !== undefined && seen !== key(e)) this.fail(`state machine safety at ${e.index}: ${key(e)} vs ${seen}`);
        this.committed.set(e.index, key(e));
        n.applied = e.index;
        if (e.type === 'confChange') {
          n.confState = n.core.applyConfChange(decodeConfChange(e.data));
          if (n.core.status().role === 'leader') {
            this.stats.confChanges++;
            if (n.confState.votersOutgoing.length > 0) this.stats.joint++;
            if (n.confState.learners.length > 0) this.stats.learners++;
          }
        }
      }
      for (const rs of rd.readStates) this.readStates.push({ node: n.id, index: rs.index });
      n.core.advance();
    }
  }

  /** Election Safety and Leader Completeness, when `n` has just become leader. */
  private checkNewLeader(n: SimNode): void {
    const s = n.core.status();
    const other = this.leaders.get(s.term);
    if (other !== undefined && other !== n.id) this.fail(`election safety: ${other} and ${n.id} lead term ${s.term}`);
    this.leaders.set(s.term, n.id);
    this.stats.leaders++;
    const log = n.core.internal.log;
    for (const [index, k] of this.committed) {
      if (index < log.firstIndex()) continue;
      const ents = index <= log.lastIndex() ? log.slice(index, index + 1) : [];
      if (ents.length === 0 || key(ents[0]!) !== k) this.fail(`leader completeness: leader ${n.id} of term ${s.term} lacks committed ${index}`);
    }
  }

  /** Log Matching: two logs with the same term at an index are identical up to it. */
  checkLogMatching(): void {
    const logs = this.nodes.map((n) => {
      const l = n.core.internal.log;
      const m = new Map<number, string>();
      for (const e of l.allEntries()) m.set(e.index, key(e));
      return { first: l.firstIndex(), last: l.lastIndex(), m, term: (i: number) => l.term(i) };
    });
    for (let a = 0; a < logs.length; a++) {
      for (let b = a + 1; b < logs.length; b++) {
        const la = logs[a]!;
        const lb = logs[b]!;
        const lo = Math.max(la.first, lb.first);
        const hi = Math.min(la.last, lb.last);
        let matchAt = 0;
        for (let i = hi; i >= lo; i--) {
          if (la.term(i) === lb.term(i)) {
            matchAt = i;
            break;
          }
        }
        for (let i = lo; i <= matchAt; i++) {
          if (la.m.get(i) !== lb.m.get(i)) this.fail(`log matching: nodes ${a + 1} and ${b + 1} agree at ${matchAt} but differ at ${i}`);
        }
      }
    }
  }

  deliverSome(reliable: boolean): void {
    const batch = this.queue;
    this.queue = [];
    // Reorder a little.
    if (!reliable) {
      for (let i = batch.length - 1; i > 0; i--) {
        if (this.rng.next() < 0.3) {
          const j = randomInt(this.rng, 0, i + 1);
          [batch[i], batch[j]] = [batch[j]!, batch[i]!];
        }
      }
    }
    for (const m of batch) {
      const r = this.rng.next();
      if (!reliable && r < 0.25 && r >= 0.1) {
        this.queue.push(m); // delayed to a later round
        continue;
      }
      const to = this.node(m.to);
      const lost = (!reliable && r < 0.1) || !to.up || !this.connected(m.from, m.to);
      // Snapshots go over a stream whose sender learns whether it arrived, as a real transport would.
      if (m.type === 'snap') {
        const from = this.node(m.from);
        if (from.up) from.core.reportSnapshot(m.to, lost ? 'failure' : 'finish');
      }
      if (lost) continue;
      to.core.step(m);
      if (!reliable && r > 0.97) to.core.step(m); // duplicated
    }
  }

  randomAction(): void {
    const r = this.rng.next();
    const n = this.nodes[randomInt(this.rng, 0, this.nodes.length)]!;
    if (r < 0.5) {
      for (const x of this.nodes) if (x.up) x.core.tick();
    } else if (r < 0.75) {
      this.deliverSome(false);
    } else if (r < 0.85) {
      if (!n.up) return;
      try {
        n.core.propose(encoder.encode(`p${this.proposals++}`));
      } catch (err) {
        if (!(err instanceof ProposalDroppedError)) throw err;
      }
    } else if (r < 0.88) {
      if (!n.up) return;
      try {
        n.core.readIndex(`r${this.proposals++}`);
      } catch (err) {
        if (!(err instanceof ProposalDroppedError)) throw err;
      }
    } else if (r < 0.9) {
      // partition: one random node cut off, or heal
      this.group.clear();
      if (this.rng.next() < 0.6) this.group.set(n.id, 1);
    } else if (r < 0.92) {
      this.restart(n);
    } else if (r < 0.93) {
      const to = randomInt(this.rng, 1, this.nodes.length + 1);
      try {
        if (n.up) n.core.transferLeadership(to);
      } catch (err) {
        if (!(err instanceof ProposalDroppedError)) throw err;
      }
    } else if (r < 0.95) {
      this.compact(n);
    } else if (r < 0.96) {
      n.up = !n.up;
      if (n.up) this.restart(n);
    } else if (r < 0.98 && this.confChanges && n.up) {
      try {
        this.proposeConfChange(n);
      } catch (err) {
        if (!(err instanceof ProposalDroppedError)) throw err;
      }
    }
    for (const x of this.nodes) if (x.up) this.processReady(x);
  }

  restart(n: SimNode): void {
    const snap = n.storage.snapshot();
    // The state machine restarts from the snapshot: entries after it are applied again.
    n.core = this.makeCore(n.id, n.storage, snap.metadata.index);
    n.applied = snap.metadata.index;
    n.confState = snap.metadata.confState;
    n.up = true;
  }

  compact(n: SimNode): void {
    const snapIndex = n.storage.snapshot().metadata.index;
    if (n.applied <= snapIndex) return;
    n.storage.createSnapshot(n.applied, n.confState, encoder.encode(`applied=${n.applied}`));
    // Keep a few entries so that not every lagging follower needs a snapshot.
    const upTo = Math.max(snapIndex + 1, n.applied - 3);
    if (upTo <= n.applied && upTo >= n.storage.firstIndex()) n.storage.compact(upTo);
  }

  /** Heals everything and runs a reliable network until a leader commits a new proposal. */
  recover(): void {
    this.group.clear();
    for (const n of this.nodes) if (!n.up) this.restart(n);
    const marker = `final-${this.seed}`;
    let proposed = false;
    for (let round = 0; round < 2000; round++) {
      for (const x of this.nodes) x.core.tick();
      for (let k = 0; k < 5; k++) {
        for (const x of this.nodes) this.processReady(x);
        this.deliverSome(true);
      }
      const leader = this.nodes.find((x) => x.core.status().role === 'leader');
      // A proposal taken by a leader that then lost leadership may be lost: propose again.
      if (leader !== undefined && (!proposed || (round % 50 === 0 && ![...this.tail(leader)].includes(marker)))) {
        try {
          leader.core.propose(encoder.encode(marker));
          proposed = true;
        } catch (err) {
          if (!(err instanceof ProposalDroppedError)) throw err;
        }
      }
      if (leader !== undefined && proposed) {
        // Every member of the leader's configuration has the marker applied.
        const cs = leader.core.status().config;
        const members = new Set([...cs.voters, ...cs.votersOutgoing, ...cs.learners]);
        if (this.nodes.every((x) => !members.has(x.id) || [...this.committedOn(x)].includes(marker))) return;
      }
    }
    const dump = this.nodes
      .map((x) => {
        const st = x.core.status();
        const l = x.core.internal.log;
        const prs = [...x.core.internal.tracker.progress].map(([id, pr]) => `${id}:${pr.describe()} active=${pr.recentActive}`).join('; ');
        return `${x.id}: ${st.role} term=${st.term} lead=${st.lead} commit=${st.commit} applied=${st.applied}/${x.applied} log=[${l.firstIndex()},${l.lastIndex()}] transferee=${st.leadTransferee} unc=${x.core.internal.uncommittedSize} ${prs}`;
      })
      .join('\n');
    this.fail(`no progress after healing (proposed=${proposed})\n${dump}`);
  }

  private *tail(n: SimNode): Iterable<string> {
    const l = n.core.internal.log;
    for (const e of l.slice(Math.max(l.firstIndex(), l.lastIndex() - 50), l.lastIndex() + 1)) yield decoder.decode(e.data);
  }

  private *committedOn(n: SimNode): Iterable<string> {
    const l = n.core.internal.log;
    for (let i = Math.max(l.firstIndex(), n.applied - 20); i <= n.applied; i++) {
      const e = l.slice(i, i + 1)[0];
      if (e !== undefined) yield decoder.decode(e.data);
    }
  }
}

describe('raft core under random schedules', () => {
  const seeds = Number(process.env.RAFT_RANDOM_SEEDS ?? '200');
  it(`keeps election safety, log matching, leader completeness and state machine safety (${seeds} seeds)`, () => {
    for (let seed = 1; seed <= seeds; seed++) {
      const c = new Cluster(seed, seed % 2 === 0 ? 3 : 5, 0, false);
      for (let step = 0; step < 600; step++) {
        c.randomAction();
        if (step % 50 === 0) c.checkLogMatching();
      }
      c.checkLogMatching();
      c.recover();
      c.checkLogMatching();
      expect(c.committed.size).toBeGreaterThan(0);
    }
  });

  it(`keeps them through membership changes, joint configurations and learners (${seeds} seeds)`, () => {
    const total = { confChanges: 0, joint: 0, learners: 0, snapshots: 0, leaders: 0 };
    for (let seed = 1; seed <= seeds; seed++) {
      const c = new Cluster(seed, 3, 2, true);
      for (let step = 0; step < 600; step++) {
        c.randomAction();
        if (step % 50 === 0) c.checkLogMatching();
      }
      c.checkLogMatching();
      c.recover();
      c.checkLogMatching();
      for (const k of Object.keys(total) as (keyof typeof total)[]) total[k] += c.stats[k];
    }
    expect(total.confChanges).toBeGreaterThan(seeds);
    expect(total.joint).toBeGreaterThan(seeds / 10);
    expect(total.learners).toBeGreaterThan(seeds / 10);
    expect(total.snapshots).toBeGreaterThan(seeds / 10);
    if (process.env.RAFT_RANDOM_STATS === '1') console.log(total);
  });
});
