/**
 * The one place `@peculiar/x509` is imported. The library resolves its services through
 * tsyringe, which throws at import time unless `reflect-metadata` has been loaded first, so the
 * polyfill import must stay above it. Every other file of this module imports `x509` from here.
 */
import 'reflect-metadata';
import { webcrypto } from 'node:crypto';
import * as x509 from '@peculiar/x509';

// Node's WebCrypto, explicitly: the library's default is `globalThis.crypto`, which a test
// runner or polyfill could replace.
x509.cryptoProvider.set(webcrypto);

export { x509 };

/** A WebCrypto key (node:crypto's, since the DOM lib is not loaded). */
export type CryptoKey = webcrypto.CryptoKey;

/** OIDs of the extensions read from CSRs (`Pkcs10CertificateRequest.getExtension` accepts only OID strings). */
export const OID = {
  subjectAltName: '2.5.29.17',
  basicConstraints: '2.5.29.19',
  keyUsage: '2.5.29.15',
  extKeyUsage: '2.5.29.37',
  subjectKeyIdentifier: '2.5.29.14',
  authorityKeyIdentifier: '2.5.29.35',
} as const;
