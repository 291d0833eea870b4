export * from './address.js';
export * from './codec.js';
export * from './errors.js';
export * from './events.js';
export * from './frame.js';
export * from './limits.js';
export * from './messages.js';
export * from './transport.js';
export * as schema from './schema.js';
