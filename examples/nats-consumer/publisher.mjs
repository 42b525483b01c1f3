// A leader publishing orders to JetStream: it campaigns for the group `orders` and, while it leads,
// publishes an order every 200 ms with publishFencedJetStream, which puts the leadership's token
// (Fencing-Token: orders#<term>, from the token context) and a sequence in the message headers.
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

const done = elector.runWhileLeader(async ({ signal, term }) => {
  let n = 0;
  while (!signal.aborted) {
    await sleep(200); // preparing the next order
    await publishFencedJetStream(js, subject, JSON.stringify({ publisher: id, n: ++n }));
    say({ event: 'published', term, n });
  }
});

process.on('SIGTERM', () => void elector.stop());
await done;
await nc.close();
await store.close();
