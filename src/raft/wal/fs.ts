/**
 * The file-system calls the WAL and the snapshot files make, as one small seam. The default is
 * node:fs's synchronous API: a save is one pwrite and one fdatasync on the calling thread, with
 * no thread-pool round trip or promise per call (the Ready loop waits for durability before it
 * sends anything anyway). Tests pass a wrapper that counts calls or fails them (ENOSPC, EIO).
 */
import * as fs from 'node:fs';

export interface WalFs {
  /** Opens `path` with node:fs flags (`r`, `r+`, `wx`); returns the descriptor. */
  openSync(path: string, flags: string): number;
  closeSync(fd: number): void;
  /** Writes `buf[offset, offset + length)` at file `position`; may write less (returns bytes written). */
  writeSync(fd: number, buf: Uint8Array, offset: number, length: number, position: number): number;
  fdatasyncSync(fd: number): void;
  fsyncSync(fd: number): void;
  ftruncateSync(fd: number, length: number): void;
  readFileSync(path: string): Buffer;
  /** Names of the entries of `dir`. */
  readdirSync(dir: string): string[];
  renameSync(from: string, to: string): void;
  unlinkSync(path: string): void;
  mkdirSync(path: string): void;
}

export const nodeFs: WalFs = {
  openSync: (path, flags) => fs.openSync(path, flags),
  closeSync: (fd) => fs.closeSync(fd),
  writeSync: (fd, buf, offset, length, position) => fs.writeSync(fd, buf, offset, length, position),
  fdatasyncSync: (fd) => fs.fdatasyncSync(fd),
  fsyncSync: (fd) => fs.fsyncSync(fd),
  ftruncateSync: (fd, length) => fs.ftruncateSync(fd, length),
  readFileSync: (path) => fs.readFileSync(path),
  readdirSync: (dir) => fs.readdirSync(dir),
  renameSync: (from, to) => fs.renameSync(from, to),
  unlinkSync: (path) => fs.unlinkSync(path),
  mkdirSync: (path) => void fs.mkdirSync(path, { recursive: true }),
};

/** Makes a rename or unlink in `dir` durable (the directory entry itself is fsynced). */
export function syncDir(f: WalFs, dir: string): void {
  const fd = f.openSync(dir, 'r');
  try {
    f.fsyncSync(fd);
  } finally {
    f.closeSync(fd);
  }
}

/**
 * Writes all of `buf[0, length)` at `position`, looping over short writes. On failure the bytes
 * already written stay in the file: the caller truncates them away.
 */
export function writeFully(f: WalFs, fd: number, buf: Uint8Array, length: number, position: number): void {
  let done = 0;
  while (done < length) {
    const n = f.writeSync(fd, buf, done, length - done, position + done);
    if (n <= 0) throw Object.assign(new Error(`write returned ${n}`), { code: 'EIO' });
    done += n;
  }
}
