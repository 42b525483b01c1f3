/**
 * Deterministic simulation of a Raft group: 3 or 5 cores (plus one spare node that membership
 * changes may add) on a virtual network that delays, drops, duplicates and reorders messages and
 * partitions nodes; nodes crash and restart with exactly what their Ready batches persisted;
 * membership changes, leadership transfers and log compaction happen during the faults; clients
 * write, read (ReadIndex) and compare-and-set keys of a small key-value state machine and the
 * history of invocations, responses and ambiguous outcomes is recorded.
 *
 * Checked at every Ready: Election Safety, Log Matching, Leader Completeness, State Machine Safety
 * (and that committed entries never change). At the end: linearizability of the history, key by
 * key. Time is virtual (ticks) and every choice comes from one SeededRandom: a seed replays exactly.
 */
import { randomInt, SeededRandom, type Random } from '../../../src/core/random.js';
import {
  decodeConfChange,
  MemoryStorage,
  NONE,
  ProposalDroppedError,
  RawNode,
  type ConfChange,
  type ConfChangeSingle,
  type ConfState,
  type Entry,
  type Message,
  type NodeId,
  type Ready,
} from '../../../src/raft/core/index.js';
import { decodeCommand, encodeCommand, KvState, type Command } from './kv.js';
import { checkHistory, describeCounterexample, describeOp, type KvOp, type Operation } from './linearizability.js';

export interface SimOptions {
  readonly seed: number;
  /** Initial voters: 3 or 5. */
  readonly nodes: number;
  /** Ticks with faults, then ticks of calm (healed, everyone up, no loss) before the final checks. */
  readonly faultTicks?: number;
  readonly calmTicks?: number;
  readonly clients?: number;
  readonly keys?: number;
  /**
   * Check the Raft safety properties at every step (default true). False leaves only the final
   * linearizability check, to measure what it catches on its own.
   */
  readonly stepChecks?: boolean;
}

export type ViolationKind =
  | 'election-safety'
  | 'log-matching'
  | 'leader-completeness'
  | 'state-machine-safety'
  | 'committed-entry-changed'
  | 'linearizability'
  | 'no-progress'
  | 'core-invariant'
  | 'exception';

export interface Violation {
  readonly kind: ViolationKind;
  readonly message: string;
  /** The report: seed, how to reproduce, a minimal trace, the non-linearizable part of the history. */
  readonly report: string;
}

export interface SimStats {
  ticks: number;
  leaders: number;
  crashes: number;
  partitions: number;
  confChanges: number;
  transfers: number;
  snapshotsSent: number;
  compactions: number;
  messages: number;
  dropped: number;
  duplicated: number;
  ops: number;
  completed: number;
  ambiguous: number;
  failed: number;
  reads: number;
  /** The calm phase ended without a write committing: no progress after healing. */
  stalled: number;
}

export interface SimResult {
  readonly seed: number;
  readonly nodes: number;
  readonly violation: Violation | undefined;
  readonly stats: SimStats;
  readonly history: readonly Operation[];
}

const decoder = new TextDecoder();
const entryKey = (e: Entry): string => `${e.term}:${e.type}:${decoder.decode(e.data)}`;

class SafetyViolation extends Error {
  readonly kind: ViolationKind;
  readonly nodes: readonly NodeId[];
  constructor(kind: ViolationKind, message: string, nodes: readonly NodeId[]) {
    super(message);
    this.kind = kind;
    this.nodes = nodes;
  }
}

interface TraceEvent {
  readonly tick: number;
  /** History clock when it happened, to cut the trace at a non-linearizable response. */
  readonly clock: number;
  readonly text: string;
  readonly nodes: readonly NodeId[];
  readonly key: string | undefined;
}

interface PendingOp {
  readonly index: number;
  readonly client: number;
  readonly kind: 'write' | 'cas' | 'read';
  readonly key: string;
  readonly node: NodeId;
  readonly deadline: number;
  readonly seq: number;
  readonly ctx: string;
}

interface SimNode {
  readonly id: NodeId;
  /** Durable storage: only what Ready batches said to persist. It survives a crash. */
  readonly storage: MemoryStorage;
  core: RawNode | undefined;
  incarnation: number;
  kv: KvState;
  applied: number;
  confState: ConfState;
  /** Commit index up to which committed terms were recorded. */
  commitSeen: number;
  /** Proposals this node took from a client, by `client.seq`. */
  pendingWrites: Map<string, number>;
  /** Read-index requests this node made, by context. */
  pendingReads: Map<string, number>;
  /** Confirmed reads waiting for the applied index to reach `index`. */
  readyReads: { index: number; ctx: string }[];
}

interface InFlight {
  readonly m: Message;
  readonly at: number;
  readonly seq: number;
  readonly fromIncarnation: number;
}

interface Client {
  readonly id: number;
  seq: number;
  current: PendingOp | undefined;
  nextAt: number;
}

export class Simulation {
  readonly seed: number;
  readonly size: number;
  private readonly rng: Random;
  private readonly nodes: SimNode[] = [];
  private readonly clients: Client[] = [];
  private readonly keys: string[];
  private readonly faultTicks: number;
  private readonly calmTicks: number;
  private now = 0;
  /** Logical time of history events: strictly increasing. */
  private clock = 0;
  private calm = false;
  private network: InFlight[] = [];
  private msgSeq = 0;
  /** Node -> partition group; unlisted nodes are in group 0. */
  private groups = new Map<NodeId, number>();
  private readonly trace: TraceEvent[] = [];
  private readonly history: Operation[] = [];
  /** Reads the client gave up on: without an answer they have no effect and leave the history. */
  private readonly abandoned = new Set<number>();
  /** Logical time when the calm phase began. */
  private calmStartClock = Number.POSITIVE_INFINITY;
  readonly stats: SimStats = {
    ticks: 0,
    leaders: 0,
    crashes: 0,
    partitions: 0,
    confChanges: 0,
    transfers: 0,
    snapshotsSent: 0,
    compactions: 0,
    messages: 0,
    dropped: 0,
    duplicated: 0,
    ops: 0,
    completed: 0,
    ambiguous: 0,
    failed: 0,
    reads: 0,
    stalled: 0,
  };

  // Fault intensity, drawn per seed.
  private readonly dropRate: number;
  private readonly dupRate: number;
  private readonly maxDelay: number;
  private readonly crashRate: number;
  private readonly partitionRate: number;
  private readonly confChangeRate: number;
  private readonly transferRate: number;
  private readonly preVote: boolean;
  private readonly checkQuorum: boolean;
  private readonly stepChecks: boolean;
  private readonly maxSizePerMsg: number;

  // Checker state.
  private readonly leaderOfTerm = new Map<number, NodeId>();
  /** (index:term) -> prevTerm:entryKey, for Log Matching. */
  private readonly logRegistry = new Map<string, string>();
  /** index -> term of the entry known committed there. */
  private readonly committedTerm = new Map<number, number>();
  /**
   * index -> the lowest term of a node that recorded it committed: the term of the leader that
   * committed it (a leader persists a commit index before any message carries it).
   */
  private readonly committedInTerm = new Map<number, number>();
  private maxCommitted = 0;
  /** index -> entry key applied there by anybody. */
  private readonly appliedAt = new Map<number, string>();

  constructor(options: SimOptions) {
    this.seed = options.seed;
    this.stepChecks = options.stepChecks ?? true;
    this.size = options.nodes;
    this.rng = new SeededRandom(options.seed);
    this.faultTicks = options.faultTicks ?? 300;
    this.calmTicks = options.calmTicks ?? 120;
    this.keys = Array.from({ length: options.keys ?? 2 }, (_, i) => `k${i}`);
    const pick = <T>(xs: readonly T[]): T => xs[randomInt(this.rng, 0, xs.length)]!;
    this.dropRate = pick([0, 0.02, 0.05, 0.1, 0.2]);
    this.dupRate = pick([0, 0.02, 0.05]);
    this.maxDelay = pick([1, 2, 4, 8]);
    this.crashRate = pick([0, 0.003, 0.01, 0.02]);
    this.partitionRate = pick([0, 0.005, 0.015]);
    this.confChangeRate = pick([0, 0.005, 0.02]);
    this.transferRate = pick([0, 0.005, 0.02]);
    this.preVote = this.rng.next() < 0.8;
    this.checkQuorum = this.rng.next() < 0.8;
    // 0: one entry per append, so a new leader's empty entry travels apart from older ones.
    this.maxSizePerMsg = pick([0, 100, 256, 1 << 20]);

    const voters = Array.from({ length: this.size }, (_, i) => i + 1);
    const cs: ConfState = { voters, learners: [], votersOutgoing: [], learnersNext: [], autoLeave: false };
    // The last node is a spare: outside the group until a membership change adds it.
    for (let id = 1; id <= this.size + 1; id++) {
      const member = id <= this.size;
      const storage = new MemoryStorage(member ? cs : undefined);
      if (member) {
        // Bootstrap at index 1 so that a node added later is caught up by a snapshot that
        // carries the membership (see RawNode's constructor).
        storage.applySnapshot({ metadata: { index: 1, term: 1, confState: cs }, data: new Uint8Array() });
        storage.setHardState({ term: 1, vote: NONE, commit: 1 });
      }
      const n: SimNode = {
        id,
        storage,
        core: undefined,
        incarnation: 0,
        kv: new KvState(),
        applied: 0,
        confState: storage.initialState().confState,
        commitSeen: 0,
        pendingWrites: new Map(),
        pendingReads: new Map(),
        readyReads: [],
      };
      this.nodes.push(n);
      this.start(n);
    }
    for (let c = 1; c <= (options.clients ?? 3); c++) this.clients.push({ id: c, seq: 0, current: undefined, nextAt: randomInt(this.rng, 0, 20) });
  }

  // ------------------------------------------------------------------ running

  run(): SimResult {
    let violation: Violation | undefined;
    try {
      for (this.now = 1; this.now <= this.faultTicks + this.calmTicks; this.now++) {
        if (this.now === this.faultTicks + 1) this.becomeCalm();
        this.tickOnce();
      }
      this.finish();
      this.checkLinearizable();
    } catch (err) {
      violation = this.toViolation(err);
    }
    this.stats.ticks = this.now;
    return { seed: this.seed, nodes: this.size, violation, stats: this.stats, history: this.history.filter((o) => !this.abandoned.has(o.id)) };
  }

  private tickOnce(): void {
    if (!this.calm) this.faults();
    for (const n of this.nodes) n.core?.tick();
    this.drain();
    this.clientsAct();
    this.drain();
    this.maybeCompact();
  }

  /** Delivers due messages and handles Readies until nothing is left for this tick. */
  private drain(): void {
    for (let round = 0; round < 1000; round++) {
      let progress = false;
      for (const n of this.nodes) {
        while (n.core?.hasReady() === true) {
          this.handleReady(n);
          progress = true;
        }
      }
      const due = this.network.filter((f) => f.at <= this.now);
      if (due.length > 0) {
        this.network = this.network.filter((f) => f.at > this.now);
        due.sort((a, b) => a.at - b.at || a.seq - b.seq);
        for (const f of due) this.deliver(f);
        progress = true;
      }
      if (!progress) return;
    }
    throw new Error('drain: no quiescence within a tick');
  }

  private becomeCalm(): void {
    this.calm = true;
    this.calmStartClock = this.clock;
    this.groups.clear();
    this.event('calm: network healed, every node restarted, no more loss', []);
    for (const n of this.nodes) if (n.core === undefined) this.restart(n);
  }

  // ------------------------------------------------------------------ nodes

  private start(n: SimNode): void {
    const snap = n.storage.snapshot();
    n.kv = KvState.decode(snap.data);
    n.applied = snap.metadata.index;
    n.confState = snap.metadata.confState;
    n.pendingWrites = new Map();
    n.pendingReads = new Map();
    n.readyReads = [];
    n.commitSeen = Math.max(n.commitSeen, snap.metadata.index);
    n.core = new RawNode({
      id: n.id,
      storage: n.storage,
      // The state machine restarts from the snapshot; committed entries after it are replayed.
      applied: n.applied,
      random: new SeededRandom(this.seed * 7919 + n.id * 104729 + n.incarnation),
      electionTick: 10,
      heartbeatTick: 2,
      maxSizePerMsg: this.maxSizePerMsg,
      maxInflightMsgs: 4,
      maxUncommittedEntriesSize: 4096,
      preVote: this.preVote,
      checkQuorum: this.checkQuorum,
    });
  }

  private crash(n: SimNode, why: string): void {
    n.core = undefined;
    n.incarnation++;
    this.stats.crashes++;
    // Client requests held by the node are lost with it; the clients time out.
    this.event(`n${n.id} crashes (${why}); keeps term/vote/commit ${fmtHard(n.storage)}, log ${n.storage.firstIndex()}..${n.storage.lastIndex()}`, [n.id]);
  }

  private restart(n: SimNode): void {
    this.start(n);
    const s = n.core!.status();
    this.event(`n${n.id} restarts at term ${s.term} vote ${s.vote} commit ${s.commit} applied ${n.applied}`, [n.id]);
  }

  private up(): SimNode[] {
    return this.nodes.filter((n) => n.core !== undefined);
  }

  private leader(): SimNode | undefined {
    let best: SimNode | undefined;
    let term = -1;
    for (const n of this.nodes) {
      const r = n.core?.internal;
      if (r !== undefined && r.role === 'leader' && r.term > term) {
        best = n;
        term = r.term;
      }
    }
    return best;
  }

  // ------------------------------------------------------------------ Ready

  private handleReady(n: SimNode): void {
    const core = n.core!;
    const rd = core.ready();
    const term = core.internal.term;
    // A leader alone a quorum that a vote request moves to a higher term is elected again within
    // the same step: its role never shows a change, only its term does. Check it as a new leader.
    const reelected = rd.softState === undefined && core.internal.role === 'leader' && rd.hardState !== undefined && rd.hardState.term !== n.storage.initialState().hardState.term;
    if ((rd.softState !== undefined && rd.softState.role === 'leader') || reelected) this.checkNewLeader(n, term);
    else if (rd.softState !== undefined) this.event(`n${n.id} is ${rd.softState.role} at term ${term}, leader ${rd.softState.lead}`, [n.id]);

    // 1. Persist: snapshot, entries, hard state.
    if (rd.snapshot !== undefined) n.storage.applySnapshot(rd.snapshot);
    this.checkLogMatching(n, rd);
    n.storage.append(rd.entries);
    if (rd.hardState !== undefined) {
      n.storage.setHardState(rd.hardState);
      this.recordCommitted(n, rd.hardState.commit);
    }
    // A crash between persisting and sending: what was persisted stays, nothing was sent.
    if (!this.calm && this.crashRate > 0 && this.rng.next() < this.crashRate / 10) {
      this.crash(n, 'after persisting a Ready, before sending its messages');
      return;
    }
    // 2. Send.
    for (const m of rd.messages) this.send(n, m);
    // 3. Apply.
    if (rd.snapshot !== undefined) {
      n.kv = KvState.decode(rd.snapshot.data);
      n.applied = rd.snapshot.metadata.index;
      n.confState = rd.snapshot.metadata.confState;
      this.event(`n${n.id} installs snapshot at ${rd.snapshot.metadata.index} term ${rd.snapshot.metadata.term}`, [n.id]);
    }
    for (const e of rd.committedEntries) this.apply(n, e);
    core.advance();
    // 4. Reads.
    for (const rs of rd.readStates) {
      if (n.pendingReads.has(rs.context)) n.readyReads.push({ index: rs.index, ctx: rs.context });
    }
    this.serveReads(n);
  }

  private apply(n: SimNode, e: Entry): void {
    const k = entryKey(e);
    const seen = this.appliedAt.get(e.index);
    if (this.stepChecks && seen !== undefined && seen !== k) {
      throw new SafetyViolation('state-machine-safety', `n${n.id} applies ${k} at index ${e.index}, another node applied ${seen} there`, [n.id]);
    }
    this.appliedAt.set(e.index, k);
    n.applied = e.index;
    if (e.type === 'confChange') {
      const cc = decodeConfChange(e.data);
      n.confState = n.core!.applyConfChange(cc);
      this.event(`n${n.id} applies conf change at ${e.index}: ${fmtConf(n.confState)}`, [n.id]);
      return;
    }
    if (e.data.byteLength === 0) return;
    const c = decodeCommand(e.data);
    const out = n.kv.apply(c);
    const id = `${c.client}.${c.seq}`;
    const opIndex = n.pendingWrites.get(id);
    if (opIndex === undefined) return;
    n.pendingWrites.delete(id);
    const client = this.clients[c.client - 1]!;
    if (client.current?.index !== opIndex || out.result === undefined) return;
    this.complete(client, out.result, `n${n.id} applied it at ${e.index}${out.applied ? '' : ' (duplicate)'}`);
  }

  private serveReads(n: SimNode): void {
    if (n.readyReads.length === 0) return;
    const keep: { index: number; ctx: string }[] = [];
    for (const r of n.readyReads) {
      if (r.index > n.applied) {
        keep.push(r);
        continue;
      }
      const opIndex = n.pendingReads.get(r.ctx);
      n.pendingReads.delete(r.ctx);
      if (opIndex === undefined) continue;
      const op = this.history[opIndex]!;
      const client = this.clients[op.client - 1]!;
      if (client.current?.index !== opIndex) continue;
      this.complete(client, n.kv.get(op.key), `n${n.id} read index ${r.index}, applied ${n.applied}`);
    }
    n.readyReads = keep;
  }

  // ------------------------------------------------------------------ network

  private send(from: SimNode, m: Message): void {
    this.stats.messages++;
    if (!this.calm && this.rng.next() < this.dropRate) {
      this.lost(from.incarnation, m, 'dropped');
      return;
    }
    const copies = !this.calm && this.rng.next() < this.dupRate ? 2 : 1;
    if (copies === 2) this.stats.duplicated++;
    for (let i = 0; i < copies; i++) {
      // Mostly short delays, sometimes long ones: messages overtake each other.
      const long = !this.calm && this.rng.next() < 0.03;
      // Calm: a fast network, so that the group settles well within an election timeout.
      const max = this.calm ? 1 : this.maxDelay;
      const delay = long ? randomInt(this.rng, this.maxDelay, 6 * this.maxDelay + 10) : randomInt(this.rng, 0, max + 1);
      this.network.push({ m, at: this.now + delay, seq: this.msgSeq++, fromIncarnation: from.incarnation });
    }
    if (m.type === 'snap') this.stats.snapshotsSent++;
  }

  private connected(a: NodeId, b: NodeId): boolean {
    return (this.groups.get(a) ?? 0) === (this.groups.get(b) ?? 0);
  }

  private deliver(f: InFlight): void {
    const m = f.m;
    const to = this.nodes[m.to - 1];
    if (to?.core === undefined) {
      this.lost(f.fromIncarnation, m, 'to a node that is down');
      return;
    }
    if (!this.connected(m.from, m.to)) {
      this.lost(f.fromIncarnation, m, 'partitioned');
      return;
    }
    if (m.type === 'vote' || m.type === 'voteResp' || m.type === 'timeoutNow' || m.type === 'snap') {
      this.event(`deliver ${fmtMsg(m)}`, [m.from, m.to]);
    }
    to.core.step(m);
    if (m.type === 'snap') this.reportToSender(f.fromIncarnation, m, 'finish');
  }

  /** A lost message. The transport tells the sender when it was a snapshot, and sometimes that the peer is unreachable. */
  private lost(fromIncarnation: number, m: Message, why: string): void {
    this.stats.dropped++;
    if (m.type === 'snap') {
      this.event(`snapshot ${m.from}->${m.to} lost (${why})`, [m.from, m.to]);
      this.reportToSender(fromIncarnation, m, 'failure');
    } else if (why === 'partitioned' && this.rng.next() < 0.3) {
      const from = this.nodes[m.from - 1];
      if (from?.core !== undefined && from.incarnation === fromIncarnation) from.core.reportUnreachable(m.to);
    }
  }

  private reportToSender(fromIncarnation: number, m: Message, status: 'finish' | 'failure'): void {
    const from = this.nodes[m.from - 1];
    if (from?.core !== undefined && from.incarnation === fromIncarnation) from.core.reportSnapshot(m.to, status);
  }

  // ------------------------------------------------------------------ faults

  private faults(): void {
    const r = this.rng;
    if (this.partitionRate > 0) {
      if (this.groups.size === 0 && r.next() < this.partitionRate) this.partition();
      else if (this.groups.size > 0 && r.next() < 0.04) {
        this.groups.clear();
        this.event('partition healed', []);
      }
    }
    if (this.crashRate > 0) {
      for (const n of this.nodes) {
        if (n.core !== undefined && r.next() < this.crashRate) this.crash(n, 'at random');
        else if (n.core === undefined && r.next() < 0.08) this.restart(n);
      }
    }
    const lead = this.leader();
    if (lead !== undefined && this.confChangeRate > 0 && r.next() < this.confChangeRate) this.proposeConfChange(lead);
    if (lead !== undefined && this.transferRate > 0 && r.next() < this.transferRate) {
      const voters = lead.core!.status().config.voters;
      const to = voters[randomInt(r, 0, voters.length)]!;
      try {
        lead.core!.transferLeadership(to);
        this.stats.transfers++;
        this.event(`n${lead.id} asked to transfer leadership to n${to}`, [lead.id, to]);
      } catch (err) {
        if (!(err instanceof ProposalDroppedError)) throw err;
      }
    }
  }

  private partition(): void {
    const ids = this.nodes.map((n) => n.id);
    const r = this.rng.next();
    if (r < 0.5) {
      // Isolate one node (often the leader).
      const lead = this.leader();
      const victim = lead !== undefined && this.rng.next() < 0.6 ? lead.id : ids[randomInt(this.rng, 0, ids.length)]!;
      this.groups.set(victim, 1);
    } else {
      for (const id of ids) if (this.rng.next() < 0.5) this.groups.set(id, 1);
    }
    this.stats.partitions++;
    const side = [...this.groups.keys()].sort((a, b) => a - b);
    this.event(`partition: {${side.join(',')}} | {${ids.filter((i) => !this.groups.has(i)).join(',')}}`, []);
  }

  private proposeConfChange(lead: SimNode): void {
    const ids = this.nodes.map((n) => n.id);
    const pick = (): NodeId => ids[randomInt(this.rng, 0, ids.length)]!;
    const one = (): ConfChangeSingle => {
      const r = this.rng.next();
      return { type: r < 0.45 ? 'addNode' : r < 0.7 ? 'addLearner' : 'removeNode', nodeId: pick() };
    };
    const r = this.rng.next();
    const cc: ConfChange =
      r < 0.15
        ? { transition: 'explicit', changes: [] }
        : r < 0.65
          ? { transition: 'auto', changes: [one()] }
          : { transition: this.rng.next() < 0.6 ? 'auto' : 'explicit', changes: [one(), one()] };
    try {
      lead.core!.proposeConfChange(cc);
      this.stats.confChanges++;
      const body = cc.changes.length === 0 ? 'leave-joint' : cc.changes.map((c) => `${c.type} ${c.nodeId}`).join(', ');
      this.event(`n${lead.id} proposes conf change ${body} (${cc.transition})`, [lead.id]);
    } catch (err) {
      if (!(err instanceof ProposalDroppedError)) throw err;
    }
  }

  private maybeCompact(): void {
    for (const n of this.nodes) {
      if (n.core === undefined) continue;
      const snapIndex = n.storage.snapshot().metadata.index;
      if (n.applied - snapIndex < 12 || this.rng.next() > 0.2) continue;
      n.storage.createSnapshot(n.applied, n.confState, n.kv.encode());
      const to = n.applied - randomInt(this.rng, 0, 4);
      if (to > n.storage.firstIndex() - 1) n.storage.compact(to);
      this.stats.compactions++;
    }
  }

  // ------------------------------------------------------------------ clients

  private clientsAct(): void {
    const stopInvoking = this.now > this.faultTicks + this.calmTicks - 40;
    for (const c of this.clients) {
      const cur = c.current;
      if (cur !== undefined && this.now >= cur.deadline) {
        // No answer in time: the client gives up; a write or CAS may still take effect later.
        const op = this.history[cur.index]!;
        if (cur.kind === 'read') {
          this.abandoned.add(cur.index);
          this.event(`client ${c.id} gives up on ${describeOp(op)} (a read without an answer has no effect)`, [cur.node], cur.key);
        } else {
          this.stats.ambiguous++;
          this.event(`client ${c.id} times out: ${describeOp(op)} is ambiguous`, [cur.node], cur.key);
        }
        c.current = undefined;
        c.nextAt = this.now + randomInt(this.rng, 0, 5);
      }
      if (c.current !== undefined || this.now < c.nextAt || stopInvoking) continue;
      this.invoke(c);
    }
  }

  private invoke(c: Client): void {
    const up = this.up();
    if (up.length === 0) return;
    const lead = this.leader();
    const n = lead !== undefined && this.rng.next() < 0.7 ? lead : up[randomInt(this.rng, 0, up.length)]!;
    const key = this.keys[randomInt(this.rng, 0, this.keys.length)]!;
    const r = this.rng.next();
    c.seq++;
    const seq = c.seq;
    const value = c.id * 100_000 + seq;
    let op: KvOp;
    if (r < 0.4) op = { kind: 'read' };
    else if (r < 0.75) op = { kind: 'write', value };
    else {
      // Compare against a value the key may well hold: the current one at some node.
      const expected = n.kv.get(key);
      op = { kind: 'cas', expected, value };
    }
    const index = this.history.length;
    const ctx = `c${c.id}.${seq}`;
    const call = ++this.clock;
    const entry: Operation = { id: index, client: c.id, key, op, output: undefined, call, ret: undefined };
    const core = n.core!;
    try {
      if (op.kind === 'read') {
        core.readIndex(ctx);
        n.pendingReads.set(ctx, index);
      } else {
        const cmd: Command =
          op.kind === 'write' ? { client: c.id, seq, key, kind: 'write', value } : { client: c.id, seq, key, kind: 'cas', expected: op.expected, value };
        core.propose(encodeCommand(cmd));
        n.pendingWrites.set(`${c.id}.${seq}`, index);
      }
    } catch (err) {
      if (!(err instanceof ProposalDroppedError)) throw err;
      // Refused at once: nothing was written anywhere; the operation did not happen.
      this.stats.failed++;
      this.event(`client ${c.id} ${op.kind} ${key} via n${n.id} refused: ${err.reason}`, [n.id], key);
      c.nextAt = this.now + randomInt(this.rng, 1, 6);
      return;
    }
    this.history.push(entry);
    this.stats.ops++;
    if (op.kind === 'read') this.stats.reads++;
    c.current = { index, client: c.id, kind: op.kind, key, node: n.id, deadline: this.now + 40, seq, ctx };
    this.event(`client ${c.id} invokes ${describeOp(entry)} via n${n.id}`, [n.id], key);
  }

  private complete(c: Client, output: number | boolean, how: string): void {
    const cur = c.current!;
    const op = this.history[cur.index]!;
    const done: Operation = { ...op, output, ret: ++this.clock };
    this.history[cur.index] = done;
    this.stats.completed++;
    c.current = undefined;
    c.nextAt = this.now + randomInt(this.rng, 0, 4);
    this.event(`client ${c.id} completes ${describeOp(done)} (${how})`, [cur.node], cur.key);
  }

  /** End of the run: operations still pending are ambiguous; check that the calm phase made progress. */
  private finish(): void {
    for (const c of this.clients) {
      const cur = c.current;
      if (cur === undefined) continue;
      if (cur.kind === 'read') this.abandoned.add(cur.index);
      else this.stats.ambiguous++;
      c.current = undefined;
    }
    // Liveness: once healed, with every node up and no loss, some write completes. (A core that
    // never commits would otherwise pass every safety check.)
    const progressed = this.history.some((o) => o.op.kind !== 'read' && o.ret !== undefined && o.ret > this.calmStartClock);
    if (!progressed) {
      this.stats.stalled++;
      const err = new SafetyViolation('no-progress', `no write completed in the ${this.calmTicks} calm ticks after healing`, []);
      // What each node believes at the end: a stall is read off these (who can campaign, whose log wins).
      (err as SafetyViolation & { details?: string[] }).details = ['nodes at the end:', ...this.nodes.map((n) => `  ${describeNode(n)}`)];
      throw err;
    }
  }

  // ------------------------------------------------------------------ checks

  private checkNewLeader(n: SimNode, term: number): void {
    this.stats.leaders++;
    const log = n.core!.internal.log;
    const first = log.firstIndex();
    this.event(`n${n.id} becomes leader of term ${term} (log ${first}..${log.lastIndex()}, commit ${log.committed})`, [n.id]);
    const other = this.leaderOfTerm.get(term);
    if (!this.stepChecks) return;
    if (other !== undefined && other !== n.id) {
      throw new SafetyViolation('election-safety', `n${n.id} and n${other} are both leader of term ${term}`, [n.id, other]);
    }
    this.leaderOfTerm.set(term, n.id);
    // Leader Completeness: every entry known committed is in the new leader's log.
    for (let i = Math.max(first, 1); i <= this.maxCommitted; i++) {
      const want = this.committedTerm.get(i);
      // Leader Completeness is about leaders of later terms than the one the entry committed in:
      // a candidate of an older term can still win it (its voters had not yet seen the newer
      // one) after a newer leader committed, and lack that entry; it can commit nothing.
      if (want === undefined || (this.committedInTerm.get(i) ?? 0) >= term) continue;
      const have = log.term(i);
      if (have !== want) {
        throw new SafetyViolation(
          'leader-completeness',
          `n${n.id} leads term ${term} but its log has ${have === undefined ? 'no entry' : `term ${have}`} at index ${i}, where an entry of term ${want} is committed (its log ends at ${log.lastIndex()})`,
          [n.id],
        );
      }
    }
  }

  /** Log Matching: an entry with the same index and term is the same entry with the same predecessor term. */
  private checkLogMatching(n: SimNode, rd: Ready): void {
    if (!this.stepChecks) return;
    const log = n.core!.internal.log;
    let prevTerm: number | undefined;
    for (const e of rd.entries) {
      const pt = prevTerm ?? (e.index - 1 >= log.firstIndex() - 1 ? log.term(e.index - 1) : undefined);
      prevTerm = e.term;
      if (pt === undefined) continue;
      const k = `${e.index}:${e.term}`;
      const v = `${pt}:${entryKey(e)}`;
      const seen = this.logRegistry.get(k);
      if (seen === undefined) this.logRegistry.set(k, v);
      else if (seen !== v) {
        throw new SafetyViolation('log-matching', `n${n.id} persists at ${e.index} term ${e.term} the entry ${v} (prev term:entry), another log has ${seen} with the same index and term`, [n.id]);
      }
    }
  }

  private recordCommitted(n: SimNode, commit: number): void {
    if (commit <= n.commitSeen || !this.stepChecks) return;
    const log = n.core!.internal.log;
    for (let i = Math.max(n.commitSeen + 1, log.firstIndex()); i <= commit; i++) {
      const t = log.term(i);
      if (t === undefined) continue;
      const known = this.committedTerm.get(i);
      if (known !== undefined && known !== t) {
        throw new SafetyViolation('committed-entry-changed', `n${n.id} has term ${t} at committed index ${i}, where an entry of term ${known} was committed`, [n.id]);
      }
      this.committedTerm.set(i, t);
      const inTerm = n.core!.internal.term;
      if (inTerm < (this.committedInTerm.get(i) ?? Number.POSITIVE_INFINITY)) this.committedInTerm.set(i, inTerm);
    }
    n.commitSeen = commit;
    if (commit > this.maxCommitted) this.maxCommitted = commit;
  }

  private checkLinearizable(): void {
    const ops = this.history.filter((o) => !this.abandoned.has(o.id));
    const result = checkHistory(ops);
    if (result.ok) return;
    const c = result.counterexamples[0]!;
    const err = new SafetyViolation('linearizability', `the history of key ${c.key} is not linearizable`, []);
    (err as SafetyViolation & { details?: string[]; key?: string }).details = describeCounterexample(c);
    (err as SafetyViolation & { key?: string }).key = c.key;
    (err as SafetyViolation & { until?: number }).until = c.blocked.ret;
    throw err;
  }

  // ------------------------------------------------------------------ trace and report

  private event(text: string, nodes: readonly NodeId[], key?: string): void {
    this.trace.push({ tick: this.now, clock: this.clock, text, nodes, key });
    if (this.trace.length > 20_000) this.trace.splice(0, 10_000);
  }

  private toViolation(err: unknown): Violation {
    let kind: ViolationKind;
    let message: string;
    let nodes: readonly NodeId[] = [];
    let details: string[] = [];
    let key: string | undefined;
    let until = Number.POSITIVE_INFINITY;
    if (err instanceof SafetyViolation) {
      kind = err.kind;
      message = err.message;
      nodes = err.nodes;
      const extra = err as SafetyViolation & { details?: string[]; key?: string };
      details = extra.details ?? [];
      key = extra.key;
      until = (err as SafetyViolation & { until?: number }).until ?? until;
    } else if (err instanceof Error && (err as { code?: string }).code === 'INVARIANT_VIOLATED') {
      kind = 'core-invariant';
      message = err.message;
    } else {
      kind = 'exception';
      message = err instanceof Error ? `${err.message}\n${err.stack ?? ''}` : String(err);
    }
    const relevant = this.trace.filter((e) => {
      if (e.clock > until) return false; // after the response that could not be placed
      if (key !== undefined) return e.key === key || (e.key === undefined && /leader|crash|restart|partition|calm|snapshot/.test(e.text));
      if (e.key !== undefined) return false; // client events matter to linearizability only
      if (nodes.length === 0) return true;
      return e.nodes.length === 0 || e.nodes.some((id) => nodes.includes(id)) || /leader|partition|calm/.test(e.text);
    });
    const tail = relevant.slice(key !== undefined ? -60 : -30);
    const lines = [
      `VIOLATION seed ${this.seed} (${this.size} nodes, tick ${this.now}): ${kind}: ${message}`,
      `reproduce: npx tsx test/sim/raft/cli.ts --seeds 1 --from ${this.seed} --nodes ${this.size}`,
      `faults: drop ${this.dropRate}, duplicate ${this.dupRate}, delay ≤ ${this.maxDelay}, crash ${this.crashRate}, max append ${this.maxSizePerMsg} B, partition ${this.partitionRate}, conf change ${this.confChangeRate}, transfer ${this.transferRate}, preVote ${this.preVote}, checkQuorum ${this.checkQuorum}`,
      `trace (last ${tail.length} relevant events):`,
      ...tail.map((e) => `  t=${e.tick} ${e.text}`),
      ...details,
    ];
    return { kind, message, report: lines.join('\n') };
  }
}

function describeNode(n: SimNode): string {
  if (n.core === undefined) return `n${n.id} down`;
  const st = n.core.status();
  const c = st.config;
  const conf = `voters ${c.voters.join(',')}${c.votersOutgoing.length > 0 ? ` & ${c.votersOutgoing.join(',')}` : ''}${c.learners.length > 0 ? ` learners ${c.learners.join(',')}` : ''}`;
  return `n${n.id} ${st.role} term ${st.term} vote ${st.vote === NONE ? '-' : st.vote} lead ${st.lead === NONE ? '-' : st.lead} commit ${st.commit} last ${n.storage.lastIndex()} ${conf}`;
}

function fmtMsg(m: Message): string {
  let s = `${m.from}->${m.to} ${m.type} term ${m.term}`;
  if (m.type === 'vote') s += ` last ${m.logTerm}/${m.index}${m.context === undefined ? '' : ` (${m.context})`}`;
  if (m.type === 'voteResp') s += m.reject ? ' rejected' : ' granted';
  if (m.type === 'snap' && m.snapshot !== undefined) s += ` at ${m.snapshot.metadata.index}/${m.snapshot.metadata.term}`;
  return s;
}

function fmtHard(s: MemoryStorage): string {
  const h = s.initialState().hardState;
  return `${h.term}/${h.vote === NONE ? '-' : h.vote}/${h.commit}`;
}

function fmtConf(cs: ConfState): string {
  let s = `voters (${cs.voters.join(' ')})`;
  if (cs.votersOutgoing.length > 0) s += ` && (${cs.votersOutgoing.join(' ')})`;
  if (cs.learners.length > 0) s += ` learners (${cs.learners.join(' ')})`;
  if (cs.learnersNext.length > 0) s += ` learners-next (${cs.learnersNext.join(' ')})`;
  return s;
}

/** Runs one seed. The same options give the same result, event for event. */
export function runSeed(options: SimOptions): SimResult {
  return new Simulation(options).run();
}
