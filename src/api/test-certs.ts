/**
 * Test PKI for this module's TLS tests (not part of the public surface): an ECDSA P-256 CA and
 * leaf certificates with one DNS SAN each (serverAuth and clientAuth), made with the openssl CLI.
 */
import { execFileSync } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

/** A leaf's PEM certificate and key. */
export interface TestLeaf {
  readonly certPem: string;
  readonly keyPem: string;
}

/** Writes the CA and one leaf per entry of `leaves` (name → DNS SAN) into `dir`. */
export function makeTestPki<N extends string>(dir: string, leaves: Readonly<Record<N, string>>): { caPem: string; leaves: Record<N, TestLeaf> } {
  const ssl = (...args: string[]) => execFileSync('openssl', args, { cwd: dir, stdio: 'pipe' });
  const read = (f: string) => readFileSync(join(dir, f), 'utf8');
  ssl('ecparam', '-name', 'prime256v1', '-genkey', '-noout', '-out', 'ca.key');
  ssl('req', '-x509', '-new', '-key', 'ca.key', '-subj', '/CN=ward-test-ca', '-days', '1', '-out', 'ca.crt');
  const out = {} as Record<N, TestLeaf>;
  for (const [name, dns] of Object.entries(leaves) as [N, string][]) {
    ssl('ecparam', '-name', 'prime256v1', '-genkey', '-noout', '-out', `${name}.key`);
    ssl('req', '-new', '-key', `${name}.key`, '-subj', `/CN=${name}`, '-out', `${name}.csr`);
    writeFileSync(join(dir, `${name}.ext`), `subjectAltName=DNS:${dns}\nextendedKeyUsage=serverAuth,clientAuth\n`);
    ssl(
      'x509',
      '-req',
      '-in',
      `${name}.csr`,
      '-CA',
      'ca.crt',
      '-CAkey',
      'ca.key',
      '-CAcreateserial',
      '-days',
      '1',
      '-out',
      `${name}.crt`,
      '-extfile',
      `${name}.ext`,
    );
    out[name] = { certPem: read(`${name}.crt`), keyPem: read(`${name}.key`) };
  }
  return { caPem: read('ca.crt'), leaves: out };
}
