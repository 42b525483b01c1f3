/**
 * One chaos workload node, a process of its own (run compiled: node dist/src/chaos/node.js CONFIG_JSON):
 * `tenure chaos` starts these, and so does the chaos suite (test/chaos/runner.ts).
 *
 * Campaigns for every group with a LeaderElector on one store. While leader of a group it
 * appends fenced entries carrying (node, owner, term, counter) to the group's stream as fast as
 * it can, one at a time, and records every attempt with its outcome in its history file:
 * ok (with the acknowledged sequence number), rejected (StaleTermError: the node then resigns, as
 * a stale leader must stop), or ambiguous (any other error, or no answer within the request
 * timeout; it then waits for that call to settle before the next one, so its own entries keep
 * their order).
 *
 * With `workload: 'redlock'` it takes a Redlock per group instead of campaigning (the lock's
 * fencing token is the term, the acquisition the owner) and appends to the store at `streamUrl`.
 *
 * Talks to the chaos runner over the IPC channel: sends `ready`, `elected`, `deposed`; obeys
 * `resign` (give up what it leads now: LeaderElector.resign(), or release the Redlocks it holds)
 * and `stop` (stop campaigning, release, flush the history, exit 0). Exits when the runner goes away.
 */
import { LeaderElector } from '../election/index.js';
import { SeededRandom, StaleTermError, StoreUnavailableError } from '../core/index.js';
import type { FencingToken } from '../core/index.js';
import { openRedlock } from '../locks/redlock-url.js';
import type { Redlock } from '../locks/redlock.js';
import { openStore } from '../open.js';
import type { TenureStore } from '../open.js';
import { HistoryWriter, streamOf } from './history.js';
import type { ChaosPayload, HistoryRecord } from './history.js';
import type { ChaosNodeConfig, ChaosNodeMessage } from './protocol.js';

export type { ChaosNodeConfig, ChaosNodeMessage } from './protocol.js';

const config = JSON.parse(process.argv[2] ?? '{}') as ChaosNodeConfig;
const history = new HistoryWriter(config.history);
const random = new SeededRandom(config.seed);
const send = (m: ChaosNodeMessage): void => {
  if (process.connected) process.send?.(m);
};
const base = (): { node: string; proc: string; at: number } => ({ node: config.node, proc: config.proc, at: Date.now() });
const record = (r: HistoryRecord): void => history.write(r);
const nextTick = (): Promise<void> => new Promise((r) => setImmediate(r));
const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));
let stopping = false;

/**
 * Open the store, retrying for up to 30 s while it refuses (a store that is down or busy at
 * start is a fault to ride out, as a supervisor restarting the process would).
 */
async function open(url: string): Promise<{ store: TenureStore; retries: number; error: string | undefined }> {
  const until = Date.now() + 30_000;
  let retries = 0;
  let error: string | undefined;
  for (;;) {
    try {
      return { store: await openStore(url), retries, error };
    } catch (err) {
      if (!(err instanceof StoreUnavailableError) || Date.now() > until) throw err;
      retries++;
      error = `${err.name}: ${err.message}`;
      await sleep(50 + Math.floor(random.next() * 150));
    }
  }
}

/**
 * The appends of one group: `attempt` makes one, recorded with its outcome, and rethrows
 * StaleTermError after recording it. The counter is per process and group.
 *
 * Appends other than late writes go one at a time per group and process, even across
 * leaderships: the elector may elect this node again (same owner, often the same term) while the
 * previous leadership's work still waits for an append it sent before the deadline, and that
 * append must settle before the new work sends its first. Otherwise the two are concurrent, the
 * store may apply them in either order, and the checker's `reordered` rule (an owner's entries
 * in the order it sent them) would be about the workload, not the store.
 */
function appender(store: TenureStore, group: string): (owner: string, term: number, token: FencingToken, late: boolean) => Promise<void> {
  const stream = streamOf(group);
  const timeoutMs = Math.max(100, Math.floor(config.ttlMs / 3));
  let counter = 0;
  let inFlight: Promise<unknown> = Promise.resolve();
  return async (owner, term, token, late) => {
    if (!late) await inFlight;
    const payloadValue: ChaosPayload = { n: config.node, o: owner, t: term, c: ++counter, ...(late ? { l: 1 as const } : {}) };
    const payload = JSON.stringify(payloadValue);
    const common = { k: 'append' as const, group, owner, term, counter: payloadValue.c, payload, ...(late ? { late } : {}) };
    const sentAt = Date.now();
    const call = store.appendFenced(token, stream, payload);
    if (!late) inFlight = call.catch(() => {});
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<'timeout'>((r) => (timer = setTimeout(() => r('timeout'), timeoutMs)));
    try {
      const seq = await Promise.race([call, timeout]);
      if (seq === 'timeout') {
        record({ ...base(), ...common, sentAt, outcome: 'ambiguous', error: `no answer within ${timeoutMs} ms` });
        await call.catch(() => {});
        return;
      }
      record({ ...base(), ...common, sentAt, outcome: 'ok', seq });
    } catch (err) {
      const e = err as Error;
      if (err instanceof StaleTermError) {
        record({ ...base(), ...common, sentAt, outcome: 'rejected', error: `${e.name}: ${e.message}` });
        throw err;
      }
      record({ ...base(), ...common, sentAt, outcome: 'ambiguous', error: `${e.name}: ${e.message}` });
      await sleep(10);
    } finally {
      clearTimeout(timer);
    }
  };
}

/** The stall before a late write: a GC pause or a slow network, up to 1.5 TTL. */
const lateStall = (): number => Math.floor(random.next() * 1.5 * config.ttlMs);

async function main(): Promise<void> {
  if (config.workload === 'redlock') return mainRedlock();
  const { store, retries, error } = await open(config.url);
  record({ ...base(), k: 'start', pid: process.pid, ...(retries > 0 ? { openRetries: retries, openError: error } : {}) });
  const electors = config.groups.map((group) => {
    const elector = new LeaderElector({ store, group, id: config.node, ttlMs: config.ttlMs });
    const attempt = appender(store, group);
    elector.on('elected', ({ term }) => {
      record({ ...base(), k: 'elected', group, owner: elector.owner, term });
      send({ type: 'elected', group, term, owner: elector.owner });
    });
    elector.on('deposed', ({ term, reason }) => {
      record({ ...base(), k: 'deposed', group, owner: elector.owner, term, reason });
      send({ type: 'deposed', group, term, reason });
    });
    void elector.runWhileLeader(async ({ signal, term, token }) => {
      while (!signal.aborted) {
        // Yield to timers and I/O between appends: a store that answers synchronously (SQLite)
        // would otherwise starve the renew loop and the deadline timer.
        await nextTick();
        if (signal.aborted) break;
        await attempt(elector.owner, term, token, false); // a StaleTermError ends the work: the elector resigns
      }
      // The write that was already on its way when leadership ended: checked the signal, then
      // stalled (a GC pause, a slow network) for up to 1.5 TTL. It carries the old token, and the
      // store must refuse it if a newer term has written meanwhile.
      await sleep(lateStall());
      if (!stopping) await attempt(elector.owner, term, token, true).catch(() => {});
    });
    if (config.mutation === 'forge-token') {
      // The deliberate bug: while not leader, borrow whoever leads's term now and then, and write.
      const timer = setInterval(() => {
        if (elector.isLeader || stopping) return;
        void store
          .read(group)
          .then((lease) => (lease && lease.owner !== elector.owner ? attempt(elector.owner, lease.term, { lease: group, term: lease.term }, false) : undefined))
          .catch(() => {});
      }, 500);
      timer.unref();
    }
    return elector;
  });
  listenForStop(
    async () => {
      await Promise.allSettled(electors.map((e) => e.stop()));
      return [store];
    },
    () => {
      for (const e of electors) if (e.isLeader) void e.resign();
    },
  );
  send({ type: 'ready', pid: process.pid });
}

/**
 * The Redlock workload: per group, take the Redlock named after the group (retrying until it is
 * won), then append with its fencing token while the lock's signal holds, as fast as the stream's
 * store takes it. The owner is the acquisition (node and the lock's random value), the term its
 * token. When the lock is lost (or the store fences a write) the node releases it, sends one late
 * write with the old token after a stall, and goes back to acquiring.
 */
async function mainRedlock(): Promise<void> {
  if (!config.streamUrl) throw new Error('the redlock workload needs streamUrl');
  const { store, retries, error } = await open(config.streamUrl);
  const redlock: Redlock = await openRedlock(config.url, { ttlMs: config.ttlMs });
  record({ ...base(), k: 'start', pid: process.pid, ...(retries > 0 ? { openRetries: retries, openError: error } : {}) });
  const quit = new AbortController();
  /** Groups whose lock the runner asked this node to give up (`resign`). */
  const resigning = new Set<string>();
  const loops = config.groups.map(async (group) => {
    const attempt = appender(store, group);
    while (!stopping) {
      let handle;
      try {
        handle = await redlock.acquire(group, { ttlMs: config.ttlMs, signal: quit.signal });
      } catch {
        if (stopping) return;
        await sleep(50);
        continue;
      }
      const owner = `${config.node}~${handle.value.slice(0, 8)}`;
      const { term, token } = handle;
      record({ ...base(), k: 'elected', group, owner, term });
      send({ type: 'elected', group, term, owner });
      let reason = 'stopped';
      try {
        resigning.delete(group);
        while (!handle.signal.aborted && !stopping && !resigning.has(group)) {
          await nextTick();
          if (handle.signal.aborted || stopping || resigning.has(group)) break;
          await attempt(owner, term, token, false);
        }
        if (handle.signal.aborted) reason = (handle.signal.reason as Error | undefined)?.message ?? 'lost';
        else if (resigning.has(group)) reason = 'resigned';
      } catch (err) {
        if (!(err instanceof StaleTermError)) throw err;
        reason = 'fenced: a newer token has written';
      }
      await handle.release().catch(() => {});
      record({ ...base(), k: 'deposed', group, owner, term, reason });
      send({ type: 'deposed', group, term, reason });
      if (stopping) return;
      // The write already on its way when the lock was lost, beside the node's next acquisition.
      void sleep(lateStall()).then(() => (stopping ? undefined : attempt(owner, term, token, true).catch(() => {})));
    }
  });
  for (const loop of loops) {
    loop.catch((err: unknown) => {
      const e = err as Error;
      send({ type: 'fatal', error: `${e.name}: ${e.message}` });
      process.stderr.write(`chaos-node ${config.node}: ${e.stack ?? e.message}\n`);
    });
  }
  listenForStop(
    async () => {
      quit.abort(new Error('stopping'));
      await Promise.allSettled(loops);
      await redlock.close().catch(() => {});
      return [store];
    },
    () => {
      for (const g of config.groups) resigning.add(g);
    },
  );
  send({ type: 'ready', pid: process.pid });
}

/**
 * On `stop` from the runner (or its going away): `wind` down the work, flush the history, close,
 * exit 0. On `resign`: `resign()`.
 */
function listenForStop(wind: () => Promise<TenureStore[]>, resign: () => void): void {
  const stop = async (code: number): Promise<void> => {
    if (stopping) return;
    stopping = true;
    const forced = setTimeout(() => {
      history.close();
      process.exit(code);
    }, 3000);
    const stores = await wind();
    record({ ...base(), k: 'stop' });
    history.close();
    await Promise.allSettled(stores.map((s) => s.close()));
    clearTimeout(forced);
    process.exit(code);
  };
  process.on('message', (m: { type?: string }) => {
    if (m?.type === 'stop') void stop(0);
    else if (m?.type === 'resign' && !stopping) resign();
  });
  process.on('disconnect', () => void stop(0));
  process.on('SIGTERM', () => void stop(0));
}

main().catch((err: unknown) => {
  const e = err as Error;
  send({ type: 'fatal', error: `${e.name}: ${e.message}` });
  process.stderr.write(`chaos-node ${config.node}: ${e.stack ?? e.message}\n`);
  history.close();
  process.exit(1);
});
