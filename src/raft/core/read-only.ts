/**
 * Pending ReadIndex requests on the leader (§6.4 of the Raft thesis): each records the commit
 * index when it arrived and waits until a quorum has answered a heartbeat carrying its context,
 * which proves this node was still the leader after the request came.
 */
import type { Message, NodeId } from './types.js';

export interface ReadIndexStatus {
  readonly request: Message;
  readonly index: number;
  readonly acks: Set<NodeId>;
}

export class ReadOnly {
  private pending = new Map<string, ReadIndexStatus>();
  private queue: string[] = [];

  get size(): number {
    return this.queue.length;
  }

  /** Queues a request with the commit index `index`; a context already pending is ignored. */
  addRequest(index: number, request: Message): void {
    const ctx = request.context ?? '';
    if (this.pending.has(ctx)) return;
    this.pending.set(ctx, { request, index, acks: new Set() });
    this.queue.push(ctx);
  }

  /** Records that `id` answered a heartbeat carrying `ctx`; returns the acks so far, if pending. */
  recvAck(id: NodeId, ctx: string): ReadonlySet<NodeId> | undefined {
    const rs = this.pending.get(ctx);
    if (rs === undefined) return undefined;
    rs.acks.add(id);
    return rs.acks;
  }

  /**
   * Removes and returns every request up to and including `ctx`: a quorum confirming a later
   * heartbeat confirms the earlier requests too.
   */
  advance(ctx: string): ReadIndexStatus[] {
    const at = this.queue.indexOf(ctx);
    if (at < 0) return [];
    const done = this.queue.splice(0, at + 1);
    const out: ReadIndexStatus[] = [];
    for (const c of done) {
      const rs = this.pending.get(c);
      if (rs !== undefined) out.push(rs);
      this.pending.delete(c);
    }
    return out;
  }

  lastPendingContext(): string | undefined {
    return this.queue[this.queue.length - 1];
  }
}
