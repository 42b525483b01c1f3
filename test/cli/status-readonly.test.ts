/**
 * `tenure status` only looks (issue 20, section 5): a SQLite path that is not a tenure database
 * gets one line and exit code 1, and nothing is created — no directory, no database file, no
 * `-journal` beside a device. A path under /proc fails at once instead of spinning in a
 * recursive mkdir. `tenure run` still creates ./.tenure and its database for a writable path.
 */
import { existsSync, lstatSync, readdirSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { cleanUp, lines, sandbox, tenure } from './helpers.js';
import type { Result, Sandbox } from './helpers.js';

afterAll(cleanUp);

function oneLine(r: Result): string {
  const out = lines(r.stderr);
  expect(out, r.stderr).toHaveLength(1);
  expect(r.stderr).not.toMatch(/\n\s+at /);
  return out[0]!;
}

/** Run with TENURE_STORE unset, so the default store (./.tenure/tenure.db in the sandbox) applies unless --store says otherwise. */
function run(box: Sandbox, args: string[], timeoutMs?: number): Promise<Result> {
  const env = { ...box.env };
  delete env.TENURE_STORE;
  return tenure(box, args, { env, ...(timeoutMs !== undefined ? { timeoutMs } : {}) });
}

describe('tenure status is read-only', () => {
  it('a mistyped path: one line, exit 1, no directory or database created', async () => {
    const box = sandbox();
    const r = await run(box, ['status', '--store', 'sqlite:./typo/dir/tenure.db']);
    expect(oneLine(r)).toMatch(/no such store file .*typo\/dir\/tenure\.db/);
    expect(r.code).toBe(1);
    expect(readdirSync(box.dir)).toEqual([]);
  });

  it('the default store before anything ran: one line, exit 1, no ./.tenure; `tenure run` creates it as before', async () => {
    const box = sandbox();
    const before = await run(box, ['status']);
    expect(oneLine(before)).toMatch(/no such store file .*\.tenure\/tenure\.db/);
    expect(before.code).toBe(1);
    expect(existsSync(join(box.dir, '.tenure'))).toBe(false);

    expect((await run(box, ['run', '--group', 'g', '--once', '--', 'true'])).code).toBe(0);
    expect(statSync(join(box.dir, '.tenure', 'tenure.db')).isFile()).toBe(true);
    const after = await run(box, ['status', '--json']);
    expect(after.code).toBe(0);
    expect(JSON.parse(after.stdout)).toEqual([]);
  });

  it('sqlite:/dev/null is refused (exit 1) and leaves no /dev/null-journal', async () => {
    // The defect left a regular file there; clear one left by an earlier run of the old code.
    if (existsSync('/dev/null-journal') && lstatSync('/dev/null-journal').isFile()) rmSync('/dev/null-journal');
    const box = sandbox();
    const r = await run(box, ['status', '--store', 'sqlite:/dev/null']);
    expect(oneLine(r)).toMatch(/\/dev\/null is a character device, not a database file/);
    expect(r.code).toBe(1);
    expect(existsSync('/dev/null-journal')).toBe(false);
    expect(lstatSync('/dev/null').isCharacterDevice()).toBe(true);
  });

  it('a file that is not a tenure database: exit 1, the file left as it was', async () => {
    const box = sandbox();
    const file = join(box.dir, 'empty.db');
    writeFileSync(file, '');
    const r = await run(box, ['status', '--store', `sqlite:${file}`]);
    expect(oneLine(r)).toMatch(/is not a tenure store/);
    expect(r.code).toBe(1);
    expect(statSync(file).size).toBe(0);
    expect(readdirSync(box.dir)).toEqual(['empty.db']);
  });

  for (const args of [['status'], ['run', '--group', 'g', '--once', '--', 'true']]) {
    it(`tenure ${args[0]} --store sqlite:/proc/x/t.db: one line and exit 1 at once, no spinning`, async () => {
      const box = sandbox();
      const started = performance.now();
      const r = await run(box, [args[0]!, '--store', 'sqlite:/proc/x/t.db', ...args.slice(1)], 15_000);
      expect(oneLine(r)).toContain('/proc/x/t.db');
      expect(r.code).toBe(1);
      expect(performance.now() - started).toBeLessThan(10_000);
    });
  }
});
