/**
 * A Sentinel client that ioredis ends by itself in the middle of a failover, and the store that
 * brings it back (reconnectWhenEndedMidConnect in src/stores/redis/driver.ts).
 *
 * With `failoverDetector`, ioredis stops a connect attempt when a sentinel announces
 * `+switch-master` while the client is still asking a sentinel where the master is, and then ends
 * the client for good: every later command fails with "Connection is closed." (this project's CI
 * hit it once in redis-sentinel.test.ts after the master was killed). Here the race is made
 * certain instead of lucky: the sentinel the client asks is paused, the client is cut off from the
 * master so that it reconnects and waits on that sentinel, a forced failover on another sentinel
 * sends the notice, and only then is the paused sentinel resumed.
 */
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { StoreUnavailableError } from '../../src/core/index.js';
import { ownClientOptions } from '../../src/stores/redis/driver.js';
import { RedisStore } from '../../src/stores/redis/index.js';
import { startSentinel, untilRecovered, waitUntil } from './redis-topologies.js';
import type { PrivateSentinel } from './redis-topologies.js';

let setup: PrivateSentinel;
const clients: Redis[] = [];
const stores: RedisStore[] = [];

beforeAll(async () => {
  setup = await startSentinel({ count: 3, quorum: 2 });
});

afterAll(async () => {
  for (const s of setup?.sentinels ?? []) s.resume();
  for (const s of stores) await s.close();
  for (const c of clients) c.disconnect();
  await setup?.stop();
});

/** The port of the master as one given sentinel reports it (the others may be paused). */
async function masterSeenBy(sentinel: number): Promise<number> {
  const addr = (await setup.sentinels[sentinel]!.admin((c) => c.call('SENTINEL', 'GET-MASTER-ADDR-BY-NAME', setup.name))) as string[];
  return Number(addr[1]);
}

describe('Redis store on a Sentinel client that ioredis ends during a failover', () => {
  it('reconnects the client and recovers; a client its owner closes stays closed', async () => {
    const client = new Redis({ ...ownClientOptions, sentinels: setup.sentinelNodes, name: setup.name, failoverDetector: true });
    client.on('error', () => {});
    clients.push(client);
    let ends = 0;
    client.on('end', () => ends++);
    const store = new RedisStore({ client, keyPrefix: '{revive}:', commandTimeoutMs: 1000 });
    stores.push(store);

    expect(await store.acquire('g', 'a', 60_000)).toMatchObject({ acquired: true, lease: { owner: 'a', term: 1 } });
    expect(await client.wait(1, 5000)).toBe(1);
    expect(client.stream?.remotePort).toBe(setup.servers[0]!.port);
    // The failover detector listens on every sentinel; sentinel 1 is the one that will announce.
    await waitUntil('the failover detector listens on sentinel 1', async () =>
      /cmd=subscribe|sub=1/.test(String(await setup.sentinels[1]!.admin((c) => c.call('CLIENT', 'LIST')))),
    );
    const notices = new Redis({ port: setup.sentinels[1]!.port, host: '127.0.0.1', maxRetriesPerRequest: 0 });
    notices.on('error', () => {});
    clients.push(notices);
    let switched = false;
    notices.on('message', () => (switched = true));
    await notices.subscribe('+switch-master');

    // The client asked sentinel 0 last, so it asks it first again: pause it, then cut the client
    // off from the master. Its reconnect now waits on sentinel 0's answer.
    setup.sentinels[0]!.pause();
    await setup.servers[0]!.admin((c) => c.call('CLIENT', 'KILL', 'TYPE', 'normal'));
    await waitUntil('the client reconnects and waits on the paused sentinel', async () => client.status === 'connecting');

    await setup.sentinels[1]!.admin((c) => c.call('SENTINEL', 'FAILOVER', setup.name));
    await waitUntil('sentinel 1 announced the replica as the new master', async () => switched && (await masterSeenBy(1)) === setup.servers[1]!.port, 30_000);
    setup.sentinels[0]!.resume();

    // ioredis ends the client (the race this test is about); the store connects it again.
    await waitUntil('ioredis ended the client', async () => ends > 0, 10_000);
    const { value: lease } = await untilRecovered(() => store.read('g'));
    expect(lease).toMatchObject({ owner: 'a', term: 1 });
    expect(client.status).toBe('ready');
    expect(client.stream?.remotePort).toBe(setup.servers[1]!.port);
    expect(await store.release('g', 'a', 1)).toBe(true);
    expect(await store.acquire('g', 'b', 60_000)).toMatchObject({ acquired: true, lease: { owner: 'b', term: 2 } });

    // Its owner's disconnect() is final: the store does not bring the client back.
    client.disconnect();
    await waitUntil('the client ended', async () => client.status === 'end');
    await new Promise((r) => setTimeout(r, 2500));
    expect(client.status).toBe('end');
    await expect(store.read('g')).rejects.toBeInstanceOf(StoreUnavailableError);
  });
});
