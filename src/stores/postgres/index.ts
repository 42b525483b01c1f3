export { PostgresStore, type PostgresStoreOptions } from './postgres-store.js';
export { fencedUpdate, type FencedUpdate, type FencedUpdateResult } from './fenced-row.js';
export type { RowValue } from '../fenced-rows.js';
export type { PgPool, PgPoolClient, PgQueryable, PgQueryResult } from './driver.js';
