/**
 * The Ring election (Chang and Roberts, 1979, in the form that collects every live id: Le Lann's)
 * as a pure state machine, with terms.
 *
 * - The members form a ring in id order. A node that starts, or stops hearing from its leader,
 *   sends a `ring-election` token to its successor, carrying its own id. Each node appends its id
 *   and passes the token on; every pass is acknowledged (`ring-ack`), and a successor that does
 *   not acknowledge within `answerTimeoutMs` is skipped for the next one, so crashed nodes leave
 *   the ring's path without a membership change.
 * - When the token is back at its initiator, the highest id on it wins: the initiator takes the
 *   smallest term that member owns above every term the token saw (each node raises the token's
 *   term to its own), and sends `ring-coordinator` round the ring once. Each node follows the
 *   leader it names; the named node leads.
 * - A token that does not come back within `roundTimeoutMs` (lost with a message, or with a node
 *   that crashed holding it) is replaced by a new round. A token whose initiator is gone ends
 *   where it would be passed to the initiator that does not acknowledge it (or, an election
 *   token, at a node already on it).
 * - The leader sends `coordinator` to every member every `heartbeatMs`. A node hearing from a
 *   leader lower than itself runs an election (it should have been on the token); a message with
 *   an older term is answered `stale`, and a leader that learns of a newer term steps down.
 *
 * Not safe under partitions: each side's ring skips the other side and elects its own leader.
 */
import type { ClassicMessage, NodeId } from './messages.js';
import { MachineBase, jitter, nextOwnedTerm, type ClassicConfig } from './machine.js';

type Role = 'idle' | 'follower' | 'leader';

type Token =
  | { readonly kind: 'ring-election'; readonly initiator: NodeId; readonly round: number; readonly candidates: readonly NodeId[] }
  | { readonly kind: 'ring-coordinator'; readonly initiator: NodeId; readonly round: number; readonly leader: NodeId; readonly term: number };

interface Pending {
  readonly token: Token;
  readonly target: NodeId;
}

export class RingMachine extends MachineBase<Role> {
  private ledTerm = 0;
  /** The round of this node's election in progress, or null. */
  private electing: number | null = null;
  private round: number;
  private seq = 0;
  private readonly pending = new Map<number, Pending>();

  constructor(config: ClassicConfig) {
    super(config);
    // Rounds start at a random point, so a restarted node's round is not mistaken for its earlier self's.
    this.round = Math.floor(this.random.next() * 0x4000_0000);
  }

  protected onStart(): void {
    this.role = 'follower';
    this.startElection();
  }

  private learn(term: number): boolean {
    if (term <= this.termValue) return false;
    this.termValue = term;
    this.out.persistTerm = term;
    if (this.role === 'leader') {
      this.out.events.push({ kind: 'deposed', term: this.ledTerm, reason: 'newer-term' });
      this.role = 'follower';
      this.setLeader(null);
      this.timer('heartbeat', null);
      this.timer('leader', jitter(this.random, this.c.timing.leaderTimeoutMs));
    }
    return true;
  }

  private setLeader(leader: NodeId | null): void {
    if (leader === this.leaderId) return;
    this.leaderId = leader;
    this.out.events.push({ kind: 'leader', leader, term: this.termValue });
  }

  /** The member after `after` in ring order. */
  private successor(after: NodeId): NodeId {
    const ms = this.c.members;
    const i = ms.indexOf(after);
    return ms[(i + 1) % ms.length]!;
  }

  private startElection(): void {
    this.round = (this.round + 1) % 0x4000_0000;
    this.electing = this.round;
    this.timer('leader', null);
    this.timer('round', jitter(this.random, this.c.timing.roundTimeoutMs));
    this.forward({ kind: 'ring-election', initiator: this.c.id, round: this.round, candidates: [this.c.id] }, this.c.id);
  }

  /** Passes a token to the first member after `after` (skipping none); back at this node, it is handled here. */
  private forward(token: Token, after: NodeId): void {
    const to = this.successor(after);
    if (to === this.c.id) {
      // Every other member was skipped: the token is back at this node.
      if (token.kind === 'ring-election' && token.initiator === this.c.id && token.round === this.electing) this.complete(token.candidates);
      return;
    }
    const seq = ++this.seq;
    this.pending.set(seq, { token, target: to });
    const base = { from: this.c.id, to, term: this.termValue, seq };
    this.out.messages.push(token.kind === 'ring-election' ? { ...token, ...base } : { ...token, ...base, term: token.term });
    this.timer(`ack:${seq}`, this.c.timing.answerTimeoutMs);
  }

  /** The token went round: the highest id wins, in the next term it owns. */
  private complete(candidates: readonly NodeId[]): void {
    this.electing = null;
    this.timer('round', null);
    const leader = Math.max(this.c.id, ...candidates);
    const term = nextOwnedTerm(this.termValue, this.c.members.indexOf(leader), this.c.members.length);
    this.learn(term);
    this.accept(term, leader);
    this.forward({ kind: 'ring-coordinator', initiator: this.c.id, round: this.round, leader, term }, this.c.id);
  }

  private accept(term: number, leader: NodeId): void {
    if (leader === this.c.id) {
      if (this.role === 'leader' && this.ledTerm === term) return;
      if (term <= this.c.initialTerm) {
        // This node may have led that term before it restarted (it persisted it): never lead it
        // again; elect anew, in a newer term.
        if (this.electing === null) this.startElection();
        return;
      }
      this.role = 'leader';
      this.ledTerm = term;
      this.electing = null;
      this.timer('round', null);
      this.timer('leader', null);
      this.out.events.push({ kind: 'elected', term });
      this.setLeader(this.c.id);
      this.beat();
      return;
    }
    if (leader < this.c.id) {
      // This node is higher and alive: it should have been on the token. Elect again, with it.
      if (this.electing === null) this.startElection();
      return;
    }
    this.role = 'follower';
    this.electing = null;
    this.timer('round', null);
    this.setLeader(leader);
    this.timer('leader', jitter(this.random, this.c.timing.leaderTimeoutMs));
  }

  private beat(): void {
    for (const to of this.c.members) if (to !== this.c.id) this.out.messages.push({ kind: 'coordinator', from: this.c.id, to, term: this.termValue, leader: this.c.id });
    this.timer('heartbeat', this.c.timing.heartbeatMs);
  }

  protected onTimer(name: string): void {
    if (name.startsWith('ack:')) {
      const seq = Number(name.slice(4));
      const p = this.pending.get(seq);
      if (p === undefined) return;
      this.pending.delete(seq);
      // The successor did not take the token. When it is the token's initiator, the token has
      // been round and its initiator is gone: it ends here (else it would circulate forever,
      // a dead leader's coordinator resetting every follower's timer). Otherwise skip it.
      if (p.target === p.token.initiator) return;
      this.forward(p.token, p.target);
      return;
    }
    switch (name) {
      case 'heartbeat':
        if (this.role === 'leader') this.beat();
        break;
      case 'round':
        if (this.electing !== null) this.startElection();
        break;
      case 'leader':
        if (this.role === 'follower' && this.electing === null) this.startElection();
        break;
    }
  }

  protected onMessage(m: ClassicMessage): void {
    if (this.role === 'idle') return;
    switch (m.kind) {
      case 'ring-ack':
        if (this.pending.get(m.seq)?.target === m.from) {
          this.pending.delete(m.seq);
          this.timer(`ack:${m.seq}`, null);
        }
        this.learn(m.term);
        return;
      case 'ring-election':
        this.out.messages.push({ kind: 'ring-ack', from: this.c.id, to: m.from, term: this.termValue, seq: m.seq });
        this.learn(m.term);
        if (m.initiator === this.c.id) {
          if (m.round === this.electing) this.complete(m.candidates);
          return;
        }
        // Already on it: it went round without meeting its initiator, which is gone.
        if (m.candidates.includes(this.c.id)) return;
        this.forward({ kind: 'ring-election', initiator: m.initiator, round: m.round, candidates: [...m.candidates, this.c.id] }, this.c.id);
        return;
      case 'ring-coordinator':
        this.out.messages.push({ kind: 'ring-ack', from: this.c.id, to: m.from, term: this.termValue, seq: m.seq });
        if (m.term < this.termValue) return; // an older result: a newer election is under way or done
        this.learn(m.term);
        this.accept(m.term, m.leader);
        if (m.initiator !== this.c.id) this.forward({ kind: 'ring-coordinator', initiator: m.initiator, round: m.round, leader: m.leader, term: m.term }, this.c.id);
        return;
      case 'coordinator':
        if (m.term < this.termValue) {
          this.out.messages.push({ kind: 'stale', from: this.c.id, to: m.from, term: this.termValue });
          return;
        }
        this.learn(m.term);
        this.accept(m.term, m.leader);
        return;
      case 'stale':
        this.learn(m.term);
        return;
      default:
        // Bully messages have no meaning in a Ring group.
        return;
    }
  }
}
