/**
 * A child must not outlive its supervisor: `kill -9` of `tenure run` or `tenure lock` leaves no
 * process of the child's group running once the grace period is over (a watchdog process holds a
 * pipe from tenure and stops the group when the pipe closes), so a second node that takes the
 * lease after it expires never runs a second copy beside the first.
 */
import { existsSync, readFileSync, readdirSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { cleanUp, groupAlive, processAlive, sandbox, sleep, start, waitUntil } from './helpers.js';
import type { Running, Sandbox } from './helpers.js';

afterAll(cleanUp);

/**
 * A child that writes its pid and a heartbeat file every 100 ms, with a grandchild (`sleep`) in
 * its process group; with `stubborn` it ignores SIGTERM, so only SIGKILL ends it.
 */
function heartbeatChild(box: Sandbox, stubborn: boolean): string[] {
  const pidFile = join(box.dir, 'child.pid');
  const beat = join(box.dir, 'heartbeat');
  const grandchild = join(box.dir, 'grandchild.pid');
  const trap = stubborn ? "trap '' TERM;" : '';
  return ['sh', '-c', `${trap} echo $$ > ${pidFile}; sleep 600 & echo $! > ${grandchild}; while :; do date > ${beat}; sleep 0.1; done`];
}

/** The watchdogs guarding group `pgid` (their title is `tenure-watchdog PGID`; Linux /proc). */
function watchdogsOf(pgid: number): number[] {
  const out: number[] = [];
  for (const entry of readdirSafe('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const cmdline = readFileSync(`/proc/${entry}/cmdline`, 'utf8').replace(/\0+$/, '');
      if (cmdline === `tenure-watchdog ${pgid}`) out.push(Number(entry));
    } catch {
      // exited meanwhile
    }
  }
  return out;
}

/** Processes whose parent is `pid` (Linux /proc). */
function childrenOf(pid: number): number[] {
  const out: number[] = [];
  for (const entry of readdirSafe('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, 'utf8');
      const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      if (Number(fields[1]) === pid) out.push(Number(entry));
    } catch {
      // exited meanwhile
    }
  }
  return out;
}

function readdirSafe(dir: string): string[] {
  try {
    return readdirSync(dir);
  } catch {
    return [];
  }
}

interface Killed {
  readonly child: number;
  readonly grandchild: number;
  readonly watchdogs: number[];
  readonly killedAt: number;
}

/** Wait until `t` started its child and the child is beating, then kill -9 tenure. */
async function killSupervisor(box: Sandbox, t: Running): Promise<Killed> {
  const child = await waitUntil('the child to start', () => t.childPids()[0], 60_000);
  await waitUntil('the child to beat', () => existsSync(join(box.dir, 'heartbeat')) && existsSync(join(box.dir, 'grandchild.pid')));
  const grandchild = Number(readFileSync(join(box.dir, 'grandchild.pid'), 'utf8'));
  const watchdogs = process.platform === 'linux' ? childrenOf(t.pid).filter((p) => p !== child) : [];
  t.signal('SIGKILL');
  // Not t.exited: that waits for tenure's stderr to close, and the child holds it too.
  await waitUntil('tenure to die', () => !processAlive(t.pid), 10_000);
  return { child, grandchild, watchdogs, killedAt: Date.now() };
}

/** The child's whole group is gone within `graceMs` plus a margin, and stays gone. */
async function expectGroupGone(box: Sandbox, k: Killed, graceMs: number): Promise<void> {
  // Margin for a loaded machine: the watchdog notices the pipe closing at once, then waits graceMs at most.
  const marginMs = 5000;
  await waitUntil(`group ${k.child} to be gone`, () => !groupAlive(k.child), graceMs + marginMs);
  expect(Date.now() - k.killedAt).toBeLessThan(graceMs + marginMs);
  expect(processAlive(k.grandchild)).toBe(false);
  // No heartbeat after the group is gone.
  const last = statSync(join(box.dir, 'heartbeat')).mtimeMs;
  await sleep(400);
  expect(statSync(join(box.dir, 'heartbeat')).mtimeMs).toBe(last);
  // The watchdog does not linger either.
  for (const w of k.watchdogs) await waitUntil(`watchdog ${w} to exit`, () => !processAlive(w), 5000);
}

describe('a child does not outlive a killed supervisor (kill -9)', () => {
  it('tenure run: SIGTERM reaches the whole group at once', { timeout: 90_000 }, async () => {
    const box = sandbox();
    const t = start(box, ['run', '--group', 'g', '--ttl', '3s', '--grace', '2s', '--json', '--', ...heartbeatChild(box, false)]);
    const k = await killSupervisor(box, t);
    // A SIGTERM-able child goes well before the grace period is over.
    await expectGroupGone(box, k, 0);
    expect(k.watchdogs.length).toBe(1);
  });

  it('tenure run: a child that ignores SIGTERM is killed after the grace period', { timeout: 90_000 }, async () => {
    const box = sandbox();
    const t = start(box, ['run', '--group', 'g', '--ttl', '3s', '--grace', '1s', '--json', '--', ...heartbeatChild(box, true)]);
    const k = await killSupervisor(box, t);
    await sleep(300);
    expect(groupAlive(k.child)).toBe(true); // still inside its grace period
    await expectGroupGone(box, k, 1000);
  });

  it('tenure run: a second node starts its copy only after the first copy is gone', { timeout: 90_000 }, async () => {
    const box = sandbox();
    const a = start(box, ['run', '--group', 'g', '--ttl', '2s', '--grace', '500ms', '--json', '--', ...heartbeatChild(box, false)]);
    const k = await killSupervisor(box, a);
    const b = start(box, ['run', '--group', 'g', '--ttl', '2s', '--json', '--', 'sleep', '600']);
    await waitUntil('b to be elected', () => b.events('elected')[0], 30_000);
    expect(groupAlive(k.child)).toBe(false);
    b.signal('SIGTERM');
    expect((await b.exited).code).toBe(143);
  });

  it('tenure lock: the same holds for the child of a lock holder', { timeout: 90_000 }, async () => {
    const box = sandbox();
    const t = start(box, ['lock', 'job', '--ttl', '3s', '--grace', '1s', '--json', '--', ...heartbeatChild(box, true)]);
    const k = await killSupervisor(box, t);
    await expectGroupGone(box, k, 1000);
  });
});

describe.runIf(process.platform === 'linux')('the watchdog leaves with the child', () => {
  it('is gone after a child that exits by itself, after a stop and after tenure exits', { timeout: 90_000 }, async () => {
    const box = sandbox();
    // --once: the child exits 0 by itself, tenure releases and exits 0. The child waits for a file
    // the test writes once it has seen the watchdog (a fixed-length child could end before a
    // watchdog started on a loaded machine was ever seen: a CI flake).
    const go = join(box.dir, 'go');
    const once = start(box, ['run', '--group', 'g', '--once', '--json', '--', 'sh', '-c', `while [ ! -e ${go} ]; do sleep 0.05; done`]);
    await waitUntil('the child to start', () => once.childPids()[0]);
    const child = once.childPids()[0]!;
    await waitUntil('a watchdog for the child', () => watchdogsOf(child).length === 1);
    writeFileSync(go, '');
    expect((await once.exited).code).toBe(0);
    await waitUntil('the watchdog to leave', () => watchdogsOf(child).length === 0, 5000);
    // SIGTERM: tenure stops the child itself; the watchdog leaves too.
    const run = start(box, ['run', '--group', 'g', '--json', '--', 'sleep', '600']);
    const second = await waitUntil('the child to start', () => run.childPids()[0]);
    await waitUntil('a watchdog for the child', () => watchdogsOf(second).length === 1);
    run.signal('SIGTERM');
    expect((await run.exited).code).toBe(143);
    await waitUntil('the watchdog to leave', () => watchdogsOf(second).length === 0, 5000);
  });

  it('stops what the child left in its group when tenure exits normally', { timeout: 90_000 }, async () => {
    const box = sandbox();
    const pidFile = join(box.dir, 'left.pid');
    const t = start(box, ['run', '--group', 'g', '--once', '--json', '--', 'sh', '-c', `sleep 600 & echo $! > ${pidFile}`]);
    await waitUntil('tenure to exit', () => !processAlive(t.pid));
    expect(t.events('child-exited')).toMatchObject([{ code: 0 }]);
    const left = Number(readFileSync(pidFile, 'utf8'));
    await waitUntil('the leftover sleep to be stopped', () => !processAlive(left), 5000);
  });
});
