import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    testTimeout: 60_000,
    hookTimeout: 60_000,
    // Process and SQLite tests spawn real processes; keep parallelism to the machine's 2 cores.
    maxWorkers: 2,
  },
});
