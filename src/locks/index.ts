export { Lock } from './lock.js';
export type { LockOptions, AcquireOptions, LockHandle } from './lock.js';
