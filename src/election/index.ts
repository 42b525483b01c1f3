export { LeaderElector } from './leader-elector.js';
export type { LeaderElectorOptions, LeaderElectorEvents, LeaderContext, LeaderWork, DeposedReason } from './leader-elector.js';
// Moved to core (used outside election too); re-exported here for compatibility.
export { TypedEmitter } from '../core/typed-emitter.js';
export { LeaseSet } from './lease-set.js';
export type { LeaseSetOptions, LeaseSetEvents, HeldLease, LeaseEndReason } from './lease-set.js';
