/**
 * The examples under examples/ run end to end (their --short mode), each as the one command its
 * README gives, so they do not rot: the zombie's late write is refused (409 / dropped by the
 * consumer) and the resource's rows never go back a term; a killed worker's item is done by
 * another and every item counted once. They import `tenure` by its package
 * name, which resolves to dist/: run `npm run build` first.
 */
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { createPostgresDatabase } from '../stores/sql-servers.js';
import type { TestDatabase } from '../stores/sql-servers.js';

const ROOT = fileURLToPath(new URL('../../', import.meta.url));
const databases: TestDatabase[] = [];
afterAll(async () => {
  for (const db of databases) await db.drop();
});

function runExample(script: string, env: NodeJS.ProcessEnv): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const proc = spawn(process.execPath, [script, '--short'], { cwd: ROOT, env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  proc.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
  proc.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
  return new Promise((resolve) => proc.on('close', (code) => resolve({ code, stdout, stderr })));
}

describe('examples', () => {
  it('express-postgres: the frozen leader\'s POST after the takeover gets 409 and inserts nothing', { timeout: 120_000 }, async () => {
    const db = await createPostgresDatabase();
    databases.push(db);
    const r = await runExample('examples/express-postgres/run.mjs', { DATABASE_URL: db.url });
    expect(r.code, `${r.stdout}\n${r.stderr}`).toBe(0);
    expect(r.stdout).toMatch(/"event":"refused","term":\d+,"message":"stale fencing token: term \d+ < \d+ for group payouts"/);
    expect(r.stdout).toContain('terms never went back');
    expect(r.stdout.trim().endsWith('ok')).toBe(true);
  });

  it('state-cell: followers see every version in order, and the deposed leader\'s late write is refused', { timeout: 60_000 }, async () => {
    const r = await runExample('examples/state-cell/run.mjs', {});
    expect(r.code, `${r.stdout}\n${r.stderr}`).toBe(0);
    expect(r.stdout).toMatch(/"event":"refused","term":1,"message":"stale fencing token: term 1 < 2 for group shards"/);
    expect(r.stdout).toContain('followers saw versions 1..6 in order; the late write was refused and wrote nothing');
    expect(r.stdout.trim().endsWith('ok')).toBe(true);
  });

  it('nats-consumer: the frozen leader\'s late publish is dropped by the consumer and never applied', { timeout: 120_000 }, async () => {
    const r = await runExample('examples/nats-consumer/run.mjs', { NATS_URL: process.env.TENURE_TEST_NATS_URL ?? 'nats://127.0.0.1:4222' });
    expect(r.code, `${r.stdout}\n${r.stderr}`).toBe(0);
    expect(r.stdout).toMatch(/"event":"dropped","reason":"stale fencing token: term \d+ < \d+ for group orders/);
    expect(r.stdout).toContain('nothing the zombie published after the takeover was applied');
    expect(r.stdout.trim().endsWith('ok')).toBe(true);
  });

  it('work-queue: a worker killed mid-item has its item done by another, and every item is counted once', { timeout: 120_000 }, async () => {
    const r = await runExample('examples/work-queue/run.mjs', {});
    expect(r.code, `${r.stdout}\n${r.stderr}`).toBe(0);
    expect(r.stdout).toMatch(/"event":"reassigned","item":"below-\d+","attempt":1,"worker":"w2","reason":"worker-lost"/);
    expect(r.stdout).toContain('items     12 of 12 done, each once; counts wrong: 0');
    expect(r.stdout.trim().endsWith('ok')).toBe(true);
  });
});
