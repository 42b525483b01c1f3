/**
 * Fenced messages over MQTT v5 on the real Mosquitto on this machine (127.0.0.1:1883): the token
 * rides in the user properties, the consumer applies in the ledger's PostgreSQL transaction from
 * customHandleAcks, so the PUBACK leaves only after the commit; a zombie's publish after the
 * takeover and bad properties get a PUBACK with reason 0x83 and are never applied.
 */
import mqtt from 'mqtt';
import type { MqttClient } from 'mqtt';
import { afterEach, describe, expect, it } from 'vitest';
import { InvalidArgumentError, NoTokenError, makeToken } from '../../src/core/index.js';
import { fencedMqttAcks, publishFencedMqtt, runFenced } from '../../src/fencing/index.js';
import type { MessageVerdict, MqttPacket } from '../../src/fencing/index.js';
import { pollUntil } from '../fixtures/harness.js';
import { appliedConsumer, appliedDb, badTokens, uniqueName } from './message-fixtures.js';
import type { AppliedDb } from './message-fixtures.js';

const MQTT_URL = process.env.TENURE_TEST_MQTT_URL ?? 'mqtt://127.0.0.1:1883';

const cleanups: (() => Promise<unknown>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c().catch(() => undefined);
});

async function client(options: mqtt.IClientOptions = {}): Promise<MqttClient> {
  const c = await mqtt.connectAsync(MQTT_URL, { protocolVersion: 5, ...options });
  cleanups.push(() => c.endAsync(true));
  return c;
}

async function db(): Promise<AppliedDb> {
  const d = await appliedDb();
  cleanups.push(() => d.close());
  return d;
}

async function consuming(topic: string, d: AppliedDb, group: string) {
  const { consumer, verdicts } = appliedConsumer<MqttPacket>(d.pool, group, (p) => p.payload.toString());
  const errors: Error[] = [];
  const sub = await client({ clientId: uniqueName('sub'), customHandleAcks: fencedMqttAcks(consumer, (v) => v instanceof Error && errors.push(v)) });
  await sub.subscribeAsync(topic, { qos: 1 });
  return { consumer, verdicts, errors };
}

describe('fenced messages on MQTT v5', () => {
  it("a zombie's publish after the takeover is refused (PUBACK 0x83), counted and never applied", async () => {
    const topic = `${uniqueName('fenced')}/orders`;
    const d = await db();
    const group = uniqueName('orders');
    const { consumer, verdicts, errors } = await consuming(topic, d, group);
    const pub = await client();
    const old = makeToken(group, 5);
    const next = makeToken(group, 6);
    await runFenced({ token: old }, () => publishFencedMqtt(pub, topic, 'old-1'));
    await runFenced({ token: next }, () => publishFencedMqtt(pub, topic, 'new-1'));
    await runFenced({ token: old }, () => publishFencedMqtt(pub, topic, 'zombie'));
    await runFenced({ token: next }, () => publishFencedMqtt(pub, topic, 'new-2'));
    await pollUntil('all four handled', 20_000, () => consumer.counts.applied + consumer.counts.stale === 4);
    expect(errors).toEqual([]);
    expect(await d.applied()).toEqual(['old-1', 'new-1', 'new-2']);
    expect(consumer.counts).toEqual({ applied: 3, duplicate: 0, stale: 1, invalid: 0 });
    expect(verdicts[0]).toMatchObject({ outcome: 'stale', reason: new RegExp(`term 5 < 6 for group ${group}`) });
  });

  it('publishing outside a leadership throws NoTokenError; a v3.1.1 client is refused (no user properties)', async () => {
    const pub = await client();
    await expect(publishFencedMqtt(pub, 'x/y', 'x')).rejects.toThrow(NoTokenError);
    const v3 = await client({ protocolVersion: 4 });
    await expect(publishFencedMqtt(v3, 'x/y', 'x', { token: makeToken('g', 1) })).rejects.toThrow(InvalidArgumentError);
    await expect(publishFencedMqtt(v3, 'x/y', 'x', { token: makeToken('g', 1) })).rejects.toThrow(/need MQTT v5/);
  });

  it('bad user properties (none, garbled, term -1, 2^63, another group, huge, repeated) are refused with a clear reason and never applied', async () => {
    const topic = `${uniqueName('fenced')}/orders`;
    const d = await db();
    const group = uniqueName('orders');
    const { consumer, verdicts } = await consuming(topic, d, group);
    const pub = await client();
    const bad = badTokens(group);
    for (const b of bad) await pub.publishAsync(topic, b.name, { qos: 1, properties: { userProperties: { 'Fencing-Token': b.value, 'Fencing-Seq': '1' } } });
    await pub.publishAsync(topic, 'no properties', { qos: 1 });
    await pub.publishAsync(topic, 'repeated', { qos: 1, properties: { userProperties: { 'Fencing-Token': [`${group}#1`, `${group}#2`], 'Fencing-Seq': '1' } } });
    await publishFencedMqtt(pub, topic, 'good', { token: makeToken(group, 1) });
    const total = bad.length + 3;
    await pollUntil('all handled', 20_000, () => consumer.counts.applied + consumer.counts.invalid === total);
    expect(await d.applied()).toEqual(['good']);
    const reasons = verdicts.map((v: MessageVerdict) => ('reason' in v ? v.reason : ''));
    bad.forEach((b, i) => expect(reasons[i], b.name).toMatch(b.reason));
    expect(reasons.slice(bad.length)).toEqual([expect.stringMatching(/Fencing-Token: missing/), expect.stringMatching(/Fencing-Token: expected text/)]);
  });
});
