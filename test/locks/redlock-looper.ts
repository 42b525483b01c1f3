/**
 * One of the processes of the rolling-restart test: takes and releases RESOURCE on REDLOCK_URL
 * in a loop until its stdin closes. While it holds the lock it appends `PID TERM` to LOG_FILE (one
 * O_APPEND write, so the file's order is the order in which the lock was held). Each failed
 * acquisition is a JSON line on stdout; at the end it prints {"done": N, "failures": F}.
 */
import { appendFileSync } from 'node:fs';
import { openRedlock } from '../../src/locks/index.js';

const [url, resource, logFile, waitText] = process.argv.slice(2) as [string, string, string, string];
const redlock = await openRedlock(url);
let stopping = false;
process.stdin.on('data', () => {});
process.stdin.on('end', () => (stopping = true));
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
let done = 0;
let failures = 0;
while (!stopping) {
  try {
    const handle = await redlock.acquire(resource, { ttlMs: 2000, waitMs: Number(waitText) });
    appendFileSync(logFile, `${process.pid} ${handle.term}\n`);
    await sleep(5 + Math.random() * 10);
    await handle.release();
    done++;
  } catch (err) {
    failures++;
    process.stdout.write(`${JSON.stringify({ error: err instanceof Error ? err.message : String(err) })}\n`);
  }
  await sleep(20 + Math.random() * 40); // let the others in
}
await redlock.close();
process.stdout.write(`${JSON.stringify({ done, failures })}\n`);
