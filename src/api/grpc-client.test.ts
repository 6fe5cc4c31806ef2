import assert from 'node:assert/strict';
import { type AddressInfo, createServer, type Socket } from 'node:net';
import { after, before, describe, it } from 'node:test';
import { type GrpcServerHandle, startGrpcServer } from './grpc-server.js';
import { InboundPolicyClient } from './inbound-client.js';
import { inboundPolicyService } from './inbound-service.js';
import { defaultServer } from './test-fixtures.js';

describe('GrpcConnectOptions', () => {
  const PROXY_VARS = ['http_proxy', 'HTTP_PROXY', 'https_proxy', 'HTTPS_PROXY', 'grpc_proxy', 'GRPC_PROXY', 'all_proxy', 'ALL_PROXY'];
  const saved = new Map(PROXY_VARS.map((k) => [k, process.env[k]]));
  const proxied: Socket[] = [];
  const proxy = createServer((s) => {
    proxied.push(s);
    s.destroy();
  });
  let server: GrpcServerHandle;

  before(async () => {
    await new Promise<void>((r) => proxy.listen(0, '127.0.0.1', r));
    const url = `http://127.0.0.1:${(proxy.address() as AddressInfo).port}`;
    for (const k of PROXY_VARS) process.env[k] = url;
    const cell = { value: defaultServer, subscribe: () => () => {} };
    server = await startGrpcServer({ host: '127.0.0.1', port: 0, services: [inboundPolicyService({ lookup: () => cell })] });
  });
  after(async () => {
    for (const [k, v] of saved) {
      if (v === undefined) delete process.env[k];
      else process.env[k] = v;
    }
    await server.close(0);
    await new Promise<void>((r) => proxy.close(() => r()));
  });

  it('never reaches the server through an HTTP proxy (grpc-js would honour http_proxy/grpc_proxy)', async () => {
    for (const dedicatedConnection of [false, true]) {
      const client = new InboundPolicyClient({ address: `127.0.0.1:${server.port}`, dedicatedConnection });
      try {
        assert.deepStrictEqual(await client.getPort('ns:pod', 8080, { deadlineMs: 5000 }), defaultServer);
      } finally {
        client.close();
      }
    }
    assert.equal(proxied.length, 0);
  });
});
