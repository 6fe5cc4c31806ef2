/**
 * Request framing the outbound proxy refuses before anything goes upstream: a request whose
 * `Transfer-Encoding` does not end with `chunked` has a body no one can delimit (RFC 9112 §6.3),
 * so relaying its head would leave the upstream and the proxy reading different requests.
 */
import assert from 'node:assert/strict';
import { once } from 'node:events';
import { type AddressInfo, createServer as createNetServer, connect as netConnect, type Server, type Socket } from 'node:net';
import { after, before, describe, it } from 'node:test';
import type { DestinationEvent, StreamHandlers, WireResult } from '../../api/index.js';
import { within } from '../testing/identity.js';
import { OutboundConnector } from './connector.js';
import { OutboundProxy } from './proxy.js';
import { DestinationCache, type DestinationSource } from './resolver.js';

const HOST = '127.0.0.1';

/** Every name and address is unknown to the mesh: requests go straight to their target. */
class NoMeshSource implements DestinationSource {
  get(_path: string, handlers: StreamHandlers<WireResult<DestinationEvent>>): () => void {
    queueMicrotask(() => handlers.onMessage({ ok: true, value: { kind: 'noEndpoints', exists: false } }));
    return () => {};
  }
}

let upstream: Server;
let upstreamPort: number;
/** Every byte the upstream received, over all its connections. */
let upstreamBytes = '';
let cache: DestinationCache;
let connector: OutboundConnector;
let proxy: OutboundProxy;
let port: number;
const sockets = new Set<Socket>();

before(async () => {
  upstream = createNetServer((s) => {
    sockets.add(s);
    s.on('error', () => {});
    s.on('data', (c: Buffer) => {
      upstreamBytes += c.toString('latin1');
      s.write('HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok');
    });
  });
  upstream.listen(0, HOST);
  await once(upstream, 'listening');
  upstreamPort = (upstream.address() as AddressInfo).port;
  cache = new DestinationCache({ source: new NoMeshSource(), namespace: 'demo', lookupTimeoutMs: 2000 });
  connector = new OutboundConnector({ tls: { certificate: undefined, anchorsPem: '' } });
  proxy = new OutboundProxy({ listen: { host: HOST, port: 0 }, resolver: cache, connector, detectTimeoutMs: 1000 });
  port = await proxy.start();
});

after(async () => {
  for (const s of sockets) s.destroy();
  await proxy?.close();
  connector?.close();
  cache?.close();
  await new Promise((r) => upstream?.close(r));
});

/** Writes `bytes` to the proxy and reads until it closes the connection. */
async function exchange(bytes: string): Promise<string> {
  const s = netConnect({ host: HOST, port });
  sockets.add(s);
  s.on('error', () => {});
  let text = '';
  s.on('data', (c: Buffer) => {
    text += c.toString('latin1');
  });
  s.write(bytes);
  await within(once(s, 'close'), 5000, 'the proxy closing the connection');
  return text;
}

describe('outbound proxy: request framing', () => {
  it('answers 400 and closes for a Transfer-Encoding not ending with chunked; nothing goes upstream', async () => {
    const target = `http://${HOST}:${upstreamPort}`;
    for (const coding of ['gzip', 'identity', 'chunked, gzip ,', 'gzip, chunked;q=1']) {
      upstreamBytes = '';
      const reply = await exchange(
        `POST ${target}/upload HTTP/1.1\r\nHost: ${HOST}:${upstreamPort}\r\nTransfer-Encoding: ${coding}\r\n\r\n5\r\nhello\r\n0\r\n\r\n` +
          `GET ${target}/next HTTP/1.1\r\nHost: ${HOST}:${upstreamPort}\r\n\r\n`,
      );
      assert.match(reply, /^HTTP\/1\.1 400 /, coding);
      assert.doesNotMatch(reply, /200 OK/, coding);
      // The upstream may take a moment to see what it would have been sent.
      await new Promise((r) => setTimeout(r, 50));
      assert.equal(upstreamBytes, '', coding);
    }
  });

  it('still relays a chunked request body', async () => {
    upstreamBytes = '';
    const reply = await exchange(
      `POST http://${HOST}:${upstreamPort}/upload HTTP/1.1\r\nHost: ${HOST}:${upstreamPort}\r\nTransfer-Encoding: gzip, chunked\r\nConnection: close\r\n\r\n5\r\nhello\r\n0\r\n\r\n`,
    );
    assert.match(reply, /^HTTP\/1\.1 200 /);
    assert.match(upstreamBytes, /^POST \/upload HTTP\/1\.1\r\n/);
  });
});
