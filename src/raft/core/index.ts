export * from './types.js';
export * from './errors.js';
export * from './storage.js';
export { RawNode, type Status, type ProgressStatus } from './raw-node.js';
export type { RaftConfig } from './raft.js';
