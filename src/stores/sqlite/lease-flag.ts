/**
 * A flag that lease calls (acquire, renew, release) waiting for the write lock raise for the
 * appends of other processes, which hold back while it is up: SQLite has no queue for its write
 * lock, so without it a process appending flat out can keep a renewal waiting past its leader's
 * deadline.
 *
 * The flag is the modification time of one file beside the database (`PATH-lease-wait`, empty):
 * a waiter sets it to now every RAISE_EVERY_MS while it waits and back to 0 when it is through,
 * and it counts as up for FRESH_MS after it was last set (long enough to outlast a waiter's own
 * scheduling delays on a loaded host), so a waiter that died lowers it by itself. One host, one clock (the SQLite store is single-host), so comparing the file's time
 * with this process's clock is sound; a clock step at worst makes the flag look down (appends go
 * ahead, lease calls still get their turn by polling faster) or up for FRESH_MS.
 * Any error touching the file (a read-only directory) leaves the flag down.
 */
import { statSync, utimesSync, writeFileSync } from 'node:fs';

/** How long a raised flag holds appends back unless it is raised again, ms. */
const FRESH_MS = 50;
/** How often a waiting lease call raises it again, ms. */
const RAISE_EVERY_MS = 2;

export class LeaseWaitFlag {
  private raisedAt = -Infinity;

  /** `dbPath` null (an in-memory database) makes a flag that is never up. */
  constructor(private readonly file: string | null) {}

  static beside(dbPath: string): LeaseWaitFlag {
    return new LeaseWaitFlag(dbPath === ':memory:' ? null : `${dbPath}-lease-wait`);
  }

  /** A lease call is waiting for the lock: hold other processes' appends back. */
  raise(): void {
    if (this.file === null) return;
    const now = performance.now();
    if (now - this.raisedAt < RAISE_EVERY_MS) return;
    this.raisedAt = now;
    const t = new Date();
    try {
      utimesSync(this.file, t, t);
    } catch {
      try {
        writeFileSync(this.file, '');
      } catch {
        // no flag: appends are not held back, lease calls still poll
      }
    }
  }

  /** The lease call that raised the flag got through. */
  lower(): void {
    if (this.file === null || this.raisedAt === -Infinity) return;
    this.raisedAt = -Infinity;
    try {
      utimesSync(this.file, 0, 0);
    } catch {
      // it goes down by itself after FRESH_MS
    }
  }

  /** Whether some process's lease call is waiting (as far as the file says). */
  isUp(): boolean {
    if (this.file === null) return false;
    try {
      const age = Date.now() - (statSync(this.file, { throwIfNoEntry: false })?.mtimeMs ?? 0);
      return age > -FRESH_MS && age < FRESH_MS;
    } catch {
      return false;
    }
  }
}
