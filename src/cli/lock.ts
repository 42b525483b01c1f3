/**
 * `tenure lock NAME -- CMD`: hold a distributed lock while CMD runs, like flock(1) across
 * machines, with the fencing token in CMD's environment.
 */
import { checkName, checkOwner, limits, timingDefaults } from '../core/index.js';
import { formatToken } from '../fencing/index.js';
import { TenureError, redactSecrets, redactUrl } from '../core/index.js';
import { maxPermits, openRedlock, parseRedlockUrl } from '../locks/index.js';
import type { AcquireOptions, LockHandle, Redlock } from '../locks/index.js';
import { UsageError, durationOption, flagOption, integerOption, parseCommand, renderHelp, stringOption } from './args.js';
import type { CommandSpec } from './args.js';
import { ChildJob, checkStartable, exitOrAbort, signalExitCode } from './child.js';
import { TransitionLog, childStopReport, describeExit, formatMs } from './output.js';
import type { CliIO } from './output.js';
import { onTermination } from './signals.js';
import type { TerminationSignal } from './signals.js';
import { STORE_OPTION, StoreOpenError, openCliStore, probeStore, storeTarget } from './store.js';
import type { StoreTarget } from './store.js';

const DEFAULT_GRACE_MS = 5000;
/** How long each Redlock server gets to answer the start-up PING, ms. */
const PROBE_TIMEOUT_MS = 2000;

export const lockSpec: CommandSpec = {
  name: 'lock',
  usage: 'lock NAME [--store URL] [--semaphore N | --read | --write] [--lock-delay D] [--ttl D] [--wait D] [--grace D] [--id ID] [--json] -- CMD [ARGS…]',
  summary: 'Acquire the lock NAME, run CMD while holding it, then release it.',
  description: [
    'Waits for the lock (forever unless --wait is given), then runs CMD with TENURE_LOCK, TENURE_GROUP\n' +
      '(both NAME), TENURE_TERM, TENURE_TOKEN and TENURE_STORE in its environment. The lock is renewed\n' +
      'while CMD runs; if it is lost, CMD\'s process group gets SIGTERM, then SIGKILL after --grace.',
    'With --semaphore N, holds one of N permits (up to N holders at once, each with its own token;\n' +
      'TENURE_GROUP is the permit NAME/permit/I). With --read or --write, holds the read or the write\n' +
      'side of the read/write lock NAME (many readers or one writer; a waiting writer shuts new readers\n' +
      'out). --lock-delay D: if this holder vanishes (its lease lapses rather than being released),\n' +
      'nobody takes the lock for D more. None of these with redlock://.',
    'Exit codes: CMD\'s own code (1 if CMD exited 0 after being stopped because the lock was lost);\n' +
      '4 when the lock was not acquired within --wait; 1 when the store cannot be reached (for redlock://,\n' +
      'fewer than a quorum of its servers answer); 130/143 after SIGINT/SIGTERM; 141 when the reader of\n' +
      'tenure\'s output went away (CMD stopped and the lock released, as on SIGTERM); 2 for bad usage.',
  ],
  options: {
    store: STORE_OPTION,
    ttl: { type: 'string', value: 'D', help: 'lease time to live (default 10s)' },
    wait: { type: 'string', value: 'D', help: 'give up with exit code 4 after waiting this long (default: wait forever)' },
    grace: { type: 'string', value: 'D', help: 'time between SIGTERM and SIGKILL when stopping CMD (default 5s)' },
    semaphore: { type: 'string', value: 'N', help: `hold one of N permits of the semaphore NAME (1 to ${maxPermits})` },
    read: { type: 'boolean', help: 'hold the read (shared) side of the read/write lock NAME' },
    write: { type: 'boolean', help: 'hold the write (exclusive) side of the read/write lock NAME' },
    'lock-delay': { type: 'string', value: 'D', help: 'after this holder vanishes without releasing, nobody takes the lock for D (default 0)' },
    id: { type: 'string', value: 'ID', help: 'node id (default: hostname-pid); a per-process suffix is added' },
    json: { type: 'boolean', help: 'transitions as JSON lines on stderr' },
  },
  positionals: { min: 1, max: 1, label: 'the lock NAME' },
  takesCommand: true,
  examples: ['tenure lock db-migrations --wait 30s -- npm run migrate', 'tenure lock exports --semaphore 3 -- ./export.sh', 'tenure lock catalog --read -- ./report.sh'],
};

export async function lockCommand(argv: readonly string[], io: CliIO): Promise<number> {
  const args = parseCommand(lockSpec, argv);
  if (args.help) {
    io.stdout.write(renderHelp(lockSpec));
    return 0;
  }
  const { values } = args;
  const name = checkName('NAME', args.positionals[0]);
  const ttlMs = durationOption(values, 'ttl', timingDefaults.ttlMs, limits.ttlMinMs, limits.ttlMaxMs);
  const waitText = stringOption(values, 'wait');
  const waitMs = waitText === undefined ? undefined : durationOption(values, 'wait', 0, 0, limits.ttlMaxMs);
  const graceMs = durationOption(values, 'grace', DEFAULT_GRACE_MS, 0, 3_600_000);
  const id = stringOption(values, 'id');
  if (id !== undefined) checkOwner('--id', id);
  const kind = lockKind(values);
  const lockDelayMs = durationOption(values, 'lock-delay', 0, 0, limits.ttlMaxMs - ttlMs);
  const storeFlag = stringOption(values, 'store');
  const redlockUrl = redlockTarget(storeFlag, io.env);
  if (redlockUrl && (kind.type !== 'lock' || lockDelayMs > 0)) {
    throw new UsageError(`${kind.type === 'lock' ? '--lock-delay' : kindFlag(kind)} needs a tenure store; redlock:// holds plain locks only`);
  }
  const target = redlockUrl ? { url: redlockUrl, display: redactUrl(redlockUrl) } : storeTarget(storeFlag, io.env);
  const [command, ...commandArgs] = args.command as [string, ...string[]];
  checkStartable(command, io.env);
  const log = new TransitionLog(io.stderr, flagOption(values, 'json'), { lock: name });

  const source = redlockUrl ? await openRedlockSource(redlockUrl, target.display) : await openStoreSource(target as StoreTarget, kind, lockDelayMs);
  let handle: LockHandle | null = null;
  let child: ChildJob | null = null;
  let received: TerminationSignal | null = null;
  const interrupted = new AbortController();
  const stopReport = childStopReport(log, graceMs);
  const removeHandlers = onTermination({
    stop: (sig) => {
      received = sig;
      log.event('signal', `received ${sig}: stopping`, { signal: sig });
      interrupted.abort();
    },
    hurry: () => child?.hurry(),
  });
  try {
    await source.probe(name);
    log.event('waiting', `waiting for lock ${name}${waitMs !== undefined ? ` (up to ${formatMs(waitMs)})` : ''}`, { waitMs: waitMs ?? null });
    try {
      handle = await source.acquire(name, { ttlMs, ...(id !== undefined ? { id } : {}) }, {
        signal: interrupted.signal,
        ...(waitMs !== undefined ? { waitMs } : {}),
      });
    } catch (err) {
      if (received) return signalExitCode(received);
      throw err; // LockTimeoutError: exit code 4

    }
    const token = formatToken(handle.token);
    log.event('acquired', `acquired lock ${name}${handle.token.lease !== name ? ` (${handle.token.lease})` : ''}, term ${handle.term} (token ${token})`, { term: handle.term, token, lease: handle.token.lease });
    const env: NodeJS.ProcessEnv = {
      ...io.env,
      TENURE_LOCK: name,
      // The lease the token is under: NAME, or the semaphore permit or read/write side held.
      TENURE_GROUP: handle.token.lease,
      TENURE_TERM: String(handle.term),
      TENURE_TOKEN: token,
      TENURE_STORE: target.url,
    };
    child = new ChildJob(command, commandArgs, env, { graceMs });
    if (child.pid !== undefined) log.event('child-started', `started child ${child.pid}: ${args.command.join(' ')}`, { pid: child.pid });
    const ended = eitherSignal(handle.signal, interrupted.signal);
    const exit = await exitOrAbort(child, ended);
    if (exit !== null) {
      log.event('child-exited', `child ${child.pid ?? '?'} exited: ${describeExit(exit)}`, { pid: child.pid ?? null, code: exit.code, signal: exit.signal, error: exit.error });
      return received ? signalExitCode(received) : exit.code;
    }
    const lost = handle.signal.aborted && !received;
    if (lost) log.event('lost', `lost lock ${name} (term ${handle.term}): ${reasonText(handle.signal.reason)}`, { term: handle.term });
    const stopped = await child.stop(graceMs, stopReport);
    log.event('child-exited', `child ${child.pid ?? '?'} exited: ${describeExit(stopped)}`, { pid: child.pid ?? null, code: stopped.code, signal: stopped.signal });
    if (received) return signalExitCode(received);
    return stopped.code === 0 ? 1 : stopped.code;
  } finally {
    if (child && !child.hasExited) await child.stop(graceMs, stopReport);
    if (handle) {
      const held = !handle.signal.aborted;
      await handle.release();
      if (held) log.event('released', `released lock ${name} (term ${handle.term})`, { term: handle.term });
    }
    removeHandlers();
    await source.close();
  }
}

/** Where locks come from: a tenure store, or Redlock over independent Redis servers. */
interface LockSource {
  probe(name: string): Promise<void>;
  acquire(name: string, options: { ttlMs: number; id?: string }, acquire: AcquireOptions): Promise<LockHandle>;
  close(): Promise<void>;
}

/** The redlock:// URL when --store (or TENURE_STORE) names one, else null. */
function redlockTarget(flag: string | undefined, env: NodeJS.ProcessEnv): string | null {
  const given = (flag ?? env.TENURE_STORE ?? '').trim();
  if (!/^redlock:/i.test(given)) return null;
  parseRedlockUrl(given); // bad input: InvalidArgumentError, exit 2
  return given;
}

/** Which member of the lock family `tenure lock` holds. */
type LockKind = { readonly type: 'lock' } | { readonly type: 'semaphore'; readonly permits: number } | { readonly type: 'read' } | { readonly type: 'write' };

/** --semaphore N, --read, --write: at most one of them (bad input is exit 2, before any store is opened). */
function lockKind(values: Parameters<typeof stringOption>[0]): LockKind {
  const given = [stringOption(values, 'semaphore') !== undefined ? '--semaphore' : null, flagOption(values, 'read') ? '--read' : null, flagOption(values, 'write') ? '--write' : null].filter((f) => f !== null);
  if (given.length > 1) throw new UsageError(`${given.join(' and ')} cannot be combined: a lock is a semaphore, a read/write lock's read side, or its write side (see tenure lock --help)`);
  if (given[0] === '--semaphore') return { type: 'semaphore', permits: integerOption(values, 'semaphore', 1, 1, maxPermits) };
  if (given[0] === '--read') return { type: 'read' };
  if (given[0] === '--write') return { type: 'write' };
  return { type: 'lock' };
}

function kindFlag(kind: LockKind): string {
  return kind.type === 'semaphore' ? '--semaphore' : `--${kind.type}`;
}

async function openStoreSource(target: StoreTarget, kind: LockKind, lockDelayMs: number): Promise<LockSource> {
  const store = await openCliStore(target);
  return {
    probe: (name) => probeStore(store, target, name),
    acquire: (name, options, acquire) => {
      const o = { ...options, ...(lockDelayMs > 0 ? { lockDelayMs } : {}) };
      switch (kind.type) {
        case 'lock':
          return store.lock(name, o).acquire(acquire);
        case 'semaphore':
          return store.semaphore(name, { ...o, permits: kind.permits }).acquire(acquire);
        case 'read':
          return store.readWriteLock(name, o).read.acquire(acquire);
        case 'write':
          return store.readWriteLock(name, o).write.acquire(acquire);
      }
    },
    close: () => store.close(),
  };
}

async function openRedlockSource(url: string, display: string): Promise<LockSource> {
  let redlock: Redlock;
  try {
    redlock = await openRedlock(url);
  } catch (err) {
    if (err instanceof TenureError) throw err;
    throw new StoreOpenError(`cannot open ${display}: ${redactSecrets(err instanceof Error ? err.message : String(err), [url])}`, { cause: err });
  }
  return {
    // A quorum of servers must answer before waiting starts: with fewer, no lock can be granted,
    // and waiting (forever, or until --wait's exit code 4, "held by someone else") would hide it.
    probe: async () => {
      const { answered, detail } = await redlock.reachable(PROBE_TIMEOUT_MS);
      if (answered < redlock.quorum) {
        throw new StoreOpenError(`cannot reach ${display}: ${answered} of ${redlock.instances.length} servers answered, a quorum is ${redlock.quorum}: ${detail}`);
      }
    },
    acquire: (name, options, acquire) => redlock.lock(name, { ttlMs: options.ttlMs }).acquire(acquire),
    close: () => redlock.close(),
  };
}

function reasonText(reason: unknown): string {
  return reason instanceof Error ? reason.message : String(reason);
}

/** A signal that aborts when either of two does (AbortSignal.any needs Node >= 20.3). */
export function eitherSignal(a: AbortSignal, b: AbortSignal): AbortSignal {
  const both = new AbortController();
  const abort = (): void => both.abort();
  if (a.aborted || b.aborted) abort();
  a.addEventListener('abort', abort, { once: true });
  b.addEventListener('abort', abort, { once: true });
  return both.signal;
}
