/**
 * The leader directs work, in one process, on every store tenure has (memory, SQLite, PostgreSQL,
 * MySQL, Redis, etcd): a job done by a few workers with each item counted once, a handler that
 * throws, garbage rows in the work streams, and bad input. Worker processes killed or stopped
 * mid-item are in test/process/work-failover.test.ts.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { InvalidArgumentError, LeaderElector, NotLeaderError, StoreDataError, WorkCoordinator, WorkFailedError, Worker } from '../../src/index.js';
import type { FencingToken, JsonValue, Store, WorkHandler } from '../../src/index.js';
import { backends } from '../contract/backends.js';

const cleanups: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

async function open(name: string): Promise<Store> {
  const backend = backends.find((b) => b.name === name)!;
  const { store, cleanup } = await backend.open();
  cleanups.push(cleanup);
  return store;
}

async function lead(store: Store, group: string, owner = 'leader-1'): Promise<FencingToken> {
  const r = await store.acquire(group, owner, 60_000);
  if (!r.acquired) throw new Error(`${owner} did not get ${group}`);
  return { lease: group, term: r.lease.term };
}

/** Start workers in this process; each is stopped (and its lease released) after the test. */
function workers<I extends JsonValue, O extends JsonValue>(store: Store, group: string, ids: readonly string[], handler: (id: string) => WorkHandler<I, O>): Worker<I, O>[] {
  return ids.map((nodeId) => {
    const w = new Worker<I, O>({ store, group, nodeId, handler: handler(nodeId), pollMs: 10 });
    const done = w.start();
    done.catch(() => {});
    cleanups.push(() => w.stop());
    return w;
  });
}

async function waitForWorkers(store: Store, group: string, count: number): Promise<void> {
  for (let i = 0; i < 500; i++) {
    if ((await store.list(`${group}/workers/`)).length >= count) return;
    await new Promise((r) => setTimeout(r, 10));
  }
  throw new Error(`${count} workers did not join ${group}`);
}

describe.each(backends.map((b) => b.name))('work on %s', (name) => {
  it('a job is done by the live workers, each item counted once; an item whose handler throws is done by another attempt', { timeout: 60_000 }, async () => {
    const store = await open(name);
    let thrown = 0;
    const ws = workers<{ n: number }, { square: number }>(store, 'squares', ['a', 'b', 'c'], () => async ({ n }, { attempt }) => {
      if (n === 7 && attempt === 1) {
        thrown += 1;
        throw new Error('seven is unlucky the first time');
      }
      return { square: n * n };
    });
    await waitForWorkers(store, 'squares', 3);
    const c = new WorkCoordinator({ store, token: await lead(store, 'squares'), pollMs: 10 });
    const reassigned: string[] = [];
    c.on('reassigned', (e) => reassigned.push(`${e.item}:${e.reason}:${e.error ?? ''}`));
    const items = Array.from({ length: 20 }, (_, n) => ({ id: `n${n}`, input: { n } }));
    const report = await c.run<{ square: number }>({ items });
    expect([...report.results.keys()]).toEqual(items.map((i) => i.id));
    expect([...report.results.values()].map((r) => r.output.square)).toEqual(items.map((i) => i.input.n ** 2));
    expect(thrown).toBe(1);
    expect(reassigned).toEqual(['n7:failed:seven is unlucky the first time']);
    expect(report.results.get('n7')!.attempt).toBe(2);
    expect(report.reassigned).toBe(1);
    // A second job on the same coordinator: the first job's answers are not read again.
    const again = await c.run<{ square: number }>({ items: [{ id: 'n7', input: { n: 8 } }] });
    expect(again.results.get('n7')!.output.square).toBe(64);
    expect(again.ignored).toBe(0);
    // Stopped workers release their leases: the leader sees no one to give work to.
    for (const w of ws) await w.stop();
    expect(await store.list('squares/workers/')).toEqual([]);
  });

  it('a garbage row in the assignment stream stops the worker with one clear StoreDataError; one in a result stream stops the job', { timeout: 60_000 }, async () => {
    const store = await open(name);
    const token = await lead(store, 'g');
    const [w] = workers(store, 'g', ['a'], () => () => 1);
    await waitForWorkers(store, 'g', 1);
    const seq = await store.appendFenced(token, 'g/assignments', 'not json {');
    const err: unknown = await w!.start().then(() => null, (e: unknown) => e);
    expect(err).toBeInstanceOf(StoreDataError);
    expect((err as Error).message).toContain(`work stream "g/assignments": entry ${seq} is not a tenure work record (not JSON`);
    // Its lease is released as it stops.
    expect(await store.list('g/workers/')).toEqual([]);

    // A worker lease held by hand, whose result stream holds a record of another protocol.
    const holder = await store.acquire('h/workers/x', 'x-1', 60_000);
    const c = new WorkCoordinator({ store, token: await lead(store, 'h'), pollMs: 10 });
    const running = c.run({ items: [{ id: 'i', input: null }], itemTimeoutMs: 60_000 }).then(() => null, (e: unknown) => e);
    for (let i = 0; i < 500 && (await store.readStream('h/assignments')).length === 0; i++) await new Promise((r) => setTimeout(r, 10));
    await store.appendFenced({ lease: 'h/workers/x', term: holder.lease.term }, 'h/results/x', JSON.stringify({ v: 9, job: 'j' }));
    const failed = await running;
    expect(failed).toBeInstanceOf(StoreDataError);
    expect((failed as Error).message).toMatch(/^work stream "h\/results\/x": entry 1 is not a tenure work record \(protocol version 9, expected 1\)/);
  });
});

describe('work: failures and bad input', () => {
  it('an item whose handler throws on every attempt fails the job with WorkFailedError, after maxAttempts', async () => {
    const store = await open('sqlite');
    workers<{ n: number }, number>(store, 'g', ['a', 'b'], () => ({ n }) => {
      if (n === 3) throw new Error('cannot do three');
      return n;
    });
    await waitForWorkers(store, 'g', 2);
    const c = new WorkCoordinator({ store, token: await lead(store, 'g'), pollMs: 10 });
    const err: unknown = await c.run({ items: [1, 2, 3].map((n) => ({ id: `i${n}`, input: { n } })), maxAttempts: 3 }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(WorkFailedError);
    expect(err).toMatchObject({ code: 'WORK_FAILED', item: 'i3', attempts: 3, lastError: 'cannot do three' });
    expect((err as Error).message).toBe('work item "i3" failed on all 3 attempts (last error: cannot do three)');
  });

  it('the items of one round go to a worker in one entry, split where they would pass the 1 MiB entry limit', async () => {
    const store = await open('sqlite');
    const big = 'x'.repeat(400_000);
    const ws = [new Worker<string, number>({ store, group: 'g', nodeId: 'a', concurrency: 8, pollMs: 10, handler: (input) => input.length })];
    for (const w of ws) {
      void w.start().catch(() => {});
      cleanups.push(() => w.stop());
    }
    await waitForWorkers(store, 'g', 1);
    const c = new WorkCoordinator({ store, token: await lead(store, 'g'), pollMs: 10 });
    const items = [...Array.from({ length: 5 }, (_, i) => ({ id: `big-${i}`, input: big })), ...Array.from({ length: 3 }, (_, i) => ({ id: `small-${i}`, input: 'abc' }))];
    const report = await c.run<number>({ items });
    expect([...report.results.values()].map((r) => r.output)).toEqual([...items.map((i) => i.input.length)]);
    const entries = await store.readStream('g/assignments');
    // 8 items given in one round: 400 kB inputs two to an entry, the small ones with the last.
    expect(entries.map((e) => (JSON.parse(e.payload) as { items: { item: string }[] }).items.map((i) => i.item))).toEqual([
      ['big-0', 'big-1'],
      ['big-2', 'big-3'],
      ['big-4', 'small-0', 'small-1', 'small-2'],
    ]);
    for (const e of entries) expect(Buffer.byteLength(e.payload)).toBeLessThanOrEqual(1024 * 1024);
  });

  it('bad options and items are one InvalidArgumentError naming the field, and nothing is written', async () => {
    const store = await open('memory');
    const token = await lead(store, 'g');
    const c = new WorkCoordinator({ store, token });
    const bad: [unknown, RegExp][] = [
      [{ items: [] }, /^items: a job needs at least one item, got none$/],
      [{ items: [{ id: 'a', input: 1 }, { id: 'b', input: 2 }, { id: 'a', input: 3 }] }, /^items\[2\]\.id: duplicate item id "a"$/],
      [{ items: [{ id: '', input: 1 }] }, /^items\[0\]\.id: must not be empty$/],
      [{ items: [{ id: 'a', input: 10n }] }, /^items\[0\]\.input: not serializable as JSON/],
      [{ items: [{ id: 'a', input: undefined }] }, /^items\[0\]\.input: expected a JSON value, got undefined$/],
      [{ items: 'a,b' }, /^items: expected an array of \{ id, input \}$/],
      [{ items: [{ id: 'a', input: 1 }], itemTimeoutMs: 0 }, /^itemTimeoutMs: must be in \[1, 86400000\] ms, got 0$/],
      [{ items: [{ id: 'a', input: 1 }], maxAttempts: 0.5 }, /^maxAttempts: expected a whole number in \[1, 100\], got 0.5$/],
    ];
    for (const [options, message] of bad) {
      const err: unknown = await c.run(options as never).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(InvalidArgumentError);
      expect((err as Error).message).toMatch(message);
    }
    expect(await store.readStream('g/assignments')).toEqual([]);
    expect(() => new WorkCoordinator({ store } as never)).toThrow(/^token: give exactly one of token/);
    expect(() => new WorkCoordinator({ store, token, group: 'other' })).toThrow(/^group: must be the leader's lease "g", got "other"$/);
    expect(() => new WorkCoordinator({ store, token: { lease: 'g', term: 0 } })).toThrow(/^token\.term: expected a positive integer term, got 0$/);
    expect(() => new Worker({ store, group: 'g', nodeId: 'x'.repeat(195), handler: () => 1 })).toThrow(InvalidArgumentError);
    expect(() => new Worker({ store, group: 'g', nodeId: 'a', handler: () => 1, concurrency: 0 })).toThrow(/^concurrency: expected a whole number in \[1, 1000\], got 0$/);
    expect(() => new Worker({ store, group: 'g', nodeId: 'a', handler: 'no' as never })).toThrow(/^handler: expected a function/);
  });

  it('a leader whose lease has passed to another stops its job with NotLeaderError; so does an elector that loses leadership', async () => {
    const store = await open('memory');
    const old = await lead(store, 'g');
    await store.release('g', 'leader-1', old.term);
    await lead(store, 'g', 'leader-2');
    const err: unknown = await new WorkCoordinator({ store, token: old }).run({ items: [{ id: 'a', input: 1 }] }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(NotLeaderError);
    expect((err as Error).message).toMatch(/^the group lease g is held at term 2 by leader-2, not at this leader's term 1/);
    expect(await store.readStream('g/assignments')).toEqual([]);

    const elector = new LeaderElector({ store, group: 'e', ttlMs: 1000 });
    cleanups.push(() => elector.stop());
    const c = new WorkCoordinator({ store, elector });
    await expect(c.run({ items: [{ id: 'a', input: 1 }] })).rejects.toBeInstanceOf(NotLeaderError); // not leader yet
    elector.start();
    await new Promise<void>((resolve) => elector.once('elected', () => resolve()));
    // No worker joins: the job waits until leadership ends.
    const running = c.run({ items: [{ id: 'a', input: 1 }] }).catch((e: unknown) => e);
    await new Promise((r) => setTimeout(r, 50));
    await elector.resign();
    const ended = await running;
    expect(ended).toBeInstanceOf(NotLeaderError);
    expect((ended as Error).message).toMatch(/^leadership of e \(term 1\) ended during job /);
  });

  it('a worker acts only on assignments of the current leader term made for its own lease term', async () => {
    const store = await open('sqlite');
    const ran: string[] = [];
    const [w] = workers<null, null>(store, 'g', ['a'], () => (_input, { item }) => {
      ran.push(item);
      return null;
    });
    const ignored: string[] = [];
    w!.on('ignored', (e) => ignored.push(`${e.item}:${e.reason}`));
    await waitForWorkers(store, 'g', 1);
    const [lease] = await store.list('g/workers/');
    const assign = (item: string, workerTerm: number): string =>
      JSON.stringify({ v: 1, kind: 'assign', job: 'j', worker: 'a', workerTerm, items: [{ item, attempt: 1, input: null }] });
    const old = await lead(store, 'g', 'leader-1');
    await store.release('g', 'leader-1', old.term);
    const token = await lead(store, 'g', 'leader-2');
    await store.appendFenced(old, 'g/assignments', assign('from-the-old-leader', lease!.term));
    await store.appendFenced(token, 'g/assignments', assign('for-an-earlier-incarnation', lease!.term - 1 || 99));
    await store.appendFenced(token, 'g/assignments', assign('current', lease!.term));
    for (let i = 0; i < 300 && ran.length === 0; i++) await new Promise((r) => setTimeout(r, 10));
    expect(ran).toEqual(['current']);
    expect(ignored).toEqual(['from-the-old-leader:other-term', 'for-an-earlier-incarnation:other-incarnation']);
  });

  it('the caller\'s signal stops a run with its reason; a revoked attempt aborts the handler\'s signal', async () => {
    const store = await open('sqlite');
    const aborted: string[] = [];
    workers<null, string>(store, 'g', ['a'], () => (_input, { signal, item }) =>
      new Promise<string>((_resolve, reject) => {
        signal.addEventListener('abort', () => {
          aborted.push(item);
          reject(signal.reason as Error);
        });
      }),
    );
    await waitForWorkers(store, 'g', 1);
    const c = new WorkCoordinator({ store, token: await lead(store, 'g'), pollMs: 10 });
    const reasons: string[] = [];
    c.on('reassigned', (e) => reasons.push(e.reason));
    const controller = new AbortController();
    const running = c.run({ items: [{ id: 'slow', input: null }], itemTimeoutMs: 100, signal: controller.signal }).catch((e: unknown) => e);
    for (let i = 0; i < 300 && aborted.length === 0; i++) await new Promise((r) => setTimeout(r, 10));
    // Attempt 1 timed out and was revoked (a later attempt may have been too by now).
    expect(aborted[0]).toBe('slow');
    expect(reasons[0]).toBe('timeout');
    controller.abort(new Error('enough'));
    expect(await running).toMatchObject({ message: 'enough' });
  });
});

// Push: on a store with watchStream, workers polling once a minute hear their assignments, and a
// leader polling once a minute hears the answers, at once (each wait is cut short by the store's
// push for the stream). MySQL has no push and is left out.
describe.each(backends.filter((b) => b.capabilities.streamPush === true).map((b) => b.name))('work with push on %s', (name) => {
  it('a job of 10 items with every poll at one minute finishes within seconds', { timeout: 30_000 }, async () => {
    const store = await open(name);
    const ws = ['a', 'b'].map((nodeId) => {
      const w = new Worker<{ n: number }, { double: number }>({ store, group: 'pushed', nodeId, handler: async ({ n }) => ({ double: 2 * n }), pollMs: 60_000 });
      w.start().catch(() => {});
      cleanups.push(() => w.stop());
      return w;
    });
    await waitForWorkers(store, 'pushed', ws.length);
    const c = new WorkCoordinator({ store, token: await lead(store, 'pushed'), pollMs: 60_000 });
    const items = Array.from({ length: 10 }, (_, n) => ({ id: `n${n}`, input: { n } }));
    const started = performance.now();
    const report = await c.run<{ double: number }>({ items, itemTimeoutMs: 120_000 });
    expect([...report.results.values()].map((r) => r.output.double)).toEqual(items.map((i) => 2 * i.input.n));
    expect(performance.now() - started).toBeLessThan(20_000);
    // stop() does not wait out a minute-long poll either.
    const stopping = performance.now();
    for (const w of ws) await w.stop();
    expect(performance.now() - stopping).toBeLessThan(5_000);
  });
});
