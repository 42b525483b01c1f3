/**
 * Model A on every store tenure has (memory, SQLite, PostgreSQL, MySQL, Redis, etcd): the leader
 * writes the group's state cell, followers read it or follow every version; a deposed leader and
 * a writer that lost a race are refused with nothing written.
 */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { InvalidArgumentError, StaleTermError, StateCell, StoreDataError, VersionConflictError } from '../../src/index.js';
import type { CellVersion, FencingToken, JsonValue, Store } from '../../src/index.js';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { MemoryStore } from '../../src/stores/memory/index.js';
import { MysqlStore } from '../../src/stores/mysql/index.js';
import { PostgresStore } from '../../src/stores/postgres/index.js';
import { SqliteStore } from '../../src/stores/sqlite/index.js';
import { backends } from '../contract/backends.js';
import { createMysqlDatabase, createPostgresDatabase } from '../stores/sql-servers.js';

type Doc = { readonly n: number; readonly by: string };

/** Collect versions from a follower until `count` arrived (the test's timeout bounds the wait). */
async function collect<T>(iter: AsyncIterable<CellVersion<T>>, count: number): Promise<CellVersion<T>[]> {
  const out: CellVersion<T>[] = [];
  for await (const v of iter) {
    out.push(v);
    if (out.length >= count) break;
  }
  return out;
}

async function until(check: () => boolean, ms = 15_000): Promise<void> {
  const started = performance.now();
  while (!check()) {
    if (performance.now() - started > ms) throw new Error('timed out');
    await new Promise((r) => setTimeout(r, 10));
  }
}

for (const backend of backends) {
  describe(`StateCell on ${backend.name}`, () => {
    let store: Store;
    let cleanup: () => Promise<void>;
    const stops: AbortController[] = [];

    beforeEach(async () => {
      ({ store, cleanup } = await backend.open());
    });
    afterEach(async () => {
      for (const s of stops.splice(0)) s.abort();
      await cleanup();
    });

    const leaderToken = async (owner: string): Promise<FencingToken> => {
      const r = await store.acquire('g', owner, 10_000);
      expect(r.acquired).toBe(true);
      return { lease: 'g', term: r.lease.term };
    };

    it('a leader writes, followers see every version in order, and a reader sees the current one', async () => {
      const leader = new StateCell<Doc>({ store, group: 'g', pollMs: 20 });
      const fromStart = new StateCell<Doc>({ store, group: 'g', pollMs: 20 });
      const listened = new StateCell<Doc>({ store, group: 'g', pollMs: 20 });
      expect(await fromStart.read()).toBeNull();
      const stop = new AbortController();
      stops.push(stop);
      const heard: CellVersion<Doc>[] = [];
      const errors: Error[] = [];
      listened.subscribe((v) => void heard.push(v), { after: 0, signal: stop.signal, onError: (e) => errors.push(e) });
      const followed = collect(fromStart.versions({ after: 0, signal: stop.signal }), 30);

      const token = await leaderToken('a~1');
      let version = 0;
      for (let n = 1; n <= 30; n++) {
        const written = await leader.write(token, { n, by: 'a' }, { expectedVersion: version });
        expect(written).toEqual({ version: n, document: { n, by: 'a' }, term: token.term, lease: 'g' });
        version = written.version;
        // A follower joining mid-way starts from the current version.
        if (n === 10) {
          const late = new StateCell<Doc>({ store, group: 'g', pollMs: 20 });
          const first = await collect(late.versions({ signal: stop.signal }), 1);
          expect(first.map((v) => v.version)).toEqual([10]);
        }
      }
      const expected = Array.from({ length: 30 }, (_, i) => ({ version: i + 1, document: { n: i + 1, by: 'a' }, term: token.term, lease: 'g' }));
      expect(await followed).toEqual(expected);
      await until(() => heard.length >= 30);
      expect(heard).toEqual(expected);
      expect(errors).toEqual([]);
      expect(await fromStart.read()).toEqual(expected[29]);
    });

    it("refuses a deposed leader's write with StaleTermError, nothing written, even at the current version", async () => {
      const cellA = new StateCell<Doc>({ store, group: 'g' });
      const cellB = new StateCell<Doc>({ store, group: 'g' });
      const a = await leaderToken('a~1');
      await cellA.write(a, { n: 1, by: 'a' }, { expectedVersion: 0 });
      // a is deposed: b takes the group with a higher term and writes.
      expect(await store.release('g', 'a~1', a.term)).toBe(true);
      const b = await leaderToken('b~1');
      expect(b.term).toBeGreaterThan(a.term);
      await cellB.write(b, { n: 2, by: 'b' }, { expectedVersion: 1 });
      // a still believes it leads, and even knows the current version: refused.
      const err = await cellA.write(a, { n: 3, by: 'a' }, { expectedVersion: 2 }).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(StaleTermError);
      expect(err).toMatchObject({ code: 'STALE_TERM', term: a.term, currentTerm: b.term });
      await expect(cellA.update(a, (cur) => ({ n: (cur?.document.n ?? 0) + 1, by: 'a' }))).rejects.toBeInstanceOf(StaleTermError);
      expect(await cellA.read()).toEqual({ version: 2, document: { n: 2, by: 'b' }, term: b.term, lease: 'g' });
      expect((await store.readStream('g.state')).map((e) => e.payload)).toEqual(['{"n":1,"by":"a"}', '{"n":2,"by":"b"}']);
    });

    it('lets exactly one of concurrent writers at the same expected version win; read-modify-write loses no update', async () => {
      const token = await leaderToken('a~1');
      const cell = new StateCell<Doc>({ store, group: 'g' });
      await cell.write(token, { n: 0, by: 'init' }, { expectedVersion: 0 });
      const writers = Array.from({ length: 12 }, () => new StateCell<Doc>({ store, group: 'g' }));
      const outcomes = await Promise.all(
        writers.map((w, i) =>
          w.write(token, { n: 100 + i, by: `w${i}` }, { expectedVersion: 1 }).then(
            (v) => ({ i, v }),
            (e: unknown) => ({ i, e }),
          ),
        ),
      );
      const won = outcomes.filter((o): o is { i: number; v: CellVersion<Doc> } => 'v' in o);
      expect(won).toHaveLength(1);
      expect(won[0]!.v.version).toBe(2);
      for (const o of outcomes) {
        if (!('e' in o)) continue;
        expect(o.e).toBeInstanceOf(VersionConflictError);
        expect(o.e).toMatchObject({ code: 'VERSION_CONFLICT', expected: 1, current: 2 });
      }
      expect((await cell.read())?.document).toEqual({ n: 100 + won[0]!.i, by: `w${won[0]!.i}` });
      // Six read-modify-write increments at once: each lands exactly once.
      await Promise.all(
        Array.from({ length: 6 }, (_, i) => new StateCell<Doc>({ store, group: 'g' }).update(token, (cur) => ({ n: cur!.document.n + 1, by: `u${i}` }), { maxAttempts: 50 })),
      );
      const final = await cell.read();
      expect(final?.version).toBe(8);
      expect(final?.document.n).toBe(100 + won[0]!.i + 6);
    });

    it('reports garbage in the cell as StoreDataError, to readers and followers', async () => {
      const token = await leaderToken('a~1');
      const cell = new StateCell<Doc>({ store, group: 'g', pollMs: 20 });
      await cell.write(token, { n: 1, by: 'a' }, { expectedVersion: 0 });
      // Something other than a StateCell appends to the cell's stream.
      await store.appendFenced(token, 'g.state', '{"n": 2, oops');
      const err = await cell.read().catch((e: unknown) => e);
      expect(err).toBeInstanceOf(StoreDataError);
      expect((err as Error).message).toContain('version 2');
      const seen: number[] = [];
      const follower = (async () => {
        for await (const v of cell.versions({ after: 0 })) seen.push(v.version);
      })();
      await expect(follower).rejects.toBeInstanceOf(StoreDataError);
      expect(seen).toEqual([1]);
      const failed = await new Promise<Error>((resolve) => {
        cell.subscribe(() => {}, { after: 1, onError: resolve });
      });
      expect(failed).toBeInstanceOf(StoreDataError);
      // A document that parses but that `decode` refuses is garbage too.
      const strict = new StateCell<Doc>({
        store,
        group: 'g',
        stream: 'strict',
        decode: (v) => {
          if (typeof v !== 'object' || v === null || Array.isArray(v) || typeof (v as { n?: unknown }).n !== 'number') throw new Error('not a Doc');
          return v as unknown as Doc;
        },
      });
      // The cell itself never writes what its decode refuses: bad input, nothing written.
      await expect(strict.write(token, [1, 2] as unknown as Doc, { expectedVersion: 0 })).rejects.toMatchObject({ code: 'INVALID_ARGUMENT', field: 'document' });
      expect(await strict.read()).toBeNull();
      await store.appendFenced(token, 'strict', '[1, 2]');
      await expect(strict.read()).rejects.toThrow(/version 1 .*refused by decode: not a Doc/);
      // A version written under another lease is not the group's.
      const h = await store.acquire('h', 'a~1', 10_000);
      await store.appendFenced({ lease: 'h', term: h.lease.term }, 'h-owned', '{}');
      await expect(new StateCell({ store, group: 'g', stream: 'h-owned' }).read()).rejects.toBeInstanceOf(StoreDataError);
    });

    it('refuses bad input with one clear InvalidArgumentError, nothing written', async () => {
      const token = await leaderToken('a~1');
      const cell = new StateCell({ store, group: 'g' });
      const other = await store.acquire('h', 'a~1', 10_000);
      const bad: [string, () => Promise<unknown>][] = [
        ['token.lease', () => cell.write({ lease: 'h', term: other.lease.term }, {}, { expectedVersion: 0 })],
        ['expectedVersion', () => cell.write(token, {}, { expectedVersion: -1 })],
        ['expectedVersion', () => cell.write(token, {}, {} as { expectedVersion: number })],
        ['options', () => cell.write(token, {}, undefined as unknown as { expectedVersion: number })],
        ['document', () => cell.write(token, undefined as unknown as JsonValue, { expectedVersion: 0 })],
        ['document', () => cell.write(token, { x: Number.NaN }, { expectedVersion: 0 })],
        ['document', () => cell.write(token, { at: new Date() } as unknown as JsonValue, { expectedVersion: 0 })],
        ['document', () => cell.write(token, { f: () => 1 } as unknown as JsonValue, { expectedVersion: 0 })],
        ['document', () => cell.write(token, 'x'.repeat(1024 * 1024), { expectedVersion: 0 })],
      ];
      for (const [field, call] of bad) {
        const err = await call().catch((e: unknown) => e);
        expect(err).toBeInstanceOf(InvalidArgumentError);
        expect(err).toMatchObject({ field });
      }
      expect(await cell.read()).toBeNull();
      expect(() => new StateCell({ store, group: '' })).toThrow(InvalidArgumentError);
      expect(() => new StateCell({ store, group: 'g', pollMs: 0 })).toThrow(InvalidArgumentError);
      expect(() => cell.subscribe(() => {}, {} as { onError: (e: Error) => void })).toThrow(InvalidArgumentError);
    });
  });
}

describe('StateCell on memory: subscriptions that stop, update that gives up, stores without the optional parts', () => {
  it('reads the current version by paging through the stream when the store has no readLast', async () => {
    const memory = new MemoryStore();
    const store: Store = Object.assign(Object.create(memory) as MemoryStore, { readLast: undefined });
    const { lease } = await memory.acquire('g', 'a~1', 10_000);
    const token = { lease: 'g', term: lease.term };
    const writer = new StateCell<number>({ store, group: 'g' });
    for (let v = 0; v < 25; v++) await writer.write(token, v, { expectedVersion: v });
    // Another object, knowing nothing: a full scan; then only what is new.
    const reader = new StateCell<number>({ store, group: 'g' });
    expect(await reader.read()).toMatchObject({ version: 25, document: 24 });
    await writer.write(token, 25, { expectedVersion: 25 });
    expect(await reader.read()).toMatchObject({ version: 26, document: 25 });
  });

  it('stops a subscription whose listener throws, telling onError; an aborted follower ends quietly', async () => {
    const store = new MemoryStore();
    const { lease } = await store.acquire('g', 'a~1', 10_000);
    const token = { lease: 'g', term: lease.term };
    const cell = new StateCell<number>({ store, group: 'g', pollMs: 10 });
    const heard: number[] = [];
    const failed = new Promise<Error>((resolve) => {
      cell.subscribe(
        (v) => {
          heard.push(v.version);
          if (v.version === 2) throw new Error('listener broke on 2');
        },
        { after: 0, onError: resolve },
      );
    });
    for (let v = 0; v < 4; v++) await cell.write(token, v, { expectedVersion: v });
    expect((await failed).message).toBe('listener broke on 2');
    await new Promise((r) => setTimeout(r, 50));
    expect(heard).toEqual([1, 2]);
    // A follower whose signal aborts while it waits for a version ends without an error.
    const stop = new AbortController();
    const seen: number[] = [];
    const following = (async () => {
      for await (const v of cell.versions({ signal: stop.signal })) seen.push(v.version);
    })();
    await new Promise((r) => setTimeout(r, 50));
    stop.abort();
    await following;
    expect(seen).toEqual([4]);
    // update gives up after maxAttempts lost races, passing the last VersionConflictError on.
    let rounds = 0;
    const err = await cell
      .update(token, async (cur) => {
        rounds += 1;
        await store.appendFenced(token, 'g.state', String(rounds + 100)); // someone else moves the cell meanwhile
        return (cur?.document ?? 0) + 1;
      }, { maxAttempts: 3 })
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(VersionConflictError);
    expect(rounds).toBe(3);
  });

  it('refuses to hold a cell over a store whose appendFenced ignores expectSeq', async () => {
    const memory = new MemoryStore();
    const careless: Store = Object.assign(Object.create(memory) as MemoryStore, {
      appendFenced: (token: FencingToken, stream: string, payload: string) => memory.appendFenced(token, stream, payload),
    });
    const { lease } = await memory.acquire('g', 'a~1', 10_000);
    const cell = new StateCell({ store: careless, group: 'g' });
    await cell.write({ lease: 'g', term: lease.term }, { v: 1 }, { expectedVersion: 0 });
    await expect(cell.write({ lease: 'g', term: lease.term }, { v: 2 }, { expectedVersion: 0 })).rejects.toBeInstanceOf(StoreDataError);
  });
});

/** Stores of one database, each with its own connections, as separate follower processes would have. */
const shared: { name: string; open: () => Promise<{ connect: () => Store; cleanup: () => Promise<void> }> }[] = [
  {
    name: 'SQLite (one file)',
    open: async () => {
      const dir = mkdtempSync(join(tmpdir(), 'tenure-cell-'));
      const stores: Store[] = [];
      return {
        connect: () => {
          const s = new SqliteStore({ path: join(dir, 'tenure.db') });
          stores.push(s);
          return s;
        },
        cleanup: async () => {
          for (const s of stores) await s.close();
          rmSync(dir, { recursive: true, force: true });
        },
      };
    },
  },
  {
    name: 'PostgreSQL (one database)',
    open: async () => {
      const db = await createPostgresDatabase();
      const stores: Store[] = [];
      return {
        connect: () => {
          const s = new PostgresStore({ url: db.url });
          stores.push(s);
          return s;
        },
        cleanup: async () => {
          for (const s of stores) await s.close();
          await db.drop();
        },
      };
    },
  },
  {
    name: 'MySQL (one database)',
    open: async () => {
      const db = await createMysqlDatabase();
      const stores: Store[] = [];
      return {
        connect: () => {
          const s = new MysqlStore({ url: db.url });
          stores.push(s);
          return s;
        },
        cleanup: async () => {
          for (const s of stores) await s.close();
          await db.drop();
        },
      };
    },
  },
];

for (const target of shared) {
  describe(`StateCell with a store connection per node: ${target.name}`, () => {
    it('two leaders in turn and three followers, each on its own connection: every follower sees every version, the zombie is refused', async () => {
      const { connect, cleanup } = await target.open();
      const stop = new AbortController();
      try {
        const [storeA, storeB] = [connect(), connect()];
        const followers = [0, 1, 2].map(() => new StateCell<Doc>({ store: connect(), group: 'g', pollMs: 10 }));
        const seen = followers.map((f) => collect(f.versions({ after: 0, signal: stop.signal }), 20));
        const a = await storeA.acquire('g', 'a~1', 10_000);
        const tokenA = { lease: 'g', term: a.lease.term };
        const cellA = new StateCell<Doc>({ store: storeA, group: 'g' });
        for (let n = 1; n <= 10; n++) await cellA.update(tokenA, () => ({ n, by: 'a' }));
        await storeA.release('g', 'a~1', tokenA.term);
        const b = await storeB.acquire('g', 'b~1', 10_000);
        const tokenB = { lease: 'g', term: b.lease.term };
        const cellB = new StateCell<Doc>({ store: storeB, group: 'g' });
        // The fence moves when the new term first writes under the group (any fenced write does;
        // before that, term 1 is still the highest accepted). From then on b and the zombie a race
        // for every version: only b ever writes.
        await cellB.update(tokenB, () => ({ n: 11, by: 'b' }));
        for (let n = 12; n <= 20; n++) {
          const [byB, byA] = await Promise.allSettled([cellB.update(tokenB, () => ({ n, by: 'b' })), cellA.update(tokenA, () => ({ n, by: 'zombie' }))]);
          expect(byB.status).toBe('fulfilled');
          expect(byA.status === 'rejected' && byA.reason instanceof StaleTermError).toBe(true);
        }
        const expected = Array.from({ length: 20 }, (_, i) => ({ version: i + 1, document: { n: i + 1, by: i < 10 ? 'a' : 'b' }, term: i < 10 ? tokenA.term : tokenB.term, lease: 'g' }));
        for (const f of seen) expect(await f).toEqual(expected);
      } finally {
        stop.abort();
        await cleanup();
      }
    });
  });
}

// Push: a follower on its own connection, polling once a minute, hears each new version from the
// store's watchStream (NOTIFY on PostgreSQL, data_version on a SQLite file) long before its poll.
// MySQL has no push and is left out (its followers poll).
for (const target of shared.filter((t) => !t.name.startsWith('MySQL'))) {
  describe(`StateCell push: ${target.name}`, () => {
    it('a follower polling once a minute sees each version from another connection within seconds', { timeout: 30_000 }, async () => {
      const { connect, cleanup } = await target.open();
      const stop = new AbortController();
      try {
        const leaderStore = connect();
        const follower = new StateCell<Doc>({ store: connect(), group: 'g', pollMs: 60_000 });
        const seen: number[] = [];
        const errors: Error[] = [];
        follower.subscribe((v) => void seen.push(v.version), { after: 0, signal: stop.signal, onError: (e) => errors.push(e) });
        const a = await leaderStore.acquire('g', 'a~1', 10_000);
        const token = { lease: 'g', term: a.lease.term };
        const cell = new StateCell<Doc>({ store: leaderStore, group: 'g' });
        for (let n = 1; n <= 3; n++) {
          await cell.update(token, () => ({ n, by: 'a' }));
          await until(() => seen.length === n, 10_000);
        }
        expect(seen).toEqual([1, 2, 3]);
        expect(errors).toEqual([]);
      } finally {
        stop.abort();
        await cleanup();
      }
    });
  });
}
