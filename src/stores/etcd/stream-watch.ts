/**
 * Push for one fenced stream: an etcd watch on the stream's entry keys. Each put of an entry
 * tells the highest seq of its revision. When the watch starts, and whenever it must start over
 * (see ResyncingWatch), the head is read and told first, so an append made while the watch was
 * down is never missed.
 */
import type { EtcdConnection } from './connection.js';
import type { IWatchResponse } from './driver.js';
import { prefixEnd } from './keys.js';
import { ResyncingWatch } from './resyncing-watch.js';

export class StreamWatch extends ResyncingWatch<{ kvs: { key: Buffer }[]; revision: number }> {
  private readonly prefix: Buffer;

  constructor(
    conn: EtcdConnection,
    private readonly stream: string,
    /** Told the head: after puts (only higher than before), and on every (re)start (maybe the same). */
    private readonly tell: (head: number, again: boolean) => void,
  ) {
    const prefix = conn.layout.entries(stream);
    super(conn, prefix, prefixEnd(prefix));
    this.prefix = prefix;
  }

  protected read(): Promise<{ kvs: { key: Buffer }[]; revision: number }> {
    return this.conn.range(`watch stream ${this.stream}`, {
      key: this.prefix,
      range_end: prefixEnd(this.prefix),
      sort_target: 'Key',
      sort_order: 'Descend',
      limit: 1,
      keys_only: true,
    });
  }

  protected resynced(snapshot: { kvs: { key: Buffer }[] }): void {
    const last = snapshot.kvs[0];
    this.tell(last ? this.conn.layout.seqOf(last.key) : 0, true);
  }

  protected changed(res: IWatchResponse): void {
    let head = 0;
    for (const ev of res.events) if (ev.type === 'Put') head = Math.max(head, this.conn.layout.seqOf(ev.kv.key));
    if (head > 0) this.tell(head, false);
  }
}
