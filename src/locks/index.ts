export { Lock } from './lock.js';
export type { LockOptions, AcquireOptions, LockHandle } from './lock.js';
export { Redlock, RedlockLock, RedlockTimeoutError, redlockDefaults } from './redlock.js';
export type { RedlockOptions, RedlockAcquireOptions, RedlockHandle } from './redlock.js';
export { quorumCounter, redisCounter, storeLeaseClock, sequenceClock } from './redlock-fencing.js';
export type { GenerationClock, GenerationContext, QuorumCounterOptions, QuorumCounterSpec, RedisCounterOptions } from './redlock-fencing.js';
export type { QuorumKeys } from './redlock-instance.js';
export { openRedlock, parseRedlockUrl } from './redlock-url.js';
export type { RedlockUrl } from './redlock-url.js';
