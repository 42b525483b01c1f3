/** The chaos checker ships with `tenure chaos` (src/chaos/checker.ts); re-exported for the suite. */
export * from '../../src/chaos/checker.js';
