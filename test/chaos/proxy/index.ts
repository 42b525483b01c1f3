export { FaultProxy } from './fault-proxy.js';
export type { Direction, Endpoint, FaultProxyOptions, HoldOptions, ProxyMode, ProxyStats } from './fault-proxy.js';
