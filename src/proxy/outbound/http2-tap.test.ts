/**
 * The HTTP/2 tap of redirected connections, on stand-in sockets fed frames built here: header
 * blocks through the HPACK tables (indexed fields on later streams), CONTINUATION and padding,
 * frames split at every byte, trailers-only and trailer gRPC statuses, resets and a frame that
 * does not parse.
 */
import assert from 'node:assert/strict';
import { EventEmitter } from 'node:events';
import type { Socket } from 'node:net';
import { describe, it } from 'node:test';
import { ByteWriter, HpackEncoder } from '../../http/index.js';
import { HttpExchange, type HttpRecorder } from '../metrics/http.js';
import { tapHttp2 } from './http2-tap.js';

interface Ended {
  readonly status: number;
  readonly headerGrpc: number;
  readonly trailerGrpc: number;
  readonly error: string | undefined;
  readonly grpc: boolean;
}

const PREFACE = Buffer.from('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n', 'latin1');

function frame(type: number, flags: number, stream: number, payload: Buffer): Buffer {
  const h = Buffer.alloc(9);
  h.writeUIntBE(payload.length, 0, 3);
  h[3] = type;
  h[4] = flags;
  h.writeUInt32BE(stream, 5);
  return Buffer.concat([h, payload]);
}

function block(enc: HpackEncoder, pairs: string[]): Buffer {
  const w = new ByteWriter();
  enc.encode(w, pairs);
  return Buffer.from(w.buf.subarray(0, w.pos));
}

function tapped(): { client: EventEmitter; upstream: EventEmitter; ended: Ended[]; started: () => number } {
  const client = new EventEmitter();
  const upstream = new EventEmitter();
  const ended: Ended[] = [];
  let started = 0;
  const recorder: HttpRecorder = {
    end: (status, headerGrpc, trailerGrpc, error, _latencyMs, grpc) => ended.push({ status, headerGrpc, trailerGrpc, error, grpc: grpc === true }),
  };
  tapHttp2(client as unknown as Socket, upstream as unknown as Socket, () => {
    started++;
    return new HttpExchange(recorder);
  });
  return { client, upstream, ended, started: () => started };
}

/** Emits `bytes` one byte at a time. */
function trickle(socket: EventEmitter, bytes: Buffer): void {
  for (let i = 0; i < bytes.length; i++) socket.emit('data', bytes.subarray(i, i + 1));
}

const GRPC_REQ = [':method', 'POST', ':scheme', 'http', ':path', '/s/M', ':authority', 'svc:80', 'content-type', 'application/grpc', 'te', 'trailers'];

describe('tapHttp2', () => {
  it('follows header blocks through both HPACK tables, split at every byte, with CONTINUATION and padding', () => {
    const t = tapped();
    const req = new HpackEncoder();
    const res = new HpackEncoder();
    const settings = frame(0x4, 0, 0, Buffer.alloc(0));
    const grpcBlock = block(req, GRPC_REQ);
    // Stream 1: gRPC, its block in a padded HEADERS and a CONTINUATION.
    const padded = Buffer.concat([Buffer.from([3]), grpcBlock.subarray(0, 5), Buffer.alloc(3)]);
    trickle(
      t.client,
      Buffer.concat([PREFACE, settings, frame(0x1, 0x8, 1, padded), frame(0x9, 0x4, 1, grpcBlock.subarray(5)), frame(0x0, 0x1, 1, Buffer.alloc(5))]),
    );
    // Stream 3: the same request again, mostly indexed now.
    trickle(t.client, frame(0x1, 0x4 | 0x1, 3, block(req, GRPC_REQ)));
    // Stream 5: not gRPC.
    t.client.emit('data', frame(0x1, 0x4 | 0x1, 5, block(req, [':method', 'GET', ':scheme', 'http', ':path', '/x', ':authority', 'svc:80'])));
    assert.equal(t.started(), 3);
    const head = [':status', '200', 'content-type', 'application/grpc'];
    trickle(
      t.upstream,
      Buffer.concat([
        settings,
        frame(0x1, 0x4, 1, block(res, head)),
        frame(0x0, 0, 1, Buffer.alloc(40_000)),
        frame(0x1, 0x4 | 0x1, 1, block(res, ['grpc-status', '14'])),
        // Trailers-only.
        frame(0x1, 0x4 | 0x1, 3, block(res, [...head, 'grpc-status', '0'])),
        frame(0x1, 0x4, 5, block(res, [':status', '103'])),
        frame(0x1, 0x4, 5, block(res, [':status', '503'])),
        frame(0x0, 0x1, 5, Buffer.from('down')),
      ]),
    );
    assert.deepEqual(t.ended, [
      { status: 200, headerGrpc: -1, trailerGrpc: 14, error: undefined, grpc: true },
      { status: 200, headerGrpc: 0, trailerGrpc: -1, error: undefined, grpc: true },
      { status: 503, headerGrpc: -1, trailerGrpc: -1, error: undefined, grpc: false },
    ]);
  });

  it('reports resets by either side and the streams a closing connection leaves', () => {
    const t = tapped();
    const req = new HpackEncoder();
    const get = (path: string) => block(req, [':method', 'GET', ':scheme', 'http', ':path', path, ':authority', 'svc:80']);
    t.client.emit('data', Buffer.concat([PREFACE, frame(0x1, 0x5, 1, get('/a')), frame(0x1, 0x5, 3, get('/b')), frame(0x1, 0x5, 5, get('/c'))]));
    const code = (n: number) => Buffer.from([0, 0, 0, n]);
    t.client.emit('data', frame(0x3, 0, 1, code(8)));
    t.upstream.emit('data', frame(0x3, 0, 3, code(7)));
    t.upstream.emit('close');
    assert.deepEqual(
      t.ended.map((e) => [e.status, e.error]),
      [
        [0, 'h2(CANCEL)'],
        [0, 'h2(REFUSED_STREAM)'],
        [0, 'connection closed'],
      ],
    );
  });

  it('stops at a CONTINUATION that continues nothing, reporting what was in flight', () => {
    const t = tapped();
    const req = new HpackEncoder();
    t.client.emit('data', Buffer.concat([PREFACE, frame(0x1, 0x5, 1, block(req, [':method', 'GET', ':scheme', 'http', ':path', '/', ':authority', 'a']))]));
    t.client.emit('data', frame(0x9, 0x4, 1, Buffer.alloc(3)));
    t.client.emit('data', frame(0x1, 0x5, 3, block(req, [':method', 'GET', ':scheme', 'http', ':path', '/', ':authority', 'a'])));
    assert.equal(t.started(), 1);
    assert.deepEqual(
      t.ended.map((e) => e.error),
      ['unclassified'],
    );
  });
});
