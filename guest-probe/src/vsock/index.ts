// vsock for the probe: load the addon, prove the internal Pipe handle still works, then
// register the backend so dial()/listen() from @vsockdiag/proto accept vsock: addresses.

import { useVsockBackend } from '@vsockdiag/proto';
import { loadNative } from '../native.js';
import { createVsockBackend } from './backend.js';
import { pipeSelfTest } from './self-test.js';

export { createVsockBackend, isRetryable } from './backend.js';
export { serverFromFd, socketFromFd, type ServerFromFdOptions, type SocketFromFdOptions } from './pipe.js';
export { pipeSelfTest } from './self-test.js';

/** Throws if the addon cannot load or the self-test fails; vsock stays unavailable then. */
export async function enableVsock(): Promise<void> {
  const addon = loadNative();
  await pipeSelfTest(addon);
  useVsockBackend(createVsockBackend(addon));
}
