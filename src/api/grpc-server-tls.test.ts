/**
 * The gRPC server's TLS listener over real loopback sockets, with node's own TLS and HTTP/2 as
 * the client: clients offering ALPN `h2` and clients offering no ALPN at all (linkerd2-proxy's
 * control-plane client) both complete calls; a client offering only HTTP/1.1 is refused.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { connect as h2Connect } from 'node:http2';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { type TLSSocket, connect as tlsConnect } from 'node:tls';
import { deepEqual } from '../core/index.js';
import { PortSpec, Server } from './gen/inbound.js';
import { frameMessage } from './grpc-framing.js';
import { type GrpcServerHandle, startGrpcServer } from './grpc-server.js';
import { inboundPolicyService } from './inbound-service.js';
import { serverFromWire } from './inbound-wire.js';
import { richHttpServer } from './test-fixtures.js';
import { FakeCell, makeTestPki } from './test-helpers.js';

const SERVER_NAME = 'linkerd-destination.linkerd.serviceaccount.identity.linkerd.cluster.local';
const WORKLOAD = '{"ns":"emojivoto","pod":"web-1"}';

interface CallResult {
  readonly alpn: string | false | null;
  readonly grpcStatus: string | undefined;
  readonly body: Buffer;
}

/** Opens TLS with `alpn` (undefined: no ALPN extension at all) and calls GetPort once over HTTP/2. */
async function getPort(port: number, caPem: string, alpn: string[] | undefined): Promise<CallResult> {
  const socket = await new Promise<TLSSocket>((resolve, reject) => {
    const s = tlsConnect({ host: '127.0.0.1', port, servername: SERVER_NAME, ca: caPem, ...(alpn === undefined ? {} : { ALPNProtocols: alpn }) }, () =>
      resolve(s),
    );
    s.once('error', reject);
  });
  const negotiated = socket.alpnProtocol;
  const session = h2Connect(`https://${SERVER_NAME}:${port}`, { createConnection: () => socket });
  try {
    return await new Promise<CallResult>((resolve, reject) => {
      session.once('error', reject);
      const req = session.request({
        ':method': 'POST',
        ':path': '/io.linkerd.proxy.inbound.InboundServerPolicies/GetPort',
        'content-type': 'application/grpc',
        te: 'trailers',
      });
      const chunks: Buffer[] = [];
      let grpcStatus: string | undefined;
      req.on('response', (h) => {
        if (h['grpc-status'] !== undefined) grpcStatus = String(h['grpc-status']);
      });
      req.on('trailers', (h) => {
        grpcStatus = String(h['grpc-status']);
      });
      req.on('data', (c: Buffer) => chunks.push(c));
      req.once('error', reject);
      req.on('end', () => resolve({ alpn: negotiated, grpcStatus, body: Buffer.concat(chunks) }));
      req.end(frameMessage(PortSpec.encode({ workload: WORKLOAD, port: 8080 }).finish()));
    });
  } finally {
    session.destroy();
  }
}

describe('gRPC server TLS: ALPN h2 and no ALPN', () => {
  const dir = mkdtempSync(join(tmpdir(), 'ward-grpc-alpn-'));
  let caPem: string;
  let server: GrpcServerHandle;

  before(async () => {
    const pki = makeTestPki(dir, { server: SERVER_NAME });
    caPem = pki.caPem;
    const cell = new FakeCell(richHttpServer);
    const discovery = {
      lookup: (ns: string, pod: string, p: number) => (ns === 'emojivoto' && pod === 'web-1' && p === 8080 ? cell : undefined),
    };
    server = await startGrpcServer({ host: '127.0.0.1', port: 0, tls: pki.leaves.server, services: [inboundPolicyService(discovery)] });
  });
  after(async () => {
    await server?.close(100);
    rmSync(dir, { recursive: true, force: true });
  });

  for (const [what, alpn, negotiated] of [
    ['offering h2', ['h2'], 'h2'],
    ['offering no ALPN (HTTP/2 with prior knowledge inside TLS)', undefined, false],
  ] as const) {
    it(`a client ${what} completes a call and gets the policy`, async () => {
      const r = await getPort(server.port, caPem, alpn === undefined ? undefined : [...alpn]);
      assert.equal(r.alpn, negotiated);
      assert.equal(r.grpcStatus, '0');
      assert.equal(r.body[0], 0, 'an uncompressed message');
      assert.equal(r.body.readUInt32BE(1), r.body.length - 5, 'one whole message');
      const decoded = serverFromWire(Server.decode(r.body.subarray(5)));
      if (!decoded.ok) assert.fail(decoded.message);
      assert.ok(deepEqual(decoded.value, richHttpServer), 'the served policy');
    });
  }

  it('a client offering only http/1.1 fails the handshake', async () => {
    await assert.rejects(getPort(server.port, caPem, ['http/1.1']), /no application protocol|ALPN|alert/i);
  });
});
