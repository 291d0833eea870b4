// A --require preload for the probe's start-up checks (test/integration/probe-launcher.test.ts,
// test/bench/probe-startup.ts; read with hello-note.ts). At the process's first write(2) to a
// socket through node:fs (the probe writes its hello that way, on the raw fd), or at exit if
// there is none (`node -e 0`), it writes $VD_HELLO_NOTE.<pid>.json:
//   { at: 'hello' | 'exit', us: process.hrtime in µs then (the clock of CPU profiles),
//     loaded: Node's own public modules loaded by then }
const fs = require('node:fs');

let noted = false;
function note(at) {
  if (noted) return;
  noted = true;
  const loaded = process.moduleLoadList
    .filter((m) => m.startsWith('NativeModule ') && !m.includes('internal/'))
    .map((m) => m.slice('NativeModule '.length));
  const us = Number(process.hrtime.bigint() / 1000n);
  fs.writeFileSync(`${process.env.VD_HELLO_NOTE}.${process.pid}.json`, JSON.stringify({ at, us, loaded }));
}

const writeSync = fs.writeSync;
fs.writeSync = function (fd, ...rest) {
  if (!noted && fd > 2 && fs.fstatSync(fd).isSocket()) note('hello');
  return writeSync.call(this, fd, ...rest);
};
process.once('exit', () => note('exit'));
