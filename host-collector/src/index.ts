// Entry point of the vsockdiag CLI bundle.
import { main } from './cli/main.js';

await main(process.argv);
