import { describe, expect, it } from 'vitest';
import { Changer, restoreConfig } from '../../src/raft/core/confchange.js';
import { Inflights, Progress } from '../../src/raft/core/progress.js';
import { jointVote, majorityCommitted, majorityVote, ProgressTracker } from '../../src/raft/core/tracker.js';
import { InvalidConfChangeError, type ConfState } from '../../src/raft/core/index.js';

const cs = (voters: number[], learners: number[] = []): ConfState => ({ voters, learners, votersOutgoing: [], learnersNext: [], autoLeave: false });

describe('quorum arithmetic', () => {
  it('the committed index is the highest a majority has', () => {
    const match = new Map([[1, 5], [2, 3], [3, 9]]);
    expect(majorityCommitted(new Set([1, 2, 3]), (id) => match.get(id) ?? 0)).toBe(5);
    expect(majorityCommitted(new Set([1, 2, 3, 4]), (id) => match.get(id) ?? 0)).toBe(3);
    expect(majorityCommitted(new Set(), () => 0)).toBe(Infinity);
  });

  it('votes: won with a majority, lost when a majority is impossible, else pending', () => {
    const voters = new Set([1, 2, 3, 4, 5]);
    expect(majorityVote(voters, new Map([[1, true], [2, true], [3, true]]))).toBe('won');
    expect(majorityVote(voters, new Map([[1, true], [2, false], [3, false]]))).toBe('pending');
    expect(majorityVote(voters, new Map([[1, false], [2, false], [3, false]]))).toBe('lost');
    expect(jointVote('won', 'pending')).toBe('pending');
    expect(jointVote('won', 'lost')).toBe('lost');
    expect(jointVote('won', 'won')).toBe('won');
  });

  it('a joint configuration commits only what both halves have', () => {
    const t = new ProgressTracker(4, 0);
    const res = new Changer(Object.assign(t, restoreConfig(t, cs([1, 2, 3]), 10)), 10).enterJoint(false, [
      { type: 'addNode', nodeId: 4 },
      { type: 'addNode', nodeId: 5 },
      { type: 'removeNode', nodeId: 2 },
      { type: 'removeNode', nodeId: 3 },
    ]);
    t.config = res.config;
    t.progress = res.progress;
    const set = (id: number, m: number): void => {
      t.progress.get(id)!.match = m;
    };
    set(1, 10);
    set(4, 10);
    set(5, 10);
    expect(t.committed()).toBe(0); // (1 2 3) has only node 1 at 10
    set(2, 8);
    expect(t.committed()).toBe(8);
  });
});

describe('conf changes', () => {
  const tracker = (): ProgressTracker => {
    const t = new ProgressTracker(4, 0);
    const r = restoreConfig(t, cs([1, 2, 3]), 5);
    t.config = r.config;
    t.progress = r.progress;
    return t;
  };

  it('a simple change may move one voter only', () => {
    const t = tracker();
    expect(() => new Changer(t, 5).simple([{ type: 'addNode', nodeId: 4 }, { type: 'addNode', nodeId: 5 }])).toThrow(InvalidConfChangeError);
    const r = new Changer(t, 5).simple([{ type: 'addNode', nodeId: 4 }]);
    expect([...r.config.incoming].sort()).toEqual([1, 2, 3, 4]);
    // The failed attempt left the tracker untouched.
    expect(t.progress.has(4)).toBe(false);
  });

  it('demoting a voter while joint makes it a learner when leaving', () => {
    const t = tracker();
    let r = new Changer(t, 5).enterJoint(true, [{ type: 'addLearner', nodeId: 3 }]);
    expect([...r.config.learnersNext]).toEqual([3]);
    expect(r.progress.get(3)!.isLearner).toBe(false);
    t.config = r.config;
    t.progress = r.progress;
    r = new Changer(t, 5).leaveJoint();
    expect([...r.config.learners]).toEqual([3]);
    expect(r.progress.get(3)!.isLearner).toBe(true);
    expect([...r.config.incoming].sort()).toEqual([1, 2]);
  });

  it('refuses removing every voter, nesting joint configurations and leaving a non-joint one', () => {
    const t = tracker();
    expect(() =>
      new Changer(t, 5).enterJoint(false, [1, 2, 3].map((nodeId) => ({ type: 'removeNode' as const, nodeId }))),
    ).toThrow(/removed all voters/);
    expect(() => new Changer(t, 5).leaveJoint()).toThrow(/not joint/);
    const r = new Changer(t, 5).enterJoint(false, [{ type: 'addNode', nodeId: 4 }]);
    t.config = r.config;
    t.progress = r.progress;
    expect(() => new Changer(t, 5).enterJoint(false, [{ type: 'addNode', nodeId: 5 }])).toThrow(/already joint/);
  });
});

describe('flow control', () => {
  it('inflights fill up by count and by bytes and free by index', () => {
    const byCount = new Inflights(2, 0);
    byCount.add(3, 100);
    byCount.add(5, 100);
    expect(byCount.full()).toBe(true);
    byCount.freeLE(4);
    expect(byCount.full()).toBe(false);
    expect(byCount.count).toBe(1);
    const byBytes = new Inflights(10, 150);
    byBytes.add(1, 100);
    expect(byBytes.full()).toBe(false);
    byBytes.add(2, 60);
    expect(byBytes.full()).toBe(true);
    byBytes.freeFirstOne();
    expect(byBytes.full()).toBe(false);
  });

  it('a probe sends one append and waits; a stale rejection is ignored', () => {
    const pr = new Progress(11, new Inflights(4, 0), false, true);
    expect(pr.isPaused()).toBe(false);
    pr.sentEntries(1, 10);
    expect(pr.isPaused()).toBe(true);
    expect(pr.maybeDecrTo(7, 5)).toBe(false); // not the index we probed at (10)
    expect(pr.maybeDecrTo(10, 5)).toBe(true);
    expect(pr.next).toBe(6);
    expect(pr.isPaused()).toBe(false);
  });

  it('replicate streams optimistically and falls back to match + 1 on rejection', () => {
    const pr = new Progress(6, new Inflights(4, 0), false, true);
    pr.maybeUpdate(5);
    pr.becomeReplicate();
    pr.sentEntries(3, 30);
    expect(pr.next).toBe(9);
    expect(pr.maybeDecrTo(4, 0)).toBe(false); // at or below match: stale
    expect(pr.maybeDecrTo(8, 2)).toBe(true);
    expect(pr.next).toBe(6);
  });

  it('after a snapshot, probing resumes after the snapshot index', () => {
    const pr = new Progress(2, new Inflights(4, 0), false, true);
    pr.becomeSnapshot(20);
    expect(pr.isPaused()).toBe(true);
    pr.becomeProbe();
    expect(pr.next).toBe(21);
  });
});
