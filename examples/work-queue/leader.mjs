// The leader: campaigns for the group `primes` and, once it leads, runs one job: count the primes
// below each of N limits, one item per limit, spread over the live workers. Prints the aggregate
// as one JSON line, releases the lease and exits.
//
//   TENURE_STORE=sqlite:/tmp/x.db node examples/work-queue/leader.mjs [ITEMS]
import { LeaderElector, WorkCoordinator, openStore } from 'tenure';

const count = Number(process.argv[2] ?? 24);
const say = (fields) => console.log(JSON.stringify(fields));
const store = await openStore(process.env.TENURE_STORE);
const elector = new LeaderElector({ store, group: 'primes', id: 'leader', ttlMs: 3000 });
const items = Array.from({ length: count }, (_, i) => ({ id: `below-${(i + 1) * 10_000}`, input: { below: (i + 1) * 10_000 } }));

// The job is all this leader is for: when it ends, so does the leadership (the lease is released).
await elector.runWhileLeader(async ({ token, term, signal }) => {
  say({ event: 'elected', term });
  const coordinator = new WorkCoordinator({ store, token, pollMs: 20 });
  coordinator.on('reassigned', (e) => say({ event: 'reassigned', ...e }));
  coordinator.on('ignored', (e) => say({ event: 'ignored', ...e }));
  const report = await coordinator.run({ items, itemTimeoutMs: 10_000, signal });
  const results = Object.fromEntries([...report.results].map(([item, r]) => [item, { primes: r.output.primes, worker: r.worker, attempt: r.attempt }]));
  say({ event: 'done', term: report.term, items: report.results.size, reassigned: report.reassigned, ignored: report.ignored, results });
}, { releaseOnEnd: true });
await store.close();
