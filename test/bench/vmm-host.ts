// Sandboxes whose Firecracker vsock devices run outside the benchmark's process
// (vmm-process.ts), as a real VM's runs in its own VMM. In-process, a device relays bytes
// on the benchmark's event loop, which a burst of boots (spawning each sandbox blocks it
// for a fork) stalls for tens of milliseconds: the latency figures would be the harness's.
//
//   const vmm = startVmmHost();
//   const sb = await startSandbox({ id, root, device: vmm.device });
//   ...
//   await vmm.stop();

import path from 'node:path';
import readline from 'node:readline';
import { ROOT } from '../harness/collector.js';
import type { VsockDevice } from '../harness/sandbox.js';
import { spawnTethered } from '../harness/tether.js';
import { REQUIRE_BANNER, bundleForNode } from './bundle.js';

export interface VmmHost {
  /** startSandbox's `device`: the sandbox's vsock device, in the VMM process. */
  device: (udsPath: string, guestDir: string, hostPort: number) => Promise<VsockDevice>;
  /** Closes every device (their sockets are removed) and ends the process. */
  stop: () => Promise<void>;
}

let bundle: string | null = null;

export function startVmmHost(): VmmHost {
  bundle ??= bundleForNode(path.join(ROOT, 'test/bench/vmm-process.ts'), path.join(ROOT, 'test/.build/vmm-process.mjs'), {
    banner: REQUIRE_BANNER,
  });
  // Killed with this process should it die before stop() (tether.ts).
  const proc = spawnTethered([process.execPath, bundle], { cwd: ROOT, stdio: ['pipe', 'pipe', 'pipe'] });
  let errors = '';
  proc.stderr!.on('data', (d) => (errors = (errors + d).slice(-4000)));
  const exited = new Promise<void>((r) => proc.once('exit', () => r()));
  const waiting = new Map<string, { resolve: () => void; reject: (e: Error) => void }>();
  readline.createInterface({ input: proc.stdout! }).on('line', (line) => {
    const m = JSON.parse(line);
    const w = waiting.get(m.key);
    waiting.delete(m.key);
    if (m.op === 'failed') w?.reject(new Error(`vmm: ${m.key}: ${m.message}`));
    else w?.resolve();
  });
  void exited.then(() => {
    for (const w of waiting.values()) w.reject(new Error(`the VMM process exited: ${errors}`));
    waiting.clear();
  });
  const ask = (m: { op: string; key: string } & Record<string, unknown>) =>
    new Promise<void>((resolve, reject) => {
      if (proc.exitCode !== null || proc.signalCode !== null) return reject(new Error(`the VMM process exited: ${errors}`));
      waiting.set(m.key, { resolve, reject });
      proc.stdin!.write(`${JSON.stringify(m)}\n`);
    });
  return {
    device: async (udsPath, guestDir, hostPort) => {
      await ask({ op: 'start', key: udsPath, udsPath, guestDir, hostPort });
      return { close: () => ask({ op: 'close', key: udsPath }) };
    },
    stop: async () => {
      if (proc.exitCode !== null || proc.signalCode !== null) return;
      proc.stdin!.end();
      const timer = setTimeout(() => proc.kill('SIGKILL'), 5000);
      await exited;
      clearTimeout(timer);
    },
  };
}
