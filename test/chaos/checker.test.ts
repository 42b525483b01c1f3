/**
 * The chaos checker on hand-made histories and streams: clean ones pass (including the mess a
 * kill -9 leaves), and each kind of bad one is caught.
 */
import { describe, expect, it } from 'vitest';
import type { StreamEntry } from '../../src/core/index.js';
import { parseHistory, streamOf } from '../fixtures/chaos-history.js';
import type { AppendRecord, ChaosPayload, HistoryRecord, Outcome } from '../fixtures/chaos-history.js';
import { check, checkReplication, formatViolation } from './checker.js';
import type { CheckInput, HeadObservation, ProjectionRow, ProjectionSample, ReplicationCheckInput, RouterRead, ViolationRule } from './checker.js';

const G = 'g0';
const T0 = 1_000_000;

/** A tiny world: owners elect, append (to the stream and/or the history), and we check it. */
class World {
  readonly stream: StreamEntry[] = [];
  readonly history: HistoryRecord[] = [];
  private readonly counters = new Map<string, number>();
  now = T0;

  payload(owner: string, term: number, late = false): string {
    const c = (this.counters.get(owner) ?? 0) + 1;
    this.counters.set(owner, c);
    const p: ChaosPayload = { n: owner.split('~')[0]!, o: owner, t: term, c, ...(late ? { l: 1 as const } : {}) };
    return JSON.stringify(p);
  }

  elect(owner: string, term: number): this {
    this.history.push({ k: 'elected', node: owner.split('~')[0]!, proc: `${owner}.0`, at: this.now++, group: G, owner, term });
    return this;
  }

  /** Append to the stream (when it lands) and record the outcome (when `record`). */
  append(owner: string, term: number, outcome: Outcome, opts: { lands?: boolean; record?: boolean; late?: boolean } = {}): AppendRecord {
    const payload = this.payload(owner, term, opts.late);
    const lands = opts.lands ?? outcome === 'ok';
    let seq: number | undefined;
    if (lands) {
      seq = this.stream.length + 1;
      this.stream.push({ stream: streamOf(G), seq, lease: G, term, payload, appendedAt: 0 });
    }
    const rec: AppendRecord = {
      k: 'append',
      node: owner.split('~')[0]!,
      proc: `${owner}.0`,
      at: this.now + 1,
      sentAt: this.now,
      group: G,
      owner,
      term,
      counter: (JSON.parse(payload) as ChaosPayload).c,
      payload,
      outcome,
      ...(opts.late ? { late: true } : {}),
      ...(outcome === 'ok' ? { seq } : { error: outcome === 'rejected' ? 'StaleTermError' : 'StoreUnavailableError' }),
    };
    this.now += 2;
    if (opts.record ?? true) this.history.push(rec);
    return rec;
  }

  input(overrides: Partial<CheckInput> = {}): CheckInput {
    return {
      groups: [G],
      streams: new Map([[G, this.stream]]),
      histories: this.history,
      ttlMs: 1000,
      lastHealAt: null,
      endAt: this.now + 10_000,
      ...overrides,
    };
  }

  rules(overrides: Partial<CheckInput> = {}): ViolationRule[] {
    return check(this.input(overrides)).violations.map((v) => v.rule);
  }
}

/** A clean run: A leads term 1, B takes over in term 2 and A's late write is fenced. */
function cleanWorld(): World {
  const w = new World();
  w.elect('a~1', 1);
  w.append('a~1', 1, 'ok');
  w.append('a~1', 1, 'ok');
  w.elect('b~1', 2);
  w.append('b~1', 2, 'ok');
  w.append('a~1', 1, 'rejected', { late: true });
  w.append('b~1', 2, 'ok');
  return w;
}

describe('chaos checker', () => {
  it('passes a clean history and counts outcomes', () => {
    const w = cleanWorld();
    w.append('b~1', 2, 'ambiguous', { lands: true });
    w.append('b~1', 2, 'ambiguous', { lands: false });
    const r = check(w.input());
    expect(r.violations).toEqual([]);
    expect(r).toMatchObject({ accepted: 4, rejected: 1, ambiguous: 2, ambiguousLanded: 1, leaderChanges: 1, late: { ok: 0, rejected: 1 } });
  });

  it('tolerates what kill -9 leaves: an ok lost from the history, an entry no history mentions', () => {
    const w = cleanWorld();
    w.append('b~1', 2, 'ok', { record: false }); // acknowledged, but the history tail was lost
    w.append('b~1', 2, 'ambiguous', { lands: true, record: false }); // died mid-call
    expect(w.rules()).toEqual([]);
  });

  it('skips a history line cut short by kill -9, but only the last one', () => {
    const good = JSON.stringify({ k: 'stop', node: 'n1', proc: 'n1.0', at: 1 });
    expect(parseHistory(`${good}\n{"k":"app`)).toHaveLength(1);
    expect(() => parseHistory(`{"k":"app\n${good}\n`)).toThrow(/not JSON/);
  });

  it('catches a term that goes down in stream order (a stale write accepted)', () => {
    const w = cleanWorld();
    w.append('a~1', 1, 'ok'); // the old leader's write landed after term 2 wrote
    const r = check(w.input());
    expect(r.violations.map((v) => v.rule)).toEqual(['term-order']);
    const text = formatViolation(r.violations[0]!, T0);
    expect(text).toContain('seq 4 has term 2, seq 5 has term 1');
    expect(text).toMatch(/history .*a~1\.0 g0 append term 1 .* ok seq 5/);
  });

  it('catches two owners writing in the same term', () => {
    const w = new World();
    w.elect('a~1', 1);
    w.append('a~1', 1, 'ok');
    w.append('b~1', 1, 'ok');
    expect(w.rules()).toContain('two-owners');
  });

  it('catches two owners elected with the same term, and a term going back for one owner', () => {
    const w = new World();
    w.elect('a~1', 3).elect('b~1', 3);
    expect(w.rules()).toEqual(['two-owners']);
    const v = new World();
    v.elect('a~1', 3).elect('a~1', 2);
    expect(v.rules()).toEqual(['term-went-back']);
  });

  it('catches entries whose owner is not the one elected for their term', () => {
    const w = new World();
    w.elect('a~1', 1);
    w.append('b~1', 1, 'ok');
    expect(w.rules()).toEqual(['two-owners']);
  });

  it('catches an acknowledged write that is missing, moved or changed', () => {
    const missing = cleanWorld();
    const rec = missing.append('b~1', 2, 'ok');
    missing.stream.pop(); // acknowledged, then lost by the store
    expect(missing.rules()).toEqual(['lost-ack']);
    expect(check(missing.input()).violations[0]!.records).toEqual([rec]);

    const changed = cleanWorld();
    changed.append('b~1', 2, 'ok');
    const last = changed.stream.pop()!;
    changed.stream.push({ ...last, payload: changed.payload('b~1', 2) }); // another payload at that seq
    expect(changed.rules()).toEqual(['lost-ack']);
  });

  it('catches a rejection that lied: the write landed, or no higher term ever wrote', () => {
    const landed = cleanWorld();
    landed.append('b~1', 2, 'rejected', { lands: true });
    expect(landed.rules()).toContain('false-reject');

    const unexplained = new World();
    unexplained.elect('a~1', 1);
    unexplained.append('a~1', 1, 'ok');
    unexplained.append('a~1', 1, 'rejected');
    expect(unexplained.rules()).toEqual(['false-reject']);
  });

  it('catches duplicated or reordered entries of one owner, but not of a late write', () => {
    const w = new World();
    w.elect('a~1', 1);
    w.append('a~1', 1, 'ok');
    const twice = w.append('a~1', 1, 'ok');
    w.stream.push({ ...w.stream[1]!, seq: 3 }); // the same attempt applied twice (a resent command)
    expect(w.rules()).toEqual(['duplicated']);
    expect(check(w.input()).violations[0]!.records).toEqual([twice]);

    const r = new World();
    r.elect('a~1', 1);
    r.append('a~1', 1, 'ok');
    r.append('a~1', 1, 'ok');
    r.stream.reverse(); // attempt 2 landed before attempt 1
    r.stream.forEach((e, i) => (r.stream[i] = { ...e, seq: i + 1 }));
    expect(r.rules()).toContain('reordered');

    const late = new World();
    late.elect('a~1', 1);
    const stalled = late.payload('a~1', 1, true); // taken first, sent after newer work
    late.append('a~1', 1, 'ok');
    late.stream.push({ stream: streamOf(G), seq: 2, lease: G, term: 1, payload: stalled, appendedAt: 0 });
    expect(late.rules()).toEqual([]);
  });

  it('catches a broken stream: a gap, a foreign lease, a term that differs from the token', () => {
    const gap = cleanWorld();
    gap.stream.splice(1, 1);
    expect(gap.rules()).toContain('stream-shape');
    const lease = cleanWorld();
    lease.stream[0] = { ...lease.stream[0]!, lease: 'g9' };
    expect(lease.rules()).toEqual(['stream-shape']);
    const term = cleanWorld();
    term.stream[0] = { ...term.stream[0]!, term: 1, payload: JSON.stringify({ n: 'a', o: 'a~1', t: 7, c: 1 }) };
    expect(term.rules()).toContain('stream-shape');
  });

  it('checks liveness after the last heal: an accepted write within TTL + 1 s', () => {
    const w = cleanWorld();
    const healAt = w.now;
    w.now += 400;
    w.append('b~1', 2, 'ok');
    const ok = check(w.input({ lastHealAt: healAt }));
    expect(ok.violations).toEqual([]);
    expect(ok.groups.get(G)!.recoveryMs).toBe(401);

    const slow = cleanWorld();
    const heal = slow.now;
    slow.now += 2500;
    slow.append('b~1', 2, 'ok');
    const r = check(slow.input({ lastHealAt: heal }));
    expect(r.violations.map((v) => v.rule)).toEqual(['no-leader']);
    expect(r.violations[0]!.message).toContain('2501 ms after it (limit 2000 ms)');

    const none = cleanWorld();
    expect(none.rules({ lastHealAt: none.now + 1 })).toEqual(['no-leader']);

    // A write sent before the heal and acknowledged after it does not count.
    const before = cleanWorld();
    const rec = before.append('b~1', 2, 'ok');
    expect(before.rules({ lastHealAt: rec.sentAt + 1 })).toEqual(['no-leader']);
  });

  it('reports at most a few violations per rule and group', () => {
    const w = cleanWorld();
    for (let i = 0; i < 20; i++) {
      w.append('b~1', 2, 'ok');
      w.stream.pop();
    }
    expect(w.rules()).toHaveLength(5);
  });
});

describe('checkReplication: followers and the read router', () => {
  /** A log of `n` entries of group g0, entry k appended at T0 + 100·k. */
  const log = (n: number): StreamEntry[] =>
    Array.from({ length: n }, (_, i) => ({ stream: streamOf(G), seq: i + 1, lease: G, term: i < 5 ? 1 : 2, payload: `p${i + 1}`, appendedAt: T0 + 100 * (i + 1) }));
  const rows = (entries: readonly StreamEntry[]): ProjectionRow[] => entries.map((e) => ({ seq: e.seq, term: e.term, payload: e.payload }));
  const sample = (at: number, total: number, added: ProjectionRow[], follower = 'f1'): ProjectionSample => ({ follower, group: G, at, total, rows: added });
  /** The runner saw seq k committed at T0 + 100·k + 5. */
  const heads = (n: number): HeadObservation[] => Array.from({ length: n }, (_, i) => ({ group: G, at: T0 + 100 * (i + 1) + 5, head: i + 1 }));
  const read = (r: Partial<RouterRead>): RouterRead => ({ group: G, sentAt: T0 + 1000, maxLagMs: 300, role: 'follower', nodeId: 'f1', lagMs: 200, seq: 8, ...r });
  const run = (input: Partial<ReplicationCheckInput>): ReturnType<typeof checkReplication> =>
    checkReplication({ streams: new Map([[G, log(10)]]), samples: [], heads: heads(10), reads: [], slackMs: 50, ...input });

  it('passes projections that grow as prefixes of the log, over several samples, and fresh enough reads', () => {
    const l = log(10);
    const r = run({
      samples: [sample(T0 + 300, 3, rows(l.slice(0, 3))), sample(T0 + 600, 3, []), sample(T0 + 900, 7, rows(l.slice(3, 7))), sample(T0 + 2000, 10, rows(l.slice(7)))],
      // seq 9 was first seen at T0 + 905: a read sent at T0 + 1000 with up to seq 8 is 95 ms behind, within 200 + 50.
      reads: [read({}), read({ role: 'leader', nodeId: 'n1', lagMs: 0, seq: 10, sentAt: T0 + 1100 })],
    });
    expect(r.violations.map((v) => formatViolation(v))).toEqual([]);
    expect(r.stats).toMatchObject({ applied: 10, reads: 2, followerReads: 1, behindReads: 1 });
  });

  it('fails a projection that skipped an entry (not a prefix)', () => {
    const l = log(10);
    const r = run({ samples: [sample(T0 + 300, 2, rows(l.slice(0, 2))), sample(T0 + 600, 4, rows([l[2]!, l[4]!]))] });
    expect(r.violations.map((v) => v.rule)).toEqual(['projection-not-prefix']);
    expect(r.violations[0]!.message).toMatch(/row 4 holds seq 5, where the log holds seq 4/);
  });

  it('fails a projection that applied an entry twice, one whose payload differs, and one ahead of the log', () => {
    const l = log(10);
    const twice = run({ samples: [sample(T0 + 300, 4, rows([l[0]!, l[1]!, l[2]!, l[2]!]))] });
    expect(twice.violations.map((v) => v.message)).toEqual([expect.stringMatching(/row 4 holds seq 3/)]);
    const other = run({ samples: [sample(T0 + 300, 2, [...rows([l[0]!]), { seq: 2, term: 1, payload: 'forged' }])] });
    expect(other.violations.map((v) => v.message)).toEqual([expect.stringMatching(/row 2 holds seq 2 with payload forged/)]);
    const ahead = run({ streams: new Map([[G, l.slice(0, 2)]]), samples: [sample(T0 + 300, 3, rows(l.slice(0, 3)))] });
    expect(ahead.violations.map((v) => v.message)).toEqual([expect.stringMatching(/row 3 holds seq 3, but the log has only 2 entries/)]);
  });

  it('fails a projection that lost a row between two samples', () => {
    const l = log(10);
    const r = run({ samples: [sample(T0 + 300, 3, rows(l.slice(0, 3))), sample(T0 + 600, 3, rows(l.slice(3, 4)))] });
    expect(r.violations.map((v) => v.rule)).toEqual(['projection-not-prefix']);
    expect(r.violations[0]!.message).toMatch(/a row was taken back/);
  });

  it('fails a read staler than its claimed lag, and one served above its threshold', () => {
    // Up to seq 4 at T0 + 1000: seq 5 was seen committed at T0 + 505, 495 ms earlier; claimed 200 (+ 50 slack).
    const stale = run({ reads: [read({ seq: 4 })] });
    expect(stale.violations.map((v) => v.rule)).toEqual(['stale-read']);
    expect(stale.violations[0]!.message).toMatch(/up to seq 4, reported at most 200 ms stale .* seq 5 had been seen committed 495 ms before/);
    const over = run({ reads: [read({ lagMs: 400 })] });
    expect(over.violations.map((v) => v.message)).toEqual([expect.stringMatching(/threshold 300 ms was served by follower f1, which the router reported 400 ms stale/)]);
    // A leader read is held to its claim (0) too.
    const leader = run({ reads: [read({ role: 'leader', nodeId: 'n1', lagMs: 0, seq: 4 })] });
    expect(leader.violations.map((v) => v.rule)).toEqual(['stale-read']);
  });

  it('does not count an entry seen committed only after the read was sent', () => {
    const r = run({ reads: [read({ seq: 10, sentAt: T0 + 1004 })], heads: [...heads(10), { group: G, at: T0 + 3000, head: 11 }] });
    expect(r.violations).toEqual([]);
  });
});
