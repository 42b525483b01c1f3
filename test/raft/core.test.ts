import { describe, expect, it } from 'vitest';
import { TenureError } from '../../src/core/errors.js';
import { SeededRandom } from '../../src/core/random.js';
import {
  InvalidRaftConfigError,
  InvariantError,
  MemoryStorage,
  message,
  ProposalDroppedError,
  RaftError,
  RawNode,
  type ConfState,
  type RaftConfig,
} from '../../src/raft/core/index.js';
import { Raft } from '../../src/raft/core/raft.js';

const enc = new TextEncoder();
const voters = (ids: number[]): ConfState => ({ voters: ids, learners: [], votersOutgoing: [], learnersNext: [], autoLeave: false });

function config(id: number, storage: MemoryStorage, extra: Partial<RaftConfig> = {}): RaftConfig {
  return { id, storage, random: new SeededRandom(id), ...extra };
}

/** Persists and advances every Ready; returns them. */
function drain(node: RawNode, storage: MemoryStorage): ReturnType<RawNode['ready']>[] {
  const out = [];
  while (node.hasReady()) {
    const rd = node.ready();
    if (rd.snapshot) storage.applySnapshot(rd.snapshot);
    storage.append(rd.entries);
    if (rd.hardState) storage.setHardState(rd.hardState);
    node.advance();
    out.push(rd);
  }
  return out;
}

describe('election timeout', () => {
  it('is randomized in [T, 2T) ticks', () => {
    const seen = new Set<number>();
    for (let seed = 1; seed <= 200; seed++) {
      const r = new Raft({ id: 1, storage: new MemoryStorage(voters([1, 2, 3])), random: new SeededRandom(seed), electionTick: 10 });
      expect(r.randomizedElectionTimeout).toBeGreaterThanOrEqual(10);
      expect(r.randomizedElectionTimeout).toBeLessThan(20);
      seen.add(r.randomizedElectionTimeout);
    }
    expect(seen.size).toBe(10);
  });

  it('a follower campaigns (pre-vote first) once its timeout passes, not before', () => {
    const s = new MemoryStorage(voters([1, 2, 3]));
    const node = new RawNode(config(1, s));
    const timeout = node.internal.randomizedElectionTimeout;
    for (let i = 0; i < timeout - 1; i++) node.tick();
    expect(node.status().role).toBe('follower');
    node.tick();
    expect(node.status().role).toBe('preCandidate');
    expect(node.status().term).toBe(0);
    const rd = node.ready();
    expect(rd.messages.map((m) => `${m.type}->${m.to}@${m.term}`)).toEqual(['preVote->2@1', 'preVote->3@1']);
  });
});

describe('RawNode', () => {
  it('a single voter elects itself and commits a proposal at once', () => {
    const s = new MemoryStorage(voters([1]));
    const node = new RawNode(config(1, s));
    node.campaign();
    expect(node.status().role).toBe('leader');
    node.propose(enc.encode('x'));
    const rds = drain(node, s);
    const committed = rds.flatMap((r) => r.committedEntries).map((e) => new TextDecoder().decode(e.data));
    expect(committed).toEqual(['', 'x']);
    expect(s.initialState().hardState).toEqual({ term: 1, vote: 1, commit: 2 });
  });

  it('a vote and its response come in one Ready, so the vote is persisted before it is sent', () => {
    const s = new MemoryStorage(voters([1, 2, 3]));
    const node = new RawNode(config(2, s, { preVote: false }));
    node.step(message({ type: 'vote', from: 1, to: 2, term: 5, index: 0, logTerm: 0 }));
    const rd = node.ready();
    expect(rd.hardState).toEqual({ term: 5, vote: 1, commit: 0 });
    expect(rd.messages).toMatchObject([{ type: 'voteResp', to: 1, term: 5, reject: false }]);
  });

  it('refuses proposals without a leader with a typed error', () => {
    const node = new RawNode(config(1, new MemoryStorage(voters([1, 2, 3]))));
    let err: unknown;
    try {
      node.propose(enc.encode('x'));
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(ProposalDroppedError);
    expect(err).toMatchObject({ code: 'PROPOSAL_DROPPED', reason: 'no-leader', nodeId: 1, role: 'follower' });
  });

  it('drops forwarded proposals when forwarding is disabled', () => {
    const s = new MemoryStorage(voters([1, 2, 3]));
    const node = new RawNode(config(2, s, { disableProposalForwarding: true }));
    node.step(message({ type: 'heartbeat', from: 1, to: 2, term: 1 }));
    expect(() => node.propose(enc.encode('x'))).toThrow(/forwarding is disabled/);
  });

  it('a follower relays only its own reads, proposals and transfers to the leader, never one another node sent it', () => {
    // Node 2 sent its read to node 3 while 3 led; 3 has since become a follower of 1. Relaying it
    // to 1 would be a message from 2 sent by 3: the transport refuses that, and the whole batch
    // with it, which stopped node 3 (seen with nodes in separate processes, a follower read
    // racing a change of leader). The sender's read times out and is asked again instead.
    const s = new MemoryStorage(voters([1, 2, 3]));
    const node = new RawNode(config(3, s));
    node.step(message({ type: 'heartbeat', from: 1, to: 3, term: 1 }));
    drain(node, s);
    node.step(message({ type: 'readIndex', from: 2, to: 3, context: 'r2' }));
    node.step(message({ type: 'prop', from: 2, to: 3, entries: [{ term: 0, index: 0, type: 'normal', data: enc.encode('x') }] }));
    node.step(message({ type: 'transferLeader', from: 2, to: 3, transferee: 2 }));
    const relayed = drain(node, s).flatMap((rd) => rd.messages);
    expect(relayed.filter((m) => m.from !== 3)).toEqual([]);
    expect(relayed.map((m) => m.type)).not.toContain('readIndex');
    // Its own are relayed, as itself.
    node.readIndex('r3');
    node.propose(enc.encode('y'));
    node.transferLeadership(3);
    const own = drain(node, s).flatMap((rd) => rd.messages);
    expect(own.map((m) => `${m.type} ${m.from}->${m.to}`)).toEqual(['readIndex 3->1', 'prop 3->1', 'transferLeader 3->1']);
  });

  it('enforces the ready/advance protocol and refuses local message types from outside', () => {
    const node = new RawNode(config(1, new MemoryStorage(voters([1]))));
    expect(() => node.advance()).toThrow(InvariantError);
    node.campaign();
    node.ready();
    expect(node.hasReady()).toBe(false);
    expect(() => node.ready()).toThrow(InvariantError);
    node.advance();
    expect(() => node.step(message({ type: 'hup', from: 1, to: 1 }))).toThrow(RaftError);
    expect(() => node.step(message({ type: 'heartbeat', from: 2, to: 3, term: 1 }))).toThrow(/for 3/);
  });

  it("the Raft core's errors are TenureErrors, keeping their names and codes", () => {
    const node = new RawNode(config(1, new MemoryStorage(voters([1]))));
    let caught: unknown;
    try {
      node.step(message({ type: 'hup', from: 1, to: 1 }));
    } catch (err) {
      caught = err;
    }
    expect(caught).toBeInstanceOf(RaftError);
    expect(caught).toBeInstanceOf(TenureError);
    expect(caught).toMatchObject({ name: 'RaftError', code: 'INVARIANT_VIOLATED' });
    const invalid = new InvalidRaftConfigError('electionTick', 'must be > heartbeatTick');
    expect(invalid).toBeInstanceOf(TenureError);
    expect(invalid).toMatchObject({ name: 'InvalidRaftConfigError', code: 'INVALID_CONFIG', field: 'electionTick' });
  });

  it('a lease-based read is answered by the leader without a heartbeat round', () => {
    const s = new MemoryStorage(voters([1, 2, 3]));
    const node = new RawNode(config(1, s, { readOnlyOption: 'leaseBased', preVote: false }));
    node.campaign();
    node.step(message({ type: 'voteResp', from: 2, to: 1, term: 1 }));
    drain(node, s);
    node.step(message({ type: 'appResp', from: 2, to: 1, term: 1, index: 1 }));
    drain(node, s);
    node.readIndex('q');
    expect(node.ready().readStates).toEqual([{ index: 1, context: 'q' }]);
  });
});

describe('reads waiting for a new leader', () => {
  it('are bounded: beyond maxPendingReadIndex a read is dropped with a clear error, earlier ones are answered', () => {
    const s = new MemoryStorage(voters([1, 2]));
    const node = new RawNode(config(1, s, { maxPendingReadIndex: 2, preVote: false }));
    node.campaign();
    drain(node, s);
    node.step(message({ type: 'voteResp', from: 2, to: 1, term: 1 }));
    expect(node.status().role).toBe('leader');
    drain(node, s); // the empty entry of term 1 is appended, not yet committed
    node.readIndex('a');
    node.readIndex('b');
    let err: unknown;
    try {
      node.readIndex('c');
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(ProposalDroppedError);
    expect((err as ProposalDroppedError).reason).toBe('read-index-queue-full');
    expect((err as ProposalDroppedError).message).toMatch(/read-index request dropped: too many reads already wait for the new leader's first commit/);
    // The empty entry commits: the two queued reads start their heartbeat rounds.
    node.step(message({ type: 'appResp', from: 2, to: 1, term: 1, index: 1 }));
    const sent = drain(node, s).flatMap((rd) => rd.messages);
    expect(sent.filter((m) => m.type === 'heartbeat').map((m) => m.context)).toEqual(['a', 'b']);
    node.step(message({ type: 'heartbeatResp', from: 2, to: 1, term: 1, context: 'b' }));
    const states = drain(node, s).flatMap((rd) => rd.readStates);
    expect(states).toEqual([
      { index: 1, context: 'a' },
      { index: 1, context: 'b' },
    ]);
    // Once the leader has committed in its term, reads no longer queue for that, so no bound applies.
    node.readIndex('d');
    node.readIndex('e');
    node.readIndex('f');
  });
});

describe('invariants', () => {
  it('a node never votes twice in one term', () => {
    const r = new Raft(config(1, new MemoryStorage(voters([1, 2, 3])), { preVote: false }));
    r.step(message({ type: 'vote', from: 2, to: 1, term: 1 }));
    expect(r.vote).toBe(2);
    // The protocol path refuses the second candidate...
    r.step(message({ type: 'vote', from: 3, to: 1, term: 1 }));
    expect(r.vote).toBe(2);
    expect(r.msgs.at(-1)).toMatchObject({ type: 'voteResp', to: 3, reject: true });
    // ...and the assertion stops any path that would not.
    const grant = (r as unknown as { grantVote(id: number): void }).grantVote.bind(r);
    expect(() => grant(3)).toThrow(/already voted for 2/);
  });

  it('the term never goes back', () => {
    const r = new Raft(config(1, new MemoryStorage(voters([1, 2, 3]))));
    r.step(message({ type: 'heartbeat', from: 2, to: 1, term: 7 }));
    expect(r.term).toBe(7);
    r.step(message({ type: 'heartbeat', from: 3, to: 1, term: 5 }));
    expect(r.term).toBe(7);
    expect(() => r.becomeFollower(6, 0)).toThrow(/term would go back from 7 to 6/);
  });

  it('a stored commit index beyond the stored log is refused at start', () => {
    const s = new MemoryStorage(voters([1]));
    s.setHardState({ term: 1, vote: 0, commit: 3 });
    expect(() => new RawNode(config(1, s))).toThrow(InvariantError);
  });
});

describe('configuration', () => {
  it('names the field that is out of range', () => {
    const s = new MemoryStorage(voters([1]));
    const bad: [Partial<RaftConfig>, string][] = [
      [{ electionTick: 0 }, 'electionTick'],
      [{ heartbeatTick: 10, electionTick: 10 }, 'heartbeatTick'],
      [{ maxInflightMsgs: 0 }, 'maxInflightMsgs'],
      [{ maxSizePerMsg: -1 }, 'maxSizePerMsg'],
      [{ readOnlyOption: 'leaseBased', checkQuorum: false }, 'readOnlyOption'],
      [{ maxPendingReadIndex: 0 }, 'maxPendingReadIndex'],
    ];
    for (const [extra, field] of bad) {
      expect(() => new RawNode(config(1, s, extra))).toThrow(InvalidRaftConfigError);
      try {
        new RawNode(config(1, s, extra));
      } catch (e) {
        expect((e as InvalidRaftConfigError).field).toBe(field);
      }
    }
    expect(() => new RawNode({ id: 0, storage: s, random: new SeededRandom(1) })).toThrow(/id/);
  });
});
