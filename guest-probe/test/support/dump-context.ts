// The context takeDump runs in, as the probe builds it (probe.ts), for the dump tests: the
// real /proc, a SIGQUIT capture of its own, a target's exit seen by waitForExit.
import { SigquitCapture, waitForExit, type DumpContext } from '../../src/dumps/index.js';

/** No target and no pprof URL unless `over` gives them. */
export function dumpContext(over: Partial<DumpContext> = {}): DumpContext {
  return {
    targetPid: null,
    procRoot: '/proc',
    pprofUrl: null,
    sigquit: new SigquitCapture(),
    exited: (pid, signal) => waitForExit(pid, { signal }),
    ...over,
  };
}
