import assert from 'node:assert/strict';
import { METHODS } from 'node:http';
import { describe, it } from 'node:test';
import fc from 'fast-check';
import { record } from './client-hello-fixtures.js';
import { detectHttp, HTTP1_MAX_REQUEST_LINE_BYTES, HTTP2_PREFACE, type HttpDetection } from './detect-http.js';

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
    assert.equal(detectHttp(b('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\x00')), 'not-http');
    assert.equal(detectHttp(b('PRI * HTTP/2.0\r\n\r\nXX')), 'not-http');
    assert.equal(detectHttp(b('PRI * HTTP/1.1\r\n')), 'not-http', 'PRI is no HTTP/1 method');
  });

  it('detects an HTTP/1 request line as soon as it is complete', () => {
    const lines = [
      'GET / HTTP/1.1\r\n',
      'POST /api/v5/orders?x=1&y=%20 HTTP/1.1\r\n',
      'HEAD /health HTTP/1.0\r\n',
      'PUT /p HTTP/1.1\r\n',
      'PATCH /p HTTP/1.1\r\n',
      'PURGE /p HTTP/1.1\r\n',
      'OPTIONS * HTTP/1.1\r\n',
      'CONNECT web.ns.svc:8080 HTTP/1.1\r\n',
      'GET http://web.ns.svc/x HTTP/1.1\r\n',
      'M-SEARCH * HTTP/1.1\r\n',
      'PROPFIND /dav HTTP/1.1\r\n',
    ];
    for (const line of lines) assertDecidedAtEnd(b(line), 'http1');
  });

  it('accepts exactly the methods node:http parses', () => {
    for (const m of METHODS) assert.equal(detectHttp(b(`${m} / HTTP/1.1\r\n`)), 'http1', m);
  });

  const notHttp: [string, string | Buffer][] = [
    ['a lowercase method (node:http would answer 400)', 'get / HTTP/1.1\r\n'],
    ['a mixed-case method', 'Get / HTTP/1.1\r\n'],
    ['an unknown method', 'FETCH / HTTP/1.1\r\n'],
    ['a method prefix', 'GE / HTTP/1.1\r\n'],
    ['a method too long to be one', 'UNSUBSCRIBEX'],
    ['an empty method', ' / HTTP/1.1\r\n'],
    ['two spaces after the method', 'GET  / HTTP/1.1\r\n'],
    ['a tab separator', 'GET\t/ HTTP/1.1\r\n'],
    ['an empty target', 'GET  HTTP/1.1\r\n'],
    ['a control byte in the target', 'GET /a\x01b HTTP/1.1\r\n'],
    ['raw UTF-8 in the target', Buffer.concat([b('GET /'), Buffer.from('ü', 'utf8'), b(' HTTP/1.1\r\n')])],
    ['HTTP/0.9 (no version)', 'GET /\r\n'],
    ['HTTP/2.0 in a request line', 'GET / HTTP/2.0\r\n'],
    ['HTTP/1.2', 'GET / HTTP/1.2\r\n'],
    ['a lowercase version', 'GET / http/1.1\r\n'],
    ['a bare LF', 'GET / HTTP/1.1\n'],
    ['a space before CRLF', 'GET / HTTP/1.1 \r\n'],
    ['CR without LF', 'GET / HTTP/1.1\rX'],
    ['a leading empty line', '\r\nGET / HTTP/1.1\r\n'],
    ['SSH', 'SSH-2.0-OpenSSH_9.6\r\n'],
    ['SMTP-ish', 'EHLO mail.example\r\n'],
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

  it('needs more for a slowloris request line until the line bound, then gives up', () => {
    const line = b(`GET /${'a'.repeat(HTTP1_MAX_REQUEST_LINE_BYTES)}`);
    for (const k of [1, 4, 5, 100, HTTP1_MAX_REQUEST_LINE_BYTES - 1]) assert.equal(detectHttp(line.subarray(0, k)), 'need-more', `${k} bytes`);
    assert.equal(detectHttp(line.subarray(0, HTTP1_MAX_REQUEST_LINE_BYTES)), 'not-http');
    assert.equal(detectHttp(line), 'not-http');
    // A line of exactly the bound (CRLF included) is fine; one byte more is not.
    const exact = b(`GET /${'a'.repeat(HTTP1_MAX_REQUEST_LINE_BYTES - 16)} HTTP/1.1\r\n`);
    assert.equal(exact.length, HTTP1_MAX_REQUEST_LINE_BYTES);
    assert.equal(detectHttp(exact), 'http1');
    const over = b(`GET /${'a'.repeat(HTTP1_MAX_REQUEST_LINE_BYTES - 15)} HTTP/1.1\r\n`);
    assert.equal(detectHttp(over), 'not-http');
    assert.equal(detectHttp(b('GET /abc HTTP/1.1\r\n'), 12), 'not-http', 'a custom bound');
  });

  it('is prefix-stable and total on arbitrary and HTTP-like input', () => {
    const httpish = fc
      .tuple(
        fc.constantFrom('GET', 'POST', 'get', 'PRI', 'M-SEARCH', ''),
        fc.string({ maxLength: 20 }),
        fc.constantFrom(' HTTP/1.1\r\n', ' HTTP/1.0\r\n', '\r\n', ' HTTP/1.1\n'),
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
