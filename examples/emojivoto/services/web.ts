/**
 * The web service: the page and a JSON API on `WARD_APP_HOST:WEB_PORT` (all addresses without it), backed by the emoji and
 * voting services over gRPC (`EMOJISVC_HOST`, `VOTINGSVC_HOST`).
 *
 * - `GET /` the page; `GET /ready` 200 while serving (503 once stopping)
 * - `GET /api/list` every emoji: `[{unicode, shortcode}]`
 * - `GET /api/vote?choice=:doughnut:` one vote: `{unicode, shortcode}`; 400 for an unknown emoji
 * - `GET /api/leaderboard` emoji with votes, most first: `[{unicode, shortcode, votes}]`
 *
 * grpc-js sends its calls through `grpc_proxy` when that is set (in the mesh: the pod proxy's
 * outbound port, which the target is CONNECTed through). A failed gRPC call becomes a JSON error:
 * 403 when the callee's proxy denied it (PERMISSION_DENIED), 502 otherwise.
 */
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import { type CallOptions, credentials, Metadata, type ServiceError, status } from '@grpc/grpc-js';
import { findByShortcode } from './catalog.js';
import { type Emoji, EmojiServiceClient, EmojiServiceService, type FindByShortcodeResponse, type ListAllResponse } from './gen/emoji.js';
import { type ResultsResponse, type VoteResponse, VotingServiceClient, VotingServiceService } from './gen/voting.js';
import { listenHttp, serviceProcess } from './service-process.js';
import { PAGE_CSP, PAGE_HTML } from './web-page.js';

/** Deadline of each gRPC call. */
const RPC_TIMEOUT_MS = 3000;

const svc = serviceProcess('web');
// ward up gives each pod its own address; in a cluster the pod's network is its own: all addresses.
const host = svc.optionalEnv('WARD_APP_HOST') ?? '0.0.0.0';
const port = svc.port('WEB_PORT');
const emojiHost = svc.env('EMOJISVC_HOST');
const votingHost = svc.env('VOTINGSVC_HOST');

const emojiClient = new EmojiServiceClient(emojiHost, credentials.createInsecure());
const votingClient = new VotingServiceClient(votingHost, credentials.createInsecure());

/** A gRPC call that failed. */
class RpcError extends Error {
  readonly code: status;
  /** `path` is the method's path, e.g. `/emojivoto.v1.EmojiService/ListAll`. */
  constructor(path: string, cause: ServiceError) {
    super(`${path.slice(1)}: ${status[cause.code] ?? cause.code}: ${cause.details}`, { cause });
    this.code = cause.code;
  }
}

/** A request the caller got wrong: answered 400 with the message. */
class BadRequest extends Error {}

/** Runs one unary call to the method at `path` (started by `start`, with a deadline) as a promise. */
function rpc<T>(
  path: string,
  start: (metadata: Metadata, options: Partial<CallOptions>, callback: (e: ServiceError | null, r: T) => void) => void,
): Promise<T> {
  return new Promise((resolve, reject) => {
    start(new Metadata(), { deadline: Date.now() + RPC_TIMEOUT_MS }, (e, r) => (e === null ? resolve(r) : reject(new RpcError(path, e))));
  });
}

async function listEmoji(): Promise<Emoji[]> {
  const res = await rpc<ListAllResponse>(EmojiServiceService.listAll.path, (md, opts, cb) => emojiClient.listAll({}, md, opts, cb));
  return res.list;
}

async function vote(choice: string | null): Promise<Emoji> {
  if (choice === null || choice === '') throw new BadRequest('missing query parameter "choice" (an emoji shortcode such as :doughnut:)');
  const found = await rpc<FindByShortcodeResponse>(EmojiServiceService.findByShortcode.path, (md, opts, cb) =>
    emojiClient.findByShortcode({ shortcode: choice }, md, opts, cb),
  );
  const entry = findByShortcode(choice);
  if (found.emoji === undefined || entry === undefined) throw new BadRequest(`unknown emoji ${JSON.stringify(choice)}`);
  const voteFor = votingClient[entry.vote].bind(votingClient);
  await rpc<VoteResponse>(VotingServiceService[entry.vote].path, (md, opts, cb) => voteFor({}, md, opts, cb));
  return found.emoji;
}

async function leaderboard(): Promise<(Emoji & { votes: number })[]> {
  const [results, list] = await Promise.all([
    rpc<ResultsResponse>(VotingServiceService.results.path, (md, opts, cb) => votingClient.results({}, md, opts, cb)),
    listEmoji(),
  ]);
  const unicode = new Map(list.map((e) => [e.shortcode, e.unicode]));
  return results.results.map((r) => ({ unicode: unicode.get(r.shortcode) ?? '?', shortcode: r.shortcode, votes: r.votes }));
}

function send(res: ServerResponse, httpStatus: number, contentType: string, body: string, headers: Record<string, string> = {}): void {
  res.writeHead(httpStatus, { 'content-type': contentType, 'cache-control': 'no-store', ...headers }).end(body);
}

function sendJson(res: ServerResponse, httpStatus: number, body: unknown): void {
  send(res, httpStatus, 'application/json; charset=utf-8', `${JSON.stringify(body)}\n`);
}

let ready = false;

async function handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
  // Origin-form from browsers and the mesh, absolute-form from a client that treats us as a proxy.
  const url = new URL(req.url ?? '/', 'http://web');
  if (req.method !== 'GET' && req.method !== 'HEAD') {
    sendJson(res, 405, { error: `${req.method ?? '?'} not allowed` });
    return;
  }
  try {
    switch (url.pathname) {
      case '/':
        send(res, 200, 'text/html; charset=utf-8', PAGE_HTML, { 'content-security-policy': PAGE_CSP });
        return;
      case '/ready':
        send(res, ready ? 200 : 503, 'text/plain; charset=utf-8', ready ? 'ready\n' : 'stopping\n');
        return;
      case '/api/list':
        sendJson(res, 200, await listEmoji());
        return;
      case '/api/vote':
        sendJson(res, 200, await vote(url.searchParams.get('choice')));
        return;
      case '/api/leaderboard':
        sendJson(res, 200, await leaderboard());
        return;
      default:
        sendJson(res, 404, { error: `no such page: ${url.pathname}` });
        return;
    }
  } catch (e) {
    if (e instanceof BadRequest) {
      sendJson(res, 400, { error: e.message });
    } else if (e instanceof RpcError) {
      const httpStatus = e.code === status.PERMISSION_DENIED ? 403 : 502;
      svc.log(`${req.method} ${url.pathname}${url.search} -> ${httpStatus} (${e.message})`);
      sendJson(res, httpStatus, { error: e.message, grpcStatus: status[e.code] ?? e.code });
    } else {
      throw e;
    }
  }
}

const server = createServer((req, res) => {
  handle(req, res).catch((e: unknown) => {
    svc.log(`${req.method} ${req.url} -> 500 (${e instanceof Error ? e.message : String(e)})`);
    if (!res.headersSent) sendJson(res, 500, { error: 'internal error' });
    else res.destroy();
  });
});
svc.onShutdown(() => {
  ready = false;
  emojiClient.close();
  votingClient.close();
});
await listenHttp(svc, server, host, port, 'WEB_PORT');
ready = true;
const proxy = process.env.grpc_proxy ?? process.env.https_proxy ?? process.env.http_proxy;
svc.log(
  `serving http://${host}:${port}/ (emoji at ${emojiHost}, voting at ${votingHost}${proxy === undefined || proxy === '' ? '' : `, gRPC through ${proxy}`})`,
);
