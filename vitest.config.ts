import { defineConfig } from 'vitest/config';

// One run covers every package; each package's tests live in its own test/ folder.
export default defineConfig({
  test: {
    projects: [
      { test: { name: 'proto', include: ['proto/test/**/*.test.ts'] } },
      { test: { name: 'guest-probe', include: ['guest-probe/test/**/*.test.ts'] } },
      { test: { name: 'host-collector', include: ['host-collector/test/**/*.test.ts'] } },
      {
        test: {
          name: 'integration',
          include: ['test/**/*.test.ts'],
          testTimeout: 60_000,
          hookTimeout: 120_000,
          // Real processes, namespaces and sockets: run files one at a time on a 2-core machine.
          fileParallelism: false,
        },
      },
    ],
  },
});
