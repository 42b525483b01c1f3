/**
 * etcd stream push beyond the contract: a watch on a stream goes on telling heads after its etcd
 * member was killed and restarted (the watch starts over and reads the head first).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { EtcdStore } from '../../src/stores/etcd/index.js';
import { startEtcd, sleep } from './etcd-harness.js';
import type { EtcdCluster } from './etcd-harness.js';

describe('etcd store: watchStream', () => {
  let cluster: EtcdCluster;
  beforeAll(async () => {
    cluster = await startEtcd(1);
  });
  afterAll(async () => {
    await cluster?.stop();
  });

  it('tells the heads written after its member was killed and restarted', { timeout: 60_000 }, async () => {
    const watcher = new EtcdStore({ hosts: cluster.hosts, requestTimeoutMs: 1000 });
    const writer = new EtcdStore({ hosts: cluster.hosts, requestTimeoutMs: 1000 });
    try {
      const { lease } = await writer.acquire('g', 'a~1', 60_000);
      const heads: number[] = [];
      const stop = watcher.watchStream('s', (h) => heads.push(h));
      const until = async (n: number): Promise<void> => {
        const t0 = Date.now();
        while (!heads.includes(n) && Date.now() - t0 < 20_000) await sleep(10);
      };
      await sleep(200);
      await writer.appendFenced({ lease: 'g', term: lease.term }, 's', 'one');
      await until(1);
      expect(heads).toContain(1);
      const member = cluster.members[0]!;
      await cluster.kill(member);
      await cluster.restart(member);
      // The writer's own calls may fail while the client reconnects: try until one lands.
      for (let i = 0; i < 100; i++) {
        try {
          await writer.appendFenced({ lease: 'g', term: lease.term }, 's', 'two');
          break;
        } catch {
          await sleep(100);
        }
      }
      await until(2);
      expect(heads).toContain(2);
      for (let i = 1; i < heads.length; i++) expect(heads[i]!).toBeGreaterThanOrEqual(heads[i - 1]!);
      stop();
    } finally {
      await watcher.close();
      await writer.close();
    }
  });
});
