export { MysqlStore, type MysqlStoreOptions } from './mysql-store.js';
export type { MysqlConnection, MysqlExecutor, MysqlPool, MysqlValue } from './driver.js';
