/**
 * The clock the SQLite store keeps expiry in. SQLite is single-host, so one OS clock serves all
 * processes (safety rule 1). On Linux it is CLOCK_MONOTONIC (shared by every process, immune to
 * wall-clock steps) tagged with the boot id, because the monotonic clock restarts at boot; a
 * database from an earlier boot has all its leases expired on open. Elsewhere it is the wall clock.
 */
import { readFileSync } from 'node:fs';

export interface HostClock {
  /** Identifies the clock's epoch; expiry times from another epoch are meaningless. */
  readonly epoch: string;
  now(): number;
}

export function hostClock(): HostClock {
  let bootId: string | null = null;
  try {
    bootId = readFileSync('/proc/sys/kernel/random/boot_id', 'utf8').trim();
  } catch {
    bootId = null;
  }
  if (bootId) return { epoch: `monotonic:${bootId}`, now: () => Number(process.hrtime.bigint() / 1000n) / 1000 };
  return { epoch: 'wall', now: () => Date.now() };
}
