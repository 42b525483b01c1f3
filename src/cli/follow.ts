/**
 * `tenure follow`: a follower for shell users. Each entry of stream S is written to CMD's standard
 * input as one JSON line, in order, and the state file records the last entry handed over, so a
 * restarted `tenure follow` goes on after it. It is the library's Follower with a sink of its own:
 * the "projection" is CMD, the offset is the state file.
 *
 * The contract at the pipe (docs/cli.md, "tenure follow"):
 * - default: an entry counts as delivered once its line has been written into the pipe (the write
 *   completed) while CMD is alive. The state file is replaced atomically (write, fsync, rename)
 *   after each batch of --batch entries, and whenever tenure stops, with the last delivered seq.
 *   If tenure is killed mid-batch, the batch's delivered entries are sent again on restart (at
 *   least once: CMD can drop a `seq` it has seen; --batch 1 makes that at most one entry). If CMD
 *   dies with lines still unread in the pipe, those lines count as delivered: use --ack when CMD
 *   may die.
 * - --ack: CMD writes each entry's seq on its standard output, one line, when it is done with it;
 *   an entry counts as delivered only then, one entry in flight. Nothing is lost when CMD dies; an
 *   entry CMD finished but tenure had not recorded is sent again (CMD dedupes by seq).
 */
import { spawn } from 'node:child_process';
import type { ChildProcess } from 'node:child_process';
import { closeSync, fsyncSync, mkdirSync, openSync, readFileSync, renameSync, unlinkSync, writeSync } from 'node:fs';
import { basename, dirname, join, resolve } from 'node:path';
import { createInterface } from 'node:readline';
import { constants } from 'node:os';
import { InvalidArgumentError, checkName } from '../core/index.js';
import type { StreamEntry } from '../core/index.js';
import { ApplyError, Follower, OffsetMismatchError } from '../replication/index.js';
import type { FollowerSink } from '../replication/index.js';
import { durationOption, flagOption, integerOption, parseCommand, renderHelp, stringOption } from './args.js';
import type { CommandSpec } from './args.js';
import { checkStartable, signalExitCode } from './child.js';
import type { CliIO } from './output.js';
import { onTermination } from './signals.js';
import type { TerminationSignal } from './signals.js';
import { ONE_SHOT_BUSY_TIMEOUT_MS } from './status.js';
import { STORE_OPTION, openCliStore, storeTarget } from './store.js';

const DEFAULT_POLL_MS = 100;
const DEFAULT_GRACE_MS = 5000;
/** Entries per batch: read as one page, FILE written once after it. */
const DEFAULT_BATCH = 100;

export const followSpec: CommandSpec = {
  name: 'follow',
  usage: 'follow --stream S [--state FILE] [--store URL] [--ack] [--batch N] [--poll D] [--grace D] [--lag D] -- CMD [ARGS…]',
  summary: "Pipe each entry of stream S, once and in order, to CMD's standard input; FILE keeps the place.",
  description: [
    'Each entry is one JSON line {"seq":N,"lease":"L","term":T,"payload":"..."} on CMD\'s standard\n' +
      'input. FILE holds the seq of the last entry delivered (created when missing, replaced\n' +
      'atomically after every --batch entries and when tenure stops); a restarted follow goes on after it.',
    'Delivered means: the line was written into the pipe while CMD was alive. If tenure is killed\n' +
      'before FILE caught up, those entries (at most --batch) are sent again: dedupe by seq. With --ack,\n' +
      'CMD prints each seq on its standard output when done with it, and only that counts as delivered:\n' +
      'none is lost if CMD dies.',
    'Wakes at once on the store\'s push where it has one (PostgreSQL, Redis, SQLite, etcd); polls every\n' +
      '--poll otherwise. --lag D prints "tenure follow: lag N entries, M ms" on stderr every D; M is the\n' +
      'age of the oldest entry not yet delivered by the store\'s own clock ("ms unknown" on etcd).',
    'Stops when CMD exits (exit code: CMD\'s), or on SIGINT/SIGTERM (CMD\'s input is closed; it gets\n' +
      'SIGTERM after --grace, SIGKILL after another --grace). Exit codes: CMD\'s own when it exits by\n' +
      'itself; 130/143 after SIGINT/SIGTERM; 141 when the reader of tenure\'s output went away; 2 bad\n' +
      'usage, or FILE not a seq of stream S (beyond its end); 1 store failure or a corrupted entry (CMD\n' +
      'gets no further entry).',
  ],
  options: {
    stream: { type: 'string', value: 'S', help: 'the stream to follow' },
    state: { type: 'string', value: 'FILE', help: 'file holding the last delivered seq (default ./.tenure/follow-S.seq, S percent-encoded)' },
    store: STORE_OPTION,
    ack: { type: 'boolean', help: 'wait for CMD to print each seq before recording it' },
    batch: { type: 'string', value: 'N', help: `entries between two updates of FILE, 1..10000 (default ${DEFAULT_BATCH})` },
    poll: { type: 'string', value: 'D', help: `wait between reads when caught up (default ${DEFAULT_POLL_MS}ms)` },
    grace: { type: 'string', value: 'D', help: `time CMD gets to exit after its input closes (default ${DEFAULT_GRACE_MS / 1000}s)` },
    lag: { type: 'string', value: 'D', help: "every D, print the lag on stderr: entries behind, and ms on the store's clock (default: never)" },
  },
  required: ['stream'],
  takesCommand: true,
  examples: [
    "tenure follow --stream invoices --state invoices.seq -- sh -c 'while read -r line; do echo \"$line\" >> out.jsonl; done'",
    'tenure follow --stream invoices --state invoices.seq --ack -- python3 consumer.py',
  ],
};

/** The state file: one decimal seq and a newline; missing means 0. */
function readState(path: string): number {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return 0;
    throw new InvalidArgumentError('--state', `cannot read ${path}: ${(err as Error).message}`);
  }
  if (!/^[0-9]{1,16}\n?$/.test(text) || !Number.isSafeInteger(Number(text.trim()))) {
    throw new InvalidArgumentError('--state', `${path} must hold one whole number (the last delivered seq), got ${JSON.stringify(text.slice(0, 40))}`);
  }
  return Number(text.trim());
}

/** Replace the state file atomically and durably: a temporary file, fsync, rename, fsync of the directory. */
function writeState(path: string, seq: number): void {
  const tmp = join(dirname(path), `.${basename(path)}.${process.pid}.tmp`);
  const fd = openSync(tmp, 'w', 0o644);
  try {
    writeSync(fd, `${seq}\n`);
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
  renameSync(tmp, path);
  try {
    const dir = openSync(dirname(path), 'r');
    try {
      fsyncSync(dir);
    } finally {
      closeSync(dir);
    }
  } catch {
    // Some filesystems refuse fsync on a directory; the rename is still atomic.
  }
}

/**
 * One `tenure follow` per state file: FILE.lock holds the pid of the one that uses it. A lock
 * left by a process that is gone (kill -9) is taken over. Returns the function that removes it.
 */
function lockState(path: string): () => void {
  const lock = `${path}.lock`;
  for (let attempt = 0; attempt < 2; attempt++) {
    try {
      const fd = openSync(lock, 'wx', 0o644);
      writeSync(fd, `${process.pid}\n`);
      closeSync(fd);
      return () => {
        try {
          unlinkSync(lock);
        } catch {
          // already gone
        }
      };
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw new InvalidArgumentError('--state', `cannot create ${lock}: ${(err as Error).message}`);
      let pid = NaN;
      try {
        pid = Number(readFileSync(lock, 'utf8').trim());
      } catch {
        // removed meanwhile: try again
      }
      if (Number.isSafeInteger(pid) && pid > 0 && pid !== process.pid && processAlive(pid)) {
        throw new InvalidArgumentError('--state', `${path} is in use by another tenure follow (pid ${pid}, see ${lock})`);
      }
      try {
        unlinkSync(lock); // its owner is gone
      } catch {
        // someone else removed it first
      }
    }
  }
  throw new InvalidArgumentError('--state', `${path} is in use by another tenure follow (${lock} keeps coming back)`);
}

function processAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/** CMD's end of the pipe, as the follow sink uses it. */
interface Pipe {
  deliver(entry: StreamEntry): Promise<void>;
}

class ChildGone extends Error {
  constructor() {
    super('CMD exited');
  }
}

export async function followCommand(argv: readonly string[], io: CliIO): Promise<number> {
  const args = parseCommand(followSpec, argv);
  if (args.help) {
    io.stdout.write(renderHelp(followSpec));
    return 0;
  }
  const { values } = args;
  const stream = checkName('--stream', stringOption(values, 'stream'));
  const stateOption = stringOption(values, 'state');
  const [command, ...commandArgs] = args.command as [string, ...string[]];
  checkStartable(command, io.env);
  // Beside the default store (./.tenure/tenure.db); the name keeps any stream name a safe file name.
  const statePath = resolve(stateOption ?? join('.tenure', `follow-${encodeURIComponent(stream)}.seq`));
  if (stateOption === undefined) mkdirSync(dirname(statePath), { recursive: true });
  const ack = flagOption(values, 'ack');
  const pollMs = durationOption(values, 'poll', DEFAULT_POLL_MS, 1, 60_000);
  const batchSize = integerOption(values, 'batch', DEFAULT_BATCH, 1, 10_000);
  const graceMs = durationOption(values, 'grace', DEFAULT_GRACE_MS, 0, 3_600_000);
  const lagEveryMs = durationOption(values, 'lag', 0, 10, 3_600_000);
  const target = storeTarget(stringOption(values, 'store'), io.env);
  const unlock = lockState(statePath);
  try {
    return await follow({ io, stream, statePath, ack, batchSize, pollMs, graceMs, lagEveryMs, target, command, commandArgs });
  } finally {
    unlock();
  }
}

interface FollowRun {
  readonly io: CliIO;
  readonly stream: string;
  readonly statePath: string;
  readonly ack: boolean;
  readonly batchSize: number;
  readonly pollMs: number;
  readonly graceMs: number;
  /** Print the lag on stderr this often, ms (0: never). */
  readonly lagEveryMs: number;
  readonly target: ReturnType<typeof storeTarget>;
  readonly command: string;
  readonly commandArgs: readonly string[];
}

async function follow({ io, stream, statePath, ack, batchSize, pollMs, graceMs, lagEveryMs, target, command, commandArgs }: FollowRun): Promise<number> {
  const start = readState(statePath);
  const store = await openCliStore(target, ONE_SHOT_BUSY_TIMEOUT_MS);
  let child: ChildProcess | null = null;
  let received: TerminationSignal | null = null;
  let follower: Follower<Pipe> | null = null;
  let stuckTimer: NodeJS.Timeout | undefined;
  const removeHandlers = onTermination({
    stop: (sig) => {
      received = sig;
      void follower?.stop();
      // A CMD that stopped reading blocks the write in flight (the pipe is full), and with it the
      // stop: after --grace it gets SIGTERM, and the failed write ends the batch (what it had
      // read stays recorded as delivered).
      stuckTimer = setTimeout(() => {
        if (child && child.exitCode === null && child.signalCode === null) child.kill('SIGTERM');
      }, graceMs);
      stuckTimer.unref();
    },
    hurry: () => {
      if (child && child.exitCode === null) child.kill('SIGKILL');
    },
  });
  try {
    // Check FILE against the log before CMD starts: a seq beyond the end is bad input.
    if (start > 0) {
      const [entry] = await store.readStream(stream, { after: start - 1, limit: 1 });
      if (entry?.seq !== start) {
        throw new InvalidArgumentError('--state', `${statePath} says entry ${start} of stream ${JSON.stringify(stream)} was delivered, but the stream has no entry ${start} (another stream or store, or a reset log?)`);
      }
    }
    const proc = spawn(command, commandArgs, { stdio: ['pipe', ack ? 'pipe' : 'inherit', 'inherit'], env: io.env });
    child = proc;
    const exited = new Promise<{ code: number; error?: string }>((resolveExit) => {
      proc.once('error', (err: NodeJS.ErrnoException) => {
        if (proc.pid === undefined) resolveExit({ code: err.code === 'EACCES' ? 126 : 127, error: err.code === 'ENOENT' ? `command not found: ${command}` : `cannot start ${command}: ${err.message}` });
      });
      proc.once('exit', (code, signal) => resolveExit({ code: code ?? 128 + (signal ? (constants.signals[signal] ?? 0) : 0) }));
    });
    proc.stdin!.on('error', () => {}); // EPIPE when CMD is gone: seen through `exited`
    let gone = false;
    void exited.then(() => {
      gone = true;
      void follower?.stop();
    });
    const acks = ack ? createInterface({ input: proc.stdout! })[Symbol.asyncIterator]() : null;
    const pipe: Pipe = {
      deliver: async (entry) => {
        if (gone) throw new ChildGone();
        const line = `${JSON.stringify({ seq: entry.seq, lease: entry.lease, term: entry.term, payload: entry.payload })}\n`;
        await new Promise<void>((resolveWrite, reject) => proc.stdin!.write(line, (err) => (err ? reject(new ChildGone()) : resolveWrite())));
        if (acks) {
          const next = await acks.next();
          if (next.done) throw new ChildGone();
          if (next.value.trim() !== String(entry.seq)) {
            throw new InvalidArgumentError('CMD', `acknowledged ${JSON.stringify(next.value.slice(0, 40))}, expected the seq ${entry.seq} (with --ack, CMD prints each entry's seq when done with it)`);
          }
        }
        // Acknowledged is done, whatever CMD does next; unacknowledged, delivered means written while CMD lives.
        if (!acks && (gone || proc.exitCode !== null || proc.signalCode !== null)) throw new ChildGone();
        delivered = entry.seq;
      },
    };
    let delivered = start;
    let offset = start;
    // FILE moves once per batch (fsync twice: file and directory), and on every stop with what
    // was delivered so far; only a kill -9 of tenure mid-batch leaves it behind (at most a batch).
    const sink: FollowerSink<Pipe> = {
      kind: 'pipe',
      load: async () => offset,
      commit: async (_name, from, to, work) => {
        if (readState(statePath) !== from) throw new OffsetMismatchError(stream, from, `${statePath} changed under this follow (another tenure follow with the same --state?)`);
        try {
          await work(pipe);
        } finally {
          if (delivered > offset) {
            writeState(statePath, delivered);
            offset = delivered;
          }
        }
        if (offset !== to) throw new Error(`internal: delivered ${offset}, expected ${to}`);
      },
    };
    follower = new Follower({ store, stream, sink, apply: (entry, p) => p.deliver(entry), batchSize, pollMs, maxRetries: 20, lagEveryMs });
    follower.on('lag', (lag) => {
      const ms = lag.ms === null ? 'ms unknown (the store has no clock to read)' : `${Math.round(lag.ms)} ms`;
      io.stderr.write(`tenure follow: lag ${lag.entries}${lag.atLeast ? '+' : ''} entries, ${ms}\n`);
    });
    if (received || gone) void follower.stop();
    let failure: unknown = null;
    await follower.start().catch((err: unknown) => {
      failure = err;
    });
    const childGone = failure instanceof ApplyError && failure.cause instanceof ChildGone;
    if (failure && !childGone) {
      await stopChild(proc, exited, graceMs);
      throw failure instanceof ApplyError && failure.cause instanceof InvalidArgumentError ? failure.cause : failure;
    }
    const exit = await stopChild(proc, exited, graceMs);
    if (exit.error) {
      io.stderr.write(`tenure follow: ${exit.error}\n`);
      return exit.code;
    }
    return received ? signalExitCode(received) : exit.code;
  } finally {
    clearTimeout(stuckTimer);
    removeHandlers();
    await store.close();
  }
}

/** Close CMD's input and wait for it to exit: SIGTERM after `graceMs`, SIGKILL after another. */
async function stopChild(proc: ChildProcess, exited: Promise<{ code: number; error?: string }>, graceMs: number): Promise<{ code: number; error?: string }> {
  proc.stdin?.end();
  let timer: NodeJS.Timeout | undefined;
  const escalate = (signal: NodeJS.Signals): Promise<null> =>
    new Promise((r) => {
      timer = setTimeout(() => {
        if (proc.exitCode === null && proc.signalCode === null) proc.kill(signal);
        r(null);
      }, graceMs);
    });
  try {
    if ((await Promise.race([exited, escalate('SIGTERM')])) === null) {
      if ((await Promise.race([exited, escalate('SIGKILL')])) === null) return await exited;
    }
    return await exited;
  } finally {
    clearTimeout(timer);
  }
}
