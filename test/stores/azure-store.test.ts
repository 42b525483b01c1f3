/**
 * The Azure Blob store under tenure, on a private Azurite: the seed's mutex pattern end to end
 * (a leader's task cancelled when a renewal fails, the lease released when the task ends), a
 * stale leader, bad input (a lease blob deleted under its holder, garbage metadata), URLs, and
 * the account key kept out of every message.
 */
import { randomBytes } from 'node:crypto';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { LeaderElector, StaleTermError, StoreDataError, StoreUnavailableError, InvalidArgumentError } from '../../src/index.js';
import { openStore } from '../../src/open.js';
import { AzureBlobStore, parseAzureBlobUrl } from '../../src/stores/azure/index.js';
import { leaseIdOf } from '../../src/stores/azure/names.js';
import { AZURITE_ACCOUNT, AZURITE_KEY, startAzurite } from '../fixtures/azurite.js';
import type { Azurite } from '../fixtures/azurite.js';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const container = () => `t-${randomBytes(6).toString('hex')}`;

async function waitUntil(cond: () => boolean, timeoutMs: number): Promise<void> {
  const start = performance.now();
  while (!cond()) {
    if (performance.now() - start > timeoutMs) throw new Error('condition not met in time');
    await sleep(10);
  }
}

let azurite: Azurite;
const open = (name: string, requestTimeoutMs = 1000) =>
  new AzureBlobStore({ endpoint: `http://127.0.0.1:${azurite.port}/${AZURITE_ACCOUNT}`, account: AZURITE_ACCOUNT, accountKey: AZURITE_KEY, container: name, requestTimeoutMs });

beforeAll(async () => {
  azurite = await startAzurite();
});
afterAll(async () => {
  await azurite?.stop();
});

describe('the mutex pattern (runWhileLeader over blob leases)', () => {
  it('cancels the leader task at its deadline when renewals stop (Azurite paused), and another node leads after the blob lease ends', async () => {
    const name = container();
    const store = open(name);
    // ttl 15 s (a blob lease's shortest), margin 1 s: the task is cancelled 14 s after the
    // send of the last successful renew, before Azure could give the lease to anyone else.
    const elector = new LeaderElector({ store, group: 'job', ttlMs: 15_000, marginMs: 1000, renewIntervalMs: 3000, requestTimeoutMs: 1000 });
    let lastSuccessAt = 0;
    elector.on('elected', () => (lastSuccessAt = performance.now()));
    elector.on('renewed', ({ latencyMs }) => (lastSuccessAt = performance.now() - latencyMs));
    let cancelledAt = 0;
    let taskTerm = 0;
    const run = elector.runWhileLeader(async ({ signal, term }) => {
      taskTerm = term;
      await new Promise<void>((resolve) => signal.addEventListener('abort', () => resolve(), { once: true }));
      cancelledAt = performance.now();
    });
    void run.catch(() => {});
    elector.start();
    await waitUntil(() => taskTerm > 0, 10_000);
    await sleep(3500); // a renewal lands
    expect(lastSuccessAt).toBeGreaterThan(0);
    azurite.pause();
    try {
      await waitUntil(() => cancelledAt > 0, 20_000);
      expect(cancelledAt - lastSuccessAt).toBeLessThanOrEqual(14_000 + 100);
      expect(cancelledAt - lastSuccessAt).toBeGreaterThanOrEqual(14_000 - 1500);
      expect(elector.isLeader).toBe(false);
    } finally {
      azurite.resume();
    }
    await elector.stop();
    // The paused holder never released: the next node waits for the blob lease to end, then
    // leads with the next term.
    const other = open(name);
    const r = await other.acquire('job', 'b~1', 15_000);
    if (r.acquired) expect(r.lease.term).toBe(taskTerm + 1);
    else expect(r.lease.term).toBe(taskTerm);
    await store.close();
    await other.close();
  }, 60_000);

  it('releases the lease when the task ends (releaseOnEnd): the next node leads at once with the next term', async () => {
    const name = container();
    const store = open(name);
    const elector = new LeaderElector({ store, group: 'job', ttlMs: 15_000 });
    let term = 0;
    elector.start();
    await elector.runWhileLeader(async (ctx) => {
      term = ctx.term;
      const held = await store.read('job');
      expect(held).toMatchObject({ owner: elector.owner, term: ctx.term });
    }, { releaseOnEnd: true });
    expect(term).toBeGreaterThan(0);
    expect(await store.read('job')).toBeNull();
    const t0 = performance.now();
    const next = await store.acquire('job', 'b~1', 15_000);
    expect(next).toMatchObject({ acquired: true, lease: { owner: 'b~1', term: term + 1 } });
    expect(performance.now() - t0).toBeLessThan(2000);
    await elector.stop();
    await store.close();
  }, 60_000);
});

describe('watch by polling (watchPollMs)', () => {
  it('tells a watcher of a new holder, a release and the next holder, in order; a waiting candidate takes over within about one poll', async () => {
    const name = container();
    const store = new AzureBlobStore({ endpoint: `http://127.0.0.1:${azurite.port}/${AZURITE_ACCOUNT}`, account: AZURITE_ACCOUNT, accountKey: AZURITE_KEY, container: name, watchPollMs: 100 });
    const other = open(name);
    const seen: (string | null)[] = [];
    const stop = store.watch!('g', (lease) => seen.push(lease ? `${lease.owner}@${lease.term}` : null));
    await other.acquire('g', 'a~1', 15_000); // another process: only the poll tells it
    await waitUntil(() => seen.length >= 1, 3000);
    await other.release('g', 'a~1', 1);
    await waitUntil(() => seen.length >= 2, 3000);
    await store.acquire('g', 'b~1', 15_000); // this process: told at once, and never the older state after it
    await sleep(300);
    expect(seen).toEqual(['a~1@1', null, 'b~1@2']);
    stop();
    await store.release('g', 'b~1', 2);

    // A LeaderElector's candidate on a watching store hears the leader's resign within a poll,
    // not at its next attempt (up to a TTL later).
    const leader = new LeaderElector({ store: other, group: 'job', ttlMs: 15_000 });
    const candidate = new LeaderElector({ store, group: 'job', ttlMs: 15_000 });
    leader.start();
    await waitUntil(() => leader.isLeader, 10_000);
    candidate.start();
    await sleep(1000); // the candidate has tried and is waiting
    expect(candidate.isLeader).toBe(false);
    const t0 = performance.now();
    await leader.stop(); // releases
    await waitUntil(() => candidate.isLeader, 5000);
    expect(performance.now() - t0).toBeLessThan(1500);
    await candidate.stop();
    await store.close();
    await other.close();
  }, 60_000);

  it("tells a watcher the release of a holder its store's acquire met, though no poll saw that hold", async () => {
    const name = container();
    // Polls 3 s apart (the first at once): the hold below falls between two of them.
    const store = new AzureBlobStore({ endpoint: `http://127.0.0.1:${azurite.port}/${AZURITE_ACCOUNT}`, account: AZURITE_ACCOUNT, accountKey: AZURITE_KEY, container: name, watchPollMs: 3000 });
    const other = open(name);
    const seen: (string | null)[] = [];
    const stop = store.watch!('g', (lease) => seen.push(lease ? `${lease.owner}@${lease.term}` : null));
    await sleep(300); // the first poll: free
    const held = await other.acquire('g', 'a~1', 15_000);
    expect(await store.acquire('g', 'b~1', 15_000)).toMatchObject({ acquired: false, lease: { owner: 'a~1', term: held.lease.term } });
    await other.release('g', 'a~1', held.lease.term);
    expect(seen).toEqual([`a~1@${held.lease.term}`]); // told by the acquire, not by a poll
    await waitUntil(() => seen.length >= 2, 5000); // the next poll finds it free
    expect(seen).toEqual([`a~1@${held.lease.term}`, null]);
    stop();
    await store.close();
    await other.close();
  }, 30_000);

  it('refuses a bad watchPollMs', () => {
    expect(() => new AzureBlobStore({ container: 'abc', endpoint: 'http://127.0.0.1:1/a', account: 'acct', accountKey: 'a2V5', watchPollMs: 1 })).toThrow(/watchPollMs/);
  });
});

describe('a stale leader', () => {
  it('is refused: a broken lease goes to a new holder with the next term, and the old token is stale where the write lands', async () => {
    const store = open(container());
    const a = await store.acquire('g', 'a~1', 15_000);
    expect(a).toMatchObject({ acquired: true, lease: { term: 1 } });
    expect(await store.appendFenced({ lease: 'g', term: 1 }, 's', 'by a')).toBe(1);
    // An operator breaks the lease (break period 0: it ends at once; a break period of N s
    // blocks every acquirer for N s).
    await store.container.getBlockBlobClient((await import('../../src/stores/azure/names.js')).blobNames.lease('g')).getBlobLeaseClient().breakLease(0);
    const b = await store.acquire('g', 'b~1', 15_000);
    expect(b).toMatchObject({ acquired: true, lease: { owner: 'b~1', term: 2 } });
    expect(await store.appendFenced({ lease: 'g', term: 2 }, 's', 'by b')).toBe(2);
    // The old holder, in another process: its renew is refused, its write is stale.
    const old = open(store.container.containerName);
    expect(await old.renew('g', 'a~1', 1, 15_000)).toMatchObject({ renewed: false, lease: { owner: 'b~1', term: 2 } });
    const err = await old.appendFenced({ lease: 'g', term: 1 }, 's', 'zombie').catch((e: unknown) => e);
    expect(err).toBeInstanceOf(StaleTermError);
    expect(err).toMatchObject({ term: 1, currentTerm: 2 });
    expect(await old.release('g', 'a~1', 1)).toBe(false);
    expect((await old.readStream('s')).map((e) => [e.term, e.payload])).toEqual([[1, 'by a'], [2, 'by b']]);
    await store.close();
    await old.close();
  });

  it('a write raced by a newer term in another process is refused by the append condition, not by a check beside it', async () => {
    const name = container();
    const one = open(name);
    const two = open(name);
    await one.acquire('g', 'a~1', 15_000);
    await one.appendFenced({ lease: 'g', term: 1 }, 's', 'a1'); // `one` has read the journal at term 1
    await one.release('g', 'a~1', 1);
    await two.acquire('g', 'b~1', 15_000);
    await two.appendFenced({ lease: 'g', term: 2 }, 's', 'b1');
    // `one` still believes the journal ends after a1 at term 1: its append at that position
    // fails (412), it reads on and finds term 2.
    await expect(one.appendFenced({ lease: 'g', term: 1 }, 's', 'late')).rejects.toBeInstanceOf(StaleTermError);
    expect((await two.readStream('s')).map((e) => e.payload)).toEqual(['a1', 'b1']);
    await one.close();
    await two.close();
  });
});

describe('bad input in the container', () => {
  it('a lease blob deleted under its holder: the holder loses at its next renewal, and no second leader is made from a term that was used', async () => {
    const name = container();
    const store = open(name);
    const elector = new LeaderElector({ store, group: 'g', ttlMs: 15_000, renewIntervalMs: 1000, requestTimeoutMs: 1000 });
    const deposed = new Promise<string>((r) => elector.once('deposed', ({ reason }) => r(reason)));
    let token = { lease: 'g', term: 0 };
    const storeErrors: Error[] = [];
    elector.on('store-error', ({ error }) => storeErrors.push(error));
    elector.start();
    void elector.runWhileLeader(async (ctx) => {
      if (token.term !== 0) return; // campaigned on after the loss: it must never lead again
      token = ctx.token;
      await store.appendFenced(ctx.token, 'out', 'written under term 1');
      // By hand: break the lease and delete the blob.
      const blob = store.container.getBlockBlobClient((await import('../../src/stores/azure/names.js')).blobNames.lease('g'));
      await blob.getBlobLeaseClient().breakLease(0);
      await blob.delete();
      await new Promise<void>((resolve) => ctx.signal.addEventListener('abort', () => resolve(), { once: true }));
    });
    expect(await deposed).toBe('lost');
    expect(token.term).toBe(1);
    // It campaigns on, and is told why it cannot lead: the blob's terms cannot go on.
    await waitUntil(() => storeErrors.some((e) => e instanceof StoreDataError), 10_000);
    expect(elector.isLeader).toBe(false);
    await elector.stop();
    const other = open(name);
    const err = await other.acquire('g', 'b~1', 15_000).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(StoreDataError);
    expect((err as Error).message).toMatch(/lease blob of "g" .* is missing but its journal holds fenced writes/);
    expect(await other.read('g')).toBeNull();
    await other.close();
    await store.close();
  }, 60_000);

  it('garbage metadata on a lease blob: a clear StoreDataError on every call, and nobody leads', async () => {
    const name = container();
    const store = open(name);
    await store.acquire('g', 'a~1', 15_000);
    await store.release('g', 'a~1', 1);
    const { blobNames } = await import('../../src/stores/azure/names.js');
    const blob = store.container.getBlockBlobClient(blobNames.lease('g'));
    const props = await blob.getProperties();
    await blob.setMetadata({ ...props.metadata, term: 'twelve' });
    for (const call of [() => store.acquire('g', 'b~1', 15_000), () => store.read('g')]) {
      const err = await call().catch((e: unknown) => e);
      expect(err).toBeInstanceOf(StoreDataError);
      expect((err as Error).message).toMatch(/lease "g" holds term "twelve", which is not an integer/);
    }
    expect((await blob.getProperties()).leaseState).toBe('available');
    // A blob that is not tenure's at all.
    await blob.setMetadata({ hello: 'world' });
    await expect(store.acquire('g', 'b~1', 15_000)).rejects.toThrow(/is not a tenure lease blob/);
    await store.close();
  });

  it('an answer without an ETag (a proxy that drops it): a clear error, and nothing is taken from that read (the take is conditional on it)', async () => {
    const name = container();
    const direct = open(name);
    await direct.acquire('g', 'a~1', 15_000);
    expect(await direct.release('g', 'a~1', 1)).toBe(true);
    // An HTTP proxy in front of the real Azurite that passes everything but the ETag header.
    const proxy = http.createServer((req, res) => {
      const up = http.request({ host: '127.0.0.1', port: azurite.port, method: req.method, path: req.url, headers: req.headers }, (answer) => {
        const headers = { ...answer.headers };
        delete headers.etag;
        res.writeHead(answer.statusCode ?? 502, headers);
        answer.pipe(res);
      });
      up.on('error', () => res.destroy());
      req.pipe(up);
    });
    await new Promise<void>((r) => proxy.listen(0, '127.0.0.1', r));
    const port = (proxy.address() as AddressInfo).port;
    const through = new AzureBlobStore({ endpoint: `http://127.0.0.1:${port}/${AZURITE_ACCOUNT}`, account: AZURITE_ACCOUNT, accountKey: AZURITE_KEY, container: name, requestTimeoutMs: 1000 });
    try {
      const err = await through.acquire('g', 'b~1', 15_000).catch((e: unknown) => e);
      // The SDK refuses a download without one (its message names the header); the store reports it as unreachable.
      expect(err).toBeInstanceOf(StoreUnavailableError);
      expect((err as Error).message).toMatch(/read g: .*etag/i);
      expect((err as Error).message).not.toContain(AZURITE_KEY);
      const { blobNames } = await import('../../src/stores/azure/names.js');
      const props = await direct.container.getBlockBlobClient(blobNames.lease('g')).getProperties();
      expect(props.leaseState).toBe('available');
      expect(props.metadata?.['term']).toBe('1');
      // Straight to the service, the same acquire takes term 2.
      const r = await direct.acquire('g', 'b~1', 15_000);
      expect([r.acquired, r.lease.term]).toEqual([true, 2]);
    } finally {
      await through.close();
      await direct.close();
      await new Promise((r) => proxy.close(r));
    }
  });

  it('a lease taken by another program under its own lease id is never reported as a tenure holder', async () => {
    const name = container();
    const store = open(name);
    await store.acquire('g', 'a~1', 15_000);
    await store.release('g', 'a~1', 1);
    const { blobNames } = await import('../../src/stores/azure/names.js');
    await store.container.getBlockBlobClient(blobNames.lease('g')).getBlobLeaseClient('99999999-9999-4999-8999-999999999999').acquireLease(15);
    await expect(store.read('g')).rejects.toBeInstanceOf(StoreUnavailableError);
    const err = await store.acquire('g', 'b~1', 15_000).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(StoreUnavailableError);
    expect((err as Error).message).toMatch(/not under the lease id of its recorded holder/);
    // The lease ids tenure uses are its own: (name, owner, term), never that one.
    expect(leaseIdOf('g', 'b~1', 2)).not.toBe('99999999-9999-4999-8999-999999999999');
    await store.close();
  }, 30_000);
});

describe('limits stated as errors', () => {
  it('rounds a TTL up to a blob lease (15 s at least, whole seconds) and refuses one over 60 s', async () => {
    const store = open(container());
    expect((await store.acquire('a', 'x~1', 1000)).lease.ttlMs).toBe(15_000);
    expect((await store.acquire('b', 'x~1', 20_500)).lease.ttlMs).toBe(21_000);
    expect((await store.acquire('c', 'x~1', 60_000)).lease.ttlMs).toBe(60_000);
    const err = await store.acquire('d', 'x~1', 60_001).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(InvalidArgumentError);
    expect((err as Error).message).toBe('ttlMs: an Azure blob lease lasts 15 s to 60 s; a TTL must be at most 60000 ms on azblob://, got 60001');
    await expect(store.renew('a', 'x~1', 1, 120_000)).rejects.toBeInstanceOf(InvalidArgumentError);
    expect(await store.read('d')).toBeNull();
    // A renew with another TTL changes the blob lease's duration.
    expect((await store.renew('a', 'x~1', 1, 30_000)).lease).toMatchObject({ ttlMs: 30_000, term: 1 });
    await store.close();
  });
});

describe('URLs and credentials', () => {
  it('opens azblob:// and azblob:/// (connection string from the environment) on Azurite', async () => {
    const name = container();
    const key = encodeURIComponent(AZURITE_KEY);
    const byUrl = await openStore(`azblob://${AZURITE_ACCOUNT}:${key}@127.0.0.1:${azurite.port}/${name}`);
    expect(byUrl.kind).toBe('azblob');
    expect((await byUrl.acquire('g', 'a~1', 15_000)).lease.term).toBe(1);
    const saved = process.env.TENURE_AZURE_CONNECTION_STRING;
    process.env.TENURE_AZURE_CONNECTION_STRING = azurite.connectionString;
    try {
      const byEnv = await openStore(`azblob:///${name}`);
      expect(await byEnv.read('g')).toMatchObject({ owner: 'a~1', term: 1 });
      await byEnv.close();
    } finally {
      if (saved === undefined) delete process.env.TENURE_AZURE_CONNECTION_STRING;
      else process.env.TENURE_AZURE_CONNECTION_STRING = saved;
    }
    await byUrl.close();
  });

  it('parses the URL forms, path-style for IPs and localhost, by host for Azure', () => {
    expect(parseAzureBlobUrl('azblob://acct:a2V5@127.0.0.1:10000/c1a')).toEqual({ kind: 'azblob', container: 'c1a', endpoint: 'http://127.0.0.1:10000/acct', account: 'acct', accountKey: 'a2V5' });
    expect(parseAzureBlobUrl('azblobs://acct:a2V5@acct.blob.core.windows.net/jobs')).toMatchObject({ endpoint: 'https://acct.blob.core.windows.net', container: 'jobs' });
    expect(parseAzureBlobUrl('azblob://acct:a2V5%2F%2B%3D%3D@localhost:1/abc')).toMatchObject({ accountKey: 'a2V5/+==', endpoint: 'http://localhost:1/acct' });
    expect(parseAzureBlobUrl('azblob:///abc', { TENURE_AZURE_CONNECTION_STRING: 'AccountName=a;AccountKey=b;' })).toEqual({ kind: 'azblob', container: 'abc', connectionString: 'AccountName=a;AccountKey=b;' });
  });

  const bad: [string, RegExp][] = [
    ['azblob://', /expected azblob:\/\/ACCOUNT:KEY@HOST/],
    ['azblob://acct@127.0.0.1:1/abc', /expected azblob:\/\/ACCOUNT:KEY@HOST/],
    ['azblob://acct:SECRETKEY0%@127.0.0.1:1/abc', /not valid percent-encoding/],
    ['azblob://acct:SECRET*KEY@127.0.0.1:1/abc', /account key is not base64/],
    ['azblob://ACCT:SECRETKEY0==@127.0.0.1:1/abc', /account name is 3 to 24/],
    ['azblob://acct:SECRETKEY0==@127.0.0.1:99999/abc', /port 1-65535/],
    ['azblob://acct:SECRETKEY0==@127.0.0.1:1/Bad_Container', /container name is 3 to 63/],
    ['azblob://acct:SECRETKEY0==@127.0.0.1:1/a--b', /container name/],
    ['azblob://acct:SECRETKEY0==@127.0.0.1:1/', /container name/],
    ['azblob:///abc', /TENURE_AZURE_CONNECTION_STRING, which is not set/],
  ];
  for (const [url, message] of bad) {
    it(`refuses ${url.replace(/SECRET[^@]*/, 'KEY')} with one clear line, the key never shown`, async () => {
      const saved = process.env.TENURE_AZURE_CONNECTION_STRING;
      delete process.env.TENURE_AZURE_CONNECTION_STRING;
      try {
        const err = await openStore(url).catch((e: unknown) => e);
        expect(err).toBeInstanceOf(InvalidArgumentError);
        expect((err as Error).message).toMatch(message);
        expect((err as Error).message).not.toMatch(/SECRET/);
        expect((err as Error).message).not.toContain('\n');
      } finally {
        if (saved !== undefined) process.env.TENURE_AZURE_CONNECTION_STRING = saved;
      }
    });
  }

  it('a wrong key is a clear error naming the credentials, and the key is in no message', async () => {
    const wrong = Buffer.from('not the key, but base64 of it').toString('base64');
    const store = new AzureBlobStore({ endpoint: `http://127.0.0.1:${azurite.port}/${AZURITE_ACCOUNT}`, account: AZURITE_ACCOUNT, accountKey: wrong, container: container() });
    const err = await store.acquire('g', 'a~1', 15_000).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(StoreUnavailableError);
    expect((err as Error).message).toMatch(/refused the credentials \(403/);
    expect((err as Error).message).not.toContain(wrong);
    await store.close();
  });

  it('an Azurite that is down: every call rejects with StoreUnavailableError promptly, the key in no message', async () => {
    const down = await startAzurite();
    const store = new AzureBlobStore({ endpoint: `http://127.0.0.1:${down.port}/${AZURITE_ACCOUNT}`, account: AZURITE_ACCOUNT, accountKey: AZURITE_KEY, container: container(), requestTimeoutMs: 500 });
    await store.acquire('g', 'a~1', 15_000);
    await down.kill();
    const t0 = performance.now();
    // Each call's time and answer, for the message of a failure (one was seen once, unexplained, beside CI).
    const took: string[] = [];
    for (const call of [() => store.read('g'), () => store.renew('g', 'a~1', 1, 15_000), () => store.appendFenced({ lease: 'g', term: 1 }, 's', 'x')]) {
      const t = performance.now();
      const err = await call().catch((e: unknown) => e);
      took.push(`${(performance.now() - t).toFixed(0)} ms: ${String(err)}`);
      expect(err, took.join('; ')).toBeInstanceOf(StoreUnavailableError);
      expect((err as Error).message).not.toContain(AZURITE_KEY);
      expect((err as Error).message).not.toContain(encodeURIComponent(AZURITE_KEY));
    }
    expect(performance.now() - t0, took.join('; ')).toBeLessThan(5000);
    await store.close();
    await down.stop();
  });
});
