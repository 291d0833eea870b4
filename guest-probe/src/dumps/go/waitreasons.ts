// The runtime's waitReasonStrings (runtime/runtime2.go) per Go minor version: g.waitreason
// is an index into it, and the goroutine header prints the string. The enum is reordered
// and extended between versions (1.26 moved several), so each version has its own table.
// Each table was read out of the named real binary's .data (the array of string headers
// starts with "" for waitReasonZero); test/go-static.test.ts reads them again and compares.
// A patch release may append (go1.23.12 has "GC weak to strong wait", go1.23.1 does not):
// a table is the longest one seen for its minor version; earlier indices never move.

// biome-ignore format: tables in the runtime's order, several entries a line to compare versions by eye
export const WAIT_REASONS: Readonly<Record<number, readonly string[]>> = {
  // Go 1.19 source (runtime2.go, Debian golang-1.19-src); fake envd built here with go1.19.8
  19: [
    '', 'GC assist marking', 'IO wait', 'chan receive (nil chan)', 'chan send (nil chan)',
    'dumping heap', 'garbage collection', 'garbage collection scan', 'panicwait', 'select',
    'select (no cases)', 'GC assist wait', 'GC sweep wait', 'GC scavenge wait', 'chan receive',
    'chan send', 'finalizer wait', 'force gc (idle)', 'semacquire', 'sleep', 'sync.Cond.Wait',
    'timer goroutine (idle)', 'trace reader (blocked)', 'wait for GC cycle', 'GC worker (idle)',
    'preempted', 'debug call',
  ],
  // esbuild 0.17.19 (go1.20.4) and 0.21.5 (go1.20.12)
  20: [
    '', 'GC assist marking', 'IO wait', 'chan receive (nil chan)', 'chan send (nil chan)',
    'dumping heap', 'garbage collection', 'garbage collection scan', 'panicwait', 'select',
    'select (no cases)', 'GC assist wait', 'GC sweep wait', 'GC scavenge wait', 'chan receive',
    'chan send', 'finalizer wait', 'force gc (idle)', 'semacquire', 'sleep', 'sync.Cond.Wait',
    'sync.Mutex.Lock', 'sync.RWMutex.RLock', 'sync.RWMutex.Lock', 'trace reader (blocked)',
    'wait for GC cycle', 'GC worker (idle)', 'GC worker (active)', 'preempted', 'debug call',
    'GC mark termination', 'stopping the world',
  ],
  // buf 1.28.1 protoc-gen-buf-lint (go1.21.4)
  21: [
    '', 'GC assist marking', 'IO wait', 'chan receive (nil chan)', 'chan send (nil chan)',
    'dumping heap', 'garbage collection', 'garbage collection scan', 'panicwait', 'select',
    'select (no cases)', 'GC assist wait', 'GC sweep wait', 'GC scavenge wait', 'chan receive',
    'chan send', 'finalizer wait', 'force gc (idle)', 'semacquire', 'sleep', 'sync.Cond.Wait',
    'sync.Mutex.Lock', 'sync.RWMutex.RLock', 'sync.RWMutex.Lock', 'trace reader (blocked)',
    'wait for GC cycle', 'GC worker (idle)', 'GC worker (active)', 'preempted', 'debug call',
    'GC mark termination', 'stopping the world',
  ],
  // esbuild 0.23.1 (go1.22.5)
  22: [
    '', 'GC assist marking', 'IO wait', 'chan receive (nil chan)', 'chan send (nil chan)',
    'dumping heap', 'garbage collection', 'garbage collection scan', 'panicwait', 'select',
    'select (no cases)', 'GC assist wait', 'GC sweep wait', 'GC scavenge wait', 'chan receive',
    'chan send', 'finalizer wait', 'force gc (idle)', 'semacquire', 'sleep', 'sync.Cond.Wait',
    'sync.Mutex.Lock', 'sync.RWMutex.RLock', 'sync.RWMutex.Lock', 'trace reader (blocked)',
    'wait for GC cycle', 'GC worker (idle)', 'GC worker (active)', 'preempted', 'debug call',
    'GC mark termination', 'stopping the world', 'flushing proc caches', 'trace goroutine status',
    'trace proc status', 'page trace flush', 'coroutine',
  ],
  // esbuild 0.25.12 (go1.23.12; go1.23.1 in esbuild 0.24.2 has the first 37)
  23: [
    '', 'GC assist marking', 'IO wait', 'chan receive (nil chan)', 'chan send (nil chan)',
    'dumping heap', 'garbage collection', 'garbage collection scan', 'panicwait', 'select',
    'select (no cases)', 'GC assist wait', 'GC sweep wait', 'GC scavenge wait', 'chan receive',
    'chan send', 'finalizer wait', 'force gc (idle)', 'semacquire', 'sleep', 'sync.Cond.Wait',
    'sync.Mutex.Lock', 'sync.RWMutex.RLock', 'sync.RWMutex.Lock', 'trace reader (blocked)',
    'wait for GC cycle', 'GC worker (idle)', 'GC worker (active)', 'preempted', 'debug call',
    'GC mark termination', 'stopping the world', 'flushing proc caches', 'trace goroutine status',
    'trace proc status', 'page trace flush', 'coroutine', 'GC weak to strong wait',
  ],
  // buf 1.55.1 protoc-gen-buf-lint (go1.24.4)
  24: [
    '', 'GC assist marking', 'IO wait', 'chan receive (nil chan)', 'chan send (nil chan)',
    'dumping heap', 'garbage collection', 'garbage collection scan', 'panicwait', 'select',
    'select (no cases)', 'GC assist wait', 'GC sweep wait', 'GC scavenge wait', 'chan receive',
    'chan send', 'finalizer wait', 'force gc (idle)', 'semacquire', 'sleep', 'sync.Cond.Wait',
    'sync.Mutex.Lock', 'sync.RWMutex.RLock', 'sync.RWMutex.Lock', 'sync.WaitGroup.Wait',
    'trace reader (blocked)', 'wait for GC cycle', 'GC worker (idle)', 'GC worker (active)',
    'preempted', 'debug call', 'GC mark termination', 'stopping the world', 'flushing proc caches',
    'trace goroutine status', 'trace proc status', 'page trace flush', 'coroutine',
    'GC weak to strong wait', 'synctest.Run', 'synctest.Wait', 'chan receive (synctest)',
    'chan send (synctest)', 'select (synctest)',
  ],
  // esbuild 0.27.7 (go1.25.7)
  25: [
    '', 'GC assist marking', 'IO wait', 'chan receive (nil chan)', 'chan send (nil chan)',
    'dumping heap', 'garbage collection', 'garbage collection scan', 'panicwait', 'select',
    'select (no cases)', 'GC assist wait', 'GC sweep wait', 'GC scavenge wait', 'chan receive',
    'chan send', 'finalizer wait', 'force gc (idle)', 'GOMAXPROCS updater (idle)', 'semacquire',
    'sleep', 'sync.Cond.Wait', 'sync.Mutex.Lock', 'sync.RWMutex.RLock', 'sync.RWMutex.Lock',
    'sync.WaitGroup.Wait', 'trace reader (blocked)', 'wait for GC cycle', 'GC worker (idle)',
    'GC worker (active)', 'preempted', 'debug call', 'GC mark termination', 'stopping the world',
    'flushing proc caches', 'trace goroutine status', 'trace proc status', 'page trace flush',
    'coroutine', 'GC weak to strong wait', 'synctest.Run', 'synctest.Wait', 'chan receive (durable)',
    'chan send (durable)', 'select (durable)', 'sync.WaitGroup.Wait (durable)', 'cleanup wait',
  ],
  // esbuild 0.28.2 (go1.26.5)
  26: [
    '', 'GC assist marking', 'IO wait', 'dumping heap', 'garbage collection',
    'garbage collection scan', 'panicwait', 'GC assist wait', 'GC sweep wait', 'GC scavenge wait',
    'finalizer wait', 'force gc (idle)', 'GOMAXPROCS updater (idle)', 'semacquire', 'sleep',
    'chan receive (nil chan)', 'chan send (nil chan)', 'select (no cases)', 'select', 'chan receive',
    'chan send', 'sync.Cond.Wait', 'sync.Mutex.Lock', 'sync.RWMutex.RLock', 'sync.RWMutex.Lock',
    'sync.WaitGroup.Wait', 'trace reader (blocked)', 'wait for GC cycle', 'GC worker (idle)',
    'GC worker (active)', 'preempted', 'debug call', 'GC mark termination', 'stopping the world',
    'flushing proc caches', 'trace goroutine status', 'trace proc status', 'page trace flush',
    'coroutine', 'GC weak to strong wait', 'synctest.Run', 'synctest.Wait', 'chan receive (durable)',
    'chan send (durable)', 'select (durable)', 'sync.WaitGroup.Wait (durable)', 'cleanup wait',
  ],
};

/** The string Go prints for wait reason `index` (waitReason.String). */
export function waitReasonString(minor: number, index: number): string {
  const table = WAIT_REASONS[minor];
  const s = table?.[index];
  return s ?? 'unknown wait reason';
}
