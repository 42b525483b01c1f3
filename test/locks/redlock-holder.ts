/**
 * A Redlock holder in its own process, for the pause test: acquires RESOURCE on REDLOCK_URL,
 * prints its token as a JSON line, then on each stdin line appends that line to a fenced stream on
 * the Redis store of server 0 (STORE_URL) and prints the outcome — whether or not it still holds
 * the lock, as a process that was paused mid-write would.
 */
import { createInterface } from 'node:readline';
import { openRedlock } from '../../src/locks/index.js';
import { RedisStore } from '../../src/stores/redis/index.js';

const [redlockUrl, storeUrl, resource, ttl] = process.argv.slice(2) as [string, string, string, string];
const redlock = await openRedlock(redlockUrl);
const store = new RedisStore({ url: storeUrl });
const handle = await redlock.acquire(resource, { ttlMs: Number(ttl), waitMs: 5000 });
process.stdout.write(`${JSON.stringify({ acquired: handle.token })}\n`);
for await (const line of createInterface({ input: process.stdin })) {
  if (line === 'exit') break;
  try {
    const seq = await store.appendFenced(handle.token, 'ledger', line);
    process.stdout.write(`${JSON.stringify({ wrote: seq, aborted: handle.signal.aborted })}\n`);
  } catch (err) {
    const e = err as Error & { code?: string };
    process.stdout.write(`${JSON.stringify({ error: e.code ?? e.name, message: e.message, aborted: handle.signal.aborted })}\n`);
  }
}
await handle.release();
await redlock.close();
await store.close();
