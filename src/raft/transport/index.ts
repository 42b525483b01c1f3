export { CLIENT_DIALER_ID, RaftTransport, parseAddress, type ClientLink, transportDefaults, type PeerAddress, type PeerStats, type TransportOptions, type TransportStats, type TransportTlsOptions } from './transport.js';
export { FrameError, type RefusalReason } from './errors.js';
export { decodeMessages, encodeMessages, MESSAGE_TYPES } from './codec.js';
export { FrameKind, PROTOCOL_VERSION, HEADER_BYTES } from './frame.js';
