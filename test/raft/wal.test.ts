import { copyFileSync, mkdirSync, readdirSync, readFileSync, statSync, writeFileSync, truncateSync, unlinkSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import type { Entry, HardState } from '../../src/raft/core/index.js';
import { InvalidArgumentError } from '../../src/core/errors.js';
import { crc32c, mustSync, Wal, WalCorruptError, type WalOptions } from '../../src/raft/wal/index.js';
import { CountingFs, ent, ents, tempDir, text } from './wal-fixtures.js';

const enc = new TextEncoder();
let cleanups: (() => void)[] = [];
afterEach(() => {
  for (const c of cleanups) c();
  cleanups = [];
});
function dir(): string {
  const t = tempDir();
  cleanups.push(t.cleanup);
  return t.dir;
}

function open(options: WalOptions): { wal: Wal; replay: ReturnType<typeof Wal.open>['replay']; lines: string[] } {
  const lines: string[] = [];
  const { wal, replay } = Wal.open({ log: (l) => lines.push(l), ...options });
  cleanups.unshift(() => wal.close());
  return { wal, replay, lines };
}

const hs = (term: number, vote: number, commit: number): HardState => ({ term, vote, commit });
const indexes = (es: readonly Entry[]): number[] => es.map((e) => e.index);
const onlySegment = (d: string): string => {
  const names = readdirSync(d).filter((n) => n.endsWith('.wal'));
  expect(names).toHaveLength(1);
  return join(d, names[0]!);
};

describe('crc32c', () => {
  it('matches the standard test vectors (RFC 3720 B.4 and the check value)', () => {
    expect(crc32c(enc.encode('123456789'))).toBe(0xe3069283);
    expect(crc32c(new Uint8Array(32))).toBe(0x8a9136aa);
    expect(crc32c(new Uint8Array(32).fill(0xff))).toBe(0x62a8ab43);
    expect(crc32c(Uint8Array.from({ length: 32 }, (_, i) => i))).toBe(0x46dd794e);
    expect(crc32c(Uint8Array.from({ length: 32 }, (_, i) => 31 - i))).toBe(0x113fdb5c);
    expect(crc32c(new Uint8Array())).toBe(0);
  });

  it('gives the same answer in pieces, over ranges, and for every length and alignment as a byte-at-a-time reference', () => {
    const b = Uint8Array.from({ length: 1000 }, (_, i) => (i * 131 + 7) & 0xff);
    const whole = crc32c(b);
    expect(crc32c(b.subarray(377), crc32c(b.subarray(0, 377)))).toBe(whole);
    expect(crc32c(b, 0, 10, 500)).toBe(crc32c(b.subarray(10, 500)));
    const slow = (x: Uint8Array): number => {
      let c = ~0;
      for (const byte of x) {
        c ^= byte;
        for (let k = 0; k < 8; k++) c = c & 1 ? (c >>> 1) ^ 0x82f63b78 : c >>> 1;
      }
      return ~c >>> 0;
    };
    // Every length and alignment around both loops (bytes below 128, 16-byte words above).
    for (let at = 0; at < 5; at++) {
      for (let n = 0; n <= 300; n++) expect(crc32c(b.subarray(at, at + n))).toBe(slow(b.subarray(at, at + n)));
    }
  });
});

describe('mustSync (etcd rule)', () => {
  const prev = hs(3, 1, 10);
  it('syncs for entries, a new term or a new vote; not for a commit index alone or nothing', () => {
    expect(mustSync(undefined, prev, 1)).toBe(true);
    expect(mustSync(hs(4, 1, 10), prev, 0)).toBe(true);
    expect(mustSync(hs(3, 2, 10), prev, 0)).toBe(true);
    expect(mustSync(hs(3, 1, 11), prev, 0)).toBe(false);
    expect(mustSync(undefined, prev, 0)).toBe(false);
  });
});

describe('Wal', () => {
  it('round-trips entries of both types, hard state, empty data and terms and indexes past 2^32', () => {
    const d = dir();
    const big = 2 ** 40 + 3;
    const es: Entry[] = [
      { index: 1, term: 1, type: 'normal', data: new Uint8Array() },
      { index: 2, term: 1, type: 'confChange', data: enc.encode('{"t":"auto","c":[["addNode",4]]}') },
      { index: 3, term: big, type: 'normal', data: new Uint8Array(70000).fill(9) },
    ];
    const { wal } = open({ dir: d });
    wal.save(hs(big, 2, 2), es, true);
    wal.close();
    const { replay } = open({ dir: d });
    expect(replay.hardState).toEqual(hs(big, 2, 2));
    expect(replay.entries.map((e) => ({ ...e, data: [...e.data] }))).toEqual(es.map((e) => ({ ...e, data: [...e.data] })));
  });

  it('entries saved at an index at or below the last replace the tail on replay', () => {
    const d = dir();
    const { wal } = open({ dir: d });
    wal.save(hs(1, 1, 0), ents(1, 5, 1), true);
    wal.save(hs(2, 2, 2), [ent(3, 2, 'new3'), ent(4, 2, 'new4')], true);
    wal.save(undefined, [ent(5, 2, 'new5')], true);
    wal.save(hs(3, 3, 2), [ent(4, 3, 'newer4')], true);
    wal.close();
    const { replay } = open({ dir: d });
    expect(replay.entries.map((e) => [e.index, e.term, text(e)])).toEqual([
      [1, 1, 'e1'],
      [2, 1, 'e2'],
      [3, 2, 'new3'],
      [4, 3, 'newer4'],
    ]);
    expect(replay.hardState).toEqual(hs(3, 3, 2));
  });

  it('a rewrite of entries held in earlier segments replaces them on replay across segment boundaries', () => {
    const d = dir();
    const { wal } = open({ dir: d, segmentBytes: 1024 });
    for (let i = 1; i <= 50; i++) wal.save(hs(1, 1, 10), [ent(i, 1, 'a'.repeat(60))], true);
    expect(wal.segmentNames().length).toBeGreaterThan(2);
    wal.save(hs(2, 2, 10), ents(20, 25, 2), true);
    wal.save(hs(2, 2, 22), [ent(26, 2, 'tail')], true);
    wal.close();
    const { replay } = open({ dir: d, segmentBytes: 1024 });
    expect(indexes(replay.entries)).toEqual(Array.from({ length: 26 }, (_, i) => i + 1));
    expect(replay.entries.slice(18, 20).map((e) => e.term)).toEqual([1, 2]);
    expect(text(replay.entries[25]!)).toBe('tail');
  });

  it('group commit: one write and one fdatasync per save however many entries; a commit-only save does not sync', () => {
    const d = dir();
    const fs = new CountingFs();
    const { wal } = open({ dir: d, fs });
    fs.reset();
    wal.save(hs(1, 1, 0), ents(1, 500, 1), true);
    expect([fs.writes, fs.fdatasyncs]).toEqual([1, 1]);
    fs.reset();
    wal.save(hs(1, 1, 500), [], mustSync(hs(1, 1, 500), hs(1, 1, 0), 0));
    expect([fs.writes, fs.fdatasyncs]).toEqual([1, 0]);
    fs.reset();
    wal.save(undefined, [], false);
    expect([fs.writes, fs.fdatasyncs]).toEqual([0, 0]);
    wal.close();
    expect(open({ dir: d }).replay.hardState.commit).toBe(500);
  });

  it('rolls over to a new segment past segmentBytes, each new one headed by the hard state', () => {
    const d = dir();
    const { wal } = open({ dir: d, segmentBytes: 4096 });
    for (let i = 1; i <= 100; i++) wal.save(hs(1, 1, i - 1), [ent(i, 1, 'x'.repeat(200))], true);
    const names = wal.segmentNames();
    expect(names.length).toBeGreaterThan(4);
    expect(names[0]).toBe('0000000000000000-0000000000000001.wal');
    // Each name carries the next sequence number and the index its first new entry takes.
    for (let i = 1; i < names.length; i++) {
      const [seq, first] = names[i]!.replace('.wal', '').split('-').map((h) => parseInt(h, 16));
      expect(seq).toBe(i);
      expect(first).toBeGreaterThan(1);
    }
    for (const n of names.slice(0, -1)) expect(statSync(join(d, n)).size).toBeGreaterThanOrEqual(4096);
    wal.close();
    const { replay } = open({ dir: d, segmentBytes: 4096 });
    expect(indexes(replay.entries)).toEqual(Array.from({ length: 100 }, (_, i) => i + 1));
    expect(replay.hardState).toEqual(hs(1, 1, 99));
  });

  it('releases the segments wholly behind an index and keeps the hard state and snapshot marker', () => {
    const d = dir();
    const { wal } = open({ dir: d, segmentBytes: 4096 });
    const cs = { voters: [1, 2, 3], learners: [], votersOutgoing: [], learnersNext: [], autoLeave: false };
    wal.save(hs(1, 1, 0), [], true, { metadata: { index: 0, term: 0, confState: cs }, reset: false });
    for (let i = 1; i <= 100; i++) wal.save(hs(1, 1, i - 1), [ent(i, 1, 'x'.repeat(200))], true);
    wal.save(undefined, [], true, { metadata: { index: 60, term: 1, confState: cs }, reset: false });
    const before = wal.segmentNames();
    const released = wal.releaseTo(60);
    expect(released).toBeGreaterThan(0);
    const after = wal.segmentNames();
    expect(after).toEqual(before.slice(released));
    // The first kept segment starts at or below 61: nothing after the snapshot was deleted.
    expect(parseInt(after[0]!.split('-')[1]!, 16)).toBeLessThanOrEqual(61);
    expect(readdirSync(d).filter((n) => n.endsWith('.wal')).sort()).toEqual(after);
    wal.close();
    const { replay } = open({ dir: d, segmentBytes: 4096 });
    expect(replay.entries[0]!.index).toBeLessThanOrEqual(61);
    expect(replay.entries[replay.entries.length - 1]!.index).toBe(100);
    expect(replay.hardState).toEqual(hs(1, 1, 99));
    expect(replay.markers.map((m) => m.metadata.index)).toContain(60);
  });

  it('removes a segment left half-made by a crash (never renamed into place) and refuses bad options', () => {
    const d = dir();
    const { wal } = open({ dir: d });
    wal.save(hs(1, 1, 0), ents(1, 2, 1), true);
    wal.close();
    writeFileSync(join(d, '0000000000000001-0000000000000003.wal.tmp'), Buffer.from([1, 2, 3]));
    const { replay, lines } = open({ dir: d });
    expect(indexes(replay.entries)).toEqual([1, 2]);
    expect(readdirSync(d).some((n) => n.endsWith('.tmp'))).toBe(false);
    expect(lines.join('\n')).toContain('removed unfinished segment');
    expect(() => Wal.open({ dir: d, segmentBytes: 0 })).toThrow(/segmentBytes: expected a positive integer/);
    expect(() => Wal.open({ dir: d, maxRecordBytes: 1.5 })).toThrow(InvalidArgumentError);
  });

  it('refuses an entry larger than maxRecordBytes without writing anything', () => {
    const d = dir();
    const fs = new CountingFs();
    const { wal } = open({ dir: d, fs, maxRecordBytes: 1024 });
    fs.reset();
    expect(() => wal.save(hs(1, 1, 0), [ent(1, 1, 'x'.repeat(2000))], true)).toThrow(InvalidArgumentError);
    expect(fs.writes).toBe(0);
  });
});

describe('Wal recovery', () => {
  /** A WAL of three saves; returns the segment's bytes and where the last record starts. */
  function threeSaves(d: string): { bytes: Buffer; lastStart: number } {
    const { wal } = open({ dir: d });
    wal.save(hs(1, 1, 0), ents(1, 3, 1), true);
    wal.save(hs(1, 1, 3), ents(4, 5, 1), true);
    const path = onlySegment(d);
    const lastStart = statSync(path).size;
    wal.save(undefined, [ent(6, 1, 'the last record')], true);
    wal.close();
    return { bytes: readFileSync(path), lastStart };
  }

  it('a torn last record, cut at every byte offset, is truncated and logged; the earlier records survive and the WAL takes new writes', () => {
    const src = dir();
    const { bytes, lastStart } = threeSaves(src);
    for (let cut = lastStart; cut < bytes.length; cut++) {
      const d = dir();
      const path = join(d, '0000000000000000-0000000000000001.wal');
      writeFileSync(path, bytes.subarray(0, cut));
      const { wal, replay, lines } = open({ dir: d });
      expect(indexes(replay.entries), `cut at ${cut}`).toEqual([1, 2, 3, 4, 5]);
      expect(replay.hardState).toEqual(hs(1, 1, 3));
      if (cut > lastStart) {
        expect(lines.some((l) => l.includes(`byte offset ${lastStart}`) && l.includes('torn'))).toBe(true);
      }
      expect(statSync(path).size).toBe(lastStart);
      wal.save(hs(1, 1, 5), [ent(6, 1, 'again')], true);
      wal.close();
      const again = open({ dir: d }).replay;
      expect(text(again.entries[5]!)).toBe('again');
    }
  });

  it('a flipped bit anywhere in the last record (bad CRC at the end) is truncated as torn', () => {
    const src = dir();
    const { bytes, lastStart } = threeSaves(src);
    for (let at = lastStart; at < bytes.length; at++) {
      const d = dir();
      const copy = Buffer.from(bytes);
      copy[at]! ^= 0x10;
      writeFileSync(join(d, '0000000000000000-0000000000000001.wal'), copy);
      const { replay, lines } = open({ dir: d });
      expect(indexes(replay.entries), `bit flipped at ${at}`).toEqual([1, 2, 3, 4, 5]);
      expect(lines.join('\n')).toContain(`byte offset ${lastStart}`);
    }
  });

  it('a flipped bit mid-segment refuses to open with a WalCorruptError naming the file and offset', () => {
    const d = dir();
    const { wal } = open({ dir: d });
    wal.save(hs(1, 1, 0), ents(1, 3, 1), true);
    const path = onlySegment(d);
    const secondSave = statSync(path).size;
    wal.save(hs(1, 1, 3), ents(4, 8, 1), true);
    wal.save(hs(1, 1, 8), ents(9, 10, 1), true);
    wal.close();
    const bytes = readFileSync(path);
    bytes[secondSave + 12]! ^= 0x01; // inside entry 4's body
    writeFileSync(path, bytes);
    let err: unknown;
    try {
      open({ dir: d });
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(WalCorruptError);
    const c = err as WalCorruptError;
    expect(c.code).toBe('WAL_CORRUPT');
    expect(c.file).toBe(path);
    expect(c.offset).toBe(secondSave);
    expect(c.message).toContain(path);
    expect(c.message).toContain(`byte offset ${secondSave}`);
    expect(c.message).toContain('checksum mismatch');
    // Nothing was cut: the file is as it was, for a person to inspect.
    expect(readFileSync(path).equals(bytes)).toBe(true);
  });

  it('a bad last record in a segment that is not the last refuses to open', () => {
    const d = dir();
    const { wal } = open({ dir: d, segmentBytes: 1024 });
    for (let i = 1; i <= 20; i++) wal.save(hs(1, 1, i - 1), [ent(i, 1, 'y'.repeat(100))], true);
    const first = join(d, wal.segmentNames()[0]!);
    wal.close();
    const size = statSync(first).size;
    truncateSync(first, size - 3);
    expect(() => open({ dir: d, segmentBytes: 1024 })).toThrow(WalCorruptError);
    expect(() => open({ dir: d, segmentBytes: 1024 })).toThrow(/not the last/);
  });

  it('a missing middle segment refuses to open, naming the gap', () => {
    const d = dir();
    const { wal } = open({ dir: d, segmentBytes: 1024 });
    for (let i = 1; i <= 30; i++) wal.save(hs(1, 1, i - 1), [ent(i, 1, 'y'.repeat(100))], true);
    const names = wal.segmentNames();
    wal.close();
    expect(names.length).toBeGreaterThan(3);
    unlinkSync(join(d, names[1]!));
    expect(() => open({ dir: d, segmentBytes: 1024 })).toThrow(/segment 1 is missing/);
  });

  it('hostile input: a record claiming a huge length refuses mid-segment and is cut as torn at the tail, never allocated', () => {
    const d = dir();
    const { wal } = open({ dir: d });
    wal.save(hs(1, 1, 0), ents(1, 2, 1), true);
    const path = onlySegment(d);
    const mid = statSync(path).size;
    wal.save(hs(1, 1, 2), ents(3, 4, 1), true);
    wal.close();
    const bytes = readFileSync(path);
    const hostile = Buffer.from(bytes);
    hostile.writeUInt32LE(0xfffffff0, mid);
    writeFileSync(path, hostile);
    expect(() => open({ dir: d })).toThrow(/claims 4294967280 bytes, more than the limit/);

    // The same claim as the very last thing in the file: a torn header, cut.
    const tail = Buffer.concat([bytes, Buffer.from([0xf0, 0xff, 0xff, 0xff, 1, 2, 3, 4, 5])]);
    writeFileSync(path, tail);
    const { replay, lines } = open({ dir: d });
    expect(indexes(replay.entries)).toEqual([1, 2, 3, 4]);
    expect(lines.join('\n')).toContain(`byte offset ${bytes.length}`);
    expect(statSync(path).size).toBe(bytes.length);
  });

  it('hostile input: a segment of random garbage refuses when followed by a valid segment', () => {
    const d = dir();
    mkdirSync(d, { recursive: true });
    const garbage = Buffer.from(Array.from({ length: 4096 }, (_, i) => (i * 7919 + 13) & 0xff));
    writeFileSync(join(d, '0000000000000000-0000000000000001.wal'), garbage);
    const other = dir();
    const { wal } = open({ dir: other });
    wal.save(hs(1, 1, 0), ents(1, 2, 1), true);
    wal.close();
    copyFileSync(onlySegment(other), join(d, '0000000000000001-0000000000000001.wal'));
    expect(() => open({ dir: d })).toThrow(WalCorruptError);
  });

  it('a gap in the indexes refuses to open', () => {
    const d = dir();
    const { wal } = open({ dir: d });
    wal.save(hs(1, 1, 0), ents(1, 2, 1), true);
    wal.close();
    // Write entries 5..6 with a second WAL over the same file: the Wal itself never writes a gap.
    const other = dir();
    const w2 = open({ dir: other }).wal;
    w2.save(undefined, ents(5, 6, 1), true);
    w2.close();
    const path = onlySegment(d);
    writeFileSync(path, Buffer.concat([readFileSync(path), readFileSync(onlySegment(other))]));
    expect(() => open({ dir: d })).toThrow(/entry 5 follows entry 2: entries are missing/);
  });
});
