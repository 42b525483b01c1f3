/**
 * Version 0 is a version. node-zookeeper-client 1.1's Transaction writes `version || -1`, so a
 * multi's check, set or remove of a znode at version 0 (a node never written since it was made)
 * went out as -1, "any version": the check passed whatever the node had become. The store's
 * fenced append and term counter rest on those checks, and the chaos suite met the result (CI of
 * stop 37, seed 2 with connection faults): a term-1 holder, stopped between writing two of its
 * append's pipelined reads, read the fence (term 1, version 0) before term 2 wrote and the head
 * after, and its append landed after term 2's: the fence check that should have caught it was
 * "any version".
 *
 * On a private server: the session's multi with version 0 against a node at version 1 is refused;
 * and the two races of the store that the checks decide, each with the other writer let in between
 * the read and the multi (where a real race puts it), end as the rules say.
 */
import { randomBytes } from 'node:crypto';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { StaleTermError } from '../../src/index.js';
import { ZookeeperStore } from '../../src/stores/zookeeper/index.js';
import { ZK, ZkError, ZkSession } from '../../src/stores/zookeeper/session.js';
import type { MultiOp } from '../../src/stores/zookeeper/session.js';
import { usePrivateZookeeper } from '../fixtures/zookeeper.js';

const zk = usePrivateZookeeper({ beforeAll, afterAll, afterEach });
const { toClose } = zk;

const root = (): string => `/versions-${randomBytes(5).toString('hex')}`;

async function session(): Promise<ZkSession> {
  const s = await ZkSession.open({ hosts: zk.server.host, sessionTimeoutMs: 10_000, requestTimeoutMs: 5000 });
  toClose.push(s);
  return s;
}

function store(chroot: string): ZookeeperStore {
  const s = new ZookeeperStore({ hosts: [zk.server.host], chroot, requestTimeoutMs: 5000 });
  toClose.push(s);
  return s;
}

/**
 * Run `before` once, right before the next multi (of any session) whose ops match `which` goes
 * out: the other writer let in between a read and the multi built from it.
 */
function beforeNextMulti(which: (ops: readonly MultiOp[]) => boolean, before: () => Promise<void>): { ran: () => boolean } {
  const original = ZkSession.prototype.multi;
  let ran = false;
  ZkSession.prototype.multi = async function (this: ZkSession, ops: readonly MultiOp[]) {
    if (!ran && which(ops)) {
      ran = true;
      ZkSession.prototype.multi = original;
      await before();
    }
    return original.call(this, ops);
  };
  toClose.push({ close: () => void (ZkSession.prototype.multi = original) });
  return { ran: () => ran };
}

/** Whether `ops` create a node whose data carries `text`. */
const creates = (text: string) => (ops: readonly MultiOp[]): boolean => ops.some((o) => o.op === 'create' && o.data.toString('utf8').includes(text));

async function rejection(p: Promise<unknown>): Promise<unknown> {
  try {
    await p;
  } catch (err) {
    return err;
  }
  throw new Error('expected a rejection');
}

describe('ZooKeeper multi with version 0', () => {
  it('refuses a check, a set and a remove at version 0 of a node now at version 1, and takes them at its real version', async () => {
    const s = await session();
    const base = root();
    await s.ensure(`${base}/n`);
    expect((await s.getData(`${base}/n`)).stat.version).toBe(0);
    await s.setData(`${base}/n`, Buffer.from('moved'), 0);
    expect((await s.getData(`${base}/n`)).stat.version).toBe(1);
    const ops: MultiOp[] = [
      { op: 'check', path: `${base}/n`, version: 0 },
      { op: 'set', path: `${base}/n`, data: Buffer.from('late'), version: 0 },
      { op: 'remove', path: `${base}/n`, version: 0 },
    ];
    for (const op of ops) {
      const err = await rejection(s.multi([op]));
      expect(err, op.op).toBeInstanceOf(ZkError);
      expect((err as ZkError).code, op.op).toBe(ZK.BAD_VERSION);
    }
    expect((await s.getData(`${base}/n`)).data.toString()).toBe('moved');
    await s.multi([{ op: 'check', path: `${base}/n`, version: 1 }]);
    await s.multi([{ op: 'set', path: `${base}/n`, data: Buffer.from('next'), version: 1 }]);
    await s.multi([{ op: 'remove', path: `${base}/n`, version: 2 }]);
    expect(await s.exists(`${base}/n`)).toBeNull();
  });

  it('takes a check and a set at version 0 of a node still at version 0, and -1 as any version', async () => {
    const s = await session();
    const base = root();
    await s.ensure(`${base}/n`);
    await s.multi([
      { op: 'check', path: `${base}/n`, version: 0 },
      { op: 'set', path: `${base}/n`, data: Buffer.from('a'), version: 0 },
    ]);
    await s.multi([{ op: 'set', path: `${base}/n`, data: Buffer.from('b'), version: -1 }]);
    const { data, stat } = await s.getData(`${base}/n`);
    expect([data.toString(), stat.version]).toEqual(['b', 2]);
  });
});

describe('the ZooKeeper store where its checks meet version 0', () => {
  it("refuses a term-1 append once term 2 was accepted on another of the lease's streams between its read and its write (the fence at version 0)", async () => {
    const chroot = root();
    const a = store(chroot);
    const b = store(chroot);
    const first = await a.acquire('g', 'a~1', 60_000);
    expect(first.acquired).toBe(true);
    const t1 = { lease: 'g', term: first.lease.term };
    expect(await a.appendFenced(t1, 'g.one', 'a-1')).toBe(1); // makes the lease's fence, at version 0
    expect(await a.release('g', 'a~1', t1.term)).toBe(true);
    const second = await b.acquire('g', 'b~1', 60_000);
    expect(second.lease.term).toBe(t1.term + 1);
    const t2 = { lease: 'g', term: second.lease.term };
    // a read the fence (term 1) and the head of g.one; before its multi goes out, term 2 is
    // accepted on g.two (the fence moves to term 2) while g.one's head stays where a read it.
    const hook = beforeNextMulti(creates('a-2 (stale)'), async () => {
      expect(await b.appendFenced(t2, 'g.two', 'b-1')).toBe(1);
    });
    const err = await rejection(a.appendFenced(t1, 'g.one', 'a-2 (stale)'));
    expect(hook.ran()).toBe(true);
    expect(err).toBeInstanceOf(StaleTermError);
    expect((await b.readStream('g.one', { after: 0 })).map((e) => [e.term, e.payload])).toEqual([[t1.term, 'a-1']]);
    // Term 2 writes on after the refusal.
    expect(await b.appendFenced(t2, 'g.one', 'b-2')).toBe(2);
  });

  it('never gives one term to two holders: an acquire that read the counter at version 0 loses to a take-and-release between its read and its multi', async () => {
    const chroot = root();
    const a = store(chroot);
    const b = store(chroot);
    const c = store(chroot);
    const first = await a.acquire('g', 'a~1', 300);
    expect(first.lease.term).toBe(1); // the counter is made: "1", version 0
    await a.close(); // a vanishes without letting go
    // b and c each wait out a TTL from first seeing the name vacant (they never saw a's renewals).
    expect((await b.acquire('g', 'b~1', 300)).acquired).toBe(false);
    expect((await c.acquire('g', 'c~1', 300)).acquired).toBe(false);
    await new Promise((r) => setTimeout(r, 400));
    let bTerm = 0;
    // c read the counter ("1", version 0, not released); before its multi goes out, b takes term 2
    // and lets go of it.
    const hook = beforeNextMulti(creates('c~1'), async () => {
      const got = await b.acquire('g', 'b~1', 300);
      expect(got.acquired).toBe(true);
      bTerm = got.lease.term;
      expect(await b.release('g', 'b~1', bTerm)).toBe(true);
    });
    const got = await c.acquire('g', 'c~1', 300);
    expect(hook.ran()).toBe(true);
    expect(bTerm).toBe(2);
    expect(got.acquired).toBe(true);
    expect(got.lease.term).toBe(3);
    expect((await c.read('g'))?.term).toBe(3);
  });
});
