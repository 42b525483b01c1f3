export { LeaderElector } from './leader-elector.js';
export type { LeaderElectorOptions, LeaderElectorEvents, LeaderContext, LeaderWork, DeposedReason } from './leader-elector.js';
export { TypedEmitter } from './typed-emitter.js';
export { LeaseSet } from './lease-set.js';
export type { LeaseSetOptions, LeaseSetEvents, HeldLease, LeaseEndReason } from './lease-set.js';
