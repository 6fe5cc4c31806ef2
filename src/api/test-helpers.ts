/**
 * Builders shared by this module's tests (not part of the public surface): a test PKI made with
 * the openssl CLI, a policy cell the inbound policy service can watch, a polling wait, and the
 * GrpcError a call rejects with.
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { deepEqual, type InboundServer } from '../core/index.js';
import { GrpcError } from './grpc-error.js';
import type { WatchableCell } from './inbound-service.js';

/** A latest-value cell like the index's PolicyCell: publishes only real changes. */
export class FakeCell implements WatchableCell {
  value: InboundServer;
  readonly listeners = new Set<(v: InboundServer) => void>();

  constructor(value: InboundServer) {
    this.value = value;
  }

  subscribe(listener: (v: InboundServer) => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  publish(next: InboundServer): void {
    if (deepEqual(next, this.value)) return;
    this.value = next;
    for (const l of this.listeners) l(next);
  }
}

/** Polls `cond` every 5 ms; fails the test with `what` after `timeoutMs`. */
export async function waitFor(cond: () => boolean, what: string, timeoutMs = 5000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!cond()) {
    if (Date.now() > deadline) assert.fail(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 5));
  }
}

/** A leaf's PEM certificate and key. */
export interface TestLeaf {
  readonly certPem: string;
  readonly keyPem: string;
}

/**
 * An ECDSA P-256 CA and leaf certificates with one DNS SAN each (serverAuth and clientAuth):
 * writes the CA and one leaf per entry of `leaves` (name → DNS SAN) into `dir`.
 */
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

/** The GrpcError `p` rejects with; fails the test when it resolves or rejects with anything else. */
export async function rejection(p: Promise<unknown>): Promise<GrpcError> {
  try {
    await p;
  } catch (e) {
    assert.ok(e instanceof GrpcError, `not a GrpcError: ${String(e)}`);
    return e;
  }
  return assert.fail('expected a rejection');
}
