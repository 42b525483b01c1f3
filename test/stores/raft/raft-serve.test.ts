/**
 * raft:// against real `tenure raft serve` processes: a client that rides out kill -9 of the
 * leader without losing or doubling an acknowledged append, refusals (wrong secret, garbage, an
 * oversized frame) that close one connection only, membership changes and status from the
 * command line, and `tenure run` on a raft:// store.
 */
import net from 'node:net';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { StoreUnavailableError, type FencingToken } from '../../../src/core/index.js';
import { openStore, type TenureStore } from '../../../src/open.js';
import { FrameKind, PROTOCOL_VERSION } from '../../../src/raft/transport/index.js';
import { RaftClientStore, type MemberStatus } from '../../../src/stores/raft/index.js';
import { ClientConnection } from '../../../src/stores/raft/client-connection.js';
import { sandbox, tenure, waitUntil } from '../../cli/helpers.js';
import { SERVE_SECRET, ServeCluster } from './serve-cluster.js';
import { FaultProxy } from '../../chaos/proxy/index.js';
import { freePort } from '../../fixtures/ports.js';

let cluster: ServeCluster | undefined;
let store: TenureStore | undefined;
afterEach(async () => {
  await store?.close();
  store = undefined;
  await cluster?.close();
  cluster = undefined;
});

function client(c: ServeCluster): RaftClientStore {
  return new RaftClientStore({ members: [...c.addresses.values()].map((a) => ({ host: '127.0.0.1', port: Number(a.split(':')[1]) })), secret: SERVE_SECRET });
}

async function statuses(c: ServeCluster): Promise<MemberStatus[]> {
  const admin = client(c);
  try {
    return (await admin.memberStatuses()).flatMap((r) => (r.status ? [r.status] : []));
  } finally {
    await admin.close();
  }
}

async function leaderId(c: ServeCluster): Promise<number> {
  return waitUntil('a leader that takes writes', async () => (await statuses(c)).find((s) => s.leaderReady)?.id, 20_000);
}

function closed(s: net.Socket): Promise<void> {
  return new Promise((resolve) => (s.destroyed ? resolve() : s.once('close', () => resolve())));
}

describe('raft:// against tenure raft serve processes', () => {
  it('follows a leader change: kill -9 of the leader while 8 writers append; every acknowledged append is in the stream exactly once', async () => {
    cluster = await ServeCluster.start();
    store = await openStore(cluster.url());
    const lease = await store.acquire('writer', 'w~1', 120_000);
    const token: FencingToken = { lease: 'writer', term: lease.lease.term };
    const acked = new Map<string, number>();
    const failed: string[] = [];
    let killed = false;
    const target = 240;
    const writers = Array.from({ length: 8 }, async (_, w) => {
      for (let i = 0; acked.size < target; i++) {
        const payload = `w${w}-${i}`;
        try {
          acked.set(payload, await store!.appendFenced(token, 'log', payload));
        } catch (err) {
          // Past the client's deadline the write may or may not be in the log (rule 3).
          expect(err).toBeInstanceOf(StoreUnavailableError);
          failed.push(payload);
        }
      }
    });
    await waitUntil('80 acknowledged appends', () => acked.size >= 80);
    const old = await leaderId(cluster);
    await cluster.stop(old, 'SIGKILL');
    killed = true;
    await Promise.all(writers);
    expect(killed).toBe(true);
    const entries = await store.readStream('log', { limit: 10_000 });
    const seen = new Map<string, number>();
    for (const e of entries) {
      expect(seen.has(e.payload), `${e.payload} appears twice`).toBe(false);
      seen.set(e.payload, e.seq);
    }
    for (const [payload, seq] of acked) expect(seen.get(payload), `acknowledged ${payload} at ${seq}`).toBe(seq);
    expect(entries.map((e) => e.seq)).toEqual(entries.map((_, i) => i + 1));
    const now = await leaderId(cluster);
    expect(now).not.toBe(old);
  });

  it('watches survive kill -9 of the node they were on: subscribed again elsewhere, a change during the gap and later ones are told', async () => {
    cluster = await ServeCluster.start();
    store = await openStore(cluster.url());
    await store.acquire('w', 'a~1', 60_000); // the client's connection is now to the leader
    const leases: (string | null)[] = [];
    const heads: number[] = [];
    store.watch!('x', (l) => leases.push(l === null ? null : `${l.owner}@${l.term}`));
    store.watchStream!('s', (h) => heads.push(h));
    const other = await openStore(cluster.url());
    try {
      await other.acquire('x', 'b~1', 1000);
      await waitUntil('the first push', () => leases.length >= 1);
      expect(leases).toEqual(['b~1@1']);
      await cluster.stop(await leaderId(cluster), 'SIGKILL');
      // During the gap: x lapses (the new leader's takeover gave it a full TTL again) and c~1
      // takes it; one append to s.
      const taken = await waitUntil('c~1 to take x', async () => ((await other.acquire('x', 'c~1', 60_000)).acquired ? true : (await new Promise((r) => setTimeout(r, 100)), false)), 20_000);
      expect(taken).toBe(true);
      expect(await other.read('x')).toMatchObject({ owner: 'c~1', term: 2 });
      const token = { lease: 'x', term: 2 };
      await other.appendFenced(token, 's', 'one');
      await waitUntil('the change during the gap to be told', () => leases.at(-1) === 'c~1@2' && heads.at(-1) === 1, 20_000);
      // And pushes flow on the new connection.
      await other.appendFenced(token, 's', 'two');
      await other.release('x', 'c~1', 2);
      await waitUntil('later changes', () => leases.at(-1) === null && heads.at(-1) === 2, 20_000);
      expect(heads).toEqual([...heads].sort((a, b) => a - b)); // never a head told before
    } finally {
      await other.close();
    }
  });

  it('a watch moved to a member that lags never tells an older state: that member\'s replays before its read answers are not told', async () => {
    // Node 3 is reached by its peers, and reaches them, only through fault proxies (P), so it can
    // be cut off while the watching client still reaches it; the watcher reaches nodes 1 and 3
    // through proxies of its own (C), so it can be moved from 1 to 3.
    const ids = [1, 2, 3];
    const ports = new Map<number, number>();
    for (const id of ids) ports.set(id, await freePort());
    const proxy = (id: number, name: string) => FaultProxy.start({ target: { host: '127.0.0.1', port: ports.get(id)! }, name });
    const toPeer = new Map([[1, await proxy(1, 'p1')], [2, await proxy(2, 'p2')], [3, await proxy(3, 'p3')]]);
    const c1 = await proxy(1, 'c1');
    const c3 = await proxy(3, 'c3');
    const proxies = [...toPeer.values(), c1, c3];
    const at = (p: FaultProxy) => `127.0.0.1:${p.endpoint.port}`;
    /** Whether node 3, asked alone (a read index: it has applied everything committed), says `owner` holds x. */
    const node3Holder = async (owner: string): Promise<boolean> => {
      const direct = new RaftClientStore({ members: [{ host: '127.0.0.1', port: ports.get(3)! }], secret: SERVE_SECRET, timeoutMs: 2000, log: () => {} });
      try {
        return (await direct.read('x'))?.owner === owner;
      } catch {
        return false;
      } finally {
        await direct.close();
      }
    };
    const watcher = new RaftClientStore({ members: [c1, c3].map((p) => ({ host: '127.0.0.1', port: p.endpoint.port })), secret: SERVE_SECRET, log: () => {} });
    try {
      cluster = await ServeCluster.start(ids, [], {
        addresses: new Map(ids.map((id) => [id, `127.0.0.1:${ports.get(id)!}`])),
        // Every path to or from node 3 goes through a proxy.
        peerRoute: (from, to) => (from === 3 ? at(toPeer.get(to)!) : to === 3 ? at(toPeer.get(3)!) : undefined),
      });
      store = await openStore(cluster.url([1, 2]));
      await c3.cut();
      const told: (string | null)[] = [];
      watcher.watch('x', (l) => told.push(l === null ? null : `${l.owner}@${l.term}`));
      expect(await store.acquire('x', 'b~1', 60_000)).toMatchObject({ acquired: true, lease: { term: 1 } });
      await waitUntil('b~1 told through node 1', () => told.at(-1) === 'b~1@1', 20_000);
      // Node 3 has b~1 too (it is applied everywhere before it is cut off), then misses the rest.
      await waitUntil('node 3 to have applied b~1', () => node3Holder('b~1'), 20_000);
      for (const p of toPeer.values()) await p.cut();
      expect(await store.release('x', 'b~1', 1)).toBe(true);
      expect(await store.acquire('x', 'c~1', 60_000)).toMatchObject({ acquired: true, lease: { term: 2 } });
      await waitUntil('c~1 told through node 1', () => told.at(-1) === 'c~1@2', 20_000);
      expect(told).toEqual(['b~1@1', null, 'c~1@2']);
      // The watcher moves to node 3, which still holds b~1: its read of x waits for a read index
      // (node 3 cannot reach the leader), and node 3 replays the release and c~1 once healed.
      await c3.heal();
      await c1.cut();
      await waitUntil('the watcher on node 3', () => c3.getStats().open > 0, 20_000);
      await new Promise((r) => setTimeout(r, 500)); // its watch and read sent
      for (const p of toPeer.values()) await p.heal();
      // Node 3 caught up: a change now reaches the watcher through it, after everything older.
      await waitUntil('node 3 to have applied c~1', () => node3Holder('c~1'), 20_000);
      expect(await store.release('x', 'c~1', 2)).toBe(true);
      await waitUntil('the release told through node 3', () => told.length > 3, 20_000);
      await new Promise((r) => setTimeout(r, 300)); // anything else node 3 would push
      expect(told).toEqual(['b~1@1', null, 'c~1@2', null]);
    } finally {
      await watcher.close();
      for (const p of proxies) await p.close();
    }
  });

  it('refuses a client with the wrong secret at the handshake: one clear error at once, one log line, the secret shown nowhere', async () => {
    cluster = await ServeCluster.start();
    const wrong = join(cluster.root, 'wrong-secret');
    const wrongSecret = 'not the cluster secret at all 42';
    writeFileSync(wrong, wrongSecret);
    store = await openStore(`raft://${[...cluster.addresses.values()].join(',')}?secret-file=${encodeURIComponent(wrong)}`);
    const started = performance.now();
    const err = (await store.acquire('g', 'a~1', 5000).catch((e: unknown) => e)) as Error;
    expect(err).toBeInstanceOf(StoreUnavailableError);
    expect(err.message).toMatch(/refused the client: authentication failed \(wrong secret\?\)/);
    expect(performance.now() - started).toBeLessThan(5000); // not retried until the deadline
    await waitUntil('a refusal logged', () => [...cluster!.nodes.values()].some((n) => /did not prove the cluster secret/.test(n.stderr)));
    for (const n of cluster.nodes.values()) {
      expect(n.stderr).not.toContain(SERVE_SECRET);
      expect(n.stderr).not.toContain(wrongSecret);
      expect(n.stderr.split('\n').filter((l) => /refused connection/.test(l)).length).toBeLessThanOrEqual(1);
    }
    expect(err.message).not.toContain(wrongSecret);
  });

  it('garbage on the port and an oversized client frame close that connection only; the node keeps serving others', async () => {
    cluster = await ServeCluster.start();
    store = await openStore(cluster.url());
    await store.acquire('g', 'a~1', 60_000);
    const [host, port] = [...cluster.addresses.values()][0]!.split(':') as [string, string];
    // Garbage before any handshake.
    const raw = net.connect({ host, port: Number(port) });
    raw.on('error', () => {});
    await new Promise((r) => raw.once('connect', r));
    raw.write(Buffer.from('GET / HTTP/1.1\r\nHost: x\r\n\r\n'));
    await closed(raw);
    // An authenticated client claiming a 100 MiB request: closed at the header, nothing allocated.
    const conn = await ClientConnection.connect({ host, port: Number(port) }, { clusterId: 'tenure', secret: Buffer.from(SERVE_SECRET), timeoutMs: 5000 });
    const socket = (conn as unknown as { socket: net.Socket }).socket;
    const header = Buffer.alloc(6);
    header.writeUInt32BE(100 * 1024 * 1024, 0);
    header[4] = PROTOCOL_VERSION;
    header[5] = FrameKind.clientRequest;
    socket.write(header);
    await closed(socket);
    // Not JSON from an authenticated client: closed too.
    const conn2 = await ClientConnection.connect({ host, port: Number(port) }, { clusterId: 'tenure', secret: Buffer.from(SERVE_SECRET), timeoutMs: 5000 });
    const socket2 = (conn2 as unknown as { socket: net.Socket }).socket;
    const junk = Buffer.from([0xff, 0xfe, 0x00, 0x7b]);
    const frame = Buffer.alloc(6 + junk.length);
    frame.writeUInt32BE(junk.length, 0);
    frame[4] = PROTOCOL_VERSION;
    frame[5] = FrameKind.clientRequest;
    junk.copy(frame, 6);
    socket2.write(frame);
    await closed(socket2);
    const node = [...cluster.nodes.values()].find((n) => n.address === `${host}:${port}`)!;
    const lines = (): string[] => node.stderr.split('\n').filter((l) => /closed (store client )?connection/.test(l));
    await waitUntil('three log lines', () => lines().length >= 3);
    expect(lines()).toEqual([
      expect.stringMatching(/closed connection from 127\.0\.0\.1:\d+: it speaks protocol version \d+/),
      expect.stringMatching(/closed connection with store client 127\.0\.0\.1:\d+: a client request frame claims 104857600 bytes, more than the limit of 8388608$/),
      expect.stringMatching(/closed store client connection from 127\.0\.0\.1:\d+: frame: not UTF-8 JSON/),
    ]);
    // The store's own connection and the cluster were not disturbed.
    expect(await store.read('g')).toMatchObject({ owner: 'a~1', term: 1 });
    expect((await store.acquire('h', 'b~1', 5000)).acquired).toBe(true);
    expect(node.proc.exitCode).toBeNull();
  });

  it('tenure raft add --learner, promote and remove: a 4th server joins, votes, leaves; tenure raft status --json shows each step', async () => {
    cluster = await ServeCluster.start();
    await leaderId(cluster);
    await cluster.startNode(4, { join: true });
    const box = sandbox();
    const env = { ...cluster.env };
    const url = cluster.url([1, 2, 3]);
    const run = async (args: string[]) => {
      const r = await tenure(box, args, { env, timeoutMs: 30_000 });
      expect(r.code, `${args.join(' ')}: ${r.stderr}`).toBe(0);
      return r.stdout;
    };
    const added = JSON.parse(await run(['raft', 'add', '--id', '4', '--addr', cluster.addresses.get(4)!, '--learner', '--store', url, '--json'])) as { voters: number[]; learners: number[] };
    expect(added).toEqual({ voters: [1, 2, 3], learners: [4] });
    // The learner catches up: its applied index reaches the leader's commit.
    await waitUntil('the learner to catch up', async () => {
      const rows = JSON.parse(await run(['raft', 'status', '--store', cluster!.url([1, 2, 3, 4]), '--json'])) as MemberStatus[];
      const learner = rows.find((r) => r.id === 4);
      const leader = rows.find((r) => r.role === 'leader');
      return learner !== undefined && leader !== undefined && learner.role === 'follower' && learner.learners.includes(4) && learner.applied >= leader.commit - 5;
    });
    expect(JSON.parse(await run(['raft', 'promote', '--id', '4', '--store', url, '--json']))).toEqual({ voters: [1, 2, 3, 4], learners: [] });
    const rows = JSON.parse(await run(['raft', 'status', '--store', cluster.url([1, 2, 3, 4]), '--json'])) as MemberStatus[];
    expect(rows).toHaveLength(4);
    expect(rows.filter((r) => r.role === 'leader')).toHaveLength(1);
    for (const r of rows) expect(r).toMatchObject({ voters: [1, 2, 3, 4], learners: [] });
    expect(JSON.parse(await run(['raft', 'remove', '--id', '4', '--store', url, '--json']))).toEqual({ voters: [1, 2, 3], learners: [] });
    // Promoting a node that is not a learner is bad input, exit 2.
    const bad = await tenure(box, ['raft', 'promote', '--id', '9', '--store', url], { env });
    expect(bad.code).toBe(2);
    expect(bad.stderr.trim().split('\n')).toHaveLength(1);
    // The table form names every column.
    expect(await run(['raft', 'status', '--store', url])).toMatch(/^ID\s+ADDRESS\s+ROLE\s+TERM\s+COMMIT\s+APPLIED\s+LEADER\s+VOTERS\s+LEARNERS/);
  });

  it('tenure run --store raft://… is elected and its child gets a fencing token; serve exits 0 on SIGTERM', async () => {
    cluster = await ServeCluster.start();
    const box = sandbox();
    const r = await tenure(box, ['run', '--group', 'jobs', '--once', '--store', cluster.url(), '--', process.execPath, '-e', 'console.log("token=" + process.env.TENURE_TOKEN)'], { env: cluster.env, timeoutMs: 30_000 });
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toContain('token=jobs#1');
    expect(r.stderr).toMatch(/elected term 1 for group jobs/);
    // The admin commands take the members by id too (the secret from the environment).
    const st = await tenure(box, ['raft', 'status', '--peers', cluster.peers(), '--json'], { env: cluster.env });
    expect(st.code, st.stderr).toBe(0);
    const rows = JSON.parse(st.stdout) as MemberStatus[];
    expect(rows.map((row) => row.id).sort()).toEqual([1, 2, 3]);
    expect(new Set(rows.map((row) => row.term)).size).toBe(1);
    const exit = await cluster.stop(2, 'SIGTERM');
    expect(exit).toEqual({ code: 0, signal: null });
  });

  it('tenure raft serve: bad flags and a missing secret exit 2 with one line', async () => {
    const box = sandbox();
    const env = { ...box.env };
    delete env.TENURE_RAFT_SECRET;
    for (const [args, pattern] of [
      [['raft', 'serve', '--id', '1', '--listen', '127.0.0.1:1', '--peers', '1=127.0.0.1:1', '--data', 'd'], /the cluster secret is needed/],
      [['raft', 'serve', '--id', 'x', '--listen', '127.0.0.1:1', '--peers', '1=127.0.0.1:1', '--data', 'd'], /--id: expected a whole number/],
      [['raft', 'serve', '--id', '1', '--listen', '127.0.0.1:1', '--peers', '1=127.0.0.1:1,1=127.0.0.1:2', '--data', 'd'], /node 1 is listed twice/],
      [['raft', 'serve', '--id', '1', '--listen', 'nope', '--peers', '1=127.0.0.1:1', '--data', 'd'], /--listen: expected host:port/],
      [['raft', 'serve', '--id', '1', '--listen', '127.0.0.1:1', '--peers', '1=127.0.0.1:1', '--data', 'd', '--election-timeout', '100ms', '--heartbeat', '60ms'], /--heartbeat: must be at most half the election timeout \(100 ms\), got 60 ms/],
      [['raft', 'nope'], /unknown subcommand 'raft nope'/],
      [['status', '--store', 'raft://127.0.0.1:1,127.0.0.1:1'], /listed twice/],
    ] as const) {
      const r = await tenure(box, args, { env: { ...env, TENURE_RAFT_SECRET: args[0] === 'status' ? SERVE_SECRET : '' } });
      expect(r.code, `${args.join(' ')}: ${r.stderr}`).toBe(2);
      expect(r.stderr.trim().split('\n')).toHaveLength(1);
      expect(r.stderr).toMatch(pattern);
    }
  });
});
