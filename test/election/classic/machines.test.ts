/**
 * Unit tests of the Bully and Ring machines (pure: input in, messages + timers + events out) and
 * of the election message codec.
 */
import { describe, expect, it } from 'vitest';
import { SeededRandom } from '../../../src/core/random.js';
import { BullyMachine } from '../../../src/election/classic/bully.js';
import { nextOwnedTerm, type ClassicOutput } from '../../../src/election/classic/machine.js';
import { decodeClassic, ElectionMessageError, encodeClassic, type ClassicMessage } from '../../../src/election/classic/messages.js';
import { RingMachine } from '../../../src/election/classic/ring.js';

const members = [2, 5, 9];
const random = new SeededRandom(1);
const kinds = (out: ClassicOutput): string[] => out.messages.map((m) => `${m.kind}->${m.to}`);
const timer = (out: ClassicOutput, name: string): number | null | undefined => out.timers.filter((t) => t.name === name).at(-1)?.ms;

describe('owned terms', () => {
  it('gives each member the terms at its position modulo n, above the known term', () => {
    expect(nextOwnedTerm(0, 0, 3)).toBe(3);
    expect(nextOwnedTerm(0, 1, 3)).toBe(1);
    expect(nextOwnedTerm(0, 2, 3)).toBe(2);
    expect(nextOwnedTerm(7, 1, 3)).toBe(10);
    expect(nextOwnedTerm(7, 2, 3)).toBe(8);
    for (let known = 0; known < 50; known++) {
      for (let p = 0; p < 5; p++) {
        const t = nextOwnedTerm(known, p, 5);
        expect(t).toBeGreaterThan(known);
        expect(t - known).toBeLessThanOrEqual(5);
        expect(t % 5).toBe(p);
      }
    }
  });
});

describe('BullyMachine', () => {
  it('the highest member wins at once, in a term it owns, and announces itself to everyone', () => {
    const m = new BullyMachine({ id: 9, members, random });
    const out = m.step({ kind: 'start' });
    expect(out.events).toContainEqual({ kind: 'elected', term: 2 }); // position 2 of 3
    expect(out.persistTerm).toBe(2);
    expect(kinds(out)).toEqual(['coordinator->2', 'coordinator->5']);
    expect(timer(out, 'heartbeat')).toBe(100);
    expect(m.isLeader).toBe(true);
  });

  it('a lower member asks the higher ones, and wins when none answers', () => {
    const m = new BullyMachine({ id: 5, members, random });
    const out = m.step({ kind: 'start' });
    expect(kinds(out)).toEqual(['election->9']);
    expect(timer(out, 'answer')).toBe(150);
    const won = m.step({ kind: 'timer', name: 'answer' });
    expect(won.events).toContainEqual({ kind: 'elected', term: 1 });
  });

  it('an answer makes a candidate wait for the coordinator, and follow it', () => {
    const m = new BullyMachine({ id: 5, members, random });
    m.step({ kind: 'start' });
    const waiting = m.step({ kind: 'message', message: { kind: 'answer', from: 9, to: 5, term: 0 } });
    expect(timer(waiting, 'answer')).toBeNull();
    expect(timer(waiting, 'round')).toBe(1000);
    const follows = m.step({ kind: 'message', message: { kind: 'coordinator', from: 9, to: 5, term: 2, leader: 9 } });
    expect(m.leader).toBe(9);
    expect(m.term).toBe(2);
    expect(follows.persistTerm).toBe(2);
    expect(timer(follows, 'leader')).toBeGreaterThanOrEqual(500);
  });

  it('answers an election from a lower member and runs its own', () => {
    const m = new BullyMachine({ id: 5, members, random });
    m.step({ kind: 'start' });
    m.step({ kind: 'message', message: { kind: 'coordinator', from: 9, to: 5, term: 2, leader: 9 } });
    const out = m.step({ kind: 'message', message: { kind: 'election', from: 2, to: 5, term: 2 } });
    expect(kinds(out)).toEqual(['answer->2', 'election->9']);
  });

  it('a leader that hears of a newer term is deposed, and bullies its way back with a newer one', () => {
    const m = new BullyMachine({ id: 9, members, random });
    m.step({ kind: 'start' }); // term 2
    const out = m.step({ kind: 'message', message: { kind: 'stale', from: 2, to: 9, term: 6 } });
    expect(out.events[0]).toEqual({ kind: 'deposed', term: 2, reason: 'newer-term' });
    expect(out.events).toContainEqual({ kind: 'elected', term: 8 });
    expect(m.term).toBe(8);
  });

  it('answers a message of an older term with stale, and ignores its claim', () => {
    const m = new BullyMachine({ id: 5, members, random, initialTerm: 10 });
    m.step({ kind: 'start' });
    const out = m.step({ kind: 'message', message: { kind: 'coordinator', from: 9, to: 5, term: 2, leader: 9 } });
    expect(out.messages).toEqual([{ kind: 'stale', from: 5, to: 9, term: 10 }]);
    expect(m.leader).toBeNull();
  });

  it('after a restart never leads a term at or below the one it persisted', () => {
    const m = new BullyMachine({ id: 9, members, random, initialTerm: 8 });
    const out = m.step({ kind: 'start' });
    expect(out.events).toContainEqual({ kind: 'elected', term: 11 });
  });

  it('refuses what no member would send, with one clear error', () => {
    const m = new BullyMachine({ id: 5, members, random });
    m.step({ kind: 'start' });
    const bad: [ClassicMessage, RegExp][] = [
      [{ kind: 'election', from: 4, to: 5, term: 1 }, /from node 4, which is not a peer/],
      [{ kind: 'election', from: 2, to: 9, term: 1 }, /addressed to node 9/],
      [{ kind: 'coordinator', from: 9, to: 5, term: 3, leader: 9 }, /term 3, which node 9 does not own/],
      [{ kind: 'coordinator', from: 2, to: 5, term: 2, leader: 9 }, /only a leader announces itself/],
    ];
    for (const [message, why] of bad) expect(() => m.step({ kind: 'message', message })).toThrow(why);
    expect(m.term).toBe(0);
  });

  it('refuses a bad configuration', () => {
    expect(() => new BullyMachine({ id: 4, members, random })).toThrow(/must include this node's id 4/);
    expect(() => new BullyMachine({ id: 2, members: [2, 2, 5], random })).toThrow(/distinct/);
    expect(() => new BullyMachine({ id: 2, members: [2, 0.5], random })).toThrow(/positive integer/);
    expect(() => new BullyMachine({ id: 2, members, random, timing: { heartbeatMs: 0 } })).toThrow(/timing.heartbeatMs/);
  });
});

describe('RingMachine', () => {
  it('passes the token to its successor with its id, and skips a successor that does not ack', () => {
    const m = new RingMachine({ id: 5, members, random });
    const out = m.step({ kind: 'start' });
    expect(out.messages).toHaveLength(1);
    const token = out.messages[0]!;
    expect(token).toMatchObject({ kind: 'ring-election', from: 5, to: 9, initiator: 5, candidates: [5] });
    const seq = (token as { seq: number }).seq;
    expect(timer(out, `ack:${seq}`)).toBe(150);
    const skipped = m.step({ kind: 'timer', name: `ack:${seq}` });
    expect(skipped.messages[0]).toMatchObject({ kind: 'ring-election', to: 2, candidates: [5] });
  });

  it('appends itself and forwards a token; back at its initiator, the highest id wins in a term it owns', () => {
    const a = new RingMachine({ id: 2, members, random });
    const b = new RingMachine({ id: 5, members, random });
    const c = new RingMachine({ id: 9, members, random });
    const start = a.step({ kind: 'start' }).messages[0]!;
    b.step({ kind: 'start' });
    c.step({ kind: 'start' });
    const atB = b.step({ kind: 'message', message: start });
    expect(kinds(atB)).toEqual(['ring-ack->2', 'ring-election->9']);
    const atC = c.step({ kind: 'message', message: atB.messages[1]! });
    expect(atC.messages[1]).toMatchObject({ kind: 'ring-election', to: 2, candidates: [2, 5, 9] });
    const done = a.step({ kind: 'message', message: atC.messages[1]! });
    const coordinator = done.messages.find((m) => m.kind === 'ring-coordinator');
    expect(coordinator).toMatchObject({ kind: 'ring-coordinator', to: 5, leader: 9, term: 2, initiator: 2 });
    expect(a.leader).toBe(9);
    const atB2 = b.step({ kind: 'message', message: coordinator! });
    expect(b.leader).toBe(9);
    const atC2 = c.step({ kind: 'message', message: atB2.messages.find((m) => m.kind === 'ring-coordinator')! });
    expect(atC2.events).toContainEqual({ kind: 'elected', term: 2 });
    expect(c.isLeader).toBe(true);
    // Back at its initiator, the result stops.
    const end = a.step({ kind: 'message', message: atC2.messages.find((m) => m.kind === 'ring-coordinator')! });
    expect(kinds(end)).toEqual(['ring-ack->9']);
  });

  it('a token whose initiator is gone ends instead of circulating', () => {
    const b = new RingMachine({ id: 5, members, random });
    b.step({ kind: 'start' });
    // A coordinator started by node 2; passing it on, node 5 then 9 ... reaches 2, which does not ack.
    const out = b.step({ kind: 'message', message: { kind: 'ring-coordinator', from: 2, to: 5, term: 2, seq: 1, initiator: 2, round: 1, leader: 9 } });
    const fwd = out.messages.find((m) => m.kind === 'ring-coordinator') as { seq: number; to: number };
    expect(fwd.to).toBe(9);
    const skip = b.step({ kind: 'timer', name: `ack:${fwd.seq}` });
    const next = skip.messages.find((m) => m.kind === 'ring-coordinator') as { seq: number; to: number };
    expect(next.to).toBe(2); // 9 skipped: 2 is next
    const end = b.step({ kind: 'timer', name: `ack:${next.seq}` });
    expect(end.messages).toEqual([]); // 2 (the initiator) is gone: the token ends
  });

  it('a node hearing from a lower leader runs an election of its own', () => {
    const c = new RingMachine({ id: 9, members, random });
    // Alone: its token skips both silent peers, comes back, and it leads term 2.
    let out = c.step({ kind: 'start' });
    for (let i = 0; i < 2; i++) out = c.step({ kind: 'timer', name: `ack:${(out.messages[0] as { seq: number }).seq}` });
    expect(c.isLeader).toBe(true);
    expect(c.term).toBe(2);
    out = c.step({ kind: 'message', message: { kind: 'coordinator', from: 5, to: 9, term: 4, leader: 5 } });
    expect(out.events[0]).toEqual({ kind: 'deposed', term: 2, reason: 'newer-term' });
    expect(out.messages.some((m) => m.kind === 'ring-election')).toBe(true);
    expect(c.leader).not.toBe(5);
  });
});

describe('election message codec', () => {
  const samples: ClassicMessage[] = [
    { kind: 'election', from: 1, to: 2, term: 0 },
    { kind: 'answer', from: 2, to: 1, term: 2 ** 40 },
    { kind: 'coordinator', from: 9, to: 1, term: 7, leader: 9 },
    { kind: 'stale', from: 1, to: 9, term: Number.MAX_SAFE_INTEGER },
    { kind: 'ring-election', from: 1, to: 2, term: 3, seq: 4, initiator: 1, round: 99, candidates: [1, 2 ** 50] },
    { kind: 'ring-coordinator', from: 1, to: 2, term: 3, seq: 4, initiator: 1, round: 99, leader: 7 },
    { kind: 'ring-ack', from: 2, to: 1, term: 3, seq: 4 },
  ];

  it('round-trips every kind', () => {
    for (const m of samples) expect(decodeClassic(encodeClassic(m))).toEqual(m);
  });

  it('refuses hostile bytes with one ElectionMessageError each, never anything else', () => {
    const cases: [number[], RegExp][] = [
      [[], /truncated before version/],
      [[2, 0, 1, 2, 0], /version 2/],
      [[1, 99, 1, 2, 0], /unknown kind code 99/],
      [[1, 0, 0, 2, 0], /from must be >= 1/],
      [[1, 0, 1, 2], /truncated before term/],
      [[1, 0, ...Array<number>(9).fill(0xff)], /longer than 8 bytes/],
      [[1, 0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f, 2, 0], /not a safe integer/],
      [[1, 4, 1, 2, 0, 0, 1, 0, 200, 1], /candidate count 200/],
      [[1, 6, 1, 2, 0, 0, 0], /1 bytes after the end/],
    ];
    for (const [bytes, why] of cases) {
      expect(() => decodeClassic(Uint8Array.from(bytes))).toThrow(ElectionMessageError);
      expect(() => decodeClassic(Uint8Array.from(bytes))).toThrow(why);
    }
    // Random bytes: an ElectionMessageError or a valid message, nothing else, and quickly.
    const r = new SeededRandom(7);
    for (let i = 0; i < 20_000; i++) {
      const bytes = Uint8Array.from({ length: Math.floor(r.next() * 24) }, () => Math.floor(r.next() * 256));
      if (r.next() < 0.7 && bytes.length > 0) bytes[0] = 1;
      try {
        decodeClassic(bytes);
      } catch (err) {
        expect(err).toBeInstanceOf(ElectionMessageError);
      }
    }
  });

  it('refuses to encode what it could not decode', () => {
    expect(() => encodeClassic({ kind: 'election', from: 0, to: 1, term: 0 })).toThrow(/from must be an integer >= 1/);
    expect(() => encodeClassic({ kind: 'election', from: 1, to: 2, term: -1 })).toThrow(/term must be/);
    expect(() => encodeClassic({ kind: 'election', from: 1, to: 2, term: 2 ** 60 })).toThrow(/term must be/);
  });
});
