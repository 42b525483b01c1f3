/**
 * The tenure command: dispatch to a subcommand and turn every failure into one line on stderr and
 * an exit code (0 ok, 1 failure, 2 bad usage or input, 3 stale fencing token, 4 not acquired in
 * time). Stack traces only with --debug (or TENURE_DEBUG=1).
 */
import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { InvalidArgumentError, LockTimeoutError, StaleTermError, TenureError, redactSecrets } from '../core/index.js';
import { UsageError, wantsDebug } from './args.js';
import type { CommandSpec } from './args.js';
import { appendCommand, appendSpec } from './append.js';
import { dashboardCommand, dashboardSpec } from './dashboard.js';
import { chaosCommand, chaosSpec } from './chaos.js';
import { demoCommand, demoSpec } from './demo-command.js';
import { demoNodeCommand, demoNodeSpec } from './demo-node.js';
import { demoFollowerCommand, demoFollowerSpec } from './demo-follower.js';
import { followCommand, followSpec } from './follow.js';
import { demoResourceCommand, demoResourceSpec } from './demo-resource-process.js';
import { lockCommand, lockSpec } from './lock.js';
import { logCommand, logSpec } from './log.js';
import { migrateCommand, migrateSpec } from './migrate.js';
import { printable } from './output.js';
import type { CliIO } from './output.js';
import { raftCommand, raftSpec } from './raft.js';
import { runCommand, runSpec } from './run.js';
import { outputClosed } from './signals.js';
import { statusCommand, statusSpec } from './status.js';
import { StoreOpenError } from './store.js';
import { UnstartableCommandError } from './child.js';

export const EXIT = { ok: 0, failure: 1, usage: 2, stale: 3, notAcquired: 4 } as const;

type Command = (argv: readonly string[], io: CliIO) => Promise<number>;

const COMMANDS: ReadonlyArray<{ spec: CommandSpec; run: Command }> = [
  { spec: runSpec, run: runCommand },
  { spec: lockSpec, run: lockCommand },
  { spec: statusSpec, run: statusCommand },
  { spec: appendSpec, run: (argv, io) => appendCommand(argv, io, process.stdin) },
  { spec: logSpec, run: logCommand },
  { spec: followSpec, run: followCommand },
  { spec: demoSpec, run: demoCommand },
  { spec: migrateSpec, run: migrateCommand },
  { spec: chaosSpec, run: chaosCommand },
  { spec: raftSpec, run: raftCommand },
  { spec: dashboardSpec, run: dashboardCommand },
  { spec: demoNodeSpec, run: demoNodeCommand },
  { spec: demoFollowerSpec, run: demoFollowerCommand },
  { spec: demoResourceSpec, run: demoResourceCommand },
];

/** The package version, read from the package.json next to the build. */
export function version(): string {
  let dir = dirname(fileURLToPath(import.meta.url));
  for (let i = 0; i < 5; i++) {
    try {
      const pkg = JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8')) as { name?: string; version?: string };
      if (pkg.name === 'tenure' && pkg.version) return pkg.version;
    } catch {
      // not here; look one level up
    }
    dir = dirname(dir);
  }
  return 'unknown';
}

function generalHelp(): string {
  const visible = COMMANDS.filter((c) => !c.spec.hidden);
  const width = Math.max(...visible.map((c) => c.spec.name.length));
  return [
    'tenure: leader election, leases, fencing tokens and locks.',
    '',
    'Usage: tenure COMMAND [OPTIONS]',
    '',
    'Commands:',
    ...visible.map((c) => `  ${c.spec.name.padEnd(width)}  ${c.spec.summary}`),
    '',
    'Options: --help (also after a command), --version, --debug (stack traces on errors).',
    'The store is --store URL, else $TENURE_STORE, else sqlite:./.tenure/tenure.db.',
    'Exit codes: 0 ok, 1 failure, 2 bad usage or input, 3 stale fencing token, 4 not acquired in time,',
    "or the child's own code where a child ran.",
    '',
    'Start with:  tenure demo',
    '',
  ].join('\n');
}

/** Run the command line `argv` (without node and script); resolves with the exit code. */
export async function main(argv: readonly string[], io: CliIO = { stdout: process.stdout, stderr: process.stderr, env: process.env }): Promise<number> {
  const debug = wantsDebug(argv) || io.env.TENURE_DEBUG === '1';
  const rest = argv[0] === '--debug' ? argv.slice(1) : argv;
  const [name, ...args] = rest;
  let label = 'tenure';
  try {
    if (name === undefined || name === '--help' || name === '-h' || name === 'help') {
      const topic = name === 'help' ? COMMANDS.find((c) => c.spec.name === args[0]) : undefined;
      if (topic) return await topic.run(['--help'], io);
      io.stdout.write(generalHelp());
      return EXIT.ok;
    }
    if (name === '--version' || name === '-V' || name === 'version') {
      io.stdout.write(`${version()}\n`);
      return EXIT.ok;
    }
    const command = COMMANDS.find((c) => c.spec.name === name);
    if (!command) {
      throw new UsageError(name.startsWith('-') ? `unknown option '${name}' (see tenure --help)` : `unknown command '${name}' (see tenure --help)`);
    }
    label = `tenure ${name}`;
    return await command.run(args, io);
  } catch (err) {
    const code = exitCodeFor(err);
    // The URLs the command was given (--store URL, --store=URL, TENURE_STORE), for redaction.
    const urls = [...rest.map((a) => a.replace(/^--[a-z-]+=/, '')), io.env.TENURE_STORE ?? ''];
    io.stderr.write(`${label}: ${messageOf(err, urls)}\n`);
    if (debug && err instanceof Error && err.stack) io.stderr.write(`${redactSecrets(err.stack, urls)}\n`);
    return code;
  }
}

/** The exit code for an error that reached the top. */
export function exitCodeFor(err: unknown): number {
  if (err instanceof UsageError || err instanceof InvalidArgumentError) return EXIT.usage;
  if (err instanceof StaleTermError) return EXIT.stale;
  if (err instanceof LockTimeoutError) return EXIT.notAcquired;
  if (err instanceof StoreOpenError) return EXIT.failure;
  if (err instanceof UnstartableCommandError) return err.exitCode;
  if (err instanceof TenureError) {
    if (err.code === 'INVALID_ARGUMENT') return EXIT.usage;
    if (err.code === 'STALE_TERM') return EXIT.stale;
    if (err.code === 'LOCK_TIMEOUT') return EXIT.notAcquired;
  }
  return EXIT.failure;
}

function messageOf(err: unknown, urls: readonly string[]): string {
  // Any URL an error quotes (a driver's, say) loses its credentials, and so does the store URL's
  // password where it is quoted without its URL.
  const text = redactSecrets(err instanceof Error ? err.message : String(err), urls);
  // One line, and nothing in it for the terminal to act on (a store row's text may be quoted).
  return printable(text.replace(/\s*\n\s*/g, ' ').trim() || String(err));
}

/** The bin entry: run `main`, flush the output, exit with its code. */
export async function runCli(): Promise<void> {
  // Deprecation warnings from drivers (gRPC's "TLS ServerName set to an IP address" on etcds://
  // to an IP) are not the user's to act on, and would break "one line per error".
  process.noDeprecation = true;
  // A closed pipe (`tenure log | head`) is a normal way for the reader to stop. A command that
  // holds something (a lease, a child) winds down as on SIGPIPE: child stopped, lease released
  // (signals.ts). Else a closed stdout ends the process at once, and a closed stderr loses the
  // messages while the command finishes with its own exit code. Never an uncaught write error.
  const closed = (stream: 'stdout' | 'stderr') => (err: NodeJS.ErrnoException): void => {
    if (err.code !== 'EPIPE') return;
    if (!outputClosed() && stream === 'stdout') process.exit(EXIT.ok);
  };
  process.stdout.on('error', closed('stdout'));
  process.stderr.on('error', closed('stderr'));
  const code = await main(process.argv.slice(2));
  await Promise.all([flush(process.stdout), flush(process.stderr)]);
  process.exit(code);
}

function flush(stream: NodeJS.WriteStream): Promise<void> {
  return new Promise((resolve) => {
    if (stream.writableLength === 0) resolve();
    else stream.write('', () => resolve());
  });
}
