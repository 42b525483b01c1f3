/**
 * The bounds a Raft store node keeps per client connection: requests unanswered (BUSY past 256,
 * nothing done) and watches (BUSY past 1024); in-process nodes, a real authenticated connection.
 */
import { afterEach, expect, it } from 'vitest';
import { ClientConnection } from '../../../src/stores/raft/client-connection.js';
import { CLIENT_MAX_INFLIGHT, CLIENT_MAX_WATCHES, type ClientAnswer } from '../../../src/stores/raft/client-protocol.js';
import { parseAddress } from '../../../src/raft/transport/index.js';
import { RaftCluster, SECRET } from './raft-cluster.js';

let cluster: RaftCluster | undefined;
let conn: ClientConnection | undefined;
afterEach(async () => {
  conn?.close();
  await cluster?.close();
});

async function connectToLeader(): Promise<ClientConnection> {
  cluster = await RaftCluster.start();
  cluster.stores.get(1)!.campaign();
  const leader = await cluster.leader();
  return ClientConnection.connect(parseAddress('leader', cluster.peers()[leader.id]!), { clusterId: 'raft-store-test', secret: Buffer.from(SECRET), timeoutMs: 5000 });
}

it(`answers BUSY past ${CLIENT_MAX_INFLIGHT} requests in flight on one connection, and does nothing for them`, async () => {
  conn = await connectToLeader();
  const c = conn;
  const n = CLIENT_MAX_INFLIGHT + 44;
  const answers: ClientAnswer[] = await Promise.all(
    Array.from({ length: n }, (_, i) => c.request({ op: 'write', session: { client: 'limits-test', seq: i + 1, ack: 1 }, operation: { op: 'acquire', name: `l${i}`, owner: 'o~1', ttlMs: 60_000, meta: {} } }, 20_000)),
  );
  const busy = answers.filter((a) => !a.ok && a.error.code === 'BUSY');
  expect(busy.length).toBeGreaterThanOrEqual(44);
  expect(answers.filter((a) => a.ok)).toHaveLength(n - busy.length);
  // A refused write was not applied: its lease does not exist.
  const refused = answers.findIndex((a) => !a.ok);
  const read = await c.request({ op: 'read', name: `l${refused}` }, 5000);
  expect(read).toMatchObject({ ok: true, value: null });
});

it(`answers BUSY past ${CLIENT_MAX_WATCHES} watches on one connection; unwatch frees a place`, async () => {
  conn = await connectToLeader();
  const c = conn;
  // In batches under the in-flight bound (which a burst of 1024 requests would hit first).
  const answers: ClientAnswer[] = [];
  for (let i = 0; i < CLIENT_MAX_WATCHES; i += 128) {
    answers.push(...(await Promise.all(Array.from({ length: 128 }, (_, j) => c.request({ op: 'watch', kind: 'lease', name: `w${i + j}` }, 20_000)))));
  }
  expect(answers.every((a) => a.ok)).toBe(true);
  const over = await c.request({ op: 'watch', kind: 'stream', name: 'one-more' }, 5000);
  expect(over).toMatchObject({ ok: false, error: { code: 'BUSY' } });
  expect(await c.request({ op: 'unwatch', watch: (answers[0] as { value: number }).value }, 5000)).toMatchObject({ ok: true, value: true });
  expect(await c.request({ op: 'watch', kind: 'stream', name: 'one-more' }, 5000)).toMatchObject({ ok: true });
});

it('answers a malformed request by its id, and a client may not propose the leader\'s own commands', async () => {
  conn = await connectToLeader();
  expect(await conn.request({ op: 'write', session: { client: 'x', seq: 1, ack: 1 }, operation: { op: 'takeover', raftTerm: 99 } as never }, 5000)).toMatchObject({
    ok: false,
    error: { code: 'INVALID_ARGUMENT', field: 'operation.op' },
  });
  expect(await conn.request({ op: 'read', name: 'x'.repeat(201) }, 5000)).toMatchObject({ ok: false, error: { code: 'INVALID_ARGUMENT', field: 'name' } });
  expect(await conn.request({ op: 'write', session: { client: 'x', seq: 1, ack: 2 }, operation: { op: 'release', name: 'a', owner: 'o~1', term: 1 } }, 5000)).toMatchObject({
    ok: false,
    error: { code: 'INVALID_ARGUMENT', field: 'session.ack' },
  });
});
