import { defineConfig } from 'vite';

// The service serves dist/ at / on the same origin as /api, so the dev server proxies
// /api to a running `slicesched serve` (or the mock) instead of needing CORS.
export default defineConfig({
  base: '/',
  build: { outDir: 'dist', emptyOutDir: true, target: 'es2022', sourcemap: false },
  server: { proxy: { '/api': process.env.API_URL ?? 'http://127.0.0.1:8080' } },
});
