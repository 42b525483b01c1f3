/**
 * A consumer killed between its apply and its acknowledgement, on each real broker (NATS
 * JetStream, RabbitMQ, Mosquitto with MQTT v5): a consumer process applies message 2 (its
 * transaction commits) and is SIGKILLed before acknowledging it. The broker redelivers message 2 to
 * the next consumer, which finds it in the ledger (committed in the same transaction as the apply)
 * and acknowledges it without applying it again. Every message is applied exactly once.
 */
import amqp from 'amqplib';
import mqtt from 'mqtt';
import { connect } from 'nats';
import { afterEach, describe, expect, it } from 'vitest';
import { makeToken } from '../../src/core/index.js';
import { publishFencedAmqp, publishFencedJetStream, publishFencedMqtt } from '../../src/fencing/index.js';
import { FixtureProcess, killAll, pollUntil } from '../fixtures/harness.js';
import { appliedDb, uniqueName } from '../fencing/message-fixtures.js';
import type { AppliedDb } from '../fencing/message-fixtures.js';

const WAIT_MS = 30_000;
const procs: FixtureProcess[] = [];
const cleanups: (() => Promise<unknown>)[] = [];

afterEach(async () => {
  await killAll(procs.splice(0));
  for (const c of cleanups.splice(0).reverse()) await c().catch(() => undefined);
});

function consumer(broker: string, d: AppliedDb, group: string, name: string, hangAfter?: number): FixtureProcess {
  const p = new FixtureProcess(`${broker}-consumer`, 'fenced-consumer', [broker, d.db.url, group, name, ...(hangAfter ? ['--hang-after', String(hangAfter)] : [])]);
  procs.push(p);
  return p;
}

interface Broker {
  /** Make the broker's names (the consumer fixture's NAME) and their cleanup. */
  setup(name: string): Promise<void>;
  publish(name: string, group: string, payloads: string[]): Promise<void>;
}

const brokers: Record<string, Broker> = {
  nats: {
    async setup(name) {
      const nc = await connect({ servers: '127.0.0.1:4222' });
      const jsm = await nc.jetstreamManager();
      await jsm.streams.add({ name, subjects: [`${name}.>`] });
      cleanups.push(async () => {
        await jsm.streams.delete(name);
        await nc.close();
      });
    },
    async publish(name, group, payloads) {
      const nc = await connect({ servers: '127.0.0.1:4222' });
      const js = nc.jetstream();
      for (const p of payloads) await publishFencedJetStream(js, `${name}.orders`, p, { token: makeToken(group, 1) });
      await nc.close();
    },
  },
  amqp: {
    async setup(name) {
      const conn = await amqp.connect('amqp://guest:guest@127.0.0.1:5672');
      const ch = await conn.createChannel();
      await ch.assertQueue(name, { durable: false });
      cleanups.push(async () => {
        await ch.deleteQueue(name);
        await conn.close();
      });
    },
    async publish(name, group, payloads) {
      const conn = await amqp.connect('amqp://guest:guest@127.0.0.1:5672');
      const ch = await conn.createConfirmChannel();
      for (const p of payloads) publishFencedAmqp(ch, '', name, Buffer.from(p), { token: makeToken(group, 1) });
      await ch.waitForConfirms();
      await conn.close();
    },
  },
  mqtt: {
    async setup(name) {
      // The consumer's persistent session is removed after the test (a clean start with its id).
      cleanups.push(async () => {
        const c = await mqtt.connectAsync('mqtt://127.0.0.1:1883', { protocolVersion: 5, clientId: `${name}-projector`, clean: true });
        await c.endAsync();
      });
    },
    async publish(name, group, payloads) {
      const c = await mqtt.connectAsync('mqtt://127.0.0.1:1883', { protocolVersion: 5 });
      for (const p of payloads) await publishFencedMqtt(c, `${name}/orders`, p, { token: makeToken(group, 1) });
      await c.endAsync();
    },
  },
};

describe.each(Object.keys(brokers))('consumer crash between apply and ack on %s', (brokerName) => {
  it('the redelivered message is acknowledged without a second apply; every message applied once', { timeout: 90_000 }, async () => {
    const broker = brokers[brokerName]!;
    const d = await appliedDb();
    cleanups.push(() => d.close());
    const name = uniqueName('crash');
    const group = uniqueName('orders');
    await broker.setup(name);

    const first = consumer(brokerName, d, group, name, 2);
    await first.waitFor('ready', WAIT_MS);
    await broker.publish(name, group, ['m1', 'm2', 'm3']);
    await first.waitFor('hang', WAIT_MS);
    // Message 2 is committed (applied and recorded) and not acknowledged: kill -9 now.
    expect(await d.applied()).toEqual(['m1', 'm2']);
    const exit = await first.kill();
    expect(exit.signal).toBe('SIGKILL');

    const second = consumer(brokerName, d, group, name);
    await second.waitFor('ready', WAIT_MS);
    await second.waitFor('verdict', WAIT_MS, (e) => e.payload === 'm3');
    const verdicts = second.all('verdict').map((e) => [e.payload, e.outcome]);
    expect(verdicts).toContainEqual(['m2', 'duplicate']);
    expect(verdicts).toContainEqual(['m3', 'applied']);
    expect(verdicts.filter(([, outcome]) => outcome === 'applied')).toEqual([['m3', 'applied']]);
    // A while longer: nothing else arrives, nothing is applied twice.
    await new Promise((r) => setTimeout(r, 2500));
    expect(await d.applied()).toEqual(['m1', 'm2', 'm3']);
    await pollUntil('no error', 100, () => second.all('error').length === 0);
  });
});
