// vsock for the probe: load the addon and register the backend so dial()/listen() from
// @vsockdiag/proto accept vsock: addresses. The internal Pipe handle every vsock fd goes to
// is proven by a self-test, run once, when the first fd is about to be wrapped: after the
// probe's first hello is out on the raw fd (src/dial.ts), not on its start-up path.

import { useVsockBackend } from '@vsockdiag/proto';
import { loadNative, type NativeAddon } from '../native.js';
import { createVsockBackend } from './backend.js';
import { pipeSelfTest } from './self-test.js';

export { createVsockBackend, isRetryable, timeoutForPoll } from './backend.js';
export { serverAtPath, serverFromFd, socketFromFd, type ServerFromFdOptions, type SocketFromFdOptions } from './pipe.js';
export { pipeSelfTest } from './self-test.js';

let tested: Promise<void> | undefined;

/** Resolves once pipeSelfTest() has passed; it runs on the first call, and its outcome (a
 *  property of this Node) stands for the process's lifetime. */
export function vsockUsable(addon: NativeAddon = loadNative()): Promise<void> {
  tested ??= pipeSelfTest(addon);
  return tested;
}

/** Throws if the addon cannot load. Every vsock fd the backend makes is wrapped only once
 *  vsockUsable() resolved; its dial and listen reject with the self-test's error otherwise. */
export function enableVsock(): void {
  const addon = loadNative();
  useVsockBackend(createVsockBackend(addon, () => vsockUsable(addon)));
}
