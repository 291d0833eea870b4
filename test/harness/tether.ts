// Processes a test or a benchmark starts must not outlive it. Cleanup hooks (afterEach, a
// `finally`) do not run when the runner itself is killed (a timeout, a crashed script, ^C),
// and a simulated sandbox or a collector left behind then keeps running, holding its ports,
// sockets and namespaces. The kernel can see to it instead: util-linux's `setpriv --pdeathsig`
// starts a command that is SIGKILLed when the thread that spawned it ends (the process, for a
// spawn from the main thread), and the setting survives the command's own exec. Under
// `unshare --fork --kill-child` with a PID namespace, that one kill takes the whole namespace.

import { spawn, type ChildProcess, type SpawnOptions } from 'node:child_process';

/** `argv` started so that it is SIGKILLed when the thread that spawns it ends. */
export function diesWithUs(argv: readonly string[]): [string, ...string[]] {
  return ['setpriv', '--pdeathsig', 'SIGKILL', '--', ...argv];
}

/** spawn() of `argv` under diesWithUs. */
export function spawnTethered(argv: readonly string[], options: SpawnOptions): ChildProcess {
  const [command, ...args] = diesWithUs(argv);
  return spawn(command, args, options);
}
