import { afterEach, describe, expect, it } from 'vitest';
import { delay, FixtureProcess, num } from '../fixtures/harness.js';
import { entryData } from '../fixtures/wal-data.js';
import { DurableStorage } from '../../src/raft/wal/index.js';
import { tempDir } from './wal-fixtures.js';

let cleanups: (() => void | Promise<unknown>)[] = [];
afterEach(async () => {
  for (const c of cleanups) await c();
  cleanups = [];
});

describe('Raft WAL under kill -9', () => {
  it('every save a killed writer reported survives, byte for byte, across 8 kills mid-write', async () => {
    const t = tempDir();
    cleanups.push(t.cleanup);
    let prevLast = 0;
    for (let round = 0; round < 8; round++) {
      const p = new FixtureProcess(`wal-writer-${round}`, 'wal-writer', [t.dir]);
      cleanups.unshift(() => p.kill());
      const ready = await p.waitFor('ready', 20_000);
      expect(num(ready, 'last')).toBeGreaterThanOrEqual(prevLast);
      await p.waitFor('saved', 20_000);
      await delay(30 + round * 25);
      await p.kill();
      const acks = p.all('saved');
      const acked = acks[acks.length - 1]!;
      expect(acks.length).toBeGreaterThan(0);

      const s = DurableStorage.open({ dir: t.dir, segmentBytes: 256 * 1024 });
      try {
        // The log never shrinks, so the last index acknowledged is there, at its term or a later rewrite's.
        expect(s.lastIndex()).toBeGreaterThanOrEqual(num(acked, 'last'));
        expect(s.term(num(acked, 'last'))).toBeGreaterThanOrEqual(num(acked, 'term'));
        const hs = s.initialState().hardState;
        expect(hs.commit).toBeGreaterThanOrEqual(num(acked, 'commit'));
        expect(hs.term).toBeGreaterThanOrEqual(num(acked, 'term'));
        let prevTerm = 0;
        for (const e of s.entries(s.firstIndex(), s.lastIndex() + 1)) {
          expect(e.term).toBeGreaterThanOrEqual(prevTerm);
          prevTerm = e.term;
          expect(Buffer.from(e.data).equals(Buffer.from(entryData(e.index, e.term))), `entry ${e.index}`).toBe(true);
        }
        prevLast = s.lastIndex();
      } finally {
        s.close();
      }
    }
    expect(prevLast).toBeGreaterThan(100);
  }, 120_000);
});
