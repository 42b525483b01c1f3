/**
 * The zombie leader over HTTP, with real processes: two http-writer processes campaign for one
 * group in PostgreSQL; the leader writes to a fenced service (node:http, guard on the same
 * database) every 50 ms. The leader is frozen with SIGSTOP past its TTL, the other takes over with
 * the next term and writes. Resumed, the old leader sends the request it had in hand with its old
 * token: the service refuses it with 409 (problem body naming the new term), its write is not
 * applied, and the old leader steps down.
 */
import { Registry } from 'prom-client';
import { afterEach, describe, expect, it } from 'vitest';
import { collectMetrics } from '../../src/observe/index.js';
import { FixtureProcess, killAll, num, pollUntil } from '../fixtures/harness.js';
import { createAppTables, databases, startService } from '../fencing/http-harness.js';
import type { AnyDb, Service } from '../fencing/http-harness.js';

const TTL_MS = 1500;
const GROUP = 'payments';
const WAIT_MS = 20_000;

const procs: FixtureProcess[] = [];
let db: AnyDb | undefined;
let svc: Service | undefined;

afterEach(async () => {
  await killAll(procs.splice(0));
  await svc?.close();
  await db?.close();
  svc = db = undefined;
});

function writer(storeUrl: string, serviceUrl: string, id: string): FixtureProcess {
  const p = new FixtureProcess(id, 'http-writer', [storeUrl, GROUP, id, String(TTL_MS), serviceUrl]);
  procs.push(p);
  return p;
}

describe('zombie leader over HTTP with real processes (PostgreSQL)', () => {
  it("a leader paused past its TTL is refused with 409 when its request arrives after the takeover; its write is not applied and it steps down", { timeout: 120_000 }, async () => {
    db = await databases.postgres!();
    await createAppTables(db);
    svc = await startService('node:http', db as never, GROUP);
    const registry = new Registry();
    const stopMetrics = collectMetrics({}, { registry });
    try {
      const a = writer(db.storeUrl, svc.url, 'node-a');
      const elected = await a.waitFor('elected', WAIT_MS);
      const oldTerm = num(elected, 'term');
      await a.waitFor('write', WAIT_MS, (e) => e.outcome === 'written' && num(e, 'n') >= 3);
      const b = writer(db.storeUrl, svc.url, 'node-b');
      await b.waitFor('leader-changed', WAIT_MS, (e) => num(e, 'term') === oldTerm);

      a.signal('SIGSTOP');
      await pollUntil('node-a stopped', WAIT_MS, () => a.procState() === 'T', 1);
      // Lines it wrote before the stop can still be in the pipe (CI: 15 events counted at the
      // stop, 16 later). A stopped process writes none: wait until none has come for 300 ms.
      let seen = -1;
      await pollUntil("node-a's output read to its end", WAIT_MS, () => {
        const quiet = a.events.length === seen;
        seen = a.events.length;
        return quiet;
      }, 300);
      const frozenAt = a.events.length;

      const taken = await b.waitFor('elected', WAIT_MS, (e) => num(e, 'term') > oldTerm);
      const newTerm = num(taken, 'term');
      await b.waitFor('write', WAIT_MS, (e) => e.outcome === 'written' && num(e, 'term') === newTerm && num(e, 'n') >= 3);
      expect(a.procState()).toBe('T');
      expect(a.events.length).toBe(frozenAt);

      const resumeFrom = a.events.length;
      a.signal('SIGCONT');
      await a.waitFor('resumed', WAIT_MS, undefined, resumeFrom);
      const probe = await a.waitFor('probe', WAIT_MS, undefined, resumeFrom);
      // Refused with 409 by the service: fencedFetch turned it into a StaleTermError naming the new term.
      expect(probe).toMatchObject({ term: oldTerm, outcome: 'stale', error: 'StaleTermError', code: 'STALE_TERM' });
      expect(num(probe, 'currentTerm')).toBeGreaterThanOrEqual(newTerm);
      // It steps down (its deadline passed while frozen, or the refusal deposed it).
      const deposed = await a.waitFor('deposed', WAIT_MS, (e) => num(e, 'term') === oldTerm, resumeFrom);
      expect(['deadline', 'lost', 'fenced']).toContain(deposed.reason);

      // Let the new leader write on, then stop both.
      await b.waitFor('write', WAIT_MS, (e) => e.outcome === 'written' && num(e, 'term') === newTerm && num(e, 'n') >= 10);
      for (const p of [a, b]) p.send('stop');
      for (const p of [a, b]) expect((await p.exited).code).toBe(0);

      // Read back: the probe's value was never applied; no write of the old term after the new term's first.
      const writes = await db.rows('SELECT seq, term, value FROM writes WHERE item = 1 ORDER BY seq');
      expect(writes.filter((w) => w.value === probe.value)).toEqual([]);
      const firstNew = writes.findIndex((w) => Number(w.term) === newTerm);
      expect(firstNew).toBeGreaterThan(0);
      expect(writes.slice(firstNew).filter((w) => Number(w.term) === oldTerm)).toEqual([]);
      // A write it reports as done after the resume is one that was in flight when it froze: applied before the takeover.
      for (const e of a.events.slice(resumeFrom).filter((x) => x.ev === 'write' && x.outcome === 'written')) {
        const at = writes.findIndex((w) => w.value === e.value);
        expect(at, `${String(e.value)} applied after the takeover`).toBeGreaterThanOrEqual(0);
        expect(at).toBeLessThan(firstNew);
      }
      for (let i = 1; i < writes.length; i++) expect(Number(writes[i]!.term)).toBeGreaterThanOrEqual(Number(writes[i - 1]!.term));
      // Every write a process reported as written is in the table, under its term.
      const reported = [...a.all('write'), ...b.all('write')].filter((e) => e.outcome === 'written');
      expect(new Set(writes.map((w) => String(w.value)))).toEqual(new Set(reported.map((e) => String(e.value))));
      // The service refused (and counted) at least the probe.
      const m = new RegExp(`tenure_fenced_rejections_total\\{lease="${GROUP}",path="http",side="guard"\\} (\\d+)`).exec(await registry.metrics());
      expect(Number(m?.[1] ?? 0)).toBeGreaterThanOrEqual(1);
    } finally {
      stopMetrics();
    }
  });
});
