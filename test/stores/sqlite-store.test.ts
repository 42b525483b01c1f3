/**
 * SQLite-specific behaviour beyond the contract suite: the synchronous driver must not starve
 * timers, opening an existing database must not need the write lock, and opening a new one waits
 * for another process that holds its lock longer than a write's busy timeout.
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { openDatabase } from '../../src/stores/sqlite/driver.js';
import { afterEach, describe, expect, it } from 'vitest';
import { StoreUnavailableError } from '../../src/index.js';
import { SqliteStore } from '../../src/stores/sqlite/index.js';
import { fixturePath } from '../fixtures/harness.js';
import { openTestSqlite } from '../fixtures/sqlite-compat.js';

const dirs: string[] = [];
afterEach(() => {
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});
function dbPath(): string {
  const dir = mkdtempSync(join(tmpdir(), 'tenure-sqlite-'));
  dirs.push(dir);
  return join(dir, 'tenure.db');
}

describe('SqliteStore', () => {
  it('migrates a version 1 file (entries without append times): read-only it reads them with time 0, a writable open gives them the migration time', async () => {
    const path = dbPath();
    const old = new SqliteStore({ path });
    const { lease } = await old.acquire('g', 'a~1', 60_000);
    await old.appendFenced({ lease: 'g', term: lease.term }, 's', 'one');
    await old.close();
    const raw = openTestSqlite(path);
    raw.exec('ALTER TABLE tenure_streams DROP COLUMN appended_at');
    raw.exec("UPDATE tenure_schema SET value = '1' WHERE key = 'version'");
    raw.close();
    const reader = new SqliteStore({ path, readOnly: true });
    expect(await reader.readStream('s')).toEqual([{ stream: 's', seq: 1, lease: 'g', term: lease.term, payload: 'one', appendedAt: 0 }]);
    await reader.close();
    const t0 = Date.now();
    const store = new SqliteStore({ path });
    const [one] = await store.readStream('s');
    expect(one!.appendedAt).toBeGreaterThanOrEqual(t0);
    expect(one!.appendedAt).toBeLessThanOrEqual(Date.now());
    expect(await store.appendFenced({ lease: 'g', term: lease.term }, 's', 'two')).toBe(2);
    const head = await store.streamHead('s');
    expect(head.seq).toBe(2);
    expect((await store.readStream('s'))[1]!.appendedAt).toBeLessThanOrEqual(head.nowMs);
    await store.close();
    const check = openTestSqlite(path, { readonly: true });
    expect(check.prepare("SELECT value FROM tenure_schema WHERE key = 'version'").get()).toEqual({ value: '2' });
    check.close();
  });

  it('keeps two in-memory databases apart: an append to one is not told to the watcher of the other', async () => {
    const a = new SqliteStore({ path: ':memory:' });
    const b = new SqliteStore({ path: ':memory:' });
    const heads: number[] = [];
    const stop = b.watchStream('s', (h) => heads.push(h));
    const { lease } = await a.acquire('g', 'a~1', 60_000);
    await a.appendFenced({ lease: 'g', term: lease.term }, 's', 'one');
    await new Promise((r) => setTimeout(r, 60));
    expect(heads).toEqual([]);
    stop();
    await a.close();
    await b.close();
  });

  it('tells a stream watcher of appends by another store in this process at once, and of another connection through data_version', async () => {
    const path = dbPath();
    const writer = new SqliteStore({ path });
    const watcher = new SqliteStore({ path, pollMs: 10 });
    const { lease } = await writer.acquire('g', 'a~1', 60_000);
    const heads: number[] = [];
    const stop = watcher.watchStream('s', (h) => heads.push(h));
    await writer.appendFenced({ lease: 'g', term: lease.term }, 's', 'one');
    await new Promise((r) => setImmediate(r));
    expect(heads).toEqual([1]); // in-process: told in the same turn, no poll
    // Another connection (as another process would) writes entry 2 by hand.
    const raw = openTestSqlite(path);
    raw.prepare("INSERT INTO tenure_streams (stream, seq, lease, term, payload, appended_at) VALUES ('s', 2, 'g', ?, 'two', ?)").run(lease.term, Date.now());
    raw.close();
    const until = performance.now() + 2000;
    while (!heads.includes(2) && performance.now() < until) await new Promise((r) => setTimeout(r, 5));
    expect(heads).toEqual([1, 2]);
    stop();
    await writer.appendFenced({ lease: 'g', term: lease.term }, 's', 'three');
    await new Promise((r) => setTimeout(r, 50));
    expect(heads).toEqual([1, 2]);
    await writer.close();
    await watcher.close();
  });

  it("tells a lease watcher of a whole hold by another connection between two of its polls, as a release (a loser of the race to it would otherwise sleep out the hold's TTL)", async () => {
    const path = dbPath();
    const watcher = new SqliteStore({ path, pollMs: 150 });
    const holder = new SqliteStore({ path });
    const seen: (string | null)[] = [];
    const stop = watcher.watch('g', (lease) => seen.push(lease ? `${lease.owner}@${lease.term}` : null));
    await new Promise((r) => setTimeout(r, 400)); // a poll or two: the name looked at, free
    expect(seen).toEqual([]);
    // Taken and let go within one poll interval (synchronous driver: microseconds apart).
    const { lease } = await holder.acquire('g', 'b~1', 60_000);
    await holder.release('g', 'b~1', lease.term);
    const until = performance.now() + 2000;
    while (seen.length === 0 && performance.now() < until) await new Promise((r) => setTimeout(r, 10));
    expect(seen).toEqual([null]);
    // Still free at that term: nothing more to tell.
    await new Promise((r) => setTimeout(r, 400));
    expect(seen).toEqual([null]);
    stop();
    await holder.close();
    await watcher.close();
  });

  it('lets timers fire while leader work appends in a tight loop (the deadline timer must not starve)', async () => {
    const store = new SqliteStore({ path: dbPath() });
    const { lease } = await store.acquire('g', 'a~1', 10_000);
    let timerFiredAfter: number | null = null;
    const started = performance.now();
    setTimeout(() => (timerFiredAfter = performance.now() - started), 20);
    let appends = 0;
    while (timerFiredAfter === null && performance.now() - started < 3000) {
      await store.appendFenced({ lease: 'g', term: lease.term }, 's', 'x');
      appends++;
    }
    expect(timerFiredAfter).not.toBeNull();
    expect(timerFiredAfter!).toBeLessThan(1000);
    expect(appends).toBeGreaterThan(0);
    await store.close();
  });

  it('waits for a locked database without blocking the event loop, then fails only at its timeout', async () => {
    const path = dbPath();
    const store = new SqliteStore({ path, timeoutMs: 5000 });
    const quick = new SqliteStore({ path, timeoutMs: 300 });
    const { lease } = await store.acquire('g', 'a~1', 10_000);
    const other = openDatabase(path).db;
    // Timer lag while the calls wait: the elector's deadline timer must fire on time.
    let last = performance.now();
    let worstLagMs = 0;
    const ticker = setInterval(() => {
      const now = performance.now();
      worstLagMs = Math.max(worstLagMs, now - last - 5);
      last = now;
    }, 5);
    try {
      other.exec('BEGIN IMMEDIATE');
      const started = performance.now();
      setTimeout(() => other.exec('ROLLBACK'), 800);
      // Held longer than SQLite's old 250 ms busy timeout: contention is waiting, not an error.
      const [renewed, appended, timedOut] = await Promise.allSettled([
        store.renew('g', 'a~1', lease.term, 10_000),
        store.appendFenced({ lease: 'g', term: lease.term }, 's', 'x'),
        quick.acquire('h', 'b~1', 1000),
      ]);
      expect(renewed.status === 'fulfilled' && renewed.value.renewed).toBe(true);
      expect(appended).toEqual({ status: 'fulfilled', value: 1 });
      expect(performance.now() - started).toBeGreaterThanOrEqual(750);
      // A call whose own timeout runs out first fails as any timed-out call does, having written nothing.
      expect(timedOut.status).toBe('rejected');
      expect((timedOut as PromiseRejectedResult).reason).toBeInstanceOf(StoreUnavailableError);
      expect(String((timedOut as PromiseRejectedResult).reason)).toMatch(/locked by other processes for 300 ms; nothing was written/);
      expect(await store.read('h')).toBeNull();
      expect(worstLagMs).toBeLessThan(100);
    } finally {
      clearInterval(ticker);
      other.close();
      await store.close();
      await quick.close();
    }
  });

  it('opens a new database that another process holds locked for longer than the busy timeout', async () => {
    const path = dbPath();
    // Another process takes the new file's write lock first (as the first of several nodes started
    // together does while it creates the tables) and keeps it 1.5 s, on a machine under load.
    const holder = spawn(process.execPath, [fixturePath('chaos-sqlite-lock'), path, '1500'], { stdio: ['ignore', 'pipe', 'inherit'] });
    const exited = new Promise<number | null>((r) => holder.once('exit', (code) => r(code)));
    await new Promise<void>((resolve, reject) => {
      holder.stdout.on('data', (d: Buffer) => (d.toString().startsWith('locked') ? resolve() : reject(new Error(d.toString()))));
      holder.once('exit', () => reject(new Error('the lock holder exited early')));
    });
    const store = new SqliteStore({ path, busyTimeoutMs: 50 }); // waits for the lock instead of failing
    expect((await store.acquire('g', 'a~1', 5000)).lease.term).toBe(1);
    await store.close();
    expect(await exited).toBe(0);
  });

  it('opens an existing database while another process holds the write lock', async () => {
    const path = dbPath();
    await new SqliteStore({ path }).close();
    const other = openDatabase(path).db;
    other.exec('BEGIN IMMEDIATE');
    try {
      const store = new SqliteStore({ path, busyTimeoutMs: 50 });
      expect(await store.read('g')).toBeNull();
      await store.close();
    } finally {
      other.exec('ROLLBACK');
      other.close();
    }
  });
});
