import assert from 'node:assert/strict';
import { once } from 'node:events';
import { createServer, request as httpRequest } from 'node:http';
import { type AddressInfo, createServer as createNetServer } from 'node:net';
import { after, describe, it } from 'node:test';
import { Http1Pool, plainConnect } from '../../http/h1/pool.js';
import { Http1Server, type Http1ServerResponse } from '../../http/h1/server.js';
import { within } from '../testing/identity.js';
import { type Http1UpstreamRequest, headerValue, refusalOf, relayHttp1 } from './http-relay.js';

const OK: Http1UpstreamRequest = { method: 'GET', path: '/a?b=c', headers: ['Host', 'web', 'X-A', 'caf\u00e9', 'content-length', '3'] };

/** Request shapes and why ward refuses them (undefined: forwarded). */
const CASES: [string[] | string, RegExp | undefined][] = [
  [['Host', 'web:8080'], undefined],
  [['Host', '[::1]:8080'], undefined],
  [['Host', '10.0.0.1'], undefined],
  [[], undefined],
  [['te', 'trailers', 'x-long-header-name-of-17', 'v'], undefined],
  ['*', /not origin-form/],
  ['http://web/a', /not origin-form/],
  [['Host', 'web', 'host', 'evil'], /more than one Host/],
  [['Host', '[x'], /invalid Host/],
  [['Host', '[::1:80'], /invalid Host/],
  [['Content-Length', '1', 'content-length', '1'], /more than one Content-Length/],
  [['Connection', 'close'], /connection header cannot be forwarded/],
  [['Transfer-Encoding', 'chunked'], /transfer-encoding header/],
  [['Keep-Alive', 'timeout=5'], /keep-alive header/],
  [['Upgrade', 'websocket'], /upgrade header/],
  [['Expect', '100-continue'], /expect header/],
  [['X-Bad', 'a\r\nInjected: yes'], /invalid value of the x-bad header/],
  [['X-Bad', 'snow \u2603'], /invalid value/],
  [['bad name', 'x'], /invalid header name "bad name"/],
  [['X-Bad:', 'x'], /invalid header name/],
  [['', 'x'], /invalid header name/],
  [['X-Bad\r\nInjected', 'x'], /invalid header name/],
  [['Content-Length', '-1'], /invalid Content-Length/],
  [['Content-Length', '1 '], /invalid Content-Length/],
  [['Content-Length', '0x10'], /invalid Content-Length/],
  ['/a b', /invalid request target/],
  ['/a\r\nHost: evil', /invalid request target/],
  ['/caf\u00e9', /invalid request target/],
  ['/a\x00', /invalid request target/],
];

describe('relayHttp1 helpers', () => {
  it('refuses what would make the written request say more than it did (the pool writes names, values and the target verbatim)', () => {
    assert.equal(refusalOf(OK), undefined);
    for (const [c, re] of CASES) {
      const request = typeof c === 'string' ? { ...OK, path: c } : { ...OK, headers: c };
      const refusal = refusalOf(request);
      if (re === undefined) assert.equal(refusal, undefined, JSON.stringify(c));
      else assert.match(refusal ?? 'accepted', re, JSON.stringify(c));
    }
  });

  it('finds header values in any case', () => {
    assert.equal(headerValue(['Grpc-Status', '7', 'grpc-status', '0'], 'grpc-status'), '7');
    assert.equal(headerValue(['grpc-statuses', '7'], 'grpc-status'), undefined);
  });
});

describe('relayHttp1', () => {
  const app = createServer((req, res) => {
    req.resume();
    res.end(`app ${req.url}`);
  });
  let pool: Http1Pool | undefined;
  let appPort = 0;
  /** One connection, so a wedged one shows. */
  const current = (): Http1Pool => {
    pool ??= new Http1Pool({ authority: `127.0.0.1:${appPort}`, connect: plainConnect('127.0.0.1', appPort), connections: 1 });
    return pool;
  };
  const reply = (res: Http1ServerResponse, status: number, text: string): void => {
    const body = Buffer.from(text);
    res.writeHead(status, undefined, ['content-type', 'text/plain', 'content-length', String(body.length)]);
    res.write(body);
    res.end();
  };
  const server = new Http1Server<undefined>({
    maxHeaderBytes: 16384,
    headersTimeoutMs: 5000,
    keepAliveTimeoutMs: 5000,
    events: {
      request: (req, res) => {
        // A header name the parser would never pass (a route filter's, say).
        const headers = req.url === '/bad' ? ['bad name', 'x'] : ['host', 'app'];
        relayHttp1(
          current(),
          req,
          res,
          { method: 'GET', path: req.url, headers },
          {
            refused: (reason) => reply(res, 400, reason),
            failed: (err) => reply(res, 502, err.message),
            unrelayable: () => res.destroy(),
            aborted: () => {},
          },
        );
      },
      connect: (_req, socket) => socket.destroy(),
    },
  });
  const front = createNetServer((socket) => server.serve(socket, undefined));
  after(() => {
    void pool?.destroy();
    app.close();
    server.close();
    front.close();
  });

  function get(port: number, path: string): Promise<{ status: number; body: string }> {
    return within(
      new Promise((resolve, reject) => {
        httpRequest({ host: '127.0.0.1', port, path, agent: false }, (res) => {
          let body = '';
          res.setEncoding('utf8');
          res.on('data', (c: string) => {
            body += c;
          });
          res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
        })
          .on('error', reject)
          .end();
      }),
      5000,
      `GET ${path}`,
    );
  }

  it('answers 400 for a request it cannot write as it is, sends nothing of it, and serves the next request', async () => {
    app.listen(0, '127.0.0.1');
    front.listen(0, '127.0.0.1');
    await Promise.all([once(app, 'listening'), once(front, 'listening')]);
    appPort = (app.address() as AddressInfo).port;
    const port = (front.address() as AddressInfo).port;
    assert.equal((await get(port, '/first')).status, 200);
    const first = current();
    const bad = await get(port, '/bad');
    assert.equal(bad.status, 400);
    assert.match(bad.body, /invalid header name "bad name"/);
    assert.deepEqual(await get(port, '/after'), { status: 200, body: 'app /after' });
    assert.equal(current(), first, 'the same pool');
    assert.deepEqual(first.stats, { connected: 1, size: 0 }, 'one connection, reused');
  });
});
