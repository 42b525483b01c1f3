// A leader publishing orders to JetStream: it campaigns for the group `orders` and, while it leads,
// publishes an order every 200 ms with publishFencedJetStream, which puts the leadership's token
// (Fencing-Token: orders#<term>, the token the order was decided under) and a sequence in the
// message headers.
// The broker accepts any publish; the consumer decides.
//
//   TENURE_STORE=sqlite:/tmp/x.db node publisher.mjs ID NATS_URL SUBJECT
import { setTimeout as sleep } from 'node:timers/promises';
import { connect } from 'nats';
import { LeaderElector, openStore } from 'tenure';
import { publishFencedJetStream } from 'tenure/fencing';

const [id, natsUrl, subject] = process.argv.slice(2);
if (!id || !natsUrl || !subject) {
  console.error('usage: node publisher.mjs ID NATS_URL SUBJECT');
  process.exit(2);
}
const say = (event) => console.log(JSON.stringify({ id, ...event }));

const store = await openStore(process.env.TENURE_STORE ?? 'sqlite:./.tenure/tenure.db');
const nc = await connect({ servers: natsUrl });
const js = nc.jetstream();
const elector = new LeaderElector({ store, group: 'orders', id, ttlMs: 1000 });
elector.on('elected', ({ term }) => say({ event: 'elected', term }));
elector.on('deposed', ({ term, reason }) => say({ event: 'deposed', term, reason }));

const done = elector.runWhileLeader(async ({ signal, term, token }) => {
  let n = 0;
  while (!signal.aborted) {
    // The next order is decided now, as leader, and goes out with the token of this decision once
    // it is prepared. A process paused while preparing it (a GC pause; here SIGSTOP) publishes it
    // late, under a term that has ended: the consumer, not this process, refuses it.
    const order = { publisher: id, n: ++n };
    await sleep(200); // preparing the order
    await publishFencedJetStream(js, subject, JSON.stringify(order), { token });
    say({ event: 'published', term, n });
  }
});

process.on('SIGTERM', () => void elector.stop());
await done;
await nc.close();
await store.close();
