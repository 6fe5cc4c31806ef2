import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { filterHttp1Request, filterHttp1Response, grpcMessage, isL5dHeader, safeHeaderValue } from './http-headers.js';

describe('inbound HTTP header hygiene', () => {
  it('recognises l5d-* names in any case, and nothing else', () => {
    for (const n of ['l5d-client-id', 'L5D-Client-Id', 'l5D-dst-override', 'L5d-x', 'l5d-']) assert.equal(isL5dHeader(n), true, n);
    for (const n of ['l5d', 'l5dx-a', 'x-l5d-a', 'l6d-a', 'i5d-a', '']) assert.equal(isL5dHeader(n), false, n);
  });

  it('filters HTTP/1 request headers: l5d-*, hop-by-hop and Connection-named ones go; repeats keep every value', () => {
    const h = filterHttp1Request([
      'Host',
      'web:8080',
      'L5d-Client-Id',
      'spoofed',
      'Connection',
      'keep-alive, X-Hop, Host',
      'X-Hop',
      'gone',
      'Keep-Alive',
      'timeout=5',
      'Transfer-Encoding',
      'chunked',
      'TE',
      'trailers',
      'Upgrade',
      'websocket',
      'Expect',
      '100-continue',
      'X-Multi',
      'a',
      'x-multi',
      'b',
      'Proxy-Connection',
      'keep-alive',
    ]);
    assert.deepEqual(h.forward, ['Host', 'web:8080', 'X-Multi', 'a', 'x-multi', 'b']);
    assert.deepEqual({ ...h.byName }, { host: 'web:8080', 'x-multi': ['a', 'b'] });
    assert.equal(h.upgrade, 'websocket');
    assert.equal(h.transferEncoding, 'chunked');
    const plain = filterHttp1Request(['Host', 'a']);
    assert.deepEqual([plain.upgrade, plain.transferEncoding], [undefined, undefined]);
  });

  it('filters HTTP/1 response headers (hop-by-hop only)', () => {
    assert.deepEqual(
      filterHttp1Response([
        'Content-Type',
        'text/plain',
        'Connection',
        'x-private',
        'X-Private',
        '1',
        'Transfer-Encoding',
        'chunked',
        'Set-Cookie',
        'a=1',
        'Set-Cookie',
        'b=2',
      ]),
      ['Content-Type', 'text/plain', 'Set-Cookie', 'a=1', 'Set-Cookie', 'b=2'],
    );
  });

  it('makes header values safe and percent-encodes grpc-message', () => {
    assert.equal(safeHeaderValue('plain text: ok'), 'plain text: ok');
    assert.equal(safeHeaderValue('bad\r\nvalue é'), 'bad??value ?');
    assert.equal(grpcMessage('unauthorized request on route'), 'unauthorized request on route');
    assert.equal(grpcMessage('100% é\n'), '100%25 %C3%A9%0A');
  });
});
