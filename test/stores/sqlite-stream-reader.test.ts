/**
 * SQLite catch-up reads on a worker thread (src/stores/sqlite/stream-reader.ts): a read that
 * continues a full page is served by a worker with its own connection, while the main thread
 * applies the page before it. These tests hold it to the main thread's answers: the same entries,
 * the same refusals of a row tenure cannot use, the main thread taking over when the worker
 * cannot serve or dies, and nothing left running after close.
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { ClosedError, Follower, StoreDataError, sqliteSink } from '../../src/index.js';
import type { StreamEntry } from '../../src/index.js';
import { SqliteStore } from '../../src/stores/sqlite/index.js';
import { StreamReaderThread } from '../../src/stores/sqlite/stream-reader.js';
import { fixturePath } from '../fixtures/harness.js';
import { openTestSqlite } from '../fixtures/sqlite-compat.js';

const dirs: string[] = [];
const stores: SqliteStore[] = [];
afterEach(async () => {
  for (const s of stores.splice(0)) await s.close();
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});
function dbPath(): string {
  const dir = mkdtempSync(join(tmpdir(), 'tenure-sqlite-reader-'));
  dirs.push(dir);
  return join(dir, 'tenure.db');
}
function open(path: string): SqliteStore {
  const s = new SqliteStore({ path });
  stores.push(s);
  return s;
}
/** The store's worker-thread reader (private: these tests check which thread answered). */
function readerOf(store: SqliteStore): StreamReaderThread {
  const reader = (store as unknown as { reader: StreamReaderThread | null }).reader;
  if (!reader) throw new Error('no reader thread');
  return reader;
}

const PAGE = 300;

/** `n` entries on stream `s`, by one leader and then the next (terms rise half-way), payloads of every shape. */
async function fill(store: SqliteStore, n: number): Promise<void> {
  const shapes = ['', 'plain', 'ünïcödé ✓', '𝄞 surrogate pair 🎉', '{"json":[1,2,3]}', 'x'.repeat(2000), 'line\nbreak\ttab', "quote ' \" \\"];
  let token = { lease: 'a', term: (await store.acquire('a', 'one', 600_000)).lease.term };
  for (let i = 1; i <= n; i++) {
    if (i === Math.floor(n / 2)) {
      await store.release('a', 'one', token.term);
      token = { lease: 'a', term: (await store.acquire('a', 'two', 600_000)).lease.term };
    }
    await store.appendFenced(token, 's', `${i}:${shapes[i % shapes.length]!}`);
  }
}

/** Pages of `limit` from the start, each continuing the last (a catch-up), waiting for the worker after the first. */
async function catchUp(store: SqliteStore, limit: number): Promise<StreamEntry[]> {
  const out: StreamEntry[] = [];
  for (;;) {
    const page = await store.readStream('s', { after: out.at(-1)?.seq ?? 0, limit });
    out.push(...page);
    if (out.length === page.length && page.length === limit) expect(await readerOf(store).settled()).toBe(true);
    if (page.length < limit) return out;
  }
}

/** The same entries read on the main thread: pages below the size the worker takes. */
async function mainThreadRead(store: SqliteStore): Promise<StreamEntry[]> {
  const out: StreamEntry[] = [];
  for (;;) {
    const page = await store.readStream('s', { after: out.at(-1)?.seq ?? 0, limit: 100 });
    out.push(...page);
    if (page.length < 100) return out;
  }
}

describe('SQLite catch-up reads on a worker thread', () => {
  it('serves the pages after a full one and answers exactly what the main thread reads', async () => {
    const path = dbPath();
    const writer = open(path);
    await fill(writer, 2000);
    const store = open(path);
    const read = await catchUp(store, PAGE);
    expect(readerOf(store).served.pages).toBeGreaterThanOrEqual(5); // pages 2..7 of 7
    const expected = await mainThreadRead(open(path));
    expect(read).toHaveLength(2000);
    expect(read).toEqual(expected);
    expect(read.map((e) => e.seq)).toEqual(Array.from({ length: 2000 }, (_, i) => i + 1));
    expect(new Set(read.map((e) => e.term)).size).toBe(2);
    expect(read.every((e) => e.appendedAt > 0)).toBe(true);
  });

  it('keeps one-entry reads and pages that do not follow a full one on the main thread', async () => {
    const path = dbPath();
    const writer = open(path);
    await fill(writer, 700);
    const store = open(path);
    await store.readStream('s', { after: 0, limit: PAGE }); // full: the worker starts
    expect(await readerOf(store).settled()).toBe(true);
    await store.readStream('s', { after: 10, limit: PAGE }); // does not continue it
    await store.readStream('s', { after: 600, limit: 1 }); // small
    expect(readerOf(store).served.pages).toBe(0);
    await store.readStream('s', { after: 600, limit: PAGE }); // 100 entries: not full
    await store.readStream('s', { after: 700, limit: PAGE }); // continues nothing full
    expect(readerOf(store).served.pages).toBe(0);
  });

  it('refuses a hand-written row the worker read exactly as the main thread does', async () => {
    const path = dbPath();
    await fill(open(path), 1000);
    const cases: [string, string][] = [
      ['term', '9007199254740993'], // 2^53 + 1: beyond the safe integers
      ['term', "'abc'"],
      ['term', '1.5'],
      ['seq', '700.5'],
    ];
    for (const [column, value] of cases) {
      const raw = openTestSqlite(path);
      raw.exec(`UPDATE tenure_streams SET ${column} = ${value} WHERE stream = 's' AND seq = 700`);
      raw.close();
      const mainErr = await mainThreadRead(open(path)).catch((e: unknown) => e);
      expect(mainErr).toBeInstanceOf(StoreDataError);
      const store = open(path);
      const workerErr = await catchUp(store, PAGE).catch((e: unknown) => e);
      expect(workerErr).toBeInstanceOf(StoreDataError);
      expect((workerErr as Error).message).toBe((mainErr as Error).message);
      expect(readerOf(store).served.pages).toBeGreaterThanOrEqual(1); // the page with row 700 came from the worker
      const fix = openTestSqlite(path);
      fix.exec(`UPDATE tenure_streams SET ${column} = ${column === 'seq' ? 700 : '(SELECT term FROM tenure_streams WHERE stream = \'s\' AND seq = 699)'} WHERE stream = 's' AND seq = ${column === 'seq' ? 700.5 : 700}`);
      fix.close();
    }
    const healed = await catchUp(open(path), PAGE);
    expect(healed.map((e) => e.seq)).toEqual(Array.from({ length: 1000 }, (_, i) => i + 1));
  });

  it('reads hand-written append times (text, a fraction, negative) as the main thread does', async () => {
    const path = dbPath();
    await fill(open(path), 1000);
    const raw = openTestSqlite(path);
    raw.exec("UPDATE tenure_streams SET appended_at = 'garbage' WHERE stream = 's' AND seq = 700");
    raw.exec("UPDATE tenure_streams SET appended_at = 1700000000000.7 WHERE stream = 's' AND seq = 701");
    raw.exec("UPDATE tenure_streams SET appended_at = -5 WHERE stream = 's' AND seq = 702");
    raw.close();
    const store = open(path);
    const read = await catchUp(store, PAGE);
    expect(readerOf(store).served.pages).toBeGreaterThanOrEqual(1);
    expect(read).toEqual(await mainThreadRead(open(path)));
    expect(read.slice(699, 702).map((e) => e.appendedAt)).toEqual([0, 1_700_000_000_000, 0]);
  });

  it('reads on the main thread when the worker dies, the page it was asked for included', async () => {
    const path = dbPath();
    await fill(open(path), 1500);
    const store = open(path);
    const reader = readerOf(store);
    const first = await store.readStream('s', { after: 0, limit: PAGE });
    expect(await reader.settled()).toBe(true);
    const asked = store.readStream('s', { after: first.at(-1)!.seq, limit: PAGE });
    await (reader as unknown as { worker: { terminate(): Promise<number> } }).worker.terminate();
    const second = await asked;
    expect(second.map((e) => e.seq)).toEqual(Array.from({ length: PAGE }, (_, i) => PAGE + i + 1));
    expect(reader.served.handedBack + reader.served.pages).toBe(1);
    expect(reader.usable).toBe(false);
    const rest = await store.readStream('s', { after: second.at(-1)!.seq, limit: 2000 });
    expect(rest.map((e) => e.seq)).toEqual(Array.from({ length: 1500 - 2 * PAGE }, (_, i) => 2 * PAGE + i + 1));
  });

  it('a worker that cannot open its file leaves every read to the main thread', async () => {
    const reader = new StreamReaderThread(join(dbPath(), 'no-such-dir', 'x.db'), 'better-sqlite3', 'SELECT 1', 1000);
    expect(await reader.settled()).toBe(false);
    expect(reader.usable).toBe(false);
    await expect(reader.read('s', 0, PAGE)).resolves.toBeNull();
    await reader.close();
    // And a file without tenure's tables (its statement cannot be prepared): the same.
    const bare = dbPath();
    openTestSqlite(bare).close();
    const other = new StreamReaderThread(bare, 'better-sqlite3', 'SELECT seq FROM tenure_streams', 1000);
    expect(await other.settled()).toBe(false);
    await other.close();
  });

  it('close refuses a read still waiting for the worker and stops the thread', async () => {
    const path = dbPath();
    await fill(open(path), 700);
    const store = new SqliteStore({ path });
    const reader = readerOf(store);
    const first = await store.readStream('s', { after: 0, limit: PAGE });
    expect(await reader.settled()).toBe(true);
    const worker = (reader as unknown as { worker: { threadId: number; once(e: 'exit', f: () => void): void } }).worker;
    const exited = new Promise<void>((resolve) => worker.once('exit', resolve));
    const asked = store.readStream('s', { after: first.at(-1)!.seq, limit: PAGE }).then(() => null, (err: unknown) => err);
    await new Promise((r) => setImmediate(r)); // the read is with the worker
    await store.close();
    expect(await asked).toBeInstanceOf(ClosedError);
    await exited;
    await expect(store.readStream('s', { after: 0, limit: PAGE })).rejects.toBeInstanceOf(ClosedError);
  });

  it('a read waiting for the worker keeps the process alive, an idle worker does not (a script that leaves its store open ends)', async () => {
    const path = dbPath();
    await fill(open(path), 700);
    const child = spawn(process.execPath, [fixturePath('sqlite-worker-read'), path], { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    let err = '';
    child.stdout.on('data', (d: Buffer) => (out += d.toString()));
    child.stderr.on('data', (d: Buffer) => (err += d.toString()));
    const kill = setTimeout(() => child.kill('SIGKILL'), 15_000);
    const code = await new Promise<number | null>((resolve) => child.once('exit', (c) => resolve(c)));
    clearTimeout(kill);
    expect({ code, err }).toEqual({ code: 0, err: '' }); // null: killed, still running 15 s on
    expect(JSON.parse(out)).toEqual({ entries: 600, pages: 1 });
  });

  it('a follower catching up applies every entry once, in order, with pages from the worker', { timeout: 60_000 }, async () => {
    const path = dbPath();
    const writer = open(path);
    await fill(writer, 400);
    // Then many more by SQL, quickly, with the leader's token on each (as a leader's appends would leave them).
    const raw = openTestSqlite(path);
    const last = raw.prepare("SELECT lease, term FROM tenure_streams WHERE stream = 's' ORDER BY seq DESC LIMIT 1").get() as { lease: string; term: number };
    const ins = raw.prepare("INSERT INTO tenure_streams (stream, seq, lease, term, payload, appended_at) VALUES ('s', ?, ?, ?, ?, ?)");
    raw.transaction(() => {
      for (let seq = 401; seq <= 20_000; seq++) ins.run(seq, last.lease, last.term, `bulk ${seq}`, Date.now());
    })();
    raw.close();
    const store = open(path);
    const proj = openTestSqlite(join(dbPath(), '..', 'projection.db'));
    proj.exec('CREATE TABLE applied (seq INTEGER PRIMARY KEY, payload TEXT NOT NULL)');
    const insert = proj.prepare('INSERT INTO applied (seq, payload) VALUES (?, ?)');
    const follower = new Follower({ store, stream: 's', sink: sqliteSink(proj), batchSize: 500, pollMs: 5, applyBatch: (entries) => void entries.forEach((e) => insert.run(e.seq, e.payload)) });
    const running = follower.start();
    await new Promise<void>((resolve) => follower.on('caught-up', () => resolve()));
    await follower.stop();
    await running;
    const applied = proj.prepare('SELECT seq, payload FROM applied ORDER BY seq').all() as { seq: number; payload: string }[];
    proj.close();
    expect(applied).toHaveLength(20_000);
    expect(applied.map((r) => r.seq)).toEqual(Array.from({ length: 20_000 }, (_, i) => i + 1));
    const logged = await mainThreadRead(open(path));
    expect(applied.map((r) => r.payload)).toEqual(logged.map((e) => e.payload));
    expect(readerOf(store).served.pages).toBeGreaterThan(0);
  });
});
