/**
 * The demo's safety checks on the resource's own record of the writes it applied, in the order
 * it applied them (the stream, the row's history): gap-free, terms never go back (a lower term
 * applied after a higher one is a stale write accepted), one writer per term, and every written
 * term won by the node that wrote it. Pure: fed the record, it says what is wrong.
 */
import type { AppliedWrite } from './demo-ledger.js';

export interface TermWriter {
  readonly owner: string;
  readonly node: string;
  entries: number;
}

export class WriteHistory {
  /** term -> its writer and how many of its writes were applied. */
  readonly termWriters = new Map<number, TermWriter>();
  lastSeq = 0;
  lastTerm = 0;
  entries = 0;

  /** `violations`: where each violation found is added (shared with the demo's other checks). */
  constructor(private readonly violations: string[]) {}

  /** Check the next applied write; returns the node that wrote it, as its payload says. */
  add(w: AppliedWrite): string {
    const { seq, term, payload } = w;
    if (seq !== this.lastSeq + 1) this.violations.push(`entry #${seq} follows #${this.lastSeq}: the sequence has a gap`);
    if (term < this.lastTerm) this.violations.push(`entry #${seq} has term ${term} after term ${this.lastTerm}: a stale write was accepted`);
    let writer: { node?: unknown; owner?: unknown } = {};
    try {
      writer = JSON.parse(payload) as { node?: unknown; owner?: unknown };
    } catch {
      this.violations.push(`entry #${seq} has a payload no node wrote`);
    }
    const owner = String(writer.owner ?? '?');
    const node = String(writer.node ?? '?');
    const seen = this.termWriters.get(term);
    if (!seen) this.termWriters.set(term, { owner, node, entries: 1 });
    else {
      seen.entries++;
      if (seen.owner !== owner) this.violations.push(`term ${term} has two writers: ${seen.owner} and ${owner} (entry #${seq})`);
    }
    this.lastSeq = seq;
    this.lastTerm = Math.max(this.lastTerm, term);
    this.entries++;
    return node;
  }

  /** Every term that was written must have been won, by the node that wrote it (`electedBy`: term -> winner). */
  checkElections(electedBy: ReadonlyMap<number, { owner: string; node: string }>): void {
    for (const [term, w] of this.termWriters) {
      const won = electedBy.get(term);
      if (!won) this.violations.push(`term ${term} was written by ${w.node} but no node reported winning it`);
      else if (won.owner !== w.owner) this.violations.push(`term ${term} was won by ${won.node} but written by ${w.node}`);
    }
  }
}
