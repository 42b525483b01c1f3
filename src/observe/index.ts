export { collectMetrics } from './metrics.js';
export type { LagSource, MetricSources, MetricsOptions, Registry } from './metrics.js';
export { healthHandler, healthReport, lockHealth, metricsHandler } from './http.js';
export type { GroupHealth, HealthHandlerOptions, HealthReport, HealthSubject, HttpHandler, LockHealth } from './http.js';
export { dashboardHandler, checkDashboardToken } from './dashboard.js';
export type { DashboardHandler, DashboardOptions } from './dashboard.js';
export { DashboardSource } from './dashboard-source.js';
export type { DashboardSnapshot, DashboardSourceOptions, DashboardUpdate, FollowerView, GroupView, StoreStatus } from './dashboard-source.js';
