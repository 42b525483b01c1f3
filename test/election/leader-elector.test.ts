import { describe, expect, it } from 'vitest';
import { InvalidArgumentError, NotLeaderError, SeededRandom, StoreUnavailableError, VirtualClock } from '../../src/core/index.js';
import type { Lease, Store } from '../../src/core/index.js';
import { LeaderElector } from '../../src/election/index.js';
import { MemoryStore } from '../../src/stores/memory/index.js';

const flush = () => new Promise<void>((r) => setImmediate(r));

function world() {
  const clock = new VirtualClock();
  const store = new MemoryStore({ clock });
  const random = new SeededRandom(7);
  const advance = (ms: number) => clock.runUntil(clock.now() + ms, flush);
  const elector = (id: string, s: Store = store, ttlMs = 1000) =>
    new LeaderElector({ store: s, group: 'g', id, ttlMs, clock, random });
  return { clock, store, advance, elector };
}

type Fault = 'none' | 'lost-reply' | 'crashed';

/**
 * A node's view of the store under a fault: 'lost-reply' applies each call but never answers;
 * 'crashed' neither applies nor answers (the node's process is gone).
 */
function faulty(inner: Store, mode: { fault: Fault }): Store {
  const wrap =
    <A extends unknown[], R>(fn: (...args: A) => Promise<R>) =>
    (...args: A): Promise<R> => {
      if (mode.fault === 'none') return fn.apply(inner, args);
      if (mode.fault === 'lost-reply') void fn.apply(inner, args).catch(() => {});
      return new Promise<R>(() => {});
    };
  return {
    kind: inner.kind,
    acquire: wrap(inner.acquire),
    renew: wrap(inner.renew),
    release: wrap(inner.release),
    read: wrap(inner.read),
    list: wrap(inner.list),
    appendFenced: wrap(inner.appendFenced),
    readStream: wrap(inner.readStream),
    watch: (name, listener) => inner.watch!(name, (lease) => mode.fault === 'none' && listener(lease)),
    close: () => inner.close(),
  };
}

describe('LeaderElector timing options', () => {
  const store = new MemoryStore();
  it('uses documented defaults: ttl 10 s, renew ttl/3, margin ttl/10', () => {
    const e = new LeaderElector({ store, group: 'g' });
    expect(e.timing).toMatchObject({ ttlMs: 10_000, renewIntervalMs: 3333, marginMs: 1000 });
  });
  it('rejects a renew interval that does not leave time before the deadline, naming the field', () => {
    expect(() => new LeaderElector({ store, group: 'g', ttlMs: 1000, marginMs: 100, renewIntervalMs: 900 })).toThrow(
      /^renewIntervalMs: must be < ttlMs - marginMs = 900/,
    );
  });
  it('rejects a margin not below the TTL and a bad group', () => {
    expect(() => new LeaderElector({ store, group: 'g', ttlMs: 1000, marginMs: 1000 })).toThrow(InvalidArgumentError);
    expect(() => new LeaderElector({ store, group: 'g', ttlMs: 5 })).toThrow(/^ttlMs: must be in \[10, 86400000\]/);
    expect(() => new LeaderElector({ store, group: '' })).toThrow(/^group: must not be empty/);
  });
});

describe('LeaderElector', () => {
  it('elects the first node with term 1 and gives its work a signal, the term and the token', async () => {
    const w = world();
    const a = w.elector('a');
    const seen: unknown[] = [];
    void a.runWhileLeader(({ term, token, signal }) => {
      seen.push({ term, token, aborted: signal.aborted });
    });
    await w.advance(1);
    expect(a.isLeader).toBe(true);
    expect(a.term).toBe(1);
    expect(seen).toEqual([{ term: 1, token: { lease: 'g', term: 1 }, aborted: false }]);
    await a.stop();
  });

  it('keeps leadership across renewals while the store answers', async () => {
    const w = world();
    const a = w.elector('a');
    let renewals = 0;
    a.on('renewed', () => renewals++);
    a.start();
    await w.advance(10_000);
    expect(a.isLeader).toBe(true);
    expect(a.term).toBe(1);
    expect(renewals).toBeGreaterThanOrEqual(29);
    await a.stop();
  });

  it('ends leadership at send time + ttl - margin when renewals get no reply, though the store applied them', async () => {
    const w = world();
    const mode = { fault: 'none' as Fault };
    const a = w.elector('a', faulty(w.store, mode));
    let abortedAt: number | null = null;
    const deposed: string[] = [];
    a.on('deposed', ({ reason }) => deposed.push(reason));
    void a.runWhileLeader(({ signal }) => {
      signal.addEventListener('abort', () => (abortedAt ??= w.clock.now()));
    });
    await w.advance(1);
    expect(a.isLeader).toBe(true);
    const electedSentAt = 0;
    mode.fault = 'lost-reply';
    await w.advance(5000);
    // Deadline from the acquire sent at t=0: 0 + 1000 - 100 = 900, however the store answered.
    expect(abortedAt).toBe(electedSentAt + 900);
    expect(deposed[0]).toBe('deadline');
    // stop() waits up to requestTimeoutMs for the acquires that got no answer (a win is released).
    await Promise.all([a.stop(), w.advance(1000)]);
  });

  it('hands over to a waiting node at once when the leader stops (push)', async () => {
    const w = world();
    const a = w.elector('a');
    const b = w.elector('b');
    a.start();
    await w.advance(1);
    b.start();
    await w.advance(100);
    expect(b.isLeader).toBe(false);
    const stoppedAt = w.clock.now();
    let electedAt: number | null = null;
    b.on('elected', () => (electedAt = w.clock.now()));
    await a.stop();
    await w.advance(5);
    expect(electedAt).toBe(stoppedAt);
    expect(b.term).toBe(2);
    await b.stop();
  });

  it('takes over from a crashed leader about one TTL after its last renewal, not a polling period later', async () => {
    const w = world();
    const mode = { fault: 'none' as Fault };
    const a = w.elector('a', faulty(w.store, mode));
    const b = w.elector('b');
    a.start();
    await w.advance(1);
    b.start();
    await w.advance(2000);
    // a "crashes": from now on its renewals never reach the store.
    const lastRenewal = (await w.store.read('g'))!;
    const crashedAt = w.clock.now();
    mode.fault = 'crashed';
    let electedAt = 0;
    b.on('elected', () => (electedAt = w.clock.now()));
    await w.advance(3000);
    expect(b.isLeader).toBe(true);
    expect(b.term).toBe(2);
    const expiry = crashedAt + lastRenewal.remainingMs;
    expect(electedAt).toBeGreaterThan(expiry);
    // Candidates wake at the reported expiry (+1 ms and < 20 ms jitter), not a polling period later.
    expect(electedAt - expiry).toBeLessThanOrEqual(25);
    await Promise.all([a.stop(), w.advance(1000)]);
    await b.stop();
  });

  // Rule 3's "maybe": an acquire given up on (timed out) can still be applied, later, when the
  // name is free, granting a term nobody renews (raft:// retries a write for its own timeout).
  for (const [when, landsAt] of [['while stop() waits for it', 500], ['after stop() returned', 1500]] as const) {
    it(`releases the win of an acquire it had given up on, landing ${when}`, async () => {
      const w = world();
      // a's first acquire is applied (and answered) at t = landsAt, not at once.
      let first: Promise<unknown> | null = null;
      let firstAnswer: { acquired: boolean; term: number } | null = null;
      const slow: Store = {
        ...faulty(w.store, { fault: 'none' }),
        acquire: (...args) => {
          if (first) return w.store.acquire(...args);
          const p = new Promise<void>((r) => w.clock.setTimer(landsAt, r)).then(() => w.store.acquire(...args));
          first = p.then((r) => (firstAnswer = { acquired: r.acquired, term: r.lease.term }));
          return p;
        },
      };
      const a = w.elector('a', slow);
      a.start();
      await w.advance(460); // the first acquire timed out at 333; the retry at 433 won term 1
      expect(a.term).toBe(1);
      let stopped = false;
      const stopping = a.stop().then(() => (stopped = true));
      await w.advance(landsAt - 1 - w.clock.now());
      // stop() waits for an unanswered acquire up to requestTimeoutMs (333 ms), no longer.
      expect(stopped).toBe(landsAt > 460 + 333);
      await w.advance(2);
      expect(firstAnswer).toEqual({ acquired: true, term: 2 }); // it won the free name
      await w.advance(1);
      expect(await w.store.read('g')).toBeNull(); // and was released at once, not held for its TTL
      expect(stopped).toBe(true);
      await stopping;
    });
  }

  it('deposes with reason "lost" when the store refuses the renew', async () => {
    const w = world();
    const a = w.elector('a');
    a.start();
    await w.advance(1);
    // Someone with authority took the lease over (e.g. an operator release + acquire).
    await w.store.release('g', a.owner, 1);
    await w.store.acquire('g', 'intruder~1', 5000);
    const reasons: string[] = [];
    a.on('deposed', ({ reason, holder }) => reasons.push(`${reason}:${holder?.owner}`));
    await w.advance(400);
    expect(reasons).toEqual(['lost:intruder~1']);
    expect(a.isLeader).toBe(false);
    await a.stop();
  });

  it('treats a failing store as "maybe": retries, then steps down at the deadline', async () => {
    const w = world();
    let failing = false;
    const s = new Proxy(w.store, {
      get(target, prop, receiver) {
        const v = Reflect.get(target, prop, receiver) as unknown;
        if (typeof v !== 'function') return v;
        return (...args: unknown[]) =>
          failing ? Promise.reject(new StoreUnavailableError('down')) : (v as (...a: unknown[]) => unknown).apply(target, args);
      },
    });
    const a = w.elector('a', s);
    const failures: number[] = [];
    a.on('renew-failed', () => failures.push(w.clock.now()));
    a.start();
    await w.advance(1);
    failing = true;
    await w.advance(2000);
    expect(failures.length).toBeGreaterThan(3);
    expect(a.isLeader).toBe(false);
    failing = false;
    await w.advance(2000);
    expect(a.isLeader).toBe(true);
    await a.stop();
  });

  it('resigns when leader work fails, so another node can lead', async () => {
    const w = world();
    const a = w.elector('a');
    const b = w.elector('b');
    const errors: string[] = [];
    a.on('work-error', ({ error }) => errors.push(error.message));
    void a.runWhileLeader(() => {
      throw new Error('job crashed');
    });
    await w.advance(1);
    b.start();
    await w.advance(50);
    expect(errors).toEqual(['job crashed']);
    expect(b.isLeader).toBe(true);
    expect(a.isLeader).toBe(false);
    await a.stop();
    await b.stop();
  });

  it('waits for aborted work to settle before releasing on stop', async () => {
    const w = world();
    const a = w.elector('a');
    const order: string[] = [];
    void a.runWhileLeader(
      ({ signal }) =>
        new Promise<void>((resolve) =>
          signal.addEventListener('abort', () => {
            order.push('work aborted');
            void Promise.resolve().then(() => {
              order.push('work settled');
              resolve();
            });
          }),
        ),
    );
    await w.advance(1);
    w.store.watch('g', (l) => l === null && order.push('released'));
    await a.stop();
    await w.advance(1);
    expect(order).toEqual(['work aborted', 'work settled', 'released']);
  });

  it('reports leader changes to followers, with the meta the leader published', async () => {
    const w = world();
    const a = new LeaderElector({ store: w.store, group: 'g', id: 'a', ttlMs: 1000, meta: { url: 'http://a:8080' }, clock: w.clock });
    const b = w.elector('b');
    const changes: unknown[] = [];
    b.on('leader-changed', (c) => changes.push(c));
    a.start();
    await w.advance(1);
    b.start();
    await w.advance(10);
    expect(changes).toEqual([{ owner: a.owner, term: 1, meta: { url: 'http://a:8080' } }]);
    expect(await b.leader()).toMatchObject({ owner: a.owner, meta: { url: 'http://a:8080' } });
    await a.stop();
    await b.stop();
  });

  it('reports unhealthy when a leader has not renewed well past its interval', async () => {
    const w = world();
    const mode = { fault: 'none' as Fault };
    const a = w.elector('a', faulty(w.store, mode));
    a.start();
    await w.advance(1);
    expect(a.health().ok).toBe(true);
    mode.fault = 'crashed';
    // Still leader until the deadline at 900; by then 900 ms passed since the last renew > 333 + 333.
    await w.advance(850);
    expect(a.isLeader).toBe(true);
    expect(a.health()).toMatchObject({ ok: false, isLeader: true });
    // stop() waits for the release up to the request timeout, then gives up (the lease expires).
    const stopped = a.stop();
    await w.advance(1000);
    await stopped;
  });
});

/**
 * A store that breaks its contract: while `broken.acquire` / `broken.renew` is set, that call
 * throws a plain Error (synchronously with `sync`), as a buggy driver or wrapper would.
 */
function throwing(inner: Store, broken: { acquire: boolean; renew: boolean; sync: boolean }, calls: { acquire: number[] }, clock: VirtualClock): Store {
  const fail = <R>(op: string): Promise<R> => {
    const err = new Error(`${op} exploded`);
    if (broken.sync) throw err;
    return Promise.reject(err);
  };
  return {
    kind: inner.kind,
    acquire: (...a) => {
      calls.acquire.push(clock.now());
      return broken.acquire ? fail('acquire') : inner.acquire(...a);
    },
    renew: (...a) => (broken.renew ? fail('renew') : inner.renew(...a)),
    release: (...a) => inner.release(...a),
    read: (...a) => inner.read(...a),
    list: (...a) => inner.list(...a),
    appendFenced: (...a) => inner.appendFenced(...a),
    readStream: (...a) => inner.readStream(...a),
    close: () => inner.close(),
  };
}

describe('LeaderElector: an unexpected error never kills the loop', () => {
  for (const sync of [false, true]) {
    it(`a store whose acquire ${sync ? 'throws' : 'rejects with'} a plain Error: reported once, retried with back-off, elected once it works`, async () => {
      const w = world();
      const broken = { acquire: true, renew: false, sync };
      const calls = { acquire: [] as number[] };
      const e = w.elector('a', throwing(w.store, broken, calls, w.clock));
      const errors: { operation: string; message: string }[] = [];
      e.on('store-error', ({ operation, error }) => errors.push({ operation, message: error.message }));
      const stopped = new Promise<void>((r) => e.once('stopped', () => r()));
      e.start();
      await w.advance(3000);
      // Reported once, not once per attempt; the attempts go on, further and further apart.
      expect(errors).toEqual([{ operation: 'acquire', message: 'acquire exploded' }]);
      expect(calls.acquire.length).toBeGreaterThanOrEqual(4);
      const gaps = calls.acquire.slice(1).map((t, i) => t - calls.acquire[i]!);
      for (let i = 1; i < gaps.length; i++) expect(gaps[i]).toBeGreaterThanOrEqual(gaps[i - 1]!);
      expect(Math.max(...gaps)).toBeLessThanOrEqual(e.timing.ttlMs);
      expect(e.isLeader).toBe(false);
      broken.acquire = false;
      await w.advance(1100);
      expect(e.isLeader).toBe(true);
      await e.stop();
      await stopped;
    });
  }

  it('a leader whose renew throws a plain Error: leadership ends at once (signal aborted, lease released), reported once, and it campaigns again', async () => {
    const w = world();
    const broken = { acquire: false, renew: false, sync: false };
    const e = w.elector('a', throwing(w.store, broken, { acquire: [] }, w.clock));
    const errors: string[] = [];
    const deposed: string[] = [];
    e.on('store-error', ({ operation, error }) => errors.push(`${operation}: ${error.message}`));
    e.on('deposed', ({ reason }) => deposed.push(reason));
    e.start();
    await w.advance(5);
    expect(e.isLeader).toBe(true);
    const signal = e.signal!;
    broken.renew = true;
    await w.advance(400); // the first renew is due at ttl/3
    expect(signal.aborted).toBe(true);
    expect(deposed).toEqual(['error']);
    expect(errors).toEqual(['renew: renew exploded']);
    // Released: the lease is free for another node now, not at the end of its TTL.
    expect(await w.store.read('g')).toBeNull();
    broken.renew = false;
    await w.advance(2000);
    expect(e.isLeader).toBe(true);
    expect(e.term).toBe(2); // a new term: the one given up is never led again
    await e.stop();
  });

  it('a listener that throws on elected ends that leadership, not the loop; stop() still emits stopped', async () => {
    const w = world();
    const e = w.elector('a');
    let throws = true;
    const errors: string[] = [];
    e.on('elected', () => {
      if (throws) throw new Error('listener bug');
    });
    e.on('store-error', ({ operation, error }) => errors.push(`${operation}: ${error.message}`));
    e.start();
    await w.advance(50);
    expect(errors).toEqual(['loop: listener bug']);
    expect(e.isLeader).toBe(false);
    throws = false;
    await w.advance(2000);
    expect(e.isLeader).toBe(true);
    let stopped = false;
    e.once('stopped', () => (stopped = true));
    await e.stop();
    expect(stopped).toBe(true);
  });
});

describe('LeaderElector: confirmLeadership and releaseOnEnd on a virtual clock', () => {
  it('confirms with a renew sent now; refuses when not leader, when the store gives no answer, and when the lease passed on', async () => {
    const w = world();
    const mode = { fault: 'none' as Fault };
    const a = w.elector('a', faulty(w.store, mode));
    await expect(a.confirmLeadership()).rejects.toBeInstanceOf(NotLeaderError);
    a.start();
    await w.advance(1);
    const confirming = a.confirmLeadership();
    await w.advance(1);
    await expect(confirming).resolves.toMatchObject({ term: 1, token: { lease: 'g', term: 1 } });

    // No answer (partition): refused when the request times out (default: the renew interval, 333 ms).
    mode.fault = 'crashed';
    const cutOff = a.confirmLeadership().catch((e: unknown) => e);
    await w.advance(334);
    const err = (await cutOff) as NotLeaderError;
    expect(err).toBeInstanceOf(NotLeaderError);
    expect(err.cause).toBeInstanceOf(StoreUnavailableError);
    mode.fault = 'none';

    // The lease passes on behind a's back: the renew's compare-and-set fails.
    await w.advance(1);
    expect(a.isLeader).toBe(true);
    expect(await w.store.release('g', a.owner, 1)).toBe(true);
    await w.store.acquire('g', 'b~1', 1000);
    const deposed = a.confirmLeadership().catch((e: unknown) => e);
    await w.advance(1);
    expect(await deposed).toBeInstanceOf(NotLeaderError);
    expect(String(await deposed)).toMatch(/store refused the renew \(b~1 holds term 2\)/);
    await a.stop();
  });

  it('releaseOnEnd: work that returns stops the elector and releases the lease; runWhileLeader resolves', async () => {
    const w = world();
    const a = w.elector('a');
    const deposed: string[] = [];
    a.on('deposed', ({ reason }) => deposed.push(reason));
    let settled = false;
    const done = a.runWhileLeader(() => {}, { releaseOnEnd: true }).then(() => (settled = true));
    await w.advance(1);
    await done;
    expect(settled).toBe(true);
    expect(deposed).toEqual(['stopped']);
    expect(await w.store.read('g')).toBeNull();
    await w.advance(5000);
    expect(await w.store.read('g')).toBeNull(); // campaigns no more
  });
});

describe('LeaderElector: transferTo on a virtual clock', () => {
  /** Electors `ids` of group g in world `w`, and every `elected` as `id@term`, in order. */
  function cast<const I extends string>(w: ReturnType<typeof world>, ...ids: I[]): { nodes: Record<I, LeaderElector>; elected: string[] } {
    const elected: string[] = [];
    const nodes = {} as Record<I, LeaderElector>;
    for (const id of ids) {
      const e = w.elector(id);
      e.on('elected', ({ term }) => elected.push(`${id}@${term}`));
      nodes[id] = e;
    }
    return { nodes, elected };
  }

  /** `first` starts and leads (term 1), then `others` start and campaign. */
  async function leadsFirst(w: ReturnType<typeof world>, first: LeaderElector, ...others: LeaderElector[]): Promise<void> {
    first.start();
    await w.advance(1);
    for (const e of others) e.start();
    await w.advance(100);
  }

  /** `from.transferTo(to)`, with the virtual instant it resolved at. */
  function timedTransfer(w: ReturnType<typeof world>, from: LeaderElector, to: string): Promise<{ lease: Lease; at: number }> {
    return from.transferTo(to).then((lease) => ({ lease, at: w.clock.now() }));
  }

  it('a candidate holding back for a hint naming another node takes over within a renew interval when a newer hint names it', async () => {
    // Two hand-overs in a row, as a rolling restart does: a → b, then b → c. In the first, c
    // wins the released lease, reads the hint naming b, gives the term back and holds back; the
    // second hint names c. A hold-back for the first hint's whole time (3 TTLs) kept c out until
    // the second transfer's bound; it lasts at most one renew interval, then c reads again.
    const w = world();
    const { nodes, elected } = cast(w, 'a', 'b', 'c');
    const { a, b, c } = nodes;
    await leadsFirst(w, a, c);
    expect(elected).toEqual(['a@1']);

    // Round 1: b does not campaign yet, so c wins the released lease (term 2) and gives it back.
    const round1 = a.transferTo('b');
    await w.advance(20);
    expect(elected).toEqual(['a@1']);
    expect(await w.store.read('g')).toBeNull();
    b.start();
    await w.advance(20);
    expect(elected).toEqual(['a@1', 'b@3']);
    await w.advance(a.timing.retryMs);
    expect((await round1).owner).toBe(b.owner);
    expect(await w.store.read('g/transfer-to')).toBeNull(); // withdrawn once b led

    // Round 2, still within what round 1's hint had left (3 TTLs from ~t=101).
    const started = w.clock.now();
    expect(started).toBeLessThan(101 + 3 * b.timing.ttlMs - b.timing.renewIntervalMs);
    const round2 = timedTransfer(w, b, 'c');
    await w.advance(b.timing.renewIntervalMs + 2 * b.timing.retryMs);
    expect((await round2).lease.owner).toBe(c.owner);
    // Nobody but c led after b: any candidate that won meanwhile (a, back from its resign) gave its term back.
    expect(elected.slice(0, 2)).toEqual(['a@1', 'b@3']);
    expect(elected.slice(2).map((x) => x.split('@')[0])).toEqual(['c']);
    expect(c.isLeader).toBe(true);
    for (const e of [a, b, c]) await e.stop();
  });

  it('a candidate holding back for a hint naming another node takes at once a hand-over that names it', async () => {
    // As above, but the second hint comes right after the first hand-over, while c still holds
    // back for the first: the release of the second is pushed to c, which reads the hint, finds
    // it named, and campaigns at once, not after the rest of its hold-back (up to a renew
    // interval: 333 ms here).
    const w = world();
    const { nodes, elected } = cast(w, 'a', 'b', 'c');
    const { a, b, c } = nodes;
    await leadsFirst(w, a, c);
    const round1 = a.transferTo('b');
    await w.advance(20);
    expect(await w.store.read('g')).toBeNull(); // c won term 2 and gave it back
    const heldBackAt = w.clock.now();
    b.start();
    await w.advance(20);
    expect(elected).toEqual(['a@1', 'b@3']);
    await w.advance(a.timing.retryMs);
    expect((await round1).owner).toBe(b.owner);

    const started = w.clock.now();
    expect(started - heldBackAt).toBeLessThan(b.timing.renewIntervalMs / 2); // still within c's hold-back
    const transfer = timedTransfer(w, b, 'c');
    await w.advance(b.timing.renewIntervalMs + 2 * b.timing.retryMs);
    const round2 = await transfer;
    expect(round2.lease.owner).toBe(c.owner);
    // Taken over within the transfer's own poll (retryMs), not at the end of c's hold-back.
    expect(round2.at - started).toBeLessThanOrEqual(b.timing.retryMs + 5);
    expect(elected.slice(2)).toEqual([`c@${round2.lease.term}`]);
    for (const e of [a, b, c]) await e.stop();
  });

  it('a leader that just handed over (holding back after its resign) takes a hand-over back at once when the new leader names it', async () => {
    // A rolling restart's back-and-forth: a → b, then at once b → a. a resigned in the first
    // transfer and holds back a renew interval (333 ms here); the release of the second names a,
    // so a reads the hint on the release's push and campaigns at once.
    const w = world();
    const { nodes, elected } = cast(w, 'a', 'b');
    const { a, b } = nodes;
    await leadsFirst(w, a, b);
    const round1 = a.transferTo('b');
    await w.advance(2 * a.timing.retryMs);
    expect((await round1).owner).toBe(b.owner);
    const started = w.clock.now();
    const round2 = timedTransfer(w, b, 'a');
    await w.advance(b.timing.renewIntervalMs + 2 * b.timing.retryMs);
    expect((await round2).lease.owner).toBe(a.owner);
    expect((await round2).at - started).toBeLessThanOrEqual(b.timing.retryMs + 5);
    expect(elected).toEqual(['a@1', 'b@2', 'a@3']);
    for (const e of [a, b]) await e.stop();
  });

  it('a node holding back after a resign keeps holding back when a release names another node', async () => {
    const w = world();
    const { nodes, elected } = cast(w, 'a', 'b', 'c');
    const { a, b, c } = nodes;
    await leadsFirst(w, a, b, c);
    const round1 = a.transferTo('b');
    await w.advance(2 * a.timing.retryMs);
    expect((await round1).owner).toBe(b.owner);
    // b hands over to c while a still holds back after its resign: a reads the hint, which names
    // c, and does not campaign (no term taken and given back: c's is the next).
    const round2 = b.transferTo('c');
    await w.advance(2 * b.timing.retryMs);
    expect((await round2).owner).toBe(c.owner);
    expect(elected).toEqual(['a@1', 'b@2', 'c@3']);
    for (const e of [a, b, c]) await e.stop();
  });

  it('a node holding back after a resign keeps holding back when a release comes with no hint', async () => {
    const w = world();
    const { nodes, elected } = cast(w, 'a', 'b');
    const { a, b } = nodes;
    await leadsFirst(w, a, b);
    await a.resign();
    const resignedAt = w.clock.now();
    await w.advance(5);
    expect(elected).toEqual(['a@1', 'b@2']);
    // b resigns too while a holds back: the release's push makes a read the hint (none), and a
    // keeps holding back; nobody leads until a's renew interval from its resign has passed.
    await b.resign();
    await w.advance(20);
    expect(await w.store.read('g')).toBeNull();
    await w.advance(resignedAt + a.timing.renewIntervalMs - w.clock.now() - 1);
    expect(elected).toEqual(['a@1', 'b@2']);
    await w.advance(2);
    expect(elected).toEqual(['a@1', 'b@2', 'a@3']);
    for (const e of [a, b]) await e.stop();
  });
});
