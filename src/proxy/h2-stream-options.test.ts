import assert from 'node:assert/strict';
import { once } from 'node:events';
import { connect, createServer, type ServerHttp2Stream } from 'node:http2';
import type { AddressInfo } from 'node:net';
import { test } from 'node:test';
import {
  REQUEST_WITH_BODY,
  REQUEST_WITHOUT_BODY,
  RESPOND_WITH_BODY,
  RESPOND_WITH_TRAILERS,
  RESPOND_WITHOUT_BODY,
  requestOptions,
} from './h2-stream-options.js';

/** One request through a real HTTP/2 server on loopback; the server answers with `answer`. */
async function exchange(endStream: boolean, answer: (s: ServerHttp2Stream) => void) {
  const server = createServer();
  const seen: { body: string; ended: boolean } = { body: '', ended: false };
  server.on('stream', (s) => {
    s.setEncoding('utf8');
    s.on('data', (d: string) => {
      seen.body += d;
    });
    s.on('end', () => {
      seen.ended = true;
      answer(s);
    });
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const session = connect(`http://127.0.0.1:${(server.address() as AddressInfo).port}`);
  try {
    const req = session.request({ ':method': 'POST', ':path': '/x' }, requestOptions(endStream));
    if (!endStream) req.end('hello');
    let status = 0;
    let trailers: Record<string, unknown> | undefined;
    let body = '';
    req.setEncoding('utf8');
    req.on('response', (h) => {
      status = Number(h[':status']);
    });
    req.on('trailers', (t) => {
      trailers = t;
    });
    req.on('data', (d: string) => {
      body += d;
    });
    await once(req, 'close');
    return { status, trailers, body, server: seen, rstCode: req.rstCode };
  } finally {
    session.close();
    server.close();
  }
}

test('the shared option objects are frozen and carry node:http2 defaults, so node adds nothing and cannot change them', () => {
  for (const o of [REQUEST_WITH_BODY, REQUEST_WITHOUT_BODY]) {
    assert.ok(Object.isFrozen(o));
    assert.deepEqual({ ...o, endStream: undefined }, { endStream: undefined, weight: 16, parent: 0, exclusive: false, silent: false });
  }
  for (const o of [RESPOND_WITH_BODY, RESPOND_WITH_TRAILERS, RESPOND_WITHOUT_BODY]) {
    assert.ok(Object.isFrozen(o));
    assert.deepEqual(Object.keys(o).sort(), ['endStream', 'waitForTrailers']);
  }
  assert.equal(requestOptions(true), REQUEST_WITHOUT_BODY);
  assert.equal(requestOptions(false), REQUEST_WITH_BODY);
});

test('a request without a body ends with its headers; a response without a body likewise', async () => {
  const r = await exchange(true, (s) => s.respond({ ':status': 204 }, RESPOND_WITHOUT_BODY));
  assert.deepEqual(r.server, { body: '', ended: true });
  assert.equal(r.status, 204);
  assert.equal(r.body, '');
  assert.equal(r.rstCode, 0);
});

test('a request with a body sends it; a response with trailers sends body, then trailers', async () => {
  const r = await exchange(false, (s) => {
    s.respond({ ':status': 200 }, RESPOND_WITH_TRAILERS);
    s.on('wantTrailers', () => s.sendTrailers({ 'grpc-status': '0' }));
    s.end('world');
  });
  assert.deepEqual(r.server, { body: 'hello', ended: true });
  assert.equal(r.status, 200);
  assert.equal(r.body, 'world');
  assert.equal(r.trailers?.['grpc-status'], '0');
});

test('a response with a body and no trailers ends with its last DATA frame', async () => {
  const r = await exchange(false, (s) => {
    s.respond({ ':status': 200 }, RESPOND_WITH_BODY);
    s.end('plain');
  });
  assert.equal(r.body, 'plain');
  assert.equal(r.trailers, undefined);
  assert.equal(r.rstCode, 0);
});
