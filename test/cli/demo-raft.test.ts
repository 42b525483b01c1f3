/**
 * `tenure demo --store raft`: the story on a Raft store the demo starts itself (three `tenure raft
 * serve` processes), and nothing left behind: no member process, no data directory, whether the
 * demo ends by itself or on ^C mid-story; `--via sql` is refused before anything starts.
 */
import { spawn } from 'node:child_process';
import { mkdirSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { expectTheStory } from './demo-story.js';
import type { DemoSummaryJson } from './demo-story.js';
import { BIN, cleanUp, lines, processAlive, sandbox, tenure, waitUntil } from './helpers.js';
import type { Sandbox } from './helpers.js';

interface Summary extends DemoSummaryJson {
  store: string;
  group: string;
}

/**
 * Members of the ^C run, killed after the tests should the demo have left one running; dropped
 * once seen gone, so no pid reused by another process is ever signalled.
 */
const seen: number[] = [];
afterAll(async () => {
  for (const pid of seen) {
    try {
      process.kill(pid, 'SIGKILL');
    } catch {
      // gone, as it should be
    }
  }
  await cleanUp();
});

/** A sandbox whose TMPDIR is a directory of its own, to see what the demo leaves in it. */
function boxWithTmp(): { box: Sandbox; tmp: string } {
  const box = sandbox();
  const tmp = join(box.dir, 'tmp');
  mkdirSync(tmp);
  // TENURE_STORE must not matter: the demo runs on its own Raft store.
  return { box: { ...box, env: { ...box.env, TMPDIR: tmp, TENURE_RAFT_SECRET: '' } }, tmp };
}

describe('tenure demo --store raft', () => {
  it('runs the story on three tenure raft serve processes of its own and removes them', { timeout: 120_000 }, async () => {
    const { box, tmp } = boxWithTmp();
    const r = await tenure(box, ['demo', '--store', 'raft', '--duration', '4', '--json'], { timeoutMs: 110_000 });
    expect(r.code, r.stderr).toBe(0);
    const summary = JSON.parse(r.stdout) as Summary;
    expectTheStory(summary);
    expect(summary.store).toBe('raft (3 local members, temporary)');
    expect(summary.group).toBe('demo');
    // Three members, three nodes and the restarted one; every one of them gone (expectTheStory).
    expect(summary.pids.length).toBeGreaterThanOrEqual(7);
    expect(readdirSync(tmp)).toEqual([]);
  });

  it('leaves no member, node or directory behind when it gets SIGINT while a node is frozen', { timeout: 120_000 }, async () => {
    const { box, tmp } = boxWithTmp();
    const demo = spawn(process.execPath, [BIN, 'demo', '--store', 'raft', '--duration', '30'], { cwd: box.dir, env: box.env, stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    demo.stdout.on('data', (d: Buffer) => (out += d.toString()));
    const exited = new Promise<number | null>((resolve) => demo.on('close', (code) => resolve(code)));
    // Every node started and one frozen (on a loaded machine the freeze can come before the last node is up).
    await waitUntil('a node to be frozen, all three started', () => / frozen \(SIGSTOP\)/.test(out) && [...out.matchAll(/started \(pid (\d+)\)/g)].length >= 3, 60_000);
    const members = /raft store: 3 members \(tenure raft serve\) started \(pids (\d+), (\d+), (\d+)\)/.exec(out);
    expect(members, out).not.toBeNull();
    const memberPids = members!.slice(1).map(Number);
    seen.push(...memberPids);
    const nodePids = [...out.matchAll(/started \(pid (\d+)\)/g)].map((m) => Number(m[1]));
    expect(nodePids.length).toBe(3);
    for (const pid of memberPids) expect(processAlive(pid)).toBe(true);
    demo.kill('SIGINT');
    expect(await exited).toBe(130);
    expect(out).toContain('Summary (interrupted)');
    // The demo waits for its members before it exits: they are gone already, not on their way out.
    for (const pid of memberPids) expect(processAlive(pid)).toBe(false);
    seen.length = 0;
    await waitUntil('every node to be gone', () => nodePids.every((pid) => !processAlive(pid)), 30_000);
    expect(readdirSync(tmp)).toEqual([]);
  });

  it('refuses --via sql on the Raft store: one line, exit 2, nothing started', async () => {
    const { box, tmp } = boxWithTmp();
    const r = await tenure(box, ['demo', '--store', 'raft', '--via', 'sql', '--json']);
    expect(r.code, r.stderr).toBe(2);
    expect(r.stdout).toBe('');
    expect(lines(r.stderr)).toHaveLength(1);
    expect(r.stderr).toContain('--store raft is a Raft store: use --via stream');
    expect(readdirSync(tmp)).toEqual([]);
  });
});
