/**
 * The server applications of `npm run bench -- mesh`, run as their own process (so the load
 * generator and the apps do not share an event loop): an HTTP/1.1 server answering a short text,
 * an HTTP/2 server answering gRPC-shaped unary calls (a 5-byte-prefixed message back, trailers
 * `grpc-status: 0`) and a TCP echo. All listen on 127.0.0.1, port 0, unless argv gives
 * `HOST HTTP1 GRPC TCP` (the netns paths of bench/mesh-linkerd.ts: fixed ports on every address
 * of a pod's namespace). Prints one JSON line `{"http1": PORT, "grpc": PORT, "tcp": PORT}` on
 * stdout when listening; exits when stdin closes (the bench died) or on SIGTERM.
 */
import { once } from 'node:events';
import { createServer as createHttp1Server } from 'node:http';
import { createServer as createHttp2Server, type ServerHttp2Stream } from 'node:http2';
import { type AddressInfo, createServer as createTcpServer } from 'node:net';

const [HOST = '127.0.0.1', ...fixedPorts] = process.argv.slice(2);
const portArg = (i: number): number => Number(fixedPorts[i] ?? 0);
const HTTP1_BODY = Buffer.from('pong\n');
/** A gRPC length-prefixed message: uncompressed flag, 4-byte big-endian length, 4 bytes of payload. */
const GRPC_REPLY = Buffer.from([0, 0, 0, 0, 4, 0x0a, 0x02, 0x6f, 0x6b]);

const http1 = createHttp1Server({ keepAliveTimeout: 60_000 }, (req, res) => {
  req.resume();
  req.on('end', () => {
    res.writeHead(200, { 'content-type': 'text/plain', 'content-length': HTTP1_BODY.length });
    res.end(HTTP1_BODY);
  });
});

const grpc = createHttp2Server({ settings: { maxConcurrentStreams: 1000 } });
grpc.on('stream', (stream: ServerHttp2Stream) => {
  stream.on('error', () => {});
  stream.resume();
  stream.on('end', () => {
    if (stream.destroyed) return;
    stream.respond({ ':status': 200, 'content-type': 'application/grpc' }, { waitForTrailers: true });
    stream.once('wantTrailers', () => stream.sendTrailers({ 'grpc-status': '0' }));
    stream.end(GRPC_REPLY);
  });
});
grpc.on('sessionError', () => {});

const tcp = createTcpServer({ noDelay: true }, (socket) => {
  socket.on('error', () => {});
  socket.pipe(socket);
});

http1.listen(portArg(0), HOST);
grpc.listen(portArg(1), HOST);
tcp.listen(portArg(2), HOST);
await Promise.all([once(http1, 'listening'), once(grpc, 'listening'), once(tcp, 'listening')]);
const port = (s: { address(): AddressInfo | string | null }) => (s.address() as AddressInfo).port;
process.stdout.write(`${JSON.stringify({ http1: port(http1), grpc: port(grpc), tcp: port(tcp) })}\n`);

const stop = () => process.exit(0);
process.on('SIGTERM', stop);
process.stdin.on('end', stop);
process.stdin.on('close', stop);
process.stdin.resume();
