/**
 * What the Bully and Ring machines share: configuration, inputs and outputs, and the rule that
 * makes a term name its winner.
 *
 * The machines are pure: `step(input)` returns messages to send, timers to set or cancel, events
 * and the term to persist, and does no I/O, reads no clock and no global (chance comes from the
 * injected Random). The driver (driver.ts) or the simulator performs the output.
 *
 * Terms. A term is owned by one member: term T belongs to the member at position T mod n of the
 * sorted member list, and a node that wins takes the smallest term it owns above every term it
 * knows. So two nodes never lead in the same term, whatever the network does; a node never leads
 * a term twice as long as it persists the terms it learns (`persistTerm`, saved before the
 * output's messages are sent, like Raft's hard state) and starts again from the saved value. The
 * winner's term is its fencing token: it is above every term the nodes it heard from knew, so a
 * store that checks fencing refuses the older winner's writes like any other's.
 */
import { InvalidArgumentError } from '../../core/errors.js';
import type { Random } from '../../core/random.js';
import { an, ElectionMessageError, MAX_MEMBERS, type ClassicMessage, type NodeId } from './messages.js';

export interface ClassicTiming {
  /** How often a leader repeats its `coordinator` message to every member, ms. */
  readonly heartbeatMs: number;
  /** A follower that heard nothing from its leader for this long (jittered up to twice) starts an election, ms. */
  readonly leaderTimeoutMs: number;
  /** Bully: a candidate with no answer from a higher node this long wins, ms. Ring: a successor's ack wait. */
  readonly answerTimeoutMs: number;
  /** Bully: a candidate that got an answer but no coordinator this long starts again. Ring: the token's round trip, ms. */
  readonly roundTimeoutMs: number;
}

export const CLASSIC_TIMING: ClassicTiming = { heartbeatMs: 100, leaderTimeoutMs: 500, answerTimeoutMs: 150, roundTimeoutMs: 1000 };

export interface ClassicConfig {
  /** This node's id, a positive integer, one of `members`. */
  readonly id: NodeId;
  /** Every member's id, this node's included (static membership). */
  readonly members: readonly NodeId[];
  readonly random: Random;
  readonly timing?: Partial<ClassicTiming>;
  /** The term persisted before a restart (default 0). */
  readonly initialTerm?: number;
}

export type ClassicInput =
  | { readonly kind: 'start' }
  | { readonly kind: 'message'; readonly message: ClassicMessage }
  | { readonly kind: 'timer'; readonly name: string };

export type ClassicEvent =
  /** This node leads from now, in `term` (its fencing token). */
  | { readonly kind: 'elected'; readonly term: number }
  /** This node no longer leads `term`. */
  | { readonly kind: 'deposed'; readonly term: number; readonly reason: 'newer-term' | 'stopped' }
  /** The leader this node follows changed (null: none known). */
  | { readonly kind: 'leader'; readonly leader: NodeId | null; readonly term: number };

/** Set (ms) or cancel (null) the named timer; setting one already set replaces it. */
export interface TimerCommand {
  readonly name: string;
  readonly ms: number | null;
}

export interface ClassicOutput {
  readonly messages: ClassicMessage[];
  readonly timers: TimerCommand[];
  readonly events: ClassicEvent[];
  /** A higher term to persist before sending `messages`, if the term moved. */
  persistTerm: number | undefined;
}

export interface ClassicMachine {
  readonly id: NodeId;
  readonly term: number;
  /** The leader this node knows of (itself when it leads), or null. */
  readonly leader: NodeId | null;
  readonly isLeader: boolean;
  step(input: ClassicInput): ClassicOutput;
}

/** The smallest term above `known` that the member at `position` of `n` owns. */
export function nextOwnedTerm(known: number, position: number, n: number): number {
  const t = known + 1;
  return t + ((((position - t) % n) + n) % n);
}

/** The position of the member that owns `term`. */
export function ownerPosition(term: number, n: number): number {
  return term % n;
}

/** Checked configuration shared by both machines. */
export interface Checked {
  readonly id: NodeId;
  readonly members: readonly NodeId[];
  readonly position: number;
  readonly timing: ClassicTiming;
  readonly initialTerm: number;
}

export function checkConfig(config: ClassicConfig): Checked {
  const { id } = config;
  if (!Number.isSafeInteger(id) || id < 1) throw new InvalidArgumentError('id', `expected a positive integer, got ${String(id)}`);
  if (!Array.isArray(config.members) || config.members.length === 0) throw new InvalidArgumentError('members', 'expected a non-empty array of node ids');
  if (config.members.length > MAX_MEMBERS) throw new InvalidArgumentError('members', `at most ${MAX_MEMBERS} members, got ${config.members.length}`);
  for (const m of config.members) if (!Number.isSafeInteger(m) || m < 1) throw new InvalidArgumentError('members', `expected positive integer ids, got ${String(m)}`);
  const members = [...new Set(config.members)].sort((a, b) => a - b);
  if (members.length !== config.members.length) throw new InvalidArgumentError('members', 'ids must be distinct');
  const position = members.indexOf(id);
  if (position < 0) throw new InvalidArgumentError('members', `must include this node's id ${id}`);
  const timing = { ...CLASSIC_TIMING, ...config.timing };
  for (const [k, v] of Object.entries(timing)) if (!Number.isFinite(v) || v <= 0) throw new InvalidArgumentError(`timing.${k}`, `expected a positive number of ms, got ${String(v)}`);
  const initialTerm = config.initialTerm ?? 0;
  if (!Number.isSafeInteger(initialTerm) || initialTerm < 0) throw new InvalidArgumentError('initialTerm', `expected an integer >= 0, got ${String(initialTerm)}`);
  return { id, members, position, timing, initialTerm };
}

export function emptyOutput(): ClassicOutput {
  return { messages: [], timers: [], events: [], persistTerm: undefined };
}

/**
 * Refuses a message no member would send: not addressed to this node, from a non-member or from
 * itself, a leader that is not a member, a coordinator whose term its leader does not own, ring
 * ids outside the ring. Returns the message when it is acceptable.
 */
export function checkIncoming(c: Checked, m: ClassicMessage): ClassicMessage {
  const n = c.members.length;
  const isMember = (id: NodeId): boolean => c.members.includes(id);
  if (m.to !== c.id) throw new ElectionMessageError(`${an(m.kind)} message addressed to node ${m.to}, this is node ${c.id}`);
  if (m.from === c.id || !isMember(m.from)) throw new ElectionMessageError(`${an(m.kind)} message from node ${m.from}, which is not a peer of node ${c.id}`);
  if (m.kind === 'coordinator' || m.kind === 'ring-coordinator') {
    if (!isMember(m.leader)) throw new ElectionMessageError(`${an(m.kind)} naming node ${m.leader}, which is not a member`);
    if (m.kind === 'coordinator' && m.leader !== m.from) throw new ElectionMessageError(`a coordinator from node ${m.from} naming node ${m.leader}: only a leader announces itself`);
    if (c.members[ownerPosition(m.term, n)] !== m.leader) throw new ElectionMessageError(`${an(m.kind)} for term ${m.term}, which node ${m.leader} does not own`);
  }
  if (m.kind === 'ring-election' || m.kind === 'ring-coordinator') {
    if (!isMember(m.initiator)) throw new ElectionMessageError(`${an(m.kind)} started by node ${m.initiator}, which is not a member`);
  }
  if (m.kind === 'ring-election') {
    if (m.candidates.length > n) throw new ElectionMessageError(`a ring token with ${m.candidates.length} candidates in a ring of ${n}`);
    for (const id of m.candidates) if (!isMember(id)) throw new ElectionMessageError(`a ring token naming node ${id}, which is not a member`);
  }
  return m;
}

/** A timer delay in [ms, 2 ms), so that followers of a dead leader do not all start at once. */
export function jitter(random: Random, ms: number): number {
  return ms + Math.floor(random.next() * ms);
}

/**
 * What both machines share: the checked configuration, the term and the leader known, and one
 * `step` that collects what an input produced (messages, timers, events, a term to persist).
 */
export abstract class MachineBase<Role extends string> implements ClassicMachine {
  protected readonly c: Checked;
  protected readonly random: Random;
  protected termValue: number;
  protected leaderId: NodeId | null = null;
  protected role: Role | 'idle' | 'leader' = 'idle';
  protected out: ClassicOutput = emptyOutput();

  constructor(config: ClassicConfig) {
    this.c = checkConfig(config);
    this.random = config.random;
    this.termValue = this.c.initialTerm;
  }

  get id(): NodeId {
    return this.c.id;
  }
  get term(): number {
    return this.termValue;
  }
  get leader(): NodeId | null {
    return this.leaderId;
  }
  get isLeader(): boolean {
    return this.role === 'leader';
  }

  step(input: ClassicInput): ClassicOutput {
    this.out = emptyOutput();
    if (input.kind === 'start') {
      if (this.role === 'idle') this.onStart();
    } else if (input.kind === 'timer') {
      this.onTimer(input.name);
    } else {
      this.onMessage(checkIncoming(this.c, input.message));
    }
    const out = this.out;
    this.out = emptyOutput();
    return out;
  }

  /** The first `start` input (the node was idle). */
  protected abstract onStart(): void;
  protected abstract onTimer(name: string): void;
  protected abstract onMessage(m: ClassicMessage): void;

  protected timer(name: string, ms: number | null): void {
    this.out.timers.push({ name, ms });
  }
}
