// The collector's heap, set for a service that keeps each sandbox's newest state and
// replaces it every second. With thousands of sandboxes those objects live longer than two
// young-generation collections, so they are promoted and die in old space; V8 then lets old
// space grow to several times what is live before a full collection, and the process's RSS
// swung from -17 % to +55 % of its median over a 10-minute soak of 5,000 sessions. A full
// collection once old space is HEAP_GROWING_PERCENT over what the last one kept holds it
// within a few percent, for no more collection time in total (more, smaller collections;
// measured in test/bench/FINDINGS.md).

import v8 from 'node:v8';

export const HEAP_GROWING_PERCENT = 15;

/** Sets the heap's growth for this process. V8 reads it at each full collection, so setting
 *  it once the process runs takes effect from the next one. */
export function tuneHeap(): void {
  v8.setFlagsFromString(`--heap-growing-percent=${HEAP_GROWING_PERCENT}`);
}
