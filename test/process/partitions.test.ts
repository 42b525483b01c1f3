/**
 * Partitions with real processes on PostgreSQL (a database of its own): 64 shards over 5 node
 * processes; a sixth joins; two are killed (SIGKILL); one is paused past its TTL (SIGSTOP) and
 * resumed (SIGCONT). After each change the parent, reading the store, waits for balance: every
 * shard held by a live member, most − fewest ≤ 1 over the members, and measures how long it took.
 *
 * No shard ever has two leaders that both write: every shard's work appends a fenced entry to the
 * shard's own stream every 100 ms. At the end each stream must show terms that never go back,
 * and each term written by one node only; a stale leader's append is refused by the store.
 */
import { pathToFileURL } from 'node:url';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { nodeIdOf } from '../../src/core/index.js';
import { PostgresStore } from '../../src/stores/postgres/index.js';
import { FixtureProcess, killAll, repoRoot } from '../fixtures/harness.js';
import { createPostgresDatabase } from '../stores/sql-servers.js';
import type { TestDatabase } from '../stores/sql-servers.js';

const SHARDS = 64;
const TTL_MS = 2000;
const WAIT_MS = 30_000;

const procs: FixtureProcess[] = [];
let db: TestDatabase | null = null;
let reader: PostgresStore | null = null;

afterEach(async () => {
  await killAll(procs.splice(0));
  await reader?.close();
  reader = null;
  await db?.drop();
  db = null;
});

const tsxLoader = (): string => pathToFileURL(join(repoRoot(), 'node_modules', 'tsx', 'dist', 'loader.mjs')).href;

function node(url: string, id: string): FixtureProcess {
  const p = new FixtureProcess(id, join(repoRoot(), 'test', 'fixtures', 'partition-node.ts'), [url, id, String(SHARDS), String(TTL_MS)], { NODE_OPTIONS: `--import ${tsxLoader()}` });
  procs.push(p);
  return p;
}

interface Spread {
  members: string[];
  counts: Map<string, number>;
  held: number;
  ok: boolean;
}

/** The ownership the store shows now, and whether it is balanced over exactly `expected` members. */
async function spread(store: PostgresStore, expected: readonly string[]): Promise<Spread> {
  const live = await store.list('p/');
  const members = live.filter((l) => l.name.startsWith('p/member/')).map((l) => l.name.slice('p/member/'.length)).sort();
  const counts = new Map<string, number>(members.map((m) => [m, 0]));
  let held = 0;
  let strays = 0;
  for (const l of live.filter((x) => x.name.startsWith('p/shard/'))) {
    held++;
    const owner = nodeIdOf(l.owner);
    if (counts.has(owner)) counts.set(owner, counts.get(owner)! + 1);
    else strays++;
  }
  const c = [...counts.values()];
  const ok = JSON.stringify(members) === JSON.stringify([...expected].sort()) && held === SHARDS && strays === 0 && Math.max(...c) - Math.min(...c) <= 1;
  return { members, counts, held, ok };
}

async function balanceWithin(store: PostgresStore, expected: readonly string[], sinceMs: number): Promise<number> {
  let last: Spread | null = null;
  for (;;) {
    last = await spread(store, expected);
    const ms = performance.now() - sinceMs;
    if (last.ok) return ms;
    if (ms > WAIT_MS) throw new Error(`no balance over ${expected.join(',')} within ${WAIT_MS} ms: ${JSON.stringify({ members: last.members, counts: [...last.counts], held: last.held })}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

describe('partitions with real processes on PostgreSQL', () => {
  it('64 shards over 5 processes: join a sixth, kill two, pause one past its TTL; balanced within 2 TTLs, never two writing leaders', { timeout: 240_000 }, async () => {
    db = await createPostgresDatabase();
    reader = new PostgresStore({ url: db.url });
    await reader.migrate();
    const timings: Record<string, number> = {};

    const ids = ['n1', 'n2', 'n3', 'n4', 'n5'];
    const started = performance.now();
    const nodes = new Map(ids.map((id) => [id, node(db!.url, id)]));
    await Promise.all([...nodes.values()].map((p) => p.waitFor('ready', WAIT_MS)));
    timings.start = await balanceWithin(reader, ids, started);

    // The change is n6 joining: its membership lease taken (reported as ready), not its process start-up.
    nodes.set('n6', node(db.url, 'n6'));
    await nodes.get('n6')!.waitFor('ready', WAIT_MS);
    let t0 = performance.now();
    timings.join = await balanceWithin(reader, [...ids, 'n6'], t0);

    t0 = performance.now();
    await Promise.all([nodes.get('n1')!.kill(), nodes.get('n2')!.kill()]);
    const afterKill = ['n3', 'n4', 'n5', 'n6'];
    timings.kill = await balanceWithin(reader, afterKill, t0);

    // Pause n3 past its TTL: the others take its shards; resumed, it finds it lost them and rejoins.
    const paused = nodes.get('n3')!;
    paused.signal('SIGSTOP');
    t0 = performance.now();
    timings.pausedOut = await balanceWithin(reader, ['n4', 'n5', 'n6'], t0);
    await new Promise((r) => setTimeout(r, Math.max(0, TTL_MS + 500 - (performance.now() - t0))));
    const from = paused.events.length;
    paused.signal('SIGCONT');
    t0 = performance.now();
    await paused.waitFor('resumed', WAIT_MS, undefined, from);
    timings.resume = await balanceWithin(reader, afterKill, t0);

    await new Promise((r) => setTimeout(r, 500)); // some writes under the final spread
    for (const p of nodes.values()) p.send('stop');
    await Promise.all([...nodes.values()].map((p) => p.exited));

    console.log(`partitions process test (TTL ${TTL_MS} ms, ${SHARDS} shards): ${JSON.stringify(Object.fromEntries(Object.entries(timings).map(([k, v]) => [k, Math.round(v)])))} ms; stale appends refused: ${[...nodes.values()].reduce((a, p) => a + p.all('stale').length, 0)}`);
    // Balance after each change, within 2 TTLs (the start includes 5 process start-ups).
    for (const k of ['join', 'kill', 'pausedOut', 'resume'] as const) expect(timings[k], k).toBeLessThanOrEqual(2 * TTL_MS);

    // The fenced streams: terms never go back, and each term is one node's.
    let entries = 0;
    for (let s = 0; s < SHARDS; s++) {
      const stream = await reader.readStream(`p-${s}`, { limit: 10_000 });
      expect(stream.length, `shard ${s} was written`).toBeGreaterThan(0);
      entries += stream.length;
      const writerOf = new Map<number, string>();
      for (let i = 0; i < stream.length; i++) {
        const e = stream[i]!;
        if (i > 0) expect(e.term, `shard ${s} entry ${e.seq}`).toBeGreaterThanOrEqual(stream[i - 1]!.term);
        const w = writerOf.get(e.term);
        if (w === undefined) writerOf.set(e.term, e.payload);
        else expect(e.payload, `shard ${s} term ${e.term} has one writer`).toBe(w);
      }
    }
    expect(entries).toBeGreaterThan(SHARDS * 10);
    // Every stale refusal was a paused node's old term (only n3 was paused), never a live leader's.
    for (const [id, p] of nodes) if (id !== 'n3') expect(p.all('stale'), id).toEqual([]);
    expect(await reader.list('p/')).toEqual([]);
  });
});
