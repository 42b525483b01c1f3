export {
  RaftStateMachine,
  SNAPSHOT_MAGIC,
  SNAPSHOT_VERSION,
  type ApplyOutcome,
  type ChangeEvent,
  type StateMachineOptions,
  type StateMachineStats,
} from './state-machine.js';
export {
  COMMAND_MAX_BYTES,
  COMMAND_VERSION,
  RENEW_MANY_MAX,
  checkOperation,
  decodeCommand,
  encodeCommand,
  errorToResult,
  resultToError,
  type Command,
  type CommandResult,
  type Operation,
  type ResultError,
  type ResultValue,
  type Session,
} from './commands.js';
export { RAFT_STORE_DEDUPE, RaftStore, openRaftStore, type RaftStoreOptions, type RaftStoreStatus } from './raft-store.js';
export { RaftClientStore, type RaftClientOptions } from './client-store.js';
export { RaftClientRefusedError, type RaftClientTlsOptions } from './client-connection.js';
export { RAFT_SECRET_ENV, RAFT_TLS_ENV, parseRaftUrl, readRaftSecret, readRaftTls, type RaftOpenOptions, type RaftTlsFiles } from './backend.js';
export type { TransportTlsOptions as RaftTlsOptions } from '../../raft/transport/index.js';
export type { MemberStatus, Membership } from './client-protocol.js';
