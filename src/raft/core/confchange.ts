/**
 * Applying membership changes to a tracker's configuration, by joint consensus (§6 of the Raft
 * thesis): enter a joint configuration C(old,new), then leave it for C(new). A change of a
 * single voter may be applied directly, because any majority of the old and of the new
 * configuration then intersect.
 */
import { InvalidConfChangeError } from './errors.js';
import type { Progress } from './progress.js';
import { checkConfig, cloneConfig, isJoint, type ProgressTracker, type TrackerConfig } from './tracker.js';
import type { ConfChange, ConfChangeSingle, ConfState, NodeId } from './types.js';

export interface ConfChangeResult {
  config: TrackerConfig;
  progress: Map<NodeId, Progress>;
}

/** Whether `cc` is carried out through a joint configuration, and whether it is left automatically. */
export function enterJointMode(cc: ConfChange): { joint: boolean; autoLeave: boolean } {
  if (cc.transition !== 'auto' || cc.changes.length > 1) {
    return { joint: true, autoLeave: cc.transition !== 'explicit' };
  }
  return { joint: false, autoLeave: false };
}

export function isLeaveJoint(cc: ConfChange): boolean {
  return cc.changes.length === 0;
}

/** Computes configurations from the tracker's current one; the tracker itself is not changed. */
export class Changer {
  private readonly tracker: ProgressTracker;
  /** New members start probing from here. */
  private readonly lastIndex: number;

  constructor(tracker: ProgressTracker, lastIndex: number) {
    this.tracker = tracker;
    this.lastIndex = lastIndex;
  }

  /** Applies a ConfChange read from the log: leave, enter joint, or a simple change. */
  apply(cc: ConfChange): ConfChangeResult {
    if (isLeaveJoint(cc)) return this.leaveJoint();
    const { joint, autoLeave } = enterJointMode(cc);
    return joint ? this.enterJoint(autoLeave, cc.changes) : this.simple(cc.changes);
  }

  enterJoint(autoLeave: boolean, changes: readonly ConfChangeSingle[]): ConfChangeResult {
    const { config, progress } = this.copy();
    if (isJoint(config)) throw new InvalidConfChangeError('the configuration is already joint');
    if (config.incoming.size === 0) throw new InvalidConfChangeError('cannot make a zero-voter configuration joint');
    config.outgoing = new Set(config.incoming);
    this.applyChanges(config, progress, changes);
    config.autoLeave = autoLeave;
    return this.checked(config, progress);
  }

  leaveJoint(): ConfChangeResult {
    const { config, progress } = this.copy();
    if (!isJoint(config)) throw new InvalidConfChangeError('the configuration is not joint');
    for (const id of config.learnersNext) {
      config.learners.add(id);
      progress.get(id)!.isLearner = true;
    }
    config.learnersNext = new Set();
    for (const id of config.outgoing) {
      if (!config.incoming.has(id) && !config.learners.has(id)) progress.delete(id);
    }
    config.outgoing = new Set();
    config.autoLeave = false;
    return this.checked(config, progress);
  }

  simple(changes: readonly ConfChangeSingle[]): ConfChangeResult {
    const { config, progress } = this.copy();
    if (isJoint(config)) throw new InvalidConfChangeError('a simple change cannot be applied to a joint configuration');
    const before = new Set(config.incoming);
    this.applyChanges(config, progress, changes);
    let differ = 0;
    for (const id of before) if (!config.incoming.has(id)) differ++;
    for (const id of config.incoming) if (!before.has(id)) differ++;
    if (differ > 1) throw new InvalidConfChangeError('more than one voter changed without joint consensus');
    return this.checked(config, progress);
  }

  private copy(): ConfChangeResult {
    const progress = new Map<NodeId, Progress>();
    for (const [id, pr] of this.tracker.progress) {
      // Copies, so that a change that turns out invalid leaves the tracker untouched.
      progress.set(id, pr.clone());
    }
    return { config: cloneConfig(this.tracker.config), progress };
  }

  private checked(config: TrackerConfig, progress: Map<NodeId, Progress>): ConfChangeResult {
    checkConfig(config, progress);
    return { config, progress };
  }

  private applyChanges(config: TrackerConfig, progress: Map<NodeId, Progress>, changes: readonly ConfChangeSingle[]): void {
    for (const c of changes) {
      if (c.nodeId <= 0) throw new InvalidConfChangeError(`node id must be positive, got ${c.nodeId}`);
      switch (c.type) {
        case 'addNode':
          this.makeVoter(config, progress, c.nodeId);
          break;
        case 'addLearner':
          this.makeLearner(config, progress, c.nodeId);
          break;
        case 'removeNode':
          this.remove(config, progress, c.nodeId);
          break;
      }
    }
    if (config.incoming.size === 0) throw new InvalidConfChangeError('removed all voters');
  }

  private makeVoter(config: TrackerConfig, progress: Map<NodeId, Progress>, id: NodeId): void {
    const pr = progress.get(id);
    if (pr === undefined) {
      progress.set(id, this.tracker.newProgress(this.lastIndex, false));
    } else {
      pr.isLearner = false;
    }
    config.learners.delete(id);
    config.learnersNext.delete(id);
    config.incoming.add(id);
  }

  private makeLearner(config: TrackerConfig, progress: Map<NodeId, Progress>, id: NodeId): void {
    const pr = progress.get(id);
    if (pr?.isLearner === true) return;
    config.incoming.delete(id);
    config.learners.delete(id);
    config.learnersNext.delete(id);
    if (pr === undefined) {
      progress.set(id, this.tracker.newProgress(this.lastIndex, true));
      config.learners.add(id);
    } else if (config.outgoing.has(id)) {
      // Still a voter of the outgoing half: it becomes a learner when the joint config is left.
      config.learnersNext.add(id);
    } else {
      pr.isLearner = true;
      config.learners.add(id);
    }
  }

  private remove(config: TrackerConfig, progress: Map<NodeId, Progress>, id: NodeId): void {
    if (!progress.has(id)) return;
    config.incoming.delete(id);
    config.learners.delete(id);
    config.learnersNext.delete(id);
    // An outgoing voter keeps its progress until the joint configuration is left.
    if (!config.outgoing.has(id)) progress.delete(id);
  }
}

/** Builds the configuration and fresh progress described by a ConfState (on start or snapshot). */
export function restoreConfig(tracker: ProgressTracker, cs: ConfState, lastIndex: number): ConfChangeResult {
  const config: TrackerConfig = {
    incoming: new Set(cs.voters),
    outgoing: new Set(cs.votersOutgoing),
    learners: new Set(cs.learners),
    learnersNext: new Set(cs.learnersNext),
    autoLeave: cs.autoLeave,
  };
  const progress = new Map<NodeId, Progress>();
  for (const id of [...config.incoming, ...config.outgoing]) progress.set(id, tracker.newProgress(lastIndex + 1, false));
  for (const id of config.learners) progress.set(id, tracker.newProgress(lastIndex + 1, true));
  checkConfig(config, progress);
  return { config, progress };
}
