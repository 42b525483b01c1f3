export * from './errors.js';
export * from './types.js';
export * from './clock.js';
export * from './random.js';
export * from './validate.js';
export * from './token.js';
export * from './timing.js';
export * from './lease.js';
