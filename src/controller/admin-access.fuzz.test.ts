/**
 * The admin port's access checks read what a remote client chose: the request target and (through
 * the kernel) its address. Under arbitrary targets built from the pieces that confuse path
 * matching (dot segments, percent escapes, doubled slashes, authorities, queries, fragments), a
 * target `isPublicAdminPath` lets through is answered only as /live, /ready or /metrics, never by
 * a JSON route or the API; and `isLoopbackPeer` says loopback exactly for 127/8 and ::1 in every
 * spelling.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import fc from 'fast-check';
import { fuzzParams } from '../shared/testing/fuzz.js';
import { type AdminState, handleAdminRequest } from './admin-api.js';
import { isLoopbackPeer, isPublicAdminPath } from './admin-server.js';

const PUBLIC_BODIES = new Set(['live\n', 'ready\n', 'not ready\n', 'METRICS']);

const reached = (what: string) => (): never => {
  throw new Error(`protected ${what} reached`);
};

/** An admin state whose every protected part throws: only /live, /ready and /metrics answer. */
const STATE = {
  view: undefined,
  isReady: () => true,
  settings: reached('settings'),
  files: reached('files'),
  resources: reached('resources'),
  metrics: () => Promise.resolve({ contentType: 'text/plain', text: 'METRICS' }),
  identityOf: reached('identityOf'),
  routes: [
    { path: '/api/v1/tap', handle: reached('tap route') },
    { path: /^\/api\/v1\/(.+)$/, handle: reached('api route') },
    { path: /^\/dashboard(\/.*)?$/, handle: reached('dashboard route') },
  ],
} as unknown as AdminState;

const PIECES = [
  '/',
  '//',
  '.',
  '..',
  '%2e',
  '%2E',
  '%2f',
  '%2F',
  '%6d',
  '%00',
  '\\',
  'metrics',
  'live',
  'ready',
  'api',
  'v1',
  'tap',
  'pods',
  'dashboard',
  '?',
  '#',
  '@',
  ':',
  'http:',
  'x',
  '%',
  ';',
  ' ',
];
const PREFIXES = ['/metrics', '/live', '/ready', '/', '//', 'http://h', ''];
const SEGMENTS = ['/..', '/%2e%2e', '/.', '/api/v1/pods', '/api/v1/tap', '/dashboard/', '/metrics', '?/metrics', '#/metrics'];
const target = fc
  .tuple(fc.constantFrom(...PREFIXES), fc.array(fc.oneof(fc.constantFrom(...SEGMENTS), fc.constantFrom(...PIECES)), { maxLength: 10 }))
  .map(([prefix, parts]) => prefix + parts.join(''));

describe('admin access under hostile input', () => {
  it('a target judged public is answered only as a probe or metrics', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.oneof(
          target,
          fc.string({ maxLength: 40 }).map((s) => `/${s}`),
        ),
        async (raw) => {
          if (!isPublicAdminPath(raw)) return;
          for (const method of ['GET', 'HEAD', 'POST']) {
            const r = await handleAdminRequest(STATE, method, raw, '{}');
            assert.ok(r.status === 405 || PUBLIC_BODIES.has(String(r.body)), `${method} ${JSON.stringify(raw)} answered ${r.status} ${String(r.body)}`);
          }
        },
      ),
      fuzzParams(300),
    );
  });

  it('says loopback exactly for 127/8 and ::1, in IPv4, IPv4-mapped and IPv6 spellings, and never throws', () => {
    fc.assert(
      fc.property(fc.tuple(fc.nat(255), fc.nat(255), fc.nat(255), fc.nat(255)), (o) => {
        const dotted = o.join('.');
        const loop = o[0] === 127;
        assert.equal(isLoopbackPeer(dotted), loop, dotted);
        assert.equal(isLoopbackPeer(`::ffff:${dotted}`), loop, `::ffff:${dotted}`);
        const hex = `::ffff:${((o[0] << 8) | o[1]).toString(16)}:${((o[2] << 8) | o[3]).toString(16)}`;
        assert.equal(isLoopbackPeer(hex), loop, hex);
      }),
      fuzzParams(500),
    );
    fc.assert(
      fc.property(fc.string({ maxLength: 60 }), (s) => {
        const r = isLoopbackPeer(s);
        assert.equal(typeof r, 'boolean');
        if (r) assert.ok(s.startsWith('127.') || s.includes(':'), s);
      }),
      fuzzParams(500),
    );
  });
});
