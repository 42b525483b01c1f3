/**
 * SIGINT, SIGTERM and SIGHUP to tenure itself: the first one asks the command to wind down (stop
 * the child, release the lease); a second one asks it to hurry (SIGKILL the child now).
 */
export type TerminationSignal = 'SIGINT' | 'SIGTERM' | 'SIGHUP';

const SIGNALS: readonly TerminationSignal[] = ['SIGINT', 'SIGTERM', 'SIGHUP'];

export interface TerminationHandlers {
  /** The first signal. */
  stop(signal: TerminationSignal): void;
  /** Any later signal. */
  hurry?(signal: TerminationSignal): void;
}

/** Install the handlers; returns a function that removes them. */
export function onTermination(handlers: TerminationHandlers): () => void {
  let received = false;
  const listener = (signal: TerminationSignal): void => {
    if (!received) {
      received = true;
      handlers.stop(signal);
    } else {
      handlers.hurry?.(signal);
    }
  };
  for (const s of SIGNALS) process.on(s, listener);
  return () => {
    for (const s of SIGNALS) process.off(s, listener);
  };
}
