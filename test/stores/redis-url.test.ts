/**
 * The database of a `redis://host:port/N` URL: a number, and one the server has. A server
 * without it refuses every call as bad input instead of the store writing to database 0.
 */
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { InvalidArgumentError } from '../../src/core/index.js';
import { openStore, parseStoreUrl } from '../../src/open.js';
import { RedisServer } from './redis-servers.js';

describe('redis store URL: the database number', () => {
  let server: RedisServer;
  let admin: Redis;
  beforeAll(async () => {
    server = await RedisServer.start();
    admin = new Redis(server.url);
  });
  afterAll(async () => {
    admin.disconnect();
    await server.kill();
  });

  const sizes = async (): Promise<number[]> => {
    const out: number[] = [];
    for (const db of [0, 3]) {
      await admin.select(db);
      out.push(await admin.dbsize());
    }
    await admin.select(0);
    return out;
  };

  it('refuses a database the server does not have, for every call, writing nothing anywhere', async () => {
    const store = await openStore(`${server.url}/99`);
    try {
      const err = await store.acquire('g', 'a~1', 5000).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(InvalidArgumentError);
      expect((err as Error).message).toMatch(new RegExp(`^store: redis store ${server.address}: database 99 does not exist on this server`));
      await expect(store.appendFenced({ lease: 'g', term: 1 }, 's', 'x')).rejects.toBeInstanceOf(InvalidArgumentError);
      await expect(store.list()).rejects.toBeInstanceOf(InvalidArgumentError);
      expect(await sizes()).toEqual([0, 0]);
    } finally {
      await store.close();
    }
  });

  it('writes to the database the URL names', async () => {
    const store = await openStore(`${server.url}/3`);
    try {
      expect((await store.acquire('g', 'a~1', 5000)).acquired).toBe(true);
      const [db0, db3] = await sizes();
      expect(db0).toBe(0);
      expect(db3).toBeGreaterThan(0);
    } finally {
      await store.close();
    }
  });

  it('refuses a database that is not a number when the URL is parsed', () => {
    for (const url of ['redis://127.0.0.1:6379/abc', 'redis://127.0.0.1:6379/-1', 'redis://127.0.0.1:6379/1/2']) {
      expect(() => parseStoreUrl(url), url).toThrow(InvalidArgumentError);
    }
    expect(parseStoreUrl('redis://127.0.0.1:6379/7')).toMatchObject({ kind: 'redis' });
    expect(parseStoreUrl('redis://127.0.0.1:6379/')).toMatchObject({ kind: 'redis' });
  });
});
