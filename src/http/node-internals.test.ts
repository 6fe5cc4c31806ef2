/**
 * The Node internals ward relies on (node-internals), checked on the running Node: each test
 * fails by name on a Node whose internals moved.
 */
import assert from 'node:assert/strict';
import { once } from 'node:events';
import { fstatSync } from 'node:fs';
import { type AddressInfo, connect, createServer, type Socket } from 'node:net';
import { after, describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { waitFor } from '../shared/testing/waits.js';
import { loadNativeHttpParser, socketFd, unsentBytes } from './node-internals.js';

const sockets: Socket[] = [];
after(() => {
  for (const s of sockets) s.destroy();
});

async function pair(): Promise<{ client: Socket; server: Socket; close: () => void }> {
  const srv = createServer();
  srv.listen(0, '127.0.0.1');
  await once(srv, 'listening');
  const accepted = once(srv, 'connection');
  const client = connect((srv.address() as AddressInfo).port, '127.0.0.1');
  const [server] = (await accepted) as [Socket];
  sockets.push(client, server);
  return { client, server, close: () => srv.close() };
}

describe('node internals', () => {
  it("node:_http_common's HTTPParser parses a request and reports it through its callback slots", () => {
    const P = loadNativeHttpParser();
    const parser = new P();
    const seen: unknown[] = [];
    parser.initialize(P.REQUEST, {}, 16 * 1024, 0);
    parser[P.kOnHeadersComplete] = (major: number, minor: number, headers: string[], _method: number, url: string) => {
      seen.push([major, minor, headers, url]);
      return 0;
    };
    parser[P.kOnMessageComplete] = () => seen.push('complete');
    const n = parser.execute(Buffer.from('GET /x HTTP/1.1\r\nHost: a\r\n\r\n', 'latin1'));
    parser.close();
    assert.equal(n, 28, 'every byte consumed');
    assert.deepEqual(seen, [[1, 1, ['Host', 'a'], '/x'], 'complete']);
  });

  it("a socket handle's writeQueueSize goes down as a slow reader drains one large write", async () => {
    const { client, server, close } = await pair();
    try {
      client.pause();
      server.write(Buffer.alloc(32 * 1024 * 1024));
      await sleep(50);
      const first = unsentBytes(server);
      assert.ok(first > 0 && first < 32 * 1024 * 1024, `unsent ${first}`);
      // writableLength stands still meanwhile: it counts the write request whole.
      const whole = server.writableLength;
      for (let i = 0; i < 40; i++) client.read();
      client.resume();
      await waitFor(() => unsentBytes(server) < first, 'the unsent bytes to go down', 10_000);
      assert.ok(server.writableLength === whole || server.writableLength === 0);
      await waitFor(() => unsentBytes(server) === 0, 'everything handed over', 10_000);
    } finally {
      close();
    }
  });

  it("a socket handle's fd is the connection's descriptor", async () => {
    const { client, close } = await pair();
    try {
      const fd = socketFd(client);
      assert.equal(typeof fd, 'number');
      assert.ok(fstatSync(fd as number).isSocket());
      assert.equal(socketFd(new (await import('node:net')).Socket()), undefined);
    } finally {
      close();
    }
  });
});
