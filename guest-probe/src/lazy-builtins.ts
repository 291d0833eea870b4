// Node built-ins loaded on first use rather than at start-up. The probe starts on every
// boot's path, and compiling one of these (Node compiles its own modules on first require)
// costs about a millisecond each: a probe with no --health-url, no pprof, no wrapped command
// and no journal never loads node:http, node:child_process or node:os, and node:crypto only
// if /dev/urandom is missing. node:net (with the streams under it) every probe needs, but
// only after its first hello is out on the raw fd (dial.ts).
// (A static import would be evaluated when the bundle loads, whether used or not.)

import { createRequire } from 'node:module';

const require = createRequire(import.meta.url);

export const http = (): typeof import('node:http') => require('node:http') as typeof import('node:http');
export const childProcess = (): typeof import('node:child_process') => require('node:child_process') as typeof import('node:child_process');
export const crypto = (): typeof import('node:crypto') => require('node:crypto') as typeof import('node:crypto');
export const os = (): typeof import('node:os') => require('node:os') as typeof import('node:os');
export const net = (): typeof import('node:net') => require('node:net') as typeof import('node:net');
