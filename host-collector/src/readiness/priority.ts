// The readiness thread asks to be first in line for a CPU. Its answers are the orchestrator's
// hot path (a sandbox is handed out once it says ready), and on a busy host the wait for a core
// is most of their latency: with 5,000 sessions on the 2-core bench host the thread's p99 was
// 10–23 ms at nice 0, 6 ms at −5 and 5 ms at −10 (test/bench/FINDINGS.md). Its work is small
// and bounded by the requests it is sent, so the ingest thread still has the rest.
//
// Only this thread's nice value changes (on Linux, setpriority() on a thread id is that
// thread's alone), and only where the OS allows it (root, or CAP_SYS_NICE); elsewhere it
// stays as it was and says why.

import fs from 'node:fs';
import os from 'node:os';

export const READINESS_NICE = -10;

export interface ThreadPriority {
  /** The thread's nice value now. */
  nice: number;
  /** Why it is not the one asked for. */
  why?: string;
}

/** The calling thread's id, from /proc/thread-self (Linux 3.17 and later), or null. */
function threadId(): number | null {
  try {
    const m = /\/task\/(\d+)$/.exec(fs.readlinkSync('/proc/thread-self'));
    return m ? Number(m[1]) : null;
  } catch {
    return null;
  }
}

/** Sets the calling thread's nice value to `nice` if the OS allows it. Never throws. */
export function preferThisThread(nice = READINESS_NICE): ThreadPriority {
  const tid = threadId();
  if (tid === null) return { nice: os.getPriority(), why: 'no /proc/thread-self to find this thread by' };
  try {
    os.setPriority(tid, nice);
    return { nice: os.getPriority(tid) };
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code ?? 'an error';
    return { nice: os.getPriority(tid), why: `${code}: a nice value below 0 needs root or CAP_SYS_NICE` };
  }
}
