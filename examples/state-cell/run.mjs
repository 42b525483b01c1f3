// Model A in one command: the leader publishes the group's shared state, followers see every
// version, and the deposed leader's late write is refused.
//
//   node examples/state-cell/run.mjs [--short]
//
// One process, one SQLite file (any store URL works: TENURE_STORE=postgres://… for instance).
// Node a leads the group `shards` and publishes which node owns which shard, as a StateCell;
// two followers subscribe and print every version. Then a steps down, b is elected and
// publishes its own assignment, and a, still holding its old token, tries one more write: the
// store refuses it with StaleTermError, and nothing is written. Exit code 0 when the followers saw
// every version in order and the late write was refused.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { LeaderElector, StaleTermError, StateCell, openStore } from 'tenure';

const short = process.argv.includes('--short');
const dir = mkdtempSync(join(tmpdir(), 'tenure-state-cell-'));
const store = await openStore(process.env.TENURE_STORE ?? `sqlite:${join(dir, 'tenure.db')}`);
const group = 'shards';
const rounds = short ? 3 : 10;

// Followers: every version, in order, as it is written (they poll every 20 ms here).
const seen = { f1: [], f2: [] };
const unsubscribe = [];
for (const name of ['f1', 'f2']) {
  const cell = new StateCell({ store, group, pollMs: 20 });
  unsubscribe.push(
    cell.subscribe(
      (v) => {
        seen[name].push(v.version);
        console.log(JSON.stringify({ follower: name, version: v.version, term: v.term, document: v.document }));
      },
      { after: 0, onError: (error) => console.log(JSON.stringify({ follower: name, error: error.message })) },
    ),
  );
}

/** Lead the group as `id`, publish `rounds` assignments, return the token held. */
async function lead(id) {
  const elector = new LeaderElector({ store, group, id, ttlMs: 2000 });
  const cell = new StateCell({ store, group });
  let held = null;
  await new Promise((resolve, reject) => {
    elector.runWhileLeader(async ({ token, signal }) => {
      held = token;
      try {
        for (let i = 0; i < rounds && !signal.aborted; i++) {
          // Read-modify-write with compare-and-set on the version and the token.
          const v = await cell.update(token, (current) => ({ leader: id, rev: (current?.document.rev ?? 0) + 1, owners: { s1: id, s2: i % 2 ? 'b' : 'a' } }));
          console.log(JSON.stringify({ leader: id, wrote: v.version, term: token.term }));
          await sleep(30);
        }
        resolve();
      } catch (err) {
        reject(err);
      }
    });
  });
  await elector.stop(); // step down: releases the lease
  return held;
}

let code = 1;
try {
  const oldToken = await lead('a');
  await lead('b');
  // a wakes up late, still holding its token, and knows the current version: refused anyway.
  const lateCell = new StateCell({ store, group });
  const current = await lateCell.read();
  try {
    await lateCell.write(oldToken, { leader: 'a', rev: -1, owners: {} }, { expectedVersion: current.version });
    console.log(JSON.stringify({ event: 'late write accepted' }));
  } catch (err) {
    if (!(err instanceof StaleTermError)) throw err;
    console.log(JSON.stringify({ event: 'refused', term: oldToken.term, message: err.message }));
    const after = await lateCell.read();
    const total = 2 * rounds;
    if (after.version !== total) throw new Error(`expected version ${total}, found ${after.version}`);
    const start = Date.now();
    while ((seen.f1.length < total || seen.f2.length < total) && Date.now() - start < 5000) await sleep(20);
    const all = Array.from({ length: total }, (_, i) => i + 1);
    for (const name of ['f1', 'f2']) {
      if (JSON.stringify(seen[name]) !== JSON.stringify(all)) throw new Error(`${name} saw ${seen[name].join(',')}`);
    }
    console.log(`followers saw versions 1..${total} in order; the late write was refused and wrote nothing`);
    console.log('ok');
    code = 0;
  }
} finally {
  for (const u of unsubscribe) u();
  await store.close();
  rmSync(dir, { recursive: true, force: true });
}
process.exit(code);
