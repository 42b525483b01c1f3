/**
 * Bad input gets one clear line on stderr and exit code 2 (never a stack trace unless --debug);
 * an unreachable store gets one line naming it and exit code 1; every command has --help with
 * an example; --version prints the package version.
 */
import { readFileSync } from 'node:fs';
import { afterAll, describe, expect, it } from 'vitest';
import { cleanUp, lines, sandbox, tenure } from './helpers.js';

afterAll(cleanUp);

const box = sandbox();

function expectOneLine(stderr: string): string {
  const out = lines(stderr);
  expect(out, stderr).toHaveLength(1);
  expect(stderr).not.toMatch(/\n\s+at /);
  return out[0]!;
}

describe('bad usage or input: one line on stderr, exit code 2', () => {
  const cases: Array<{ name: string; args: string[]; says: RegExp }> = [
    { name: 'an unknown flag', args: ['run', '--group', 'g', '--bogus', '--', 'true'], says: /unknown option '--bogus'/ },
    { name: 'an unknown flag on lock', args: ['lock', 'L', '--frobnicate', '--', 'true'], says: /unknown option '--frobnicate'/ },
    { name: 'an unknown command', args: ['frobnicate'], says: /unknown command 'frobnicate'/ },
    { name: 'run without --', args: ['run', '--group', 'g', 'echo', 'hi'], says: /missing '--'/ },
    { name: 'lock without --', args: ['lock', 'L', 'echo', 'hi'], says: /missing '--'/ },
    { name: 'run with nothing after --', args: ['run', '--group', 'g', '--'], says: /missing the command after '--'/ },
    { name: 'run without --group', args: ['run', '--', 'true'], says: /missing --group/ },
    { name: 'a bad --ttl', args: ['run', '--group', 'g', '--ttl', '10x', '--', 'true'], says: /--ttl: expected a duration/ },
    { name: 'a bad --grace', args: ['run', '--group', 'g', '--grace', 'soon', '--', 'true'], says: /--grace: expected a duration/ },
    { name: 'a bad --wait', args: ['lock', 'L', '--wait', '-5s', '--', 'true'], says: /--wait/ },
    { name: 'a ttl below the minimum', args: ['run', '--group', 'g', '--ttl', '5ms', '--', 'true'], says: /--ttl: must be between 10ms and 24h, got 5ms$/ },
    { name: 'a ttl above the maximum, said as given', args: ['run', '--group', 'g', '--ttl', '25h', '--', 'true'], says: /--ttl: must be between 10ms and 24h, got 25h$/ },
    { name: 'a ttl in bare ms below the minimum', args: ['run', '--group', 'g', '--ttl', '9', '--', 'true'], says: /--ttl: must be between 10ms and 24h, got 9ms$/ },
    { name: 'a token that does not parse', args: ['append', '--stream', 's', '--token', 'nohash', 'x'], says: /expected LEASE#TERM/ },
    { name: 'a token with term 0', args: ['append', '--stream', 's', '--token', 'billing#0', 'x'], says: /expected LEASE#TERM/ },
    { name: 'append without --token', args: ['append', '--stream', 's', 'x'], says: /missing --token/ },
    { name: 'log without --stream', args: ['log'], says: /missing --stream/ },
    { name: 'an unknown store scheme', args: ['status', '--store', 'foo:bar'], says: /unknown store scheme 'foo:'/ },
    { name: 'a store URL without a scheme', args: ['status', '--store', 'just-a-path'], says: /--store: expected SCHEME:/ },
    { name: 'a bad --nodes for the demo', args: ['demo', '--nodes', 'many'], says: /--nodes: expected a whole number/ },
    { name: 'a bad --duration for the demo', args: ['demo', '--duration', 'forever'], says: /--duration/ },
  ];
  for (const c of cases) {
    it(`rejects ${c.name}`, async () => {
      const r = await tenure(box, c.args);
      const line = expectOneLine(r.stderr);
      expect(line).toMatch(c.says);
      expect(r.code).toBe(2);
    });
  }

  it('rejects an unknown scheme in TENURE_STORE too', async () => {
    const r = await tenure(box, ['status'], { env: { ...box.env, TENURE_STORE: 'zookeeper://x' } });
    expect(expectOneLine(r.stderr)).toMatch(/unknown store scheme 'zookeeper:'/);
    expect(r.code).toBe(2);
  });

  it('rejects a term the store never issued', async () => {
    const r = await tenure(box, ['append', '--stream', 's', '--token', 'never#7', 'x']);
    expect(expectOneLine(r.stderr)).toMatch(/never issued/);
    expect(r.code).toBe(2);
  });
});

describe('an unreachable store: one line naming it, exit code 1', () => {
  for (const command of [['status'], ['log', '--stream', 's'], ['append', '--stream', 's', '--token', 'g#1', 'x'], ['run', '--group', 'g', '--', 'true'], ['follow', '--stream', 's', '--state', 'st', '--', 'true']]) {
    it(`tenure ${command[0]}`, async () => {
      const r = await tenure(box, [command[0]!, '--store', 'sqlite:/dev/null/tenure.db', ...command.slice(1)]);
      const line = expectOneLine(r.stderr);
      expect(line).toContain('/dev/null/tenure.db');
      expect(r.code).toBe(1);
    });
  }

  it('prints the stack trace only with --debug', async () => {
    const r = await tenure(box, ['status', '--store', 'sqlite:/dev/null/tenure.db', '--debug']);
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/\n\s+at /);
  });
});

describe('help and version', () => {
  for (const command of ['run', 'lock', 'status', 'append', 'log', 'follow', 'demo', 'migrate']) {
    it(`tenure ${command} --help shows usage and an example`, async () => {
      const r = await tenure(box, [command, '--help']);
      expect(r.code).toBe(0);
      expect(r.stdout).toContain(`Usage: tenure ${command}`);
      expect(r.stdout).toMatch(/Examples?:\n {2}(npx )?tenure /);
      expect(r.stderr).toBe('');
    });
  }

  it('tenure --help lists the commands', async () => {
    const r = await tenure(box, ['--help']);
    expect(r.code).toBe(0);
    for (const command of ['run', 'lock', 'status', 'append', 'log', 'follow', 'demo']) expect(r.stdout).toMatch(new RegExp(`\\n  ${command} `));
    expect(r.stdout).not.toContain('demo-node');
  });

  it('tenure --version prints the package version', async () => {
    const pkg = JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { version: string };
    const r = await tenure(box, ['--version']);
    expect(r.code).toBe(0);
    expect(r.stdout.trim()).toBe(pkg.version);
  });
});
