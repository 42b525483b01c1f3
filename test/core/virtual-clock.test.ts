/**
 * VirtualClock's promise-free run (runUntilSync), which the elector machine's simulation uses:
 * timers fire in (time, creation) order, timers set while firing run in the same run, and the
 * callback can stop the run where it is.
 */
import { describe, expect, it } from 'vitest';
import { VirtualClock } from '../../src/core/index.js';

describe('VirtualClock.runUntilSync', () => {
  it('fires due timers in order, including those set by a firing timer, and ends at the given instant', () => {
    const clock = new VirtualClock(0);
    const fired: string[] = [];
    clock.setTimer(20, () => fired.push(`b@${clock.now()}`));
    clock.setTimer(10, () => {
      fired.push(`a@${clock.now()}`);
      clock.setTimer(0, () => fired.push(`a0@${clock.now()}`));
      clock.setTimer(15, () => fired.push(`late@${clock.now()}`)); // at 25: past the run
    });
    clock.setTimer(20, () => fired.push(`c@${clock.now()}`));
    expect(clock.runUntilSync(22)).toBe(true);
    expect(fired).toEqual(['a@10', 'a0@10', 'b@20', 'c@20']);
    expect(clock.now()).toBe(22);
    expect(clock.nextAt()).toBe(25);
  });

  it('stops after the timer for which the callback returns false, at that timer’s instant', () => {
    const clock = new VirtualClock(0);
    let n = 0;
    for (const at of [5, 6, 7]) clock.setTimer(at, () => n++);
    expect(clock.runUntilSync(100, () => n < 2)).toBe(false);
    expect(n).toBe(2);
    expect(clock.now()).toBe(6);
    expect(clock.pending).toBe(1);
  });
});
