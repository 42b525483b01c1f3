export { RedisStore, DEFAULT_KEY_PREFIX, type RedisStoreOptions } from './redis-store.js';
export type { RedisClient } from './driver.js';
