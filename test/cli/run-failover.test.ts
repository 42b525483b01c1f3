/**
 * The seeds' scenario through the command line: two `tenure run` on one group whose children loop
 * on `tenure append --token "$TENURE_TOKEN"`. The leader's tenure and its child are frozen
 * (SIGSTOP) past the TTL; the other takes over with a higher term; on SIGCONT the old child's next
 * append exits 3 and the old tenure steps down; the log's terms never go back.
 */
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, expect, it } from 'vitest';
import { BIN, cleanUp, freeze, groupAlive, lines, sandbox, start, streamTerms, tenure, waitUntil } from './helpers.js';
import type { Running } from './helpers.js';

afterAll(cleanUp);

const TTL = '3s';

/** The child: append with this term's token every 100 ms; record each exit code; stop on 3 (stale). */
function appendLoop(dir: string, label: string): string[] {
  const rcFile = join(dir, `rc-${label}.txt`);
  const script = [
    'while true; do',
    `  "${process.execPath}" "${BIN}" append --stream jobs --token "$TENURE_TOKEN" "${label} $TENURE_TERM" >/dev/null`,
    '  rc=$?',
    `  echo "$rc $TENURE_TERM" >> "${rcFile}"`,
    '  if [ "$rc" -eq 3 ]; then exit 3; fi',
    '  sleep 0.1',
    'done',
  ].join('\n');
  return ['sh', '-c', script];
}

function rcLines(dir: string, label: string): string[] {
  const file = join(dir, `rc-${label}.txt`);
  return existsSync(file) ? lines(readFileSync(file, 'utf8')) : [];
}

it('a frozen leader and its child are fenced off after a takeover', { timeout: 180_000 }, async () => {
  const box = sandbox();
  const run = (label: string): Running =>
    start(box, ['run', '--group', 'jobs', '--id', label, '--ttl', TTL, '--grace', '1s', '--json', '--', ...appendLoop(box.dir, label)]);
  const nodes = { a: run('a'), b: run('b') };

  // One of them leads and its child appends.
  const [oldLabel, oldLeader] = await waitUntil('a leader', () => Object.entries(nodes).find(([, n]) => n.events('elected').length > 0));
  const [newLabel, newLeader] = Object.entries(nodes).find(([l]) => l !== oldLabel)!;
  const oldTerm = Number(oldLeader.events('elected')[0]!.term);
  const oldChild = await waitUntil('the leader to start its child', () => oldLeader.childPids()[0]);
  await waitUntil('the old child to append', () => rcLines(box.dir, oldLabel).filter((l) => l === `0 ${oldTerm}`).length >= 2);
  expect(newLeader.events('elected')).toEqual([]);

  // Freeze the leader's tenure and its child's whole process group, past the TTL.
  await freeze(box.db, [oldLeader.pid, -oldChild]);

  // The other takes over with a higher term, and its child writes with it.
  const elected = await waitUntil('the takeover', () => {
    if (newLeader.exit) throw new Error(`the other tenure exited (${JSON.stringify(newLeader.exit)}):\n${newLeader.stderr}`);
    return newLeader.events('elected')[0];
  }, 60_000).catch((err: Error) => {
    throw new Error(`${err.message}\nnew leader's stderr:\n${newLeader.stderr}\nold leader's stderr:\n${oldLeader.stderr}`);
  });
  const newTerm = Number(elected.term);
  expect(newTerm).toBeGreaterThan(oldTerm);
  await waitUntil('an entry with the new term', () => streamTerms(box.db, 'jobs').some((e) => e.term === newTerm), 60_000);

  // Resume the old child first: its next append is refused as stale and it exits 3.
  const before = rcLines(box.dir, oldLabel).length;
  process.kill(-oldChild, 'SIGCONT');
  await waitUntil('the old child to exit 3', () => rcLines(box.dir, oldLabel).slice(before).includes(`3 ${oldTerm}`));

  // Resume the old tenure: it learns the child exited 3 and steps down without restarting it.
  oldLeader.signal('SIGCONT');
  await waitUntil('the old leader to step down', () => oldLeader.events('deposed')[0], 60_000);
  await waitUntil('the old leader to report its child', () => oldLeader.events('child-exited')[0]);
  expect(oldLeader.events('child-exited')[0]).toMatchObject({ pid: oldChild, code: 3 });
  expect(oldLeader.events('child-started').filter((e) => e.term === oldTerm)).toHaveLength(1);

  // Both stop on SIGTERM, releasing the lease and leaving no child behind.
  for (const n of Object.values(nodes)) n.signal('SIGTERM');
  for (const n of Object.values(nodes)) expect((await n.exited).code).toBe(143);
  for (const n of Object.values(nodes)) for (const pid of n.childPids()) expect(groupAlive(pid)).toBe(false);
  expect(newLeader.events('stopped')[0]).toMatchObject({ releasedTerm: newTerm, code: 143 });

  // The log: gap-free, terms never go back, both terms present.
  const log = await tenure(box, ['log', '--stream', 'jobs', '--json']);
  expect(log.code).toBe(0);
  const entries = lines(log.stdout).map((l) => JSON.parse(l) as { seq: number; term: number; payload: string });
  expect(entries.map((e) => e.seq)).toEqual(entries.map((_, i) => i + 1));
  for (let i = 1; i < entries.length; i++) expect(entries[i]!.term).toBeGreaterThanOrEqual(entries[i - 1]!.term);
  expect(entries.some((e) => e.term === oldTerm && e.payload === `${oldLabel} ${oldTerm}`)).toBe(true);
  expect(entries.some((e) => e.term === newTerm && e.payload === `${newLabel} ${newTerm}`)).toBe(true);
});
