// Once the probe is up, V8 trades a little CPU for memory: it runs the probe's code in the
// interpreter alone, drops bytecode soon after its last use, keeps its young generation
// small, and once the target is settled (the probe samples at 1 Hz) every garbage collection
// is a full one.
//
// Why: the probe should cost a VM little more than Node itself. Measured side by side in
// loaded sandboxes (test/bench/FINDINGS.md, "Issue 17: the probe's memory"):
// - No more machine code. The probe's steady work is one sample a second, which never gets
//   hot, yet Sparkplug's baseline code and TurboFan's optimised code (with irregexp's native
//   regular expressions) kept about 0.4 MiB of executable pages, and TurboFan's compile
//   zones left the malloc heap about 0.4 MiB larger. Interpreted, the probe at 1 Hz used no
//   more CPU; at boot rate (25 samples a second) about a fifth more.
// - Full collections only, at 1 Hz. A scavenge promotes what lived through two of them, and
//   the promoted garbage piled up in the old generation until V8 got round to a full
//   collection: the settled probe's V8 heap grew from 18 to 23 pages of 256 KiB between
//   them. Collecting everything each time keeps it at 18, for a millisecond or two a few
//   times a minute. At boot rate the collections come 25 times as often, cost a further
//   seventh of the probe's CPU and saved no memory there: scavenges until settled.
// - Bytecode flushed after one full collection that found it unused, not five. What a settled
//   probe's V8 heap holds beyond idle Node's is mostly its functions (a heap snapshot: ~980
//   bytecode arrays with their feedback, constant pools and source positions, against ~370),
//   and start-up's functions stayed compiled for five collections after their last call.
//   Side by side for 360 s, settled: RssAnon 7.2–7.9 MiB (17 pages of V8 heap) against
//   7.8–8.3 (19 pages), CPU 0.200 % against 0.203 %: a function run every few seconds that
//   gets flushed compiles again lazily, which did not show.
//
// - The young generation at its floor (two semi-spaces of 512 KiB). V8 doubles it when
//   scavenges come often, which the boot rate's allocation made it do: a page of 256 KiB more
//   at every reading side by side, for no CPU saved. Growth factor 1 keeps it where it starts
//   (but in dumps: there a young generation that cannot grow promoted the dump's buffers, and
//   the probe peaked at +16.6 MiB instead of +10.8).
//
// A dump is another matter (withDumpFlags). Reading 10,000 goroutines from a Go target's memory
// took 560 ms of the probe's CPU interpreted, against 50 with all of V8's compilers; with
// Sparkplug's baseline code (and scavenges) it took 210 ms, and
// the probe's memory peaked lower than with TurboFan (+10.8 MiB against +13.7 to +19). So dumps
// run with those; the baseline code they leave behind stays.
//
// Regular expressions stay as Node runs them (irregexp's native code), whatever the state:
// Node 20's V8 (11.3) cannot change --regexp-interpret-all in a running process. A regular
// expression run before the change and again after it crashes the process (SIGSEGV), in
// either direction. The probe once interpreted them when lean and not during dumps, so a log
// line or kernel message parsed both before and during a dump would have crashed it
// (test/v8-flags-live.test.ts: the probe's changes, and that one, in a plain Node).
//
// Not on the command line: flags are part of what V8's code cache must match, so a flag in
// a unit file that the build's cache was not made with would have V8 reject the cache
// (launcher.ts). The bundle is compiled with the cache under the default flags and the flags
// change afterwards, which V8 allows at any time: code already compiled stays, nothing new
// is compiled to machine code. The run that writes the cache (VSOCKDIAG_CODE_CACHE=write,
// guest-probe/code-cache.mjs) keeps the defaults, because V8 stamps a cache with the flags
// in force when the cache is made.

import * as lazy from './lazy-builtins.js';

/** Compilers off (the probe's code is interpreted), unused bytecode flushed at the first full
 *  collection, and the young generation at its floor. */
export const LEAN = '--no-turbofan --no-sparkplug --bytecode-old-age=1 --semi-space-growth-factor=1';
/** While a dump runs: baseline code, scavenges, and a young generation that may grow;
 *  TurboFan stays off. */
export const FOR_DUMPS = '--sparkplug --semi-space-growth-factor=2 --no-gc-global';

let lean = false;
let settled = false;
let dumps = 0;

/** The flags for the probe's state now. */
function apply(): void {
  lazy.v8().setFlagsFromString(dumps > 0 ? FOR_DUMPS : `${LEAN} ${settled ? '--gc-global' : '--no-gc-global'}`);
}

/** Called once the probe is up (its first hello out): node:v8 is one more module to load.
 *  False when the flags were left alone. */
export function useLessMemory(env: NodeJS.ProcessEnv = process.env): boolean {
  if (env.VSOCKDIAG_CODE_CACHE === 'write') return false;
  lean = true;
  apply();
  return true;
}

/** The target is settled (1 Hz) or not (boot rate): full collections only when it is.
 *  Nothing happens in a process that never called useLessMemory (tests run Probes). */
export function setSettled(now: boolean): void {
  if (now === settled) return;
  settled = now;
  if (lean) apply();
}

/** Runs `work` (a dump) with FOR_DUMPS, back to the probe's flags when the last such work
 *  ends. Changes nothing in a process that never called useLessMemory. */
export async function withDumpFlags<T>(work: () => Promise<T>): Promise<T> {
  if (!lean) return work();
  if (dumps++ === 0) apply();
  try {
    return await work();
  } finally {
    if (--dumps === 0) apply();
  }
}
