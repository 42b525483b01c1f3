export { MysqlStore, type MysqlStoreOptions } from './mysql-store.js';
export { fencedUpdate, type FencedUpdate, type FencedUpdateResult } from './fenced-row.js';
export type { MysqlConnection, MysqlExecutor, MysqlPool, MysqlValue } from './driver.js';
