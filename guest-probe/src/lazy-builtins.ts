// Node built-ins loaded on first use rather than at start-up. The probe starts on every
// boot's path, and compiling one of these (Node compiles its own modules on first require)
// costs about a millisecond each: a probe with no --health-url, no pprof, no wrapped command
// and no journal never loads node:http, node:child_process or node:os, and node:crypto only
// if the addon cannot read /dev/urandom. node:net (with the streams under it) every probe
// needs, but only after its first hello is out on the raw fd (dial.ts); node:v8 likewise,
// to set V8's flags once the probe is up (v8-flags.ts).
// (A static import would be evaluated when the bundle loads, whether used or not.)

import { createRequire } from 'node:module';

// The require function itself is made on first use too: createRequire resolves this file's
// URL into a module, work the probe's start-up has no need of before its hello.
let require: NodeJS.Require | undefined;
const load = <T>(id: string): T => (require ??= createRequire(import.meta.url))(id) as T;

export const http = (): typeof import('node:http') => load('node:http');
export const childProcess = (): typeof import('node:child_process') => load('node:child_process');
export const crypto = (): typeof import('node:crypto') => load('node:crypto');
export const os = (): typeof import('node:os') => load('node:os');
export const net = (): typeof import('node:net') => load('node:net');
export const v8 = (): typeof import('node:v8') => load('node:v8');
