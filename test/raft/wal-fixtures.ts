/** Helpers shared by the WAL tests: temporary directories, entries, a counting and failing fs seam. */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Entry } from '../../src/raft/core/index.js';
import { nodeFs, type WalFs } from '../../src/raft/wal/index.js';

const enc = new TextEncoder();
export const ent = (index: number, term: number, data = `e${index}`): Entry => ({ index, term, type: 'normal', data: enc.encode(data) });
export const ents = (from: number, to: number, term: number, size?: number): Entry[] => {
  const out: Entry[] = [];
  for (let i = from; i <= to; i++) out.push(size === undefined ? ent(i, term) : { index: i, term, type: 'normal', data: new Uint8Array(size).fill(i & 0xff) });
  return out;
};
export const text = (e: Entry): string => new TextDecoder().decode(e.data);

/** A fresh directory, removed by the returned cleanup. */
export function tempDir(): { dir: string; cleanup: () => void } {
  const dir = mkdtempSync(join(tmpdir(), 'tenure-wal-'));
  return { dir, cleanup: () => rmSync(dir, { recursive: true, force: true }) };
}

/** node:fs with call counters and an optional failure injected before a call. */
export class CountingFs implements WalFs {
  writes = 0;
  fdatasyncs = 0;
  fsyncs = 0;
  /** Called before each write; may throw to simulate a failure, or return a byte count to cut the write short. */
  beforeWrite: ((length: number) => number | undefined) | undefined;
  beforeFdatasync: (() => void) | undefined;

  openSync = (path: string, flags: string): number => nodeFs.openSync(path, flags);
  closeSync = (fd: number): void => nodeFs.closeSync(fd);
  writeSync = (fd: number, buf: Uint8Array, offset: number, length: number, position: number): number => {
    this.writes++;
    const cut = this.beforeWrite?.(length);
    if (cut !== undefined) return nodeFs.writeSync(fd, buf, offset, cut, position);
    return nodeFs.writeSync(fd, buf, offset, length, position);
  };
  fdatasyncSync = (fd: number): void => {
    this.fdatasyncs++;
    this.beforeFdatasync?.();
    nodeFs.fdatasyncSync(fd);
  };
  fsyncSync = (fd: number): void => {
    this.fsyncs++;
    nodeFs.fsyncSync(fd);
  };
  ftruncateSync = (fd: number, length: number): void => nodeFs.ftruncateSync(fd, length);
  readFileSync = (path: string): Buffer => nodeFs.readFileSync(path);
  readdirSync = (dir: string): string[] => nodeFs.readdirSync(dir);
  renameSync = (from: string, to: string): void => nodeFs.renameSync(from, to);
  unlinkSync = (path: string): void => nodeFs.unlinkSync(path);
  mkdirSync = (path: string): void => nodeFs.mkdirSync(path);

  reset(): void {
    this.writes = 0;
    this.fdatasyncs = 0;
    this.fsyncs = 0;
  }
}

export const noSpace = (): Error => Object.assign(new Error('ENOSPC: no space left on device, write'), { code: 'ENOSPC', errno: -28 });
