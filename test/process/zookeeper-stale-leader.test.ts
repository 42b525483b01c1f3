/**
 * The stale-leader scenario on ZooKeeper, with real processes and a private server.
 *
 * Two campaigner processes contend for one group on `zk://…/chroot`; the leader appends a fenced
 * entry every 50 ms. The leader is frozen with SIGSTOP: its client stops pinging, so the server
 * expires its session after the session timeout (the TTL), removing its node. The other process
 * takes over with term + 1, no sooner than a TTL after the old leader's last renewal was sent, and
 * writes. The old leader is then resumed: its probe with the old token is StaleTermError, it is
 * deposed, and the stream never goes back a term.
 */
import { randomBytes } from 'node:crypto';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { openStore } from '../../src/index.js';
import type { StreamEntry } from '../../src/index.js';
import { FixtureProcess, killAll, lastExtensionSentNs, msBetween, nowNs, num, pollUntil, staleAppendsAfterResume, str } from '../fixtures/harness.js';
import { startZookeeper } from '../fixtures/zookeeper.js';
import type { ZookeeperServer } from '../fixtures/zookeeper.js';

const TTL_MS = 1500;
const MARGIN_MS = 150;
const GROUP = 'orders';
const STREAM = 'orders-log';
const WAIT_MS = 20_000;

let server: ZookeeperServer;
const procs: FixtureProcess[] = [];

beforeAll(async () => {
  server = await startZookeeper();
});
afterAll(async () => {
  await server.stop();
});
afterEach(async () => {
  await killAll(procs.splice(0));
});

function campaigner(url: string, id: string): FixtureProcess {
  const p = new FixtureProcess(id, 'campaigner', [url, GROUP, id, String(TTL_MS), '--stream', STREAM, '--append-ms', '50']);
  procs.push(p);
  return p;
}

function leadingTerm(p: FixtureProcess): number | null {
  let term: number | null = null;
  for (const e of p.events) {
    if (e.ev === 'elected') term = num(e, 'term');
    else if (e.ev === 'deposed' && term !== null && num(e, 'term') === term) term = null;
  }
  return term;
}

describe('stale leader with real processes on ZooKeeper', () => {
  it('a leader paused past its session is fenced out when it resumes, and the stream never goes back a term', { timeout: 120_000 }, async () => {
    const url = `${server.url}/stale-${randomBytes(5).toString('hex')}`;
    const reader = await openStore(url);
    try {
      const a = campaigner(url, 'node-a');
      await a.waitFor('elected', WAIT_MS);
      const b = campaigner(url, 'node-b');
      await b.waitFor('ready', WAIT_MS);
      const byOwner = new Map([a, b].map((p) => [str(p.all('ready')[0]!, 'owner'), p]));
      const { leader, oldTerm } = await pollUntil('a settled leader', WAIT_MS, async () => {
        const lease = await reader.read(GROUP);
        const p = lease ? byOwner.get(lease.owner) : undefined;
        if (!lease || !p || leadingTerm(p) !== lease.term) return undefined;
        if (p.all('append', (e) => num(e, 'term') === lease.term).length < 3) return undefined;
        return { leader: p, oldTerm: lease.term };
      });
      const follower = leader === a ? b : a;
      await follower.waitFor('leader-changed', WAIT_MS, (e) => num(e, 'term') === oldTerm);
      leader.signal('SIGSTOP');
      await pollUntil(`${leader.name} stopped`, WAIT_MS, () => leader.procState() === 'T', 1);
      const pausedAt = nowNs();

      const elected = await follower.waitFor('elected', WAIT_MS, (e) => num(e, 'term') > oldTerm);
      const newTerm = num(elected, 'term');
      expect(newTerm).toBe(oldTerm + 1);
      expect(msBetween(pausedAt, elected.t)).toBeGreaterThan(0);
      // Not before the old lease could have run out (10 ms of slack for reporting).
      expect(msBetween(lastExtensionSentNs(leader, oldTerm, TTL_MS, MARGIN_MS), elected.t)).toBeGreaterThanOrEqual(TTL_MS - 10);
      const firstNewWrite = await follower.waitFor('append', WAIT_MS, (e) => num(e, 'term') === newTerm);
      expect(leader.procState()).toBe('T');

      const resumeFrom = leader.events.length;
      leader.signal('SIGCONT');
      await leader.waitFor('resumed', WAIT_MS, undefined, resumeFrom);
      const probe = await leader.waitFor('probe', WAIT_MS, undefined, resumeFrom);
      expect(probe.term).toBe(oldTerm);
      expect(probe.outcome).toBe('stale');
      expect(probe.error).toBe('StaleTermError');
      expect(num(probe, 'currentTerm')).toBeGreaterThanOrEqual(newTerm);
      const deposed = await leader.waitFor('deposed', WAIT_MS, (e) => num(e, 'term') === oldTerm, resumeFrom);
      expect(['deadline', 'lost', 'fenced']).toContain(deposed.reason);
      await follower.waitFor('append', WAIT_MS, (e) => num(e, 'term') === newTerm && num(e, 'seq') >= num(firstNewWrite, 'seq') + 5);
      // An append the store applied just before SIGSTOP is reported on resume with the old term;
      // it must sit before the new term's writes. Nothing else of the old term may be reported.
      expect(staleAppendsAfterResume(leader.events.slice(resumeFrom), oldTerm, num(firstNewWrite, 'seq'))).toEqual([]);

      for (const p of [a, b]) p.send('stop');
      for (const p of [a, b]) expect((await p.exited).code).toBe(0);
      const entries: StreamEntry[] = [];
      for (;;) {
        const page = await reader.readStream(STREAM, { after: entries.length, limit: 1000 });
        if (page.length === 0) break;
        entries.push(...page);
      }
      expect(entries.length).toBeGreaterThan(5);
      entries.forEach((e, i) => expect(e.seq).toBe(i + 1));
      const firstNew = entries.findIndex((e) => e.term === newTerm);
      expect(firstNew).toBeGreaterThan(0);
      expect(entries.slice(firstNew).filter((e) => e.term === oldTerm)).toEqual([]);
      for (let i = 1; i < entries.length; i++) expect(entries[i]!.term).toBeGreaterThanOrEqual(entries[i - 1]!.term);
    } finally {
      await reader.close();
    }
  });
});
