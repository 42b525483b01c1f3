import { describe, expect, it } from 'vitest';
import { onTermination, outputClosed } from '../../src/cli/signals.js';
import type { TerminationSignal } from '../../src/cli/signals.js';

describe('termination handlers and a closed output pipe', () => {
  it('a closed pipe stops once, as SIGPIPE, and never hurries; a real signal after it hurries', () => {
    const stops: TerminationSignal[] = [];
    const hurries: TerminationSignal[] = [];
    const remove = onTermination({ stop: (s) => stops.push(s), hurry: (s) => hurries.push(s) });
    try {
      expect(outputClosed()).toBe(true);
      expect(outputClosed()).toBe(true); // the wind-down's own writes fail too
      expect(stops).toEqual(['SIGPIPE']);
      expect(hurries).toEqual([]);
      process.emit('SIGTERM', 'SIGTERM'); // as the signal itself would, without sending one
      expect(hurries).toEqual(['SIGTERM']);
    } finally {
      remove();
    }
    expect(outputClosed()).toBe(false); // nothing installed: the caller decides
    expect(stops).toEqual(['SIGPIPE']);
  });
});
