import assert from 'node:assert/strict';
import { once } from 'node:events';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, describe, it } from 'node:test';
import { waitFor, within } from '../testing/identity.js';
import { AppUpstream } from './http-upstream.js';

const HOST = '127.0.0.1';

describe('AppUpstream', () => {
  const app = createServer((req, res) => {
    req.resume();
    res.end(`hello ${req.url}`);
  });
  // `Keep-Alive: timeout=3`: the pool closes an idle connection 2 s before that, after 1 s.
  app.keepAliveTimeout = 3500;
  const upstream = new AppUpstream({ maxSocketsPerPort: 4 });
  after(() => {
    upstream.close();
    app.close();
  });

  function get(port: number, path: string): Promise<{ status: number; body: string }> {
    return within(
      new Promise((resolve, reject) => {
        let status = 0;
        let body = '';
        upstream.pool1(HOST, port).dispatch(
          { method: 'GET', path, headers: ['host', 'app'], body: null },
          {
            onConnect: () => {},
            onHeaders: (s: number) => {
              status = s;
              return true;
            },
            onData: (c: Buffer) => {
              body += c.toString();
              return true;
            },
            onComplete: () => resolve({ status, body }),
            onError: reject,
          },
        );
      }),
      5000,
      `GET ${path}`,
    );
  }

  it('keeps a pool while it holds a connection, drops it once empty, and makes a new one on the next request', async () => {
    app.listen(0, HOST);
    await once(app, 'listening');
    const port = (app.address() as AddressInfo).port;
    assert.deepEqual(await get(port, '/one'), { status: 200, body: 'hello /one' });
    const pool = upstream.pool1(HOST, port);
    upstream.prune();
    assert.equal(upstream.http1Pools, 1, 'a pool holding a connection is kept');
    await waitFor(() => pool.stats.connected === 0, 'the application to close the idle connection', 5000);
    upstream.prune();
    assert.equal(upstream.http1Pools, 0, 'an empty pool is dropped');
    assert.equal(pool.destroyed, true);
    assert.deepEqual(await get(port, '/two'), { status: 200, body: 'hello /two' });
    assert.equal(upstream.http1Pools, 1);
  });
});
