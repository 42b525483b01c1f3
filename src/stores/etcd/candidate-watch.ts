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
import type { IKeyValue, IWatchResponse } from './driver.js';
import { prefixEnd } from './keys.js';
import { ResyncingWatch } from './resyncing-watch.js';

export type HolderListener = (holder: IKeyValue | null) => void;

export class CandidateWatch extends ResyncingWatch<{ kvs: IKeyValue[]; revision: number }> {
  private readonly candidates = new Map<string, IKeyValue>();
  private holder: IKeyValue | null = null;
  /** Events at or below this revision are already in the snapshot. */
  private snapshotRevision = 0;

  constructor(
    conn: EtcdConnection,
    private readonly prefix: Buffer,
    /** Which keys under the prefix are candidates (the store takes exactly `N/<hex>`; Go takes all). */
    private readonly accept: (kv: IKeyValue) => boolean,
    private readonly listener: HolderListener,
  ) {
    super(conn, prefix, prefixEnd(prefix));
  }

  protected read(): Promise<{ kvs: IKeyValue[]; revision: number }> {
    return this.conn.range('watch snapshot', { key: this.prefix, range_end: prefixEnd(this.prefix) });
  }

  protected resynced(snapshot: { kvs: IKeyValue[]; revision: number }): void {
    this.candidates.clear();
    for (const kv of snapshot.kvs) if (this.accept(kv)) this.candidates.set(kv.key.toString('latin1'), kv);
    this.snapshotRevision = snapshot.revision;
    this.report();
  }

  protected changed(res: IWatchResponse): void {
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
