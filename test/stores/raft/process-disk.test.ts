/**
 * The Raft store with one node's disk damaged or full, nodes in real processes:
 *  - a torn last record (after a kill -9, the newest WAL segment ends in a record cut a few bytes
 *    short): the node truncates it with one log line naming file and offset, restarts and
 *    catches up;
 *  - a flipped bit in a record in the middle of a segment: the node refuses to start, one line on
 *    stderr naming file and offset, exit code 1; the other two go on;
 *  - a full disk (the node's data directory on a small tmpfs, filled up): the node refuses
 *    proposals with DISK_FULL, the others elect a leader and go on; once a filler file is deleted
 *    it recovers and catches up.
 * The tmpfs needs root (`mount -t tmpfs`); the test fails, with that reason, where it is refused.
 */
import { execFileSync } from 'node:child_process';
import { appendFileSync, closeSync, mkdirSync, mkdtempSync, openSync, readFileSync, readSync, readdirSync, rmSync, statSync, unlinkSync, writeSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { delay, pollUntil } from '../../fixtures/harness.js';
import { ProcessCluster } from './process-cluster.js';
import { appender, checkLinearizable, checkStreams, finalStreams, type HistoryOp } from './lease-history.js';

let cluster: ProcessCluster | undefined;
const cleanups: (() => void)[] = [];

afterEach(async () => {
  await cluster?.close();
  cluster = undefined;
  for (const f of cleanups.splice(0).reverse()) f();
});

const acked = (ops: readonly HistoryOp[]): number => ops.filter((o) => o.kind === 'append' && o.result.kind === 'ok').length;

/** The node's WAL segments, oldest first (names sort by their first index). */
function segments(dataDir: string): string[] {
  const dir = join(dataDir, 'wal');
  return readdirSync(dir)
    .filter((f) => !f.endsWith('.tmp'))
    .sort()
    .map((f) => join(dir, f));
}

/** Byte offsets of the records of a WAL segment (`u32le length | u32le crc | body`), whole ones only. */
function records(file: string): { offset: number; length: number }[] {
  const buf = readFileSync(file);
  const out: { offset: number; length: number }[] = [];
  for (let at = 0; at + 8 <= buf.length; ) {
    const length = buf.readUInt32LE(at);
    if (length === 0 || at + 8 + length > buf.length) break;
    out.push({ offset: at, length });
    at += 8 + length;
  }
  return out;
}

/** Runs the appender until `n` appends are acknowledged; returns the history and a stop function. */
async function load(c: ProcessCluster, n: number): Promise<{ ops: HistoryOp[]; finish(): Promise<void> }> {
  const ops: HistoryOp[] = [];
  let stop = false;
  const running = appender(c, 1, 'load', 60_000, ops, () => stop);
  await pollUntil(`${n} acknowledged appends`, 30_000, () => acked(ops) >= n);
  return {
    ops,
    async finish() {
      stop = true;
      await running;
    },
  };
}

async function verify(c: ProcessCluster, ops: readonly HistoryOp[]): Promise<void> {
  const streams = await finalStreams(c, ['s-load']);
  expect(checkStreams(ops, streams)).toEqual([]);
  expect(checkLinearizable(ops, streams).report).toBe('');
}

describe('raft store processes with a damaged or full disk', () => {
  it('a torn last record after kill -9: the node cuts it with one log line, restarts and catches up', async () => {
    cluster = await ProcessCluster.start();
    const c = cluster;
    const leader = await c.leader();
    const follower = c.ids.find((id) => id !== leader)!;
    const w = await load(c, 60);
    await c.kill(follower);
    // A torn write is the save that was under way at the crash: never acknowledged, its record
    // only partly on disk. So the tail is a copy of the last record cut 3 bytes short. (Cutting
    // the last whole record instead would lose an entry the follower had acknowledged: a disk
    // that loses fsynced data, which Raft does not survive — the leader, which counts that entry
    // as matched, ignores the follower's rejections below its match index and it stays stuck.)
    const newest = segments(c.dataDir(follower)).at(-1)!;
    const last = records(newest).at(-1)!;
    const bytes = readFileSync(newest);
    appendFileSync(newest, bytes.subarray(last.offset, last.offset + 8 + last.length - 3));
    const size = statSync(newest).size;
    await c.spawn(follower);
    const cut = c.logs(follower).filter((l) => /cut a torn write/.test(l));
    expect(cut).toHaveLength(1);
    expect(cut[0]).toContain(newest);
    expect(cut[0]).toContain(`at byte offset ${bytes.length}`);
    expect(cut[0]).toContain(`torn write of ${size - bytes.length} bytes`);
    const target = acked(w.ops) + 40;
    await pollUntil('40 more acknowledged appends', 30_000, () => acked(w.ops) >= target);
    await w.finish();
    // Its copy of the stream is the leader's: it got back what was cut from the leader.
    await verify(c, w.ops);
  });

  it('a flipped bit mid-segment: the node refuses to start with one line naming file and offset, exit 1; the others go on', async () => {
    cluster = await ProcessCluster.start();
    const c = cluster;
    const leader = await c.leader();
    const follower = c.ids.find((id) => id !== leader)!;
    const w = await load(c, 60);
    await c.kill(follower);
    const newest = segments(c.dataDir(follower)).at(-1)!;
    const recs = records(newest);
    expect(recs.length).toBeGreaterThan(10);
    const victim = recs[Math.floor(recs.length / 2)]!;
    const flipAt = victim.offset + 8 + Math.floor(victim.length / 2);
    const fd = openSync(newest, 'r+');
    const byte = Buffer.alloc(1);
    readSync(fd, byte, 0, 1, flipAt);
    byte[0] = byte[0]! ^ 0x10;
    writeSync(fd, byte, 0, 1, flipAt);
    closeSync(fd);
    const before = readFileSync(newest);

    const p = c.launch(follower);
    const exit = await p.exited;
    expect(exit.code).toBe(1);
    const lines = p.stderr.trim().split('\n');
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatch(new RegExp(`^raft node ${follower}: WAL_CORRUPT: write-ahead log corrupt: ${newest.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')} at byte offset ${victim.offset}: `));
    // Nothing on disk was changed by the refused start.
    expect(readFileSync(newest).equals(before)).toBe(true);
    // The other two go on.
    const target = acked(w.ops) + 40;
    await pollUntil('40 more acknowledged appends with the damaged node down', 30_000, () => acked(w.ops) >= target);
    await w.finish();
    const streams = await finalStreams(c, ['s-load'], [leader, c.ids.find((id) => id !== leader && id !== follower)!]);
    expect(checkStreams(w.ops, streams)).toEqual([]);
    console.log(`flipped bit: ${lines[0]}`);
  });

  it('a full disk: the node refuses proposals with DISK_FULL, a leader is elected elsewhere, and it recovers once space returns', async () => {
    const mountPoint = mkdtempSync(join(tmpdir(), 'tenure-raft-tmpfs-'));
    cleanups.push(() => rmSync(mountPoint, { recursive: true, force: true }));
    try {
      execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=24m', 'tmpfs', mountPoint], { stdio: 'pipe' });
    } catch (err) {
      throw new Error(`this test needs to mount a tmpfs (root): ${(err as { stderr?: Buffer }).stderr?.toString().trim() ?? String(err)}`);
    }
    cleanups.push(() => execFileSync('umount', ['-l', mountPoint]));
    const full = 1;
    const dataDir = join(mountPoint, 'n1');
    mkdirSync(dataDir);
    cluster = await ProcessCluster.start({ dataDirs: { [full]: dataDir }, node: { segmentBytes: 1024 * 1024, diskRetryMs: 50 } });
    const c = cluster;
    // Node 1 leads, so the full disk stops the leader.
    const first = await c.leader();
    if (first !== full) expect(await c.call(first, { cmd: 'transfer', to: full })).toMatchObject({ ok: true });
    await pollUntil('node 1 to lead', 15_000, async () => (await c.status(full))?.isLeader);
    expect(await c.leader()).toBe(full);
    const w = await load(c, 30);

    const filler = join(mountPoint, 'filler');
    const fd = openSync(filler, 'w');
    const chunk = Buffer.alloc(64 * 1024, 1);
    try {
      for (let i = 0; i < 1024; i++) writeSync(fd, chunk);
      throw new Error('the 24 MiB tmpfs did not fill up');
    } catch (err) {
      if ((err as { code?: string }).code !== 'ENOSPC') throw err;
    } finally {
      closeSync(fd);
    }
    const fullAt = performance.now();
    // It says so once, and refuses proposals with the typed error.
    await pollUntil('the disk-full log line', 10_000, () => c.logs(full).some((l) => /disk full/.test(l)));
    const refused = await pollUntil('a DISK_FULL refusal', 10_000, async () => {
      const r = await c.call(full, { cmd: 'append', token: { lease: 'load', term: 1 }, stream: 's-load', payload: 'to a full disk' });
      return !r.ok && r.code === 'DISK_FULL' ? r : undefined;
    });
    expect(refused.message).toMatch(/disk full/);
    // A leader elsewhere, and writes go on.
    const other = await c.leader(15_000, c.ids.filter((id) => id !== full));
    expect(other).not.toBe(full);
    const electedMs = performance.now() - fullAt;
    const target = acked(w.ops) + 40;
    await pollUntil('40 more acknowledged appends', 30_000, () => acked(w.ops) >= target);

    unlinkSync(filler);
    const freedAt = performance.now();
    await pollUntil('the disk-has-room log line', 10_000, () => c.logs(full).some((l) => /has room again/.test(l)));
    const leader = await c.leader(15_000);
    const recoveredMs = performance.now() - freedAt;
    expect((await c.status(full))!.lead).toBe(leader);
    await delay(300);
    await w.finish();
    await verify(c, w.ops);
    expect((await c.readAll(full, 's-load')).some((e) => e.payload === 'to a full disk')).toBe(false);
    console.log(`full disk: leader elsewhere ${Math.round(electedMs)} ms after the disk filled; node back in ${Math.round(recoveredMs)} ms after space returned`);
  });
});
