/**
 * `tenure lock`: two holders never overlap; --wait gives up with exit code 4; a holder that loses
 * its lock (frozen past the TTL) stops its child.
 */
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { cleanUp, freeze, groupAlive, lines, sandbox, start, tenure, waitUntil } from './helpers.js';

afterAll(cleanUp);

/** A child that fails (exit 99) if another holder's child is inside the critical section. */
function criticalSection(dir: string, who: string, holdMs: number): string[] {
  const marker = join(dir, 'inside');
  const record = join(dir, 'record.txt');
  const script = `
    const fs = require('fs');
    if (fs.existsSync(${JSON.stringify(marker)})) process.exit(99);
    fs.writeFileSync(${JSON.stringify(marker)}, ${JSON.stringify(who)});
    fs.appendFileSync(${JSON.stringify(record)}, ${JSON.stringify(who)} + ' ' + process.env.TENURE_TOKEN + '\\n');
    setTimeout(() => { fs.unlinkSync(${JSON.stringify(marker)}); process.exit(0); }, ${holdMs});
  `;
  return [process.execPath, '-e', script];
}

describe('tenure lock', () => {
  it('lets one holder at a time run, in turn', async () => {
    const box = sandbox();
    const a = start(box, ['lock', 'migrations', '--ttl', '5s', '--json', '--', ...criticalSection(box.dir, 'a', 1500)]);
    const b = start(box, ['lock', 'migrations', '--ttl', '5s', '--json', '--', ...criticalSection(box.dir, 'b', 1500)]);
    const [ea, eb] = await Promise.all([a.exited, b.exited]);
    expect(ea.code, a.stderr).toBe(0);
    expect(eb.code, b.stderr).toBe(0);
    const record = lines(readFileSync(join(box.dir, 'record.txt'), 'utf8'));
    expect(record).toHaveLength(2);
    const terms = record.map((l) => Number(l.split('#')[1]));
    expect(terms[1]).toBeGreaterThan(terms[0]!);
  });

  it('exits 4 when the lock is not acquired within --wait', async () => {
    const box = sandbox();
    const holder = start(box, ['lock', 'nightly', '--json', '--', 'sleep', '60']);
    await waitUntil('the holder to acquire', () => holder.events('acquired')[0]);
    const startedAt = Date.now();
    const r = await tenure(box, ['lock', 'nightly', '--wait', '500ms', '--', 'touch', join(box.dir, 'ran')]);
    expect(r.code).toBe(4);
    expect(lines(r.stderr).at(-1)).toMatch(/lock nightly not acquired within 500 ms/);
    expect(Date.now() - startedAt).toBeGreaterThanOrEqual(500);
    expect(existsSync(join(box.dir, 'ran'))).toBe(false);
    holder.signal('SIGINT');
    expect((await holder.exited).code).toBe(130);
    expect(groupAlive(holder.childPids()[0]!)).toBe(false);
  });

  it('stops the child of a holder that lost the lock while frozen', async () => {
    const box = sandbox();
    const a = start(box, ['lock', 'job', '--ttl', '2s', '--grace', '1s', '--json', '--', 'sleep', '60']);
    await waitUntil('a to acquire and start its child', () => a.childPids()[0]);
    const child = a.childPids()[0]!;
    const termA = Number(a.events('acquired')[0]!.term);
    await freeze(box.db, [a.pid]);
    const b = await tenure(box, ['lock', 'job', '--wait', '30s', '--', 'sh', '-c', `echo "$TENURE_TERM" > ${join(box.dir, 'b-term')}`], { timeoutMs: 60_000 });
    expect(b.code, b.stderr).toBe(0);
    expect(Number(readFileSync(join(box.dir, 'b-term'), 'utf8'))).toBeGreaterThan(termA);
    a.signal('SIGCONT');
    const exit = await a.exited;
    expect(exit.code).toBe(143); // sleep was stopped with SIGTERM
    expect(a.events('lost')).toHaveLength(1);
    expect(groupAlive(child)).toBe(false);
  });
});
