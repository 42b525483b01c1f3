// One command: a fenced JetStream consumer, two publishing leaders, and a zombie's publish dropped.
//
//   node examples/nats-consumer/run.mjs [--short]
//
// Creates a JetStream stream of its own on NATS_URL (default nats://127.0.0.1:4222), starts
// consumer.mjs (applying to a SQLite file) and two publisher.mjs leaders (sharing a SQLite lease
// store), freezes the leader (SIGSTOP) past its lease, lets the other take over, resumes it
// (SIGCONT) and watches the consumer drop its late publish. Then it reads the consumer's table:
// the terms of the orders, in the order they were applied, never go back. It removes the stream
// and its temporary directory at the end. Exit code 0 when all of that happened.
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { createInterface } from 'node:readline';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { openSqlite } from './sqlite.mjs';
import { connect } from 'nats';

const here = dirname(fileURLToPath(import.meta.url));
const short = process.argv.includes('--short');
const NATS_URL = process.env.NATS_URL ?? 'nats://127.0.0.1:4222';
const run = randomBytes(4).toString('hex');
const stream = `TENURE_EXAMPLE_${run}`;
const subject = `orders.${run}`;
const dir = mkdtempSync(join(tmpdir(), 'tenure-nats-example-'));
const dbFile = join(dir, 'orders.db');
const env = { ...process.env, TENURE_STORE: `sqlite:${join(dir, 'leases.db')}` };
const children = [];
const events = [];

function start(name, script, args) {
  const child = spawn(process.execPath, [join(here, script), ...args], { env, stdio: ['ignore', 'pipe', 'inherit'] });
  children.push(child);
  createInterface({ input: child.stdout }).on('line', (line) => {
    console.log(`${name.padEnd(11)} ${line}`);
    try {
      events.push({ name, ...JSON.parse(line) });
    } catch {
      // not one of ours
    }
  });
  return child;
}

async function until(what, check, ms = 15_000) {
  const end = Date.now() + ms;
  for (;;) {
    const found = check();
    if (found) return found;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await sleep(20);
  }
}

const leaderNow = () => {
  for (const id of ['a', 'b']) {
    const mine = events.filter((e) => e.id === id && (e.event === 'elected' || e.event === 'deposed'));
    const lastOne = mine[mine.length - 1];
    if (lastOne?.event === 'elected') return { id, term: lastOne.term };
  }
  return null;
};

let ok = false;
const nc = await connect({ servers: NATS_URL }).catch((err) => {
  console.error(`run: cannot reach NATS at ${NATS_URL}: ${err.message}`);
  process.exit(1);
});
const jsm = await nc.jetstreamManager();
try {
  await jsm.streams.add({ name: stream, subjects: [subject] });
  start('consumer', 'consumer.mjs', [NATS_URL, stream, dbFile]);
  await until('the consumer', () => events.find((e) => e.name === 'consumer' && e.event === 'ready'));
  const procs = { a: start('publisher a', 'publisher.mjs', ['a', NATS_URL, subject]), b: start('publisher b', 'publisher.mjs', ['b', NATS_URL, subject]) };

  let dropped = null;
  for (let round = 1; round <= 3 && !dropped; round++) {
    // The publisher of the moment once a few of its orders were applied in its term (one deposed
    // before that, as on a loaded machine, is passed over for the next one).
    const applied = (l) => events.filter((e) => e.event === 'applied' && e.term === l.term).length;
    const zombie = await until('a leader with a few orders applied', () => {
      const l = leaderNow();
      return l && applied(l) >= (short ? 3 : 10) ? l : null;
    });
    console.log(`run         freezing publisher ${zombie.id} (term ${zombie.term}) with SIGSTOP`);
    procs[zombie.id].kill('SIGSTOP');
    const next = await until('the takeover', () => events.find((e) => e.event === 'elected' && e.term > zombie.term));
    await until('an order of the new term applied', () => events.find((e) => e.event === 'applied' && e.term === next.term));
    await sleep(short ? 500 : 2000);
    console.log(`run         resuming publisher ${zombie.id} (SIGCONT): it still believes it leads term ${zombie.term}`);
    procs[zombie.id].kill('SIGCONT');
    dropped = await until(`the consumer to drop ${zombie.id}'s late order`, () => events.find((e) => e.event === 'dropped' && e.publisher === zombie.id), 3000).catch(() => null);
    if (!dropped) console.log(`run         publisher ${zombie.id} stepped down before it published again (frozen mid-publish); again`);
  }
  if (!dropped) throw new Error('no late publish was dropped in three rounds');
  await sleep(short ? 500 : 2000);

  const db = await openSqlite(dbFile, { readonly: true });
  const rows = db.prepare('SELECT id, publisher, term FROM orders ORDER BY id').all();
  db.close();
  const backwards = rows.filter((r, i) => i > 0 && r.term < rows[i - 1].term);
  const perTerm = new Map();
  for (const r of rows) perTerm.set(r.term, { publisher: r.publisher, count: (perTerm.get(r.term)?.count ?? 0) + 1 });
  console.log(`\ndropped     ${dropped.reason}`);
  console.log(`orders      ${rows.length} applied; per term: ${[...perTerm].map(([t, p]) => `${t} by ${p.publisher} (${p.count})`).join(', ')}`);
  console.log(`order       ${backwards.length === 0 ? 'terms never went back: nothing the zombie published after the takeover was applied' : `${backwards.length} order(s) of a lower term after a higher one`}`);
  ok = backwards.length === 0 && rows.length > 0;
} catch (err) {
  console.error(`run: ${err.message}`);
} finally {
  for (const c of children) {
    c.kill('SIGCONT');
    c.kill('SIGTERM');
  }
  await Promise.race([Promise.all(children.map((c) => (c.exitCode !== null || c.signalCode !== null ? null : new Promise((r) => c.once('exit', r))))), sleep(5000)]);
  for (const c of children) if (c.exitCode === null && c.signalCode === null) c.kill('SIGKILL');
  await jsm.streams.delete(stream).catch(() => {});
  await nc.close();
  rmSync(dir, { recursive: true, force: true });
}
console.log(ok ? 'ok' : 'not ok');
process.exit(ok ? 0 : 1);
