import { defineConfig } from 'vitest/config';

/**
 * Test files whose timing cannot share the machine's 2 cores with other test files: they run after
 * every other file, one at a time. What they assert is unchanged; only what runs beside them is.
 * - sqlite-contention: a leader's timing under a deliberate CPU and lock storm of its own (8
 *   writer processes beside a leader at a 200 ms TTL).
 * - the raft:// client contract: every call is a round trip to one of three `tenure raft serve`
 *   processes and a quorum's commit; beside other files (load 16 to 22) a starved member set off
 *   elections and single calls took seconds, past the scenarios' leases (three CI runs in a row
 *   failed there, each on another scenario). Alone it takes about 90 s.
 * - ZooKeeper's faults: they restart a private ZooKeeper server (a JVM) under a holder; a cold
 *   server's first answers beside other files came late before (see the restart scenario's
 *   comment), and a CI run failed 11.9 s into that scenario, whose calls wait 10 s for an answer.
 *   Alone 6 to 20 s.
 */
const alone = ['test/process/sqlite-contention.test.ts', 'test/stores/raft/raft-client-contract.test.ts', 'test/stores/zookeeper-faults.test.ts'];

export default defineConfig({
  test: {
    testTimeout: 60_000,
    hookTimeout: 60_000,
    projects: [
      {
        extends: true,
        test: {
          name: 'tenure',
          include: ['test/**/*.test.ts'],
          exclude: alone,
          // Process and SQLite tests spawn real processes; keep parallelism to the machine's 2 cores.
          maxWorkers: 2,
          sequence: { groupOrder: 0 },
        },
      },
      {
        extends: true,
        test: {
          name: 'alone',
          include: alone,
          maxWorkers: 1,
          sequence: { groupOrder: 1 },
        },
      },
    ],
  },
});
