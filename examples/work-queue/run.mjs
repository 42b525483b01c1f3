// One command: a leader directs work to three workers, one of which is killed (SIGKILL) in the
// middle of an item; its items go to the others, and every item is counted exactly once.
//
//   node examples/work-queue/run.mjs [--short]
//
// Uses a SQLite lease store in a temporary directory (no server needed), removed at the end.
// Checks the leader's aggregate against counts made here: every item once, every count right.
// Exit code 0 when all of that held.
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { createInterface } from 'node:readline';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const short = process.argv.includes('--short');
const dir = mkdtempSync(join(tmpdir(), 'tenure-work-example-'));
const env = { ...process.env, TENURE_STORE: `sqlite:${join(dir, 'tenure.db')}` };
const children = [];
const events = [];

function start(name, script, args) {
  const child = spawn(process.execPath, [join(here, script), ...args], { env, stdio: ['ignore', 'pipe', 'inherit'] });
  children.push(child);
  createInterface({ input: child.stdout }).on('line', (line) => {
    console.log(`${name.padEnd(9)} ${line.length > 200 ? `${line.slice(0, 200)}…` : line}`);
    try {
      events.push({ name, ...JSON.parse(line) });
    } catch {
      // not one of ours
    }
  });
  return child;
}

async function until(what, check, ms = 30_000) {
  const end = Date.now() + ms;
  for (;;) {
    const found = check();
    if (found) return found;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await sleep(20);
  }
}

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

let ok = false;
try {
  const items = short ? 12 : 40;
  // w2 is slow, so the kill lands in the middle of its item however loaded the machine is.
  const workers = { w1: start('w1', 'worker.mjs', ['w1', '--slow', '150']), w2: start('w2', 'worker.mjs', ['w2', '--slow', '5000']), w3: start('w3', 'worker.mjs', ['w3', '--slow', '150']) };
  await until('three workers', () => events.filter((e) => e.event === 'joined').length >= 3);
  start('leader', 'leader.mjs', [String(items)]);
  const victim = await until('w2 at work', () => events.find((e) => e.name === 'w2' && e.event === 'started'));
  console.log(`run       killing w2 (SIGKILL) in the middle of ${victim.item}`);
  workers.w2.kill('SIGKILL');
  const done = await until('the job', () => events.find((e) => e.event === 'done'), 60_000);

  const expected = Array.from({ length: items }, (_, i) => (i + 1) * 10_000);
  const wrong = expected.filter((below) => done.results[`below-${below}`]?.primes !== countPrimes(below));
  const moved = events.filter((e) => e.event === 'reassigned' && e.worker === 'w2');
  const byWorker = {};
  for (const r of Object.values(done.results)) byWorker[r.worker] = (byWorker[r.worker] ?? 0) + 1;
  console.log(`\nitems     ${done.items} of ${items} done, each once; counts wrong: ${wrong.length}`);
  console.log(`workers   ${Object.entries(byWorker).map(([w, n]) => `${w} ${n}`).join(', ')}`);
  console.log(`killed    w2's ${moved.map((e) => e.item).join(', ')} reassigned (${moved.map((e) => e.reason).join(', ')}); ${done.results[victim.item].worker} did ${victim.item}`);
  ok = done.items === items && Object.keys(done.results).length === items && wrong.length === 0 && moved.some((e) => e.item === victim.item && e.reason === 'worker-lost') && done.results[victim.item].worker !== 'w2';
} catch (err) {
  console.error(`run: ${err.message}`);
} finally {
  for (const c of children) c.kill('SIGTERM');
  await Promise.race([Promise.all(children.map((c) => (c.exitCode !== null || c.signalCode !== null ? null : new Promise((r) => c.once('exit', r))))), sleep(5000)]);
  for (const c of children) if (c.exitCode === null && c.signalCode === null) c.kill('SIGKILL');
  rmSync(dir, { recursive: true, force: true });
}
console.log(ok ? 'ok' : 'not ok');
process.exit(ok ? 0 : 1);
