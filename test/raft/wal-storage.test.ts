import { readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { SeededRandom } from '../../src/core/random.js';
import {
  decodeConfChange,
  LogCompactedError,
  RawNode,
  type ConfState,
  type Entry,
  type Message,
  type NodeId,
} from '../../src/raft/core/index.js';
import { DurableStorage, Wal, WalCorruptError, type DurableStorageOptions } from '../../src/raft/wal/index.js';
import { CountingFs, ent, ents, tempDir, text } from './wal-fixtures.js';

const enc = new TextEncoder();
let cleanups: (() => void)[] = [];
afterEach(() => {
  for (const c of cleanups) c();
  cleanups = [];
});
function dir(): string {
  const t = tempDir();
  cleanups.push(t.cleanup);
  return t.dir;
}
function open(options: DurableStorageOptions, lines: string[] = []): DurableStorage {
  const s = DurableStorage.open({ log: (l) => lines.push(l), ...options });
  cleanups.unshift(() => s.close());
  return s;
}
const cs3: ConfState = { voters: [1, 2, 3], learners: [], votersOutgoing: [], learnersNext: [], autoLeave: false };
const bootstrap = (s: DurableStorage, confState: ConfState = cs3): void =>
  s.save({ snapshot: { metadata: { index: 1, term: 1, confState }, data: new Uint8Array() }, hardState: { term: 1, vote: 0, commit: 1 }, entries: [] });
const idx = (es: readonly Entry[]): number[] => es.map((e) => e.index);

describe('DurableStorage', () => {
  it('round-trips hard state, snapshot and log across a reopen', () => {
    const d = dir();
    const s = open({ dir: d });
    bootstrap(s);
    s.save({ hardState: { term: 2, vote: 1, commit: 1 }, entries: ents(2, 6, 2) });
    s.save({ hardState: { term: 3, vote: 2, commit: 4 }, entries: [ent(5, 3, 'five')] });
    s.close();
    const r = open({ dir: d });
    expect(r.initialState()).toEqual({ hardState: { term: 3, vote: 2, commit: 4 }, confState: cs3 });
    expect([r.firstIndex(), r.lastIndex()]).toEqual([2, 5]);
    expect(r.term(1)).toBe(1);
    expect(r.term(5)).toBe(3);
    expect(text(r.entries(5, 6)[0]!)).toBe('five');
    expect(() => r.entries(1, 3)).toThrow(LogCompactedError);
    expect(r.snapshot().metadata).toEqual({ index: 1, term: 1, confState: cs3 });
  });

  it('keeps a joint membership (outgoing voters, learners next, auto-leave) through the snapshot file and marker', () => {
    const d = dir();
    const joint: ConfState = { voters: [1, 2, 4], learners: [5], votersOutgoing: [1, 2, 3], learnersNext: [3], autoLeave: true };
    const s = open({ dir: d });
    bootstrap(s);
    s.save({ hardState: { term: 2, vote: 1, commit: 5 }, entries: ents(2, 5, 2) });
    s.createSnapshot(5, joint, enc.encode('joint'));
    s.close();
    const r = open({ dir: d });
    expect(r.initialState().confState).toEqual(joint);
    expect(r.snapshot().metadata).toEqual({ index: 5, term: 2, confState: joint });
  });

  it('one write and one fdatasync per Ready; a commit-only Ready writes without fsync', () => {
    const d = dir();
    const fs = new CountingFs();
    const s = open({ dir: d, fs });
    bootstrap(s);
    fs.reset();
    s.save({ hardState: { term: 2, vote: 1, commit: 1 }, entries: ents(2, 257, 2) });
    expect([fs.writes, fs.fdatasyncs]).toEqual([1, 1]);
    fs.reset();
    s.save({ hardState: { term: 2, vote: 1, commit: 200 }, entries: [] });
    expect([fs.writes, fs.fdatasyncs]).toEqual([1, 0]);
    fs.reset();
    s.save({ hardState: { term: 3, vote: 0, commit: 200 }, entries: [] });
    expect([fs.writes, fs.fdatasyncs]).toEqual([1, 1]);
  });

  it('a snapshot from the leader replaces the log, also after a reopen', () => {
    const d = dir();
    const s = open({ dir: d });
    bootstrap(s);
    s.save({ hardState: { term: 2, vote: 0, commit: 1 }, entries: ents(2, 10, 2) });
    s.save({ snapshot: { metadata: { index: 50, term: 4, confState: cs3 }, data: enc.encode('image') }, hardState: { term: 4, vote: 0, commit: 50 }, entries: [] });
    expect([s.firstIndex(), s.lastIndex()]).toEqual([51, 50]);
    s.close();
    const r = open({ dir: d });
    expect([r.firstIndex(), r.lastIndex(), r.term(50)]).toEqual([51, 50, 4]);
    expect(new TextDecoder().decode(r.snapshot().data)).toBe('image');
    r.save({ hardState: { term: 4, vote: 0, commit: 52 }, entries: ents(51, 52, 4) });
    r.close();
    const again = open({ dir: d });
    expect(idx(again.entries(51, 53))).toEqual([51, 52]);
  });

  it('ignores a corrupt newer snapshot with a log line and loads the older one, the log after it intact', () => {
    const d = dir();
    const s = open({ dir: d });
    bootstrap(s);
    s.save({ hardState: { term: 2, vote: 1, commit: 30 }, entries: ents(2, 30, 2) });
    s.createSnapshot(10, cs3, enc.encode('at 10'));
    s.createSnapshot(20, cs3, enc.encode('at 20'));
    s.close();
    const snapDir = join(d, 'snap');
    const newest = readdirSync(snapDir).sort().at(-1)!;
    expect(newest).toContain('0000000000000014.snap');
    const bytes = readFileSync(join(snapDir, newest));
    bytes[bytes.length - 2]! ^= 0x40;
    writeFileSync(join(snapDir, newest), bytes);
    const lines: string[] = [];
    const r = open({ dir: d }, lines);
    expect(r.snapshot().metadata.index).toBe(10);
    expect(new TextDecoder().decode(r.snapshot().data)).toBe('at 10');
    expect(lines.some((l) => l.includes(newest) && l.includes('checksum mismatch'))).toBe(true);
    expect([r.firstIndex(), r.lastIndex()]).toEqual([11, 30]);
  });

  it('a snapshot file the WAL has no marker for (crash between the two) is ignored', () => {
    const d = dir();
    const s = open({ dir: d });
    bootstrap(s);
    s.save({ hardState: { term: 2, vote: 1, commit: 20 }, entries: ents(2, 20, 2) });
    s.close();
    // A snapshot written by a process that died before its WAL marker.
    const other = dir();
    const o = open({ dir: other });
    bootstrap(o);
    o.save({ hardState: { term: 2, vote: 1, commit: 20 }, entries: ents(2, 20, 2) });
    o.createSnapshot(15, cs3, enc.encode('orphan'));
    const orphan = readdirSync(join(other, 'snap')).find((n) => n.includes('000000000000000f'))!;
    writeFileSync(join(d, 'snap', orphan), readFileSync(join(other, 'snap', orphan)));
    const lines: string[] = [];
    const r = open({ dir: d }, lines);
    expect(r.snapshot().metadata.index).toBe(1);
    expect(lines.join('\n')).toContain('no record of it');
  });

  it('compaction releases the segments behind the snapshot; a reopen reads only what is left', () => {
    const d = dir();
    const s = open({ dir: d, segmentBytes: 8192 });
    bootstrap(s);
    for (let i = 2; i <= 300; i++) s.save({ hardState: { term: 2, vote: 1, commit: i - 1 }, entries: [ent(i, 2, 'z'.repeat(100))] });
    const before = s.segmentNames().length;
    s.createSnapshot(250, cs3, enc.encode('at 250'));
    s.compact(250);
    const after = s.segmentNames().length;
    expect(before).toBeGreaterThan(3);
    expect(after).toBeLessThan(before);
    expect(readdirSync(join(d, 'wal')).length).toBe(after);
    expect(s.firstIndex()).toBe(251);
    s.close();
    const r = open({ dir: d, segmentBytes: 8192 });
    expect([r.firstIndex(), r.lastIndex(), r.term(250)]).toEqual([251, 300, 2]);
    expect(r.initialState().hardState.commit).toBe(299);
    expect(text(r.entries(300, 301)[0]!)).toBe('z'.repeat(100));
  });

  it('refuses to start when the only usable snapshot is older than the released log (never a silent gap)', () => {
    const d = dir();
    const s = open({ dir: d, segmentBytes: 8192 });
    bootstrap(s);
    for (let i = 2; i <= 300; i++) s.save({ hardState: { term: 2, vote: 1, commit: i - 1 }, entries: [ent(i, 2, 'z'.repeat(100))] });
    s.createSnapshot(100, cs3, enc.encode('at 100'));
    s.createSnapshot(250, cs3, enc.encode('at 250'));
    s.compact(250);
    s.close();
    const snapDir = join(d, 'snap');
    const newest = readdirSync(snapDir).sort().at(-1)!;
    writeFileSync(join(snapDir, newest), Buffer.from('garbage'));
    expect(() => open({ dir: d, segmentBytes: 8192 })).toThrow(WalCorruptError);
  });

  it('refuses a hard state that commits past the end of the log', () => {
    const d = dir();
    const { wal } = Wal.open({ dir: join(d, 'wal') });
    wal.save({ term: 1, vote: 1, commit: 5 }, ents(1, 3, 1), true);
    wal.close();
    expect(() => open({ dir: d })).toThrow(/commits index 5 but the log ends at 3/);
  });
});

describe('DurableStorage under RawNode', () => {
  interface Node {
    raw: RawNode;
    storage: DurableStorage;
    applied: Entry[];
    conf: ConfState;
  }

  function start(dirs: string[], ids: NodeId[]): Node[] {
    return ids.map((id) => {
      const storage = open({ dir: dirs[id - 1]!, segmentBytes: 16 * 1024 });
      const raw = new RawNode({ id, storage, random: new SeededRandom(id), electionTick: 10, heartbeatTick: 1 });
      return { raw, storage, applied: [], conf: storage.initialState().confState };
    });
  }

  /** Runs Readies the way the contract says (persist, then send, then apply) until quiet. */
  function pump(nodes: Node[]): void {
    const byId = new Map(nodes.map((n) => [n.raw.id, n]));
    for (let round = 0; round < 10_000; round++) {
      const queue: Message[] = [];
      let busy = false;
      for (const n of nodes) {
        if (!n.raw.hasReady()) continue;
        busy = true;
        const rd = n.raw.ready();
        n.storage.save(rd);
        queue.push(...rd.messages);
        for (const e of rd.committedEntries) {
          n.applied.push(e);
          if (e.type === 'confChange') n.conf = n.raw.applyConfChange(decodeConfChange(e.data));
        }
        n.raw.advance();
      }
      for (const m of queue) byId.get(m.to)?.raw.step(m);
      if (!busy && queue.length === 0) return;
    }
    throw new Error('group did not go quiet');
  }

  it('a restarted group gets its hard state, membership and log back and keeps committing', () => {
    const dirs = [dir(), dir(), dir()];
    for (const d of dirs) {
      const s = open({ dir: d, segmentBytes: 16 * 1024 });
      bootstrap(s);
      s.close();
    }
    let nodes = start(dirs, [1, 2, 3]);
    nodes[0]!.raw.campaign();
    pump(nodes);
    expect(nodes[0]!.raw.status().role).toBe('leader');
    for (let i = 0; i < 200; i++) {
      nodes[0]!.raw.propose(enc.encode(`p${i}`));
      if (i % 7 === 0) pump(nodes);
    }
    nodes[0]!.raw.proposeConfChange({ transition: 'auto', changes: [{ type: 'addLearner', nodeId: 4 }] });
    pump(nodes);
    // A snapshot and compaction on node 2 in the middle of its log.
    const n2 = nodes[1]!;
    const snapAt = n2.raw.status().applied - 20;
    n2.storage.createSnapshot(snapAt, n2.conf, enc.encode(`state@${snapAt}`));
    n2.storage.compact(snapAt);
    const before = nodes.map((n) => ({ status: n.raw.status(), last: n.storage.lastIndex(), log: idx(n.storage.entries(n.storage.firstIndex(), n.storage.lastIndex() + 1)) }));
    const payloads = nodes[0]!.applied.filter((e) => e.type === 'normal' && e.data.length > 0).map(text);
    expect(payloads).toHaveLength(200);
    for (const n of nodes) n.storage.close();

    nodes = start(dirs, [1, 2, 3]);
    for (let i = 0; i < 3; i++) {
      const st = nodes[i]!.raw.status();
      expect(st.term).toBe(before[i]!.status.term);
      expect(st.vote).toBe(before[i]!.status.vote);
      expect(st.commit).toBe(before[i]!.status.commit);
      expect(nodes[i]!.storage.lastIndex()).toBe(before[i]!.last);
    }
    // Node 2 restarts from its snapshot, which holds the membership with the learner.
    expect(nodes[1]!.storage.snapshot().metadata.index).toBe(snapAt);
    expect(nodes[1]!.raw.status().config.learners).toEqual([4]);
    // The others re-apply the log and with it the conf change.
    pump(nodes);
    expect(nodes[0]!.conf.learners).toEqual([4]);
    expect(nodes[0]!.applied.filter((e) => e.type === 'normal' && e.data.length > 0).map(text)).toEqual(payloads);

    nodes[2]!.raw.campaign();
    pump(nodes);
    expect(nodes[2]!.raw.status().role).toBe('leader');
    nodes[2]!.raw.propose(enc.encode('after restart'));
    pump(nodes);
    for (const n of nodes) {
      const last = n.storage.entries(n.storage.lastIndex(), n.storage.lastIndex() + 1)[0]!;
      expect(text(last)).toBe('after restart');
      expect(n.raw.status().commit).toBe(n.storage.lastIndex());
    }
    const logs = nodes.map((n) => idx(n.storage.entries(before[1]!.log[0]!, n.storage.lastIndex() + 1)));
    expect(logs[0]).toEqual(logs[1]);
    expect(logs[1]).toEqual(logs[2]);
  });
});
