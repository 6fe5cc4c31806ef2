/**
 * OutboundConnector over real sockets on 127.0.0.1: against a small mTLS server that records the
 * handshake (SNI, ALPN, client identity) and decodes the transport header, and against a real
 * InboundProxy (per-request policy on the far side) for the pools: HTTP/1 keep-alive and one
 * HTTP/2 session per endpoint, with handshakes counted.
 */
import assert from 'node:assert/strict';
import { once } from 'node:events';
import { type AddressInfo, createServer as createNetServer, type Socket } from 'node:net';
import { after, before, describe, it } from 'node:test';
import { createServer as createTlsServer, type TLSSocket, type Server as TlsServer } from 'node:tls';
import type { DestinationEndpoint } from '../../api/index.js';
import type { H2Connection } from '../../http/h2/connection.js';
import { headerValue } from '../relay/http-relay.js';
import { TempDirs, waitFor, within } from '../testing/identity.js';
import { HOST, POD_HTTP1, POD_HTTP2, POD_TCP, type ServerSide, startServerSide } from '../testing/outbound.js';
import { clientIdentityOf, MeshTlsContext } from '../tls/context.js';
import { decodeTransportHeader, type TransportHeader } from '../transport/transport-header.js';
import { OutboundConnectError, OutboundConnector, type OutboundConnectorOptions } from './connector.js';

const WAIT_MS = 5000;
/** Connections come from here: the far side's `default:localhost` admits 127.0.0.1. */
const FROM = '127.0.0.2';

/** What the recording mTLS server saw of one connection. */
interface Recorded {
  servername: string | false;
  alpn: string | false;
  clientId: string | undefined;
  header: TransportHeader | undefined;
  /** Bytes received (header included). */
  bytes: number;
}

const dirs = new TempDirs();
let side: ServerSide;
let recorder: TlsServer;
let recorderPort: number;
let noAlpnServer: TlsServer;
let noAlpnPort: number;
const recorded: Recorded[] = [];
const connectors: OutboundConnector[] = [];

function mkConnector(extra: Partial<OutboundConnectorOptions> = {}): OutboundConnector {
  const c = new OutboundConnector({
    tls: new MeshTlsContext(side.clientCert, side.mesh.anchorsPem),
    meshPortOf: () => side.meshPort,
    localAddress: FROM,
    ...extra,
  });
  connectors.push(c);
  return c;
}

/** The meshed endpoint of the recording server. */
function recorderEndpoint(extra: Partial<DestinationEndpoint> = {}): DestinationEndpoint {
  return side.endpoint(7000, { opaqueTransportPort: recorderPort, ...extra });
}

async function readAll(s: Socket, until: (text: string) => boolean): Promise<string> {
  const chunks: Buffer[] = [];
  const done = new Promise<string>((resolve, reject) => {
    s.on('data', (c: Buffer) => {
      chunks.push(c);
      const text = Buffer.concat(chunks).toString('latin1');
      if (until(text)) resolve(text);
    });
    s.once('close', () => reject(new Error(`closed after ${JSON.stringify(Buffer.concat(chunks).toString('latin1'))}`)));
  });
  return within(done, WAIT_MS, 'the reply');
}

function h1Get(
  c: OutboundConnector,
  ep: DestinationEndpoint,
  path: string,
  headers: string[] = ['Host', 'server.demo'],
): Promise<{ status: number; body: string }> {
  return within(
    new Promise((resolve, reject) => {
      let status = 0;
      const chunks: Buffer[] = [];
      c.pool1(ep, 'http1').dispatch(
        { method: 'GET', path, headers, body: null },
        {
          onConnect: () => {},
          onHeaders: (s: number) => {
            status = s;
            return true;
          },
          onData: (chunk: Buffer) => {
            chunks.push(chunk);
            return true;
          },
          onComplete: () => resolve({ status, body: Buffer.concat(chunks).toString('utf8') }),
          onError: reject,
        },
      );
    }),
    WAIT_MS,
    `GET ${path}`,
  );
}

function h2Get(session: H2Connection, path: string): Promise<{ status: number; body: string }> {
  return within(
    new Promise((resolve, reject) => {
      const stream = session.request([':method', 'GET', ':scheme', 'http', ':path', path, ':authority', 'server.demo'], true);
      if (stream === undefined) {
        reject(new Error('the connection takes no new stream'));
        return;
      }
      let status = 0;
      let body = '';
      stream.events = {
        headers: (_s, block) => {
          if (status === 0) status = Number(headerValue(block.pairs, ':status'));
        },
        data: (s, chunk) => {
          body += chunk.toString('utf8');
          s.consumed(chunk.length);
        },
        closed: (_s, code) => (code === undefined ? resolve({ status, body }) : reject(new Error(`stream reset (code ${code})`))),
      };
    }),
    WAIT_MS,
    `h2 GET ${path}`,
  );
}

before(async () => {
  side = await startServerSide(dirs);
  const serverTls = new MeshTlsContext(side.serverCert, side.mesh.anchorsPem);
  recorder = createTlsServer(serverTls.serverOptions(), (t: TLSSocket) => {
    const r: Recorded = { servername: t.servername ?? false, alpn: t.alpnProtocol ?? false, clientId: clientIdentityOf(t), header: undefined, bytes: 0 };
    recorded.push(r);
    t.on('error', () => {});
    let buf = Buffer.alloc(0);
    t.on('data', (c: Buffer) => {
      r.bytes += c.length;
      if (r.header !== undefined) {
        t.write(c);
        return;
      }
      buf = Buffer.concat([buf, c]);
      const d = decodeTransportHeader(buf);
      if (d.kind === 'header') {
        r.header = d.header;
        const rest = buf.subarray(d.consumed);
        if (rest.length > 0) t.write(rest);
      } else if (d.kind === 'invalid') t.destroy();
    });
    t.on('end', () => t.end());
  });
  recorder.on('tlsClientError', () => {});
  recorder.listen(0, HOST);
  // The same certificate, offering only h2: no transport header possible.
  noAlpnServer = createTlsServer({ ...serverTls.serverOptions(), ALPNProtocols: ['h2'] }, (t: TLSSocket) => {
    t.on('error', () => {});
    t.on('data', (c: Buffer) => {
      recorded.push({ servername: t.servername ?? false, alpn: t.alpnProtocol ?? false, clientId: undefined, header: undefined, bytes: c.length });
    });
  });
  noAlpnServer.on('tlsClientError', () => {});
  noAlpnServer.listen(0, HOST);
  await Promise.all([once(recorder, 'listening'), once(noAlpnServer, 'listening')]);
  recorderPort = (recorder.address() as AddressInfo).port;
  noAlpnPort = (noAlpnServer.address() as AddressInfo).port;
});

after(async () => {
  for (const c of connectors) c.close();
  await side?.close();
  await Promise.all([new Promise((r) => recorder?.close(r)), new Promise((r) => noAlpnServer?.close(r))]);
  dirs.cleanup();
});

describe('OutboundConnector: mesh TLS and the transport header', () => {
  it('connects with SNI = the server identity, ALPN transport.l5d.io/v1, our client identity, then the header', async () => {
    const c = mkConnector({ meshPortOf: (e) => e.opaqueTransportPort ?? 4143 });
    recorded.length = 0;
    const s = await c.connect(recorderEndpoint(), 'opaque');
    s.write('ping');
    assert.equal(await readAll(s, (t) => t === 'ping'), 'ping');
    s.destroy();
    const s1 = await c.connect(recorderEndpoint(), 'http1');
    s1.write('x');
    await readAll(s1, (t) => t === 'x');
    s1.destroy();
    assert.deepEqual(
      recorded.map((r) => [r.servername, r.alpn, r.clientId, r.header]),
      [
        [side.serverCert.identity, 'transport.l5d.io/v1', side.clientCert.identity, { port: 7000 }],
        [side.serverCert.identity, 'transport.l5d.io/v1', side.clientCert.identity, { port: 7000, sessionProtocol: 'http1' }],
      ],
    );
    assert.equal(c.stats().handshakes, 2);
  });

  it('sends the server name as SNI when it differs from the identity, and checks the identity', async () => {
    const c = mkConnector({ meshPortOf: (e) => e.opaqueTransportPort ?? 4143 });
    recorded.length = 0;
    const s = await c.connect(recorderEndpoint({ serverName: 'sni.example' }), 'http2');
    s.write('y');
    await readAll(s, (t) => t === 'y');
    s.destroy();
    assert.equal(recorded[0]?.servername, 'sni.example');
    assert.deepEqual(recorded[0]?.header, { port: 7000, sessionProtocol: 'http2' });
  });

  it('refuses a peer without the expected identity before writing a single byte', async () => {
    const c = mkConnector({ meshPortOf: (e) => e.opaqueTransportPort ?? 4143 });
    recorded.length = 0;
    const wrong = recorderEndpoint({ identity: side.otherCert.identity, serverName: side.otherCert.identity });
    await assert.rejects(c.connect(wrong, 'http1'), (e: unknown) => e instanceof OutboundConnectError && e.reason === 'identity mismatch');
    // Through a pool too: the request fails before it has a connection.
    const failed = await new Promise<{ error: unknown; hadSocket: boolean }>((resolve) => {
      let hadSocket = false;
      c.pool1(wrong, 'http1').dispatch(
        { method: 'GET', path: '/', headers: ['Host', 'x'], body: null },
        {
          onConnect: () => {
            hadSocket = true;
          },
          onHeaders: () => true,
          onData: () => true,
          onComplete: () => resolve({ error: undefined, hadSocket }),
          onError: (error: Error) => resolve({ error, hadSocket }),
        },
      );
    });
    assert.ok(failed.error instanceof OutboundConnectError && failed.error.reason === 'identity mismatch');
    assert.equal(failed.hadSocket, false);
    await new Promise((r) => setTimeout(r, 50));
    assert.equal(
      recorded.reduce((n, r) => n + r.bytes, 0),
      0,
      'the peer received no application byte',
    );
    assert.equal(c.stats().identityMismatches, 2);
    assert.equal(c.stats().handshakes, 0);
  });

  it('refuses a peer that does not negotiate the transport header ALPN', async () => {
    const c = mkConnector({ meshPortOf: () => noAlpnPort });
    recorded.length = 0;
    await assert.rejects(c.connect(side.endpoint(7000), 'opaque'), (e: unknown) => e instanceof OutboundConnectError && e.reason === 'tls handshake failed');
    await new Promise((r) => setTimeout(r, 50));
    assert.equal(recorded.length, 0);
  });

  it('fails without a certificate, on a refused port, and past the connect timeout', async () => {
    const noCert = mkConnector({ tls: { certificate: undefined, anchorsPem: side.mesh.anchorsPem } });
    await assert.rejects(noCert.connect(side.endpoint(POD_TCP), 'opaque'), (e: unknown) => e instanceof OutboundConnectError && e.reason === 'no certificate');
    const gone = createNetServer().listen(0, HOST);
    await once(gone, 'listening');
    const deadPort = (gone.address() as AddressInfo).port;
    await new Promise((r) => gone.close(r));
    const c = mkConnector({ meshPortOf: () => deadPort });
    await assert.rejects(c.connect(side.endpoint(POD_TCP), 'opaque'), (e: unknown) => e instanceof OutboundConnectError && e.reason === 'connect failed');
    await assert.rejects(
      c.connect({ ip: HOST, port: deadPort, weight: 1, labels: {} }, 'opaque'),
      (e: unknown) => e instanceof OutboundConnectError && e.reason === 'connect failed',
    );
    // A server that accepts TCP and never answers the ClientHello.
    const silent = createNetServer((s) => {
      s.on('error', () => {});
      s.resume();
    }).listen(0, HOST);
    await once(silent, 'listening');
    const slow = mkConnector({ meshPortOf: () => (silent.address() as AddressInfo).port, connectTimeoutMs: 200 });
    await assert.rejects(slow.connect(side.endpoint(POD_TCP), 'opaque'), (e: unknown) => e instanceof OutboundConnectError && e.reason === 'connect timeout');
    slow.close();
    await new Promise((r) => silent.close(r));
    assert.deepEqual(c.stats().connectFailures, { 'connect failed': 2 });
  });

  it('connects to an endpoint without identity in plain TCP, to its own port', async () => {
    const c = mkConnector();
    const plain = createNetServer((s) => {
      s.on('error', () => {});
      s.end('plain hello');
    }).listen(0, HOST);
    await once(plain, 'listening');
    const s = await c.connect({ ip: HOST, port: (plain.address() as AddressInfo).port, weight: 1, labels: {} }, 'http1');
    assert.equal(await readAll(s, (t) => t === 'plain hello'), 'plain hello');
    assert.deepEqual([c.stats().plainConnects, c.stats().handshakes], [1, 0]);
    await new Promise((r) => plain.close(r));
  });
});

describe('OutboundConnector: pools against a real inbound proxy', () => {
  it('carries an opaque stream to the echo application through the mesh port', async () => {
    const c = mkConnector();
    const link = await c.open(side.endpoint(POD_TCP));
    assert.equal(link.meshed, true);
    link.start('opaque');
    link.socket.write('echo me');
    assert.equal(await readAll(link.socket, (t) => t === 'echo me'), 'echo me');
    link.socket.destroy();
  });

  it('reuses one keep-alive connection for 50 sequential HTTP/1 requests', async () => {
    const c = mkConnector();
    const before = side.seen.length;
    for (let i = 0; i < 50; i++) {
      const r = await h1Get(c, side.endpoint(POD_HTTP1), `/n/${i}`);
      assert.equal(r.status, 200, r.body);
      assert.equal(r.body, `hello /n/${i} `);
    }
    const stats = c.stats();
    assert.ok(stats.handshakes <= 2, `handshakes: ${stats.handshakes}`);
    assert.equal(stats.http1Pools, 1);
    const seen = side.seen.slice(before);
    assert.equal(seen.length, 50);
    assert.ok(seen.every((s) => s.headers['l5d-client-id'] === side.clientCert.identity));
  });

  it('closes idle HTTP/1 connections, prunes their pool, and serves the same endpoint again afterwards', async () => {
    const c = mkConnector({ idleSocketTimeoutMs: 100 });
    const ep = side.endpoint(POD_HTTP1);
    assert.equal((await h1Get(c, ep, '/p/1')).status, 200);
    assert.equal(c.stats().http1Pools, 1);
    c.prune();
    assert.equal(c.stats().http1Pools, 1, 'a pool holding a connection is kept');
    await waitFor(() => c.stats().open === 0, 'the idle connection to close', WAIT_MS);
    c.prune();
    assert.equal(c.stats().http1Pools, 0, 'an empty pool is dropped');
    const again = await h1Get(c, ep, '/p/2');
    assert.equal(again.status, 200, again.body);
    assert.equal(again.body, 'hello /p/2 ');
    assert.equal(c.stats().http1Pools, 1);
    assert.equal(c.stats().handshakes, 2);
  });

  it('is refused per request (403) by the far side for an identity it does not admit', async () => {
    const c = mkConnector({ tls: new MeshTlsContext(side.otherCert, side.mesh.anchorsPem) });
    const r = await h1Get(c, side.endpoint(POD_HTTP1), '/secret');
    assert.equal(r.status, 403);
  });

  it('shares one HTTP/2 session per endpoint and replaces it once closed', async () => {
    const c = mkConnector();
    const [s1, s2] = await Promise.all([c.session2(side.endpoint(POD_HTTP2)), c.session2(side.endpoint(POD_HTTP2))]);
    assert.equal(s1, s2);
    const replies = await Promise.all(Array.from({ length: 20 }, (_, i) => h2Get(s1, `/h2/${i}`)));
    assert.ok(replies.every((r, i) => r.status === 200 && r.body === `hello h2 /h2/${i}`));
    assert.equal(c.stats().handshakes, 1);
    assert.equal(side.seen.at(-1)?.headers['l5d-client-id'], side.clientCert.identity);
    s1.close();
    await waitFor(() => s1.destroyed, 'the first connection to close');
    const s3 = await c.session2(side.endpoint(POD_HTTP2));
    assert.notEqual(s3, s1);
    assert.equal((await h2Get(s3, '/again')).body, 'hello h2 /again');
    assert.equal(c.stats().handshakes, 2);
  });

  it('closes every connection, pool and session on close()', async () => {
    const c = mkConnector();
    await h1Get(c, side.endpoint(POD_HTTP1), '/x');
    const session = await c.session2(side.endpoint(POD_HTTP2));
    const link = await c.open(side.endpoint(POD_TCP));
    assert.ok(c.stats().open >= 3);
    c.close();
    await waitFor(() => c.stats().open === 0 && session.destroyed && link.socket.destroyed, 'everything closed');
    await assert.rejects(c.connect(side.endpoint(POD_TCP), 'opaque'), (e: unknown) => e instanceof OutboundConnectError);
  });
});
