// Preloaded into a process (node --require this file) to see from outside which of Node's
// own public modules it has loaded: on SIGUSR2 it writes their names, as a JSON array, to
// $VD_MODULES_NOTE. Nothing else.
const fs = require('node:fs');

process.on('SIGUSR2', () => {
  const names = process.moduleLoadList
    .filter((m) => m.startsWith('NativeModule ') && !m.startsWith('NativeModule internal/'))
    .map((m) => m.slice('NativeModule '.length));
  fs.writeFileSync(process.env.VD_MODULES_NOTE, JSON.stringify(names));
});
