/**
 * The lifecycle every etcd watch of the store shares: read a snapshot of a key range, watch the
 * range from the snapshot's revision on, and start over (a fresh snapshot, then a new watch)
 * whenever the watch cannot be trusted to have delivered everything: the stream reconnected (the
 * etcd3 client may resume past events it never delivered) or etcd cancelled the watch (typically
 * "required revision has been compacted"). A failed snapshot read is retried with a doubling
 * wait. Events of a superseded watch are never delivered (generations).
 *
 * Subclasses say what the snapshot is (`read`), what it means (`resynced`) and what events mean
 * (`changed`): CandidateWatch (who holds, from candidate keys) and StreamWatch (a stream's head).
 */
import type { EtcdConnection } from './connection.js';
import type { IWatchResponse, Watcher } from './driver.js';

/** Retry a failed snapshot after this long, doubling up to the max, ms. */
const RESYNC_MIN_MS = 50;
const RESYNC_MAX_MS = 2000;

export abstract class ResyncingWatch<S extends { readonly revision: number }> {
  private watcher: Watcher | null = null;
  private generation = 0;
  private stopped = false;
  private retryMs = RESYNC_MIN_MS;
  private cancelRetry: () => void = () => {};

  constructor(
    protected readonly conn: EtcdConnection,
    /** The watched key range: [start, end). */
    private readonly rangeStart: Buffer,
    private readonly end: Buffer,
  ) {}

  /** Read the range as it is now; its revision is where the watch starts after. */
  protected abstract read(): Promise<S>;
  /** A snapshot was read (on start and on every start-over). */
  protected abstract resynced(snapshot: S): void;
  /** Events after the snapshot's revision, in order. */
  protected abstract changed(res: IWatchResponse): void;

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
    let snapshot: S;
    try {
      snapshot = await this.read();
    } catch {
      if (generation !== this.generation || this.stopped) return;
      const wait = this.retryMs;
      this.retryMs = Math.min(RESYNC_MAX_MS, this.retryMs * 2);
      this.cancelRetry = this.conn.clock.setTimer(wait, () => void this.sync());
      return;
    }
    if (generation !== this.generation || this.stopped) return;
    this.retryMs = RESYNC_MIN_MS;
    this.resynced(snapshot);

    const watcher = this.conn.client
      .watch()
      .inRange({ start: this.rangeStart, end: this.end })
      .startRevision(String(snapshot.revision + 1))
      .watcher();
    this.watcher = watcher;
    let disconnected = false;
    watcher.on('data', (res) => {
      if (generation === this.generation) this.changed(res);
    });
    watcher.on('disconnected', () => {
      disconnected = true;
    });
    watcher.on('connected', () => {
      if (disconnected && generation === this.generation) void this.sync();
    });
    watcher.on('error', () => {
      if (generation === this.generation) void this.sync();
    });
  }
}
