/**
 * The dashboard's build: a Vite root whose output goes to dist/dashboard, served by the
 * controller's admin port under /dashboard/. No external assets: everything is bundled, and the
 * layout engine (elkjs) is a chunk of its own, loaded when the graph is first shown.
 */
import { fileURLToPath } from 'node:url';
import preact from '@preact/preset-vite';
import { defineConfig } from 'vite';

export default defineConfig({
  root: fileURLToPath(new URL('.', import.meta.url)),
  base: '/dashboard/',
  plugins: [preact({ devToolsInProd: false, prefreshEnabled: false })],
  logLevel: 'warn',
  build: {
    outDir: fileURLToPath(new URL('../dist/dashboard', import.meta.url)),
    emptyOutDir: true,
    target: 'es2022',
    // The inline module-preload polyfill would need 'unsafe-inline' under the controller's CSP.
    modulePreload: { polyfill: false },
    chunkSizeWarningLimit: 2000,
    reportCompressedSize: false,
  },
});
