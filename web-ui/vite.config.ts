import react from '@vitejs/plugin-react';
import { defineConfig } from 'vite';

export default defineConfig({
  plugins: [react()],
  build: { outDir: 'dist', emptyOutDir: true, chunkSizeWarningLimit: 800 },
  // `vite` dev server: talk to a collector on the default address.
  // /v1 includes the /v1/stream WebSocket, hence ws: true.
  server: { proxy: { '/v1': { target: 'http://127.0.0.1:7070', ws: true }, '/healthz': 'http://127.0.0.1:7070' } },
});
