import { defineConfig } from 'vitest/config';

/**
 * Test files that measure a leader's timing under a deliberate CPU and lock storm of their own
 * (8 writer processes beside a leader at a 200 ms TTL): they run after every other file, one at a
 * time, so that no other test's processes share the machine's 2 cores with them. What they
 * assert is unchanged; only what runs beside them is.
 */
const alone = ['test/process/sqlite-contention.test.ts'];

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
