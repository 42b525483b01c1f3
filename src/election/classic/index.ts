/**
 * The classic message-passing elections, Bully and Ring, over the Raft transport: no store, and
 * not safe under partitions (docs/classic-elections.md says when to use them, which is rarely).
 */
export { ClassicElector, wrapClassic, unwrapClassic } from './driver.js';
export type { ClassicAlgorithm, ClassicElectorOptions, ClassicElectorEvents } from './driver.js';
export { BullyMachine } from './bully.js';
export { RingMachine } from './ring.js';
export { CLASSIC_TIMING, nextOwnedTerm } from './machine.js';
export type { ClassicConfig, ClassicEvent, ClassicInput, ClassicMachine, ClassicOutput, ClassicTiming, TimerCommand } from './machine.js';
export { ElectionMessageError, decodeClassic, encodeClassic, CLASSIC_VERSION } from './messages.js';
export type { ClassicMessage, ClassicMessageKind } from './messages.js';
