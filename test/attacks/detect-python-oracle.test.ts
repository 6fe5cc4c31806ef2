/**
 * HTTP detection against the most lenient common parser: whatever Python's http.server (and so
 * every WSGI server built on it) would serve as a request must be detected as HTTP, or it would
 * reach such an application as opaque bytes, with no route matching and the caller's
 * `l5d-client-id`. Python parses each generated first line itself (`parse_request`), in one
 * process for the whole batch.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { describe, it } from 'node:test';
import fc from 'fast-check';
import { detectHttp } from '../../src/proxy/transport/detect-http.js';

const RUNS = Number(process.env.WARD_FUZZ_RUNS ?? 400);

/** Reads hex inputs on stdin, prints for each whether http.server would dispatch it to a do_* it has. */
const ORACLE = `
import io, json, sys
from http.server import BaseHTTPRequestHandler
SERVED = {"GET", "POST", "PUT", "DELETE", "HEAD", "OPTIONS", "PATCH"}
class H(BaseHTTPRequestHandler):
    def __init__(self, data):
        self.rfile = io.BytesIO(data)
        self.wfile = io.BytesIO()
        self.client_address = ("127.0.0.1", 0)
        self.request_version = self.default_request_version
        self.command = None
    def log_message(self, *a):
        pass
out = []
for h in json.load(sys.stdin):
    r = H(bytes.fromhex(h))
    r.raw_requestline = r.rfile.readline(65537)
    try:
        ok = bool(r.raw_requestline) and r.parse_request() and r.command in SERVED
    except Exception:
        ok = False
    out.append(bool(ok))
print(json.dumps(out))
`;

function pythonServes(inputs: readonly Buffer[]): boolean[] {
  const r = spawnSync('python3', ['-c', ORACLE], { input: JSON.stringify(inputs.map((b) => b.toString('hex'))), encoding: 'utf8', timeout: 60_000 });
  assert.equal(r.status, 0, r.stderr);
  return JSON.parse(r.stdout) as boolean[];
}

const b = (s: string) => Buffer.from(s, 'latin1');
const ws = fc.constantFrom(' ', '  ', '\t', '\x0b', '\x0c', '\x1c', '\x1f', '\r', '\xa0', '\x85', ' \t ');
const method = fc.constantFrom('GET', 'POST', 'DELETE', 'OPTIONS', 'PATCH', 'get', 'Get', 'PRI', 'BREW', 'G-T');
const target = fc.oneof(
  fc.constantFrom('/', '/admin', '//admin', '/a?b=c', '*', 'http://x/admin', '/%2e%2e/admin'),
  fc.string({ unit: fc.integer({ min: 0x21, max: 0xff }).map((c) => String.fromCharCode(c)), minLength: 1, maxLength: 30 }),
);
const version = fc.constantFrom('HTTP/1.1', 'HTTP/1.0', 'HTTP/0.9', 'HTTP/2.0', 'HTTP/1.01', 'http/1.1', 'HTTP/11', '');
const lineEnd = fc.constantFrom('\r\n', '\n', '\r\r\n');
const leading = fc.constantFrom('', '', ' ', '\t', '\r\n');
const line = fc
  .tuple(leading, method, ws, target, ws, version, fc.constantFrom('', ' ', '\t'), lineEnd)
  .map(([lead, m, w1, t, w2, v, trail, end]) => b(`${lead}${m}${w1}${t}${v === '' ? '' : w2 + v}${trail}${end}Host: x${end}${end}`));

describe("HTTP detection covers Python's http.server", () => {
  it('detects as HTTP every first line http.server would serve', () => {
    const inputs = fc.sample(line, { numRuns: RUNS, seed: Number(process.env.WARD_FUZZ_SEED ?? 42) });
    const served = pythonServes(inputs);
    const missed = inputs.filter((input, i) => served[i] === true && detectHttp(input) !== 'http1');
    assert.deepEqual(
      missed.map((m) => m.toString('latin1')),
      [],
    );
    assert.ok(served.filter(Boolean).length > inputs.length / 10, 'the generator makes requests Python serves');
  });

  it('keeps the lines no common server serves opaque', () => {
    const opaque = ['SSH-2.0-OpenSSH_9.6 Ubuntu\r\n', 'EHLO mail.example\r\n', 'get some-key\r\n', 'PING\r\n'].map(b);
    assert.deepEqual(pythonServes(opaque), [false, false, false, false]);
    for (const o of opaque) assert.equal(detectHttp(o), 'not-http', o.toString('latin1'));
  });
});
