/**
 * What one elector reports, written to the trace and the history in the same words whichever
 * mode runs it: the shell simulation calls it from LeaderElector's events, the machine
 * simulation from the pure machine's effects.
 */
import type { Lease } from '../../src/core/index.js';
import type { History } from './checker.js';
import type { NodeClock } from './node-clock.js';
import { formatTime } from './trace.js';
import type { Trace } from './trace.js';

export class ElectorRecorder {
  constructor(
    private readonly trace: Trace,
    private readonly history: History,
    /** Identifies the elector in the history. */
    readonly key: object,
    readonly label: string,
    readonly group: string,
    readonly owner: string,
    private readonly clock: NodeClock,
  ) {}

  elected(term: number, deadlineInMs: number): void {
    this.add(`ELECTED term ${term}, leads for ${deadlineInMs} ms (${this.owner})`);
    this.history.elected(this.key, this.label, this.owner, this.group, term, this.clock.toVirtual(this.clock.now() + deadlineInMs), this.clock.pauseCount);
  }

  /** `deadline` is the local instant at which the renewed leadership ends. */
  renewed(term: number, latencyMs: number, deadline: number): void {
    const at = this.clock.toVirtual(deadline);
    this.add(`renewed term ${term} (latency ${latencyMs} ms), leads until ${formatTime(at)}`);
    this.history.renewed(this.key, this.label, term, at, this.clock.pauseCount);
  }

  deposed(term: number, reason: string, holder: Lease | null): void {
    this.add(`DEPOSED from term ${term}: ${reason}${holder ? ` (holder ${holder.owner} term ${holder.term})` : ''}`);
    this.history.deposed(this.key, this.label, term, reason, this.clock.pauseCount);
    if (reason === 'resigned') this.history.resigned(this.label, this.owner, this.group, term);
  }

  suspended(term: number): void {
    this.add(`SUSPENDED in term ${term}: a renew failed, leads until its deadline unless one succeeds`);
    this.history.suspended(this.key, this.label, term);
  }

  recovered(term: number, suspendedMs: number): void {
    this.add(`recovered term ${term} after ${suspendedMs} ms suspended`);
    this.history.recovered(this.key, this.label, term);
  }

  renewFailed(term: number, error: Error): void {
    this.add(`renew of term ${term} failed: ${error.message}`);
  }

  storeError(operation: string, error: Error): void {
    this.add(`store error in ${operation}: ${error.message}`);
    if (operation === 'loop') this.history.violate(`${this.label} ${this.group}: the elector's loop died: ${error.message}`);
  }

  workError(term: number, error: Error): void {
    this.add(`work of term ${term} failed: ${error.message}`);
  }

  leaderChanged(owner: string | null, term: number): void {
    this.add(`sees leader ${owner ?? 'none'} term ${term}`);
  }

  /** A line about this elector in the trace. */
  add(text: string): void {
    this.trace.add(this.label, `${this.group}: ${text}`);
  }
}
