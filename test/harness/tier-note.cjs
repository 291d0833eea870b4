// Preloaded into a probe (node --allow-natives-syntax --require this file) by
// probe-launcher.test.ts, to see from inside what V8 does once the probe is up
// (guest-probe/src/v8-flags.ts). Once the probe has loaded node:v8 (it sets V8's flags in the
// same turn), or after 3 s if it never does: asks V8 to optimise a function of this file's,
// then makes 16 MB of garbage and counts the collections that follow. With
// VD_TIER_UNTIL=full-gc it makes garbage again every 100 ms until a round sees full
// collections only (or 10 s have passed). Then it writes to $VD_TIER_NOTE
//   {"v8Loaded": bool, "status": %GetOptimizationStatus bits (16: optimised),
//    "minor": scavenges, "major": full collections (of the last round)}
const fs = require('node:fs');
const { PerformanceObserver, constants } = require('node:perf_hooks');

// V8's natives syntax stays in strings, made into functions here: to every other tool (the
// linter, an editor) this file is plain JavaScript.
const natives = (body) => new Function('f', body);
const prepare = natives('%PrepareFunctionForOptimization(f)');
const optimiseOnNextCall = natives('%OptimizeFunctionOnNextCall(f)');
const optimisationStatus = natives('return %GetOptimizationStatus(f)');

function add(x) {
  return x + 1;
}
function status() {
  prepare(add);
  add(1);
  add(2);
  optimiseOnNextCall(add);
  add(3);
  return optimisationStatus(add);
}

const note = { v8Loaded: false, status: 0, minor: 0, major: 0 };
let counting = false;
new PerformanceObserver((list) => {
  if (!counting) return;
  for (const e of list.getEntries()) {
    if (e.detail.kind === constants.NODE_PERFORMANCE_GC_MINOR) note.minor++;
    if (e.detail.kind === constants.NODE_PERFORMANCE_GC_MAJOR) note.major++;
  }
}).observe({ entryTypes: ['gc'] });

// Where the garbage goes: each object outlives its turn of the loop, so none is optimised away.
const keep = new Array(64);
function round(then) {
  note.minor = 0;
  note.major = 0;
  counting = true;
  for (let i = 0; i < 200_000; i++) keep[i % 64] = { i, pad: [i, i, i, i, i, i, i, i] };
  // The observer hears of the collections after this turn.
  setTimeout(() => {
    counting = false;
    then();
  }, 100);
}

const started = Date.now();
const write = () => fs.writeFileSync(process.env.VD_TIER_NOTE, JSON.stringify(note));
const untilFullOnly = () => {
  if ((note.minor === 0 && note.major > 0) || Date.now() - started > 10_000) write();
  else round(untilFullOnly);
};
const timer = setInterval(() => {
  note.v8Loaded = process.moduleLoadList.includes('NativeModule v8');
  if (!note.v8Loaded && Date.now() - started < 3000) return;
  clearInterval(timer);
  note.status = status();
  round(process.env.VD_TIER_UNTIL === 'full-gc' ? untilFullOnly : write);
}, 10);
timer.unref();
