/**
 * tenure: leader election, leases, fencing tokens and distributed locks.
 */
export * from './core/index.js';
export * from './election/index.js';
export * from './locks/index.js';
export { openStore, parseStoreUrl, TenureStore, DEFAULT_STORE_URL } from './open.js';
export type { StoreOptions } from './open.js';
export { MemoryStore } from './stores/memory/index.js';
export { fencedUpdate, postgresDialect, mysqlDialect, sqliteDialect, formatToken, parseToken, runFenced, currentToken, requireFence } from './fencing/index.js';
export type { FencedUpdate, FencedUpdateResult, SqlDialect, RowValue, FenceScope } from './fencing/index.js';
export { fencedFetch, fencingHeaders, httpFence } from './fencing/index.js';
export type { HttpFence, HttpFenceOptions, HttpFenceGuard } from './fencing/index.js';
export { collectMetrics } from './observe/index.js';
export type { MetricsOptions } from './observe/index.js';
export type { TenureStoreEvents } from './open.js';
