/**
 * The one place `@peculiar/x509` is loaded, lazily: only creating the self-signed root and
 * intermediate CA certificates (`ward identity init`, tests) needs it. The library and what it
 * pulls in (reflect-metadata, tsyringe, the asn1 schema packages: ~230 CommonJS modules, ~20 MB
 * of RSS) must stay out of the proxy, which imports this module's public surface in every pod;
 * everything else reads and writes DER itself (der.ts). Types come from `import type`, which is
 * erased, so importing this file loads nothing.
 */
import { webcrypto } from 'node:crypto';
import { createRequire } from 'node:module';
import type * as X509 from '@peculiar/x509';

export type { X509 };

let loaded: typeof X509 | undefined;

/** The library, loaded on first use (synchronously, through its CommonJS build). */
export function x509(): typeof X509 {
  if (loaded === undefined) {
    const require = createRequire(import.meta.url);
    // The library resolves its services through tsyringe, which throws at load time unless
    // the reflect-metadata polyfill has been loaded first, so it must be required before it.
    require('reflect-metadata');
    const lib = require('@peculiar/x509') as typeof X509;
    // Node's WebCrypto, explicitly: the library's default is `globalThis.crypto`, which a test
    // runner or polyfill could replace.
    lib.cryptoProvider.set(webcrypto);
    loaded = lib;
  }
  return loaded;
}
