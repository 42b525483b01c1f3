/**
 * The one contract every Store must pass. Scenarios are written once and run per backend.
 */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { InvalidArgumentError, StaleTermError, ClosedError } from '../../src/core/index.js';
import type { FencingToken, Lease, Store } from '../../src/core/index.js';
import type { Backend } from './backends.js';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export function storeContract(backend: Backend): void {
  // A short TTL this backend expires on time, and a sleep that outlasts it (Backend.minTtlMs).
  const short = (ttlMs: number): number => Math.max(ttlMs, backend.minTtlMs ?? 0);
  const outlive = (ttlMs: number): Promise<unknown> => sleep(short(ttlMs) + 30 + (backend.expiryLagMs ?? 0));

  const caps = backend.capabilities;
  describe(`Store contract: ${backend.name}`, () => {
    let store: Store;
    let cleanup: () => Promise<void>;

    beforeEach(async () => {
      ({ store, cleanup } = await backend.open());
    });
    afterEach(async () => {
      await cleanup();
    });

    describe('acquire', () => {
      it('gives term 1 to the first holder of a name, with the meta and the remaining time', async () => {
        const r = await store.acquire('g', 'a~1', 5000, { url: 'http://a' });
        expect(r.acquired).toBe(true);
        expect(r.lease).toMatchObject({ name: 'g', owner: 'a~1', term: 1, ttlMs: 5000, meta: { url: 'http://a' } });
        expect(r.lease.remainingMs).toBeGreaterThan(4000);
        expect(r.lease.remainingMs).toBeLessThanOrEqual(5000);
      });

      it('is a live renewal for the same owner: same term, new meta', async () => {
        await store.acquire('g', 'a~1', 5000, { v: 1 });
        const r = await store.acquire('g', 'a~1', 5000, { v: 2 });
        expect(r).toMatchObject({ acquired: true, lease: { term: 1, meta: { v: 2 } } });
      });

      it('reports the live holder to another owner without taking the lease', async () => {
        await store.acquire('g', 'a~1', 5000, { url: 'http://a' });
        const r = await store.acquire('g', 'b~1', 5000);
        expect(r.acquired).toBe(false);
        expect(r.lease).toMatchObject({ owner: 'a~1', term: 1, meta: { url: 'http://a' } });
        expect(r.lease.remainingMs).toBeGreaterThan(0);
        expect(r.lease.remainingMs).toBeLessThanOrEqual(5000);
      });

      it('lets exactly one of 50 concurrent acquirers win', async () => {
        const results = await Promise.all(Array.from({ length: 50 }, (_, i) => store.acquire('contended', `n${i}~x`, 5000)));
        const winners = results.filter((r) => r.acquired);
        expect(winners).toHaveLength(1);
        const winner = winners[0]!.lease.owner;
        for (const r of results) expect(r.lease).toMatchObject({ owner: winner, term: 1 });
        expect(await store.read('contended')).toMatchObject({ owner: winner, term: 1 });
      });

      it('after expiry gives the lease to another node with term + 1', async () => {
        await store.acquire('g', 'a~1', short(50));
        await outlive(50);
        expect(await store.read('g')).toBeNull();
        const r = await store.acquire('g', 'b~1', 5000);
        expect(r).toMatchObject({ acquired: true, lease: { owner: 'b~1', term: 2 } });
      });

      it('gives a new term to a restarted process that reuses its node id', async () => {
        await store.acquire('g', 'node-1~first', short(50));
        const whileLive = await store.acquire('g', 'node-1~second', 5000);
        expect(whileLive).toMatchObject({ acquired: false, lease: { owner: 'node-1~first', term: 1 } });
        await outlive(50);
        const r = await store.acquire('g', 'node-1~second', 5000);
        expect(r).toMatchObject({ acquired: true, lease: { owner: 'node-1~second', term: 2 } });
      });

      it('gives a new term to the same owner after its own lease expired', async () => {
        await store.acquire('g', 'a~1', short(50));
        await outlive(50);
        expect(await store.acquire('g', 'a~1', 5000)).toMatchObject({ acquired: true, lease: { term: 2 } });
      });

      it('keeps leases of different names independent', async () => {
        await store.acquire('g1', 'a~1', 5000);
        expect(await store.acquire('g2', 'b~1', 5000)).toMatchObject({ acquired: true, lease: { term: 1 } });
      });
    });

    describe('renew', () => {
      it('extends the lease for the holder, keeping its meta', async () => {
        await store.acquire('g', 'a~1', 300, { url: 'http://a' });
        await sleep(150);
        const before = (await store.read('g'))!.remainingMs;
        const r = await store.renew('g', 'a~1', 1, 300);
        expect(r.renewed).toBe(true);
        expect(r.lease!.remainingMs).toBeGreaterThan(before);
        await sleep(200);
        expect(await store.read('g')).toMatchObject({ owner: 'a~1', term: 1, meta: { url: 'http://a' } });
        // A renewal with another TTL keeps the meta too.
        expect((await store.renew('g', 'a~1', 1, 400)).lease).toMatchObject({ owner: 'a~1', term: 1, meta: { url: 'http://a' } });
        expect(await store.read('g')).toMatchObject({ owner: 'a~1', term: 1, meta: { url: 'http://a' } });
      });

      it('fails for anyone else, for a wrong term, and after expiry', async () => {
        await store.acquire('g', 'a~1', short(100));
        expect(await store.renew('g', 'b~1', 1, 100)).toMatchObject({ renewed: false, lease: { owner: 'a~1' } });
        expect((await store.renew('g', 'a~1', 2, 100)).renewed).toBe(false);
        expect((await store.renew('nobody', 'a~1', 1, 100)).renewed).toBe(false);
        await outlive(100);
        expect(await store.renew('g', 'a~1', 1, 100)).toEqual({ renewed: false, lease: null });
        expect(await store.read('g')).toBeNull();
      });
    });

    describe('release', () => {
      it('is compare-and-set on owner and term, and keeps the term', async () => {
        await store.acquire('g', 'a~1', 5000);
        expect(await store.release('g', 'b~1', 1)).toBe(false);
        expect(await store.release('g', 'a~1', 2)).toBe(false);
        expect(await store.read('g')).toMatchObject({ owner: 'a~1' });
        expect(await store.release('g', 'a~1', 1)).toBe(true);
        expect(await store.read('g')).toBeNull();
        expect(await store.release('g', 'a~1', 1)).toBe(false);
        expect(await store.acquire('g', 'a~1', 5000)).toMatchObject({ acquired: true, lease: { term: 2 } });
      });

      it('does not release a newer holder when a stale owner retries', async () => {
        await store.acquire('g', 'a~1', short(50));
        await outlive(50);
        await store.acquire('g', 'b~1', 5000);
        expect(await store.release('g', 'a~1', 1)).toBe(false);
        expect(await store.read('g')).toMatchObject({ owner: 'b~1', term: 2 });
      });
    });

    describe('read and list', () => {
      it('lists live leases by prefix, sorted by name', async () => {
        await store.acquire('jobs/b', 'x~1', 5000);
        await store.acquire('jobs/a', 'x~1', 5000);
        await store.acquire('jobs/c', 'x~1', short(50));
        await store.acquire('other', 'x~1', 5000);
        await outlive(50);
        const names = (await store.list('jobs/')).map((l: Lease) => l.name);
        expect(names).toEqual(['jobs/a', 'jobs/b']);
        expect((await store.list()).map((l) => l.name)).toEqual(['jobs/a', 'jobs/b', 'other']);
        expect(await store.list('zzz')).toEqual([]);
      });

      it('treats % and _ in a prefix as plain characters', async () => {
        await store.acquire('a_b', 'x~1', 5000);
        await store.acquire('axb', 'x~1', 5000);
        await store.acquire('a%c', 'x~1', 5000);
        expect((await store.list('a_')).map((l) => l.name)).toEqual(['a_b']);
        expect((await store.list('a%')).map((l) => l.name)).toEqual(['a%c']);
      });
    });

    describe('fenced streams', () => {
      it('accepts the current term, numbering entries from 1 without gaps', async () => {
        const { lease } = await store.acquire('g', 'a~1', 5000);
        const token = { lease: 'g', term: lease.term };
        expect(await store.appendFenced(token, 's', 'one')).toBe(1);
        expect(await store.appendFenced(token, 's', 'two')).toBe(2);
        expect(await store.appendFenced(token, 'other', 'x')).toBe(1);
        const entries = await store.readStream('s');
        expect(entries).toEqual([
          { stream: 's', seq: 1, lease: 'g', term: 1, payload: 'one' },
          { stream: 's', seq: 2, lease: 'g', term: 1, payload: 'two' },
        ]);
      });

      it('rejects an older term with StaleTermError and writes nothing', async () => {
        await store.acquire('g', 'a~1', short(50));
        await store.appendFenced({ lease: 'g', term: 1 }, 's', 'by a');
        await outlive(50);
        await store.acquire('g', 'b~1', 5000);
        await store.appendFenced({ lease: 'g', term: 2 }, 's', 'by b');
        const err = await store.appendFenced({ lease: 'g', term: 1 }, 's', 'stale').catch((e: unknown) => e);
        expect(err).toBeInstanceOf(StaleTermError);
        expect(err).toMatchObject({ code: 'STALE_TERM', lease: 'g', term: 1, currentTerm: 2 });
        expect((err as Error).message).toBe('stale fencing token: term 1 < 2 for group g');
        expect((await store.readStream('s')).map((e) => e.payload)).toEqual(['by a', 'by b']);
      });

      it('fences by the highest term accepted, even before the new holder writes to that stream', async () => {
        await store.acquire('g', 'a~1', short(50));
        await outlive(50);
        await store.acquire('g', 'b~1', 5000);
        await store.appendFenced({ lease: 'g', term: 2 }, 'elsewhere', 'b was here');
        await expect(store.appendFenced({ lease: 'g', term: 1 }, 's', 'stale')).rejects.toBeInstanceOf(StaleTermError);
        expect(await store.readStream('s')).toEqual([]);
      });

      it('rejects a term the store never issued', async () => {
        await store.acquire('g', 'a~1', 5000);
        await expect(store.appendFenced({ lease: 'g', term: 7 }, 's', 'x')).rejects.toBeInstanceOf(InvalidArgumentError);
        await expect(store.appendFenced({ lease: 'never', term: 1 }, 's', 'x')).rejects.toBeInstanceOf(InvalidArgumentError);
        expect(await store.readStream('s')).toEqual([]);
      });

      it('leaves a stream whose terms never decrease under concurrent appends from two terms', async () => {
        await store.acquire('g', 'a~1', short(50));
        await outlive(50);
        await store.acquire('g', 'b~1', 5000);
        const attempts: Promise<string>[] = [];
        for (let i = 0; i < 40; i++) {
          for (const term of [1, 2]) {
            attempts.push(
              store.appendFenced({ lease: 'g', term }, 's', `${term}:${i}`).then(
                () => 'ok',
                (e: unknown) => (e instanceof StaleTermError ? 'stale' : `error ${String(e)}`),
              ),
            );
          }
        }
        const outcomes = await Promise.all(attempts);
        expect(outcomes.filter((o) => o !== 'ok' && o !== 'stale')).toEqual([]);
        const entries = await store.readStream('s');
        expect(entries.length).toBe(outcomes.filter((o) => o === 'ok').length);
        for (let i = 1; i < entries.length; i++) expect(entries[i]!.term).toBeGreaterThanOrEqual(entries[i - 1]!.term);
        expect(entries.filter((e) => e.term === 2)).toHaveLength(40);
      });

      it('gives a stream to the lease of its first entry: another lease is refused as bad input, nothing written', async () => {
        await store.acquire('g', 'a~1', 5000);
        await store.acquire('h', 'b~1', 5000);
        expect(await store.appendFenced({ lease: 'g', term: 1 }, 's1', 'by g')).toBe(1);
        const err = await store.appendFenced({ lease: 'h', term: 1 }, 's1', 'by h').catch((e: unknown) => e);
        expect(err).toBeInstanceOf(InvalidArgumentError);
        expect(err).toMatchObject({ code: 'INVALID_ARGUMENT', field: 'stream' });
        expect((err as Error).message).toBe('stream: stream s1 belongs to lease g, not h');
        // Again, after the store has seen the stream's head (stores that remember heads take another path).
        expect(await store.appendFenced({ lease: 'g', term: 1 }, 's1', 'by g again')).toBe(2);
        await expect(store.appendFenced({ lease: 'h', term: 1 }, 's1', 'by h again')).rejects.toMatchObject({ code: 'INVALID_ARGUMENT', field: 'stream' });
        expect((await store.readStream('s1')).map((e) => [e.lease, e.payload])).toEqual([
          ['g', 'by g'],
          ['g', 'by g again'],
        ]);
        // h's refused appends raised no fence of h's: its term 1 still writes its own streams.
        expect(await store.appendFenced({ lease: 'h', term: 1 }, 's2', 'by h')).toBe(1);
        // A stale token is still told it is stale (exit 3), whatever the stream.
        await store.acquire('g', 'a~1', 5000);
        await store.release('g', 'a~1', 1);
        await store.acquire('g', 'c~1', 5000);
        await store.appendFenced({ lease: 'g', term: 2 }, 's1', 'by g, term 2');
        await expect(store.appendFenced({ lease: 'g', term: 1 }, 's1', 'late')).rejects.toBeInstanceOf(StaleTermError);
      });

      it('lets exactly one of three leases own a new stream that all append to at once, numbered 1..n', async () => {
        const tokens: FencingToken[] = [];
        for (const lease of ['p', 'q', 'r']) tokens.push({ lease, term: (await store.acquire(lease, `${lease}~1`, 5000)).lease.term });
        const outcomes = await Promise.all(
          Array.from({ length: 30 }, (_, i) =>
            store.appendFenced(tokens[i % 3]!, 'shared', `e${i}`).then(
              (seq) => ({ i, seq }),
              (e: unknown) => ({ i, error: e }),
            ),
          ),
        );
        const written = outcomes.filter((o): o is { i: number; seq: number } => 'seq' in o);
        const refused = outcomes.filter((o): o is { i: number; error: unknown } => 'error' in o);
        for (const r of refused) expect(r.error).toMatchObject({ code: 'INVALID_ARGUMENT', field: 'stream' });
        const entries = await store.readStream('shared');
        expect(entries.length).toBe(written.length);
        expect(written.length).toBeGreaterThan(0);
        const owner = entries[0]!.lease;
        expect(new Set(entries.map((e) => e.lease))).toEqual(new Set([owner]));
        expect(entries.map((e) => e.seq)).toEqual(Array.from({ length: entries.length }, (_, i) => i + 1));
        // Each call's seq names the entry it wrote; every call of the owner's lease was written.
        for (const { i, seq } of written) expect(entries[seq - 1]!.payload).toBe(`e${i}`);
        expect(written.length).toBe(10);
        for (const r of refused) expect(tokens[r.i % 3]!.lease).not.toBe(owner);
      });

      it('reads after a sequence number, with a limit', async () => {
        await store.acquire('g', 'a~1', 5000);
        for (let i = 1; i <= 5; i++) await store.appendFenced({ lease: 'g', term: 1 }, 's', `e${i}`);
        expect((await store.readStream('s', { after: 2, limit: 2 })).map((e) => e.seq)).toEqual([3, 4]);
        expect(await store.readStream('s', { after: 5 })).toEqual([]);
        expect(await store.readStream('missing')).toEqual([]);
      });
    });

    describe('bad input', () => {
      const badNames: [string, unknown][] = [
        ['empty', ''],
        ['201 characters', 'x'.repeat(201)],
        ['a newline', 'a\nb'],
        ['a NUL', 'a\u0000b'],
        ['a lone high surrogate', 'g\uD800'],
        ['a lone low surrogate', 'g\uDC00'],
        ['a reversed surrogate pair', 'g\uDC00\uD800'],
        ['not a string', 42],
      ];
      for (const [what, name] of badNames) {
        it(`rejects a lease name that is ${what}`, async () => {
          await expect(store.acquire(name as string, 'a~1', 1000)).rejects.toBeInstanceOf(InvalidArgumentError);
          await expect(store.renew(name as string, 'a~1', 1, 1000)).rejects.toBeInstanceOf(InvalidArgumentError);
          await expect(store.release(name as string, 'a~1', 1)).rejects.toBeInstanceOf(InvalidArgumentError);
          await expect(store.read(name as string)).rejects.toBeInstanceOf(InvalidArgumentError);
          await expect(store.appendFenced({ lease: 'g', term: 1 }, name as string, 'x')).rejects.toBeInstanceOf(InvalidArgumentError);
        });
      }

      it('keeps names that differ only in ill-formed UTF-16 apart by refusing them (one lease everywhere, never three)', async () => {
        expect((await store.acquire('g\uFFFD', 'a~1', 5000)).acquired).toBe(true);
        for (const name of ['g\uD800', 'g\uDBFF']) {
          const err = await store.acquire(name, 'b~1', 5000).catch((e: unknown) => e);
          expect(err).toBeInstanceOf(InvalidArgumentError);
          expect((err as Error).message).toMatch(/^name: must be well-formed Unicode/);
          await expect(store.appendFenced({ lease: name, term: 1 }, 's', 'x')).rejects.toBeInstanceOf(InvalidArgumentError);
          await expect(store.readStream(name)).rejects.toBeInstanceOf(InvalidArgumentError);
        }
        await expect(store.acquire('g', 'a\uD83D~1', 5000)).rejects.toBeInstanceOf(InvalidArgumentError);
        await expect(store.appendFenced({ lease: 'g\uFFFD', term: 1 }, 's', 'bad \uDE00 payload')).rejects.toBeInstanceOf(InvalidArgumentError);
        // Well-formed astral characters (a surrogate pair) are fine, and distinct from U+FFFD.
        expect(await store.acquire('g\u{1F600}', 'b~1', 5000)).toMatchObject({ acquired: true, lease: { name: 'g\u{1F600}', term: 1 } });
        expect(await store.appendFenced({ lease: 'g\u{1F600}', term: 1 }, 's\u{1F600}', 'p\u{1F600}')).toBe(1);
        expect((await store.list('g')).map((l) => l.name).sort()).toEqual(['g\u{1F600}', 'g\uFFFD'].sort());
        expect(await store.readStream('s')).toEqual([]);
      });

      it('accepts a name of exactly 200 characters', async () => {
        expect((await store.acquire('n'.repeat(200), 'a~1', 1000)).acquired).toBe(true);
      });

      for (const ttl of [0, -1, 1.5, Number.NaN, 9, 24 * 3600 * 1000 + 1]) {
        it(`rejects a TTL of ${ttl} naming the field and the range`, async () => {
          const err = await store.acquire('g', 'a~1', ttl).catch((e: unknown) => e);
          expect(err).toBeInstanceOf(InvalidArgumentError);
          expect((err as Error).message).toMatch(/^ttlMs: .*\[10, 86400000\]/);
          await expect(store.renew('g', 'a~1', 1, ttl)).rejects.toBeInstanceOf(InvalidArgumentError);
        });
      }

      it('rejects bad owners, terms, meta and read options', async () => {
        await expect(store.acquire('g', '', 1000)).rejects.toBeInstanceOf(InvalidArgumentError);
        await expect(store.renew('g', 'a~1', 0, 1000)).rejects.toBeInstanceOf(InvalidArgumentError);
        await expect(store.appendFenced({ lease: 'g', term: -2 }, 's', 'x')).rejects.toBeInstanceOf(InvalidArgumentError);
        await expect(store.acquire('g', 'a~1', 1000, { big: 'x'.repeat(20_000) })).rejects.toBeInstanceOf(InvalidArgumentError);
        await expect(store.readStream('s', { limit: 0 })).rejects.toBeInstanceOf(InvalidArgumentError);
        await expect(store.readStream('s', { after: -1 })).rejects.toBeInstanceOf(InvalidArgumentError);
        expect(await store.read('g')).toBeNull();
      });
    });

    describe('capabilities', () => {
      it(`declares what its store has: renewMany ${caps.renewMany === true ? 'yes' : 'no'}, watch ${caps.watch === true ? 'yes' : 'no'}`, () => {
        expect(typeof store.renewMany === 'function').toBe(caps.renewMany === true);
        expect(typeof store.watch === 'function').toBe(caps.watch === true);
      });
    });

    describe('renewMany (where the store batches renewals)', () => {
      it.skipIf(caps.renewMany !== true)(`renews every lease the owner holds live with its term, and reports the lost ones, in order${skipped(caps.renewMany)}`, async () => {
        const renewMany = store.renewMany!.bind(store);
        await store.acquire('m/a', 'x~1', 2000, { k: 'a' });
        await store.acquire('m/b', 'x~1', 2000);
        await store.acquire('m/other', 'y~1', 5000);
        await store.acquire('m/expired', 'x~1', short(50));
        await outlive(50);
        const results = await renewMany(
          'x~1',
          [
            { name: 'm/b', term: 1 },
            { name: 'm/a', term: 1 },
            { name: 'm/other', term: 1 },
            { name: 'm/expired', term: 1 },
            { name: 'm/missing', term: 1 },
          ],
          5000,
        );
        expect(results.map((r) => r.renewed)).toEqual([true, true, false, false, false]);
        expect(results[0]!.lease).toMatchObject({ name: 'm/b', owner: 'x~1', term: 1, ttlMs: 5000 });
        expect(results[1]!.lease).toMatchObject({ name: 'm/a', owner: 'x~1', term: 1, meta: { k: 'a' } });
        expect(results[0]!.lease!.remainingMs).toBeGreaterThan(2500); // extended past the first 2 s
        expect(results[1]!.lease!.remainingMs).toBeGreaterThan(2500);
        expect(results[2]!.lease).toMatchObject({ name: 'm/other', owner: 'y~1', term: 1 });
        expect(results[3]).toEqual({ renewed: false, lease: null });
        expect(results[4]).toEqual({ renewed: false, lease: null });
        expect((await store.read('m/a'))!.remainingMs).toBeGreaterThan(2500);
        expect(await store.read('m/b')).toMatchObject({ owner: 'x~1', term: 1 });
        expect(await store.read('m/expired')).toBeNull();
        // A wrong term or owner renews nothing.
        const wrong = await renewMany('x~1', [{ name: 'm/a', term: 2 }], 5000);
        expect(wrong).toMatchObject([{ renewed: false, lease: { owner: 'x~1', term: 1 } }]);
        expect((await renewMany('y~1', [{ name: 'm/a', term: 1 }], 5000))[0]!.renewed).toBe(false);
        expect(await renewMany('x~1', [], 5000)).toEqual([]);
      });

      it.skipIf(caps.renewMany !== true)(`rejects bad input without renewing anything${skipped(caps.renewMany)}`, async () => {
        const renewMany = store.renewMany!.bind(store);
        await store.acquire('m/a', 'x~1', 5000);
        await expect(renewMany('x~1', [{ name: 'm/a', term: 1 }, { name: 'm/a', term: 1 }], 5000)).rejects.toBeInstanceOf(InvalidArgumentError);
        await expect(renewMany('x~1', [{ name: '', term: 1 }], 5000)).rejects.toBeInstanceOf(InvalidArgumentError);
        await expect(renewMany('x~1', [{ name: 'm/a', term: 0 }], 5000)).rejects.toBeInstanceOf(InvalidArgumentError);
        await expect(renewMany('x~1', [{ name: 'm/a', term: 1 }], 5)).rejects.toBeInstanceOf(InvalidArgumentError);
        await expect(renewMany('', [{ name: 'm/a', term: 1 }], 5000)).rejects.toBeInstanceOf(InvalidArgumentError);
      });
    });

    describe('watch (where the store pushes)', () => {
      it.skipIf(caps.watch !== true)(`tells a watcher of release and of a new holder${skipped(caps.watch)}`, async () => {
        const seen: (string | null)[] = [];
        const stop = store.watch!('g', (lease) => seen.push(lease ? `${lease.owner}@${lease.term}` : null));
        await store.acquire('g', 'a~1', 5000);
        await store.release('g', 'a~1', 1);
        await store.acquire('g', 'b~1', 5000);
        await waitFor(() => seen.length >= 3);
        expect(seen).toEqual(['a~1@1', null, 'b~1@2']);
        stop();
      });
    });

    describe('close', () => {
      it('makes later calls fail with ClosedError', async () => {
        await store.close();
        await expect(store.read('g')).rejects.toBeInstanceOf(ClosedError);
        await expect(store.acquire('g', 'a~1', 1000)).rejects.toBeInstanceOf(ClosedError);
      });
    });
  });
}

/** The reason a scenario is skipped, for its title in the report. */
function skipped(capability: true | string): string {
  return capability === true ? '' : ` [skipped: ${capability}]`;
}

async function waitFor(cond: () => boolean, timeoutMs = 2000): Promise<void> {
  const start = Date.now();
  while (!cond()) {
    if (Date.now() - start > timeoutMs) throw new Error('condition not met in time');
    await sleep(5);
  }
}
