/**
 * SQLite-specific behaviour beyond the contract suite: the synchronous driver must not starve
 * timers, and opening an existing database must not need the write lock.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { openDatabase } from '../../src/stores/sqlite/driver.js';
import { afterEach, describe, expect, it } from 'vitest';
import { SqliteStore } from '../../src/stores/sqlite/index.js';

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
