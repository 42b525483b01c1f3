/**
 * Fenced messages on the real RabbitMQ on this machine (127.0.0.1:5672, guest/guest), through
 * amqplib: the token rides in the AMQP headers, the consumer applies in the ledger's PostgreSQL
 * transaction and acks only after it committed; a zombie's publish after the takeover and bad
 * headers are nack'ed without requeue, so they land in the queue's dead-letter queue, never applied.
 */
import amqp from 'amqplib';
import type { Channel, ChannelModel, ConsumeMessage } from 'amqplib';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { NoTokenError, makeToken } from '../../src/core/index.js';
import { FencedConsumer, handleAmqpMessage, postgresDialect, publishFencedAmqp, runFenced, sqlMessageLedger } from '../../src/fencing/index.js';
import type { AmqpMessage, MessageVerdict, PgQueryable } from '../../src/fencing/index.js';
import { pollUntil } from '../fixtures/harness.js';
import { appliedConsumer, appliedDb, badTokens, uniqueName } from './message-fixtures.js';
import type { AppliedDb } from './message-fixtures.js';

const AMQP_URL = process.env.TENURE_TEST_AMQP_URL ?? 'amqp://guest:guest@127.0.0.1:5672';

let conn: ChannelModel;
let ch: Channel;
const cleanups: (() => Promise<unknown>)[] = [];

beforeAll(async () => {
  conn = await amqp.connect(AMQP_URL);
  ch = await conn.createConfirmChannel();
});
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c().catch(() => undefined);
});
afterAll(async () => {
  await conn.close();
});

/** A queue whose refused messages are dead-lettered to `<queue>.dead`. */
async function queue(): Promise<{ name: string; dead: string }> {
  const name = uniqueName('fenced');
  const dead = `${name}.dead`;
  await ch.assertQueue(dead, { durable: false });
  await ch.assertQueue(name, { durable: false, deadLetterExchange: '', deadLetterRoutingKey: dead });
  cleanups.push(async () => {
    await ch.deleteQueue(name);
    await ch.deleteQueue(dead);
  });
  return { name, dead };
}

async function db(): Promise<AppliedDb> {
  const d = await appliedDb();
  cleanups.push(() => d.close());
  return d;
}

async function consuming(q: string, d: AppliedDb, group: string) {
  const { consumer, verdicts } = appliedConsumer<AmqpMessage>(d.pool, group, (m) => m.content.toString());
  const cch = await conn.createChannel();
  await cch.prefetch(20);
  const errors: unknown[] = [];
  await cch.consume(q, (msg: ConsumeMessage | null) => {
    if (msg) handleAmqpMessage(consumer, cch, msg).catch((err: unknown) => errors.push(err));
  });
  cleanups.push(() => cch.close());
  return { consumer, verdicts, errors };
}

async function depth(q: string): Promise<number> {
  return (await ch.checkQueue(q)).messageCount;
}

describe('fenced messages on RabbitMQ', () => {
  it("a zombie's publish after the takeover is dead-lettered, counted and never applied", async () => {
    const q = await queue();
    const d = await db();
    const group = uniqueName('orders');
    const old = makeToken(group, 3);
    const next = makeToken(group, 4);
    const send = (token: typeof old, body: string) => runFenced({ token }, () => publishFencedAmqp(ch, '', q.name, Buffer.from(body)));
    send(old, 'old-1');
    send(next, 'new-1');
    const zombie = send(old, 'zombie');
    send(next, 'new-2');
    await (ch as amqp.ConfirmChannel).waitForConfirms();
    expect(zombie.fence.tokenText).toBe(`${group}#3`);
    const { consumer, verdicts, errors } = await consuming(q.name, d, group);
    await pollUntil('all four settled', 20_000, async () => consumer.counts.applied + consumer.counts.stale === 4 && (await depth(q.dead)) === 1);
    expect(errors).toEqual([]);
    expect(await d.applied()).toEqual(['old-1', 'new-1', 'new-2']);
    expect(consumer.counts).toEqual({ applied: 3, duplicate: 0, stale: 1, invalid: 0 });
    expect(verdicts[0]).toMatchObject({ outcome: 'stale', reason: new RegExp(`term 3 < 4 for group ${group}`) });
    const dead = await ch.get(q.dead, { noAck: true });
    expect(dead && dead.content.toString()).toBe('zombie');
    expect(dead && dead.properties.messageId).toBe(`${group}#3/${zombie.fence.seq}`);
    expect(await depth(q.name)).toBe(0);
  });

  it('publishing outside a leadership throws NoTokenError and sends nothing', async () => {
    const q = await queue();
    expect(() => publishFencedAmqp(ch, '', q.name, Buffer.from('x'))).toThrow(NoTokenError);
    await (ch as amqp.ConfirmChannel).waitForConfirms();
    expect(await depth(q.name)).toBe(0);
  });

  it('bad headers (none, garbled, term -1, 2^63, another group, huge, not text) are dead-lettered with a clear reason and never applied', async () => {
    const q = await queue();
    const d = await db();
    const group = uniqueName('orders');
    const bad = badTokens(group);
    for (const b of bad) ch.publish('', q.name, Buffer.from(b.name), { headers: { 'Fencing-Token': b.value, 'Fencing-Seq': '1' } });
    ch.publish('', q.name, Buffer.from('no headers'));
    ch.publish('', q.name, Buffer.from('a number'), { headers: { 'Fencing-Token': 5, 'Fencing-Seq': '1' } });
    ch.publish('', q.name, Buffer.from('no seq'), { headers: { 'Fencing-Token': `${group}#1` } });
    publishFencedAmqp(ch, '', q.name, Buffer.from('good'), { token: makeToken(group, 1) });
    await (ch as amqp.ConfirmChannel).waitForConfirms();
    const total = bad.length + 4;
    const { consumer, verdicts } = await consuming(q.name, d, group);
    await pollUntil('all settled', 20_000, async () => consumer.counts.applied + consumer.counts.invalid === total && (await depth(q.dead)) === total - 1);
    expect(await d.applied()).toEqual(['good']);
    const reasons = verdicts.map((v: MessageVerdict) => ('reason' in v ? v.reason : ''));
    bad.forEach((b, i) => expect(reasons[i], b.name).toMatch(b.reason));
    expect(reasons.slice(bad.length)).toEqual([expect.stringMatching(/Fencing-Token: missing/), expect.stringMatching(/Fencing-Token: expected text/), expect.stringMatching(/Fencing-Seq: missing/)]);
  });

  it('an apply that fails once: that message and the ones behind it are requeued, and all are applied once, in order', async () => {
    const q = await queue();
    const d = await db();
    const group = uniqueName('orders');
    for (let i = 1; i <= 6; i++) publishFencedAmqp(ch, '', q.name, Buffer.from(`m${i}`), { token: makeToken(group, 1) });
    await (ch as amqp.ConfirmChannel).waitForConfirms();
    let failures = 0;
    const consumer = new FencedConsumer<PgQueryable, AmqpMessage>({
      group,
      consumer: 'projector',
      ledger: sqlMessageLedger(postgresDialect, d.pool),
      apply: async (tx, m) => {
        await tx.query('INSERT INTO applied (payload, term, pos) VALUES ($1, 1, 0)', [m.content.toString()]);
        if (m.content.toString() === 'm2' && failures++ === 0) throw new Error('database hiccup');
      },
    });
    const cch = await conn.createChannel();
    cleanups.push(() => cch.close());
    await cch.prefetch(10);
    const errors: string[] = [];
    await cch.consume(q.name, (msg) => {
      if (msg) handleAmqpMessage(consumer, cch, msg).catch((err: unknown) => errors.push((err as Error).name));
    });
    await pollUntil('all six applied', 20_000, async () => consumer.counts.applied === 6 && (await depth(q.name)) === 0);
    await new Promise((r) => setTimeout(r, 300));
    expect(await d.applied()).toEqual(['m1', 'm2', 'm3', 'm4', 'm5', 'm6']);
    expect(errors[0]).toBe('Error');
    expect(errors.slice(1).every((e) => e === 'ConsumerHaltedError')).toBe(true);
    expect(consumer.counts.duplicate).toBe(0);
  });
});
