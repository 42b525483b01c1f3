/**
 * Model C on the real brokers (NATS JetStream, RabbitMQ streams): the leader publishes decisions
 * with its token in the metadata; a BrokerFollower applies them, partition by partition, to a
 * SQLite projection with each partition's mark in the same transaction. Each test has its own
 * stream or queues.
 */
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type Database from 'better-sqlite3';
import { afterEach, describe, expect, it } from 'vitest';
import { ApplyError, Follower, StaleTermError, openStore, sqliteSink } from '../../src/index.js';
import type { FencingToken } from '../../src/index.js';
import { BrokerFollower, InvalidMessageError, OffsetMismatchError, openTerm, partitionOf } from '../../src/replication/index.js';
import type { BrokerDecision, BrokerSource, PartitionSink } from '../../src/replication/index.js';
import mysql from 'mysql2/promise';
import pg from 'pg';
import { mysqlSink, postgresSink } from '../../src/replication/index.js';
import { BROKER_KINDS, NATS_URL, openBrokerRig } from '../fixtures/broker-rig.js';
import { connect } from 'nats';
import { createMysqlDatabase, createPostgresDatabase } from '../stores/sql-servers.js';
import type { BrokerRig } from '../fixtures/broker-rig.js';
import { pollUntil } from '../fixtures/harness.js';
import { openTestSqlite } from '../fixtures/sqlite-compat.js';

const PARTITIONS = ['p0', 'p1', 'p2'] as const;
const GROUP = 'orders';

const cleanups: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

function tempDir(): string {
  const dir = mkdtempSync(join(tmpdir(), 'tenure-broker-'));
  cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

async function rig(kind: 'nats' | 'amqp'): Promise<BrokerRig> {
  const r = await openBrokerRig(kind, `tenure_c_${randomBytes(5).toString('hex')}`, PARTITIONS);
  cleanups.push(() => r.destroy());
  return r;
}

/** A SQLite projection: a key/value table (the state) and a log of what was applied, in order. */
interface Projection {
  readonly db: Database.Database;
  readonly sink: PartitionSink<Database.Database>;
  apply(d: { readonly partition?: string; readonly offset?: number; readonly payload: string }, tx: Database.Database): void;
  state(): Record<string, string>;
  applied(): { partition: string; offset: number; payload: string }[];
}

function projection(path = join(tempDir(), 'projection.db')): Projection {
  const db = openTestSqlite(path);
  cleanups.push(() => {
    db.close();
  });
  db.pragma('journal_mode = WAL');
  db.exec('CREATE TABLE IF NOT EXISTS kv (key TEXT PRIMARY KEY, value TEXT NOT NULL)');
  db.exec('CREATE TABLE IF NOT EXISTS applied (partition TEXT NOT NULL, offset INTEGER NOT NULL, payload TEXT NOT NULL)');
  return {
    db,
    sink: sqliteSink(db),
    apply: (d, tx) => {
      const { key, value } = JSON.parse(d.payload) as { key: string; value: string };
      tx.prepare('INSERT INTO kv (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value').run(key, value);
      tx.prepare('INSERT INTO applied (partition, offset, payload) VALUES (?, ?, ?)').run(d.partition ?? '', d.offset ?? 0, d.payload);
    },
    state: () => Object.fromEntries((db.prepare('SELECT key, value FROM kv ORDER BY key').all() as { key: string; value: string }[]).map((r) => [r.key, r.value])),
    applied: () => db.prepare('SELECT partition, offset, payload FROM applied ORDER BY rowid').all() as { partition: string; offset: number; payload: string }[],
  };
}

function follower(source: BrokerSource, p: Projection, extra: Partial<{ batchSize: number; apply: (d: BrokerDecision, tx: Database.Database) => void }> = {}): BrokerFollower<Database.Database> {
  return new BrokerFollower({
    source,
    group: GROUP,
    partitions: PARTITIONS,
    sink: p.sink,
    apply: extra.apply ?? ((d, tx) => p.apply(d, tx)),
    batchSize: extra.batchSize ?? 20,
    retryMs: 20,
  });
}

const token = (term: number): FencingToken => ({ lease: GROUP, term });
const decision = (key: string, value: string): string => JSON.stringify({ key, value });

/** Run `f` until `done()` holds; fail with what stopped it if it stops first. */
async function runUntil(f: BrokerFollower<Database.Database>, what: string, done: () => boolean): Promise<void> {
  const running = f.start();
  let failure: unknown = null;
  running.catch((err: unknown) => (failure = err));
  await pollUntil(what, 20_000, () => {
    if (failure) throw failure as Error;
    return done();
  });
}

describe.each(BROKER_KINDS)('Model C on %s', (kind) => {
  it('applies each partition in publish order, exactly once, and resumes from the saved marks', async () => {
    const r = await rig(kind);
    const p = projection();
    const published: Record<string, string[]> = { p0: [], p1: [], p2: [] };
    for (let i = 0; i < 150; i++) {
      const key = `k${i % 17}`;
      const part = partitionOf(key, PARTITIONS);
      const payload = decision(key, `v${i}`);
      published[part]!.push(payload);
      await r.publisher.publish(part, payload, { token: token(1) });
    }
    // An empty payload is the term marker's: a decision never has one.
    await expect(r.publisher.publish('p0', '', { token: token(1) })).rejects.toThrow(expect.objectContaining({ code: 'INVALID_ARGUMENT', field: 'payload' }));
    const f = follower(r.source(16), p);
    await runUntil(f, 'all 150 applied', () => p.applied().length === 150);
    await f.stop();
    const rows = p.applied();
    for (const part of PARTITIONS) {
      const mine = rows.filter((x) => x.partition === part);
      expect(mine.map((x) => x.payload)).toEqual(published[part]);
      for (let i = 1; i < mine.length; i++) expect(mine[i]!.offset).toBeGreaterThan(mine[i - 1]!.offset);
    }
    // Every key's last value is its last publish.
    expect(p.state()).toEqual(Object.fromEntries(Array.from({ length: 17 }, (_, k) => [`k${k}`, `v${150 - 17 + ((k - (150 % 17) + 17) % 17)}`])));
    expect(f.counts).toMatchObject({ applied: 150, dropped: 0 });

    // A second run on the same projection resumes after the marks: nothing again, the new ones once.
    for (let i = 150; i < 180; i++) await r.publisher.publish(partitionOf(`k${i % 17}`, PARTITIONS), decision(`k${i % 17}`, `v${i}`), { token: token(1) });
    const g = follower(r.source(16), p);
    await runUntil(g, 'the 30 new ones applied', () => p.applied().length === 180);
    await g.stop();
    expect(g.counts.applied).toBe(30);
    expect(g.counts.duplicate).toBe(0);
  });

  it("drops a deposed leader's late publishes, counts them durably with the offset, and converges with Model B", async () => {
    const r = await rig(kind);
    const dir = tempDir();
    const store = await openStore(`sqlite:${join(dir, 'log.db')}`);
    cleanups.push(() => store.close());
    const first = await store.acquire(GROUP, 'leader-1', 600_000);
    const t1 = token(first.lease!.term);
    const modelB = projection(join(dir, 'b.db'));
    const modelC = projection(join(dir, 'c.db'));

    // The same decisions through both models: the log (Model B) and the broker (Model C).
    const both = async (t: FencingToken, key: string, value: string): Promise<'ok' | 'refused'> => {
      const payload = decision(key, value);
      await r.publisher.publish(partitionOf(key, PARTITIONS), payload, { token: t });
      try {
        await store.appendFenced(t, 'orders-log', payload);
        return 'ok';
      } catch (err) {
        expect(err).toBeInstanceOf(StaleTermError);
        return 'refused';
      }
    };
    for (let i = 0; i < 40; i++) expect(await both(t1, `k${i % 7}`, `a${i}`)).toBe('ok');
    // Leader 1 is replaced: leader 2 takes the lease, marks every partition with its term, decides.
    await store.release(GROUP, 'leader-1', t1.term);
    const second = await store.acquire(GROUP, 'leader-2', 600_000);
    const t2 = token(second.lease!.term);
    expect(t2.term).toBeGreaterThan(t1.term);
    await openTerm(r.publisher, PARTITIONS, { token: t2 });
    for (let i = 0; i < 30; i++) expect(await both(t2, `k${i % 7}`, `b${i}`)).toBe('ok');
    // Leader 1, a zombie, still publishes: the log refuses it, the broker takes it, the follower drops it.
    for (let i = 0; i < 9; i++) expect(await both(t1, `k${i % 7}`, `zombie${i}`)).toBe('refused');
    for (let i = 30; i < 40; i++) expect(await both(t2, `k${i % 7}`, `b${i}`)).toBe('ok');

    const b = new Follower({ store, stream: 'orders-log', sink: sqliteSink(modelB.db), apply: (e, tx) => modelB.apply(e, tx) });
    const c = follower(r.source(), modelC);
    const drops: number[] = [];
    c.on('dropped', (d) => drops.push(d.term));
    void b.start();
    await pollUntil('Model B applied 80', 20_000, () => modelB.applied().length === 80);
    await runUntil(c, 'Model C applied 80 and dropped 9', () => c.counts.applied === 80 && c.counts.dropped === 9);
    await b.stop();
    await c.stop();

    expect(modelC.state()).toEqual(modelB.state());
    expect(modelC.applied().map((x) => x.payload).sort()).toEqual(modelB.applied().map((x) => x.payload).sort());
    expect(modelC.applied().some((x) => x.payload.includes('zombie'))).toBe(false);
    expect(drops).toEqual(Array(9).fill(t1.term));
    expect(c.counts.markers).toBe(3);
    // The drops are in the marks, committed with the offsets: a restart reads them back.
    let dropped = 0;
    for (const part of PARTITIONS) {
      const mark = await modelC.sink.loadMark(`${r.source().name}/${part}`);
      expect(mark.term).toBe(t2.term);
      dropped += mark.dropped;
    }
    expect(dropped).toBe(9);
  });

  it('a redelivery of messages already applied is acknowledged, not applied twice', async () => {
    const r = await rig(kind);
    const p = projection();
    for (let i = 0; i < 60; i++) await r.publisher.publish(PARTITIONS[i % 3]!, decision(`k${i}`, `v${i}`), { token: token(3) });
    const f = follower(r.source(8), p);
    await runUntil(f, 'all 60 applied', () => p.applied().length === 60);
    await f.stop();
    // The broker hands the partitions over again from well before the marks (as after a crash
    // between the commit and the acknowledgements): every message comes a second time.
    const base = r.source(8);
    const rewoundOnce = new Set<string>();
    const rewound: BrokerSource = {
      name: base.name,
      subscribe: (partition, after) => {
        if (rewoundOnce.has(partition)) return base.subscribe(partition, after);
        rewoundOnce.add(partition);
        return base.subscribe(partition, 0);
      },
    };
    for (let i = 60; i < 66; i++) await r.publisher.publish(PARTITIONS[i % 3]!, decision(`k${i}`, `v${i}`), { token: token(3) });
    const g = follower(rewound, p);
    const retries: string[] = [];
    g.on('retry', (x) => retries.push(x.error.message));
    await runUntil(g, 'the 6 new ones applied', () => p.applied().length === 66);
    await g.stop();
    expect(retries).toEqual([]);
    expect(g.counts).toMatchObject({ applied: 6, duplicate: 60, dropped: 0 });
    expect(new Set(p.applied().map((x) => x.payload)).size).toBe(66);
  });

  it('stops on a message without a token or with a garbled one, applying what came before and never skipping it', async () => {
    const r = await rig(kind);
    const p = projection();
    for (let i = 0; i < 5; i++) await r.publisher.publish('p1', decision(`k${i}`, `v${i}`), { token: token(2) });
    await r.publishRaw('p1', decision('evil', 'no token'), {});
    await r.publisher.publish('p1', decision('after', 'x'), { token: token(2) });
    const f = follower(r.source(), p);
    const err = await f.start().then(
      () => null,
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(InvalidMessageError);
    expect((err as InvalidMessageError).partition).toBe('p1');
    expect((err as InvalidMessageError).message).toMatch(/Fencing-Token: missing/);
    expect(p.applied().map((x) => x.payload)).toEqual([0, 1, 2, 3, 4].map((i) => decision(`k${i}`, `v${i}`)));
    const stoppedAt = (err as InvalidMessageError).offset;
    // The mark is at the last message before it: committed, and not past it.
    expect((await p.sink.loadMark(`${r.source().name}/p1`)).offset).toBe(p.applied()[4]!.offset);
    expect(stoppedAt).toBeGreaterThan(p.applied()[4]!.offset);
    // A second run meets it again: it is not skipped.
    const again = await follower(r.source(), p)
      .start()
      .then(
        () => null,
        (e: unknown) => e,
      );
    expect(again).toBeInstanceOf(InvalidMessageError);
    expect((again as InvalidMessageError).offset).toBe(stoppedAt);
    expect(p.applied()).toHaveLength(5);

    // Garbage in the header of another partition: the same, with the parser's reason.
    await r.publishRaw('p2', decision('evil', 'garbled'), { 'Fencing-Token': 'orders#-1' });
    const q = new BrokerFollower({ source: r.source(), group: GROUP, partitions: ['p2'], sink: p.sink, apply: (d, tx) => p.apply(d, tx), name: 'second' });
    const garbled = await q.start().then(
      () => null,
      (e: unknown) => e,
    );
    expect(garbled).toBeInstanceOf(InvalidMessageError);
    expect((garbled as InvalidMessageError).message).toMatch(/Fencing-Token: the term must be digits only/);

    // A valid token on a payload that is not UTF-8 text: refused the same way, not decoded into U+FFFD.
    await r.publishRaw('p0', Buffer.from([0x7b, 0xff, 0xfe, 0x7d]), { 'Fencing-Token': `${GROUP}#2` });
    const q0 = new BrokerFollower({ source: r.source(), group: GROUP, partitions: ['p0'], sink: p.sink, apply: (d, tx) => p.apply(d, tx), name: 'third' });
    const binary = await q0.start().then(
      () => null,
      (e: unknown) => e,
    );
    expect(binary).toBeInstanceOf(InvalidMessageError);
    expect((binary as InvalidMessageError).reason).toBe('its payload is not UTF-8 text');
  });

  it('stops on a decision whose apply throws: its batch rolled back, the next run starts with it', async () => {
    const r = await rig(kind);
    const p = projection();
    for (let i = 0; i < 10; i++) await r.publisher.publish('p0', decision(`k${i}`, `v${i}`), { token: token(1) });
    let failOn = decision('k6', 'v6');
    const tried: string[] = [];
    const f = follower(r.source(), p, {
      batchSize: 4,
      apply: (d, tx) => {
        tried.push(d.payload);
        if (d.payload === failOn) throw new Error('projection refused it');
        p.apply(d, tx);
      },
    });
    const err = await f.start().then(
      () => null,
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(ApplyError);
    expect((err as ApplyError).message).toMatch(/projection refused it/);
    // Batches of at most 4 of what had arrived (where they split depends on delivery): those
    // before k6's batch committed, k6's batch rolled back whole (the decisions applied in it
    // before k6, none to three of them, are not in the projection), nothing after k6 tried, and
    // the mark at the last decision committed.
    const kept = p.applied();
    expect(kept.length).toBeGreaterThanOrEqual(3);
    expect(kept.length).toBeLessThanOrEqual(6);
    expect(tried).toEqual(Array.from({ length: 7 }, (_, i) => decision(`k${i}`, `v${i}`)));
    expect(kept.map((x) => x.payload)).toEqual(Array.from({ length: kept.length }, (_, i) => decision(`k${i}`, `v${i}`)));
    expect((await p.sink.loadMark(`${r.source().name}/p0`)).offset).toBe(kept[kept.length - 1]!.offset);
    expect((err as ApplyError).seq).toBeGreaterThan(kept[kept.length - 1]!.offset);
    failOn = 'nothing';
    const g = follower(r.source(), p, { batchSize: 4 });
    await runUntil(g, 'the rest applied', () => p.applied().length === 10);
    await g.stop();
    expect(p.applied().map((x) => x.payload)).toEqual(Array.from({ length: 10 }, (_, i) => decision(`k${i}`, `v${i}`)));
  });
});

describe.each(BROKER_KINDS)('Model C lag on %s', (kind) => {
  // RabbitMQ tells a stream queue's message count only as a statistic refreshed every few seconds
  // (measured: 0 for 2 s after 7 confirmed publishes), which would read as "caught up" while
  // behind; its source offers no count, and the lag says so (next test).
  it.skipIf(kind === 'amqp')('reports entries behind per partition from the broker, 0 once applied, and how long it has been behind [amqp: no count the broker can give]', async () => {
    const r = await rig(kind);
    const p = projection();
    const sent: Record<string, number> = { p0: 0, p1: 0, p2: 0 };
    for (let i = 0; i < 40; i++) {
      const part = PARTITIONS[i % 3]!;
      sent[part]!++;
      await r.publisher.publish(part, decision(`k${i}`, `v${i}`), { token: token(1) });
    }
    // Held: the apply waits on this gate, so the follower stays behind while we look.
    let open!: () => void;
    let gateNow = new Promise<void>((resolve) => (open = resolve));
    let held = true;
    const f = new BrokerFollower<Database.Database>({
      source: r.source(8),
      group: GROUP,
      partitions: PARTITIONS,
      sink: p.sink,
      applyBatch: async (ds, tx) => {
        if (held) await gateNow;
        for (const d of ds) p.apply(d, tx);
      },
      batchSize: 5,
      retryMs: 20,
      lagEveryMs: 0,
    });
    // Before any measure: unknown, never caught up.
    expect(f.lag()).toMatchObject({ entries: 0, atLeast: true, ms: null });
    const before = await f.measureLag();
    expect(before).toMatchObject({ entries: 40, atLeast: false, ms: null });
    for (const part of PARTITIONS) expect(f.lag(part)).toMatchObject({ entries: sent[part], atLeast: false });
    const running = f.start();
    let failure: unknown = null;
    running.catch((err: unknown) => (failure = err));
    await new Promise((resolve) => setTimeout(resolve, 300));
    const stuck = await f.measureLag();
    expect(stuck.entries).toBe(40); // nothing committed: every message is still after the marks
    expect(stuck.behindMs).toBeGreaterThanOrEqual(300);
    held = false;
    open();
    await pollUntil('all 40 applied', 20_000, () => {
      if (failure) throw failure as Error;
      return p.applied().length === 40;
    });
    // Measured until the broker has taken the last acknowledgement (NATS counts from its ack floor).
    await pollUntil('caught up', 10_000, async () => (await f.measureLag()).entries === 0);
    expect(f.lag()).toEqual({ entries: 0, atLeast: false, behindMs: 0, staleMs: expect.any(Number), ms: null });
    for (const part of PARTITIONS) expect(f.lag(part)).toEqual({ entries: 0, atLeast: false, behindMs: 0, staleMs: expect.any(Number), ms: null });
    // A new message while the apply is held again: 0 until the next measure (as documented), then counted.
    let reopen!: () => void;
    const gate2 = new Promise<void>((resolve) => (reopen = resolve));
    held = true;
    gateNow = gate2;
    await r.publisher.publish('p1', decision('late', 'x'), { token: token(1) });
    expect(f.lag('p1')).toEqual({ entries: 0, atLeast: false, behindMs: 0, staleMs: expect.any(Number), ms: null });
    const after = await pollUntil('the late message counted', 10_000, async () => ((await f.measureLag()).entries === 1 ? f.lag() : false));
    expect(after.entries).toBe(1);
    expect(f.lag('p1')).toMatchObject({ entries: 1, atLeast: false });
    await new Promise((resolve) => setTimeout(resolve, 50));
    expect(f.lag('p1').behindMs).toBeGreaterThanOrEqual(50);
    expect(f.lag('p0')).toMatchObject({ entries: 0, behindMs: 0 });
    held = false;
    reopen();
    await pollUntil('the late message applied', 20_000, () => p.applied().length === 41);
    await f.stop();
    expect(() => f.lag('p9')).toThrow(expect.objectContaining({ code: 'INVALID_ARGUMENT', field: 'partition' }));
  }, 60_000);

  it.skipIf(kind === 'amqp')('emits lag every lagEveryMs while running [amqp: no count the broker can give]', async () => {
    const r = await rig(kind);
    const p = projection();
    for (let i = 0; i < 6; i++) await r.publisher.publish(PARTITIONS[i % 3]!, decision(`k${i}`, `v${i}`), { token: token(1) });
    const f = new BrokerFollower<Database.Database>({ source: r.source(8), group: GROUP, partitions: PARTITIONS, sink: p.sink, apply: (d, tx) => p.apply(d, tx), lagEveryMs: 50 });
    const seen: { entries: number; p2: number | undefined }[] = [];
    f.on('lag', ({ lag, partitions }) => seen.push({ entries: lag.entries, p2: partitions.get('p2')?.entries }));
    const running = f.start();
    await pollUntil('a measure that found it caught up', 20_000, () => seen.some((s) => s.entries === 0 && s.p2 === 0));
    await f.stop();
    await running;
    expect(p.applied()).toHaveLength(6);
  }, 60_000);

  it.skipIf(kind === 'amqp')('refuses saved marks beyond the end of an empty partition of another stream, applying nothing [amqp: no reliable end]', async () => {
    const r = await rig(kind);
    const p = projection();
    for (let i = 0; i < 6; i++) await r.publisher.publish(PARTITIONS[i % 3]!, decision(`k${i}`, `v${i}`), { token: token(1) });
    const named = (source: BrokerSource): BrokerFollower<Database.Database> =>
      new BrokerFollower({ source, group: GROUP, partitions: PARTITIONS, sink: p.sink, apply: (d, tx) => p.apply(d, tx), name: 'one-name', retryMs: 20 });
    await runUntil(named(r.source(8)), 'all 6 applied', () => p.applied().length === 6);
    const empty = await rig(kind);
    const err = await named(empty.source(8)).start().then(() => null, (e: unknown) => e);
    expect(err).toBeInstanceOf(OffsetMismatchError);
    expect(err).toMatchObject({ code: 'OFFSET_MISMATCH', message: expect.stringMatching(/beyond the end of .*\(last offset 0\)/) });
    expect(p.applied()).toHaveLength(6);
  }, 60_000);

  it.skipIf(kind === 'nats')('without a count from the broker, the lag is unknown (atLeast) and never reads as caught up [nats: counted]', async () => {
    const r = await rig(kind);
    const p = projection();
    for (let i = 0; i < 6; i++) await r.publisher.publish(PARTITIONS[i % 3]!, decision(`k${i}`, `v${i}`), { token: token(1) });
    const f = follower(r.source(8), p);
    await runUntil(f, 'all 6 applied', () => p.applied().length === 6);
    const lag = await f.measureLag();
    expect(lag).toMatchObject({ entries: 0, atLeast: true, ms: null });
    expect(lag.behindMs).toBeGreaterThan(0);
    await f.stop();
  }, 60_000);
});

describe.each(BROKER_KINDS)('Model C on %s with the projection and marks on PostgreSQL and MySQL', (kind) => {
  it('applies every partition once, with the marks in the same database, and resumes from them', async () => {
    const r = await rig(kind);
    for (let i = 0; i < 45; i++) await r.publisher.publish(PARTITIONS[i % 3]!, decision(`k${i}`, `v${i}`), { token: token(4) });
    await r.publishRaw('p2', decision('zombie', 'z'), { 'Fencing-Token': `${GROUP}#3` });
    await r.publisher.publish('p2', decision('k45', 'v45'), { token: token(4) });

    const pgDb = await createPostgresDatabase();
    const pool = new pg.Pool({ connectionString: pgDb.url, max: 4 });
    pool.on('error', () => {});
    cleanups.push(async () => {
      await pool.end();
      await pgDb.drop();
    });
    await pool.query('CREATE TABLE applied (id bigserial PRIMARY KEY, partition text NOT NULL, payload text NOT NULL)');
    const myDb = await createMysqlDatabase();
    const myPool = mysql.createPool({ uri: myDb.url, connectionLimit: 4 });
    cleanups.push(async () => {
      await myPool.end();
      await myDb.drop();
    });
    await myPool.query('CREATE TABLE applied (id BIGINT AUTO_INCREMENT PRIMARY KEY, part VARCHAR(64) NOT NULL, payload TEXT NOT NULL) ENGINE=InnoDB');

    const targets = [
      {
        sink: postgresSink({ pool }) as PartitionSink<unknown>,
        insert: async (tx: unknown, d: BrokerDecision) => void (await (tx as pg.PoolClient).query('INSERT INTO applied (partition, payload) VALUES ($1, $2)', [d.partition, d.payload])),
        rows: async () => (await pool.query<{ payload: string }>('SELECT payload FROM applied ORDER BY id')).rows.map((x) => x.payload),
      },
      {
        sink: mysqlSink({ pool: myPool }) as PartitionSink<unknown>,
        insert: async (tx: unknown, d: BrokerDecision) => void (await (tx as mysql.PoolConnection).execute('INSERT INTO applied (part, payload) VALUES (?, ?)', [d.partition, d.payload])),
        rows: async () => ((await myPool.query('SELECT payload FROM applied ORDER BY id'))[0] as { payload: string }[]).map((x) => x.payload),
      },
    ];
    for (const t of targets) {
      const f = new BrokerFollower({ source: r.source(8), group: GROUP, partitions: PARTITIONS, sink: t.sink, apply: (d, tx) => t.insert(tx, d), batchSize: 5 });
      let failure: unknown = null;
      f.start().catch((e: unknown) => (failure = e));
      await pollUntil(`${t.sink.kind}: 46 applied, 1 dropped`, 20_000, () => {
        if (failure) throw failure as Error;
        return f.counts.applied === 46 && f.counts.dropped === 1;
      });
      await f.stop();
      const rows = await t.rows();
      expect(rows.sort()).toEqual(Array.from({ length: 46 }, (_, i) => decision(`k${i}`, `v${i}`)).sort());
      const p2 = await t.sink.loadMark(`${r.source().name}/p2`);
      expect(p2).toMatchObject({ term: 4, dropped: 1 });
      // Again on the same database: nothing left to apply.
      const g = new BrokerFollower({ source: r.source(8), group: GROUP, partitions: PARTITIONS, sink: t.sink, apply: (d, tx) => t.insert(tx, d) });
      void g.start();
      await new Promise((resolve) => setTimeout(resolve, 300));
      await g.stop();
      expect(g.counts).toMatchObject({ applied: 0, duplicate: 0, dropped: 0 });
      expect(await t.rows()).toHaveLength(46);
    }
  });
});

describe('Model C on nats when the server drops a consumer', () => {
  it('a follower whose consumer is deleted on the server (by hand, or idle past its threshold) subscribes again from its marks: the rest applied once, a retry event naming it', async () => {
    const name = `tenure_c_${randomBytes(5).toString('hex')}`;
    const r = await openBrokerRig('nats', name, PARTITIONS);
    cleanups.push(() => r.destroy());
    const nc = await connect({ servers: NATS_URL });
    cleanups.push(() => nc.close());
    const jsm = await nc.jetstreamManager();
    const p = projection();
    const published: string[] = [];
    const publish = async (from: number, to: number): Promise<void> => {
      for (let i = from; i < to; i++) {
        const payload = decision(`k${i}`, `v${i}`);
        published.push(payload);
        await r.publisher.publish(PARTITIONS[i % PARTITIONS.length]!, payload, { token: token(1) });
      }
    };
    await publish(0, 30);
    const f = follower(r.source(16), p);
    const retries: string[] = [];
    f.on('retry', (e) => retries.push(`${e.partition}: ${e.error.message}`));
    const running = f.start();
    let failure: unknown = null;
    running.catch((err: unknown) => (failure = err));
    await pollUntil('the first 30 applied', 20_000, () => {
      if (failure) throw failure as Error;
      return p.applied().length === 30;
    });
    const consumers: string[] = [];
    for await (const c of await jsm.consumers.list(name)) consumers.push(c.name);
    expect(consumers).toHaveLength(PARTITIONS.length);
    for (const c of consumers) await jsm.consumers.delete(name, c);
    await publish(30, 60);
    await pollUntil('the next 30 applied after the consumers went', 20_000, () => {
      if (failure) throw failure as Error;
      return p.applied().length === 60;
    });
    await f.stop();
    expect(retries.some((m) => /consumer deleted/i.test(m)), retries.join('\n')).toBe(true);
    const rows = p.applied();
    expect(rows.map((x) => x.payload).sort()).toEqual([...published].sort());
    for (const part of PARTITIONS) {
      const mine = rows.filter((x) => x.partition === part);
      expect(mine.map((x) => x.payload)).toEqual(published.filter((_, i) => PARTITIONS[i % PARTITIONS.length] === part));
    }
    expect(f.counts).toMatchObject({ applied: 60, duplicate: 0 });
  });
});

describe('Model C options and helpers', () => {
  const source: BrokerSource = { name: 'nowhere', subscribe: () => Promise.reject(new Error('not used')) };
  it('refuses bad options with one InvalidArgumentError naming the field', () => {
    const p = projection();
    const ok = { source, group: GROUP, partitions: ['p0'], sink: p.sink, apply: () => {} };
    const bad: [string, Record<string, unknown>][] = [
      ['partition', { partitions: ['p 0'] }],
      ['partitions', { partitions: [] }],
      ['partitions', { partitions: ['p0', 'p0'] }],
      ['sink', { sink: { kind: 'x', load: async () => 0, commit: async () => {} } }],
      ['source', { source: {} }],
      ['apply', { applyBatch: () => {} }],
      ['batchSize', { batchSize: 0 }],
      ['group', { group: '' }],
    ];
    for (const [field, change] of bad) {
      expect(() => new BrokerFollower({ ...ok, ...change } as never), field).toThrow(expect.objectContaining({ code: 'INVALID_ARGUMENT', field }));
    }
  });

  it('routes a key to the same partition every time, and spreads keys over all of them', () => {
    const seen = new Set<string>();
    for (let i = 0; i < 200; i++) {
      const part = partitionOf(`key-${i}`, PARTITIONS);
      expect(partitionOf(`key-${i}`, PARTITIONS)).toBe(part);
      seen.add(part);
    }
    expect([...seen].sort()).toEqual([...PARTITIONS]);
    // FNV-1a of "customer-42" is 4268273086: a publisher in another process or version routes it alike.
    expect(partitionOf('customer-42', ['a', 'b', 'c', 'd', 'e'])).toBe('b');
  });
});
