export { FaultProxy } from '../../../src/chaos/fault-proxy.js';
export type { Direction, Endpoint, FaultProxyOptions, HoldOptions, ProxyMode, ProxyStats } from '../../../src/chaos/fault-proxy.js';
