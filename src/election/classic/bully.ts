/**
 * The Bully election (Garcia-Molina, 1982) as a pure state machine, with terms.
 *
 * - A node that starts, or stops hearing from its leader, is a candidate: it sends `election` to
 *   every higher member. An `answer` from any of them means a higher node is alive and takes
 *   over: the candidate waits for its `coordinator` (and starts again if none comes within
 *   `roundTimeoutMs`). No answer within `answerTimeoutMs`: the candidate wins.
 * - A node that gets `election` from a lower one answers and runs its own election.
 * - The winner takes the smallest term it owns above every term it knows (machine.ts) and sends
 *   `coordinator` to every member, repeated every `heartbeatMs` as its heartbeat.
 * - `coordinator` from a higher node with a term not older than the known one is followed. From a
 *   lower node, the receiver bullies: it runs an election of its own (and, being higher, wins
 *   with a newer term). A message with an older term than the receiver's is answered `stale`
 *   with the receiver's term; a leader that hears of a newer term steps down at once and runs an
 *   election.
 *
 * Not safe under partitions: each side elects its own highest node. See docs/classic-elections.md.
 */
import type { ClassicMessage, NodeId } from './messages.js';
import { MachineBase, jitter, nextOwnedTerm, type ClassicConfig } from './machine.js';

type Role = 'idle' | 'follower' | 'candidate' | 'waiting' | 'leader';

export class BullyMachine extends MachineBase<Role> {
  constructor(config: ClassicConfig) {
    super(config);
  }

  get state(): Role {
    return this.role;
  }

  protected onStart(): void {
    this.campaign();
  }

  private send(m: ClassicMessage): void {
    this.out.messages.push(m);
  }

  /** Learns a term; a leader of an older term steps down. Returns whether it was newer. */
  private learn(term: number): boolean {
    if (term <= this.termValue) return false;
    this.termValue = term;
    this.out.persistTerm = term;
    if (this.role === 'leader') {
      this.out.events.push({ kind: 'deposed', term: this.leaderTermOf(), reason: 'newer-term' });
      this.role = 'follower';
      this.setLeader(null);
      this.timer('heartbeat', null);
    }
    return true;
  }

  private ledTerm = 0;
  private leaderTermOf(): number {
    return this.ledTerm;
  }

  private setLeader(leader: NodeId | null): void {
    if (leader === this.leaderId) return;
    this.leaderId = leader;
    this.out.events.push({ kind: 'leader', leader, term: this.termValue });
  }

  private campaign(): void {
    if (this.role === 'leader') return;
    this.role = 'candidate';
    this.setLeader(null);
    this.timer('leader', null);
    this.timer('round', null);
    const higher = this.c.members.filter((m) => m > this.c.id);
    if (higher.length === 0) {
      this.win();
      return;
    }
    for (const to of higher) this.send({ kind: 'election', from: this.c.id, to, term: this.termValue });
    this.timer('answer', this.c.timing.answerTimeoutMs);
  }

  private win(): void {
    const term = nextOwnedTerm(this.termValue, this.c.position, this.c.members.length);
    this.termValue = term;
    this.ledTerm = term;
    this.out.persistTerm = term;
    this.role = 'leader';
    this.timer('answer', null);
    this.timer('round', null);
    this.timer('leader', null);
    this.out.events.push({ kind: 'elected', term });
    this.setLeader(this.c.id);
    this.beat();
  }

  private beat(): void {
    for (const to of this.c.members) if (to !== this.c.id) this.send({ kind: 'coordinator', from: this.c.id, to, term: this.termValue, leader: this.c.id });
    this.timer('heartbeat', this.c.timing.heartbeatMs);
  }

  private follow(leader: NodeId): void {
    this.role = 'follower';
    this.timer('answer', null);
    this.timer('round', null);
    this.setLeader(leader);
    this.timer('leader', jitter(this.random, this.c.timing.leaderTimeoutMs));
  }

  protected onTimer(name: string): void {
    switch (name) {
      case 'heartbeat':
        if (this.role === 'leader') this.beat();
        break;
      case 'answer':
        if (this.role === 'candidate') this.win();
        break;
      case 'round':
        if (this.role === 'waiting') this.campaign();
        break;
      case 'leader':
        if (this.role === 'follower') this.campaign();
        break;
    }
  }

  protected onMessage(m: ClassicMessage): void {
    if (this.role === 'idle') return;
    if (m.term < this.termValue && m.kind !== 'stale') {
      // The sender is behind: tell it the term (a stale leader learns that it is deposed).
      this.send({ kind: 'stale', from: this.c.id, to: m.from, term: this.termValue });
      if (m.kind === 'election' && m.from < this.c.id) this.onElection(m.from);
      return;
    }
    const newer = this.learn(m.term);
    switch (m.kind) {
      case 'election':
        this.onElection(m.from);
        break;
      case 'answer':
        if (this.role === 'candidate') {
          this.role = 'waiting';
          this.timer('answer', null);
          this.timer('round', this.c.timing.roundTimeoutMs);
        }
        break;
      case 'coordinator':
        // (A lower node cannot claim this node's own term: terms name their owner.)
        if (m.leader > this.c.id) {
          this.follow(m.leader);
        } else if (this.role !== 'leader' && this.role !== 'candidate') {
          // A lower node claims to lead: bully it with an election this node wins.
          this.campaign();
        }
        break;
      case 'stale':
        // Learnt above; a node that lost its leadership to the newer term runs an election.
        if (newer && this.role !== 'candidate' && this.role !== 'waiting') this.campaign();
        break;
      default:
        // Ring messages have no meaning in a Bully group.
        break;
    }
  }

  private onElection(from: NodeId): void {
    this.send({ kind: 'answer', from: this.c.id, to: from, term: this.termValue });
    if (this.role === 'leader') {
      // Already leading: tell the candidate directly rather than electing again.
      this.send({ kind: 'coordinator', from: this.c.id, to: from, term: this.termValue, leader: this.c.id });
    } else if (this.role === 'follower') {
      this.campaign();
    }
  }
}
