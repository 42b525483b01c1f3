/**
 * Push for a set of candidate keys under one prefix: keeps the live candidates from a snapshot
 * plus the watch events after it, and reports the one with the lowest create revision (the
 * holder) whenever that key, its revision or its value changes.
 *
 * Recovery: when etcd cancels the watch (the revision it resumes from was compacted) or the
 * stream reconnects (the etcd3 client may resume past events it never delivered), the watch
 * takes a fresh snapshot, reports the holder if it changed meanwhile, and watches on from there.
 */
import type { EtcdConnection } from './connection.js';
import type { IKeyValue, Watcher } from './driver.js';
import { prefixEnd } from './keys.js';

export type HolderListener = (holder: IKeyValue | null) => void;

/** Retry a failed snapshot after this long, doubling up to the max, ms. */
const RESYNC_MIN_MS = 50;
const RESYNC_MAX_MS = 2000;

export class CandidateWatch {
  private readonly candidates = new Map<string, IKeyValue>();
  private holder: IKeyValue | null = null;
  private watcher: Watcher | null = null;
  private generation = 0;
  private stopped = false;
  private retryMs = RESYNC_MIN_MS;
  private cancelRetry: () => void = () => {};
  /** Events at or below this revision are already in the snapshot. */
  private snapshotRevision = 0;

  constructor(
    private readonly conn: EtcdConnection,
    private readonly prefix: Buffer,
    /** Which keys under the prefix are candidates (the store takes exactly `N/<hex>`; Go takes all). */
    private readonly accept: (kv: IKeyValue) => boolean,
    private readonly listener: HolderListener,
  ) {}

  start(): void {
    void this.sync();
  }

  stop(): void {
    this.stopped = true;
    this.generation++;
    this.cancelRetry();
    this.dropWatcher();
  }

  private dropWatcher(): void {
    const w = this.watcher;
    this.watcher = null;
    if (w) {
      w.removeAllListeners();
      w.on('error', () => {}); // a late cancel must not surface as an unhandled 'error'
      void w.cancel().catch(() => {});
    }
  }

  private async sync(): Promise<void> {
    if (this.stopped) return;
    const generation = ++this.generation;
    this.dropWatcher();
    let snapshot: { kvs: IKeyValue[]; revision: number };
    try {
      snapshot = await this.conn.range('watch snapshot', { key: this.prefix, range_end: prefixEnd(this.prefix) });
    } catch {
      if (generation !== this.generation || this.stopped) return;
      const wait = this.retryMs;
      this.retryMs = Math.min(RESYNC_MAX_MS, this.retryMs * 2);
      this.cancelRetry = this.conn.clock.setTimer(wait, () => void this.sync());
      return;
    }
    if (generation !== this.generation || this.stopped) return;
    this.retryMs = RESYNC_MIN_MS;
    this.candidates.clear();
    for (const kv of snapshot.kvs) if (this.accept(kv)) this.candidates.set(kv.key.toString('latin1'), kv);
    this.snapshotRevision = snapshot.revision;
    this.report();

    const watcher = this.conn.client
      .watch()
      .inRange({ start: this.prefix, end: prefixEnd(this.prefix) })
      .startRevision(String(snapshot.revision + 1))
      .watcher();
    this.watcher = watcher;
    let disconnected = false;
    watcher.on('data', (res) => {
      if (generation !== this.generation) return;
      const events = res.events;
      for (let i = 0; i < events.length; i++) {
        const ev = events[i]!;
        if (Number(ev.kv.mod_revision) <= this.snapshotRevision) continue;
        const id = ev.kv.key.toString('latin1');
        if (ev.type === 'Delete') this.candidates.delete(id);
        else if (this.accept(ev.kv)) this.candidates.set(id, ev.kv);
        // Per revision, so a release followed by a take-over reads as both, while a hand-over
        // (release and take-over in one txn) reads as the new holder only.
        if (events[i + 1]?.kv.mod_revision !== ev.kv.mod_revision) this.report();
      }
    });
    watcher.on('disconnected', () => {
      disconnected = true;
    });
    watcher.on('connected', () => {
      if (disconnected && generation === this.generation) void this.sync();
    });
    watcher.on('error', () => {
      // Cancelled by etcd, typically "required revision has been compacted": start over.
      if (generation === this.generation) void this.sync();
    });
  }

  private report(): void {
    let lowest: IKeyValue | null = null;
    for (const kv of this.candidates.values()) {
      if (lowest === null || Number(kv.create_revision) < Number(lowest.create_revision)) lowest = kv;
    }
    const before = this.holder;
    const same =
      before === lowest ||
      (before !== null &&
        lowest !== null &&
        before.create_revision === lowest.create_revision &&
        before.key.equals(lowest.key) &&
        (before.value ?? Buffer.alloc(0)).equals(lowest.value ?? Buffer.alloc(0)));
    this.holder = lowest;
    if (!same) this.listener(lowest);
  }
}
