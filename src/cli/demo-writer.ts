/**
 * How a node of `tenure demo` writes, one implementation per `--via` path. Each write carries the
 * leadership's token to where the write lands, and the check happens there: the store's fenced
 * append, the fenced UPDATE's own statement, the HTTP guard in the server's transaction, the
 * consumer that applies a message. A refusal the writer hears of is a StaleTermError.
 */
import type { FencingToken } from '../core/index.js';
import { fencedUpdate, sqliteDialect } from '../fencing/index.js';
import type { TenureStore } from '../open.js';
import { LEDGER_ROW, LEDGER_TABLE, openLedger } from './demo-ledger.js';

/** The write paths of the demo, in the order `--help` lists them. */
export const DEMO_PATHS = ['stream', 'sql'] as const;
export type DemoVia = (typeof DEMO_PATHS)[number];

/** One node's way to write. */
export interface DemoWriter {
  /**
   * Write `payload` under `token`. Rejects with StaleTermError when the resource refused the
   * token (a newer term has written), with another error when the write did not happen.
   */
  write(token: FencingToken, signal: AbortSignal, payload: string): Promise<void>;
  close(): Promise<void>;
}

export interface DemoWriterTarget {
  readonly via: DemoVia;
  readonly store: TenureStore;
  /** The stream (`stream`). */
  readonly stream: string;
  /** Where the resource is: the SQLite file (`sql`). */
  readonly target: string | undefined;
}

/** SQLite waits this long for another node's transaction before the write counts as failed, ms. */
const SQLITE_BUSY_MS = 250;

export async function openDemoWriter(t: DemoWriterTarget): Promise<DemoWriter> {
  switch (t.via) {
    case 'stream':
      return {
        write: async (token, _signal, payload) => {
          await t.store.appendFenced(token, t.stream, payload);
        },
        close: async () => {},
      };
    case 'sql': {
      const db = openLedger(required(t), SQLITE_BUSY_MS);
      return {
        // The check is in the UPDATE itself: the row's last term <= ours, the row bound to our
        // lease, our term issued in tenure_leases (the store's table, in the same file).
        write: async (token, _signal, payload) => {
          const { updated } = await fencedUpdate(sqliteDialect, db, token, { table: LEDGER_TABLE, set: { value: payload }, where: { id: LEDGER_ROW } });
          if (updated !== 1) throw new Error(`the demo row ${LEDGER_TABLE}.${LEDGER_ROW} is missing`);
        },
        close: async () => db.close(),
      };
    }
  }
}

function required(t: DemoWriterTarget): string {
  if (t.target === undefined || t.target === '') throw new Error(`demo-node --via ${t.via} needs --target`);
  return t.target;
}
