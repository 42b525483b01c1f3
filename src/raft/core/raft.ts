/**
 * The Raft protocol as a deterministic state machine: messages and ticks in, state changes and
 * outgoing messages (collected in `msgs`) out. No I/O, no timers, no global clock or randomness.
 * RawNode wraps it with the Ready/advance contract the application uses.
 */
import { randomInt, type Random } from '../../core/random.js';
import { Changer, isLeaveJoint, restoreConfig, type ConfChangeResult } from './confchange.js';
import {
  invariant,
  InvalidConfChangeError,
  InvalidRaftConfigError,
  RaftError,
  type DropReason,
} from './errors.js';
import { RaftLog } from './log.js';
import { ReadOnly } from './read-only.js';
import type { Storage } from './storage.js';
import { isJoint, ProgressTracker } from './tracker.js';
import {
  decodeConfChange,
  encodeConfChange,
  message,
  NONE,
  payloadSize,
  type ConfChange,
  type ConfState,
  type Entry,
  type HardState,
  type Message,
  type MessageType,
  type NodeId,
  type ReadState,
  type Role,
  type Snapshot,
  type SoftState,
} from './types.js';

export interface RaftConfig {
  /** This node's id, > 0. */
  id: NodeId;
  /** Where the persisted log, hard state and snapshot are read. */
  storage: Storage;
  /** Source of the randomized election timeout. */
  random: Random;
  /** Election timeout T in ticks (default 10). A follower campaigns after [T, 2T) ticks without a leader. */
  electionTick?: number;
  /** Ticks between heartbeats of a leader (default 1); must be < electionTick. */
  heartbeatTick?: number;
  /** Index already applied by the application, when restarting (default: the snapshot index). */
  applied?: number;
  /** Payload bytes per append message (default 1 MiB); at least one entry is always sent, 0 means exactly one. */
  maxSizePerMsg?: number;
  /** Payload bytes of committed entries handed out per Ready (default 64 MiB; at least one). */
  maxCommittedSizePerReady?: number;
  /** Append messages in flight per follower in replicate state (default 256). */
  maxInflightMsgs?: number;
  /** Payload bytes in flight per follower (default 0: only the message count bounds it). */
  maxInflightBytes?: number;
  /** Payload bytes of the leader's uncommitted tail beyond which proposals are dropped (default 0: no bound). */
  maxUncommittedEntriesSize?: number;
  /** Ask for pre-votes before disrupting the group with a term increase (default true). */
  preVote?: boolean;
  /** A leader that has not heard from a quorum within an election timeout steps down (default true). */
  checkQuorum?: boolean;
  /**
   * `safe` (default): a read index is confirmed by a quorum heartbeat round. `leaseBased` trusts
   * the leader's lease (needs checkQuorum and bounded clock drift) and skips that round.
   */
  readOnlyOption?: 'safe' | 'leaseBased';
  /** Followers drop proposals instead of forwarding them to the leader (default false). */
  disableProposalForwarding?: boolean;
  /**
   * Read-index requests a new leader holds until an entry of its term commits (default 1024);
   * beyond it requests are dropped (ProposalDroppedError, reason `read-index-queue-full`).
   */
  maxPendingReadIndex?: number;
}

type CampaignType = 'preElection' | 'election' | 'transfer';

const TRANSFER_CONTEXT = 'transfer';

const voteRespType = (t: MessageType): MessageType => {
  if (t === 'vote') return 'voteResp';
  if (t === 'preVote') return 'preVoteResp';
  throw new RaftError('INVARIANT_VIOLATED', `no response type for ${t}`);
};

export class Raft {
  readonly id: NodeId;
  term = 0;
  vote: NodeId = NONE;
  lead: NodeId = NONE;
  role: Role = 'follower';
  readonly log: RaftLog;
  readonly tracker: ProgressTracker;
  /** Outgoing messages, taken by RawNode.ready(). */
  msgs: Message[] = [];
  /** Answered read-index requests, taken by RawNode.ready(). */
  readStates: ReadState[] = [];

  readonly electionTimeout: number;
  readonly heartbeatTimeout: number;
  /** Ticks since the last election timeout reset (leader: since the last CheckQuorum round). */
  electionElapsed = 0;
  heartbeatElapsed = 0;
  randomizedElectionTimeout = 0;

  readonly checkQuorum: boolean;
  readonly preVote: boolean;
  readonly readOnlyOption: 'safe' | 'leaseBased';
  readonly disableProposalForwarding: boolean;
  readonly maxSizePerMsg: number;
  readonly maxUncommittedSize: number;
  readonly maxPendingReadIndex: number;

  /** The node leadership is being transferred to, or NONE. */
  leadTransferee: NodeId = NONE;
  /**
   * Ticks left to campaign for a TimeoutNow that came while a committed conf change was not yet
   * applied (0: none). The campaign starts once the change is applied (see appliedTo).
   */
  private transferDue = 0;
  /** Index of the last conf change proposed by this leader; no new one until it is applied. */
  pendingConfIndex = 0;
  /** Payload bytes appended by this leader and not yet committed (approximate; see reduceUncommittedSize). */
  uncommittedSize = 0;
  private readOnly = new ReadOnly();
  /** Read-index requests that arrived before this leader committed an entry of its term. */
  private pendingReadIndex: Message[] = [];
  private readonly random: Random;

  constructor(config: RaftConfig) {
    validate(config);
    this.id = config.id;
    this.random = config.random;
    this.electionTimeout = config.electionTick ?? 10;
    this.heartbeatTimeout = config.heartbeatTick ?? 1;
    this.checkQuorum = config.checkQuorum ?? true;
    this.preVote = config.preVote ?? true;
    this.readOnlyOption = config.readOnlyOption ?? 'safe';
    this.disableProposalForwarding = config.disableProposalForwarding ?? false;
    this.maxSizePerMsg = config.maxSizePerMsg ?? 1024 * 1024;
    this.maxUncommittedSize = config.maxUncommittedEntriesSize ?? 0;
    this.maxPendingReadIndex = config.maxPendingReadIndex ?? 1024;
    this.log = new RaftLog(config.storage, config.maxCommittedSizePerReady ?? 64 * 1024 * 1024);
    this.tracker = new ProgressTracker(config.maxInflightMsgs ?? 256, config.maxInflightBytes ?? 0);

    const { hardState, confState } = config.storage.initialState();
    this.useConfig(restoreConfig(this.tracker, confState, this.log.lastIndex()));
    if (hardState.term !== 0 || hardState.vote !== NONE || hardState.commit !== 0) this.loadHardState(hardState);
    if (config.applied !== undefined && config.applied > 0) this.log.appliedTo(config.applied);
    this.becomeFollower(this.term, NONE);
  }

  // ---------------------------------------------------------------- state views

  softState(): SoftState {
    return { lead: this.lead, role: this.role };
  }

  hardState(): HardState {
    return { term: this.term, vote: this.vote, commit: this.log.committed };
  }

  /** Whether this node may campaign: a voter of the current configuration with no snapshot pending. */
  promotable(): boolean {
    const pr = this.tracker.progress.get(this.id);
    return pr !== undefined && !pr.isLearner && this.log.unstable.snapshot === undefined;
  }

  private loadHardState(hs: HardState): void {
    invariant(
      hs.commit >= this.log.committed && hs.commit <= this.log.lastIndex(),
      () => `stored commit ${hs.commit} outside [${this.log.committed}, ${this.log.lastIndex()}]`,
    );
    this.log.commitTo(hs.commit);
    this.term = hs.term;
    this.vote = hs.vote;
  }

  // ---------------------------------------------------------------- role transitions

  /**
   * Moves to `term` (never backwards) and clears per-term volatile state. The election timeout
   * is drawn again, in [T, 2T); the ticks elapsed restart from 0 unless `keepElapsed` (see
   * `step` on a vote request).
   */
  private reset(term: number, keepElapsed = false): void {
    if (term !== this.term) {
      invariant(term > this.term, () => `term would go back from ${this.term} to ${term}`);
      this.term = term;
      this.vote = NONE;
    }
    this.lead = NONE;
    if (!keepElapsed) this.electionElapsed = 0;
    this.heartbeatElapsed = 0;
    this.randomizedElectionTimeout = this.electionTimeout + randomInt(this.random, 0, this.electionTimeout);
    this.leadTransferee = NONE;
    this.transferDue = 0;
    this.tracker.resetVotes();
    const last = this.log.lastIndex();
    for (const [id, pr] of this.tracker.progress) {
      const fresh = this.tracker.newProgress(last + 1, pr.isLearner);
      fresh.recentActive = false;
      if (id === this.id) fresh.match = last;
      this.tracker.progress.set(id, fresh);
    }
    this.pendingConfIndex = 0;
    this.uncommittedSize = 0;
    this.readOnly = new ReadOnly();
    this.pendingReadIndex = [];
  }

  becomeFollower(term: number, lead: NodeId, keepElapsed = false): void {
    this.reset(term, keepElapsed);
    this.lead = lead;
    this.role = 'follower';
  }

  private becomePreCandidate(): void {
    invariant(this.role !== 'leader', () => 'a leader cannot become a pre-candidate');
    // A pre-candidate changes neither its term nor its vote: a lost pre-vote leaves no trace.
    this.tracker.resetVotes();
    this.lead = NONE;
    this.role = 'preCandidate';
  }

  private becomeCandidate(): void {
    invariant(this.role !== 'leader', () => 'a leader cannot become a candidate');
    this.reset(this.term + 1);
    this.grantVote(this.id);
    this.role = 'candidate';
  }

  private becomeLeader(): void {
    invariant(this.role === 'candidate', () => `only a candidate becomes leader, not a ${this.role}`);
    this.reset(this.term);
    this.lead = this.id;
    this.role = 'leader';
    const self = this.tracker.progress.get(this.id);
    if (self !== undefined) {
      self.becomeReplicate();
      self.recentActive = true;
    }
    // Conf changes in the uncommitted tail may be pending; be conservative.
    this.pendingConfIndex = this.log.lastIndex();
    // The no-op entry of the new term: once it commits, everything before it is committed too,
    // which a leader cannot learn by counting replicas of older entries (Figure 8).
    const ok = this.appendEntries([{ term: 0, index: 0, type: 'normal', data: new Uint8Array() }]);
    invariant(ok, () => 'the empty entry of a new leader was refused');
  }

  /** Records the vote for `id` in this term; a second, different vote in one term is a bug. */
  private grantVote(id: NodeId): void {
    invariant(this.vote === NONE || this.vote === id, () => `vote for ${id} in term ${this.term}, already voted for ${this.vote}`);
    this.vote = id;
  }

  // ---------------------------------------------------------------- ticks

  tick(): void {
    if (this.role === 'leader') this.tickHeartbeat();
    else this.tickElection();
  }

  private tickElection(): void {
    this.electionElapsed++;
    // The old leader gives a transfer an election timeout; a later campaign would only disrupt.
    if (this.transferDue > 0) this.transferDue--;
    if (this.promotable()) {
      if (this.electionElapsed >= this.randomizedElectionTimeout) {
        this.electionElapsed = 0;
        this.step(message({ type: 'hup', from: this.id }));
      }
    } else if (this.lead !== NONE && this.electionElapsed >= this.randomizedElectionTimeout) {
      // A voter forgets a leader it no longer hears from when it campaigns; a node that cannot
      // campaign (a learner) kept it for good and went on forwarding proposals and reads to a
      // leader that had crashed (or restarted as a follower), where they vanished and clients
      // waited out their timeouts (simulator seed 3132963523). Forget it at the same point: such
      // requests are then refused at once ('no-leader') until a leader is heard from again.
      this.lead = NONE;
    }
  }

  private tickHeartbeat(): void {
    this.heartbeatElapsed++;
    this.electionElapsed++;
    if (this.electionElapsed >= this.electionTimeout) {
      this.electionElapsed = 0;
      if (this.checkQuorum) this.step(message({ type: 'checkQuorum', from: this.id }));
      // A transfer that has not finished within an election timeout is abandoned.
      if (this.role === 'leader' && this.leadTransferee !== NONE) this.leadTransferee = NONE;
      // A leader that is no longer a voter tries again, perhaps with another voter.
      if (this.role === 'leader' && !this.tracker.isVoter(this.id)) this.handOver();
    }
    if (this.role !== 'leader') return;
    this.maybeAutoLeave();
    if (this.heartbeatElapsed >= this.heartbeatTimeout) {
      this.heartbeatElapsed = 0;
      this.step(message({ type: 'beat', from: this.id }));
    }
  }

  // ---------------------------------------------------------------- sending

  private send(m: Message): void {
    const from = m.from === NONE ? this.id : m.from;
    let term = m.term;
    if (m.type === 'vote' || m.type === 'preVote' || m.type === 'voteResp' || m.type === 'preVoteResp') {
      invariant(term !== 0, () => `${m.type} sent without a term`);
    } else if (m.type !== 'prop' && m.type !== 'readIndex') {
      // Forwarded proposals and reads carry no term: they are local to whoever takes them.
      term = this.term;
    }
    this.msgs.push({ ...m, from, term });
  }

  /** Sends an append (or a snapshot) to `to` if flow control allows. Returns whether a message went out. */
  private maybeSendAppend(to: NodeId, sendIfEmpty: boolean): boolean {
    const pr = this.tracker.progress.get(to);
    if (pr === undefined || pr.isPaused()) return false;
    const prevIndex = pr.next - 1;
    const prevTerm = this.log.term(prevIndex);
    const entries = prevTerm === undefined ? undefined : this.log.entriesFrom(pr.next, this.maxSizePerMsg);
    if (prevTerm === undefined || entries === undefined) return this.maybeSendSnapshot(to);
    if (entries.length === 0 && !sendIfEmpty) return false;
    this.send(message({ type: 'app', to, index: prevIndex, logTerm: prevTerm, entries, commit: this.log.committed }));
    pr.sentEntries(entries.length, payloadSize(entries));
    pr.sentCommit = Math.max(pr.sentCommit, this.log.committed);
    return true;
  }

  private sendAppend(to: NodeId): void {
    this.maybeSendAppend(to, true);
  }

  private maybeSendSnapshot(to: NodeId): boolean {
    const pr = this.tracker.progress.get(to)!;
    // A follower not heard from lately may be down; do not build and ship a snapshot for nothing.
    if (!pr.recentActive) return false;
    let snapshot: Snapshot;
    try {
      snapshot = this.log.snapshot();
    } catch (err) {
      if (err instanceof RaftError && err.code === 'SNAPSHOT_UNAVAILABLE') return false;
      throw err;
    }
    invariant(snapshot.metadata.index > 0, () => `snapshot needed for ${to} but the snapshot is empty`);
    pr.becomeSnapshot(snapshot.metadata.index);
    this.send(message({ type: 'snap', to, snapshot }));
    return true;
  }

  private sendHeartbeat(to: NodeId, context: string | undefined): void {
    // Never claim a commit index beyond what the follower is known to hold.
    const pr = this.tracker.progress.get(to);
    const commit = Math.min(pr?.match ?? 0, this.log.committed);
    if (pr !== undefined) pr.sentCommit = Math.max(pr.sentCommit, commit);
    this.send(message({ type: 'heartbeat', to, commit, context }));
  }

  private forEachPeer(fn: (id: NodeId) => void): void {
    for (const id of this.tracker.ids()) if (id !== this.id) fn(id);
  }

  private bcastAppend(): void {
    this.forEachPeer((id) => this.sendAppend(id));
  }

  private bcastHeartbeat(context?: string): void {
    const ctx = context ?? this.readOnly.lastPendingContext();
    this.forEachPeer((id) => this.sendHeartbeat(id, ctx));
  }

  // ---------------------------------------------------------------- leader log writes

  /** Leader: stamps and appends entries; false when the uncommitted size bound refuses them. */
  private appendEntries(entries: readonly Entry[]): boolean {
    const last = this.log.lastIndex();
    const stamped = entries.map((e, i) => ({ ...e, term: this.term, index: last + 1 + i }));
    if (!this.increaseUncommittedSize(stamped)) return false;
    const newLast = this.log.append(stamped);
    this.tracker.progress.get(this.id)?.maybeUpdate(newLast);
    this.maybeCommit();
    return true;
  }

  private increaseUncommittedSize(entries: readonly Entry[]): boolean {
    const size = payloadSize(entries);
    // An empty uncommitted tail always takes one proposal, however large, so nothing stalls.
    if (this.maxUncommittedSize > 0 && this.uncommittedSize > 0 && size > 0 && this.uncommittedSize + size > this.maxUncommittedSize) {
      return false;
    }
    this.uncommittedSize += size;
    return true;
  }

  /** Called as committed entries are handed out: they no longer count against the bound. */
  reduceUncommittedSize(entries: readonly Entry[]): void {
    if (this.role !== 'leader') return;
    // Entries appended by an earlier leader were never counted; the tail is bounded below by 0.
    this.uncommittedSize = Math.max(0, this.uncommittedSize - payloadSize(entries));
  }

  private maybeCommit(): boolean {
    return this.log.maybeCommit(this.tracker.committed(), this.term);
  }

  private committedEntryInCurrentTerm(): boolean {
    return this.log.zeroTermOnMissing(this.log.committed) === this.term;
  }

  // ---------------------------------------------------------------- elections

  private hasUnappliedConfChanges(): boolean {
    if (this.log.applied >= this.log.committed) return false;
    const lo = Math.max(this.log.applied + 1, this.log.firstIndex());
    for (const e of this.log.slice(lo, this.log.committed + 1)) if (e.type === 'confChange') return true;
    return false;
  }

  private hup(kind: CampaignType): void {
    if (this.role === 'leader') return;
    if (!this.promotable()) return;
    // A conf change committed but not applied may change who votes; wait until it is applied.
    if (this.hasUnappliedConfChanges()) return;
    this.campaign(kind);
  }

  private campaign(kind: CampaignType): void {
    let voteMsg: MessageType;
    let term: number;
    if (kind === 'preElection') {
      this.becomePreCandidate();
      voteMsg = 'preVote';
      // Pre-votes ask for the term the node would take, without taking it.
      term = this.term + 1;
    } else {
      this.becomeCandidate();
      voteMsg = 'vote';
      term = this.term;
    }
    this.tracker.recordVote(this.id, true);
    if (this.tracker.tallyVotes().result === 'won') {
      // A single-voter group wins at once.
      if (kind === 'preElection') this.campaign('election');
      else this.becomeLeader();
      return;
    }
    const lastIndex = this.log.lastIndex();
    const lastTerm = this.log.lastTerm();
    for (const id of this.tracker.voterIds()) {
      if (id === this.id) continue;
      this.send(
        message({
          type: voteMsg,
          to: id,
          term,
          index: lastIndex,
          logTerm: lastTerm,
          context: kind === 'transfer' ? TRANSFER_CONTEXT : undefined,
        }),
      );
    }
  }

  /**
   * What a refusal of (pre)vote request `m` tells the candidate about commitment: `commit` is an
   * index of the candidate's log (at most its last index) that this node knows committed, with
   * its term in `logTerm`; 0 when there is nothing to tell.
   *
   * Not in etcd. A candidate can be refused for good by nodes that can never campaign: a leader
   * removed or demoted by a conf change, which crashed (or lost its quorum) before the others
   * learnt that the change committed, has a longer log than the remaining voters, who still count
   * it as a voter and need its vote (simulator seeds 3222745857 and 3222756919). Committed is
   * committed whoever says it: if the candidate holds the same entry at `commit` (same term), its
   * log matches this one up to there, so that prefix is committed; the candidate applies the conf
   * change and no longer needs the refusing node's vote.
   */
  private commitHint(m: Message): { commit: number; logTerm: number } {
    const k = Math.min(this.log.committed, m.index);
    const t = k > 0 ? this.log.term(k) : undefined;
    return t === undefined ? { commit: 0, logTerm: 0 } : { commit: k, logTerm: t };
  }

  /** Takes the commit index a refused (pre)vote carries (see commitHint), if this log has that entry. */
  private takeCommitHint(m: Message): void {
    if (this.role === 'leader' || m.commit <= this.log.committed) return;
    if (this.log.matchTerm(m.commit, m.logTerm)) this.log.commitTo(m.commit);
  }

  // ---------------------------------------------------------------- step

  /**
   * Handles one message. Returns a DropReason when a proposal, read or transfer request was not
   * taken (the caller decides whether that is an error), undefined otherwise.
   */
  step(m: Message): DropReason | undefined {
    if ((m.type === 'voteResp' || m.type === 'preVoteResp') && m.reject) this.takeCommitHint(m);
    if (m.term === 0) {
      // local message
    } else if (m.term > this.term) {
      if (m.type === 'vote' || m.type === 'preVote') {
        const force = m.context === TRANSFER_CONTEXT;
        // A leader never campaigns: a request from the leader this node remembers proves that
        // leader has stepped down (or crashed and restarted), so its lease protects nobody.
        // Ignoring it left a restarted leader unable to win while its old heartbeats, delayed
        // in the network, kept renewing the lease it no longer held (simulator seed 917564).
        const inLease = this.checkQuorum && this.lead !== NONE && this.lead !== m.from && this.electionElapsed < this.electionTimeout;
        // Heard from a live leader within the election timeout: a candidate asking for a higher
        // term is probably a node rejoining from a partition; ignore it rather than depose the leader.
        if (!force && inLease) return undefined;
      }
      if (m.type === 'preVote') {
        // Never change term on a pre-vote.
      } else if (m.type === 'preVoteResp' && !m.reject) {
        // A granted pre-vote carries the term the pre-candidate asked for; it is counted below.
      } else if (m.type === 'app' || m.type === 'heartbeat' || m.type === 'snap') {
        this.becomeFollower(m.term, m.from);
      } else if (m.type === 'vote') {
        const aloneLeader = m.context !== TRANSFER_CONTEXT && this.role === 'leader' && this.tracker.isQuorumAlone(this.id);
        // Take the term (and a fresh random timeout), but keep counting the ticks elapsed: the
        // count restarts below only if the vote is granted (Raft paper, Figure 2: a follower
        // campaigns when its timeout passes "without receiving AppendEntries from the current
        // leader or granting vote to a candidate"). etcd restarts it on every term change; then,
        // without PreVote, candidates whose logs are too short to win keep restarting the timer
        // of the only node that can win, and the group can stay leaderless for many rounds
        // (simulator seed 717508).
        this.becomeFollower(m.term, NONE, true);
        if (aloneLeader) {
          // A leader that is alone a quorum (the single voter, or (1)&&(1)) would win any
          // election at once, and no candidate wins without its vote. Having taken the higher
          // term, it answers the request and, unless it granted the vote, is elected again in
          // the next term right away, instead of leaving the group leaderless for an election
          // timeout. The usual candidate is a node removed by a conf change whose commit it never
          // learnt (the leader no longer replicates to it): it still counts itself a voter and
          // campaigns at ever higher terms; without PreVote and CheckQuorum each of its requests
          // deposed the only voter, and no client write completed (simulator seed 387134795).
          // Ignoring the request instead is wrong: the leader stays behind a term that nodes it
          // may later add already hold, and they ignore its appends (seed 5003233).
          this.answerVote(m);
          if (this.vote !== m.from) this.hup('election');
          return undefined;
        }
      } else {
        this.becomeFollower(m.term, NONE);
      }
    } else if (m.term < this.term) {
      if ((this.checkQuorum || this.preVote || !this.promotable()) && (m.type === 'heartbeat' || m.type === 'app')) {
        // A stale leader (from before a partition) learns the new term from this answer and steps
        // down; otherwise, with PreVote or CheckQuorum, it could keep the group without a leader
        // because this node ignores its messages and never campaigns against it. Without them a
        // voter campaigns and so deposes it, but a node that cannot campaign (a learner in its
        // own eyes, perhaps one the stale leader has since made a voter) never would: it took a
        // higher term from a removed node's vote request and then ignored every append, and the
        // leader, needing it for its quorum, waited forever (simulator seed 900057585).
        this.send(message({ type: 'appResp', to: m.from }));
      } else if (m.type === 'preVote' || m.type === 'vote') {
        // Refused with this node's term, so the candidate catches up (Raft paper, Figure 2: the
        // reply carries currentTerm "for candidate to update itself"). etcd ignores a stale vote
        // request; then a candidate behind in term can stay behind for good when the nodes ahead
        // never write to it: a voter whose log is too short to learn the conf change that added
        // the candidate campaigns at ever higher terms to its old members only, and refuses the
        // one candidate that can win, whose term never catches up (simulator seed 1641233311).
        this.send(message({ type: voteRespType(m.type), to: m.from, term: this.term, reject: true, ...this.commitHint(m) }));
      }
      return undefined;
    }

    switch (m.type) {
      case 'hup':
        this.hup(this.preVote ? 'preElection' : 'election');
        return undefined;
      case 'vote':
      case 'preVote':
        this.answerVote(m);
        return undefined;
      default:
        switch (this.role) {
          case 'leader':
            return this.stepLeader(m);
          case 'candidate':
          case 'preCandidate':
            return this.stepCandidate(m);
          case 'follower':
            return this.stepFollower(m);
        }
    }
  }

  /** Grants or refuses the (pre)vote request `m`, of this node's term or, for a pre-vote, a later one. */
  private answerVote(m: Message): void {
    const canVote =
      this.vote === m.from ||
      (this.vote === NONE && this.lead === NONE) ||
      (m.type === 'preVote' && m.term > this.term);
    if (canVote && this.log.isUpToDate(m.index, m.logTerm)) {
      // A granted answer carries the candidate's term, so it is counted in that term.
      this.send(message({ type: voteRespType(m.type), to: m.from, term: m.term }));
      if (m.type === 'vote') {
        this.electionElapsed = 0;
        this.grantVote(m.from);
      }
    } else {
      this.send(message({ type: voteRespType(m.type), to: m.from, term: this.term, reject: true, ...this.commitHint(m) }));
    }
  }

  private stepLeader(m: Message): DropReason | undefined {
    switch (m.type) {
      case 'beat':
        this.bcastHeartbeat();
        return undefined;
      case 'checkQuorum':
        if (!this.tracker.quorumActive()) {
          this.becomeFollower(this.term, NONE);
          return undefined;
        }
        for (const [id, pr] of this.tracker.progress) pr.recentActive = id === this.id;
        return undefined;
      case 'prop':
        return this.propose(m);
      case 'readIndex':
        // Alone a quorum (one voter, or a joint configuration whose halves are both just this
        // node): no heartbeat round could confirm more, and none would be answered (nobody else
        // acks), so answer now. Checking only for a single non-joint voter left reads on the
        // joint (1) && (1) waiting forever (simulator seed 920709).
        if (this.tracker.isQuorumAlone(this.id)) {
          this.answerReadIndex(m, this.log.committed);
          return undefined;
        }
        // Until an entry of this term commits, the leader's commit index may be behind what an
        // earlier leader committed; the read must wait.
        if (!this.committedEntryInCurrentTerm()) {
          // Bounded: a leader whose first commit is slow must not queue reads without limit.
          if (this.pendingReadIndex.length >= this.maxPendingReadIndex) return 'read-index-queue-full';
          this.pendingReadIndex.push(m);
          return undefined;
        }
        this.startReadIndex(m);
        return undefined;
      case 'transferLeader':
        this.transferLeadership(m);
        return undefined;
      default:
        break;
    }

    const pr = this.tracker.progress.get(m.from);
    if (pr === undefined) return undefined;
    switch (m.type) {
      case 'appResp':
        pr.recentActive = true;
        if (m.reject) {
          let nextProbe = m.rejectHint;
          // The hint names the follower's last term at or before the hint index: skip every
          // entry of later terms in one round trip instead of one index at a time.
          if (m.logTerm > 0) nextProbe = this.log.findConflictByTerm(m.rejectHint, m.logTerm);
          if (pr.maybeDecrTo(m.index, nextProbe)) {
            if (pr.state === 'replicate') pr.becomeProbe();
            this.sendAppend(m.from);
          }
          return undefined;
        }
        if (pr.maybeUpdate(m.index) || (pr.match === m.index && pr.state === 'probe')) {
          if (pr.state === 'probe') {
            pr.becomeReplicate();
          } else if (pr.state === 'snapshot' && pr.match + 1 >= this.log.firstIndex()) {
            pr.becomeProbe();
            pr.becomeReplicate();
          } else if (pr.state === 'replicate') {
            pr.inflights.freeLE(m.index);
          }
          if (this.maybeCommit()) {
            this.releasePendingReadIndex();
            this.bcastAppend();
          }
          // Stream what the follower still lacks, as far as flow control allows.
          let sent = false;
          for (let n = 0; n < this.tracker.maxInflight && this.maybeSendAppend(m.from, false); n++) sent = true;
          // Nothing new to send, but the follower may not know the commit index yet.
          if (!sent && pr.canBumpCommit(this.log.committed)) this.maybeSendAppend(m.from, true);
          if (m.from === this.leadTransferee && pr.match === this.log.lastIndex()) {
            if (!this.tracker.isVoter(this.id)) {
              this.finishHandOver(m.from);
              return undefined;
            }
            this.send(message({ type: 'timeoutNow', to: m.from }));
          }
        }
        return undefined;
      case 'heartbeatResp':
        pr.recentActive = true;
        pr.probeSent = false;
        // No answer for a while to a full window: free a slot so replication can go on.
        if (pr.state === 'replicate' && pr.inflights.full()) pr.inflights.freeFirstOne();
        if (pr.match < this.log.lastIndex() || pr.state === 'probe') this.sendAppend(m.from);
        if (this.readOnlyOption !== 'safe' || m.context === undefined) return undefined;
        {
          const acks = this.readOnly.recvAck(m.from, m.context);
          if (acks === undefined) return undefined;
          const votes = new Map<NodeId, boolean>();
          for (const id of acks) votes.set(id, true);
          if (this.tracker.voteResult(votes) !== 'won') return undefined;
          for (const rs of this.readOnly.advance(m.context)) this.answerReadIndex(rs.request, rs.index);
        }
        return undefined;
      case 'snapStatus':
        if (pr.state !== 'snapshot') return undefined;
        if (m.reject) pr.pendingSnapshot = 0;
        pr.becomeProbe();
        // Wait for the follower's answer (or a heartbeat reply) before probing.
        pr.probeSent = true;
        return undefined;
      case 'unreachable':
        // Appends in flight were probably lost.
        if (pr.state === 'replicate') pr.becomeProbe();
        return undefined;
      default:
        return undefined;
    }
  }

  private transferLeadership(m: Message): void {
    const transferee = m.transferee ?? NONE;
    const pr = this.tracker.progress.get(transferee);
    // Only a voter of the configuration can take over.
    if (pr === undefined || pr.isLearner) return;
    if (this.leadTransferee !== NONE) {
      if (this.leadTransferee === transferee) return;
      this.leadTransferee = NONE; // a new target replaces the old one
    }
    if (transferee === this.id) return;
    // The transfer must finish within one election timeout.
    this.electionElapsed = 0;
    this.leadTransferee = transferee;
    if (pr.match === this.log.lastIndex()) this.send(message({ type: 'timeoutNow', to: transferee }));
    else this.sendAppend(transferee);
  }

  private propose(m: Message): DropReason | undefined {
    invariant(m.entries.length > 0, () => 'a proposal without entries');
    if (!this.tracker.progress.has(this.id)) return 'not-a-member';
    if (this.leadTransferee !== NONE) return 'transferring-leadership';
    for (let i = 0; i < m.entries.length; i++) {
      const e = m.entries[i]!;
      if (e.type !== 'confChange') continue;
      const cc = decodeConfChange(e.data);
      const joint = isJoint(this.tracker.config);
      if (this.pendingConfIndex > this.log.applied) return 'conf-change-pending';
      if (isLeaveJoint(cc) && !joint) return 'conf-change-not-joint';
      if (!isLeaveJoint(cc) && joint) return 'conf-change-already-joint';
      try {
        new Changer(this.tracker, this.log.lastIndex()).apply(cc);
      } catch (err) {
        if (err instanceof InvalidConfChangeError) return 'conf-change-invalid';
        throw err;
      }
    }
    const before = this.log.lastIndex();
    if (!this.appendEntries(m.entries)) return 'uncommitted-size-limit';
    m.entries.forEach((e, i) => {
      if (e.type === 'confChange') this.pendingConfIndex = before + 1 + i;
    });
    this.bcastAppend();
    return undefined;
  }

  private stepCandidate(m: Message): DropReason | undefined {
    const myVoteResp: MessageType = this.role === 'preCandidate' ? 'preVoteResp' : 'voteResp';
    switch (m.type) {
      case 'prop':
      case 'readIndex':
      case 'transferLeader':
        return 'no-leader';
      case 'app':
        this.becomeFollower(m.term, m.from);
        this.handleAppend(m);
        return undefined;
      case 'heartbeat':
        this.becomeFollower(m.term, m.from);
        this.handleHeartbeat(m);
        return undefined;
      case 'snap':
        this.becomeFollower(m.term, m.from);
        this.handleSnapshot(m);
        return undefined;
      case 'voteResp':
      case 'preVoteResp': {
        if (m.type !== myVoteResp) return undefined;
        this.tracker.recordVote(m.from, !m.reject);
        const { result } = this.tracker.tallyVotes();
        if (result === 'won') {
          if (this.role === 'preCandidate') {
            this.campaign('election');
          } else {
            this.becomeLeader();
            this.bcastAppend();
          }
        } else if (result === 'lost') {
          // A rejection with a higher term already made this node a follower above.
          this.becomeFollower(this.term, NONE);
        }
        return undefined;
      }
      default:
        return undefined;
    }
  }

  private stepFollower(m: Message): DropReason | undefined {
    // A read, proposal or transfer another node sent here (it took this node for the leader) is
    // not relayed: relayed, it would leave as a message from that node sent by this one, which a
    // transport that authenticates its peers refuses, batch and all (with nodes in separate
    // processes, a follower read racing a change of leader stopped the node that relayed it).
    // Dropped, the sender's read or transfer times out and is asked again; its proposals are not
    // relayed either (a node proposes only as leader).
    if ((m.type === 'prop' || m.type === 'readIndex' || m.type === 'transferLeader') && m.from !== NONE && m.from !== this.id) return undefined;
    switch (m.type) {
      case 'prop':
        // A node its own configuration no longer lists gets no more entries from the leader: it
        // could never report the proposal applied, nor serve a read. Refuse at once rather than
        // leave the client waiting for its timeout (simulator seed 3222729836).
        if (!this.tracker.progress.has(this.id)) return 'not-a-member';
        if (this.lead === NONE) return 'no-leader';
        if (this.disableProposalForwarding) return 'forwarding-disabled';
        this.send({ ...m, to: this.lead });
        return undefined;
      case 'app':
        this.electionElapsed = 0;
        this.lead = m.from;
        this.handleAppend(m);
        return undefined;
      case 'heartbeat':
        this.electionElapsed = 0;
        this.lead = m.from;
        this.handleHeartbeat(m);
        return undefined;
      case 'snap':
        this.electionElapsed = 0;
        this.lead = m.from;
        this.handleSnapshot(m);
        return undefined;
      case 'readIndex':
        if (!this.tracker.progress.has(this.id)) return 'not-a-member';
        if (this.lead === NONE) return 'no-leader';
        this.send({ ...m, to: this.lead });
        return undefined;
      case 'transferLeader':
        if (this.lead === NONE) return 'no-leader';
        this.send({ ...m, to: this.lead });
        return undefined;
      case 'timeoutNow':
        // The leader asks this node to campaign now. No pre-vote: there is no partition to
        // recover from, and the leader is waiting.
        if (this.hasUnappliedConfChanges()) {
          // The heartbeat that told this node the commit index of a conf change (often the very
          // change that removed or demoted the leader, which then hands over and steps down)
          // arrives just before TimeoutNow, ahead of the application applying that change. hup
          // refuses to campaign until it is applied (and the change may be what makes this node
          // a voter); dropping the request left a group whose old leader had already stepped down
          // without a leader for a whole election timeout (simulator seed 387137903). Campaign as
          // soon as the change is applied instead (hup then checks again).
          this.transferDue = this.electionTimeout;
          return undefined;
        }
        this.hup('transfer');
        return undefined;
      case 'readIndexResp':
        this.readStates.push({ index: m.index, context: m.context ?? '' });
        return undefined;
      default:
        return undefined;
    }
  }

  // ---------------------------------------------------------------- follower handlers

  private handleAppend(m: Message): void {
    if (m.index < this.log.committed) {
      // Old or duplicated: everything up to commit is known to match.
      this.send(message({ type: 'appResp', to: m.from, index: this.log.committed }));
      return;
    }
    const lastNew = this.log.maybeAppend(m.index, m.logTerm, m.commit, m.entries);
    if (lastNew !== undefined) {
      this.send(message({ type: 'appResp', to: m.from, index: lastNew }));
      return;
    }
    // Mismatch at m.index. Hint the largest index whose term is ≤ the leader's term there: entries
    // after it cannot match, so the leader can skip them all.
    const hintIndex = this.log.findConflictByTerm(Math.min(m.index, this.log.lastIndex()), m.logTerm);
    const hintTerm = this.log.zeroTermOnMissing(hintIndex);
    this.send(message({ type: 'appResp', to: m.from, index: m.index, reject: true, rejectHint: hintIndex, logTerm: hintTerm }));
  }

  private handleHeartbeat(m: Message): void {
    // The leader sends at most what this node is known to match.
    this.log.commitTo(Math.min(m.commit, this.log.lastIndex()));
    this.send(message({ type: 'heartbeatResp', to: m.from, context: m.context }));
  }

  private handleSnapshot(m: Message): void {
    const snap = m.snapshot;
    if (snap === undefined) return;
    if (this.restore(snap)) {
      this.send(message({ type: 'appResp', to: m.from, index: this.log.lastIndex() }));
    } else {
      this.send(message({ type: 'appResp', to: m.from, index: this.log.committed }));
    }
  }

  /** Replaces the log with `snap` when it is ahead of the commit index; returns whether it did. */
  private restore(snap: Snapshot): boolean {
    const { index, term, confState } = snap.metadata;
    if (index <= this.log.committed) return false;
    if (this.role !== 'follower') {
      // Only a leader of a later term sends snapshots; be a follower before taking one.
      this.becomeFollower(this.term + 1, NONE);
      return false;
    }
    // A snapshot that does not list this node is still committed state from the current leader:
    // a node being added learns of its own addition from the entries that follow the snapshot.
    if (this.log.matchTerm(index, term)) {
      // The log already has the snapshot's last entry: just move the commit index.
      this.log.commitTo(index);
      return false;
    }
    this.log.restore(snap);
    this.useConfig(restoreConfig(this.tracker, confState, this.log.lastIndex()));
    const self = this.tracker.progress.get(this.id);
    if (self !== undefined) self.match = index;
    return true;
  }

  // ---------------------------------------------------------------- reads

  private startReadIndex(m: Message): void {
    if (this.readOnlyOption === 'leaseBased') {
      this.answerReadIndex(m, this.log.committed);
      return;
    }
    const ctx = m.context ?? '';
    this.readOnly.addRequest(this.log.committed, m);
    this.readOnly.recvAck(this.id, ctx);
    this.bcastHeartbeat(ctx);
  }

  private releasePendingReadIndex(): void {
    if (this.pendingReadIndex.length === 0 || !this.committedEntryInCurrentTerm()) return;
    const pending = this.pendingReadIndex;
    this.pendingReadIndex = [];
    for (const m of pending) this.startReadIndex(m);
  }

  private answerReadIndex(req: Message, index: number): void {
    if (req.from === NONE || req.from === this.id) {
      this.readStates.push({ index, context: req.context ?? '' });
    } else {
      this.send(message({ type: 'readIndexResp', to: req.from, index, context: req.context }));
    }
  }

  // ---------------------------------------------------------------- membership

  private useConfig(res: ConfChangeResult): void {
    this.tracker.config = res.config;
    this.tracker.progress = res.progress;
  }

  /**
   * Applies a committed ConfChange and returns the resulting membership. A change that does not
   * fit the configuration (every node reaches the same verdict) is ignored.
   */
  applyConfChange(cc: ConfChange): ConfState {
    let res: ConfChangeResult;
    try {
      res = new Changer(this.tracker, this.log.lastIndex()).apply(cc);
    } catch (err) {
      if (err instanceof InvalidConfChangeError) return this.tracker.confState();
      throw err;
    }
    this.useConfig(res);
    const cs = this.tracker.confState();
    if (this.role !== 'leader') return cs;
    if (this.maybeCommit()) {
      this.releasePendingReadIndex();
      this.bcastAppend();
    } else {
      this.forEachPeer((id) => this.maybeSendAppend(id, false));
    }
    if (this.leadTransferee !== NONE && !this.tracker.isVoter(this.leadTransferee)) this.leadTransferee = NONE;
    // Removed or demoted: hand leadership over to a voter of the new configuration.
    if (!this.tracker.isVoter(this.id) && this.leadTransferee === NONE) this.handOver();
    return cs;
  }

  /**
   * A leader that its configuration no longer lists as a voter (removed, or demoted to learner)
   * keeps leading, refusing proposals, until the voter with the most of its log has all of it;
   * then it sends that voter TimeoutNow and steps down (retried each election timeout).
   *
   * Stepping down at once, as this core did (and etcd does with StepDownOnRemoval), can stall
   * the group for good: the old leader's last heartbeat carrying the commit index of its own
   * removal may be lost, so the remaining voters still count it as a voter and need its vote,
   * which it refuses because its log holds entries they lack; and, no longer a voter in its own
   * eyes, it never campaigns (simulator seeds 913135, 914979, 920297, 925599, 928717). Once a
   * voter has the old leader's whole log, every node grants it the vote its configuration needs.
   */
  private handOver(): void {
    let best: NodeId = NONE;
    let bestMatch = -1;
    for (const id of this.tracker.voterIds()) {
      const pr = this.tracker.progress.get(id);
      if (id === this.id || pr === undefined) continue;
      if (pr.match > bestMatch) {
        best = id;
        bestMatch = pr.match;
      }
    }
    if (best === NONE) {
      // Not reachable (a configuration keeps at least one voter), but never lead a group of none.
      this.becomeFollower(this.term, NONE);
      return;
    }
    this.electionElapsed = 0;
    this.leadTransferee = best;
    if (bestMatch === this.log.lastIndex()) this.finishHandOver(best);
    else this.sendAppend(best);
  }

  private finishHandOver(to: NodeId): void {
    // Tell the others the commit index, then let `to` campaign at once.
    this.bcastHeartbeat();
    this.send(message({ type: 'timeoutNow', to }));
    this.becomeFollower(this.term, NONE);
  }

  /**
   * Records that the application applied entries up to `index`. A leader in an auto-leave joint
   * configuration proposes leaving it once the entry that entered it is applied.
   */
  appliedTo(index: number): void {
    this.log.appliedTo(index);
    this.maybeAutoLeave();
    if (this.transferDue > 0 && this.role === 'follower' && !this.hasUnappliedConfChanges()) {
      this.transferDue = 0;
      this.hup('transfer');
    }
  }

  /** Retried on every apply and tick, since the proposal can be refused for a while (transfer, size bound). */
  private maybeAutoLeave(): void {
    const cfg = this.tracker.config;
    if (this.role === 'leader' && cfg.autoLeave && isJoint(cfg) && this.log.applied >= this.pendingConfIndex) {
      const data = encodeConfChange({ transition: 'auto', changes: [] });
      const reason = this.propose(message({ type: 'prop', from: this.id, entries: [{ term: 0, index: 0, type: 'confChange', data }] }));
      invariant(
        reason === undefined || reason === 'uncommitted-size-limit' || reason === 'transferring-leadership',
        () => `leaving the joint configuration was refused: ${String(reason)}`,
      );
    }
  }
}

function validate(c: RaftConfig): void {
  const positiveInt = (field: string, v: number | undefined): void => {
    if (v !== undefined && (!Number.isInteger(v) || v <= 0)) throw new InvalidRaftConfigError(field, `expected a positive integer, got ${v}`);
  };
  const nonNegativeInt = (field: string, v: number | undefined): void => {
    if (v !== undefined && (!Number.isInteger(v) || v < 0)) throw new InvalidRaftConfigError(field, `expected an integer ≥ 0, got ${v}`);
  };
  positiveInt('id', c.id);
  positiveInt('electionTick', c.electionTick);
  positiveInt('heartbeatTick', c.heartbeatTick);
  positiveInt('maxInflightMsgs', c.maxInflightMsgs);
  positiveInt('maxPendingReadIndex', c.maxPendingReadIndex);
  nonNegativeInt('applied', c.applied);
  nonNegativeInt('maxSizePerMsg', c.maxSizePerMsg);
  nonNegativeInt('maxCommittedSizePerReady', c.maxCommittedSizePerReady);
  nonNegativeInt('maxInflightBytes', c.maxInflightBytes);
  nonNegativeInt('maxUncommittedEntriesSize', c.maxUncommittedEntriesSize);
  const election = c.electionTick ?? 10;
  const heartbeat = c.heartbeatTick ?? 1;
  if (heartbeat >= election) {
    throw new InvalidRaftConfigError('heartbeatTick', `must be less than electionTick (${election}), got ${heartbeat}`);
  }
  if (c.readOnlyOption === 'leaseBased' && c.checkQuorum === false) {
    throw new InvalidRaftConfigError('readOnlyOption', 'leaseBased reads need checkQuorum');
  }
}
