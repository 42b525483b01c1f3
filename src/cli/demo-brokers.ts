/**
 * The brokers of `tenure demo --via nats|amqp|mqtt`: their default URLs on this machine, the
 * names one demo run uses on them, and connecting with the installed client (nats, amqplib, mqtt
 * are optional peer dependencies, loaded only here) with a short timeout and one clear line when
 * the broker cannot be reached.
 */
import type { ChannelModel } from 'amqplib';
import type { IClientOptions, MqttClient } from 'mqtt';
import type { ConnectionOptions, NatsConnection } from 'nats';
import { InvalidArgumentError, redactUrl } from '../core/index.js';
import { loadDriver } from '../core/driver.js';

export const BROKER_PATHS = ['nats', 'amqp', 'mqtt'] as const;
export type BrokerVia = (typeof BROKER_PATHS)[number];

/** Where the demo finds each broker unless told (`--broker`, TENURE_DEMO_BROKER). */
export const DEFAULT_BROKER_URLS: Readonly<Record<BrokerVia, string>> = {
  nats: 'nats://127.0.0.1:4222',
  amqp: 'amqp://guest:guest@127.0.0.1:5672',
  mqtt: 'mqtt://127.0.0.1:1883',
};

const SCHEMES: Readonly<Record<BrokerVia, readonly string[]>> = {
  nats: ['nats:', 'tls:'],
  amqp: ['amqp:', 'amqps:'],
  mqtt: ['mqtt:', 'mqtts:', 'ws:', 'wss:'],
};

const NAMES: Readonly<Record<BrokerVia, string>> = { nats: 'NATS', amqp: 'RabbitMQ', mqtt: 'MQTT' };

/** How long connecting to a broker may take before the demo gives up, ms. */
export const BROKER_CONNECT_MS = 3000;

/** The broker URL for `via`: the flag, else TENURE_DEMO_BROKER, else the default; exit 2 when it is not one of `via`'s. */
export function brokerUrl(via: BrokerVia, flag: string | undefined, env: NodeJS.ProcessEnv): string {
  const fromEnv = env.TENURE_DEMO_BROKER && env.TENURE_DEMO_BROKER.trim() !== '' ? env.TENURE_DEMO_BROKER.trim() : undefined;
  const given = flag ?? fromEnv ?? DEFAULT_BROKER_URLS[via];
  const field = flag !== undefined ? '--broker' : fromEnv !== undefined ? 'TENURE_DEMO_BROKER' : '--broker';
  let url: URL;
  try {
    url = new URL(given);
  } catch {
    throw new InvalidArgumentError(field, `expected a ${NAMES[via]} URL such as ${DEFAULT_BROKER_URLS[via].replace(/\/\/[^@]*@/, '//')}, got '${redactUrl(given)}'`);
  }
  if (!SCHEMES[via].includes(url.protocol)) {
    throw new InvalidArgumentError(field, `--via ${via} needs a URL starting ${SCHEMES[via].map((s) => `${s}//`).join(' or ')}, got '${redactUrl(given)}'`);
  }
  return given;
}

/** The names one demo run uses on a broker, from its run id: unique, so runs never mix. */
export function channelNames(id: string): { subject: string; stream: string; queue: string; topic: string } {
  return { subject: `tenure.demo.${id}`, stream: `tenure-demo-${id}`, queue: `tenure-demo-${id}`, topic: `tenure/demo/${id}` };
}

/** One line naming the broker that could not be reached and why. */
export class BrokerUnreachableError extends Error {
  constructor(via: BrokerVia, url: string, cause: unknown) {
    const reason = cause instanceof Error ? cause.message || cause.name : String(cause);
    super(`cannot reach ${NAMES[via]} at ${redactUrl(url)}: ${reason.replace(/\s*\n\s*/g, ' ')} (start it, or point --broker / TENURE_DEMO_BROKER at one)`, { cause });
    this.name = 'BrokerUnreachableError';
  }
}

async function reaching<T>(via: BrokerVia, url: string, connect: () => Promise<T>): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`no answer within ${BROKER_CONNECT_MS} ms`)), BROKER_CONNECT_MS + 500);
  });
  try {
    return await Promise.race([connect(), timeout]);
  } catch (err) {
    if (err instanceof InvalidArgumentError) throw err;
    throw new BrokerUnreachableError(via, url, err);
  } finally {
    clearTimeout(timer);
  }
}

type NatsModule = typeof import('nats');
type AmqpModule = typeof import('amqplib');
type MqttModule = typeof import('mqtt');

export function natsModule(): NatsModule {
  return loadDriver<NatsModule>('nats', 'tenure demo --via nats');
}

/** A NATS connection to `url` (host:port servers; user:password in the URL as the client reads it). */
export function connectNats(url: string, name: string): Promise<NatsConnection> {
  const { connect } = natsModule();
  const options: ConnectionOptions = { servers: url, name, timeout: BROKER_CONNECT_MS, reconnect: false };
  return reaching('nats', url, () => connect(options));
}

export function connectAmqp(url: string): Promise<ChannelModel> {
  const amqp = loadDriver<AmqpModule>('amqplib', 'tenure demo --via amqp');
  return reaching('amqp', url, () => amqp.connect(url, { timeout: BROKER_CONNECT_MS }));
}

/** An MQTT v5 client (user properties need v5), no automatic reconnect: a lost broker is an error, not a wait. */
export function connectMqtt(url: string, clientId: string, extra: IClientOptions = {}): Promise<MqttClient> {
  const mqtt = loadDriver<MqttModule>('mqtt', 'tenure demo --via mqtt');
  return reaching('mqtt', url, () => mqtt.connectAsync(url, { protocolVersion: 5, clientId, connectTimeout: BROKER_CONNECT_MS, reconnectPeriod: 0, ...extra }));
}
