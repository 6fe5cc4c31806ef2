import assert from 'node:assert/strict';
import { METHODS } from 'node:http';
import { describe, it } from 'node:test';
import fc from 'fast-check';
import { record } from '../testing/client-hello-fixtures.js';
import { detectHttp, detectHttpUndecided, HTTP1_MAX_REQUEST_LINE_BYTES, HTTP2_PREFACE, type HttpDetection } from './detect-http.js';

const b = (s: string) => Buffer.from(s, 'latin1');

/** Every strict prefix needs more, the input decides `want`, and so does the input plus more bytes. */
function assertDecidedAtEnd(input: Buffer, want: HttpDetection): void {
  for (let k = 0; k < input.length; k++)
    assert.equal(detectHttp(input.subarray(0, k)), 'need-more', `prefix ${JSON.stringify(input.subarray(0, k).toString('latin1'))}`);
  assert.equal(detectHttp(input), want);
  assert.equal(detectHttp(Buffer.concat([input, b('Host: x\r\n\r\n')])), want);
}

describe('detectHttp', () => {
  it('detects HTTP/2 prior knowledge only on the exact preface, split anywhere', () => {
    assertDecidedAtEnd(b(HTTP2_PREFACE), 'http2');
    assert.equal(detectHttp(b(`${HTTP2_PREFACE}\x00\x00\x12\x04`)), 'http2');
    // A divergent preface is an HTTP/1 line (`PRI * HTTP/2.0`) for the strict parser to refuse.
    assert.equal(detectHttp(b('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\x00')), 'http1');
    assert.equal(detectHttp(b('PRI * HTTP/2.0\r\n\r\nXX')), 'http1');
    assert.equal(detectHttp(b('PRI * HTTP/1.1\r\n')), 'http1');
  });

  it('detects an HTTP/1 request line as soon as it is complete', () => {
    const lines = [
      'GET / HTTP/1.1\r\n',
      'POST /api/v5/orders?x=1&y=%20 HTTP/1.1\r\n',
      'HEAD /health HTTP/1.0\r\n',
      'OPTIONS * HTTP/1.1\r\n',
      'CONNECT web.ns.svc:8080 HTTP/1.1\r\n',
      'GET http://web.ns.svc/x HTTP/1.1\r\n',
      'M-SEARCH * HTTP/1.1\r\n',
    ];
    for (const line of lines) assertDecidedAtEnd(b(line), 'http1');
    for (const m of METHODS) assert.equal(detectHttp(b(`${m} / HTTP/1.1\r\n`)), 'http1', m);
  });

  // What some common server (Python's http.server and WSGI servers, nginx, Go, node) parses as a
  // request: HTTP, so the strict parser answers it instead of the stream going through as bytes.
  const lenient: [string, string | Buffer][] = [
    ['a lowercase method (Go serves it)', 'get / HTTP/1.1\r\n'],
    ['a mixed-case method', 'Get / HTTP/1.1\r\n'],
    ['an unknown method', 'FETCH / HTTP/1.1\r\n'],
    ['two spaces after the method', 'GET  /admin HTTP/1.1\r\n'],
    ['a tab separator', 'GET\t/admin HTTP/1.1\r\n'],
    ['a vertical tab, form feed and 0x1f', 'GET\x0b/admin\x0cHTTP/1.1\x1f\r\n'],
    ['a CR inside the line', 'GET\r/admin HTTP/1.1\n'],
    ['NBSP (0xa0)', Buffer.concat([b('GET'), Buffer.of(0xa0), b('/admin HTTP/1.1\r\n')])],
    ['a leading space', ' GET /admin HTTP/1.1\r\n'],
    ['a leading empty line', '\r\nGET /admin HTTP/1.1\r\n'],
    ['many leading empty lines', `${'\r\n'.repeat(100)}GET /admin HTTP/1.1\r\n`],
    ['a bare LF', 'GET /admin HTTP/1.1\n'],
    ['a space before CRLF', 'GET /admin HTTP/1.1 \r\n'],
    ['HTTP/0.9 (no version)', 'GET /admin\r\n'],
    ['HTTP/2.0 in a request line', 'GET / HTTP/2.0\r\n'],
    ['HTTP/1.2', 'GET / HTTP/1.2\r\n'],
    ['a lowercase version', 'GET / http/1.1\r\n'],
    ['a space in the target', 'GET /a b HTTP/1.1\r\n'],
    ['a control byte in the target', 'GET /a\x01b HTTP/1.1\r\n'],
    ['raw UTF-8 in the target', Buffer.concat([b('GET /'), Buffer.from('ü', 'utf8'), b(' HTTP/1.1\r\n')])],
    ['a target longer than 8 KiB', `GET /${'a'.repeat(9000)} HTTP/1.1\r\n`],
  ];
  for (const [name, input] of lenient) {
    it(`is HTTP: ${name}`, () => {
      const buf = typeof input === 'string' ? b(input) : input;
      assert.equal(detectHttp(buf), 'http1');
      assert.equal(detectHttp(Buffer.concat([buf, b('Host: x\r\n\r\n')])), 'http1');
    });
  }

  const notHttp: [string, string | Buffer][] = [
    ['one word', 'GET\r\n'],
    ['an empty method and a space', '/ HTTP/1.1\r\n'],
    ['a method with a non-token byte', 'G{T / HTTP/1.1\r\n'],
    ['HTTP/0.9 with another method', 'POST /admin\r\n'],
    ['SSH', 'SSH-2.0-OpenSSH_9.6\r\n'],
    ['SSH with a comment', 'SSH-2.0-OpenSSH_9.6 Ubuntu-3ubuntu13\r\n'],
    ['SMTP-ish', 'EHLO mail.example\r\n'],
    ["memcached's get", 'get some-key\r\n'],
    ['Redis RESP', '*1\r\n$4\r\nPING\r\n'],
    ['a TLS ClientHello record', record(Buffer.of(1, 0, 0, 0))],
    ['a NUL byte', Buffer.of(0)],
    ['binary garbage', Buffer.from('c0ffee00deadbeef', 'hex')],
  ];
  for (const [name, input] of notHttp) {
    it(`is not HTTP: ${name}`, () => {
      const buf = typeof input === 'string' ? b(input) : input;
      assert.equal(detectHttp(buf), 'not-http');
      assert.equal(detectHttp(Buffer.concat([buf, b('GET / HTTP/1.1\r\n')])), 'not-http');
    });
  }

  it('rules TLS out on its first byte', () => {
    assert.equal(detectHttp(Buffer.of(0x16)), 'not-http');
  });

  it('needs more until the first line ends, however long', () => {
    const line = b(`GET /${'a'.repeat(HTTP1_MAX_REQUEST_LINE_BYTES * 2)}`);
    for (const k of [1, 4, 5, 100, HTTP1_MAX_REQUEST_LINE_BYTES, line.length]) assert.equal(detectHttp(line.subarray(0, k)), 'need-more', `${k} bytes`);
    assert.equal(detectHttp(b('\r\n'.repeat(5000))), 'need-more');
  });

  it('rules out a lower-case first word followed by no target at once, without waiting for the line', () => {
    for (const text of ['hello 9002', 'get key', 'auth s3cret', 'ping 1']) assert.equal(detectHttp(b(text)), 'not-http', text);
    for (const text of ['hello /admin', 'get http://x', 'GET key', 'Get *']) assert.equal(detectHttp(b(text)), 'need-more', text);
  });

  it('judges a line still unfinished at the deadline by whether it may still become a request', () => {
    // `GET key HTTP/1.1` is served by Python's http.server (path `key`), headers and all.
    for (const http of [
      'GET',
      'hello',
      '\r\n\r\n',
      'GET ',
      'GET /adm',
      'get\t/',
      'OPTIONS *',
      'GET http:',
      'GET HTTPS://x',
      'get h',
      'GET /x HTT',
      'GET key',
      'AUTH secret',
      'SET a b',
    ]) {
      assert.equal(detectHttpUndecided(b(http)), 'http1', JSON.stringify(http));
    }
    for (const opaque of ['hello 9002', 'get httpx://', 'auth secret', 'get key']) {
      assert.equal(detectHttpUndecided(b(opaque)), 'not-http', JSON.stringify(opaque));
    }
    // Decided lines keep their verdict.
    assert.equal(detectHttpUndecided(b('SSH-2.0-x\r\n')), 'not-http');
    assert.equal(detectHttpUndecided(b('GET / HTTP/1.1\r\n')), 'http1');
    assert.equal(detectHttpUndecided(Buffer.of(0x16)), 'not-http');
  });

  it('is prefix-stable and total on arbitrary and HTTP-like input', () => {
    const httpish = fc
      .tuple(
        fc.constantFrom('GET', 'POST', 'get', 'PRI', 'M-SEARCH', ''),
        fc.string({ maxLength: 20 }),
        fc.constantFrom(' HTTP/1.1\r\n', ' HTTP/1.0\r\n', '\r\n', ' HTTP/1.1\n', '\n', ' x\r\n'),
      )
      .map(([m, target, end]) => b(`${m} ${target}${end}`));
    fc.assert(
      fc.property(fc.oneof(fc.uint8Array({ maxLength: 64 }), httpish, fc.constant(b(HTTP2_PREFACE))), fc.nat(), (input, split) => {
        const whole = detectHttp(input);
        assert.ok(['need-more', 'http1', 'http2', 'not-http'].includes(whole));
        const prefix = detectHttp(input.subarray(0, split % (input.length + 1)));
        if (prefix !== 'need-more') assert.equal(prefix, whole);
      }),
      { numRuns: 5000 },
    );
  });
});
