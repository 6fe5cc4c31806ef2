/**
 * ECDSA keys: generation, PKCS#8 PEM export/import, and the bridge from node:crypto `KeyObject`
 * to the WebCrypto keys the X.509 builder signs with.
 */
import { createPrivateKey, type KeyObject, webcrypto } from 'node:crypto';
import { errorMessage } from '../shared/index.js';
import { encodePem } from './pem.js';

/** A WebCrypto key (node:crypto's, since the DOM lib is not loaded). */
export type CryptoKey = webcrypto.CryptoKey;

/** The only curve ward generates keys on. */
export const WORKLOAD_CURVE = 'P-256';

/** WebCrypto algorithm for ECDSA P-256 with SHA-256 (key generation and signing). */
export const ECDSA_P256_SHA256 = { name: 'ECDSA', namedCurve: 'P-256', hash: 'SHA-256' } as const;

/** A WebCrypto key pair. */
export interface EcKeyPair {
  readonly privateKey: CryptoKey;
  readonly publicKey: CryptoKey;
}

/** A fresh, extractable ECDSA P-256 key pair. */
export async function generateEcKeyPair(): Promise<EcKeyPair> {
  const pair = (await webcrypto.subtle.generateKey(ECDSA_P256_SHA256, true, ['sign', 'verify'])) as webcrypto.CryptoKeyPair;
  return { privateKey: pair.privateKey, publicKey: pair.publicKey };
}

/** PKCS#8 `PRIVATE KEY` PEM of an extractable WebCrypto private key. */
export async function privateKeyToPem(key: CryptoKey): Promise<string> {
  return encodePem('PRIVATE KEY', await webcrypto.subtle.exportKey('pkcs8', key));
}

const NODE_CURVES: Readonly<Record<string, string>> = { prime256v1: 'P-256', secp384r1: 'P-384', secp521r1: 'P-521' };

/** A parsed private key with a human description of its type (`ECDSA P-256`, `RSA 2048`). */
export type ParsedPrivateKey =
  | { readonly ok: true; readonly key: KeyObject; readonly curve: string | undefined; readonly description: string }
  | { readonly ok: false; readonly detail: string };

/** Parses a private key PEM (PKCS#8, or the SEC1/PKCS#1 forms openssl writes). */
export function parsePrivateKeyPem(pem: string): ParsedPrivateKey {
  if (!pem.includes('-----BEGIN')) return { ok: false, detail: 'no PEM block found' };
  let key: KeyObject;
  try {
    key = createPrivateKey({ key: pem, format: 'pem' });
  } catch (e) {
    return { ok: false, detail: `not a readable private key (${errorMessage(e)})` };
  }
  return { ok: true, key, curve: curveOf(key), description: describeKey(key) };
}

/** The WebCrypto curve name of an EC key, or undefined for other key types. */
export function curveOf(key: KeyObject): string | undefined {
  if (key.asymmetricKeyType !== 'ec') return undefined;
  const nodeCurve = key.asymmetricKeyDetails?.namedCurve;
  return nodeCurve === undefined ? undefined : (NODE_CURVES[nodeCurve] ?? nodeCurve);
}

/** `ECDSA P-256`, `RSA 2048`, `ED25519`… for messages and `inspect`. */
export function describeKey(key: KeyObject): string {
  const details = key.asymmetricKeyDetails;
  switch (key.asymmetricKeyType) {
    case 'ec':
      return `ECDSA ${curveOf(key) ?? 'unknown curve'}`;
    case 'rsa':
    case 'rsa-pss':
      return `RSA ${details?.modulusLength ?? '?'}`;
    default:
      return (key.asymmetricKeyType ?? key.type).toUpperCase();
  }
}

/** Imports an EC private `KeyObject` as a non-extractable WebCrypto ECDSA signing key. */
export async function toSigningKey(key: KeyObject): Promise<CryptoKey> {
  const namedCurve = curveOf(key);
  if (namedCurve === undefined) throw new TypeError(`not an EC key: ${describeKey(key)}`);
  const der = key.export({ type: 'pkcs8', format: 'der' });
  return webcrypto.subtle.importKey('pkcs8', der, { name: 'ECDSA', namedCurve }, false, ['sign']);
}
