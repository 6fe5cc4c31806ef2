/**
 * Suite `detect`: the proxy's byte-level protocol detection, run on every accepted connection
 * before any policy applies — ClientHello sniffing on a real node:tls hello (captured at suite
 * start from a loopback handshake), transport header decoding, and HTTP detection. Each
 * operation re-reads the whole prefix, as the detectors do after every read.
 */
import { once } from 'node:events';
import { type AddressInfo, createServer, type Socket } from 'node:net';
import { connect } from 'node:tls';
import { type ClientHelloSniff, sniffClientHello } from '../src/proxy/transport/client-hello.js';
import { detectHttp } from '../src/proxy/transport/detect-http.js';
import { decodeTransportHeader, encodeTransportHeader } from '../src/proxy/transport/transport-header.js';
import { type BenchResult, type MicroTask, runMicro } from './harness.js';

const MESH_NAME = 'web.emojivoto.serviceaccount.identity.linkerd.cluster.local';

/** The first TLS record a node:tls client sends to a raw loopback listener (its ClientHello). */
async function captureHello(): Promise<Buffer> {
  const server = createServer();
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const { port } = server.address() as AddressInfo;
  const hello = new Promise<Buffer>((resolve) => {
    server.once('connection', (socket: Socket) => {
      let buf = Buffer.alloc(0);
      socket.on('error', () => {});
      socket.on('data', (chunk: Buffer) => {
        buf = Buffer.concat([buf, chunk]);
        if (buf.length >= 5 && buf.length >= 5 + buf.readUInt16BE(3)) {
          socket.destroy();
          resolve(buf.subarray(0, 5 + buf.readUInt16BE(3)));
        }
      });
    });
  });
  const client = connect({
    host: '127.0.0.1',
    port,
    servername: MESH_NAME,
    ALPNProtocols: ['transport.l5d.io/v1', 'h2', 'http/1.1'],
    rejectUnauthorized: false,
  });
  client.on('error', () => {});
  try {
    return await hello;
  } finally {
    client.destroy();
    server.close();
  }
}

/** The same handshake message re-framed as two records (a hello split across records). */
function splitRecords(hello: Buffer): Buffer {
  const message = hello.subarray(5);
  const half = message.length >> 1;
  const rec = (frag: Buffer) => Buffer.concat([Buffer.of(0x16, 0x03, 0x01, frag.length >> 8, frag.length & 0xff), frag]);
  return Buffer.concat([rec(message.subarray(0, half)), rec(message.subarray(half))]);
}

function helloScore(r: ClientHelloSniff): number {
  return r.kind === 'hello' ? (r.sni?.length ?? 0) + r.alpn.length : 1000;
}

function expect(label: string, ok: boolean, got: unknown): void {
  if (!ok) throw new Error(`detect: scenario ${label} produced an unexpected result: ${JSON.stringify(got)}`);
}

/** Runs the suite. */
export async function runDetectSuite(): Promise<BenchResult[]> {
  const hello = await captureHello();
  const split = splitRecords(hello);
  const plaintext = Buffer.from('GET /api/v5/orders/8812/items?fields=price,stock HTTP/1.1\r\nHost: orders.shop.svc.cluster.local:8080\r\n');
  const h2 = Buffer.from('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x12\x04\x00\x00\x00\x00\x00', 'latin1');
  const header = Buffer.concat([encodeTransportHeader({ port: 8080, sessionProtocol: 'http2' }), h2]);
  const gateway = encodeTransportHeader({ port: 8080, name: 'web-svc.emojivoto.svc.cluster.local' });

  const sniffed = sniffClientHello(hello);
  expect('hello', sniffed.kind === 'hello' && sniffed.sni === MESH_NAME && sniffed.alpn.length === 3, sniffed);
  expect('hello/2-records', JSON.stringify(sniffClientHello(split)) === JSON.stringify(sniffed), sniffClientHello(split));
  expect('hello/partial', sniffClientHello(hello.subarray(0, hello.length - 1)).kind === 'need-more', null);
  expect('header', decodeTransportHeader(header).kind === 'header', decodeTransportHeader(header));
  expect('http1', detectHttp(plaintext) === 'http1', detectHttp(plaintext));
  expect('http2', detectHttp(h2) === 'http2', detectHttp(h2));
  expect('tls-is-not-http', detectHttp(hello) === 'not-http', detectHttp(hello));

  const facts = { helloBytes: hello.length };
  const tasks: MicroTask[] = [
    { name: 'sniffClientHello/real-hello', op: () => helloScore(sniffClientHello(hello)), batch: 1000, targetNs: 1000, extra: facts },
    { name: 'sniffClientHello/2-records', op: () => helloScore(sniffClientHello(split)), batch: 1000, targetNs: 2000, extra: facts },
    {
      name: 'sniffClientHello/need-more',
      op: () => helloScore(sniffClientHello(hello.subarray(0, hello.length - 1))),
      batch: 1000,
      targetNs: 1000,
      extra: facts,
    },
    { name: 'sniffClientHello/plaintext', op: () => helloScore(sniffClientHello(plaintext)), batch: 1000, targetNs: 100 },
    {
      name: 'decodeTransportHeader/http2',
      op: () => {
        const r = decodeTransportHeader(header);
        return r.kind === 'header' ? r.consumed : 0;
      },
      batch: 1000,
      targetNs: 500,
      extra: { headerBytes: header.length - h2.length },
    },
    {
      name: 'decodeTransportHeader/gateway-name',
      op: () => {
        const r = decodeTransportHeader(gateway);
        return r.kind === 'header' ? r.consumed : 0;
      },
      batch: 1000,
      targetNs: 500,
      extra: { headerBytes: gateway.length },
    },
    { name: 'encodeTransportHeader/http2', op: () => encodeTransportHeader({ port: 8080, sessionProtocol: 'http2' }).length, batch: 1000, targetNs: 500 },
    { name: 'detectHttp/http1', op: () => detectHttp(plaintext).length, batch: 1000, targetNs: 500, extra: { lineBytes: plaintext.indexOf('\r\n') + 2 } },
    { name: 'detectHttp/http2-preface', op: () => detectHttp(h2).length, batch: 1000, targetNs: 200 },
    { name: 'detectHttp/tls', op: () => detectHttp(hello).length, batch: 1000, targetNs: 100 },
  ];
  return runMicro(tasks);
}
