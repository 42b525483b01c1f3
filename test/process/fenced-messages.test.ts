/**
 * Fenced messages with real processes on each real broker (NATS JetStream, RabbitMQ, Mosquitto
 * with MQTT v5), the consumer's ledger on PostgreSQL.
 *
 * The zombie: a leader process publishing with its token is frozen with SIGSTOP past its TTL;
 * another process takes over and publishes with the next term; the old leader is resumed with
 * SIGCONT and publishes with its old token (a publish already on its way). The consumer process
 * drops that message as stale, and never applies a lower term's message after a higher one.
 *
 * The crash: a consumer killed between its apply and its acknowledgement, on each real broker (NATS
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

function publisher(d: AppliedDb, group: string, id: string, broker: string, name: string): FixtureProcess {
  const p = new FixtureProcess(id, 'fenced-publisher', [d.db.url, group, id, String(TTL_MS), broker, name, '--every-ms', '100']);
  procs.push(p);
  return p;
}

const TTL_MS = 1500;

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

describe.each(Object.keys(brokers))('a leader frozen past its TTL publishes after the takeover, on %s', (brokerName) => {
  it("its late message is dropped as stale, and no lower term's message is applied after a higher one", { timeout: 120_000 }, async () => {
    const broker = brokers[brokerName]!;
    const d = await appliedDb();
    cleanups.push(() => d.close());
    const name = uniqueName('zombie');
    const group = uniqueName('orders');
    await broker.setup(name);
    const sink = consumer(brokerName, d, group, name);
    await sink.waitFor('ready', WAIT_MS);

    const a = publisher(d, group, 'a', brokerName, name);
    const elected = await a.waitFor('elected', WAIT_MS);
    const oldTerm = elected.term as number;
    const b = publisher(d, group, 'b', brokerName, name);
    await b.waitFor('ready', WAIT_MS);
    await a.waitFor('published', WAIT_MS, (e) => (e.n as number) >= 3);
    await sink.waitFor('verdict', WAIT_MS, (e) => typeof e.payload === 'string' && e.payload.startsWith('a:'));

    a.signal('SIGSTOP');
    const takeover = await b.waitFor('elected', WAIT_MS);
    expect(takeover.term as number).toBeGreaterThan(oldTerm);
    await b.waitFor('published', WAIT_MS, (e) => (e.n as number) >= 3);
    await sink.waitFor('verdict', WAIT_MS, (e) => e.outcome === 'applied' && typeof e.payload === 'string' && e.payload.startsWith('b:'));

    a.signal('SIGCONT');
    const probe = await a.waitFor('probe', WAIT_MS);
    expect(probe.outcome).toBe('published');
    const dropped = await sink.waitFor('verdict', WAIT_MS, (e) => e.payload === `probe:a:${oldTerm}`);
    expect(dropped.outcome).toBe('stale');
    expect(dropped.reason).toMatch(new RegExp(`term ${oldTerm} < ${takeover.term as number}`));
    // Let anything else the old leader had in flight arrive, then read what was applied.
    await new Promise((r) => setTimeout(r, 1000));
    const rows = (await d.pool.query<{ payload: string; term: string }>('SELECT payload, term FROM applied ORDER BY id')).rows;
    const terms = rows.map((r) => Number(r.term));
    expect(terms.length).toBeGreaterThan(3);
    terms.forEach((t, i) => expect(t, `row ${i} (${rows[i]!.payload}) after term ${terms[i - 1]}`).toBeGreaterThanOrEqual(terms[i - 1] ?? 0));
    expect(rows.map((r) => r.payload)).not.toContain(`probe:a:${oldTerm}`);
    expect(terms).toContain(takeover.term as number);
  });
});
