/**
 * The emoji service: `emojivoto.v1.EmojiService` (ListAll, FindByShortcode) over plaintext gRPC
 * on `WARD_APP_HOST:GRPC_PORT` (all addresses without it), and a call counter on `PROM_PORT` (optional).
 */
import { Server } from '@grpc/grpc-js';
import { CATALOG, findByShortcode } from './catalog.js';
import { type EmojiServiceServer, EmojiServiceService, type ListAllResponse } from './gen/emoji.js';
import { serveMetrics } from './metrics.js';
import { listenGrpc, serviceProcess } from './service-process.js';

const svc = serviceProcess('emoji');
// ward up gives each pod its own address; in a cluster the pod's network is its own: all addresses.
const host = svc.optionalEnv('WARD_APP_HOST') ?? '0.0.0.0';
const port = svc.port('GRPC_PORT');

const calls = new Map<string, number>([
  ['ListAll', 0],
  ['FindByShortcode', 0],
]);
const count = (method: string) => calls.set(method, (calls.get(method) ?? 0) + 1);
const LIST: ListAllResponse = { list: CATALOG.map(({ unicode, shortcode }) => ({ unicode, shortcode })) };

const emojiService: EmojiServiceServer = {
  listAll: (_call, callback) => {
    count('ListAll');
    callback(null, LIST);
  },
  findByShortcode: (call, callback) => {
    count('FindByShortcode');
    const found = findByShortcode(call.request.shortcode);
    callback(null, found === undefined ? {} : { emoji: { unicode: found.unicode, shortcode: found.shortcode } });
  },
};

const server = new Server();
server.addService(EmojiServiceService, emojiService);
await listenGrpc(svc, server, host, port, 'GRPC_PORT');
svc.log(`serving emojivoto.v1.EmojiService (${CATALOG.length} emoji) on ${host}:${port}`);
await serveMetrics(svc, host, [{ name: 'emojivoto_emoji_calls_total', help: 'EmojiService calls served, by method.', label: 'method', values: () => calls }]);
