/**
 * The Raft store's state machine driven directly by log entries: determinism, dedupe of retried
 * commands, expiry by the log's time only, the new leader's takeover, snapshots and garbage.
 * (The Store contract runs over it in state-machine-contract.test.ts.)
 */
import { describe, expect, it } from 'vitest';
import { InvalidArgumentError, SeededRandom, StaleTermError, StoreDataError, TenureError, randomInt } from '../../../src/core/index.js';
import type { AcquireResult, RenewResult } from '../../../src/core/index.js';
import { crc32c } from '../../../src/raft/wal/index.js';
import { COMMAND_MAX_BYTES, RaftStateMachine, decodeCommand, encodeCommand, resultToError } from '../../../src/stores/raft/index.js';
import type { ApplyOutcome, CommandResult, Operation, Session } from '../../../src/stores/raft/index.js';

const enc = (timeMs: number, operation: Operation, session?: Session): Uint8Array => encodeCommand({ timeMs, operation, session });

/** A machine and the next index to apply at. */
class Log {
  index = 0;
  constructor(readonly sm = new RaftStateMachine()) {
    this.index = sm.appliedIndex;
  }
  apply(timeMs: number, operation: Operation, session?: Session): ApplyOutcome {
    return this.sm.apply(++this.index, enc(timeMs, operation, session));
  }
  raw(bytes: Uint8Array): ApplyOutcome {
    return this.sm.apply(++this.index, bytes);
  }
  /** The answer's value; throws the typed error an error answer carries. */
  value(timeMs: number, operation: Operation, session?: Session): unknown {
    const r = this.apply(timeMs, operation, session).result!;
    if (!r.ok) throw resultToError(r.error);
    return r.value;
  }
}

const acquire = (name: string, owner: string, ttlMs: number, meta = {}): Operation => ({ op: 'acquire', name, owner, ttlMs, meta });
const renew = (name: string, owner: string, term: number, ttlMs: number): Operation => ({ op: 'renew', name, owner, term, ttlMs });
const append = (lease: string, term: number, stream: string, payload: string): Operation => ({ op: 'append', token: { lease, term }, stream, payload });

function errorOf(r: CommandResult | null): TenureError {
  if (r === null || r.ok) throw new Error(`expected an error result, got ${JSON.stringify(r)}`);
  return resultToError(r.error);
}

describe('raft store state machine: expiry by the log time only', () => {
  it('judges a lease live or expired by the highest time the log carried, whatever the reader passes below it', () => {
    const log = new Log();
    expect(log.value(1000, acquire('g', 'a~1', 100))).toMatchObject({ acquired: true, lease: { term: 1, remainingMs: 100 } });
    expect(log.sm.read('g')).toMatchObject({ owner: 'a~1', remainingMs: 100 });
    // A reader's time below the log's is ignored: time never goes back.
    expect(log.sm.read('g', 0)).toMatchObject({ remainingMs: 100 });
    log.apply(1060, { op: 'tick' });
    expect(log.sm.read('g')).toMatchObject({ remainingMs: 40 });
    // A later command stamped earlier (a new leader whose clock starts behind) does not move time back.
    log.apply(500, { op: 'tick' });
    expect(log.sm.logTimeMs).toBe(1060);
    expect(log.sm.read('g')).toMatchObject({ remainingMs: 40 });
    // A leader's read between entries may pass its own later clock.
    expect(log.sm.read('g', 1099)).toMatchObject({ remainingMs: 1 });
    expect(log.sm.read('g', 1100)).toBeNull();
    // Until a command carries that time, the log still holds the lease: another owner is refused.
    expect(log.value(1099, acquire('g', 'b~1', 100))).toMatchObject({ acquired: false, lease: { owner: 'a~1', term: 1 } });
    expect(log.value(1100, acquire('g', 'b~1', 100))).toMatchObject({ acquired: true, lease: { owner: 'b~1', term: 2 } });
    expect(log.sm.list('', 1100).map((l) => `${l.name}:${l.owner}`)).toEqual(['g:b~1']);
  });

  it('refuses a renew after the log time passed the expiry, and keeps terms through release', () => {
    const log = new Log();
    log.value(0, acquire('g', 'a~1', 100));
    expect(log.value(99, renew('g', 'a~1', 1, 100))).toMatchObject({ renewed: true, lease: { remainingMs: 100 } });
    expect(log.value(199, renew('g', 'a~1', 1, 100))).toEqual({ renewed: false, lease: null });
    expect(log.value(200, acquire('g', 'a~1', 100))).toMatchObject({ acquired: true, lease: { term: 2 } });
    expect(log.value(201, { op: 'release', name: 'g', owner: 'a~1', term: 2 })).toBe(true);
    expect(log.value(202, acquire('g', 'b~1', 100))).toMatchObject({ acquired: true, lease: { term: 3 } });
  });
});

describe('raft store state machine: fenced streams', () => {
  it('fences by the highest accepted term, refuses unissued terms and foreign streams, and reports the stream head', () => {
    const log = new Log();
    log.value(0, acquire('g', 'a~1', 50));
    log.value(0, acquire('h', 'x~1', 5000));
    const first = log.apply(1, append('g', 1, 's', 'one'));
    expect(first.result).toEqual({ ok: true, value: 1 });
    expect(first.events).toEqual([{ kind: 'stream', stream: 's', seq: 1, lease: 'g', term: 1 }]);
    log.value(60, acquire('g', 'b~1', 5000));
    expect(log.value(61, append('g', 2, 'other', 'b'))).toBe(1);
    const stale = errorOf(log.apply(62, append('g', 1, 's', 'stale')).result);
    expect(stale).toBeInstanceOf(StaleTermError);
    expect(stale).toMatchObject({ lease: 'g', term: 1, currentTerm: 2 });
    expect(errorOf(log.apply(63, append('g', 3, 's', 'x')).result)).toBeInstanceOf(InvalidArgumentError);
    expect(errorOf(log.apply(63, append('h', 1, 's', 'x')).result).message).toBe('stream: stream s belongs to lease g, not h');
    expect(log.sm.readStream('s')).toEqual([{ stream: 's', seq: 1, lease: 'g', term: 1, payload: 'one', appendedAt: 1 }]); // appended at the log's time, 1
    expect(log.sm.streamHead('s')).toBe(1);
    expect(log.sm.streamHead('none')).toBe(0);
    expect(() => log.sm.readStream('s', { limit: 10_001 })).toThrow(InvalidArgumentError);
  });
});

describe('raft store state machine: change events for watchers', () => {
  it('tells of a new holder, a renewal, a release and a moved stream head, and of nothing when a command is refused', () => {
    const log = new Log();
    const kinds = (o: ApplyOutcome) => o.events.map((e) => (e.kind === 'lease' ? `${e.change} ${e.name} ${e.lease ? `${e.lease.owner}@${e.lease.term}` : 'null'}` : `head ${e.stream} ${e.seq}`));
    expect(kinds(log.apply(0, acquire('g', 'a~1', 1000)))).toEqual(['acquired g a~1@1']);
    expect(kinds(log.apply(1, acquire('g', 'a~1', 1000)))).toEqual(['renewed g a~1@1']);
    expect(kinds(log.apply(2, acquire('g', 'b~1', 1000)))).toEqual([]);
    expect(kinds(log.apply(3, { op: 'renewMany', owner: 'a~1', leases: [{ name: 'g', term: 1 }, { name: 'nope', term: 1 }], ttlMs: 1000 }))).toEqual(['renewed g a~1@1']);
    expect(kinds(log.apply(4, append('g', 1, 's', 'x')))).toEqual(['head s 1']);
    expect(kinds(log.apply(5, append('g', 9, 's', 'x')))).toEqual([]);
    expect(kinds(log.apply(6, { op: 'release', name: 'g', owner: 'a~1', term: 1 }))).toEqual(['released g null']);
  });
});

describe('raft store state machine: purge', () => {
  it('deletes the leases, fences and streams under the prefix in one command, tells watchers, and a purged name starts at term 1', () => {
    const log = new Log();
    for (const name of ['run-1/g0', 'run-1/g1', 'run-10/g0', 'run-1', 'x/run-1/g0']) {
      log.value(0, acquire(name, 'o~1', 60_000));
      log.value(0, append(name, 1, `${name}.log`, `entry of ${name}`));
    }
    log.value(1, { op: 'release', name: 'run-1/g1', owner: 'o~1', term: 1 }); // released: no event when purged
    const before = log.sm.stats();
    const outcome = log.apply(2, { op: 'purge', prefix: 'run-1/' });
    expect(outcome.result).toEqual({ ok: true, value: 6 }); // 2 leases, 2 fences, 2 entries
    expect(outcome.events).toEqual([{ kind: 'lease', change: 'released', name: 'run-1/g0', lease: null }]);
    expect(log.sm.stats()).toMatchObject({ leases: before.leases - 2, streams: before.streams - 2, entries: before.entries - 2 });
    for (const name of ['run-1/g0', 'run-1/g1']) {
      expect(log.sm.read(name)).toBeNull();
      expect(log.sm.readStream(`${name}.log`)).toEqual([]);
    }
    for (const name of ['run-10/g0', 'run-1', 'x/run-1/g0']) {
      expect(log.sm.read(name)?.owner).toBe('o~1');
      expect(log.sm.readStream(`${name}.log`).map((e) => e.payload)).toEqual([`entry of ${name}`]);
    }
    // New again: term 1, and its stream starts at seq 1.
    expect((log.value(3, acquire('run-1/g0', 'o~2', 60_000)) as AcquireResult).lease.term).toBe(1);
    expect(log.value(3, append('run-1/g0', 1, 'run-1/g0.log', 'new'))).toBe(1);
    expect(log.value(4, { op: 'purge', prefix: 'nothing/' })).toBe(0);
    // An empty prefix never reaches the log: refused by the encoder, and by the decoder if it did.
    expect(() => enc(5, { op: 'purge', prefix: '' })).toThrow(InvalidArgumentError);
    const forged = Buffer.from(JSON.stringify({ t: 5, o: { op: 'purge', prefix: '' } }));
    const bytes = new Uint8Array(6 + forged.length);
    bytes[0] = 0xc7;
    bytes[1] = 1;
    new DataView(bytes.buffer).setUint32(2, forged.length, true);
    bytes.set(forged, 6);
    const leases = log.sm.stats().leases;
    expect(errorOf(log.raw(bytes).result)).toBeInstanceOf(InvalidArgumentError);
    expect(log.sm.stats().leases).toBe(leases);
  });

  it('purges identically on two machines, and a snapshot taken after it restores the same state', () => {
    const a = new Log();
    const b = new Log();
    for (const log of [a, b]) {
      log.value(0, acquire('p/x', 'o~1', 5000));
      log.value(0, append('p/x', 1, 'p/x.log', 'one'));
      log.value(0, acquire('q/x', 'o~1', 5000));
      log.value(1, { op: 'purge', prefix: 'p/' });
    }
    expect(Buffer.from(a.sm.snapshot()).equals(Buffer.from(b.sm.snapshot()))).toBe(true);
    const restored = RaftStateMachine.restore(a.sm.snapshot());
    expect(restored.read('p/x')).toBeNull();
    expect(restored.read('q/x')?.owner).toBe('o~1');
    expect(restored.stats()).toEqual(a.sm.stats());
  });
});

describe('raft store state machine: a new leader takes over', () => {
  it('gives every live lease at least its full TTL from the takeover, leaves expired and released ones alone', () => {
    const log = new Log();
    log.value(0, acquire('live', 'a~1', 1000));
    log.value(0, acquire('long', 'a~1', 60_000));
    log.value(0, acquire('dead', 'a~1', 100));
    log.value(0, acquire('gone', 'a~1', 1000));
    log.value(10, { op: 'release', name: 'gone', owner: 'a~1', term: 1 });
    const out = log.apply(900, { op: 'takeover', raftTerm: 7 });
    expect(out.result).toEqual({ ok: true, value: null });
    expect(out.events.map((e) => (e.kind === 'lease' ? `${e.change} ${e.name} ${e.lease?.remainingMs}` : ''))).toEqual(['refreshed live 1000', 'refreshed long 60000']);
    expect(log.sm.read('live')).toMatchObject({ owner: 'a~1', term: 1, remainingMs: 1000 });
    expect(log.sm.read('long')).toMatchObject({ remainingMs: 60_000 });
    expect(log.sm.read('dead')).toBeNull();
    expect(log.sm.read('gone')).toBeNull();
    // Another owner waits out the refreshed lease: refused until 900 + 1000 of log time.
    expect(log.value(1500, acquire('live', 'b~1', 1000))).toMatchObject({ acquired: false, lease: { owner: 'a~1' } });
    expect(log.value(1900, acquire('live', 'b~1', 1000))).toMatchObject({ acquired: true, lease: { owner: 'b~1', term: 2 } });
    // The dead lease went at once to a new owner at its next term.
    expect(log.value(1900, acquire('dead', 'b~1', 1000))).toMatchObject({ acquired: true, lease: { term: 2 } });
  });
});

describe('raft store state machine: sessions answer a retried command once', () => {
  it('answers a retry from the dedupe table, without applying it again', () => {
    const log = new Log();
    const s = (seq: number, ack = 1): Session => ({ client: 'c1', seq, ack });
    log.value(0, acquire('g', 'a~1', 5000), s(1));
    const first = log.apply(10, append('g', 1, 's', 'once'), s(2));
    expect(first).toMatchObject({ result: { ok: true, value: 1 }, duplicate: false });
    // The reply was lost; the client sends seq 2 again (possibly through a new leader).
    const retry = log.apply(20, append('g', 1, 's', 'once'), s(2));
    expect(retry).toEqual({ result: { ok: true, value: 1 }, events: [], duplicate: true });
    expect(log.sm.readStream('s').map((e) => e.payload)).toEqual(['once']);
    // Another client's seq 2 is its own.
    expect(log.value(21, append('g', 1, 's', 'other client'), { client: 'c2', seq: 2, ack: 1 })).toBe(2);
    // A pipelined seq 4 before a lost seq 3: both apply, each once.
    expect(log.value(22, append('g', 1, 's', 'four'), s(4))).toBe(3);
    expect(log.value(23, append('g', 1, 's', 'three'), s(3))).toBe(4);
    expect(log.apply(24, append('g', 1, 's', 'four'), s(4)).result).toEqual({ ok: true, value: 3 });
    expect(log.sm.readStream('s')).toHaveLength(4);
    // A refused command is answered the same on a retry, even once the refusal would no longer hold.
    const refusedOnce = log.apply(25, append('g', 5, 's', 'x'), s(5));
    expect(errorOf(refusedOnce.result)).toBeInstanceOf(InvalidArgumentError);
    expect(log.apply(26, append('g', 5, 's', 'x'), s(5)).result).toEqual(refusedOnce.result);
  });

  it('gives a retried acquire or renew the time its lease has left now, never more', () => {
    const log = new Log();
    const s = (seq: number): Session => ({ client: 'c1', seq, ack: seq });
    expect((log.value(0, acquire('g', 'a~1', 1000), s(1)) as AcquireResult).lease.remainingMs).toBe(1000);
    expect((log.value(300, acquire('g', 'a~1', 1000), s(1)) as AcquireResult).lease.remainingMs).toBe(700);
    expect((log.value(400, renew('g', 'a~1', 1, 1000), s(2)) as RenewResult).lease!.remainingMs).toBe(1000);
    expect((log.value(5000, renew('g', 'a~1', 1, 1000), s(2)) as RenewResult).lease!.remainingMs).toBe(0);
    const many = log.value(5000, { op: 'renewMany', owner: 'a~1', leases: [{ name: 'g', term: 1 }], ttlMs: 1000 }, s(3));
    expect(many).toEqual([{ renewed: false, lease: null }]);
  });

  it('forgets answers below the ack, and answers a retry of one as unknown (STORE_UNAVAILABLE), applying nothing', () => {
    const log = new Log();
    log.value(0, acquire('g', 'a~1', 5000), { client: 'c', seq: 1, ack: 1 });
    log.value(0, append('g', 1, 's', 'x'), { client: 'c', seq: 2, ack: 1 });
    log.value(0, append('g', 1, 's', 'y'), { client: 'c', seq: 3, ack: 3 });
    const old = log.apply(1, append('g', 1, 's', 'x'), { client: 'c', seq: 2, ack: 2 });
    expect(old.duplicate).toBe(true);
    expect(errorOf(old.result)).toMatchObject({ code: 'STORE_UNAVAILABLE' });
    expect(log.sm.readStream('s').map((e) => e.payload)).toEqual(['x', 'y']);
  });

  it('keeps a bounded table: answers per session and sessions, least recently used forgotten first', () => {
    const log = new Log(new RaftStateMachine({ maxSessions: 2, maxResultsPerSession: 3 }));
    log.value(0, acquire('g', 'a~1', 60_000));
    for (let seq = 1; seq <= 5; seq++) log.value(0, append('g', 1, 's', `p${seq}`), { client: 'c', seq, ack: 1 });
    // Seqs 1 and 2 were pushed out: a retry is unknown, not applied again.
    expect(errorOf(log.apply(0, append('g', 1, 's', 'p1'), { client: 'c', seq: 1, ack: 1 }).result)).toMatchObject({ code: 'STORE_UNAVAILABLE' });
    expect(log.apply(0, append('g', 1, 's', 'p3'), { client: 'c', seq: 3, ack: 1 }).result).toEqual({ ok: true, value: 3 });
    log.value(0, append('g', 1, 's', 'd1'), { client: 'd', seq: 1, ack: 1 });
    log.value(0, append('g', 1, 's', 'c6'), { client: 'c', seq: 6, ack: 1 }); // c used last: d is the oldest
    log.value(0, append('g', 1, 's', 'e1'), { client: 'e', seq: 1, ack: 1 });
    expect(log.sm.stats().sessions).toBe(2);
    // c is still known.
    expect(log.apply(0, append('g', 1, 's', 'c6'), { client: 'c', seq: 6, ack: 1 }).duplicate).toBe(true);
    // d was forgotten: its seq 1 is a new command to the machine (docs/raft-store.md: a session idle
    // through maxSessions newer ones is gone).
    expect(log.apply(0, append('g', 1, 's', 'd1'), { client: 'd', seq: 1, ack: 1 }).duplicate).toBe(false);
    expect(log.sm.readStream('s')).toHaveLength(9);
    // A machine restored from a snapshot keeps the bounds it was taken with: a third session still evicts one.
    const restored = new Log(RaftStateMachine.restore(log.sm.snapshot()));
    restored.value(0, { op: 'tick' }, { client: 'f', seq: 1, ack: 1 });
    expect(restored.sm.stats().sessions).toBe(2);
  });
});

describe('raft store state machine: garbage in the log', () => {
  const valid = enc(5, acquire('g', 'a~1', 1000));
  const header = (version: number, json: string): Uint8Array => {
    const body = Buffer.from(json);
    const out = new Uint8Array(6 + body.length);
    out[0] = 0xc7;
    out[1] = version;
    new DataView(out.buffer).setUint32(2, body.length, true);
    out.set(body, 6);
    return out;
  };
  const garbage: [string, Uint8Array][] = [
    ['one byte', new Uint8Array([0xc7])],
    ['a foreign first byte', Uint8Array.from(valid, (b, i) => (i === 0 ? 0x7b : b))],
    ['a newer version', Uint8Array.from(valid, (b, i) => (i === 1 ? 2 : b))],
    ['a truncated body', valid.subarray(0, valid.length - 1)],
    ['a trailing byte', Uint8Array.from([...valid, 0x20])],
    ['a length claiming 4 GiB', Uint8Array.from(valid, (b, i) => (i >= 2 && i < 6 ? 0xff : b))],
    ['bytes that are not UTF-8', header(1, '{"t":1,"o":{"op":"tick"},"x":"\xff"}').map((b) => (b === 0xc3 ? 0xff : b))],
    ['JSON that is not an object', header(1, '[1,2]')],
    ['not JSON', header(1, '{"t":1,')],
    ['an unknown operation', header(1, '{"t":1,"o":{"op":"drop"}}')],
    ['a time that is not an integer', header(1, '{"t":1.5,"o":{"op":"tick"}}')],
    ['a negative time', header(1, '{"t":-1,"o":{"op":"tick"}}')],
    ['a name with a lone surrogate', header(1, '{"t":1,"o":{"op":"acquire","name":"g\\ud800","owner":"a","ttlMs":100}}')],
    ['a TTL out of range', header(1, '{"t":1,"o":{"op":"acquire","name":"g","owner":"a","ttlMs":1e12}}')],
    ['a meta that is an array', header(1, '{"t":1,"o":{"op":"acquire","name":"g","owner":"a","ttlMs":100,"meta":[1]}}')],
    ['a renewMany with duplicate names', header(1, '{"t":1,"o":{"op":"renewMany","owner":"a","ttlMs":100,"leases":[{"name":"g","term":1},{"name":"g","term":1}]}}')],
    ['a renewMany whose leases is not an array', header(1, '{"t":1,"o":{"op":"renewMany","owner":"a","ttlMs":100,"leases":{"length":1}}}')],
    ['a session with ack beyond seq', header(1, '{"t":1,"s":{"client":"c","seq":1,"ack":2},"o":{"op":"tick"}}')],
    ['a token that is null', header(1, '{"t":1,"o":{"op":"append","token":null,"stream":"s","payload":"x"}}')],
    ['a payload that is a number', header(1, '{"t":1,"o":{"op":"append","token":{"lease":"g","term":1},"stream":"s","payload":7}}')],
  ];

  for (const [what, bytes] of garbage) {
    it(`answers an entry with ${what} by INVALID_ARGUMENT, changing nothing but the applied index`, () => {
      const log = new Log();
      log.value(1, acquire('g', 'a~1', 1000));
      const reference = new Log();
      reference.value(1, acquire('g', 'a~1', 1000));
      const out = log.raw(bytes);
      expect(out.events).toEqual([]);
      expect(errorOf(out.result)).toBeInstanceOf(InvalidArgumentError);
      reference.raw(new Uint8Array(0)); // the same index, as a no-op
      expect(Buffer.from(log.sm.snapshot()).equals(Buffer.from(reference.sm.snapshot()))).toBe(true);
    });
  }

  it('survives random bytes and random mutations of valid commands, identically on two machines', () => {
    const random = new SeededRandom(24);
    const a = new Log();
    const b = new Log();
    const samples = [valid, enc(9, append('g', 1, 's', 'payload')), enc(3, { op: 'renewMany', owner: 'a~1', leases: [{ name: 'g', term: 1 }], ttlMs: 500 }, { client: 'c', seq: 1, ack: 1 })];
    for (let i = 0; i < 3000; i++) {
      let bytes: Uint8Array;
      if (i % 3 === 0) bytes = Uint8Array.from({ length: randomInt(random, 0, 64) }, () => randomInt(random, 0, 256));
      else {
        bytes = Uint8Array.from(samples[i % samples.length]!);
        for (let k = randomInt(random, 1, 4); k > 0; k--) bytes[randomInt(random, 0, bytes.length)] = randomInt(random, 0, 256);
      }
      const ra = a.raw(bytes);
      const rb = b.raw(bytes);
      expect(ra).toEqual(rb);
    }
    expect(Buffer.from(a.sm.snapshot()).equals(Buffer.from(b.sm.snapshot()))).toBe(true);
  });

  it('refuses an entry index that does not increase (a node bug), and a command too large to encode', () => {
    const log = new Log();
    log.apply(0, { op: 'tick' });
    expect(() => log.sm.apply(1, new Uint8Array(0))).toThrow(/entry 1 applied after entry 1/);
    expect(() => enc(0, append('g', 1, 's', 'x'.repeat(1024 * 1024 + 1)))).toThrow(InvalidArgumentError);
    // The largest payload encodes within the command bound even when every character escapes.
    expect(enc(0, append('g', 1, 's', '\u0001'.repeat(1024 * 1024))).length).toBeLessThanOrEqual(COMMAND_MAX_BYTES + 6);
    expect(decodeCommand(enc(7, { op: 'takeover', raftTerm: 3 }, { client: 'c', seq: 2, ack: 1 }))).toEqual({ timeMs: 7, session: { client: 'c', seq: 2, ack: 1 }, operation: { op: 'takeover', raftTerm: 3 } });
  });
});

/** A random but valid command log over a few names, owners and streams, with sessions and retries. */
function randomLog(seed: number, n: number): Uint8Array[] {
  const random = new SeededRandom(seed);
  const names = ['g1', 'g2', 'g3', 'jobs/a'];
  const owners = ['a~1', 'b~1', 'c~1'];
  const pick = <T>(xs: readonly T[]): T => xs[randomInt(random, 0, xs.length)]!;
  const out: Uint8Array[] = [];
  let time = 0;
  const seqs = new Map<string, number>();
  for (let i = 0; i < n; i++) {
    time += randomInt(random, 0, 40);
    const client = pick(['c1', 'c2', 'c3']);
    const retry = random.next() < 0.1 && (seqs.get(client) ?? 0) > 0;
    const seq = retry ? seqs.get(client)! : (seqs.get(client) ?? 0) + 1;
    seqs.set(client, seq);
    const session = random.next() < 0.8 ? { client, seq, ack: Math.max(1, seq - 3) } : undefined;
    const r = random.next();
    let op: Operation;
    if (r < 0.3) op = acquire(pick(names), pick(owners), randomInt(random, 10, 400), { i });
    else if (r < 0.45) op = renew(pick(names), pick(owners), randomInt(random, 1, 6), randomInt(random, 10, 400));
    else if (r < 0.5) op = { op: 'renewMany', owner: pick(owners), leases: [{ name: 'g1', term: randomInt(random, 1, 6) }, { name: 'g2', term: randomInt(random, 1, 6) }], ttlMs: 200 };
    else if (r < 0.6) op = { op: 'release', name: pick(names), owner: pick(owners), term: randomInt(random, 1, 6) };
    else if (r < 0.9) op = append(pick(names), randomInt(random, 1, 4), pick(['s1', 's2', 's3']), `p${i}\u{1F600}`);
    else if (r < 0.95) op = { op: 'tick' };
    else op = { op: 'takeover', raftTerm: i + 1 };
    out.push(random.next() < 0.02 ? new Uint8Array(0) : enc(time - randomInt(random, 0, 20), op, session));
  }
  return out;
}

describe('raft store state machine: determinism and snapshots', () => {
  it('gives two machines fed the same log the same answers, events and byte-equal snapshots', () => {
    const entries = randomLog(7, 4000);
    const a = new RaftStateMachine();
    const b = new RaftStateMachine();
    let applied = 0;
    entries.forEach((e, i) => {
      const ra = a.apply(i + 1, e);
      const rb = b.apply(i + 1, e);
      expect(rb).toEqual(ra);
      if (ra.result?.ok && ra.events.length > 0) applied++;
    });
    expect(applied).toBeGreaterThan(500); // the log did change things, not only refuse them
    expect(a.stats().entries).toBeGreaterThan(100);
    expect(Buffer.from(a.snapshot()).equals(Buffer.from(b.snapshot()))).toBe(true);
    expect(a.list().map((l) => l.name)).toEqual(b.list().map((l) => l.name));
  });

  it('restores exactly: restore(snapshot(s)) snapshots byte-equal, and continues as the original would', () => {
    const entries = randomLog(11, 3000);
    const original = new RaftStateMachine();
    entries.slice(0, 1500).forEach((e, i) => original.apply(i + 1, e));
    const bytes = original.snapshot();
    const restored = RaftStateMachine.restore(bytes);
    expect(Buffer.from(restored.snapshot()).equals(Buffer.from(bytes))).toBe(true);
    expect(restored.appliedIndex).toBe(1500);
    expect(restored.logTimeMs).toBe(original.logTimeMs);
    expect(restored.stats()).toEqual(original.stats());
    expect(restored.list()).toEqual(original.list());
    for (const s of ['s1', 's2', 's3']) expect(restored.readStream(s, { limit: 10_000 })).toEqual(original.readStream(s, { limit: 10_000 }));
    entries.slice(1500).forEach((e, i) => {
      expect(restored.apply(1501 + i, e)).toEqual(original.apply(1501 + i, e));
    });
    expect(Buffer.from(restored.snapshot()).equals(Buffer.from(original.snapshot()))).toBe(true);
  });

  it('refuses a damaged snapshot with StoreDataError naming what is wrong', () => {
    const sm = new RaftStateMachine();
    randomLog(3, 300).forEach((e, i) => sm.apply(i + 1, e));
    const bytes = sm.snapshot();
    const refuse = (b: Uint8Array, message: RegExp): void => {
      const err = (() => {
        try {
          RaftStateMachine.restore(b);
        } catch (e) {
          return e;
        }
        return null;
      })();
      expect(err).toBeInstanceOf(StoreDataError);
      expect((err as Error).message).toMatch(message);
    };
    refuse(bytes.subarray(0, 5), /shorter than the 13-byte header/);
    refuse(Uint8Array.from(bytes, (b, i) => (i === 0 ? b ^ 1 : b)), /bad magic/);
    refuse(Uint8Array.from(bytes, (b, i) => (i === 4 ? 9 : b)), /version 9/);
    refuse(bytes.subarray(0, bytes.length - 1), /header says/);
    // Every single flipped bit in the body is caught by the checksum (sampled across the body).
    for (let i = 13; i < bytes.length; i += Math.max(1, Math.floor(bytes.length / 200))) {
      refuse(Uint8Array.from(bytes, (b, k) => (k === i ? b ^ 0x10 : b)), /checksum mismatch/);
    }
    // A body with a valid checksum but content that is not a state: format 1 (one JSON object)...
    const v1 = (body: unknown): Uint8Array => forge(Buffer.from(JSON.stringify(body)), 1);
    refuse(v1([1]), /body is not an object/);
    refuse(v1({ applied: -1, time: 0, bounds: [1, 1], leases: [], fences: [], streams: [], sessions: [] }), /applied is not an integer/);
    refuse(v1({ applied: 1, time: 0, leases: [], fences: [], streams: [], sessions: [] }), /bounds is not an array/);
    refuse(v1({ applied: 1, time: 0, bounds: [0, 5], leases: [], fences: [], streams: [], sessions: [] }), /maxSessions is 0/);
    refuse(v1({ applied: 1, time: 0, bounds: [1, 1], leases: [['g', 'a', 'x', 0, 0, {}]], fences: [], streams: [], sessions: [] }), /the term of g/);
    refuse(v1({ applied: 1, time: 0, bounds: [1, 1], leases: [], fences: [['g', 1], ['g', 2]], streams: [], sessions: [] }), /fence g appears twice/);
    refuse(v1({ applied: 1, time: 0, bounds: [1, 1], leases: [], fences: [], streams: [['s', [['g', 1]]]], sessions: [] }), /payload of entry 1 of s/);
    refuse(v1({ applied: 1, time: 0, bounds: [1, 1], leases: [], fences: [], streams: [], sessions: 'x' }), /sessions is not an array/);
    // ... and format 2 (lines).
    const v2 = (...lines: unknown[]): Uint8Array => forge(Buffer.from(lines.map((l) => `${JSON.stringify(l)}\n`).join('')), 2);
    const state = (leases: number, fences: number, streams: number, sessions: number): unknown[] => ['tenure-state', 1, 0, 1, 1, leases, fences, streams, sessions];
    refuse(v2(['not-state', 1, 0, 1, 1, 0, 0, 0, 0]), /first line is not the state line/);
    refuse(v2(state(1, 0, 0, 0)), /the body ends before a lease/);
    refuse(v2(state(0, 2, 0, 0), ['g', 1], ['g', 2]), /fence g appears twice/);
    refuse(v2(state(0, 0, 1, 0), ['s', 2], ['g', 1, 'x', 0]), /the body ends before entry 2 of s/);
    refuse(v2(state(0, 0, 1, 0), ['s', 1], ['g', 1]), /payload of entry 1 of s/);
    refuse(v2(state(0, 0, 0, 0), ['extra']), /bytes follow the last session/);
    refuse(forge(Buffer.from(JSON.stringify(state(0, 0, 0, 0))), 2), /line 1 has no newline/);
    refuse(forge(Buffer.concat([Buffer.from('["tenure-state",1,0,1,1,1,0,0,0]\n["'), Buffer.from([0xff, 0xfe]), Buffer.from('"]\n')]), 2), /line 2 is not UTF-8 JSON/);
  });

  it('restores a format 1 snapshot (one JSON text, as older members wrote) to the same state', () => {
    const sm = new RaftStateMachine();
    randomLog(11, 3000).forEach((e, i) => sm.apply(i + 1, e));
    const bytes = sm.snapshot();
    expect(bytes[4]).toBe(2);
    // The same state in format 1, made from the lines of format 2.
    const lines = Buffer.from(bytes.subarray(13)).toString('utf8').split('\n').slice(0, -1).map((l) => JSON.parse(l) as unknown[]);
    const [, applied, time, maxSessions, maxResults, leases, fences, streams] = lines[0] as number[];
    let at = 1;
    const take = (n: number): unknown[] => lines.slice(at, (at += n));
    const body = {
      applied,
      time,
      bounds: [maxSessions, maxResults],
      leases: take(leases!),
      fences: take(fences!),
      streams: Array.from({ length: streams! }, () => {
        const [name, n] = take(1)[0] as [string, number];
        return [name, take(n)];
      }),
      sessions: lines.slice(at),
    };
    const restored = RaftStateMachine.restore(forge(Buffer.from(JSON.stringify(body)), 1));
    expect(Buffer.from(restored.snapshot()).equals(Buffer.from(bytes))).toBe(true);
    expect(restored.stats()).toEqual(sm.stats());
    // Every section of the state was there to convert.
    expect(sm.stats()).toMatchObject({ leases: expect.any(Number), streams: 3 });
    expect(Math.min(sm.stats().leases, sm.stats().entries, sm.stats().sessions)).toBeGreaterThan(0);
  });

  it('snapshots and restores a state larger than one JavaScript string can hold (format 1 could not: one JSON text of it)', () => {
    // 1,100 entries of 512 KiB (one string, shared): 550 MiB of payload, over V8's 512 MiB string limit.
    const log = new Log();
    log.value(1000, acquire('g', 'a~1', 60_000));
    const payload = 'x'.repeat(512 * 1024);
    for (let i = 0; i < 1100; i++) log.value(1000, append('g', 1, 'big', payload));
    expect(() => JSON.stringify(Array.from({ length: 1100 }, () => payload))).toThrow(RangeError);
    const bytes = log.sm.snapshot();
    expect(bytes.length).toBeGreaterThan(1100 * 512 * 1024);
    const restored = RaftStateMachine.restore(bytes);
    expect(restored.stats()).toEqual(log.sm.stats());
    const last = restored.readStream('big', { after: 1099, limit: 1 });
    expect(last.map((e) => [e.seq, e.payload.length])).toEqual([[1100, 512 * 1024]]);
  }, 120_000);
});

/** A snapshot of `body` in format `version`, with a valid header and checksum. */
function forge(body: Buffer, version: number): Uint8Array {
  const out = new Uint8Array(13 + body.length);
  const view = new DataView(out.buffer);
  view.setUint32(0, 0x4d53_4e54, true);
  out[4] = version;
  view.setUint32(5, crc32c(body), true);
  view.setUint32(9, body.length, true);
  out.set(body, 13);
  return out;
}

