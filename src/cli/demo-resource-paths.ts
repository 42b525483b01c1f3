/**
 * How `tenure demo-resource` serves each path: the fence is checked where the write lands, in the
 * same SQLite transaction as the write to the demo row (see demo-ledger.ts).
 */
import { createServer } from 'node:http';
import type { IncomingMessage } from 'node:http';
import type { AddressInfo } from 'node:net';
import { StaleTermError } from '../core/index.js';
import type { FencingToken } from '../core/index.js';
import { FENCED_JETSTREAM_CONSUMER, FencedConsumer, consumeFencedJetStream, fencedMqttAcks, handleAmqpMessage, httpFence, sqlMessageLedger, sqliteDialect } from '../fencing/index.js';
import type { JsMsg } from 'nats';
import type { AmqpMessage, MessageVerdict, MqttPacket, SqliteDatabase } from '../fencing/index.js';
import { channelNames, connectAmqp, connectMqtt, connectNats, natsModule } from './demo-brokers.js';
import { LEDGER_ROW, LEDGER_TABLE } from './demo-ledger.js';
import type { openLedger } from './demo-ledger.js';
import type { ResourceVia } from './demo-writer.js';

/** A running resource, as each path serves it. */
export interface ServedResource {
  /** The HTTP endpoint, for `http`. */
  readonly url?: string;
  close(): Promise<void>;
}

export interface ResourceContext {
  readonly via: ResourceVia;
  readonly group: string;
  readonly db: ReturnType<typeof openLedger>;
  readonly broker: string | undefined;
  readonly channel: string | undefined;
  /** Report a write refused where it landed. */
  refused(error: StaleTermError, payload: string | null): void;
  /** Report a failure that did not stop the resource. */
  error(message: string): void;
}


/** The consumer's durable name (the JetStream consumer and the ledger's row). */
const CONSUMER = 'demo-resource';

export async function serveResource(ctx: ResourceContext): Promise<ServedResource> {
  switch (ctx.via) {
    case 'http':
      return serveHttp(ctx);
    case 'nats':
      return serveNats(ctx);
    case 'amqp':
      return serveAmqp(ctx);
    case 'mqtt':
      return serveMqtt(ctx);
  }
}

/** The write: the payload on the demo row, with the term that wrote it (the trigger records the history). */
function applyToRow(ctx: ResourceContext): (tx: SqliteDatabase, payload: string, token: FencingToken) => Promise<void> {
  const update = ctx.db.prepare(`UPDATE ${LEDGER_TABLE} SET value = ?, last_fence_token = ?, last_fence_lease = ? WHERE id = ?`);
  return async (_tx, payload, token) => {
    const { changes } = update.run(payload, token.term, token.lease, LEDGER_ROW);
    if (Number(changes) !== 1) throw new Error(`the demo row ${LEDGER_TABLE}.${LEDGER_ROW} is missing`);
  };
}

/** A consumer of the demo group applying each message's payload to the row, in the ledger's transaction. */
async function consumerOf<M>(ctx: ResourceContext, payloadOf: (m: M) => string): Promise<FencedConsumer<SqliteDatabase, M>> {
  const ledger = sqlMessageLedger(sqliteDialect, ctx.db);
  await ledger.createTable();
  const apply = applyToRow(ctx);
  return new FencedConsumer<SqliteDatabase, M>({
    group: ctx.group,
    consumer: CONSUMER,
    ledger,
    apply: (tx, message, fence) => apply(tx, payloadOf(message), fence.token),
    onSkip: (verdict, message) => report(ctx, verdict, payloadOf(message)),
  });
}

function report(ctx: ResourceContext, verdict: MessageVerdict, payload: string): void {
  if (verdict.outcome === 'stale') ctx.refused(verdict.error, payload);
  else if (verdict.outcome === 'invalid') ctx.error(`a message was refused: ${verdict.reason}`);
}

function required(value: string | undefined, what: string): string {
  if (value === undefined || value === '') throw new Error(`demo-resource needs ${what}`);
  return value;
}

/** The longest request body the demo service reads, bytes (a node's payload is far smaller). */
const BODY_MAX = 64 * 1024;

function readBody(req: IncomingMessage): Promise<string> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    req.on('data', (chunk: Buffer) => {
      size += chunk.length;
      if (size > BODY_MAX) {
        reject(new Error(`request body over ${BODY_MAX} bytes`));
        req.destroy();
        return;
      }
      chunks.push(chunk);
    });
    req.on('end', () => resolve(Buffer.concat(chunks).toString('utf8')));
    req.on('error', reject);
  });
}

/**
 * HTTP: a node:http service whose one route, `POST /demo`, is fenced by the demo group. The
 * handler opens its SQLite transaction, runs the guard's check in it, writes the row, commits: a
 * stale token throws in the check, the transaction rolls back and the middleware answers 409.
 * Requests are handled one transaction at a time (one SQLite connection).
 */
async function serveHttp(ctx: ResourceContext): Promise<ServedResource> {
  // The service's own database, not the lease store's: leaseTable null (no issued-term check).
  const fence = httpFence({ dialect: sqliteDialect, group: ctx.group, leaseTable: null, onError: (err) => ctx.error(`handler failed: ${(err as Error).message}`) });
  await fence.ensureTable(ctx.db);
  const apply = applyToRow(ctx);
  let queue: Promise<unknown> = Promise.resolve();
  const serialized = <T>(fn: () => Promise<T>): Promise<T> => {
    const run = queue.then(fn, fn);
    queue = run.catch(() => undefined);
    return run;
  };
  const server = createServer(
    fence.node(async (req, res) => {
      if (req.method !== 'POST' || req.url !== '/demo') {
        res.statusCode = 404;
        res.end();
        return;
      }
      const guard = fence.guard(req);
      const body = await readBody(req);
      await serialized(async () => {
        ctx.db.exec('BEGIN IMMEDIATE');
        try {
          await guard.check(ctx.db);
          await apply(ctx.db, body, guard.token);
          ctx.db.exec('COMMIT');
        } catch (err) {
          ctx.db.exec('ROLLBACK');
          if (err instanceof StaleTermError) ctx.refused(err, body);
          throw err; // the middleware answers a stale token with 409, anything else with 500
        }
      });
      res.statusCode = 204;
      res.end();
    }),
  );
  server.keepAliveTimeout = 1000;
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => resolve());
  });
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}/demo`,
    close: async () => {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

/** JetStream: a stream of the run's subject (in memory) and a durable consumer, acked after the apply commits. */
async function serveNats(ctx: ResourceContext): Promise<ServedResource> {
  const url = required(ctx.broker, '--broker');
  const { subject, stream } = channelNames(required(ctx.channel, '--channel'));
  const { AckPolicy, StorageType } = natsModule();
  const nc = await connectNats(url, CONSUMER);
  try {
    const jsm = await nc.jetstreamManager();
    await jsm.streams.add({ name: stream, subjects: [subject], storage: StorageType.Memory });
    // Explicit acks, one message outstanding: the ledger knows a redelivery by its stream sequence.
    // (nats' types want its AckPolicy enum for the same 'explicit'.)
    await jsm.consumers.add(stream, { durable_name: CONSUMER, ...FENCED_JETSTREAM_CONSUMER, ack_policy: AckPolicy.Explicit });
    const consumer = await consumerOf<JsMsg>(ctx, (m) => m.string());
    // A consumer deleted on the server ends the iterator with an error (the resource reports it), not a silent wait.
    const messages = await (await nc.jetstream().consumers.get(stream, CONSUMER)).consume({ abort_on_missing_resource: true });
    const done = consumeFencedJetStream(messages, consumer).catch((err: unknown) => ctx.error(`consumer stopped: ${(err as Error).message}`));
    return {
      close: async () => {
        await messages.close().catch(() => {});
        await done;
        await jsm.streams.delete(stream).catch(() => {});
        await nc.close();
      },
    };
  } catch (err) {
    await nc.close().catch(() => {});
    throw err;
  }
}

/** RabbitMQ: a queue of the run's own, one delivery at a time, acked after the apply commits. */
async function serveAmqp(ctx: ResourceContext): Promise<ServedResource> {
  const url = required(ctx.broker, '--broker');
  const { queue } = channelNames(required(ctx.channel, '--channel'));
  const conn = await connectAmqp(url);
  conn.on('error', (err: Error) => ctx.error(`RabbitMQ: ${err.message}`));
  try {
    const ch = await conn.createChannel();
    await ch.assertQueue(queue, { durable: false });
    await ch.prefetch(1);
    const consumer = await consumerOf<AmqpMessage>(ctx, (m) => m.content.toString('utf8'));
    let closing = false;
    const { consumerTag } = await ch.consume(queue, (msg) => {
      if (msg === null) {
        if (!closing) ctx.error('RabbitMQ cancelled the consumer');
        return;
      }
      handleAmqpMessage(consumer, ch, msg).catch((err: unknown) => ctx.error(`apply failed: ${(err as Error).message}`));
    });
    return {
      close: async () => {
        closing = true;
        await ch.cancel(consumerTag).catch(() => {});
        await ch.deleteQueue(queue).catch(() => {});
        await conn.close().catch(() => {});
      },
    };
  } catch (err) {
    await conn.close().catch(() => {});
    throw err;
  }
}

/** MQTT v5: a QoS 1 subscription; each message is applied before its PUBACK leaves (customHandleAcks). */
async function serveMqtt(ctx: ResourceContext): Promise<ServedResource> {
  const url = required(ctx.broker, '--broker');
  const { topic } = channelNames(required(ctx.channel, '--channel'));
  const consumer = await consumerOf<MqttPacket>(ctx, (m) => m.payload.toString());
  const acks = fencedMqttAcks(consumer, (verdict) => {
    if (verdict instanceof Error) ctx.error(`apply failed: ${verdict.message}`);
  });
  const client = await connectMqtt(url, `${CONSUMER}-${process.pid}`, { customHandleAcks: acks, clean: true });
  client.on('error', (err) => ctx.error(`MQTT: ${err.message}`));
  try {
    await client.subscribeAsync(topic, { qos: 1 });
  } catch (err) {
    await client.endAsync().catch(() => {});
    throw err;
  }
  return {
    close: async () => {
      await client.endAsync().catch(() => {});
    },
  };
}
