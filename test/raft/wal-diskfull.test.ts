import { execFileSync } from 'node:child_process';
import { mkdirSync, readdirSync, rmSync, statSync, unlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import type { ConfState } from '../../src/raft/core/index.js';
import { DiskFullError, DurableStorage } from '../../src/raft/wal/index.js';
import { CountingFs, ent, ents, noSpace, tempDir } from './wal-fixtures.js';

let cleanups: (() => void)[] = [];
afterEach(() => {
  for (const c of cleanups) c();
  cleanups = [];
});
const cs3: ConfState = { voters: [1, 2, 3], learners: [], votersOutgoing: [], learnersNext: [], autoLeave: false };
const bootstrap = (s: DurableStorage): void =>
  s.save({ snapshot: { metadata: { index: 1, term: 1, confState: cs3 }, data: new Uint8Array() }, hardState: { term: 1, vote: 0, commit: 1 }, entries: [] });
const walSize = (d: string): number => readdirSync(join(d, 'wal')).reduce((n, f) => n + statSync(join(d, 'wal', f)).size, 0);

/** Whether this process may mount a tmpfs (root in a container that allows it). */
function mountTmpfs(at: string, size: string): string | undefined {
  try {
    execFileSync('mount', ['-t', 'tmpfs', '-o', `size=${size}`, 'tmpfs', at], { stdio: 'pipe' });
    return undefined;
  } catch (err) {
    return (err as { stderr?: Buffer }).stderr?.toString().trim() || (err as Error).message;
  }
}

describe('disk full (injected through the fs seam)', () => {
  it('ENOSPC after a partial write: DiskFullError, the partial bytes cut, memory unchanged, the retry succeeds', () => {
    const t = tempDir();
    cleanups.push(t.cleanup);
    const fs = new CountingFs();
    const s = DurableStorage.open({ dir: t.dir, fs });
    cleanups.unshift(() => s.close());
    bootstrap(s);
    s.save({ hardState: { term: 2, vote: 1, commit: 1 }, entries: ents(2, 10, 2) });
    const size = walSize(t.dir);
    let calls = 0;
    fs.beforeWrite = (length) => {
      calls++;
      if (calls === 1) return Math.floor(length / 2); // a short write: half of it lands
      throw noSpace();
    };
    const rd = { hardState: { term: 2, vote: 1, commit: 10 }, entries: ents(11, 40, 2, 100) };
    let err: unknown;
    try {
      s.save(rd);
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(DiskFullError);
    expect((err as DiskFullError).code).toBe('DISK_FULL');
    expect(walSize(t.dir)).toBe(size);
    expect([s.lastIndex(), s.initialState().hardState.commit]).toEqual([10, 1]);

    fs.beforeWrite = undefined;
    s.save(rd);
    expect(s.lastIndex()).toBe(40);
    s.close();
    const r = DurableStorage.open({ dir: t.dir });
    cleanups.unshift(() => r.close());
    expect([r.firstIndex(), r.lastIndex(), r.initialState().hardState.commit]).toEqual([2, 40, 10]);
  });

  it('ENOSPC from fdatasync (delayed allocation) is a DiskFullError too, with the write cut back', () => {
    const t = tempDir();
    cleanups.push(t.cleanup);
    const fs = new CountingFs();
    const s = DurableStorage.open({ dir: t.dir, fs });
    cleanups.unshift(() => s.close());
    bootstrap(s);
    const size = walSize(t.dir);
    fs.beforeFdatasync = () => {
      throw noSpace();
    };
    expect(() => s.save({ hardState: { term: 2, vote: 1, commit: 1 }, entries: [ent(2, 2)] })).toThrow(DiskFullError);
    expect(walSize(t.dir)).toBe(size);
    fs.beforeFdatasync = undefined;
    s.save({ hardState: { term: 2, vote: 1, commit: 1 }, entries: [ent(2, 2)] });
    expect(s.lastIndex()).toBe(2);
  });
});

describe('disk full (a real 2 MiB tmpfs)', () => {
  it('fills up with a DiskFullError, keeps every saved entry, and writes again once space returns', (ctx) => {
    const t = tempDir();
    cleanups.push(t.cleanup);
    const mnt = join(t.dir, 'mnt');
    mkdirSync(mnt);
    const refused = mountTmpfs(mnt, '2m');
    if (refused !== undefined) {
      ctx.skip(`cannot mount a tmpfs here (${refused}); the injected-fs tests above cover the logic`);
      return;
    }
    cleanups.unshift(() => execFileSync('umount', [mnt]));
    const filler = join(mnt, 'filler');
    writeFileSync(filler, Buffer.alloc(512 * 1024));
    const d = join(mnt, 'node');
    const lines: string[] = [];
    let s = DurableStorage.open({ dir: d, segmentBytes: 256 * 1024, log: (l) => lines.push(l) });
    // Closed before the unmount, whatever fails: an open descriptor would keep the mount busy.
    cleanups.unshift(() => s.close());
    bootstrap(s);
    let next = 2;
    let full: unknown;
    for (; next < 1000; next++) {
      try {
        s.save({ hardState: { term: 2, vote: 1, commit: next - 1 }, entries: [ent(next, 2, 'x'.repeat(32 * 1024))] });
      } catch (e) {
        full = e;
        break;
      }
    }
    expect(full).toBeInstanceOf(DiskFullError);
    const saved = next - 1;
    expect(s.lastIndex()).toBe(saved);
    // Still full: the same save fails again, cleanly.
    expect(() => s.save({ hardState: { term: 2, vote: 1, commit: next - 1 }, entries: [ent(next, 2, 'x'.repeat(32 * 1024))] })).toThrow(DiskFullError);
    // A reopen while full sees exactly what was saved.
    s.close();
    s = DurableStorage.open({ dir: d, segmentBytes: 256 * 1024 });
    expect(s.lastIndex()).toBe(saved);
    // Space returns.
    unlinkSync(filler);
    s.save({ hardState: { term: 2, vote: 1, commit: next - 1 }, entries: [ent(next, 2, 'x'.repeat(32 * 1024))] });
    s.save({ hardState: { term: 2, vote: 1, commit: next }, entries: [ent(next + 1, 2, 'y')] });
    s.close();
    s = DurableStorage.open({ dir: d, segmentBytes: 256 * 1024 });
    expect([s.lastIndex(), s.initialState().hardState.commit]).toEqual([next + 1, next]);
    s.close();
    rmSync(d, { recursive: true, force: true });
  });
});

describe('disk full while starting a new segment', () => {
  it('a segment that cannot be created is a DiskFullError that leaves no file behind; the save succeeds later', () => {
    const t = tempDir();
    cleanups.push(t.cleanup);
    const fs = new CountingFs();
    const s = DurableStorage.open({ dir: t.dir, fs, segmentBytes: 1024 });
    cleanups.unshift(() => s.close());
    bootstrap(s);
    let next = 2;
    while (s.segmentNames().length === 1 && readdirSync(join(t.dir, 'wal')).every((n) => statSync(join(t.dir, 'wal', n)).size < 1024)) {
      s.save({ hardState: { term: 2, vote: 1, commit: next - 1 }, entries: [ent(next, 2, 'x'.repeat(100))] });
      next++;
    }
    const files = readdirSync(join(t.dir, 'wal')).sort();
    fs.beforeWrite = () => {
      throw noSpace();
    };
    const rd = { hardState: { term: 2, vote: 1, commit: next - 1 }, entries: [ent(next, 2)] };
    expect(() => s.save(rd)).toThrow(/disk full: creating segment/);
    expect(readdirSync(join(t.dir, 'wal')).sort()).toEqual(files);
    expect(s.lastIndex()).toBe(next - 1);
    fs.beforeWrite = undefined;
    s.save(rd);
    expect(s.segmentNames()).toHaveLength(2);
    s.close();
    const r = DurableStorage.open({ dir: t.dir, segmentBytes: 1024 });
    cleanups.unshift(() => r.close());
    expect(r.lastIndex()).toBe(next);
  });
});

describe('disk full while writing a snapshot', () => {
  it('createSnapshot fails with DiskFullError, leaves no partial file and keeps the old snapshot; it succeeds later', () => {
    const t = tempDir();
    cleanups.push(t.cleanup);
    const fs = new CountingFs();
    const s = DurableStorage.open({ dir: t.dir, fs });
    cleanups.unshift(() => s.close());
    bootstrap(s);
    s.save({ hardState: { term: 2, vote: 1, commit: 20 }, entries: ents(2, 20, 2) });
    const snapFiles = readdirSync(join(t.dir, 'snap')).sort();
    fs.beforeWrite = () => {
      throw noSpace();
    };
    expect(() => s.createSnapshot(15, cs3, new Uint8Array(4096))).toThrow(/disk full: writing snapshot/);
    expect(readdirSync(join(t.dir, 'snap')).sort()).toEqual(snapFiles);
    expect(s.snapshot().metadata.index).toBe(1);
    fs.beforeWrite = undefined;
    s.createSnapshot(15, cs3, new Uint8Array(4096));
    s.compact(15);
    s.close();
    const r = DurableStorage.open({ dir: t.dir });
    cleanups.unshift(() => r.close());
    expect([r.snapshot().metadata.index, r.firstIndex(), r.lastIndex()]).toEqual([15, 16, 20]);
  });
});
