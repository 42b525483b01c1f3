/**
 * `tenure run`: campaign for a group and run a command only while leader — a sidecar that keeps
 * a job on exactly one machine at a time, with the fencing token in the job's environment.
 */
import { hostname } from 'node:os';
import { TenureError, checkName, checkOwner, limits, timingDefaults } from '../core/index.js';
import { formatToken } from '../fencing/index.js';
import type { DeposedReason, LeaderContext } from '../election/index.js';
import { LeaderElector } from '../election/index.js';
import type { Lease } from '../core/index.js';
import { maxPermits } from '../locks/index.js';
import type { LockHandle, Semaphore } from '../locks/index.js';
import { durationOption, flagOption, integerOption, parseCommand, renderHelp, stringOption } from './args.js';
import type { CommandSpec } from './args.js';
import { ChildJob, checkStartable, exitOrAbort, pauseUnlessAborted, signalExitCode } from './child.js';
import { TransitionLog, childStopReport, describeExit, formatMs } from './output.js';
import type { CliIO } from './output.js';
import { onTermination } from './signals.js';
import type { TerminationSignal } from './signals.js';
import { eitherSignal } from './lock.js';
import { STORE_OPTION, openCliStore, probeStore, storeTarget } from './store.js';

/** Restart backoff for a child that exits by itself while leader, ms. */
const RESTART_MIN_MS = 1000;
const RESTART_MAX_MS = 30_000;
/** A child that ran at least this long restarts after the shortest backoff again, ms. */
const RESTART_RESET_MS = 10_000;
const DEFAULT_GRACE_MS = 5000;
const MAX_GRACE_MS = 3_600_000;

export const runSpec: CommandSpec = {
  name: 'run',
  usage: 'run --group G [--store URL] [--semaphore N] [--id ID] [--ttl D] [--grace D] [--once] [--json] -- CMD [ARGS…]',
  summary: 'Run CMD only while this process is the leader of group G.',
  description: [
    'Campaigns for G and starts CMD when elected, with TENURE_GROUP, TENURE_TERM, TENURE_TOKEN (the\n' +
      'fencing token, as `tenure append --token` takes it), TENURE_ID and TENURE_STORE in its\n' +
      'environment. When leadership ends, CMD\'s process group gets SIGTERM, then SIGKILL after\n' +
      '--grace; if tenure itself dies (even by kill -9), a watchdog process does the same. CMD starts\n' +
      'again on re-election; if it exits by itself while leader, it is restarted with backoff (1s,\n' +
      'doubling to 30s). SIGINT/SIGTERM stop CMD, release the lease and exit.',
    'Durations: 1500, 1500ms, 10s, 2m. Exit codes: with --once, CMD\'s own code (1 if CMD exited 0\n' +
      'after being stopped because leadership was lost); 130/143 after SIGINT/SIGTERM; 141 when the\n' +
      'reader of tenure\'s output went away (CMD stopped and the lease released, as on SIGTERM); 2 for\n' +
      'bad usage; 1 when the store cannot be opened, or fails in a way retrying cannot fix (a lease\n' +
      'whose term is beyond 2^53 - 1, an unexpected error): CMD is stopped and the lease released first.',
    'With --semaphore N, CMD runs while this process holds one of N permits of G (G/permit/I, which\n' +
      'is TENURE_GROUP): up to N processes run it at once; a lost permit stops CMD and waits for one again.',
  ],
  options: {
    group: { type: 'string', value: 'G', help: 'the group (lease name) to lead' },
    store: STORE_OPTION,
    id: { type: 'string', value: 'ID', help: 'node id (default: hostname-pid); a per-process suffix is added' },
    ttl: { type: 'string', value: 'D', help: 'lease time to live (default 10s)' },
    grace: { type: 'string', value: 'D', help: 'time between SIGTERM and SIGKILL when stopping CMD (default 5s)' },
    once: { type: 'boolean', help: 'run CMD once as leader, release, exit with its code' },
    semaphore: { type: 'string', value: 'N', help: `run CMD while holding one of N permits of G: up to N at once (1 to ${maxPermits})` },
    json: { type: 'boolean', help: 'transitions as JSON lines on stderr' },
  },
  required: ['group'],
  takesCommand: true,
  examples: [
    'tenure run --group nightly-report -- node report.js',
    'tenure run --group billing --ttl 5s --once -- sh -c \'./bill.sh --token "$TENURE_TOKEN"\'',
  ],
};

export async function runCommand(argv: readonly string[], io: CliIO): Promise<number> {
  const args = parseCommand(runSpec, argv);
  if (args.help) {
    io.stdout.write(renderHelp(runSpec));
    return 0;
  }
  const { values } = args;
  const group = checkName('--group', stringOption(values, 'group'));
  const ttlMs = durationOption(values, 'ttl', timingDefaults.ttlMs, limits.ttlMinMs, limits.ttlMaxMs);
  const graceMs = durationOption(values, 'grace', DEFAULT_GRACE_MS, 0, MAX_GRACE_MS);
  const id = stringOption(values, 'id');
  if (id !== undefined) checkOwner('--id', id);
  const permits = stringOption(values, 'semaphore') === undefined ? null : integerOption(values, 'semaphore', 1, 1, maxPermits);
  const target = storeTarget(stringOption(values, 'store'), io.env);
  const [command, ...commandArgs] = args.command as [string, ...string[]];
  const commandLine = args.command.join(' ');
  checkStartable(command, io.env);

  const store = await openCliStore(target);
  try {
    await probeStore(store, target, group);
    if (permits !== null) {
      const semaphore = store.semaphore(group, { permits, ttlMs, ...(id !== undefined ? { id } : {}), meta: { host: hostname(), pid: process.pid, command: commandLine.slice(0, 200) } });
      const log = new TransitionLog(io.stderr, flagOption(values, 'json'), { group });
      return await supervisePermit({ semaphore, ttlMs, log, io, group, graceMs, once: flagOption(values, 'once'), storeUrl: target.url, storeDisplay: target.display, command, commandArgs, commandLine });
    }
    const elector = new LeaderElector({
      store,
      group,
      ttlMs,
      ...(id !== undefined ? { id } : {}),
      meta: { host: hostname(), pid: process.pid, command: commandLine.slice(0, 200) },
    });
    const log = new TransitionLog(io.stderr, flagOption(values, 'json'), { group });
    return await supervise({ elector, log, io, group, graceMs, once: flagOption(values, 'once'), storeUrl: target.url, storeDisplay: target.display, command, commandArgs, commandLine });
  } finally {
    await store.close();
  }
}

interface Supervision {
  readonly elector: LeaderElector;
  readonly log: TransitionLog;
  readonly io: CliIO;
  readonly group: string;
  readonly graceMs: number;
  readonly once: boolean;
  readonly storeUrl: string;
  readonly storeDisplay: string;
  readonly command: string;
  readonly commandArgs: readonly string[];
  readonly commandLine: string;
}

async function supervise(s: Supervision): Promise<number> {
  const { elector, log, group, graceMs } = s;
  let finish: (code: number) => void = () => {};
  const finished = new Promise<number>((resolve) => (finish = resolve));
  let shuttingDown = false;
  /** The one child there may be; a new term's child waits until the previous one is gone. */
  let current: ChildJob | null = null;
  const stopReport = childStopReport(log, graceMs);

  elector.on('elected', ({ term, token }) =>
    log.event('elected', `elected term ${term} for group ${group} (token ${formatToken(token)})`, { term, token: formatToken(token), id: elector.owner }),
  );
  elector.on('deposed', ({ term, reason, holder }) => {
    if (reason === 'stopped') return;
    log.event('deposed', `deposed from term ${term}: ${describeDeposed(reason, holder)}`, {
      term,
      reason,
      holder: holder?.owner ?? null,
      holderTerm: holder?.term ?? null,
    });
  });
  elector.on('leader-changed', ({ owner, term }) => {
    if (owner === elector.owner || (owner === null && shuttingDown)) return;
    log.event('leader', owner ? `leader of ${group} is ${owner} (term ${term})` : `${group} has no leader`, { owner, term });
  });
  elector.on('store-error', ({ operation, error }) => {
    log.error('store-error', `store error during ${operation}: ${error.message}`, { operation, error: error.message });
    if (isFault(operation, error)) {
      // Not an outage to ride out: a lease row tenure cannot use (StoreDataError), or an
      // unexpected error. The elector has ended leadership (the child is stopped); exit 1.
      log.error('fault', `stopping: the store or tenure failed in a way retrying cannot fix (during ${operation})`, { operation, code: EXIT_FAULT });
      finish(EXIT_FAULT);
    }
  });
  elector.on('renew-failed', ({ term, error }) =>
    log.error('renew-failed', `renewal of term ${term} failed (retrying until the deadline): ${error.message}`, { term, error: error.message }),
  );
  elector.on('suspended', ({ term, remainingMs }) =>
    log.event('suspended', `leadership of term ${term} suspended: a renew failed; it ends in ${formatMs(remainingMs)} unless one succeeds`, { term, remainingMs }),
  );
  elector.on('recovered', ({ term, suspendedMs }) => log.event('recovered', `leadership of term ${term} recovered after ${formatMs(suspendedMs)} suspended`, { term, suspendedMs }));
  elector.on('work-error', ({ term, error }) => log.event('error', `supervisor error in term ${term}: ${error.message}`, { term, error: error.message }));

  const work = async ({ signal, term, token }: LeaderContext): Promise<void> => {
    const previous = current;
    if (previous && !previous.hasExited) await previous.stop(graceMs, stopReport);
    let backoffMs = RESTART_MIN_MS;
    while (!signal.aborted && !shuttingDown) {
      const env: NodeJS.ProcessEnv = {
        ...s.io.env,
        TENURE_GROUP: group,
        TENURE_TERM: String(term),
        TENURE_TOKEN: formatToken(token),
        TENURE_ID: elector.owner,
        TENURE_STORE: s.storeUrl,
      };
      const startedAt = performance.now();
      const child = new ChildJob(s.command, s.commandArgs, env, { graceMs });
      current = child;
      if (child.pid !== undefined) log.event('child-started', `started child ${child.pid} in term ${term}: ${s.commandLine}`, { pid: child.pid, term });
      const exit = await exitOrAbort(child, signal);
      if (exit === null) {
        // Leadership ended (or tenure is stopping): the child must not outlive it.
        const stopped = await child.stop(graceMs, stopReport);
        log.event('child-exited', `child ${child.pid ?? '?'} exited: ${describeExit(stopped)}`, exitFields(child, stopped));
        if (s.once && !shuttingDown) finish(stopped.code === 0 ? 1 : stopped.code);
        return;
      }
      log.event('child-exited', `child ${child.pid ?? '?'} exited: ${describeExit(exit)}`, exitFields(child, exit));
      if (shuttingDown) return;
      if (s.once) {
        finish(exit.code);
        return;
      }
      if (signal.aborted) return;
      if (exit.code === EXIT_STALE && exit.signal === null) {
        // The child's fenced write with this term's token was refused (exit code 3, as `tenure
        // append` exits): a stale rejection stops the writer. Step down now, not at the next
        // failed renew; the child is not restarted in this term.
        log.event('fenced', `child ${child.pid ?? '?'} exited with 3 (stale fencing token): stepping down from term ${term}`, { pid: child.pid ?? null, term });
        await elector.reportFenced(term);
        return;
      }
      if (performance.now() - startedAt >= RESTART_RESET_MS) backoffMs = RESTART_MIN_MS;
      log.event('child-restart', `restarting child in ${formatMs(backoffMs)}`, { inMs: backoffMs, term });
      await pauseUnlessAborted(backoffMs, signal);
      backoffMs = Math.min(backoffMs * 2, RESTART_MAX_MS);
    }
  };

  const removeHandlers = onTermination({
    stop: (sig) => {
      shuttingDown = true;
      log.event('signal', `received ${sig}: stopping`, { signal: sig });
      void (async () => {
        const child = current;
        if (child && !child.hasExited) await child.stop(graceMs, stopReport);
        finish(signalExitCode(sig));
      })();
    },
    hurry: () => current?.hurry(),
  });

  log.event('campaigning', `campaigning for group ${group} as ${elector.owner} (store ${s.storeDisplay}, ttl ${formatMs(elector.timing.ttlMs)})`, {
    id: elector.owner,
    store: s.storeDisplay,
    ttlMs: elector.timing.ttlMs,
  });
  void elector.runWhileLeader(work);
  const code = await finished;
  shuttingDown = true;
  const heldTerm = elector.term;
  await elector.stop();
  // A child of a term that just ended may still be inside its grace period.
  const last = current as ChildJob | null;
  if (last && !last.hasExited) await last.stop(graceMs, stopReport);
  removeHandlers();
  log.event('stopped', heldTerm !== null ? `released term ${heldTerm} of group ${group}; exiting with ${code}` : `stopped; exiting with ${code}`, {
    releasedTerm: heldTerm,
    code,
  });
  return code;
}

/**
 * `run --semaphore N`: hold one of N permits of the group while CMD runs (restarted with backoff
 * if it exits by itself); a lost permit stops CMD, and the loop waits for a permit again.
 */
async function supervisePermit(s: Omit<Supervision, 'elector'> & { readonly semaphore: Semaphore; readonly ttlMs: number }): Promise<number> {
  const { semaphore, log, group, graceMs } = s;
  const interrupted = new AbortController();
  let received: TerminationSignal | null = null;
  let current: ChildJob | null = null;
  const stopReport = childStopReport(log, graceMs);
  const removeHandlers = onTermination({
    stop: (sig) => {
      received = sig;
      log.event('signal', `received ${sig}: stopping`, { signal: sig });
      interrupted.abort();
    },
    hurry: () => current?.hurry(),
  });
  log.event('campaigning', `waiting for one of ${semaphore.permits} permits of ${group} (store ${s.storeDisplay}, ttl ${formatMs(s.ttlMs)})`, {
    permits: semaphore.permits,
    store: s.storeDisplay,
    ttlMs: s.ttlMs,
  });
  try {
    for (;;) {
      let handle: LockHandle;
      try {
        handle = await semaphore.acquire({ signal: interrupted.signal });
      } catch (err) {
        if (received) return signalExitCode(received);
        throw err;
      }
      const token = formatToken(handle.token);
      log.event('elected', `holding permit ${handle.name} of ${group}, term ${handle.term} (token ${token})`, { term: handle.term, token, lease: handle.name });
      try {
        const ended = eitherSignal(handle.signal, interrupted.signal);
        let backoffMs = RESTART_MIN_MS;
        while (!ended.aborted) {
          const env: NodeJS.ProcessEnv = { ...s.io.env, TENURE_GROUP: handle.name, TENURE_TERM: String(handle.term), TENURE_TOKEN: token, TENURE_STORE: s.storeUrl };
          const startedAt = performance.now();
          const child = new ChildJob(s.command, s.commandArgs, env, { graceMs });
          current = child;
          if (child.pid !== undefined) log.event('child-started', `started child ${child.pid} in term ${handle.term}: ${s.commandLine}`, { pid: child.pid, term: handle.term });
          const exit = await exitOrAbort(child, ended);
          if (exit === null) {
            const stopped = await child.stop(graceMs, stopReport);
            log.event('child-exited', `child ${child.pid ?? '?'} exited: ${describeExit(stopped)}`, exitFields(child, stopped));
            if (received) return signalExitCode(received);
            if (s.once) return stopped.code === 0 ? 1 : stopped.code;
            break;
          }
          log.event('child-exited', `child ${child.pid ?? '?'} exited: ${describeExit(exit)}`, exitFields(child, exit));
          if (received) return signalExitCode(received);
          if (s.once) return exit.code;
          if (exit.code === EXIT_STALE && exit.signal === null) {
            log.event('fenced', `child ${child.pid ?? '?'} exited with 3 (stale fencing token): giving permit ${handle.name} up`, { pid: child.pid ?? null, term: handle.term });
            break;
          }
          if (performance.now() - startedAt >= RESTART_RESET_MS) backoffMs = RESTART_MIN_MS;
          log.event('child-restart', `restarting child in ${formatMs(backoffMs)}`, { inMs: backoffMs, term: handle.term });
          await pauseUnlessAborted(backoffMs, ended);
          backoffMs = Math.min(backoffMs * 2, RESTART_MAX_MS);
        }
        if (handle.lost) log.event('deposed', `lost permit ${handle.name} (term ${handle.term})`, { term: handle.term, lease: handle.name });
      } finally {
        const last = current as ChildJob | null;
        if (last && !last.hasExited) await last.stop(graceMs, stopReport);
        const held = handle.held;
        await handle.release();
        if (held) log.event('released', `released permit ${handle.name} (term ${handle.term})`, { term: handle.term, lease: handle.name });
      }
      if (received) return signalExitCode(received);
    }
  } finally {
    removeHandlers();
  }
}

function exitFields(child: ChildJob, exit: { code: number; signal: NodeJS.Signals | null; error?: string }): Record<string, string | number | null | undefined> {
  return { pid: child.pid ?? null, code: exit.code, signal: exit.signal, error: exit.error };
}

/** Why leadership ended, in words. */
export function describeDeposed(reason: DeposedReason, holder: Lease | null): string {
  switch (reason) {
    case 'deadline':
      return 'the lease deadline passed without a successful renewal';
    case 'lost':
      return holder ? `renewal refused: ${holder.owner} holds term ${holder.term}` : 'renewal refused: the lease had expired';
    case 'resigned':
      return 'resigned';
    case 'late':
      return 'the acquire reply came after its own deadline';
    case 'fenced':
      return 'a fenced write with this term was refused as stale (a newer term exists)';
    case 'stopped':
      return 'stopped';
    case 'stalled':
      return 'the leader work reported no progress within progressTimeoutMs';
    case 'error':
      return 'an unexpected error (see the store-error line)';
  }
}

/** A stale fencing token's exit code (EXIT.stale in main.ts), as `tenure append` exits with a refused token. */
const EXIT_STALE = 3;

/** The exit code after a fault (see `isFault`): 1, failure. */
export const EXIT_FAULT = 1;

/**
 * A `store-error` the elector reports as a fault rather than an outage: any error of an acquire,
 * renew or of the loop itself that is not StoreUnavailableError (outcome unknown, retried). A
 * failed release is neither: the lease then simply expires.
 */
function isFault(operation: string, error: Error): boolean {
  if (operation === 'release') return false;
  return !(error instanceof TenureError && error.code === 'STORE_UNAVAILABLE');
}
