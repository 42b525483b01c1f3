/**
 * SQLite across real processes: one database file, many processes.
 *
 *  - 50 acquirers of one name (worker threads, each with its own connection) spread over 5
 *    processes, started at one instant: exactly one winner per round, and the term
 *    goes up by exactly one per change of holder, never repeating; under churn (a TTL shorter than
 *    a round) every term still has exactly one owner.
 *  - A holder killed with SIGKILL inside a write transaction (a raw one that spilled pages into
 *    the WAL, and the store's own, caught by freezing a busy leader): nothing partial is visible
 *    and the store is usable at once.
 *  - A process that restarts with the same node id is a new incarnation and gets a new term.
 */
import { mkdtempSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { InvalidArgumentError, StaleTermError, StoreUnavailableError, makeToken, nodeIdOf, openStore } from '../../src/index.js';
import type { StreamEntry, TenureStore } from '../../src/index.js';
import { SqliteStore } from '../../src/stores/sqlite/index.js';
import { FixtureProcess, delay, killAll, lastExtensionSentNs, msBetween, nowNs, num, pollUntil, str } from '../fixtures/harness.js';
import { RawDb } from './sqlite-probe.js';

const WAIT_MS = 30_000;

const procs: FixtureProcess[] = [];
const cleanups: (() => Promise<void> | void)[] = [];

afterEach(async () => {
  await killAll(procs.splice(0));
  for (const c of cleanups.splice(0).reverse()) await c();
});

function tempDb(): string {
  const dir = mkdtempSync(join(tmpdir(), 'tenure-mp-'));
  cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
  return join(dir, 'tenure.db');
}

async function openTracked(db: string): Promise<TenureStore> {
  const store = await openStore({ kind: 'sqlite', path: db, busyTimeoutMs: 5000 });
  cleanups.push(() => store.close());
  return store;
}

function rawTracked(db: string): RawDb {
  const raw = new RawDb(db);
  cleanups.push(() => raw.close());
  return raw;
}

function spawn(name: string, fixture: string, args: string[]): FixtureProcess {
  const p = new FixtureProcess(name, fixture, args);
  procs.push(p);
  return p;
}

async function readAll(store: TenureStore, stream: string): Promise<StreamEntry[]> {
  const out: StreamEntry[] = [];
  for (;;) {
    const page = await store.readStream(stream, { after: out.length, limit: 1000 });
    if (page.length === 0) return out;
    out.push(...page);
  }
}

interface AcquireResultEvent {
  owner: string;
  acquired: boolean;
  term: number;
  holder: string;
}

function results(ps: FixtureProcess[], round: number): AcquireResultEvent[] {
  return ps.flatMap((p) =>
    p.all('result', (e) => e.round === round).map((e) => ({ owner: str(e, 'owner'), acquired: e.acquired === true, term: num(e, 'term'), holder: str(e, 'holder') })),
  );
}

function ownersOf(p: FixtureProcess): string[] {
  const owners = p.all('ready')[0]?.owners;
  return Array.isArray(owners) ? owners.map(String) : [];
}

async function startAcquirers(db: string, name: string, processes: number, perProcess: number, ttlMs: number): Promise<FixtureProcess[]> {
  const ps: FixtureProcess[] = [];
  for (let i = 0; i < processes; i++) ps.push(spawn(`acq${i}`, 'acquirers', [db, name, String(perProcess), `p${i}`, String(ttlMs)]));
  await Promise.all(ps.map((p) => p.waitFor('ready', WAIT_MS)));
  return ps;
}

/**
 * One acquire round: every acquirer thread in every process starts at the same host-monotonic
 * instant (150 ms from now); wait until all have answered.
 */
async function round(ps: FixtureProcess[], r: number): Promise<AcquireResultEvent[]> {
  const atNs = (nowNs() + 150_000_000n).toString();
  for (const p of ps) p.send(JSON.stringify({ cmd: 'acquire', round: r, atNs }));
  await Promise.all(ps.map((p) => p.waitFor('round-done', WAIT_MS, (e) => e.round === r)));
  for (const p of ps) expect(p.all('result-error', (e) => e.round === r), `${p.name}: acquire failed`).toEqual([]);
  return results(ps, r);
}

describe('SQLite across processes', () => {
  it('50 concurrent acquirers over 5 processes: exactly one winner, terms go up by one and never repeat', { timeout: 180_000 }, async () => {
    const db = tempDb();
    const store = await openTracked(db);
    const name = 'contended';
    const ps = await startAcquirers(db, name, 5, 10, 600_000);
    const winnerTerms: number[] = [];
    for (let r = 1; r <= 5; r++) {
      const res = await round(ps, r);
      expect(res).toHaveLength(50);
      expect(new Set(res.map((x) => x.owner)).size).toBe(50);
      const winners = res.filter((x) => x.acquired);
      expect(winners, `round ${r} winners`).toHaveLength(1);
      const w = winners[0]!;
      expect(w.holder).toBe(w.owner);
      // One bump per change of holder: the previous round's winner released, so exactly +1.
      expect(w.term).toBe(r);
      for (const loser of res.filter((x) => !x.acquired)) {
        expect(loser.holder).toBe(w.owner);
        expect(loser.term).toBe(w.term);
      }
      const lease = await store.read(name);
      expect(lease?.owner).toBe(w.owner);
      expect(lease?.term).toBe(w.term);
      winnerTerms.push(w.term);
      // The winner releases (compare-and-set on owner and term), freeing the name for the next round.
      const holderProc = ps.find((p) => ownersOf(p).includes(w.owner))!;
      const from = holderProc.events.length;
      holderProc.send(JSON.stringify({ cmd: 'release', owner: w.owner, term: w.term }));
      const released = await holderProc.waitFor('released', WAIT_MS, (e) => e.owner === w.owner, from);
      expect(released.released).toBe(true);
      expect(await store.read(name)).toBeNull();
    }
    expect(winnerTerms).toEqual([1, 2, 3, 4, 5]);
  });

  it('under churn (TTL shorter than a round) every term still has exactly one owner', { timeout: 180_000 }, async () => {
    const db = tempDb();
    const store = await openTracked(db);
    const name = 'churn';
    // 20 ms leases: they run out while the 50 acquirers are still taking turns, so the name
    // changes hands many times within each round.
    const ps = await startAcquirers(db, name, 5, 10, 20);
    const ownerOfTerm = new Map<number, string>();
    const seen: { owner: string; term: number }[] = [];
    for (let r = 1; r <= 6; r++) {
      const res = await round(ps, r);
      expect(res).toHaveLength(50);
      for (const x of res) {
        expect(x.acquired ? x.holder === x.owner : x.holder !== x.owner).toBe(true);
        seen.push({ owner: x.holder, term: x.term });
      }
      await delay(30); // let the last lease of the round run out
    }
    for (const { owner, term } of seen) {
      const known = ownerOfTerm.get(term);
      if (known !== undefined && known !== owner) throw new Error(`term ${term} was held by both ${known} and ${owner}`);
      ownerOfTerm.set(term, owner);
    }
    const terms = [...ownerOfTerm.keys()].sort((a, b) => a - b);
    expect(terms.length).toBeGreaterThan(6); // the name really changed hands within rounds
    // Terms come from one counter in the store, one bump per new holder, and every bump was
    // answered to the acquirer that caused it (a busy database fails before anything is written,
    // and is retried): so the terms seen are exactly 1..N, and N is the store's current term.
    expect(terms).toEqual(Array.from({ length: terms.length }, (_, i) => i + 1));
    const lease = await store.read(name);
    const raw = rawTracked(db);
    const row = raw.all('SELECT term FROM tenure_leases WHERE name = ?', name)[0];
    expect(Number(row?.term)).toBe(terms.length);
    if (lease) expect(lease.term).toBe(terms.length);
  });

  it('a holder killed with SIGKILL inside a write transaction leaves nothing partial, and the store stays usable', { timeout: 120_000 }, async () => {
    const db = tempDb();
    const store = await openTracked(db);
    const raw = rawTracked(db);
    const name = 'jobs';
    const stream = 'jobs-log';
    const rows = 3000;
    // Opened before the transaction begins: opening a store takes the write lock briefly (schema check).
    const impatient = new SqliteStore({ path: db, busyTimeoutMs: 50 });
    cleanups.push(() => impatient.close());
    const staller = spawn('staller', 'tx-staller', [db, name, stream, '3000', String(rows)]);
    const holding = await staller.waitFor('holding', WAIT_MS);
    const term = num(holding, 'term');
    const holderOwner = str(holding, 'owner');
    const inTx = await staller.waitFor('in-transaction', WAIT_MS);
    const ghostTerm = num(inTx, 'ghostTerm');

    // The transaction is really open: it holds the write lock, and its pages are on disk in the WAL.
    expect(await raw.writeLockStuck()).toBe(true);
    expect(statSync(`${db}-wal`).size).toBeGreaterThan((rows * 2000) / 2);
    // Readers meanwhile see only committed state.
    expect((await store.read(name))?.owner).toBe(holderOwner);
    expect((await readAll(store, stream)).map((e) => e.payload)).toEqual(['committed-1', 'committed-2']);
    // A writer that cannot wait is told the store is unavailable (and nothing of its own is written).
    await expect(impatient.acquire('other', 'someone', 1000)).rejects.toBeInstanceOf(StoreUnavailableError);

    staller.signal('SIGKILL');
    expect((await staller.exited).signal).toBe('SIGKILL');

    // The lock died with the process; the file is sound; nothing of the open transaction shows.
    expect(raw.tryWriteLock()).toBe(true);
    expect(raw.integrity()).toBe('ok');
    expect(raw.all("SELECT count(*) AS n FROM tenure_leases WHERE owner = 'ghost' OR term >= ?", ghostTerm)[0]?.n).toBe(0);
    expect(raw.all('SELECT count(*) AS n FROM tenure_streams WHERE term >= ?', ghostTerm)[0]?.n).toBe(0);
    expect(raw.all('SELECT max_term FROM tenure_fences WHERE name = ?', name)).toEqual([{ max_term: term }]);
    const lease = raw.all('SELECT owner, term FROM tenure_leases WHERE name = ?', name)[0];
    expect(lease).toEqual({ owner: holderOwner, term });
    const before = await readAll(store, stream);
    expect(before.map((e) => [e.seq, e.term, e.payload])).toEqual([
      [1, term, 'committed-1'],
      [2, term, 'committed-2'],
    ]);

    // Usable: the connection opened before the crash and a fresh one both work. The dead holder's
    // lease runs out at its TTL; the next owner gets the next term (not the ghost's).
    const fresh = await openTracked(db);
    const next = await pollUntil('the dead holder lease to run out', WAIT_MS, async () => {
      const r = await fresh.acquire(name, 'newcomer', 5000);
      return r.acquired ? r.lease : undefined;
    });
    expect(next.term).toBe(term + 1);
    expect(await fresh.appendFenced(makeToken(name, term + 1), stream, 'after-crash')).toBe(3);
    await expect(store.appendFenced(makeToken(name, term), stream, 'stale')).rejects.toBeInstanceOf(StaleTermError);
    // The ghost's term was never issued, so a token claiming it is refused too.
    await expect(store.appendFenced(makeToken(name, ghostTerm), stream, 'ghost')).rejects.toBeInstanceOf(InvalidArgumentError);
    const after = await readAll(store, stream);
    expect(after.map((e) => [e.seq, e.term])).toEqual([
      [1, term],
      [2, term],
      [3, term + 1],
    ]);
    expect((await store.acquire('other', 'someone', 1000)).acquired).toBe(true);
  });

  it('a leader process killed inside the store\'s own write transaction leaves every append whole', { timeout: 180_000 }, async () => {
    const db = tempDb();
    const store = await openTracked(db);
    const raw = rawTracked(db);
    const group = 'busy';
    const stream = 'busy-log';
    const ttl = 1000;
    let lastTerm = 0;
    const owners = new Set<string>();
    for (let kill = 1; kill <= 3; kill++) {
      // Appending every 1 ms keeps the leader inside a write transaction (fsync included) much of the time.
      const c = spawn(`busy${kill}`, 'campaigner', [db, group, 'node-busy', String(ttl), '--stream', stream, '--append-ms', '1']);
      const ready = await c.waitFor('ready', WAIT_MS);
      owners.add(str(ready, 'owner'));
      const elected = await c.waitFor('elected', WAIT_MS);
      // Same node id, new incarnation: a new term each time.
      expect(num(elected, 'term')).toBe(lastTerm + 1);
      lastTerm = num(elected, 'term');
      await c.waitFor('append', WAIT_MS, (e) => num(e, 'n') >= 20);
      // Freeze it until the freeze lands inside a write transaction, then kill it there.
      let attempts = 0;
      for (;;) {
        attempts++;
        expect(attempts, 'never caught the leader inside a transaction').toBeLessThan(500);
        c.signal('SIGSTOP');
        await pollUntil('stopped', WAIT_MS, () => c.procState() === 'T', 1);
        if (await raw.writeLockStuck(4, 10)) break;
        c.signal('SIGCONT');
        await delay(1 + Math.floor(Math.random() * 5));
      }
      c.signal('SIGKILL');
      expect((await c.exited).signal).toBe('SIGKILL');

      expect(raw.tryWriteLock()).toBe(true);
      expect(raw.integrity()).toBe('ok');
      const entries = await readAll(store, stream);
      entries.forEach((e, i) => expect(e.seq).toBe(i + 1));
      // Every append it reported is there, whole, under its term.
      // (Each SIGCONT also makes it probe: one more append, reported as a written probe.)
      const reported = new Map(
        c.events.filter((e) => e.ev === 'append' || (e.ev === 'probe' && e.outcome === 'written')).map((e) => [num(e, 'seq'), num(e, 'term')]),
      );
      const mine = entries.filter((e) => e.term === lastTerm);
      for (const [seq, t] of reported) expect(entries[seq - 1]?.term).toBe(t);
      // At most one more: the append in flight when it died, if its commit had landed.
      const unreported = mine.filter((e) => !reported.has(e.seq));
      expect(unreported.length).toBeLessThanOrEqual(1);
      if (unreported.length === 1) expect(unreported[0]!.seq).toBe(entries.length);
      for (const e of mine) expect(JSON.parse(e.payload)).toMatchObject({ term: lastTerm, owner: str(ready, 'owner') });
      // The fence and the lease agree with what is committed.
      expect(raw.all('SELECT max_term FROM tenure_fences WHERE name = ?', group)).toEqual([{ max_term: lastTerm }]);
      expect(raw.all('SELECT term FROM tenure_leases WHERE name = ?', group)).toEqual([{ term: lastTerm }]);
    }
    expect(owners.size).toBe(3);
  });

  it('a process restarted with the same node id is a new incarnation and gets a new term', { timeout: 120_000 }, async () => {
    const db = tempDb();
    const store = await openTracked(db);
    const group = 'restart';
    const stream = 'restart-log';
    const ttl = 3000;
    const margin = ttl / 10;
    const args = [db, group, 'node-r', String(ttl), '--stream', stream, '--append-ms', '50'];

    const first = spawn('first', 'campaigner', args);
    const o1 = str(await first.waitFor('ready', WAIT_MS), 'owner');
    const t1 = num(await first.waitFor('elected', WAIT_MS), 'term');
    await first.waitFor('append', WAIT_MS, (e) => num(e, 'n') >= 3);
    first.signal('SIGKILL');
    await first.exited;

    // Crash restart: same node id, new incarnation. Its predecessor's lease is not its own, so it
    // must wait for it to run out and then take a new term.
    const second = spawn('second', 'campaigner', args);
    const o2 = str(await second.waitFor('ready', WAIT_MS), 'owner');
    expect(o2).not.toBe(o1);
    expect(nodeIdOf(o2)).toBe('node-r');
    expect(nodeIdOf(o1)).toBe('node-r');
    const e2 = await second.waitFor('elected', WAIT_MS);
    expect(num(e2, 'term')).toBe(t1 + 1);
    expect(msBetween(lastExtensionSentNs(first, t1, ttl, margin), e2.t)).toBeGreaterThanOrEqual(ttl - 10);
    await second.waitFor('append', WAIT_MS, (e) => num(e, 'term') === t1 + 1);
    // The dead incarnation's token is fenced out.
    await expect(store.appendFenced(makeToken(group, t1), stream, 'late')).rejects.toBeInstanceOf(StaleTermError);

    // Graceful restart: stop() releases, so the next incarnation takes over at once with the next term.
    second.send('stop');
    expect((await second.exited).code).toBe(0);
    const third = spawn('third', 'campaigner', args);
    const o3 = str(await third.waitFor('ready', WAIT_MS), 'owner');
    expect(new Set([o1, o2, o3]).size).toBe(3);
    const e3 = await third.waitFor('elected', WAIT_MS);
    expect(num(e3, 'term')).toBe(t1 + 2);
    const lease = await store.read(group);
    expect(lease?.owner).toBe(o3);
    expect(lease?.term).toBe(t1 + 2);
    await third.waitFor('append', WAIT_MS, (e) => num(e, 'term') === t1 + 2);
    third.send('stop');
    expect((await third.exited).code).toBe(0);

    // The stream: each incarnation's entries under its own term, in term order.
    const entries = await readAll(store, stream);
    const termsInOrder = entries.map((e) => e.term).filter((t, i, all) => i === 0 || all[i - 1] !== t);
    expect(termsInOrder).toEqual([t1, t1 + 1, t1 + 2]);
    const ownerByTerm = new Map([
      [t1, o1],
      [t1 + 1, o2],
      [t1 + 2, o3],
    ]);
    for (const e of entries) expect((JSON.parse(e.payload) as { owner: string }).owner).toBe(ownerByTerm.get(e.term));
  });
});
