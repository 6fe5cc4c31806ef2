/**
 * The vote-bot: every `VOTE_INTERVAL_MS` (default 1000) it votes for a random emoji through the
 * web service at `WEB_HOST` (`host:port`) and logs the outcome, one line per attempt:
 *
 *     vote :doughnut: -> 200
 *     vote :joy: -> 403 (l5d-proxy-error: unauthorized request on route)
 *     vote :ghost: -> error: connect ECONNREFUSED 127.0.0.1:8080
 *
 * With `http_proxy`/`HTTP_PROXY` set (in the mesh: the pod proxy's outbound port) each vote is an
 * absolute-form request to that proxy, `GET http://<WEB_HOST>/api/vote?choice=...` with `Host:
 * <WEB_HOST>`; Node's fetch ignores these variables, so node:http is used directly. Failures are
 * logged and the next vote is tried on schedule; the bot only stops on SIGTERM.
 */
import { Agent, request } from 'node:http';
import { CATALOG } from './catalog.js';
import { serviceProcess } from './service-process.js';

/** How long one vote may take before it counts as failed. */
const REQUEST_TIMEOUT_MS = 5000;
/** Response bodies are read only for an error message; no more than this is kept. */
const MAX_BODY_BYTES = 16 * 1024;

const svc = serviceProcess('vote-bot');
const webHost = svc.env('WEB_HOST');
const intervalMs = svc.positiveInt('VOTE_INTERVAL_MS', 1000);
const web = parseHttpUrl('WEB_HOST', `http://${webHost}/`);
const proxyUrl = svc.optionalEnv('http_proxy') ?? svc.optionalEnv('HTTP_PROXY');
const proxy = proxyUrl === undefined ? undefined : parseHttpUrl('http_proxy', proxyUrl);

function parseHttpUrl(name: string, value: string): URL {
  const url = URL.canParse(value) ? new URL(value) : undefined;
  if (url === undefined || url.protocol !== 'http:' || url.hostname === '')
    return svc.fatal(`${name}: ${JSON.stringify(value)} is not an http://host:port address`);
  return url;
}

/** Where to connect for `url`: node:http wants IPv6 hosts without brackets and numeric ports. */
function endpoint(url: URL): { host: string; port: number } {
  return { host: url.hostname.replace(/^\[(.*)\]$/, '$1'), port: url.port === '' ? 80 : Number(url.port) };
}

/** The outcome of one vote: the status and, for a failure, why. */
interface VoteOutcome {
  readonly status: number;
  readonly reason?: string;
}

const agent = new Agent({ keepAlive: true, maxSockets: 1 });
const stopping = new AbortController();

function vote(shortcode: string): Promise<VoteOutcome> {
  const path = `/api/vote?choice=${encodeURIComponent(shortcode)}`;
  const via = proxy === undefined ? { ...endpoint(web), path } : { ...endpoint(proxy), path: `http://${webHost}${path}` };
  return new Promise((resolve, reject) => {
    const req = request(
      { ...via, method: 'GET', agent, headers: { host: webHost }, signal: AbortSignal.any([stopping.signal, AbortSignal.timeout(REQUEST_TIMEOUT_MS)]) },
      (res) => {
        const chunks: Buffer[] = [];
        let size = 0;
        res.on('data', (chunk: Buffer) => {
          if (size < MAX_BODY_BYTES) chunks.push(chunk);
          size += chunk.length;
        });
        res.on('error', reject);
        res.on('end', () => {
          const status = res.statusCode ?? 0;
          if (status >= 200 && status < 300) return resolve({ status });
          const proxyError = res.headers['l5d-proxy-error'];
          if (typeof proxyError === 'string') return resolve({ status, reason: `l5d-proxy-error: ${proxyError}` });
          const reason = errorField(Buffer.concat(chunks).toString('utf8', 0, MAX_BODY_BYTES));
          resolve(reason === undefined ? { status } : { status, reason });
        });
      },
    );
    req.on('error', reject);
    req.end();
  });
}

/** The `error` of a JSON error body such as web's, if it is one. */
function errorField(body: string): string | undefined {
  try {
    const parsed: unknown = JSON.parse(body);
    if (typeof parsed === 'object' && parsed !== null && 'error' in parsed && typeof parsed.error === 'string') return parsed.error;
  } catch {
    // Not JSON (e.g. a proxy's plain-text error): the status says enough.
  }
  return undefined;
}

let timer: NodeJS.Timeout | undefined;

async function voteAndReschedule(): Promise<void> {
  const emoji = CATALOG[Math.floor(Math.random() * CATALOG.length)]!;
  try {
    const { status, reason } = await vote(emoji.shortcode);
    svc.log(`vote ${emoji.shortcode} -> ${status}${reason === undefined ? '' : ` (${reason})`}`);
  } catch (e) {
    if (stopping.signal.aborted) return;
    svc.log(`vote ${emoji.shortcode} -> error: ${e instanceof Error ? e.message : String(e)}`);
  }
  if (!stopping.signal.aborted) timer = setTimeout(() => void voteAndReschedule(), intervalMs);
}

svc.onShutdown(() => {
  stopping.abort();
  clearTimeout(timer);
  agent.destroy();
});
svc.log(`voting at http://${webHost} every ${intervalMs} ms${proxy === undefined ? '' : ` through ${proxy.origin}`}`);
void voteAndReschedule();
