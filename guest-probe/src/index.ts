// The probe bundle's entry (guest-probe/build.mjs bundles it as CommonJS, loaded by
// launcher.ts): no top-level await, which CommonJS has not.
import { main } from './main.js';

main(process.argv.slice(2)).catch((err: unknown) => {
  process.stderr.write(`vsockdiag-probe: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
  process.exit(1);
});
