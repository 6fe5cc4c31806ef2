import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { announcesBody, headerValue, refusalOf } from './http-relay.js';

describe('relayHttp1 helpers', () => {
  it('refuses before undici what undici would refuse (its pool would then never use that connection again)', () => {
    const ok = { method: 'GET', path: '/a?b=c', headers: ['Host', 'web', 'X-A', 'caf\u00e9', 'content-length', '3'] };
    assert.equal(refusalOf(ok), undefined);
    const cases: [string[] | string, RegExp][] = [
      ['*', /not origin-form/],
      ['http://web/a', /not origin-form/],
      [['Host', 'web', 'host', 'evil'], /more than one Host/],
      [['Content-Length', '1', 'content-length', '1'], /more than one Content-Length/],
      [['Connection', 'close'], /connection header cannot be forwarded/],
      [['Transfer-Encoding', 'chunked'], /transfer-encoding header/],
      [['Keep-Alive', 'timeout=5'], /keep-alive header/],
      [['Upgrade', 'websocket'], /upgrade header/],
      [['Expect', '100-continue'], /expect header/],
      [['X-Bad', 'a\r\nInjected: yes'], /invalid value of the x-bad header/],
      [['X-Bad', 'snow \u2603'], /invalid value/],
    ];
    for (const [c, re] of cases) {
      const request = typeof c === 'string' ? { ...ok, path: c } : { ...ok, headers: c };
      assert.match(refusalOf(request) ?? 'accepted', re, JSON.stringify(c));
    }
  });

  it('tells a request with a body by its framing headers, and finds header values in any case', () => {
    assert.equal(announcesBody(['Host', 'web']), false);
    assert.equal(announcesBody(['Host', 'web', 'Content-Length', '0']), true);
    assert.equal(announcesBody(['TRANSFER-ENCODING', 'chunked']), true);
    assert.equal(announcesBody(['Content-Lengthy', '1', 'x-transfer-encoding', 'chunked']), false);
    assert.equal(headerValue(['Grpc-Status', '7', 'grpc-status', '0'], 'grpc-status'), '7');
    assert.equal(headerValue(['grpc-statuses', '7'], 'grpc-status'), undefined);
  });
});
