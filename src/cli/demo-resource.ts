/**
 * The resource `tenure demo` writes to, as the demo sees it: what the nodes are told to write to,
 * and the resource's own record of the writes it applied, in its order. The demo's safety checks
 * read that record, never the writers' reports.
 */
import { limits } from '../core/index.js';
import type { TenureStore } from '../open.js';
import { LEDGER_ROW, LEDGER_TABLE, openLedger, readLedger } from './demo-ledger.js';
import type { AppliedWrite } from './demo-ledger.js';
import type { DemoVia } from './demo-writer.js';

export interface DemoResource {
  readonly via: DemoVia;
  /** What the view calls the record of applied writes (`stream`, `row history`, …). */
  readonly label: string;
  /** One line for the header: what the nodes write to and where the check happens. */
  readonly description: string;
  /** The arguments that tell a node where to write (`--via` and `--target`). */
  readonly nodeArgs: readonly string[];
  /** Applied writes after `after`, in the order the resource applied them (at most `limit`). */
  read(after: number, limit: number): Promise<AppliedWrite[]>;
  close(): Promise<void>;
}

export interface DemoResourceSetup {
  readonly via: DemoVia;
  readonly store: TenureStore;
  readonly stream: string;
  /** The store's SQLite file: the `sql` path's row lives next to tenure_leases, so its term check can read them. */
  readonly storeFile: string;
}

/** Readers wait no longer than this for a node's transaction, ms (a busy read is retried next tick). */
const READ_BUSY_MS = 50;

export async function openDemoResource(s: DemoResourceSetup): Promise<DemoResource> {
  switch (s.via) {
    case 'stream':
      return {
        via: 'stream',
        label: 'stream',
        description: '',
        nodeArgs: [],
        read: async (after, limit) => (await s.store.readStream(s.stream, { after, limit: Math.min(limit, limits.readLimitMax) })).map((e) => ({ seq: e.seq, term: e.term, payload: e.payload })),
        close: async () => {},
      };
    case 'sql': {
      const db = openLedger(s.storeFile, READ_BUSY_MS);
      return {
        via: 'sql',
        label: 'row history',
        description: `writes: fencedUpdate of row ${LEDGER_TABLE}.${LEDGER_ROW} (SQLite; the check is in the UPDATE)`,
        nodeArgs: ['--via', 'sql', '--target', s.storeFile],
        read: async (after, limit) => readLedger(db, after, limit),
        close: async () => db.close(),
      };
    }
  }
}
