// A worker: joins the group `primes` under its node id and counts the primes below each limit the
// leader gives it. Its lease `primes/workers/<id>` tells the leader it is alive; it answers in its
// own fenced stream `primes/results/<id>`.
//
//   TENURE_STORE=sqlite:/tmp/x.db node examples/work-queue/worker.mjs ID [--slow MS]
import { setTimeout as sleep } from 'node:timers/promises';
import { Worker, openStore } from 'tenure';

const [id, ...rest] = process.argv.slice(2);
if (!id) {
  console.error('usage: worker.mjs ID [--slow MS]');
  process.exit(2);
}
const slowMs = rest[0] === '--slow' ? Number(rest[1]) : 0;
const say = (fields) => console.log(JSON.stringify({ id, ...fields }));

function countPrimes(below) {
  const sieve = new Uint8Array(below);
  let count = 0;
  for (let i = 2; i < below; i++) {
    if (sieve[i]) continue;
    count += 1;
    for (let j = i * i; j < below; j += i) sieve[j] = 1;
  }
  return count;
}

const store = await openStore(process.env.TENURE_STORE);
const worker = new Worker({
  store,
  group: 'primes',
  nodeId: id,
  ttlMs: 1500, // a dead worker's items move on about this long after it dies
  pollMs: 20,
  handler: async ({ below }, { item, attempt, signal }) => {
    say({ event: 'started', item, attempt });
    // Slow work that listens to its signal: the leader's revoke or a new leader stops it.
    if (slowMs > 0) await sleep(slowMs, undefined, { signal });
    return { primes: countPrimes(below), by: id };
  },
});
worker.on('joined', ({ term }) => say({ event: 'joined', term }));
process.on('SIGTERM', () => void worker.stop());
await worker.start();
await store.close();
