import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { channelSettings } from './grpc-client.js';

describe('channelSettings', () => {
  it('never reaches the server through an HTTP proxy (grpc-js would honour http_proxy/grpc_proxy)', () => {
    const tls = { caPem: '-----BEGIN CERTIFICATE-----\n-----END CERTIFICATE-----\n', serverName: 'controller.linkerd' };
    for (const opts of [{ address: '127.0.0.1:8090' }, { address: '127.0.0.1:8090', dedicatedConnection: true }, { address: '127.0.0.1:8090', tls }]) {
      assert.equal(channelSettings(opts).options['grpc.enable_http_proxy'], 0, JSON.stringify(opts));
    }
  });
});
