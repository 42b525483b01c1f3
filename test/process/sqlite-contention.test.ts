/**
 * SQLite under write contention from other processes (issue 20, section 1): contention is
 * waiting, never an error, and a busy neighbour cannot depose a healthy leader.
 *
 * 2 and 8 writer processes append to one database file as fast as they can for 5 s (every 8th
 * call a zombie's, with a stale term), beside a leader process renewing at a 200 ms TTL. Zero
 * errors other than StaleTermError, every acknowledged append is in its stream, and the leader is
 * elected once and never deposed.
 *
 * The leader only renews: its own appends would be fsynced on its thread (the driver is
 * synchronous), and under 8 writers on a slow disk one fsync can take longer than a 200 ms TTL's
 * margin, which no lock scheduling can help (docs/sql-stores.md, SQLite).
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, readdirSync, rmSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { openStore } from '../../src/index.js';
import type { StreamEntry, TenureStore } from '../../src/index.js';
import { FixtureProcess, killAll, num } from '../fixtures/harness.js';

const WAIT_MS = 60_000;
const HAMMER_MS = 5000;
const LEADER_TTL_MS = 200;

const procs: FixtureProcess[] = [];
const cleanups: (() => Promise<void> | void)[] = [];

afterEach(async () => {
  await killAll(procs.splice(0));
  for (const c of cleanups.splice(0).reverse()) await c();
});

function tempDb(): string {
  const dir = mkdtempSync(join(tmpdir(), 'tenure-contention-'));
  cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
  return join(dir, 'tenure.db');
}

function spawn(name: string, fixture: string, args: string[]): FixtureProcess {
  const p = new FixtureProcess(name, fixture, args);
  procs.push(p);
  return p;
}

async function readAll(store: TenureStore, stream: string): Promise<StreamEntry[]> {
  const out: StreamEntry[] = [];
  for (;;) {
    const page = await store.readStream(stream, { after: out.length, limit: 5000 });
    if (page.length === 0) return out;
    out.push(...page);
  }
}

/** Dirty and under-writeback page cache, kB (Linux; 0 elsewhere). */
function dirtyKb(): number {
  try {
    const m = readFileSync('/proc/meminfo', 'utf8');
    const kb = (key: string): number => Number(new RegExp(`^${key}:\\s+(\\d+) kB`, 'm').exec(m)?.[1] ?? 0);
    return kb('Dirty') + kb('Writeback');
  } catch {
    return 0;
  }
}

/** Jiffies of every CPU: [busy, total], from /proc/stat (Linux; zeros elsewhere). */
function cpuTimes(): [number, number] {
  try {
    const f = readFileSync('/proc/stat', 'utf8').split('\n')[0]!.trim().split(/\s+/).slice(1).map(Number);
    const total = f.reduce((a, b) => a + b, 0);
    return [total - (f[3] ?? 0) - (f[4] ?? 0), total];
  } catch {
    return [0, 0];
  }
}

/** CPU time each process used over the last sample, top 3, for a message: "pid name ms". */
function procTimes(): Map<string, number> {
  const out = new Map<string, number>();
  try {
    for (const pid of readdirSync('/proc')) {
      if (!/^\d+$/.test(pid)) continue;
      try {
        const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
        const close = stat.lastIndexOf(')');
        const name = stat.slice(stat.indexOf('(') + 1, close);
        const f = stat.slice(close + 2).split(' ');
        out.set(`${pid} ${name}`, Number(f[11]) + Number(f[12]));
      } catch {
        // gone meanwhile
      }
    }
  } catch {
    // not Linux
  }
  return out;
}

/**
 * Start the storm on an idle machine: page cache flushed, and the CPUs idle for a second
 * (waiting up to 60 s). The file runs after every other test file (vitest.config.ts), so that
 * nothing else shares the 2 cores, but a server or process still busy from them would: two busy
 * loops beside this test depose its leader every time (tried here), and it failed twice in a row
 * in CI with the 1-minute load still at 1.05 when it started. What it asserts about is its own
 * writers' storm. Returns what the machine was doing, for a failure's message.
 */
async function quietMachine(): Promise<string> {
  execFileSync('sync');
  const until = Date.now() + 60_000;
  let busy = 1;
  let top = '';
  while (Date.now() < until) {
    const [b0, t0] = cpuTimes();
    const p0 = procTimes();
    await new Promise((r) => setTimeout(r, 1000));
    const [b1, t1] = cpuTimes();
    busy = t1 > t0 ? (b1 - b0) / (t1 - t0) : 0;
    const used = [...procTimes()].map(([k, v]) => [k, v - (p0.get(k) ?? v)] as const).filter(([, d]) => d > 0);
    top = used.sort((a, b) => b[1] - a[1]).slice(0, 3).map(([k, d]) => `${k} ${d * 10} ms`).join(', ');
    if (busy < 0.1 && dirtyKb() < 16 * 1024) break;
  }
  return `cpu ${(busy * 100).toFixed(0)}% busy over 1 s (${top || 'no process'}), load ${loadavg().map((l) => l.toFixed(2)).join(' ')}, dirty ${dirtyKb()} kB`;
}

/** The load average and the page cache left to write, for a failure's message. */
function machine(): string {
  return `load ${loadavg().map((l) => l.toFixed(2)).join(' ')}, dirty ${dirtyKb()} kB`;
}

interface Done {
  acks: number;
  stale: number;
  staleAccepted: number;
  errors: number;
  calls: number;
  maxCallMs: number;
  samples: string[];
}

describe('SQLite under write contention from other processes', () => {
  for (const writers of [2, 8]) {
    it(`${writers} writer processes appending flat out beside a leader at TTL ${LEADER_TTL_MS} ms: no errors, no lost appends, no deposition`, { timeout: 180_000 }, async () => {
      const atStart = await quietMachine();
      const db = tempDb();
      const store = await openStore({ kind: 'sqlite', path: db });
      cleanups.push(() => store.close());

      const leader = spawn('leader', 'campaigner', [db, 'lead', 'node-lead', String(LEADER_TTL_MS), '--append-ms', '0']);
      const elected = await leader.waitFor('elected', WAIT_MS);
      await leader.waitFor('renewed', WAIT_MS);

      const hammers = Array.from({ length: writers }, (_, i) => spawn(`w${i}`, 'sqlite-hammer', [db, `w${i}`, String(HAMMER_MS)]));
      await Promise.all(hammers.map((h) => h.waitFor('ready', WAIT_MS)));
      const from = leader.events.length;
      for (const h of hammers) h.send('go');
      const done = await Promise.all(hammers.map(async (h) => (await h.waitFor('done', WAIT_MS)) as unknown as Done & { t: string }));
      const renewsDuring = leader.all('renewed').length;
      const held = await store.read('lead');

      leader.send('stop');
      expect((await leader.exited).code).toBe(0);

      // The leader: elected once, never deposed while the writers ran, and no call of it refused by
      // the database. The one failure the lock cannot cause and the machine can: with 9 busy
      // processes on 2 cores the leader itself may not run for tens of ms, so a renew may miss
      // its own 66 ms request timeout (TTL / 3) and be retried (seen once in a CI run beside
      // other load). That is the elector's "maybe" (rule 3), not contention, and the next renew
      // must keep the leadership: it is told apart by its message and counted, never refused.
      const stopAt = leader.events.findIndex((e) => e.ev === 'stopping');
      const before = leader.events.slice(0, stopAt);
      const slowRenews = before.filter((e) => e.ev === 'renew-failed' && /^sqlite store: no answer to renew of lead within \d+ ms$/.test(String(e.message)));
      const bad = before.filter((e) => ['deposed', 'renew-failed', 'store-error'].includes(e.ev) && !slowRenews.includes(e));
      const renewMs = before.filter((e) => e.ev === 'renewed').map((e) => num(e, 'latencyMs'));
      expect(bad, `leader events (${machine()} at the end, ${atStart} at the start; slowest renews ${renewMs.sort((a, b) => b - a).slice(0, 5).map((ms) => ms.toFixed(1)).join(', ')} ms; ${slowRenews.length} past the request timeout)`).toEqual([]);
      if (slowRenews.length > 0) console.log(`${writers} writers: ${slowRenews.length} renew(s) past the leader's request timeout (CPU), none refused, never deposed`);
      expect(before.filter((e) => e.ev === 'elected')).toEqual([elected]);
      // Renewing all along: about one renewal per TTL / 3 while the writers ran.
      expect(leader.events.slice(from, stopAt).filter((e) => e.ev === 'renewed').length, 'renewals while the writers ran').toBeGreaterThanOrEqual(HAMMER_MS / LEADER_TTL_MS);
      expect(renewsDuring).toBeGreaterThan(1);
      expect(held?.term).toBe(num(elected, 'term'));

      // The writers: nothing but StaleTermError for the zombie calls, and every acknowledged append in its stream.
      for (let i = 0; i < writers; i++) {
        const d = done[i]!;
        expect({ writer: i, errors: d.errors, samples: d.samples, staleAccepted: d.staleAccepted }).toEqual({ writer: i, errors: 0, samples: [], staleAccepted: 0 });
        expect(d.acks, `writer ${i} acknowledged appends`).toBeGreaterThan(0);
        expect(d.stale).toBeGreaterThan(0);
        const entries = await readAll(store, `w${i}`);
        expect(entries.length, `writer ${i}: entries in the stream vs acknowledged`).toBe(d.acks);
        entries.forEach((e, n) => {
          if (e.seq !== n + 1 || e.payload !== String(n)) throw new Error(`writer ${i}: entry ${n} is seq ${e.seq} payload ${e.payload}`);
        });
      }
    });
  }
});
