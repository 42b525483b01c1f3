export { collectMetrics } from './metrics.js';
export type { MetricsOptions } from './metrics.js';
