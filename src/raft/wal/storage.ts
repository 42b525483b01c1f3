/**
 * DurableStorage: the core's Storage interface over the write-ahead log and the snapshot files,
 * with the log since the last snapshot indexed in memory (as etcd's MemoryStorage beside its
 * WAL). `save` persists step 1 of a Ready with one write and at most one fdatasync; a restarted
 * node opens the same directory and hands the storage to a new RawNode, which finds its hard
 * state, membership (from the snapshot) and log where they were.
 *
 * Layout under `dir`: `wal/` (segments, see wal.ts) and `snap/` (snapshot files, snapshots.ts).
 */
import { join } from 'node:path';
import { InvariantError, LogUnavailableError, SnapshotOutOfDateError } from '../core/errors.js';
import { MemoryStorage, type InitialState, type Storage } from '../core/storage.js';
import { emptyConfState, type ConfState, type Entry, type HardState, type Snapshot, type SnapshotMetadata } from '../core/types.js';
import { WalCorruptError } from './errors.js';
import { nodeFs } from './fs.js';
import { SnapshotFiles } from './snapshots.js';
import { mustSync, Wal, type WalOptions } from './wal.js';

export interface DurableStorageOptions extends Omit<WalOptions, 'dir'> {
  /** Data directory; `wal/` and `snap/` are made inside it. */
  readonly dir: string;
  /** Snapshot files kept after a compaction, the newest ones (default 2: one to fall back on). */
  readonly snapshotsKept?: number;
}

/** The part of a Ready that `save` persists. */
export interface Persist {
  readonly hardState?: HardState | undefined;
  readonly entries: readonly Entry[];
  readonly snapshot?: Snapshot | undefined;
}

const key = (m: SnapshotMetadata): string => `${m.index}:${m.term}`;

export class DurableStorage implements Storage {
  /**
   * The log since the snapshot, the snapshot and the hard state, in memory: the core's
   * MemoryStorage, changed only after what it records is on disk (save, createSnapshot, compact).
   */
  private readonly mem: MemoryStorage;

  private constructor(
    private readonly wal: Wal,
    private readonly snaps: SnapshotFiles,
    private readonly snapshotsKept: number,
    hardState: HardState,
    snap: Snapshot,
    ents: Entry[],
  ) {
    this.mem = MemoryStorage.restore(hardState, snap, ents);
  }

  /**
   * Opens (or creates) the storage in `options.dir`: loads the newest valid snapshot the WAL
   * has a marker for and replays the WAL after it. Throws WalCorruptError when what is on disk
   * cannot be the log this node acknowledged (damage, missing entries, a commit index past the
   * log's end), InvalidArgumentError for bad options, DiskFullError when a new WAL cannot be made.
   */
  static open(options: DurableStorageOptions): DurableStorage {
    const f = options.fs ?? nodeFs;
    const log = options.log ?? (() => {});
    const snapDir = join(options.dir, 'snap');
    const walDir = join(options.dir, 'wal');
    f.mkdirSync(options.dir);
    const snaps = new SnapshotFiles(snapDir, f, log);
    const { wal, replay } = Wal.open({ ...options, dir: walDir });
    try {
      const marked = new Set(replay.markers.map((m) => key(m.metadata)));
      const newest = replay.markers[replay.markers.length - 1];
      let snap: Snapshot = { metadata: { index: 0, term: 0, confState: emptyConfState() }, data: new Uint8Array() };
      // Called even with no marker, so a leftover snapshot file gets its log line.
      const loaded = snaps.loadNewest((m) => marked.has(key(m)));
      if (newest !== undefined) {
        if (loaded === undefined) {
          throw new WalCorruptError(snapDir, 0, `the write-ahead log records a snapshot at index ${newest.metadata.index} term ${newest.metadata.term}, but no valid snapshot file it records is left`);
        }
        if (loaded.metadata.index < newest.metadata.index) {
          log(`storage: using the older snapshot at index ${loaded.metadata.index}; the one at ${newest.metadata.index} is not usable`);
        }
        snap = loaded;
      }
      const base = snap.metadata.index;
      // The replayed log is contiguous: entries up to the snapshot's index are its first `covered`.
      const all = replay.entries;
      const covered = all.length === 0 ? 0 : Math.min(all.length, Math.max(0, base + 1 - all[0]!.index));
      const first = all[covered];
      if (first !== undefined && first.index !== base + 1) {
        throw new WalCorruptError(walDir, 0, `the log resumes at index ${first.index} after the snapshot at ${base}: entries ${base + 1}..${first.index - 1} are missing`);
      }
      if (first === undefined && replay.floor > base) {
        throw new WalCorruptError(walDir, 0, `the log starts after index ${replay.floor} but the usable snapshot ends at ${base}: entries are missing`);
      }
      const lastIndex = first === undefined ? base : all[all.length - 1]!.index;
      if (replay.hardState.commit > lastIndex) {
        throw new WalCorruptError(walDir, 0, `the hard state commits index ${replay.hardState.commit} but the log ends at ${lastIndex}: committed entries are missing`);
      }
      // In place: no copy of a log that may hold millions of entries.
      const ents = all;
      ents.splice(0, covered, { index: base, term: snap.metadata.term, type: 'normal', data: new Uint8Array() });
      return new DurableStorage(wal, snaps, options.snapshotsKept ?? 2, replay.hardState, snap, ents);
    } catch (err) {
      wal.close();
      throw err;
    }
  }

  initialState(): InitialState {
    return this.mem.initialState();
  }

  entries(lo: number, hi: number, maxBytes?: number): Entry[] {
    return this.mem.entries(lo, hi, maxBytes);
  }

  term(index: number): number {
    return this.mem.term(index);
  }

  firstIndex(): number {
    return this.mem.firstIndex();
  }

  lastIndex(): number {
    return this.mem.lastIndex();
  }

  snapshot(): Snapshot {
    return this.mem.snapshot();
  }

  /** The last hard state saved. */
  get savedHardState(): HardState {
    return this.mem.initialState().hardState;
  }

  /**
   * Persists step 1 of a Ready: its snapshot (a file, then a marker in the WAL), entries and
   * hard state, in one WAL write followed by one fdatasync when etcd's MustSync rule asks for it
   * (entries, a snapshot, or a new term or vote; a commit index that moved alone is written but
   * not synced). Returns once durable; only then may the Ready's messages be sent.
   * Throws DiskFullError when the disk is full: nothing is kept, memory is unchanged, and the
   * same call can be retried once space returns (the node stops taking proposals meanwhile).
   */
  save(rd: Persist): void {
    const { hardState, entries, snapshot } = rd;
    // Every check before the first byte is written, so a refused save changes nothing anywhere.
    let lastIndex = this.lastIndex();
    if (snapshot !== undefined) {
      const current = this.snapshot().metadata.index;
      if (snapshot.metadata.index <= current) throw new SnapshotOutOfDateError(snapshot.metadata.index, current);
      lastIndex = snapshot.metadata.index;
    }
    const first = entries[0];
    if (first !== undefined) {
      if (first.index > lastIndex + 1) throw new LogUnavailableError(first.index, lastIndex);
      for (let i = 1; i < entries.length; i++) {
        if (entries[i]!.index !== first.index + i) throw new InvariantError(`entries to save are not contiguous at index ${entries[i]!.index}`);
      }
    }
    const sync = snapshot !== undefined || mustSync(hardState, this.savedHardState, entries.length);
    if (snapshot !== undefined) this.snaps.save(snapshot);
    this.wal.save(hardState, entries, sync, snapshot === undefined ? undefined : { metadata: snapshot.metadata, reset: true });

    // Durable: now the index in memory (entries the snapshot covers are skipped, a conflicting
    // suffix is replaced, as the WAL's replay does).
    if (snapshot !== undefined) this.mem.applySnapshot(snapshot);
    this.mem.append(entries);
    if (hardState !== undefined) this.mem.setHardState(hardState);
  }

  /**
   * Records a snapshot of the application's state as of `index` (applied, so at most the
   * commit index): the file is written and fsynced, then its marker in the WAL. Entries stay
   * until `compact`. Throws SnapshotOutOfDateError, LogUnavailableError, DiskFullError.
   */
  createSnapshot(index: number, confState: ConfState, data: Uint8Array): Snapshot {
    const current = this.snapshot().metadata.index;
    if (index <= current) throw new SnapshotOutOfDateError(index, current);
    if (index > this.lastIndex()) throw new LogUnavailableError(index, this.lastIndex());
    const snap: Snapshot = { metadata: { index, term: this.term(index), confState }, data };
    this.snaps.save(snap);
    this.wal.save(undefined, [], true, { metadata: snap.metadata, reset: false });
    return this.mem.createSnapshot(index, confState, data);
  }

  /**
   * Drops entries up to and including `index` (which the snapshot must cover) from memory,
   * deletes the WAL segments wholly behind it and all but the newest snapshot files.
   */
  compact(index: number): void {
    // The memory first: it refuses an index the snapshot does not cover, before any file is deleted.
    this.mem.compact(index);
    this.wal.releaseTo(index);
    this.snaps.purge(this.snapshotsKept);
  }

  /** The WAL's segment file names, oldest first (for status output and tests). */
  segmentNames(): string[] {
    return this.wal.segmentNames();
  }

  close(): void {
    this.wal.close();
  }

  [Symbol.dispose](): void {
    this.close();
  }
}
