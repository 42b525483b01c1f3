// A leader that calls the fenced service: it campaigns for the group `payouts` on PostgreSQL and,
// while it leads, POSTs a payout every 200 ms with fencedFetch, which adds the header
// `Fencing-Token: payouts#<term>` from the leadership's token context (never a token made up
// locally). When the service answers 409 (a newer leader has written), fencedFetch throws
// StaleTermError and tenure has already stepped this elector down: the work just stops.
//
//   DATABASE_URL=postgres://… node leader.mjs ID http://127.0.0.1:PORT
import { setTimeout as sleep } from 'node:timers/promises';
import { LeaderElector, StaleTermError, openStore } from 'tenure';
import { fencedFetch } from 'tenure/fencing';

const DATABASE_URL = process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/tenure_example';
const [id, service] = process.argv.slice(2);
if (!id || !service) {
  console.error('usage: node leader.mjs ID SERVICE_URL');
  process.exit(2);
}

const say = (event) => console.log(JSON.stringify({ id, ...event }));

const store = await openStore(DATABASE_URL);
const elector = new LeaderElector({ store, group: 'payouts', id, ttlMs: 1000 });
elector.on('elected', ({ term }) => say({ event: 'elected', term }));
elector.on('deposed', ({ term, reason }) => say({ event: 'deposed', term, reason }));

const done = elector.runWhileLeader(async ({ signal, term }) => {
  let n = 0;
  while (!signal.aborted) {
    await sleep(200); // preparing the next payout
    try {
      const res = await fencedFetch(`${service}/payouts`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ leader: id, n: ++n, amountCents: 100 }),
      });
      if (!res.ok) throw new Error(`the service answered ${res.status}: ${await res.text()}`);
      say({ event: 'paid', term, n });
    } catch (err) {
      if (err instanceof StaleTermError) {
        say({ event: 'refused', term, message: err.message });
        return;
      }
      throw err;
    }
  }
});

process.on('SIGTERM', () => void elector.stop());
await done;
await store.close();
