// One command: the fenced Express service and two leaders, and a zombie leader refused.
//
//   node examples/express-postgres/run.mjs [--short]
//
// Starts service.mjs and two leader.mjs processes on PostgreSQL (DATABASE_URL, default
// postgres://postgres@127.0.0.1:5432/tenure_example, created if missing), lets the leader pay out
// for a while, freezes it (SIGSTOP) past its lease, watches the other take over, resumes it
// (SIGCONT) and watches its next POST refused with 409. Then it reads the payouts table: the
// terms of the rows, in the order they were inserted, never go back. Exit code 0 when all of
// that happened.
import { spawn } from 'node:child_process';
import { dirname, join } from 'node:path';
import { createInterface } from 'node:readline';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import pg from 'pg';

const here = dirname(fileURLToPath(import.meta.url));
const short = process.argv.includes('--short');
const DATABASE_URL = process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/tenure_example';
const env = { ...process.env, DATABASE_URL };
const children = [];
const events = [];

function start(name, script, args = []) {
  const child = spawn(process.execPath, [join(here, script), ...args], { env, stdio: ['ignore', 'pipe', 'inherit'] });
  children.push(child);
  createInterface({ input: child.stdout }).on('line', (line) => {
    console.log(`${name.padEnd(8)} ${line}`);
    try {
      events.push({ name, child, ...JSON.parse(line) });
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

const last = (id, event) => events.findLast((e) => e.id === id && e.event === event);
const leaderNow = () => {
  for (const id of ['a', 'b']) {
    const elected = last(id, 'elected');
    const deposed = last(id, 'deposed');
    if (elected && (!deposed || events.indexOf(deposed) < events.indexOf(elected))) return { id, term: elected.term };
  }
  return null;
};

async function ensureDatabase() {
  const url = new URL(DATABASE_URL);
  const name = url.pathname.slice(1);
  const admin = new URL(DATABASE_URL);
  admin.pathname = '/postgres';
  const c = new pg.Client({ connectionString: admin.toString() });
  await c.connect();
  try {
    const { rowCount } = await c.query('SELECT 1 FROM pg_database WHERE datname = $1', [name]);
    if (rowCount === 0) await c.query(`CREATE DATABASE "${name.replace(/"/g, '""')}"`);
  } finally {
    await c.end();
  }
}

let ok = false;
try {
  await ensureDatabase();
  const db = new pg.Client({ connectionString: DATABASE_URL });
  await db.connect();
  await db.query('CREATE TABLE IF NOT EXISTS payouts (id bigserial PRIMARY KEY, leader text NOT NULL, term bigint NOT NULL, n integer NOT NULL, amount_cents bigint NOT NULL)');
  const since = Number((await db.query('SELECT coalesce(max(id), 0) AS id FROM payouts')).rows[0].id);

  start('service', 'service.mjs', []);
  const { listening } = await until('the service', () => events.find((e) => e.listening));
  const procs = { a: start('leader a', 'leader.mjs', ['a', listening]), b: start('leader b', 'leader.mjs', ['b', listening]) };

  let refused = null;
  for (let round = 1; round <= 3 && !refused; round++) {
    // The leader of the moment once it has paid a few times in its term (a leader deposed before
    // that, as on a loaded machine, is passed over for the next one).
    const payouts = (l) => events.filter((e) => e.id === l.id && e.event === 'paid' && e.term === l.term).length;
    const zombie = await until('a leader with a few payouts', () => {
      const l = leaderNow();
      return l && payouts(l) >= (short ? 3 : 10) ? l : null;
    });
    console.log(`run      freezing leader ${zombie.id} (term ${zombie.term}) with SIGSTOP`);
    procs[zombie.id].kill('SIGSTOP');
    const other = zombie.id === 'a' ? 'b' : 'a';
    const next = await until(`leader ${other} to take over`, () => events.find((e) => e.id === other && e.event === 'elected' && e.term > zombie.term));
    await until(`leader ${other} to pay out`, () => events.find((e) => e.id === other && e.event === 'paid' && e.term === next.term));
    await sleep(short ? 500 : 2000);
    console.log(`run      resuming leader ${zombie.id} (SIGCONT): it still believes it leads term ${zombie.term}`);
    procs[zombie.id].kill('SIGCONT');
    refused = await until(`leader ${zombie.id}'s late payout`, () => events.find((e) => e.id === zombie.id && e.event === 'refused' && e.term === zombie.term), 3000).catch(() => null);
    if (!refused) console.log(`run      leader ${zombie.id} stepped down before it sent another payout (frozen mid-request); again`);
  }
  if (!refused) throw new Error('no zombie request was refused in three rounds');
  await sleep(short ? 500 : 2000);

  const rows = (await db.query('SELECT id, leader, term FROM payouts WHERE id > $1 ORDER BY id', [since])).rows.map((r) => ({ id: Number(r.id), leader: r.leader, term: Number(r.term) }));
  await db.end();
  const backwards = rows.filter((r, i) => i > 0 && r.term < rows[i - 1].term);
  const perTerm = new Map();
  for (const r of rows) perTerm.set(r.term, { leader: r.leader, count: (perTerm.get(r.term)?.count ?? 0) + 1 });
  console.log(`\nrefused  ${refused.message}`);
  console.log(`payouts  ${rows.length} rows; per term: ${[...perTerm].map(([t, p]) => `${t} by ${p.leader} (${p.count})`).join(', ')}`);
  console.log(`order    ${backwards.length === 0 ? 'terms never went back: the zombie wrote nothing after the takeover' : `${backwards.length} row(s) of a lower term after a higher one`}`);
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
}
console.log(ok ? 'ok' : 'not ok');
process.exit(ok ? 0 : 1);
