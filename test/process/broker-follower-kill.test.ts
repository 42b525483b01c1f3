/**
 * Model C exactly-once across kill -9: a follower process (test/fixtures/broker-follower.ts)
 * consumes three partitions from the real broker (NATS JetStream, RabbitMQ streams) into a SQLite
 * projection while the leader (this process) keeps publishing. The follower is SIGKILLed again
 * and again: in the middle of a batch's apply, after the apply and before the commit that moves
 * the partition's mark, and at random instants (an acknowledgement in flight among them); each
 * time a new process resumes. At the end each partition holds every decision published to it
 * exactly once, in publish order.
 */
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { partitionOf } from '../../src/replication/index.js';
import { BROKER_KINDS, openBrokerRig } from '../fixtures/broker-rig.js';
import { FixtureProcess, delay, killAll } from '../fixtures/harness.js';
import { openTestSqlite } from '../fixtures/sqlite-compat.js';

const PARTITIONS = ['p0', 'p1', 'p2'];
const TOTAL = 600;
const KILLS = 9;
const WAIT_MS = 30_000;

const procs: FixtureProcess[] = [];
const cleanups: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  await killAll(procs.splice(0));
  for (const c of cleanups.splice(0).reverse()) await c();
});

describe.each(BROKER_KINDS)('a Model C follower killed with SIGKILL on %s', (kind) => {
  it('resumes without a duplicate or a gap in any partition, whether killed mid-apply, before the commit, or at random', { timeout: 240_000 }, async () => {
    const name = `tenure_ckill_${randomBytes(5).toString('hex')}`;
    const rig = await openBrokerRig(kind, name, PARTITIONS);
    cleanups.push(() => rig.destroy());
    const dir = mkdtempSync(join(tmpdir(), 'tenure-broker-kill-'));
    cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
    const projection = join(dir, 'projection.db');

    const published: Record<string, string[]> = { p0: [], p1: [], p2: [] };
    let sent = 0;
    const publish = async (n: number): Promise<void> => {
      for (let i = 0; i < n && sent < TOTAL; i++) {
        const key = `order-${sent % 41}`;
        const part = partitionOf(key, PARTITIONS);
        const payload = JSON.stringify({ key, n: sent });
        await rig.publisher.publish(part, payload, { token: { lease: 'orders', term: 7 } });
        published[part]!.push(payload);
        sent++;
      }
    };
    await publish(TOTAL / 2);
    const writer = (async () => {
      while (sent < TOTAL) {
        await publish(5);
        await delay(10);
      }
    })();

    const spawn = (): FixtureProcess => {
      const p = new FixtureProcess(`broker-follower-${procs.length}`, 'broker-follower', [kind, name, PARTITIONS.join(','), projection, '--hold-ms', '30', '--batch', '20']);
      procs.push(p);
      return p;
    };
    const modes = ['in-apply', 'batch-applied', 'random'] as const;
    const landed: Record<string, number> = { 'in-apply': 0, 'batch-applied': 0, random: 0 };
    for (let k = 0; k < KILLS; k++) {
      const mode = modes[k % modes.length]!;
      const p = spawn();
      await p.waitFor('ready', WAIT_MS);
      if (mode === 'random') await delay(20 + Math.floor(Math.random() * 200));
      else await p.waitFor(mode, WAIT_MS);
      p.child.kill('SIGKILL');
      expect((await p.exited).signal).toBe('SIGKILL');
      landed[mode] = (landed[mode] ?? 0) + 1;
      expect(p.all('failed')).toEqual([]);
    }
    await writer;
    const last = spawn();
    const count = (): number => {
      const db = openTestSqlite(projection, { readonly: true });
      try {
        return (db.prepare('SELECT count(*) AS n FROM applied').get() as { n: number }).n;
      } finally {
        db.close();
      }
    };
    const until = Date.now() + WAIT_MS * 2;
    while (count() < TOTAL && Date.now() < until && last.all('failed').length === 0) await delay(50);
    // A follower that stopped, or never caught up, says why (its 'failed' and 'retry' reports).
    expect(last.all('failed')).toEqual([]);
    // Where it stood: ready or not, its subscriptions, the last batches its source handed over, stderr.
    const progress = (ev: string): unknown[] => last.all(ev).map(({ t: _t, ev: _ev, ...rest }) => rest);
    const where = JSON.stringify({ ready: last.all('ready').length > 0, retries: last.all('retry').slice(-5), subscribing: progress('subscribing'), subscribed: progress('subscribed'), took: progress('took').slice(-6), committed: progress('committed').slice(-3), stderr: last.stderr.slice(-1000) });
    expect(count(), `the last follower applied all ${TOTAL}; it stood at ${where}`).toBe(TOTAL);
    last.child.kill('SIGTERM');
    expect((await last.exited).code).toBe(0);

    const db = openTestSqlite(projection, { readonly: true });
    const rows = db.prepare('SELECT partition, payload FROM applied ORDER BY rowid').all() as { partition: string; payload: string }[];
    db.close();
    expect(rows.length).toBe(TOTAL);
    for (const part of PARTITIONS) expect(rows.filter((r) => r.partition === part).map((r) => r.payload)).toEqual(published[part]);
    expect(landed).toEqual({ 'in-apply': 3, 'batch-applied': 3, random: 3 });
  });
});
