/**
 * What the simulation observed, and the properties it must have.
 *
 *  1. Leadership: at no virtual instant do two incarnations lead one group. A node leads from
 *     its `elected` event until its local deadline (send time of the last successful acquire or
 *     renew + ttl − margin, as the node's clock measures it, mapped to virtual time) or its
 *     `deposed` event, whichever comes first. Terms of successive elections never go back, and
 *     two owners never share a term.
 *  2. Fencing: in every stream, the term of each accepted entry is >= every earlier one.
 *  3. Durability: every acknowledged append is in the stream, at its sequence number, once; no
 *     append refused as stale is; nothing is there that no one wrote.
 *  4. Liveness: once faults stop, some node leads each group within TTL + slack, and keeps
 *     leading until the run ends.
 *  Also, as they happen: the deadline signal fires on time unless the node stalled, leader work
 *  writes only while leading, and a node whose work failed releases the lease at once.
 */
import type { StreamEntry, VirtualClock } from '../../src/core/index.js';
import { formatTime } from './trace.js';
import type { SimPlan } from './plan.js';

export interface LeadershipRecord {
  /** The incarnation label (n2, or n2#2 after a restart). */
  readonly node: string;
  readonly owner: string;
  readonly group: string;
  readonly term: number;
  /** Virtual time of the `elected` event. */
  readonly start: number;
  /** Virtual time at which leadership ends: the local deadline, cut short by `deposed`. */
  end: number;
  deposedAt: number | null;
  reason: string | null;
  /**
   * When the elector's deadline timer should fire: the deadline, or at once when the deadline
   * had already passed as it was set (a renew reply handled late, after a stall).
   */
  timerAt: number;
  /** The node clock's pause count when the current deadline was set. */
  pauseMark: number;
}

export type AppendOutcome =
  | { readonly kind: 'ok'; readonly seq: number }
  | { readonly kind: 'stale' }
  | { readonly kind: 'ambiguous'; readonly why: string }
  | { readonly kind: 'error'; readonly message: string };

export interface AppendRecord {
  readonly node: string;
  readonly owner: string;
  readonly group: string;
  readonly stream: string;
  readonly term: number;
  readonly payload: string;
  readonly sentAt: number;
  /** When the store applied it (written or refused); null while the request was in flight or lost. */
  appliedAt: number | null;
  outcome: AppendOutcome | null;
  /** A success that arrived after the work stopped waiting: the store still acknowledged it. */
  lateSeq: number | null;
}

/** A broken property, with the virtual instant at which it became true (where to read the trace). */
export interface Violation {
  readonly at: number;
  readonly message: string;
}

/** An append's outcome, for the trace. */
export function describeAppend(group: string, payload: string, outcome: AppendOutcome): string {
  const text = outcome.kind === 'ok' ? `ok seq ${outcome.seq}` : outcome.kind === 'ambiguous' ? `ambiguous (${outcome.why})` : outcome.kind;
  return `${group}: append ${payload} ${text}`;
}

export function formatViolation(v: Violation): string {
  return `t=${formatTime(v.at)} ${v.message}`;
}

/** Floating-point slack for nodes whose clocks run at a rate other than 1. */
const EPSILON = 1e-6;

export class History {
  readonly leaderships: LeadershipRecord[] = [];
  readonly appends: AppendRecord[] = [];
  /** Violations seen as they happened (the rest are found by `check` at the end). */
  readonly violations: Violation[] = [];
  /**
   * Appends sent after the sender's local deadline had passed: possible only after a stall, when
   * the node's held timers fire before its deadline timer. Fencing refuses them once a newer
   * term has written; property 2 checks that it does.
   */
  lateSends = 0;
  private readonly open = new Map<object, LeadershipRecord>();
  /** The highest term each elector gave up (resigned, stopped, or a fault): it must never lead it again. */
  private readonly retired = new Map<object, number>();
  /** Electors now suspended (a renew failed as maybe), by key: the term. */
  private readonly suspendedNow = new Map<object, number>();
  private readonly appendsByPayload = new Map<string, AppendRecord>();
  /** Resignations whose release has not been sent yet, by owner and group. */
  private readonly resigns = new Map<string, { readonly node: string; readonly term: number; readonly at: number }>();

  constructor(private readonly clock: VirtualClock) {}

  /** `key` identifies one elector; `deadline` is virtual time. */
  elected(key: object, node: string, owner: string, group: string, term: number, deadline: number, pauseMark: number): void {
    const now = this.clock.now();
    if (this.open.has(key)) this.violate(`${node} ${group}: elected for term ${term} while already leading`);
    if (deadline <= now) this.violate(`${node} ${group}: elected for term ${term} with a deadline already passed`);
    const retired = this.retired.get(key) ?? 0;
    if (term <= retired) this.violate(`${node} ${group}: elected for term ${term} after giving up term ${retired} (a released term is never led again)`);
    const l: LeadershipRecord = { node, owner, group, term, start: now, end: deadline, deposedAt: null, reason: null, timerAt: deadline, pauseMark };
    this.open.set(key, l);
    this.leaderships.push(l);
  }

  renewed(key: object, node: string, term: number, deadline: number, pauseMark: number): void {
    const l = this.open.get(key);
    if (!l || l.term !== term) {
      this.violate(`${node}: renewed term ${term} without leading it`);
      return;
    }
    if (deadline < l.end - EPSILON) this.violate(`${node} ${l.group}: renew moved the deadline back from ${formatTime(l.end)} to ${formatTime(deadline)}`);
    l.end = Math.max(l.end, deadline);
    l.timerAt = Math.max(deadline, this.clock.now());
    l.pauseMark = pauseMark;
  }

  /** A renew failed as maybe: the elector must lead that term, not be suspended already; its deadline stays. */
  suspended(key: object, node: string, term: number): void {
    const l = this.open.get(key);
    if (!l || l.term !== term) this.violate(`${node}: suspended in term ${term} without leading it`);
    if (this.suspendedNow.has(key)) this.violate(`${node}: suspended twice in term ${term} without recovering`);
    this.suspendedNow.set(key, term);
  }

  /** A renew succeeded after a suspension: same term, before the deadline (the renewed event has moved it on). */
  recovered(key: object, node: string, term: number): void {
    const l = this.open.get(key);
    if (!l || l.term !== term) this.violate(`${node}: recovered in term ${term} without leading it`);
    if (this.suspendedNow.get(key) !== term) this.violate(`${node}: recovered in term ${term} without being suspended in it`);
    if (l && this.clock.now() > l.end + EPSILON) this.violate(`${node} ${l.group}: recovered term ${term} after its deadline ${formatTime(l.end)}`);
    this.suspendedNow.delete(key);
  }

  deposed(key: object, node: string, term: number, reason: string, pauseCount: number): void {
    this.suspendedNow.delete(key);
    const now = this.clock.now();
    const l = this.open.get(key);
    if (!l) {
      if (reason !== 'late') this.violate(`${node}: deposed (${reason}) from term ${term} without leading`);
      return;
    }
    if (l.term !== term) this.violate(`${node} ${l.group}: deposed from term ${term} while leading term ${l.term}`);
    // Unless the node stalled, the deadline timer fires exactly at the deadline (safety rule 2).
    if (reason === 'deadline' && pauseCount === l.pauseMark && Math.abs(now - l.timerAt) > EPSILON) {
      this.violate(`${node} ${l.group}: deadline signal fired at ${formatTime(now)}, expected ${formatTime(l.timerAt)}`);
    }
    if (now < l.end) l.end = now;
    // These end leadership by releasing the lease (the others keep it, or lost it already).
    if (reason === 'resigned' || reason === 'fenced' || reason === 'stopped' || reason === 'error' || reason === 'stalled') this.retired.set(key, Math.max(term, this.retired.get(key) ?? 0));
    l.deposedAt = now;
    l.reason = reason;
    this.open.delete(key);
  }

  /**
   * Leader work of elector `key` sends an append under `term`: it must lead that term (rule 7),
   * and may be past its deadline only after a stall (its held timers fired on resume before the
   * deadline timer did; fencing must then refuse the write). Returns the record to fill in.
   */
  beginAppend(key: object, write: Pick<AppendRecord, 'node' | 'owner' | 'group' | 'term' | 'payload'>, pauseCount: number): AppendRecord {
    const now = this.clock.now();
    const { node, group, term } = write;
    const lead = this.open.get(key);
    if (!lead || lead.term !== term) {
      this.violate(`${node} ${group}: leader work of term ${term} writes while not leading it (rule 7)`);
    } else if (now >= lead.end) {
      this.lateSends++;
      if (pauseCount === lead.pauseMark && now > lead.timerAt + EPSILON) this.violate(`${node} ${group}: leader work writes after its deadline ${formatTime(lead.end)} without having stalled`);
    }
    const record: AppendRecord = { ...write, stream: `stream-${group}`, sentAt: now, appliedAt: null, outcome: null, lateSeq: null };
    this.appends.push(record);
    this.appendsByPayload.set(record.payload, record);
    return record;
  }

  /** The store applied the append carrying `payload` (wrote it or refused it). */
  appendApplied(payload: string): void {
    const record = this.appendsByPayload.get(payload);
    if (record && record.appliedAt === null) record.appliedAt = this.clock.now();
  }

  /** A node resigned (its leader work failed): the release must follow at once. */
  resigned(node: string, owner: string, group: string, term: number): void {
    this.resigns.set(`${owner} ${group}`, { node, term, at: this.clock.now() });
  }

  /** A release left `owner`. After a resignation it must leave at the same instant: the work settled at once. */
  releaseSent(owner: string, group: string, term: number): void {
    const key = `${owner} ${group}`;
    const r = this.resigns.get(key);
    if (!r || r.term !== term) return;
    this.resigns.delete(key);
    if (this.clock.now() > r.at + EPSILON) {
      this.violate(`${r.node} ${group}: resigned term ${term} at ${formatTime(r.at)} but released it only now, ${formatTime(this.clock.now() - r.at)} ms later`);
    }
  }

  /** The leadership `key` holds now, if any. */
  current(key: object): LeadershipRecord | undefined {
    return this.open.get(key);
  }

  violate(message: string): void {
    this.violations.push({ at: this.clock.now(), message });
  }
}

export interface CheckInput {
  readonly plan: SimPlan;
  readonly history: History;
  /** Each group's stream as read back from the store at the end. */
  readonly streams: ReadonlyMap<string, readonly StreamEntry[]>;
  /** Virtual time at which the electors were told to stop. */
  readonly stopAtMs: number;
}

/** Slack allowed on top of the TTL for a leader to appear once faults stop, ms. */
export function livenessSlackMs(plan: SimPlan): number {
  const t = plan.timing;
  return t.requestTimeoutMs + 2 * t.retryMs + 50;
}

/** How long after faults stop a leader must be there: TTL + slack, as the slowest node's clock measures it. */
export function livenessBoundMs(plan: SimPlan): number {
  return Math.ceil((plan.timing.ttlMs + livenessSlackMs(plan)) / Math.min(1, ...plan.clockRates));
}

export function check(input: CheckInput): Violation[] {
  return [...checkLeadership(input), ...checkStreams(input), ...checkLiveness(input)];
}

function describe(l: LeadershipRecord): string {
  const cut = l.deposedAt !== null ? ` deposed ${l.reason}` : '';
  return `${l.node} term ${l.term} [${formatTime(l.start)}, ${formatTime(l.end)})${cut}`;
}

function checkLeadership({ plan, history }: CheckInput): Violation[] {
  const out: Violation[] = [];
  for (const group of plan.groups) {
    const ls = history.leaderships.filter((l) => l.group === group); // in order of election
    let maxTerm = 0;
    const ownerOfTerm = new Map<number, string>();
    let reach: LeadershipRecord | null = null;
    for (const l of ls) {
      if (l.term < maxTerm) out.push({ at: l.start, message: `${group}: term went back: ${describe(l)} elected after term ${maxTerm}` });
      maxTerm = Math.max(maxTerm, l.term);
      const prior = ownerOfTerm.get(l.term);
      if (prior !== undefined && prior !== l.owner) out.push({ at: l.start, message: `${group}: term ${l.term} given to two owners, ${prior} and ${l.owner}` });
      ownerOfTerm.set(l.term, l.owner);
      if (reach && l.start < reach.end - EPSILON && l.owner !== reach.owner) {
        out.push({ at: l.start, message: `${group}: two leaders at once: ${describe(reach)} overlaps ${describe(l)}` });
      }
      if (!reach || l.end > reach.end) reach = l;
    }
  }
  return out;
}

function checkStreams({ plan, history, streams, stopAtMs }: CheckInput): Violation[] {
  const out: Violation[] = [];
  const attempts = new Map<string, (typeof history.appends)[number]>();
  for (const a of history.appends) attempts.set(a.payload, a);
  for (const group of plan.groups) {
    const stream = `stream-${group}`;
    const entries = streams.get(stream) ?? [];
    const seen = new Set<string>();
    let highest = 0;
    entries.forEach((e, i) => {
      const a = attempts.get(e.payload);
      const at = a?.appliedAt ?? stopAtMs;
      if (e.seq !== i + 1) out.push({ at, message: `${stream}: entry ${i + 1} has seq ${e.seq}` });
      if (e.term < highest) out.push({ at, message: `${stream}: seq ${e.seq} accepted term ${e.term} after term ${highest} (${e.payload})` });
      highest = Math.max(highest, e.term);
      if (seen.has(e.payload)) out.push({ at, message: `${stream}: ${e.payload} written twice (again at seq ${e.seq})` });
      seen.add(e.payload);
      if (!a) out.push({ at, message: `${stream}: seq ${e.seq} holds ${e.payload}, which no one wrote` });
      else if (a.term !== e.term || a.stream !== stream || e.lease !== group) {
        out.push({ at, message: `${stream}: seq ${e.seq} holds ${e.payload} under ${e.lease}#${e.term}, written with ${group}#${a.term} to ${a.stream}` });
      }
    });
    for (const a of history.appends) {
      if (a.stream !== stream) continue;
      const at = a.appliedAt ?? a.sentAt;
      const acked = a.outcome?.kind === 'ok' ? a.outcome.seq : a.lateSeq;
      if (acked !== null) {
        const e = entries[acked - 1];
        if (!e || e.payload !== a.payload) {
          out.push({ at, message: `${stream}: ${a.node} was told ${a.payload} (term ${a.term}) is seq ${acked}, but the stream has ${e ? e.payload : 'nothing'} there` });
        }
      }
      if (a.outcome?.kind === 'stale' && seen.has(a.payload)) out.push({ at, message: `${stream}: ${a.payload} was refused as stale yet written` });
      if (a.outcome?.kind === 'error') out.push({ at, message: `${stream}: ${a.payload} failed unexpectedly: ${a.outcome.message}` });
    }
  }
  return out;
}

function checkLiveness({ plan, history, stopAtMs }: CheckInput): Violation[] {
  const out: Violation[] = [];
  const from = plan.faultsUntilMs;
  const by = from + livenessBoundMs(plan);
  for (const group of plan.groups) {
    const ls = history.leaderships.filter((l) => l.group === group);
    if (!ls.some((l) => l.start <= by && l.end > from)) {
      const slowest = Math.min(1, ...plan.clockRates);
      const drift = slowest < 1 ? `, / slowest clock rate ${slowest.toFixed(4)}` : '';
      out.push({ at: by, message: `${group}: no leader between the end of faults at ${from} and ${by} (ttl ${plan.timing.ttlMs} + slack ${livenessSlackMs(plan)}${drift})` });
    }
    for (const l of ls) {
      if (l.deposedAt !== null && l.deposedAt > by && l.deposedAt < stopAtMs) {
        out.push({ at: l.deposedAt, message: `${group}: leadership lost after faults ended: ${describe(l)}` });
      }
    }
    // A leader at the end is deposed by stop() at exactly stopAtMs.
    if (!ls.some((l) => l.start <= stopAtMs && l.end >= stopAtMs)) out.push({ at: stopAtMs, message: `${group}: no leader when the run ended at ${stopAtMs}` });
  }
  return out;
}
