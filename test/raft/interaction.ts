/**
 * An interaction environment for Raft scenarios: a few RawNodes over in-memory storage and a
 * network queue the scenario controls. Each command returns the text it prints; the datadriven
 * runner compares that with the expected text in test/raft/testdata.
 *
 * While it runs it checks Election Safety (one leader per term) and State Machine Safety (no two
 * nodes apply different entries at one index); a violation throws.
 */
import { SeededRandom } from '../../src/core/random.js';
import {
  decodeConfChange,
  MemoryStorage,
  NONE,
  ProposalDroppedError,
  RawNode,
  type ConfChangeSingle,
  type ConfChangeTransition,
  type ConfState,
  type Entry,
  type Message,
  type NodeId,
  type RaftConfig,
  type Ready,
  type Snapshot,
} from '../../src/raft/core/index.js';

const decoder = new TextDecoder();
const encoder = new TextEncoder();

export interface Command {
  name: string;
  /** Positional arguments. */
  args: string[];
  /** key=value arguments. */
  kv: Map<string, string>;
}

export function parseCommand(line: string): Command {
  const [name, ...rest] = line.trim().split(/\s+/);
  const args: string[] = [];
  const kv = new Map<string, string>();
  for (const r of rest) {
    const eq = r.indexOf('=');
    if (eq > 0) kv.set(r.slice(0, eq), r.slice(eq + 1));
    else args.push(r);
  }
  return { name: name ?? '', args, kv };
}

interface NodeOptions {
  electionTick: number;
  heartbeatTick: number;
  preVote: boolean;
  checkQuorum: boolean;
  maxSizePerMsg: number | undefined;
  maxInflightMsgs: number | undefined;
  maxUncommittedEntriesSize: number | undefined;
  readOnlyOption: 'safe' | 'leaseBased';
  maxPendingReadIndex: number | undefined;
}

/**
 * MemoryStorage whose snapshot is always taken at the node's applied index, as an application that
 * snapshots on demand would do; so a new member gets a snapshot that includes it.
 */
class EnvStorage extends MemoryStorage {
  source: (() => { applied: number; confState: ConfState }) | undefined = undefined;

  /** The snapshot actually stored (what survives a restart). */
  storedSnapshot(): Snapshot {
    return super.snapshot();
  }

  override snapshot(): Snapshot {
    const base = super.snapshot();
    const s = this.source?.();
    if (s === undefined || s.applied <= base.metadata.index) return base;
    return {
      metadata: { index: s.applied, term: this.term(s.applied), confState: s.confState },
      data: encoder.encode(`applied=${s.applied}`),
    };
  }
}

interface EnvNode {
  id: NodeId;
  storage: EnvStorage;
  core: RawNode;
  options: NodeOptions;
  /** Configuration as of the applied index (for snapshots). */
  confState: ConfState;
  applied: number;
}

const fmtIds = (ids: readonly NodeId[]): string => `(${ids.join(' ')})`;

export function fmtConfState(cs: ConfState): string {
  let s = `voters=${fmtIds(cs.voters)}`;
  if (cs.votersOutgoing.length > 0) s += `&&${fmtIds(cs.votersOutgoing)}`;
  if (cs.learners.length > 0) s += ` learners=${fmtIds(cs.learners)}`;
  if (cs.learnersNext.length > 0) s += ` learners_next=${fmtIds(cs.learnersNext)}`;
  if (cs.autoLeave) s += ' autoleave';
  return s;
}

function fmtChange(c: ConfChangeSingle): string {
  const k = c.type === 'addNode' ? 'v' : c.type === 'addLearner' ? 'l' : 'r';
  return `${k}${c.nodeId}`;
}

export function fmtEntry(e: Entry): string {
  if (e.type === 'confChange') {
    const cc = decodeConfChange(e.data);
    const body = cc.changes.length === 0 ? 'leave-joint' : cc.changes.map(fmtChange).join(' ');
    return `${e.term}/${e.index} conf(${body}${cc.transition === 'auto' ? '' : ' ' + cc.transition})`;
  }
  if (e.data.byteLength === 0) return `${e.term}/${e.index} empty`;
  return `${e.term}/${e.index} "${decoder.decode(e.data)}"`;
}

function fmtSnapshot(s: Snapshot): string {
  return `index=${s.metadata.index} term=${s.metadata.term} ${fmtConfState(s.metadata.confState)}`;
}

export function fmtMessage(m: Message): string {
  let s = `${m.from}->${m.to} ${m.type} term=${m.term}`;
  switch (m.type) {
    case 'app':
      s += ` log=${m.logTerm}/${m.index} commit=${m.commit}`;
      if (m.entries.length > 0) s += ` entries=[${m.entries.map(fmtEntry).join(', ')}]`;
      break;
    case 'appResp':
      s += m.reject ? ` rejected index=${m.index} hint=${m.logTerm}/${m.rejectHint}` : ` index=${m.index}`;
      break;
    case 'vote':
    case 'preVote':
      s += ` log=${m.logTerm}/${m.index}`;
      if (m.context !== undefined) s += ` ${m.context}`;
      break;
    case 'voteResp':
    case 'preVoteResp':
      s += m.reject ? ' rejected' : ' granted';
      break;
    case 'heartbeat':
      s += ` commit=${m.commit}`;
      if (m.context !== undefined) s += ` ctx=${m.context}`;
      break;
    case 'heartbeatResp':
      if (m.context !== undefined) s += ` ctx=${m.context}`;
      break;
    case 'snap':
      if (m.snapshot !== undefined) s += ` snapshot{${fmtSnapshot(m.snapshot)}}`;
      break;
    case 'readIndex':
      s += ` ctx=${m.context ?? ''}`;
      break;
    case 'transferLeader':
      s += ` to=${m.transferee ?? 0}`;
      break;
    case 'readIndexResp':
      s += ` index=${m.index} ctx=${m.context ?? ''}`;
      break;
    case 'prop':
      s += ` entries=[${m.entries.map(fmtEntry).join(', ')}]`;
      break;
    default:
      break;
  }
  return s;
}

function parseIds(v: string | undefined): NodeId[] {
  if (v === undefined || v === '') return [];
  return v.split(',').map((x) => {
    const n = Number(x);
    if (!Number.isInteger(n) || n <= 0) throw new Error(`bad node id ${x}`);
    return n;
  });
}

function intArg(cmd: Command, key: string, dflt: number): number;
function intArg(cmd: Command, key: string, dflt: undefined): number | undefined;
function intArg(cmd: Command, key: string, dflt: number | undefined): number | undefined {
  const v = cmd.kv.get(key);
  if (v === undefined) return dflt;
  const n = Number(v);
  if (!Number.isInteger(n)) throw new Error(`${key}: expected an integer, got ${v}`);
  return n;
}

function boolArg(cmd: Command, key: string, dflt: boolean): boolean {
  const v = cmd.kv.get(key);
  if (v === undefined) return dflt;
  if (v !== 'true' && v !== 'false') throw new Error(`${key}: expected true or false, got ${v}`);
  return v === 'true';
}

function nodeArg(cmd: Command, i = 0): NodeId {
  const v = cmd.args[i];
  const n = Number(v);
  if (v === undefined || !Number.isInteger(n) || n <= 0) throw new Error(`${cmd.name}: expected a node id, got ${String(v)}`);
  return n;
}

export class InteractionEnv {
  readonly nodes = new Map<NodeId, EnvNode>();
  /** Messages sent and not yet delivered or dropped, in send order. */
  queue: Message[] = [];
  /** Messages taken off the network by `hold`. */
  private held: Message[] = [];
  /** Node -> partition group; nodes not listed are in group 0. */
  private groups = new Map<NodeId, number>();
  private out: string[] = [];
  /** Election Safety: the leader seen for each term. */
  private leaders = new Map<number, NodeId>();
  /** State Machine Safety: what was applied at each index, by anyone. */
  private appliedAt = new Map<number, string>();

  run(cmd: Command): string {
    this.out = [];
    try {
      this.dispatch(cmd);
    } catch (err) {
      if (err instanceof ProposalDroppedError) this.print(`error: ${err.message}`);
      else throw err;
    }
    return this.out.length === 0 ? 'ok' : this.out.join('\n');
  }

  private print(line: string): void {
    this.out.push(line);
  }

  private node(id: NodeId): EnvNode {
    const n = this.nodes.get(id);
    if (n === undefined) throw new Error(`no node ${id}`);
    return n;
  }

  private sortedIds(): NodeId[] {
    return [...this.nodes.keys()].sort((a, b) => a - b);
  }

  private idsOrAll(cmd: Command): NodeId[] {
    const ids = cmd.args.filter((a) => /^\d+$/.test(a)).map(Number);
    return ids.length > 0 ? ids : this.sortedIds();
  }

  private dispatch(cmd: Command): void {
    switch (cmd.name) {
      case 'add-nodes':
        return this.addNodes(cmd);
      case 'load-log':
        return this.loadLog(cmd);
      case 'campaign':
        return this.node(nodeArg(cmd)).core.campaign();
      case 'propose':
        return this.node(nodeArg(cmd)).core.propose(encoder.encode(cmd.args[1] ?? ''));
      case 'propose-conf-change':
        return this.proposeConfChange(cmd);
      case 'tick':
        return this.tick(cmd);
      case 'tick-election':
        return this.tickUntil(nodeArg(cmd), 'election');
      case 'tick-heartbeat':
        return this.tickUntil(nodeArg(cmd), 'heartbeat');
      case 'process-ready':
        for (const id of this.idsOrAll(cmd)) this.processReady(id, true);
        return;
      case 'deliver':
        this.deliverAll(this.idsOrAll(cmd), true, true, intArg(cmd, 'count', undefined));
        return;
      case 'hold':
        return this.hold(cmd);
      case 'release':
        for (const m of this.held) this.print(`released: ${fmtMessage(m)}`);
        this.queue.push(...this.held);
        this.held = [];
        return;
      case 'drop':
        return this.drop(cmd);
      case 'duplicate':
        return this.duplicate(cmd);
      case 'partition':
        return this.partition(cmd);
      case 'heal':
        this.groups.clear();
        return;
      case 'stabilize':
        return this.stabilize(this.idsOrAll(cmd), !cmd.args.includes('quiet'));
      case 'read-index':
        return this.node(nodeArg(cmd)).core.readIndex(cmd.args[1] ?? '');
      case 'transfer':
        return this.node(nodeArg(cmd)).core.transferLeadership(intArg(cmd, 'to', 0));
      case 'compact':
        return this.compact(nodeArg(cmd), Number(cmd.args[1]));
      case 'restart':
        return this.restart(nodeArg(cmd));
      case 'status':
        return this.status(nodeArg(cmd));
      case 'raft-log':
        return this.raftLog(nodeArg(cmd));
      case 'raft-state':
        return this.raftState();
      case 'timeouts':
        return this.timeouts();
      case 'report-snapshot':
        return this.node(nodeArg(cmd)).core.reportSnapshot(nodeArg(cmd, 1), cmd.args[2] === 'failure' ? 'failure' : 'finish');
      case 'report-unreachable':
        return this.node(nodeArg(cmd)).core.reportUnreachable(nodeArg(cmd, 1));
      default:
        throw new Error(`unknown command ${cmd.name}`);
    }
  }

  private addNodes(cmd: Command): void {
    const count = nodeArg(cmd);
    const first = this.nodes.size === 0 ? 1 : Math.max(...this.nodes.keys()) + 1;
    const newIds = Array.from({ length: count }, (_, i) => first + i);
    const voters = cmd.kv.has('voters') ? parseIds(cmd.kv.get('voters')) : this.nodes.size === 0 ? newIds : [];
    const learners = parseIds(cmd.kv.get('learners'));
    const index = intArg(cmd, 'index', 0);
    const options: NodeOptions = {
      electionTick: intArg(cmd, 'election', 10),
      heartbeatTick: intArg(cmd, 'heartbeat', 1),
      preVote: boolArg(cmd, 'prevote', true),
      checkQuorum: boolArg(cmd, 'checkquorum', true),
      maxSizePerMsg: intArg(cmd, 'max-size-per-msg', undefined),
      maxInflightMsgs: intArg(cmd, 'max-inflight', undefined),
      maxUncommittedEntriesSize: intArg(cmd, 'max-uncommitted', undefined),
      readOnlyOption: cmd.kv.get('read-only') === 'lease' ? 'leaseBased' : 'safe',
      maxPendingReadIndex: intArg(cmd, 'max-pending-reads', undefined),
    };
    const cs: ConfState = { voters, learners, votersOutgoing: [], learnersNext: [], autoLeave: false };
    for (const id of newIds) {
      const storage = new EnvStorage(cs);
      if (index > 0) {
        storage.applySnapshot({ metadata: { index, term: 1, confState: cs }, data: new Uint8Array() });
        storage.setHardState({ term: 1, vote: NONE, commit: index });
      }
      const n: EnvNode = { id, storage, core: this.makeCore(id, storage, options), options, confState: cs, applied: index };
      storage.source = () => ({ applied: n.applied, confState: n.confState });
      this.nodes.set(id, n);
    }
    this.print(`added ${newIds.join(' ')}: ${fmtConfState(cs)}${index > 0 ? ` at index ${index}` : ''}`);
  }

  private makeCore(id: NodeId, storage: EnvStorage, options: NodeOptions, applied?: number): RawNode {
    const n = { options };
    const config: RaftConfig = {
      id,
      storage,
      applied,
      random: new SeededRandom(id),
      electionTick: n.options.electionTick,
      heartbeatTick: n.options.heartbeatTick,
      preVote: n.options.preVote,
      checkQuorum: n.options.checkQuorum,
      maxSizePerMsg: n.options.maxSizePerMsg,
      maxInflightMsgs: n.options.maxInflightMsgs,
      maxUncommittedEntriesSize: n.options.maxUncommittedEntriesSize,
      readOnlyOption: n.options.readOnlyOption,
      maxPendingReadIndex: n.options.maxPendingReadIndex,
    };
    return new RawNode(config);
  }

  /** Replaces a node's persisted log with entries of the given terms and restarts it. */
  private loadLog(cmd: Command): void {
    const n = this.node(nodeArg(cmd));
    const terms = (cmd.kv.get('terms') ?? '').split(',').filter((x) => x !== '').map(Number);
    const cs = n.storage.initialState().confState;
    n.storage = new EnvStorage(cs);
    n.storage.source = () => ({ applied: n.applied, confState: n.confState });
    n.storage.append(terms.map((term, i) => ({ term, index: i + 1, type: 'normal' as const, data: new Uint8Array() })));
    const lastTerm = terms[terms.length - 1] ?? 0;
    n.storage.setHardState({ term: intArg(cmd, 'term', lastTerm), vote: intArg(cmd, 'vote', NONE), commit: intArg(cmd, 'commit', 0) });
    n.applied = 0;
    n.core = this.makeCore(n.id, n.storage, n.options);
    this.print(`${n.id}: log ${terms.length > 0 ? terms.map((t, i) => `${t}/${i + 1}`).join(' ') : 'empty'}`);
  }

  private proposeConfChange(cmd: Command): void {
    const id = nodeArg(cmd);
    const changes: ConfChangeSingle[] = cmd.args.slice(1).map((a) => {
      const m = /^([vlr])(\d+)$/.exec(a);
      if (m === null) throw new Error(`bad change ${a}: expected v<id>, l<id> or r<id>`);
      const type = m[1] === 'v' ? 'addNode' : m[1] === 'l' ? 'addLearner' : 'removeNode';
      return { type, nodeId: Number(m[2]) };
    });
    const transition = (cmd.kv.get('transition') ?? 'auto') as ConfChangeTransition;
    this.node(id).core.proposeConfChange({ transition, changes });
  }

  private tick(cmd: Command): void {
    const times = Number(cmd.args[1] ?? '1');
    const ids = cmd.args[0] === 'all' ? this.sortedIds() : parseIds(cmd.args[0]);
    for (let i = 0; i < times; i++) for (const id of ids) this.node(id).core.tick();
  }

  /** Ticks until the election timeout (or the heartbeat timeout) of the node fires. */
  private tickUntil(id: NodeId, what: 'election' | 'heartbeat'): void {
    const n = this.node(id);
    const r = n.core.internal;
    let times: number;
    if (what === 'heartbeat') times = r.heartbeatTimeout - r.heartbeatElapsed;
    else if (r.role === 'leader') times = r.electionTimeout - r.electionElapsed;
    else times = r.randomizedElectionTimeout - r.electionElapsed;
    for (let i = 0; i < Math.max(times, 1); i++) n.core.tick();
  }

  /** Handles one Ready as the contract says: persist, then send, then apply. Returns whether there was one. */
  processReady(id: NodeId, verbose: boolean): boolean {
    const n = this.node(id);
    if (!n.core.hasReady()) return false;
    const rd = n.core.ready();
    const lines = this.describeReady(rd);
    // 1. persist
    if (rd.snapshot !== undefined) n.storage.applySnapshot(rd.snapshot);
    n.storage.append(rd.entries);
    // A leader may be elected again in a later term within one step (alone a quorum): its role
    // shows no change, its term does.
    const termBefore = n.storage.initialState().hardState.term;
    if (rd.hardState !== undefined) n.storage.setHardState(rd.hardState);
    const reelected = n.core.status().role === 'leader' && rd.hardState !== undefined && rd.hardState.term !== termBefore;
    if (rd.softState?.role === 'leader' || reelected) this.recordLeader(id, n.core.status().term);
    // 2. send
    this.queue.push(...rd.messages);
    // 3. apply
    if (rd.snapshot !== undefined) {
      n.confState = rd.snapshot.metadata.confState;
      n.applied = rd.snapshot.metadata.index;
    }
    for (const e of rd.committedEntries) {
      this.recordApplied(id, e);
      n.applied = e.index;
      if (e.type === 'confChange') {
        n.confState = n.core.applyConfChange(decodeConfChange(e.data));
        lines.push(`  conf applied at ${e.index}: ${fmtConfState(n.confState)}`);
      }
    }
    n.core.advance();
    if (verbose) {
      this.print(`> ${id} handling Ready`);
      for (const l of lines) this.print(l);
    }
    return true;
  }

  private describeReady(rd: Ready): string[] {
    const lines: string[] = [];
    if (rd.softState !== undefined) lines.push(`  state: ${rd.softState.role} lead=${rd.softState.lead}`);
    if (rd.hardState !== undefined) lines.push(`  hardstate: term=${rd.hardState.term} vote=${rd.hardState.vote} commit=${rd.hardState.commit}`);
    if (rd.snapshot !== undefined) lines.push(`  snapshot: ${fmtSnapshot(rd.snapshot)}`);
    if (rd.entries.length > 0) lines.push(`  entries: ${rd.entries.map(fmtEntry).join(', ')}`);
    if (rd.committedEntries.length > 0) lines.push(`  committed: ${rd.committedEntries.map(fmtEntry).join(', ')}`);
    if (rd.messages.length > 0) {
      lines.push('  messages:');
      for (const m of rd.messages) lines.push(`    ${fmtMessage(m)}`);
    }
    for (const rs of rd.readStates) lines.push(`  read-state: index=${rs.index} ctx=${rs.context}`);
    return lines;
  }

  private recordLeader(id: NodeId, term: number): void {
    const other = this.leaders.get(term);
    if (other !== undefined && other !== id) throw new Error(`election safety: ${other} and ${id} both lead term ${term}`);
    this.leaders.set(term, id);
  }

  private recordApplied(id: NodeId, e: Entry): void {
    const key = `${e.term}:${e.type}:${decoder.decode(e.data)}`;
    const seen = this.appliedAt.get(e.index);
    if (seen !== undefined && seen !== key) throw new Error(`state machine safety: node ${id} applied ${key} at ${e.index}, another node applied ${seen}`);
    this.appliedAt.set(e.index, key);
  }

  private connected(a: NodeId, b: NodeId): boolean {
    return (this.groups.get(a) ?? 0) === (this.groups.get(b) ?? 0);
  }

  /** Delivers, once, every queued message addressed to one of `ids`. Returns how many were handled. */
  private deliverAll(ids: readonly NodeId[], verbose: boolean, showDrops = verbose, count?: number): number {
    const take: Message[] = [];
    const keep: Message[] = [];
    for (const m of this.queue) {
      if (ids.includes(m.to) && (count === undefined || take.length < count)) take.push(m);
      else keep.push(m);
    }
    this.queue = keep;
    for (const m of take) {
      const target = this.nodes.get(m.to);
      if (target === undefined || !this.connected(m.from, m.to)) {
        if (showDrops) this.print(`dropped: ${fmtMessage(m)}`);
        continue;
      }
      if (verbose) this.print(fmtMessage(m));
      target.core.step(m);
    }
    return take.length;
  }

  private drop(cmd: Command): void {
    const from = intArg(cmd, 'from', 0);
    const to = intArg(cmd, 'to', 0);
    const type = cmd.kv.get('type');
    const hit = (m: Message): boolean =>
      (from === 0 || m.from === from) && (to === 0 || m.to === to) && (type === undefined || m.type === type);
    const dropped = this.queue.filter(hit);
    if (cmd.args.includes('quiet')) this.print(`dropped ${dropped.length} messages`);
    else for (const m of dropped) this.print(`dropped: ${fmtMessage(m)}`);
    this.queue = this.queue.filter((m) => !hit(m));
  }

  /** Takes matching messages off the network until `release` (a message delayed in flight). */
  private hold(cmd: Command): void {
    const from = intArg(cmd, 'from', 0);
    const to = intArg(cmd, 'to', 0);
    const hit = (m: Message): boolean => (from === 0 || m.from === from) && (to === 0 || m.to === to);
    for (const m of this.queue) if (hit(m)) this.print(`held: ${fmtMessage(m)}`);
    this.held.push(...this.queue.filter(hit));
    this.queue = this.queue.filter((m) => !hit(m));
  }

  /** Queues a second copy of each matching message, after everything queued. */
  private duplicate(cmd: Command): void {
    const from = intArg(cmd, 'from', 0);
    const to = intArg(cmd, 'to', 0);
    const copies = this.queue.filter((m) => (from === 0 || m.from === from) && (to === 0 || m.to === to));
    for (const m of copies) this.print(`duplicated: ${fmtMessage(m)}`);
    this.queue.push(...copies);
  }

  /** `partition 1 2,3`: each argument is a group; nodes not named share one more group. */
  private partition(cmd: Command): void {
    this.groups.clear();
    cmd.args.forEach((g, i) => {
      for (const id of parseIds(g)) this.groups.set(id, i + 1);
    });
  }

  stabilize(ids: readonly NodeId[], verbose: boolean): void {
    for (let round = 0; round < 1000; round++) {
      let progress = false;
      for (const id of ids) if (this.processReady(id, verbose)) progress = true;
      if (this.deliverAll(ids, false, verbose) > 0) progress = true;
      if (!progress) return;
    }
    throw new Error('stabilize: no quiescence after 1000 rounds');
  }

  private compact(id: NodeId, index: number): void {
    const n = this.node(id);
    n.storage.createSnapshot(n.applied, n.confState, encoder.encode(`applied=${n.applied}`));
    n.storage.compact(index);
    this.print(`${id}: snapshot at ${n.applied}, log from ${n.storage.firstIndex()}`);
  }

  private restart(id: NodeId): void {
    const n = this.node(id);
    // Only what the Ready batches said to persist survives; the state machine restarts from the snapshot.
    n.applied = n.storage.storedSnapshot().metadata.index;
    n.confState = n.storage.storedSnapshot().metadata.confState;
    n.core = this.makeCore(n.id, n.storage, n.options, n.applied);
    this.queue = this.queue.filter((m) => m.to !== id);
    const s = n.core.status();
    this.print(`${id}: restarted at term=${s.term} vote=${s.vote} commit=${s.commit} applied=${s.applied}`);
  }

  private status(id: NodeId): void {
    const s = this.node(id).core.status();
    this.print(`${id}: ${s.role} term=${s.term} lead=${s.lead} vote=${s.vote} commit=${s.commit} applied=${s.applied} ${fmtConfState(s.config)}`);
    if (s.leadTransferee !== NONE) this.print(`  transferring to ${s.leadTransferee}`);
    const r = this.node(id).core.internal;
    for (const [pid, pr] of r.tracker.progress) {
      if (s.role === 'leader') this.print(`  ${pid}: ${pr.describe()}`);
    }
  }

  private raftLog(id: NodeId): void {
    const r = this.node(id).core.internal;
    const ents = r.log.allEntries();
    this.print(`${id}: first=${r.log.firstIndex()} last=${r.log.lastIndex()} commit=${r.log.committed}`);
    if (ents.length > 0) this.print(`  ${ents.map(fmtEntry).join(', ')}`);
  }

  /** Each node's randomized election timeout and the ticks elapsed towards it. */
  private timeouts(): void {
    for (const id of this.sortedIds()) {
      const r = this.node(id).core.internal;
      this.print(`${id}: ${r.role} elapsed=${r.electionElapsed} timeout=${r.randomizedElectionTimeout} (election=${r.electionTimeout})`);
    }
  }

  private raftState(): void {
    for (const id of this.sortedIds()) {
      const s = this.node(id).core.status();
      this.print(`${id}: ${s.role} term=${s.term} lead=${s.lead} commit=${s.commit} last=${this.node(id).core.internal.log.lastIndex()}`);
    }
  }
}
