// Builds the guest install into dist/: the probe bundled into one CommonJS file, the launcher
// init runs, V8's code cache for the bundle, and the native addon:
//   vsockdiag-probe.js            the launcher (src/launcher.ts): compiles the bundle with the cache
//   vsockdiag-probe.bundle.js     everything else (src/index.ts and what it imports, + @vsockdiag/proto)
//   vsockdiag-probe.bundle.cache  V8 bytecode of the start-up path (code-cache.mjs); optional at run time
//   vsockdiag.node                the addon (native/)
// CommonJS rather than ES modules: Node 20 starts a CommonJS file faster, and the probe's
// start-up is on every boot's path.
//
//   node guest-probe/build.mjs [--out DIR] [--no-minify]   (the benchmark profiles an unminified build)
import fs from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { build } from 'esbuild';
import { writeCodeCache } from './code-cache.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));
const { values: opts } = parseArgs({ options: { out: { type: 'string' }, 'no-minify': { type: 'boolean' } } });
const out = path.resolve(opts.out ?? path.join(here, 'dist'));
fs.mkdirSync(out, { recursive: true });
// dist/ sits inside this "type": "module" package: say its .js files are CommonJS. (Installed
// into a VM, next to no package.json, .js files are CommonJS anyway.)
fs.writeFileSync(path.join(out, 'package.json'), '{ "type": "commonjs" }\n');

// Node's built-ins as ES modules, without esbuild's CommonJS interop. Bundled as CommonJS,
// `import fs from 'node:fs'` becomes __toESM(require('node:fs')), which defines a getter for
// every export of the module (a hundred for node:fs), again in every file that imports it:
// about 1.5 ms of the probe's start-up for its dozen such imports. Instead each built-in is
// one small module: the require()d object as its default export, and each plain property
// (the names as the building Node has them; accessors such as fs.promises are left out, so
// that nothing lazy is loaded early) as a named one. A named export is read in a call marked
// pure, which esbuild drops when nothing imports that name: a plain `m.name` read might run a
// getter, so esbuild kept all of them (copying ~250 properties at start, in the launcher too:
// 1.5–2 ms of exec → hello, and 14 KB of code cache).
const requireBuiltin = createRequire(import.meta.url);
const builtinsAsEsm = {
  name: 'builtins-as-esm',
  setup(b) {
    b.onResolve({ filter: /^node:/ }, (args) =>
      args.kind === 'import-statement' ? { path: args.path, namespace: 'builtin-esm' } : undefined,
    );
    b.onLoad({ filter: /.*/, namespace: 'builtin-esm' }, (args) => {
      const mod = requireBuiltin(args.path);
      const names = Object.keys(mod).filter(
        (k) => k !== 'default' && /^[A-Za-z_$][\w$]*$/.test(k) && !Object.getOwnPropertyDescriptor(mod, k).get,
      );
      const lines = [
        `const m = require(${JSON.stringify(args.path)});`,
        'export default m;',
        ...names.map((k) => `export const ${k} = /* @__PURE__ */ (() => m.${k})();`),
      ];
      return { contents: lines.join('\n'), loader: 'js' };
    });
  },
};

const common = {
  bundle: true,
  platform: 'node',
  format: 'cjs',
  target: 'node20',
  minify: !opts['no-minify'],
  sourcemap: false,
  legalComments: 'none',
  logLevel: 'warning',
  // ES module builds of dependencies (@msgpack/msgpack has both): no CommonJS interop
  // wrappers to run at start-up, and unused exports are dropped.
  mainFields: ['module', 'main'],
  plugins: [builtinsAsEsm],
};
// Written beside the final name and renamed over it: a running probe keeps reading its files.
const tmp = (name) => path.join(out, `${name}.tmp`);
const commit = (name) => fs.renameSync(tmp(name), path.join(out, name));

// The bundle is written as one function expression, called at its end:
//   (function (exports, require, module, __filename, __dirname) {BODY
//   })(exports, require, module, __filename, __dirname);
// Node runs the file as it is (a CommonJS module whose one statement calls the function); the
// launcher compiles the file less its last line, the function, from the file's own pages
// (launcher.ts: the addon maps it, so V8 keeps no copy of the text in its heap). The
// "use strict" directive opens the function's body, which makes the whole bundle strict code,
// as its ES module sources were.
const BUNDLE_HEAD = '(function (exports, require, module, __filename, __dirname) {';
/** What the launcher takes off the file's end; it passes the same string to the addon. */
const BUNDLE_TRAILER = '(exports, require, module, __filename, __dirname);\n';

await build({
  ...common,
  entryPoints: [path.join(here, 'src/index.ts')],
  outfile: tmp('vsockdiag-probe.bundle.js'),
  // import.meta.url (native.ts's development path, the lazy requires' base), which CommonJS
  // has not, made when first read: nothing before the hello needs it, and pathToFileURL is
  // 0.2 ms of a cold start. The banner comes before esbuild's own "use strict", so it repeats
  // it: only a directive at the very start makes the bundle strict code, as its ES module
  // sources were.
  define: { 'import.meta.url': '__probe_url.href' },
  banner: {
    js: '"use strict";const __probe_url = { get href() { return require("node:url").pathToFileURL(__filename).href; } };',
  },
});
{
  const file = tmp('vsockdiag-probe.bundle.js');
  fs.writeFileSync(file, `${BUNDLE_HEAD}${fs.readFileSync(file, 'utf8')}\n})${BUNDLE_TRAILER}`);
}
await build({
  ...common,
  entryPoints: [path.join(here, 'src/launcher.ts')],
  outfile: tmp('vsockdiag-probe.js'),
  banner: { js: '#!/usr/bin/env node' },
  define: { BUNDLE_TRAILER: JSON.stringify(BUNDLE_TRAILER) },
});
fs.chmodSync(tmp('vsockdiag-probe.js'), 0o755);
// The addon likewise by rename, never in place: a running probe has it mapped, and
// overwriting the file under it would crash that probe.
fs.copyFileSync(path.join(here, 'native/build/Release/vsockdiag.node'), tmp('vsockdiag.node'));
for (const name of ['vsockdiag-probe.bundle.js', 'vsockdiag-probe.js', 'vsockdiag.node']) commit(name);

const cache = await writeCodeCache(out);
const kib = (name) => `${(fs.statSync(path.join(out, name)).size / 1024).toFixed(1)} KiB`;
console.log(
  `guest-probe: ${path.relative(process.cwd(), out) || '.'}/vsockdiag-probe.js ${kib('vsockdiag-probe.js')} + bundle ${kib('vsockdiag-probe.bundle.js')}` +
    ` + code cache ${kib('vsockdiag-probe.bundle.cache')} (${cache}) + vsockdiag.node`,
);
