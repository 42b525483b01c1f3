export { PostgresStore, type PostgresStoreOptions } from './postgres-store.js';
export type { PgPool, PgPoolClient, PgQueryable, PgQueryResult } from './driver.js';
