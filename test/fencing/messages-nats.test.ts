/**
 * Fenced messages on the real NATS JetStream server on this machine (127.0.0.1:4222): the token
 * rides in the headers, the consumer applies in the ledger's PostgreSQL transaction, a zombie's
 * publish after the takeover is terminated and never applied, and bad headers are refused with a
 * clear reason and never applied. Each test has its own stream, subjects and durable consumer.
 */
import { AckPolicy, connect, headers } from 'nats';
import type { ConsumerMessages, JetStreamClient, JetStreamManager, NatsConnection } from 'nats';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { NoTokenError, makeToken } from '../../src/core/index.js';
import { FENCED_JETSTREAM_CONSUMER, FENCED_JETSTREAM_CONSUMER_BY_ID, consumeFencedJetStream, handleJetStreamMessage, handleNatsMessage, publishFencedJetStream, publishFencedNats, runFenced } from '../../src/fencing/index.js';
import type { JetStreamMessage, MessageVerdict, NatsMessage } from '../../src/fencing/index.js';
import { pollUntil } from '../fixtures/harness.js';
import { appliedConsumer, appliedDb, badTokens, uniqueName } from './message-fixtures.js';
import type { AppliedDb } from './message-fixtures.js';

const NATS_URL = process.env.TENURE_TEST_NATS_URL ?? '127.0.0.1:4222';

let nc: NatsConnection;
let js: JetStreamClient;
let jsm: JetStreamManager;
const cleanups: (() => Promise<unknown>)[] = [];

beforeAll(async () => {
  nc = await connect({ servers: NATS_URL });
  js = nc.jetstream();
  jsm = await nc.jetstreamManager();
});
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c().catch(() => undefined);
});
afterAll(async () => {
  await nc.drain();
});

async function stream(config: { byId?: boolean; ackWaitMs?: number } = {}): Promise<{ name: string; subject: string; durable: string }> {
  const name = uniqueName('fenced');
  await jsm.streams.add({ name, subjects: [`${name}.>`] });
  cleanups.push(() => jsm.streams.delete(name));
  const durable = 'projector';
  const fenced = config.byId ? FENCED_JETSTREAM_CONSUMER_BY_ID : FENCED_JETSTREAM_CONSUMER;
  await jsm.consumers.add(name, { durable_name: durable, ...fenced, ack_policy: AckPolicy.Explicit, ack_wait: (config.ackWaitMs ?? 5000) * 1_000_000 });
  return { name, subject: `${name}.orders`, durable };
}

async function db(): Promise<AppliedDb> {
  const d = await appliedDb();
  cleanups.push(() => d.close());
  return d;
}

const payloadOf = (m: JetStreamMessage): string => new TextDecoder().decode((m as unknown as { data: Uint8Array }).data);

/** Run a fenced consumer over the durable until stopped. */
async function consuming(s: { name: string; durable: string }, d: AppliedDb, group: string, dedupe: 'position' | 'id' = 'position') {
  const { consumer, verdicts } = appliedConsumer<JetStreamMessage>(d.pool, group, payloadOf, { dedupe });
  const messages: ConsumerMessages = await (await js.consumers.get(s.name, s.durable)).consume({ max_messages: 100 });
  const loop = consumeFencedJetStream(messages, consumer);
  cleanups.push(async () => {
    await messages.close();
    await loop.catch(() => undefined);
  });
  return { consumer, verdicts, loop, messages };
}

async function settled(s: { name: string; durable: string }): Promise<boolean> {
  const info = await jsm.consumers.info(s.name, s.durable);
  return info.num_pending === 0 && info.num_ack_pending === 0;
}

describe('fenced messages on NATS JetStream', () => {
  it("a zombie's publish after the takeover is terminated, counted and never applied", async () => {
    const s = await stream();
    const d = await db();
    const group = uniqueName('orders');
    const old = makeToken(group, 7);
    const next = makeToken(group, 8);
    await runFenced({ token: old }, () => publishFencedJetStream(js, s.subject, 'old-1'));
    await runFenced({ token: next }, () => publishFencedJetStream(js, s.subject, 'new-1'));
    // The old leader resumes after the takeover and publishes with its old token.
    const zombie = await runFenced({ token: old }, () => publishFencedJetStream(js, s.subject, 'zombie'));
    expect(zombie.fence.tokenText).toBe(`${group}#7`);
    await runFenced({ token: next }, () => publishFencedJetStream(js, s.subject, 'new-2'));
    const { consumer, verdicts } = await consuming(s, d, group);
    await pollUntil('all four settled', 20_000, async () => consumer.counts.applied + consumer.counts.stale === 4 && (await settled(s)));
    expect(await d.applied()).toEqual(['old-1', 'new-1', 'new-2']);
    expect(consumer.counts).toEqual({ applied: 3, duplicate: 0, stale: 1, invalid: 0 });
    expect(verdicts[0]).toMatchObject({ outcome: 'stale', reason: new RegExp(`term 7 < 8 for group ${group}`), position: zombie.seq });
  });

  it('publishing outside a leadership throws NoTokenError and sends nothing', async () => {
    const s = await stream();
    await expect(publishFencedJetStream(js, s.subject, 'x')).rejects.toThrow(NoTokenError);
    expect(() => publishFencedNats(nc, s.subject, 'x')).toThrow(NoTokenError);
    expect((await jsm.streams.info(s.name)).state.messages).toBe(0);
  });

  it('bad headers (none, garbled, term -1, 2^63, another group, huge, two tokens) are terminated with a clear reason and never applied', async () => {
    const s = await stream();
    const d = await db();
    const group = uniqueName('orders');
    const bad = badTokens(group);
    for (const b of bad) {
      const h = headers();
      h.set('Fencing-Token', b.value);
      await js.publish(s.subject, b.name, { headers: h });
    }
    await js.publish(s.subject, 'no headers');
    const two = headers();
    two.append('Fencing-Token', `${group}#1`);
    two.append('Fencing-Token', `${group}#2`);
    await js.publish(s.subject, 'two tokens', { headers: two });
    await publishFencedJetStream(js, s.subject, 'good', { token: makeToken(group, 1) });
    const total = bad.length + 3;
    const { consumer, verdicts } = await consuming(s, d, group);
    await pollUntil('all settled', 20_000, async () => consumer.counts.applied + consumer.counts.invalid === total && (await settled(s)));
    expect(await d.applied()).toEqual(['good']);
    expect(consumer.counts.invalid).toBe(total - 1);
    const reasons = verdicts.map((v: MessageVerdict) => ('reason' in v ? v.reason : ''));
    bad.forEach((b, i) => expect(reasons[i], b.name).toMatch(b.reason));
    expect(reasons[bad.length]).toMatch(/Fencing-Token: missing/);
    expect(reasons[bad.length + 1]).toMatch(/Fencing-Token: expected text/);
  });

  it('deduping by id with many in flight: a crash between apply and ack, and a message never applied while later ones were, each end applied exactly once', async () => {
    const s = await stream({ byId: true, ackWaitMs: 1000 });
    const d = await db();
    const group = uniqueName('orders');
    const token = makeToken(group, 5);
    for (let i = 1; i <= 30; i++) await publishFencedJetStream(js, s.subject, `m${i}`, { token });
    // The first consumer process takes m1..m3 at once: it applies m1 and m2 (committed) and dies
    // before acknowledging them, and dies holding m3, never applied.
    const first = appliedConsumer<JetStreamMessage>(d.pool, group, payloadOf, { dedupe: 'id' });
    const taken = await (await js.consumers.get(s.name, s.durable)).fetch({ max_messages: 3, expires: 5000 });
    const inHand: JetStreamMessage[] = [];
    for await (const m of taken) inHand.push(m);
    expect(inHand.map(payloadOf)).toEqual(['m1', 'm2', 'm3']);
    const diesBeforeAck = (m: JetStreamMessage): JetStreamMessage & { data: Uint8Array } => ({
      headers: m.headers,
      seq: m.seq,
      data: (m as unknown as { data: Uint8Array }).data,
      ack: () => {},
      nak: () => {},
      term: () => {},
    });
    expect((await Promise.all(inHand.slice(0, 2).map((m) => handleJetStreamMessage(first.consumer, diesBeforeAck(m))))).map((v) => v.outcome)).toEqual(['applied', 'applied']);
    expect(await d.applied()).toEqual(['m1', 'm2']);
    // Its successor consumes with many in flight: m4..m30 first, then, once the ack wait ends,
    // m1..m3 again: m1 and m2 are recognised by their stream sequence (acknowledged, not applied
    // again), and m3, though its sequence is below the ones applied since, is applied.
    const { consumer } = await consuming(s, d, group, 'id');
    await pollUntil('all thirty settled', 20_000, async () => consumer.counts.applied + consumer.counts.duplicate === 30 && (await settled(s)));
    expect(consumer.counts).toEqual({ applied: 28, duplicate: 2, stale: 0, invalid: 0 });
    const applied = await d.applied();
    expect(applied).toHaveLength(30);
    expect(new Set(applied).size).toBe(30);
    expect(applied.indexOf('m3')).toBeGreaterThan(applied.indexOf('m30'));
  });

  it('deduping by id with many in flight: a zombie publish among them is terminated, counted and never applied', async () => {
    const s = await stream({ byId: true });
    const d = await db();
    const group = uniqueName('orders');
    const old = makeToken(group, 7);
    const next = makeToken(group, 8);
    for (let i = 1; i <= 10; i++) await publishFencedJetStream(js, s.subject, `old-${i}`, { token: old });
    for (let i = 1; i <= 10; i++) await publishFencedJetStream(js, s.subject, `new-${i}`, { token: next });
    const zombie = await publishFencedJetStream(js, s.subject, 'zombie', { token: old });
    await publishFencedJetStream(js, s.subject, 'new-11', { token: next });
    const { consumer, verdicts } = await consuming(s, d, group, 'id');
    await pollUntil('all settled', 20_000, async () => consumer.counts.applied + consumer.counts.stale === 22 && (await settled(s)));
    expect(consumer.counts).toEqual({ applied: 21, duplicate: 0, stale: 1, invalid: 0 });
    expect(await d.applied()).not.toContain('zombie');
    expect(verdicts[0]).toMatchObject({ outcome: 'stale', position: zombie.seq });
  });

  it('core NATS: the headers carry the token and the sequence; a lower term is dropped', async () => {
    const d = await db();
    const group = uniqueName('orders');
    const subject = uniqueName('core');
    const { consumer } = appliedConsumer<NatsMessage>(d.pool, group, (m) => new TextDecoder().decode((m as unknown as { data: Uint8Array }).data));
    const sub = nc.subscribe(subject);
    const seen: MessageVerdict[] = [];
    const loop = (async () => {
      for await (const m of sub) seen.push(await handleNatsMessage(consumer, m));
    })();
    runFenced({ token: makeToken(group, 2) }, () => publishFencedNats(nc, subject, 'a'));
    runFenced({ token: makeToken(group, 3) }, () => publishFencedNats(nc, subject, 'b'));
    runFenced({ token: makeToken(group, 2) }, () => publishFencedNats(nc, subject, 'zombie'));
    await pollUntil('three handled', 10_000, () => seen.length === 3);
    sub.unsubscribe();
    await loop;
    expect(seen.map((v) => v.outcome)).toEqual(['applied', 'applied', 'stale']);
    expect(await d.applied()).toEqual(['a', 'b']);
  });
});
