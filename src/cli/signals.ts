/**
 * SIGINT, SIGTERM and SIGHUP to tenure itself: the first one asks the command to wind down (stop
 * the child, release the lease); a second one asks it to hurry (SIGKILL the child now).
 *
 * A closed output pipe counts as SIGPIPE: when stdout or stderr is a pipe whose reader has gone
 * (`tenure run … 2>&1 | head`), a write fails with EPIPE and `outputClosed` asks the running
 * command to wind down the same way (Node ignores the signal itself, so without this the write
 * error would end the process at once, with the lease still held until its TTL ran out). It never
 * hurries: the writes the wind-down makes fail with EPIPE too.
 */
export type TerminationSignal = 'SIGINT' | 'SIGTERM' | 'SIGHUP' | 'SIGPIPE';

const SIGNALS: readonly TerminationSignal[] = ['SIGINT', 'SIGTERM', 'SIGHUP'];

export interface TerminationHandlers {
  /** The first signal. */
  stop(signal: TerminationSignal): void;
  /** Any later signal (never SIGPIPE). */
  hurry?(signal: TerminationSignal): void;
}

/** The listeners installed by onTermination, for outputClosed. */
const installed = new Set<(signal: TerminationSignal) => void>();

/** Install the handlers; returns a function that removes them. */
export function onTermination(handlers: TerminationHandlers): () => void {
  let received = false;
  const listener = (signal: TerminationSignal): void => {
    if (!received) {
      received = true;
      handlers.stop(signal);
    } else if (signal !== 'SIGPIPE') {
      handlers.hurry?.(signal);
    }
  };
  for (const s of SIGNALS) process.on(s, listener);
  installed.add(listener);
  return () => {
    for (const s of SIGNALS) process.off(s, listener);
    installed.delete(listener);
  };
}

/**
 * stdout or stderr is a closed pipe: stop the running command as SIGPIPE would (once). False when
 * no command has termination handlers installed (it is not one that holds anything: the caller
 * decides).
 */
export function outputClosed(): boolean {
  if (installed.size === 0) return false;
  for (const listener of [...installed]) listener('SIGPIPE');
  return true;
}
