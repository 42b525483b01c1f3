/**
 * How a node of `tenure demo` writes, one implementation per `--via` path. Each write carries the
 * leadership's token to where the write lands, and the check happens there: the store's fenced
 * append, the fenced UPDATE's own statement, the HTTP guard in the server's transaction, the
 * consumer that applies a message. A refusal the writer hears of is a StaleTermError.
 */
import type { FencingToken } from '../core/index.js';
import { fencedFetch, fencedUpdate, publishFencedAmqp, publishFencedJetStream, publishFencedMqtt, sqliteDialect } from '../fencing/index.js';
import type { TenureStore } from '../open.js';
import { channelNames, connectAmqp, connectMqtt, connectNats } from './demo-brokers.js';
import { LEDGER_ROW, LEDGER_TABLE, openLedger } from './demo-ledger.js';

/** The write paths of the demo, in the order `--help` lists them. */
export const DEMO_PATHS = ['stream', 'sql', 'http', 'nats', 'amqp', 'mqtt'] as const;
export type DemoVia = (typeof DEMO_PATHS)[number];
/** The paths whose resource is a process of its own (`tenure demo-resource`). */
export const RESOURCE_PATHS = ['http', 'nats', 'amqp', 'mqtt'] as const satisfies readonly DemoVia[];
export type ResourceVia = (typeof RESOURCE_PATHS)[number];

/** One node's way to write. */
export interface DemoWriter {
  /**
   * Write `payload` under `token`, called inside the leadership's token context (runWhileLeader):
   * the message paths take the token from there, as an application's code would. Rejects with
   * StaleTermError when the writer hears the resource refused the token (a newer term has
   * written), with another error when the write did not happen.
   */
  write(token: FencingToken, payload: string): Promise<void>;
  close(): Promise<void>;
}

export interface DemoWriterTarget {
  readonly via: DemoVia;
  readonly store: TenureStore;
  /** The stream (`stream`). */
  readonly stream: string;
  /** Where the resource is: the SQLite file (`sql`), the broker's URL. */
  readonly target: string | undefined;
  /** The demo run's name on the broker (see channelNames). */
  readonly channel: string | undefined;
  /** This node's id (the broker client's name). */
  readonly id: string;
}

/** SQLite waits this long for another node's transaction before the write counts as failed, ms. */
const SQLITE_BUSY_MS = 250;

export async function openDemoWriter(t: DemoWriterTarget): Promise<DemoWriter> {
  switch (t.via) {
    case 'stream':
      return {
        write: async (token, payload) => {
          await t.store.appendFenced(token, t.stream, payload);
        },
        close: async () => {},
      };
    case 'sql': {
      const db = openLedger(required(t), SQLITE_BUSY_MS);
      return {
        // The check is in the UPDATE itself: the row's last term <= ours, the row bound to our
        // lease, our term issued in tenure_leases (the store's table, in the same file).
        write: async (token, payload) => {
          const { updated } = await fencedUpdate(sqliteDialect, db, token, { table: LEDGER_TABLE, set: { value: payload }, where: { id: LEDGER_ROW } });
          if (updated !== 1) throw new Error(`the demo row ${LEDGER_TABLE}.${LEDGER_ROW} is missing`);
        },
        close: async () => db.close(),
      };
    }
    case 'http': {
      const url = required(t);
      return {
        // fencedFetch sends Fencing-Token: demo#<term> from the token context; the service's
        // guard checks it in the write's transaction. A 409 comes back as StaleTermError (and
        // has already stepped this node's elector down, reason 'fenced').
        write: async (_token, payload) => {
          const res = await fencedFetch(url, { method: 'POST', body: payload, headers: { 'content-type': 'application/json' } });
          const text = await res.text();
          if (!res.ok) throw new Error(`the service answered ${res.status}${text ? `: ${text.slice(0, 200)}` : ''}`);
        },
        close: async () => {},
      };
    }
    // The broker accepts any publish: the check is at the consumer (tenure demo-resource), which
    // drops a lower term's message. The writer hears nothing of it; its elector finds out when
    // its lease renewal fails.
    case 'nats': {
      const nc = await connectNats(required(t), t.id);
      const js = nc.jetstream();
      const { subject } = channelNames(requiredChannel(t));
      return {
        write: async (_token, payload) => {
          await publishFencedJetStream(js, subject, payload);
        },
        close: async () => nc.close(),
      };
    }
    case 'amqp': {
      const conn = await connectAmqp(required(t));
      conn.on('error', () => {});
      const ch = await conn.createConfirmChannel();
      const { queue } = channelNames(requiredChannel(t));
      return {
        write: async (_token, payload) => {
          publishFencedAmqp(ch, '', queue, Buffer.from(payload), { publish: { persistent: false, contentType: 'application/json' } });
          await ch.waitForConfirms();
        },
        close: async () => conn.close().catch(() => {}),
      };
    }
    case 'mqtt': {
      const client = await connectMqtt(required(t), `${t.id}-${process.pid}`);
      client.on('error', () => {});
      const { topic } = channelNames(requiredChannel(t));
      return {
        write: async (_token, payload) => {
          await publishFencedMqtt(client, topic, payload);
        },
        close: async () => {
          await client.endAsync().catch(() => {});
        },
      };
    }
  }
}

function requiredChannel(t: DemoWriterTarget): string {
  if (t.channel === undefined || t.channel === '') throw new Error(`demo-node --via ${t.via} needs --channel`);
  return t.channel;
}

function required(t: DemoWriterTarget): string {
  if (t.target === undefined || t.target === '') throw new Error(`demo-node --via ${t.via} needs --target`);
  return t.target;
}
