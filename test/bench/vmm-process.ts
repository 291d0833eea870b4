// The child process of vmm-host.ts: emulated Firecracker vsock devices (test/harness/
// firecracker.ts) in a process of their own, as each real VM's device lives in its own VMM,
// so that the benchmark's own work (spawning sandboxes, calling the API) never holds up a
// sandbox's bytes. One JSON message a line each way:
//   in:  {op: 'start', key, udsPath, guestDir, hostPort}   {op: 'close', key}
//   out: {op: 'started', key} | {op: 'closed', key} | {op: 'failed', key, message}
// stdin's end closes every device (removing its sockets) and exits.

import readline from 'node:readline';
import { FirecrackerVsock } from '../harness/firecracker.js';

const devices = new Map<string, FirecrackerVsock>();
const say = (m: object) => process.stdout.write(`${JSON.stringify(m)}\n`);

async function start(key: string, udsPath: string, guestDir: string, hostPort: number): Promise<void> {
  // The sandboxes' own shutdown semantics (no half-close), as startSandbox sets them.
  const vm = new FirecrackerVsock({ udsPath, guestDir, halfClose: 'firecracker' });
  devices.set(key, vm);
  await vm.start();
  await vm.exposeHostPort(hostPort);
}

async function close(key: string): Promise<void> {
  const vm = devices.get(key);
  devices.delete(key);
  await vm?.close();
}

readline.createInterface({ input: process.stdin }).on('line', (line) => {
  const m = JSON.parse(line);
  const done = m.op === 'start' ? start(m.key, m.udsPath, m.guestDir, m.hostPort) : close(m.key);
  done.then(
    () => say({ op: m.op === 'start' ? 'started' : 'closed', key: m.key }),
    (err: Error) => say({ op: 'failed', key: m.key, message: err.message }),
  );
});
process.stdin.on('end', async () => {
  await Promise.all([...devices.keys()].map(close));
  process.exit(0);
});
