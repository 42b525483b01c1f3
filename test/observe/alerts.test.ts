/**
 * The shipped alert rules (observe/alerts.yml) load in Prometheus and fire as documented: the real
 * promtool checks them and runs their unit tests (test/observe/alerts.test.yml). No skipping: CI
 * installs promtool (Debian's prometheus package, see .ci/run); without it this test fails.
 */
import { execFile } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';

const run = promisify(execFile);
const root = join(import.meta.dirname, '..', '..');
const rules = join(root, 'observe', 'alerts.yml');
const tests = join(root, 'test', 'observe', 'alerts.test.yml');

async function promtool(...args: string[]): Promise<{ code: number; out: string }> {
  try {
    const { stdout, stderr } = await run('promtool', args, { cwd: root, timeout: 60_000 });
    return { code: 0, out: stdout + stderr };
  } catch (err) {
    const e = err as { code?: number | string; stdout?: string; stderr?: string };
    if (e.code === 'ENOENT') throw new Error('promtool is not installed (apt-get install -y prometheus; .ci/run does it)');
    return { code: typeof e.code === 'number' ? e.code : -1, out: `${e.stdout ?? ''}${e.stderr ?? ''}` };
  }
}

describe('observe/alerts.yml', () => {
  it('passes promtool check rules, with every alert the docs name', async () => {
    const { code, out } = await promtool('check', 'rules', rules);
    expect(out).toMatch(/SUCCESS: 8 rules found/);
    expect(code).toBe(0);
    const text = readFileSync(rules, 'utf8');
    for (const name of ['TenureLeadershipFlapping', 'TenureTermsRisingFast', 'TenureRenewFailuresWidespread', 'TenureRenewFailuresWithSlowStore', 'TenureStaleTokenRejections', 'TenureFollowerLagging', 'TenureFollowerLaggingEntries', 'TenureLeaderStalled']) {
      expect(text).toContain(`alert: ${name}`);
    }
  });

  it('passes its promtool unit tests (each rule fires on its series and not on the quiet ones)', async () => {
    const { code, out } = await promtool('test', 'rules', tests);
    expect(out).toMatch(/SUCCESS/);
    expect(out).not.toMatch(/FAILED/);
    expect(code).toBe(0);
  });

  it('ships in the package', () => {
    const pkg = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as { files: string[] };
    expect(pkg.files).toContain('observe/alerts.yml');
  });
});
