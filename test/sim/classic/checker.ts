/**
 * The election checker of the classic elections' simulation: what leadership looked like, and
 * which properties it broke.
 *
 * Safety, checked as leaders are elected:
 *  - one leader per term: no term is led by two nodes, nor twice by one node (two incarnations);
 *  - a node's successive leaderships have increasing terms;
 *  - the term is owned by its leader (term mod n is the leader's position).
 * Findings that are not violations of these elections' own promise, recorded for the report:
 *  - overlaps: two nodes leading at the same virtual instant (necessarily in different terms).
 *    Message loss causes short ones; a partition causes split brain: an overlap whose leaders are
 *    on different sides of a partition, each electing its own.
 * Liveness, checked at the end of the calm phase: every node that is up (all, or all but one left
 * down for good) follows one leader, the highest live id, in one term, and only that node leads.
 */
import type { NodeId } from '../../../src/election/classic/messages.js';

export interface Leadership {
  readonly node: NodeId;
  readonly incarnation: number;
  readonly term: number;
  readonly start: number;
  end: number | null;
}

export interface Overlap {
  readonly at: number;
  readonly a: { readonly node: NodeId; readonly term: number };
  readonly b: { readonly node: NodeId; readonly term: number };
  /** The two leaders were on different sides of a partition when the second was elected. */
  readonly splitBrain: boolean;
}

export type ViolationKind = 'term-reused' | 'term-went-back' | 'term-not-owned' | 'no-leader' | 'exception';

export interface Violation {
  readonly kind: ViolationKind;
  readonly at: number;
  readonly message: string;
}

export class ElectionChecker {
  readonly leaderships: Leadership[] = [];
  readonly overlaps: Overlap[] = [];
  readonly violations: Violation[] = [];
  private readonly byTerm = new Map<number, Leadership>();
  private readonly lastTerm = new Map<NodeId, number>();
  private readonly open = new Map<NodeId, Leadership>();

  constructor(private readonly members: readonly NodeId[]) {}

  /** `separated(a, b)`: a partition stands between the two nodes now. */
  elected(at: number, node: NodeId, incarnation: number, term: number, separated: (a: NodeId, b: NodeId) => boolean): void {
    const n = this.members.length;
    if (this.members[term % n] !== node) this.violations.push({ kind: 'term-not-owned', at, message: `node ${node} leads term ${term}, owned by node ${this.members[term % n]}` });
    const earlier = this.byTerm.get(term);
    if (earlier !== undefined) {
      this.violations.push({
        kind: 'term-reused',
        at,
        message: `node ${node} (incarnation ${incarnation}) leads term ${term}, already led by node ${earlier.node} (incarnation ${earlier.incarnation}) from t=${earlier.start}`,
      });
    }
    const last = this.lastTerm.get(node);
    if (last !== undefined && term <= last) this.violations.push({ kind: 'term-went-back', at, message: `node ${node} leads term ${term} after leading term ${last}` });
    for (const other of this.open.values()) {
      if (other.node === node) continue;
      this.overlaps.push({ at, a: { node: other.node, term: other.term }, b: { node, term }, splitBrain: separated(other.node, node) });
    }
    const l: Leadership = { node, incarnation, term, start: at, end: null };
    this.leaderships.push(l);
    this.byTerm.set(term, l);
    this.lastTerm.set(node, term);
    this.open.set(node, l);
  }

  /** Leadership of `node` ended (deposed, or the node crashed). */
  ended(at: number, node: NodeId): void {
    const l = this.open.get(node);
    if (l === undefined) return;
    l.end = at;
    this.open.delete(node);
  }

  /** The final liveness check: `views` is each up node's (isLeader, leader, term); `up` how many should be up. */
  settled(at: number, views: ReadonlyMap<NodeId, { readonly isLeader: boolean; readonly leader: NodeId | null; readonly term: number }>, up = this.members.length): void {
    const highest = Math.max(...views.keys());
    const leaders = [...views].filter(([, v]) => v.isLeader).map(([id]) => id);
    const problems: string[] = [];
    if (views.size !== up) problems.push(`${views.size} nodes up, expected ${up}`);
    if (leaders.length !== 1 || leaders[0] !== highest) problems.push(`leaders [${leaders.join(', ')}], expected [${highest}]`);
    const terms = new Set([...views.values()].map((v) => v.term));
    for (const [id, v] of views) if (v.leader !== highest) problems.push(`node ${id} follows ${String(v.leader)}`);
    if (terms.size !== 1) problems.push(`terms differ: ${[...views].map(([id, v]) => `${id}:${v.term}`).join(' ')}`);
    if (problems.length > 0) this.violations.push({ kind: 'no-leader', at, message: `no settled election after the faults stopped: ${problems.join('; ')}` });
  }

  get splitBrains(): Overlap[] {
    return this.overlaps.filter((o) => o.splitBrain);
  }
}
