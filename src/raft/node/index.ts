export { RaftNode, raftNodeDefaults, type NodeStatus, type Proposed, type RaftNodeOptions, type StateMachine } from './node.js';
export { ProposalLostError, RaftNotLeaderError, RaftTimeoutError } from './errors.js';
