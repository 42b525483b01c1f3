/**
 * `tenure run --once`, `append`, `log` and `status` through the real binary.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { BIN, cleanUp, lines, sandbox, start, tenure, waitUntil } from './helpers.js';

afterAll(cleanUp);

describe('tenure run --once', () => {
  it('runs the child once as leader and exits with its code', async () => {
    const box = sandbox();
    const r = await tenure(box, ['run', '--group', 'g', '--once', '--', process.execPath, '-e', 'process.exit(7)']);
    expect(r.code).toBe(7);
    const ok = await tenure(box, ['run', '--group', 'g', '--once', '--', process.execPath, '-e', 'process.exit(0)']);
    expect(ok.code).toBe(0);
  });

  it('gives the child its group, term, token, id and store, and a new term each time', async () => {
    const box = sandbox();
    const dump = (file: string): string[] => [
      'run',
      '--group',
      'reports',
      '--id',
      'web-1',
      '--once',
      '--',
      process.execPath,
      '-e',
      `require('fs').writeFileSync(${JSON.stringify(join(box.dir, file))}, JSON.stringify(process.env))`,
    ];
    expect((await tenure(box, dump('first.json'))).code).toBe(0);
    expect((await tenure(box, dump('second.json'))).code).toBe(0);
    const first = JSON.parse(readFileSync(join(box.dir, 'first.json'), 'utf8')) as Record<string, string>;
    const second = JSON.parse(readFileSync(join(box.dir, 'second.json'), 'utf8')) as Record<string, string>;
    expect(first.TENURE_GROUP).toBe('reports');
    expect(first.TENURE_TOKEN).toBe(`reports#${first.TENURE_TERM}`);
    expect(first.TENURE_ID).toMatch(/^web-1~/);
    expect(first.TENURE_STORE).toBe(`sqlite:${box.db}`);
    expect(Number(second.TENURE_TERM)).toBeGreaterThan(Number(first.TENURE_TERM));
    expect(second.TENURE_ID).not.toBe(first.TENURE_ID);
  });

  it('releases the lease when done', async () => {
    const box = sandbox();
    expect((await tenure(box, ['run', '--group', 'g', '--once', '--', 'true'])).code).toBe(0);
    const status = await tenure(box, ['status', '--group', 'g', '--json']);
    expect(status.code).toBe(0);
    expect(JSON.parse(status.stdout)).toEqual([]);
  });

  it('exits 127 when the command does not exist, 126 when it is not executable, before it campaigns', async () => {
    const box = sandbox();
    const r = await tenure(box, ['run', '--group', 'g', '--once', '--', 'no-such-command-tenure-test']);
    expect(r.code).toBe(127);
    expect(lines(r.stderr)).toEqual(['tenure run: command not found: no-such-command-tenure-test']);
    writeFileSync(join(box.dir, 'not-executable.sh'), '#!/bin/sh\necho hi\n');
    const denied = await tenure(box, ['run', '--group', 'g', '--', './not-executable.sh']);
    expect(denied.code).toBe(126);
    expect(lines(denied.stderr)).toEqual(['tenure run: permission denied: ./not-executable.sh']);
    const lock = await tenure(box, ['lock', 'L', '--', join(box.dir, 'no-such-dir', 'cmd')]);
    expect(lock.code).toBe(127);
    expect(lines(lock.stderr)).toEqual([`tenure lock: command not found: ${join(box.dir, 'no-such-dir', 'cmd')}`]);
    // No term was taken: a node that cannot start CMD never holds the group from one that can.
    const next = await tenure(box, ['run', '--group', 'g', '--once', '--json', '--', 'true']);
    expect(next.code).toBe(0);
    expect(lines(next.stderr).map((l) => JSON.parse(l) as Record<string, unknown>).find((e) => e.event === 'elected')?.term).toBe(1);
  });

  it('exits 128 + n when the child dies of signal n', async () => {
    const box = sandbox();
    const r = await tenure(box, ['run', '--group', 'g', '--once', '--', 'sh', '-c', 'kill -TERM $$']);
    expect(r.code).toBe(143);
  });

  it('reports transitions as JSON lines with --json', async () => {
    const box = sandbox();
    const r = await tenure(box, ['run', '--group', 'g', '--once', '--json', '--', 'true']);
    expect(r.code).toBe(0);
    const events = lines(r.stderr).map((l) => JSON.parse(l) as { event: string; group: string });
    expect(events.map((e) => e.event)).toEqual(expect.arrayContaining(['campaigning', 'elected', 'child-started', 'child-exited', 'stopped']));
    for (const e of events) expect(e.group).toBe('g');
  });

  it('a child exiting with 3 (stale token) makes the run step down at once, not restart the child in that term', async () => {
    const box = sandbox();
    // The first term's child exits 3 as `tenure append` does with a refused token; later ones wait.
    const script = "if (process.env.TENURE_TERM === '1') process.exit(3); setTimeout(() => {}, 60000)";
    const run = start(box, ['run', '--group', 'g', '--ttl', '2s', '--json', '--', process.execPath, '-e', script]);
    await waitUntil('a second term', () => run.events('elected').some((e) => Number(e.term) >= 2), 20_000);
    const fenced = run.events('fenced');
    expect(fenced).toHaveLength(1);
    expect(Number(fenced[0]!.term)).toBe(1);
    const deposed = run.events('deposed').find((e) => Number(e.term) === 1);
    expect(deposed?.reason).toBe('fenced');
    // One child in term 1 (not restarted after its exit 3), then term 2's.
    const started = run.events('child-started').map((e) => Number(e.term));
    expect(started.filter((t) => t === 1)).toHaveLength(1);
    run.signal('SIGTERM');
    expect((await run.exited).code).toBe(143);
  });

  it('waits while another process leads, then runs', async () => {
    const box = sandbox();
    const holder = start(box, ['run', '--group', 'g', '--ttl', '2s', '--json', '--', 'sleep', '60']);
    await waitUntil('the first run to start its child', () => holder.childPids().length > 0);
    const waiter = start(box, ['run', '--group', 'g', '--ttl', '2s', '--once', '--json', '--', 'true']);
    await waitUntil('the waiter to see the holder lead', () => waiter.events('leader').some((e) => e.owner !== null));
    expect(waiter.events('child-started')).toEqual([]);
    holder.signal('SIGTERM');
    expect((await holder.exited).code).toBe(143);
    expect((await waiter.exited).code).toBe(0);
    expect(Number(waiter.events('elected')[0]!.term)).toBeGreaterThan(Number(holder.events('elected')[0]!.term));
  });
});

describe('a closed output pipe', () => {
  it('tenure run whose stderr reader went away stops its child and releases the lease, exit 141 (as SIGPIPE), not a crash', async () => {
    const box = sandbox();
    // The child exits by itself after a while: tenure then reports it (and its restart), on a
    // stderr nobody reads any more.
    const script = 'setTimeout(() => process.exit(0), 1500)';
    const run = start(box, ['run', '--group', 'g', '--ttl', '10s', '--json', '--', process.execPath, '-e', script]);
    await waitUntil('the child to start', () => run.childPids().length > 0, 20_000);
    const term = Number(run.events('elected')[0]!.term);
    run.proc.stderr!.destroy();
    expect((await run.exited).code).toBe(141);
    // Released, not left to lapse at its TTL (10 s): the lease is free at once.
    const status = await tenure(box, ['status', '--json']);
    expect(status.code).toBe(0);
    expect(JSON.parse(status.stdout)).toEqual([]);
    // The next holder gets the next term right away.
    const next = await tenure(box, ['run', '--group', 'g', '--ttl', '2s', '--once', '--json', '--', 'true'], { timeoutMs: 5_000 });
    expect(next.code).toBe(0);
    expect(Number(lines(next.stderr).map((l) => JSON.parse(l) as Record<string, unknown>).find((e) => e.event === 'elected')!.term)).toBe(term + 1);
  });

  it('tenure log --follow whose reader went away ends with 0', async () => {
    const box = sandbox();
    const run = start(box, ['run', '--group', 'g', '--ttl', '2s', '--', 'sleep', '60']);
    await waitUntil('the run to lead', async () => (await tenure(box, ['status', '--json'])).stdout.includes('"g"'));
    const appended = await tenure(box, ['append', '--stream', 's', '--token', 'g#1', 'first']);
    expect(appended.code).toBe(0);
    const follow = start(box, ['log', '--stream', 's', '--follow']);
    await waitUntil('the first entry printed', () => follow.stdout.includes('first'));
    follow.proc.stdout!.destroy();
    // The next entry's write finds the pipe closed.
    expect((await tenure(box, ['append', '--stream', 's', '--token', 'g#1', 'second'])).code).toBe(0);
    expect((await follow.exited).code).toBe(0);
    run.signal('SIGTERM');
    expect((await run.exited).code).toBe(143);
  });
});

describe('tenure append, log and status', () => {
  it('appends with the token, refuses a stale one with exit code 3, and logs the entries', async () => {
    const box = sandbox();
    const appendAsLeader = (text: string): string[] => [
      'run',
      '--group',
      'billing',
      '--once',
      '--',
      'sh',
      '-c',
      `"${process.execPath}" "${BIN}" append --stream invoices --token "$TENURE_TOKEN" "${text} $TENURE_TERM"`,
    ];
    const first = await tenure(box, appendAsLeader('first'));
    expect(first.code).toBe(0);
    expect(first.stdout.trim()).toBe('1');
    expect((await tenure(box, appendAsLeader('second'))).code).toBe(0);

    const log = await tenure(box, ['log', '--stream', 'invoices', '--json']);
    expect(log.code).toBe(0);
    const entries = lines(log.stdout).map((l) => JSON.parse(l) as { seq: number; lease: string; term: number; payload: string });
    expect(entries.map((e) => e.seq)).toEqual([1, 2]);
    const [t1, t2] = entries.map((e) => e.term) as [number, number];
    expect(t2).toBeGreaterThan(t1);
    expect(entries[0]).toMatchObject({ lease: 'billing', payload: `first ${t1}` });

    const stale = await tenure(box, ['append', '--stream', 'invoices', '--token', `billing#${t1}`, 'late']);
    expect(stale.code).toBe(3);
    expect(lines(stale.stderr)).toEqual([expect.stringContaining(`stale fencing token: term ${t1} < ${t2} for group billing`)]);

    const current = await tenure(box, ['append', '--stream', 'invoices', '--token', `billing#${t2}`, '-'], { input: 'from stdin' });
    expect(current.code).toBe(0);
    expect(current.stdout.trim()).toBe('3');

    // A compare-and-set on the head: refused (exit 1, the current head named) unless it is N.
    const moved = await tenure(box, ['append', '--stream', 'invoices', '--token', `billing#${t2}`, '--expect-seq', '2', 'behind']);
    expect(moved.code).toBe(1);
    expect(lines(moved.stderr)).toEqual([expect.stringContaining('version conflict on stream "invoices": expected version 2, the current version is 3')]);
    expect((await tenure(box, ['append', '--stream', 'invoices', '--token', `billing#${t2}`, '--expect-seq', 'two', 'x'])).code).toBe(2);
    const atHead = await tenure(box, ['append', '--stream', 'invoices', '--token', `billing#${t2}`, '--expect-seq', '3', 'at the head']);
    expect(atHead.code).toBe(0);
    expect(atHead.stdout.trim()).toBe('4');

    const text = await tenure(box, ['log', '--stream', 'invoices']);
    expect(lines(text.stdout)).toEqual([
      expect.stringMatching(new RegExp(`^\\s+1  billing#${t1}  first ${t1}$`)),
      expect.stringMatching(new RegExp(`^\\s+2  billing#${t2}  second ${t2}$`)),
      expect.stringMatching(new RegExp(`^\\s+3  billing#${t2}  from stdin$`)),
      expect.stringMatching(new RegExp(`^\\s+4  billing#${t2}  at the head$`)),
    ]);

    // A window of the stream: after entry N, at most M of them.
    const seqs = async (args: string[]) => {
      const r = await tenure(box, ['log', '--stream', 'invoices', '--json', ...args]);
      expect(r.code, r.stderr).toBe(0);
      return lines(r.stdout).map((l) => (JSON.parse(l) as { seq: number }).seq);
    };
    expect(await seqs(['--after', '1', '--limit', '2'])).toEqual([2, 3]);
    expect(await seqs(['--after', '3'])).toEqual([4]);
    expect(await seqs(['--limit', '1'])).toEqual([1]);
    expect(await seqs(['--after', '4'])).toEqual([]);
    expect(await seqs(['--after', '2', '--limit', '2', '--follow'])).toEqual([3, 4]); // --limit reached ends a --follow too
    for (const bad of [['--limit', '0'], ['--after', 'x'], ['--limit', '1.5']]) {
      const r = await tenure(box, ['log', '--stream', 'invoices', ...bad]);
      expect(r.code).toBe(2);
      expect(lines(r.stderr)).toHaveLength(1);
    }
  });

  it('append refuses standard input that is not UTF-8 text, or longer than an entry may be: exit 2, nothing appended', async () => {
    const box = sandbox();
    const holder = start(box, ['run', '--group', 'g', '--json', '--', 'sleep', '60']);
    await waitUntil('the run to lead', () => holder.events('elected')[0]);
    const token = `g#${String(holder.events('elected')[0]!.term)}`;
    const append = (input: string | Buffer) => tenure(box, ['append', '--stream', 's', '--token', token, '-'], { input });
    const latin1 = await append(Buffer.from([0x63, 0x61, 0x66, 0xe9])); // "café" in Latin-1
    expect(latin1.code).toBe(2);
    expect(lines(latin1.stderr)).toEqual([expect.stringContaining('standard input is not UTF-8 text')]);
    const big = await append(Buffer.alloc(1024 * 1024 + 1, 0x61));
    expect(big.code).toBe(2);
    expect(lines(big.stderr)).toEqual([expect.stringContaining('must be at most 1048576 bytes')]);
    // What is well formed goes in as it came: a NUL, a tab, a byte-order mark, exactly the limit.
    expect((await append(Buffer.from('\ufeffa\tb\u0000c'))).code).toBe(0);
    expect((await append(Buffer.alloc(1024 * 1024, 0x62))).code).toBe(0);
    const log = await tenure(box, ['log', '--stream', 's', '--json']);
    const payloads = lines(log.stdout).map((l) => (JSON.parse(l) as { payload: string }).payload);
    expect(payloads).toEqual(['\ufeffa\tb\u0000c', 'b'.repeat(1024 * 1024)]);
    holder.signal('SIGTERM');
    expect((await holder.exited).code).toBe(143);
  });

  it('log --follow prints new entries until interrupted', async () => {
    const box = sandbox();
    const holder = start(box, ['run', '--group', 'feed', '--json', '--', 'sleep', '60']);
    await waitUntil('leadership', () => holder.events('elected')[0]);
    const token = String(holder.events('elected')[0]!.token);
    const follower = start(box, ['log', '--stream', 'feed', '--follow', '--json']);
    expect((await tenure(box, ['append', '--stream', 'feed', '--token', token, 'one'])).code).toBe(0);
    await waitUntil('the first entry to be followed', () => follower.stdout.includes('"one"'));
    expect((await tenure(box, ['append', '--stream', 'feed', '--token', token, 'two'])).code).toBe(0);
    await waitUntil('the second entry to be followed', () => follower.stdout.includes('"two"'));
    follower.signal('SIGINT');
    expect((await follower.exited).code).toBe(130);
    holder.signal('SIGTERM');
    await holder.exited;
  });

  it('status shows the leader with owner, term, expiry and meta', async () => {
    const box = sandbox();
    const holder = start(box, ['run', '--group', 'web', '--id', 'node-a', '--ttl', '30s', '--json', '--', 'sleep', '60']);
    await waitUntil('leadership', () => holder.events('elected')[0]);
    const json = await tenure(box, ['status', '--json']);
    expect(json.code).toBe(0);
    const leases = JSON.parse(json.stdout) as Array<{ name: string; owner: string; term: number; expiresInMs: number; ttlMs: number; meta: Record<string, unknown> }>;
    expect(leases).toHaveLength(1);
    expect(leases[0]).toMatchObject({ name: 'web', term: 1, ttlMs: 30_000, meta: { command: 'sleep 60', pid: holder.pid } });
    expect(leases[0]!.owner).toMatch(/^node-a~/);
    expect(leases[0]!.expiresInMs).toBeGreaterThan(0);
    const text = await tenure(box, ['status']);
    expect(lines(text.stdout)[0]).toMatch(/^NAME\s+OWNER\s+TERM\s+EXPIRES IN\s+META$/);
    expect(lines(text.stdout)[1]).toMatch(/^web\s+node-a~\S+\s+1\s+\S+\s+\{/);
    holder.signal('SIGTERM');
    expect((await holder.exited).code).toBe(143);
    const after = await tenure(box, ['status', '--group', 'web']);
    expect(after.stdout).toContain('no leader');
  });
});
