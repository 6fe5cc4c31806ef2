/**
 * The HTTP/1 tap of redirected connections, on stand-in sockets: what each exchange reports
 * (status, gRPC status, error) for pipelined requests, informational responses, HEAD, trailers,
 * a protocol switch, a connection that ends under a request and bytes that do not parse.
 */
import assert from 'node:assert/strict';
import { EventEmitter } from 'node:events';
import type { Socket } from 'node:net';
import { describe, it } from 'node:test';
import { setImmediate as tick } from 'node:timers/promises';
import { HttpExchange, type HttpRecorder } from '../metrics/http.js';
import { tapHttp1 } from './http1-tap.js';

interface Ended {
  readonly status: number;
  readonly headerGrpc: number;
  readonly trailerGrpc: number;
  readonly error: string | undefined;
  readonly grpc: boolean;
}

function tapped(): { client: EventEmitter; upstream: EventEmitter; started: () => number; ended: Ended[] } {
  const client = new EventEmitter();
  const upstream = new EventEmitter();
  const ended: Ended[] = [];
  let started = 0;
  const recorder: HttpRecorder = {
    end: (status, headerGrpc, trailerGrpc, error, _latencyMs, grpc) => ended.push({ status, headerGrpc, trailerGrpc, error, grpc: grpc === true }),
  };
  tapHttp1(client as unknown as Socket, upstream as unknown as Socket, () => {
    started++;
    return new HttpExchange(recorder);
  });
  return { client, upstream, started: () => started, ended };
}

const ok = (status: number, extra = '', body = '') => `HTTP/1.1 ${status} X\r\ncontent-length: ${body.length}\r\n${extra}\r\n${body}`;
const http = { headerGrpc: -1, trailerGrpc: -1, error: undefined, grpc: false };

describe('tapHttp1', () => {
  it('matches pipelined responses to requests in order, skipping 1xx and reading no body after HEAD', () => {
    const t = tapped();
    t.client.emit('data', Buffer.from('GET /a HTTP/1.1\r\nhost: x\r\n\r\nHEAD /b HTTP/1.1\r\nhost: x\r\n\r\nGET /c HTTP/1.1\r\nhost: x\r\n\r\n'));
    assert.equal(t.started(), 3);
    t.upstream.emit('data', Buffer.from(`HTTP/1.1 100 Continue\r\n\r\n${ok(200, '', 'aa')}HTTP/1.1 404 X\r\ncontent-length: 10\r\n\r\n`));
    t.upstream.emit('data', Buffer.from(ok(503)));
    assert.deepEqual(t.ended, [
      { status: 200, ...http },
      { status: 404, ...http },
      { status: 503, ...http },
    ]);
  });

  it('reads the gRPC status of a gRPC request from the headers or the trailers', () => {
    const t = tapped();
    t.client.emit('data', Buffer.from('POST /s/M HTTP/1.1\r\nhost: x\r\ncontent-type: application/grpc\r\ncontent-length: 0\r\n\r\n'));
    t.upstream.emit('data', Buffer.from('HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n2\r\nhi\r\n0\r\ngrpc-status: 13\r\n\r\n'));
    assert.deepEqual(t.ended, [{ status: 200, headerGrpc: -1, trailerGrpc: 13, error: undefined, grpc: true }]);
  });

  it('ends the exchange at a 101 and follows the connection no further', async () => {
    const t = tapped();
    t.client.emit('data', Buffer.from('GET /ws HTTP/1.1\r\nhost: x\r\nconnection: upgrade\r\nupgrade: websocket\r\n\r\n\x81\x05hello'));
    t.upstream.emit('data', Buffer.from('HTTP/1.1 101 Switching Protocols\r\nconnection: upgrade\r\nupgrade: websocket\r\n\r\n\x81\x05world'));
    await tick();
    t.client.emit('data', Buffer.from('GET /not-http HTTP/1.1\r\nhost: x\r\n\r\n'));
    assert.equal(t.started(), 1);
    assert.deepEqual(t.ended, [{ status: 101, ...http }]);
  });

  it('reports a request the connection ended under as failed, and a response delimited by the close as complete', () => {
    const t = tapped();
    t.client.emit('data', Buffer.from('GET /a HTTP/1.1\r\nhost: x\r\n\r\nGET /b HTTP/1.1\r\nhost: x\r\n\r\n'));
    t.upstream.emit('data', Buffer.from('HTTP/1.1 200 OK\r\n\r\nuntil the close'));
    t.upstream.emit('end');
    t.upstream.emit('close');
    assert.deepEqual(t.ended, [
      { status: 200, ...http },
      { status: 0, ...http, error: 'connection closed' },
    ]);
  });

  it('stops at bytes that do not parse, reporting what was in flight', async () => {
    const t = tapped();
    t.client.emit('data', Buffer.from('GET /a HTTP/1.1\r\nhost: x\r\n\r\n'));
    t.upstream.emit('data', Buffer.from('SSH-2.0-nope\r\n'));
    await tick();
    t.client.emit('data', Buffer.from('GET /b HTTP/1.1\r\nhost: x\r\n\r\n'));
    assert.equal(t.started(), 1);
    assert.deepEqual(t.ended, [{ status: 0, ...http, error: 'unclassified' }]);
  });
});
