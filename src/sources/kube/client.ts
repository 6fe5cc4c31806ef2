/**
 * A small Kubernetes API client over node:https: kubeconfig and in-cluster configuration, JSON
 * requests, and streaming watches. Deliberately not @kubernetes/client-node, which costs
 * 70-95 MB of RSS for the little the controller needs.
 */
import { readFileSync, statSync } from 'node:fs';
import type { IncomingMessage, OutgoingHttpHeaders } from 'node:http';
import * as http from 'node:http';
import * as https from 'node:https';
import { homedir } from 'node:os';
import { delimiter, dirname, isAbsolute, join } from 'node:path';
import { parse as parseYaml } from 'yaml';
import { MeshError } from '../../shared/index.js';

// === configuration ===

/** Where a bearer token comes from: a fixed string, or a file re-read when it changes. */
export type KubeToken = { readonly value: string } | { readonly file: string };

/** Everything needed to reach and authenticate to one API server. */
export interface KubeConfig {
  /** Base URL, e.g. `https://127.0.0.1:6443` (may carry a path prefix). */
  readonly server: string;
  /** PEM of the CA(s) that sign the server's certificate; the system roots when absent. */
  readonly ca?: string;
  readonly token?: KubeToken;
  /** PEM client certificate and key. */
  readonly clientCert?: string;
  readonly clientKey?: string;
  /** The context's namespace (in-cluster: the pod's namespace), default `default`. */
  readonly namespace: string;
  /** Only true when the caller allowed it explicitly. */
  readonly insecureSkipTlsVerify: boolean;
}

/** The configuration could not be read or is not usable. */
export class KubeConfigError extends MeshError {
  constructor(message: string, options?: { cause?: unknown }) {
    super('ERR_KUBE_CONFIG', message, options);
    this.name = 'KubeConfigError';
  }
}

/** Options of {@link loadKubeconfig}. */
export interface LoadKubeconfigOptions {
  /** A context other than `current-context`. */
  readonly context?: string;
  /** Accept `insecure-skip-tls-verify: true` (refused otherwise). */
  readonly allowInsecure?: boolean;
  /** Environment to read `KUBECONFIG` from (default process.env). */
  readonly env?: Readonly<Record<string, string | undefined>>;
}

interface NamedEntry {
  readonly name?: unknown;
  readonly [k: string]: unknown;
}

const isRecord = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

/**
 * Reads a kubeconfig: `path`, else each file of `$KUBECONFIG` (merged, first wins, as kubectl
 * does), else `~/.kube/config`. Relative file references resolve against the file that names
 * them. Exec and auth-provider plugins are not supported and say so.
 */
export function loadKubeconfig(path?: string, opts: LoadKubeconfigOptions = {}): KubeConfig {
  const env = opts.env ?? process.env;
  const files =
    path !== undefined
      ? [path]
      : env.KUBECONFIG !== undefined && env.KUBECONFIG !== ''
        ? env.KUBECONFIG.split(delimiter).filter((f) => f !== '')
        : [join(homedir(), '.kube', 'config')];
  const clusters = new Map<string, { entry: Record<string, unknown>; base: string }>();
  const users = new Map<string, { entry: Record<string, unknown>; base: string }>();
  const contexts = new Map<string, Record<string, unknown>>();
  let current: string | undefined;
  let read = 0;
  for (const file of files) {
    let text: string;
    try {
      text = readFileSync(file, 'utf8');
    } catch (e) {
      // kubectl skips missing files of a KUBECONFIG list, but not an explicit path.
      if (path === undefined && files.length > 1 && (e as NodeJS.ErrnoException).code === 'ENOENT') continue;
      throw new KubeConfigError(`cannot read kubeconfig ${file}: ${(e as Error).message}`, { cause: e });
    }
    read++;
    let doc: unknown;
    try {
      doc = parseYaml(text);
    } catch (e) {
      throw new KubeConfigError(`kubeconfig ${file} is not valid YAML: ${(e as Error).message}`, { cause: e });
    }
    if (doc === null || doc === undefined) continue;
    if (!isRecord(doc)) throw new KubeConfigError(`kubeconfig ${file} is not a mapping`);
    const base = dirname(file);
    const named = (key: string, field: string, into: Map<string, { entry: Record<string, unknown>; base: string }>) => {
      const list = doc[key];
      if (list === undefined || list === null) return;
      if (!Array.isArray(list)) throw new KubeConfigError(`kubeconfig ${file}: ${key} must be a list`);
      for (const item of list as NamedEntry[]) {
        if (!isRecord(item) || typeof item.name !== 'string') throw new KubeConfigError(`kubeconfig ${file}: every entry of ${key} needs a name`);
        const entry = item[field];
        if (!into.has(item.name)) into.set(item.name, { entry: isRecord(entry) ? entry : {}, base });
      }
    };
    named('clusters', 'cluster', clusters);
    named('users', 'user', users);
    const ctxs = new Map<string, { entry: Record<string, unknown>; base: string }>();
    named('contexts', 'context', ctxs);
    for (const [k, v] of ctxs) if (!contexts.has(k)) contexts.set(k, v.entry);
    if (current === undefined && typeof doc['current-context'] === 'string' && doc['current-context'] !== '') current = doc['current-context'];
  }
  if (read === 0) throw new KubeConfigError(`no kubeconfig found (tried ${files.join(', ')})`);
  const contextName = opts.context ?? current;
  if (contextName === undefined) throw new KubeConfigError('kubeconfig has no current-context');
  const context = contexts.get(contextName);
  if (context === undefined) throw new KubeConfigError(`kubeconfig has no context ${JSON.stringify(contextName)}`);
  const clusterName = context.cluster;
  if (typeof clusterName !== 'string') throw new KubeConfigError(`kubeconfig context ${JSON.stringify(contextName)} names no cluster`);
  const cluster = clusters.get(clusterName);
  if (cluster === undefined) throw new KubeConfigError(`kubeconfig has no cluster ${JSON.stringify(clusterName)}`);
  const userName = context.user;
  const user = typeof userName === 'string' ? users.get(userName) : undefined;
  if (typeof userName === 'string' && user === undefined) throw new KubeConfigError(`kubeconfig has no user ${JSON.stringify(userName)}`);

  const c = cluster.entry;
  const server = c.server;
  if (typeof server !== 'string' || server === '') throw new KubeConfigError(`kubeconfig cluster ${JSON.stringify(clusterName)} has no server`);
  const insecure = c['insecure-skip-tls-verify'] === true;
  if (insecure && opts.allowInsecure !== true) {
    throw new KubeConfigError(
      `kubeconfig cluster ${JSON.stringify(clusterName)} sets insecure-skip-tls-verify; refusing to talk to an unverified API server (set certificate-authority instead)`,
    );
  }
  const ca = pemOf(c, 'certificate-authority', cluster.base, `cluster ${clusterName}`);
  const u = user?.entry ?? {};
  const ub = user?.base ?? '.';
  if (u.exec !== undefined) throw new KubeConfigError(`kubeconfig user ${JSON.stringify(userName)} uses an exec plugin, which ward does not support`);
  if (u['auth-provider'] !== undefined)
    throw new KubeConfigError(`kubeconfig user ${JSON.stringify(userName)} uses an auth-provider, which ward does not support`);
  if (u.username !== undefined || u.password !== undefined)
    throw new KubeConfigError(`kubeconfig user ${JSON.stringify(userName)} uses basic auth, which ward does not support`);
  let token: KubeToken | undefined;
  if (typeof u.token === 'string' && u.token !== '') token = { value: u.token };
  else if (typeof u.tokenFile === 'string' && u.tokenFile !== '') token = { file: resolveRef(u.tokenFile, ub) };
  const clientCert = pemOf(u, 'client-certificate', ub, `user ${String(userName)}`);
  const clientKey = pemOf(u, 'client-key', ub, `user ${String(userName)}`);
  if ((clientCert === undefined) !== (clientKey === undefined)) {
    throw new KubeConfigError(`kubeconfig user ${JSON.stringify(userName)} needs both a client certificate and a client key`);
  }
  const namespace = typeof context.namespace === 'string' && context.namespace !== '' ? context.namespace : 'default';
  return {
    server: server.replace(/\/+$/, ''),
    namespace,
    insecureSkipTlsVerify: insecure,
    ...(ca !== undefined ? { ca } : {}),
    ...(token !== undefined ? { token } : {}),
    ...(clientCert !== undefined && clientKey !== undefined ? { clientCert, clientKey } : {}),
  };
}

const resolveRef = (file: string, base: string) => (isAbsolute(file) ? file : join(base, file));

/** `<key>-data` (base64) or `<key>` (a file), as PEM text. */
function pemOf(entry: Record<string, unknown>, key: string, base: string, what: string): string | undefined {
  const data = entry[`${key}-data`];
  if (typeof data === 'string' && data !== '') return Buffer.from(data, 'base64').toString('utf8');
  const file = entry[key];
  if (typeof file !== 'string' || file === '') return undefined;
  const path = resolveRef(file, base);
  try {
    return readFileSync(path, 'utf8');
  } catch (e) {
    throw new KubeConfigError(`kubeconfig ${what}: cannot read ${key} ${path}: ${(e as Error).message}`, { cause: e });
  }
}

/** Where a pod finds its ServiceAccount credentials. */
export const SERVICE_ACCOUNT_DIR = '/var/run/secrets/kubernetes.io/serviceaccount';

/**
 * The configuration of a process running in a pod: the API server from
 * KUBERNETES_SERVICE_HOST/PORT, the CA, namespace and (rotating, re-read) token of the pod's
 * ServiceAccount.
 */
export function inClusterConfig(opts: { readonly env?: Readonly<Record<string, string | undefined>>; readonly dir?: string } = {}): KubeConfig {
  const env = opts.env ?? process.env;
  const dir = opts.dir ?? SERVICE_ACCOUNT_DIR;
  const host = env.KUBERNETES_SERVICE_HOST;
  const port = env.KUBERNETES_SERVICE_PORT;
  if (host === undefined || host === '' || port === undefined || port === '') {
    throw new KubeConfigError('not running in a cluster: KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT are not set');
  }
  const read = (name: string) => {
    try {
      return readFileSync(join(dir, name), 'utf8');
    } catch (e) {
      throw new KubeConfigError(`cannot read the ServiceAccount ${name} at ${join(dir, name)}: ${(e as Error).message}`, { cause: e });
    }
  };
  const ca = read('ca.crt');
  read('token');
  let namespace = 'default';
  try {
    namespace = readFileSync(join(dir, 'namespace'), 'utf8').trim() || 'default';
  } catch {
    // Without the namespace file the default namespace stands, as client-go does.
  }
  const hostPart = host.includes(':') ? `[${host}]` : host;
  return { server: `https://${hostPart}:${port}`, ca, token: { file: join(dir, 'token') }, namespace, insecureSkipTlsVerify: false };
}

// === requests ===

/** One API request. A string body is sent as is (e.g. apply-patch+yaml); anything else as JSON. */
export interface KubeRequest {
  readonly method: 'GET' | 'POST' | 'PUT' | 'PATCH' | 'DELETE';
  readonly path: string;
  readonly query?: Readonly<Record<string, string>>;
  readonly body?: unknown;
  readonly contentType?: string;
  readonly signal?: AbortSignal;
  readonly timeoutMs?: number;
}

/** A successful (2xx) response; `body` is parsed JSON when the server sent JSON, else text. */
export interface KubeResponse {
  readonly status: number;
  readonly body: unknown;
  readonly headers: Readonly<Record<string, string | string[] | undefined>>;
}

/**
 * What code that talks to the API needs (the controller's status writer, leases, token reviews):
 * resolves with 2xx responses, rejects with {@link KubeApiError} for every other status and for
 * transport failures. Tests implement it with fakes.
 */
export interface KubeRequester {
  request(req: KubeRequest): Promise<KubeResponse>;
}

/** One event of a watch stream. */
export interface WatchEvent {
  readonly type: 'ADDED' | 'MODIFIED' | 'DELETED' | 'BOOKMARK' | 'ERROR';
  readonly object: unknown;
}

/**
 * An API request that failed: `status` is the HTTP status (0 for transport failures: refused,
 * reset, timed out), `reason` the Status reason (`NotFound`, `Conflict`, `Expired`,
 * `TooManyRequests`, … or `Transport`), `retryAfterSeconds` from Retry-After or
 * `Status.details.retryAfterSeconds`.
 */
export class KubeApiError extends MeshError {
  readonly status: number;
  readonly reason: string;
  readonly retryAfterSeconds: number | undefined;

  constructor(status: number, reason: string, message: string, opts: { retryAfterSeconds?: number | undefined; cause?: unknown } = {}) {
    super('ERR_KUBE_API', message, opts.cause !== undefined ? { cause: opts.cause } : undefined);
    this.name = 'KubeApiError';
    this.status = status;
    this.reason = reason;
    this.retryAfterSeconds = opts.retryAfterSeconds;
  }

  /** The error a Kubernetes `Status` object describes (a failed response, or a watch ERROR event). */
  static fromStatus(status: number, body: unknown, retryAfterHeader?: string, what = ''): KubeApiError {
    const s = isRecord(body) ? body : {};
    const code = typeof s.code === 'number' && s.code > 0 ? s.code : status;
    const reason = typeof s.reason === 'string' && s.reason !== '' ? s.reason : defaultReason(code);
    const text = typeof s.message === 'string' && s.message !== '' ? s.message : typeof body === 'string' && body !== '' ? body.slice(0, 500) : `HTTP ${code}`;
    const details = isRecord(s.details) ? s.details : {};
    let retry: number | undefined;
    const header = retryAfterHeader !== undefined ? Number.parseInt(retryAfterHeader, 10) : Number.NaN;
    if (Number.isFinite(header) && header >= 0) retry = header;
    else if (typeof details.retryAfterSeconds === 'number' && details.retryAfterSeconds >= 0) retry = details.retryAfterSeconds;
    return new KubeApiError(code, reason, `${what}${code} ${reason}: ${text}`, { retryAfterSeconds: retry });
  }
}

function defaultReason(status: number): string {
  switch (status) {
    case 400:
      return 'BadRequest';
    case 401:
      return 'Unauthorized';
    case 403:
      return 'Forbidden';
    case 404:
      return 'NotFound';
    case 409:
      return 'Conflict';
    case 410:
      return 'Expired';
    case 422:
      return 'Invalid';
    case 429:
      return 'TooManyRequests';
    case 500:
      return 'InternalError';
    case 503:
      return 'ServiceUnavailable';
    case 504:
      return 'Timeout';
    default:
      return 'Unknown';
  }
}

/** A watch stream sent a line longer than allowed, or one that is not a JSON event. */
export class KubeWatchStreamError extends MeshError {
  constructor(message: string, options?: { cause?: unknown }) {
    super('ERR_KUBE_WATCH_STREAM', message, options);
    this.name = 'KubeWatchStreamError';
  }
}

/** Default limit of one watch line: far above etcd's ~1.5 MB object limit. */
export const DEFAULT_MAX_LINE_BYTES = 16 * 1024 * 1024;

/**
 * Splits a byte stream into newline-terminated lines without copying the buffered tail on every
 * chunk. A line longer than `maxLineBytes` throws instead of growing without bound.
 */
export class LineDecoder {
  readonly #maxLineBytes: number;
  #parts: Buffer[] = [];
  #pending = 0;

  constructor(maxLineBytes: number = DEFAULT_MAX_LINE_BYTES) {
    this.#maxLineBytes = maxLineBytes;
  }

  /** The complete lines `chunk` ends (without the newline; empty lines skipped). */
  push(chunk: Buffer): string[] {
    const lines: string[] = [];
    let start = 0;
    for (let nl = chunk.indexOf(10, start); nl !== -1; nl = chunk.indexOf(10, start)) {
      const piece = chunk.subarray(start, nl);
      if (this.#pending + piece.length > this.#maxLineBytes) throw this.#tooLong(this.#pending + piece.length);
      let line: string;
      if (this.#parts.length === 0) line = piece.toString('utf8');
      else {
        this.#parts.push(piece);
        line = Buffer.concat(this.#parts, this.#pending + piece.length).toString('utf8');
        this.#parts = [];
        this.#pending = 0;
      }
      if (line.trim() !== '') lines.push(line);
      start = nl + 1;
    }
    if (start < chunk.length) {
      const rest = chunk.subarray(start);
      this.#pending += rest.length;
      if (this.#pending > this.#maxLineBytes) throw this.#tooLong(this.#pending);
      this.#parts.push(rest);
    }
    return lines;
  }

  /** The unterminated last line, if any (the stream ended). */
  end(): string | undefined {
    if (this.#parts.length === 0) return undefined;
    const line = Buffer.concat(this.#parts, this.#pending).toString('utf8');
    this.#parts = [];
    this.#pending = 0;
    return line.trim() !== '' ? line : undefined;
  }

  #tooLong(n: number): KubeWatchStreamError {
    this.#parts = [];
    this.#pending = 0;
    return new KubeWatchStreamError(`watch event line of more than ${this.#maxLineBytes} bytes (${n} so far)`);
  }
}

/** Parses one watch line into an event, or throws KubeWatchStreamError. */
export function parseWatchLine(line: string): WatchEvent {
  let v: unknown;
  try {
    v = JSON.parse(line);
  } catch (e) {
    throw new KubeWatchStreamError(`watch line is not JSON: ${line.slice(0, 200)}`, { cause: e });
  }
  if (!isRecord(v) || typeof v.type !== 'string' || !['ADDED', 'MODIFIED', 'DELETED', 'BOOKMARK', 'ERROR'].includes(v.type)) {
    throw new KubeWatchStreamError(`watch line is not an event: ${line.slice(0, 200)}`);
  }
  return { type: v.type as WatchEvent['type'], object: v.object };
}

/** Options of {@link KubeClient}. */
export interface KubeClientOptions {
  readonly userAgent?: string;
  /** Default timeout of `request` (not of watches). Default 30 s. */
  readonly requestTimeoutMs?: number;
  /** Largest response body `request` accepts. Default 64 MiB. */
  readonly maxResponseBytes?: number;
}

/** Options of {@link KubeClient.watch}. */
export interface WatchOptions {
  /** The stream is dropped (rejecting with status 0) after this long without bytes. Default 5 min. */
  readonly idleTimeoutMs?: number;
  readonly maxLineBytes?: number;
}

/**
 * The API client: one keep-alive agent per server, bearer token (re-read from its file when the
 * file changes) or client certificate, JSON in and out.
 */
export class KubeClient implements KubeRequester {
  readonly config: KubeConfig;
  readonly #base: URL;
  readonly #agent: http.Agent;
  readonly #opts: Required<KubeClientOptions>;
  #token: { value: string; mtimeMs: number; size: number; checkedAt: number } | undefined;

  constructor(config: KubeConfig, opts: KubeClientOptions = {}) {
    this.config = config;
    try {
      this.#base = new URL(config.server);
    } catch (e) {
      throw new KubeConfigError(`invalid API server URL ${JSON.stringify(config.server)}`, { cause: e });
    }
    if (this.#base.protocol !== 'https:' && this.#base.protocol !== 'http:') throw new KubeConfigError(`API server URL must be https: ${config.server}`);
    this.#opts = { userAgent: 'ward', requestTimeoutMs: 30_000, maxResponseBytes: 64 * 1024 * 1024, ...opts };
    this.#agent =
      this.#base.protocol === 'https:'
        ? new https.Agent({
            keepAlive: true,
            rejectUnauthorized: !config.insecureSkipTlsVerify,
            ...(config.ca !== undefined ? { ca: config.ca } : {}),
            ...(config.clientCert !== undefined ? { cert: config.clientCert } : {}),
            ...(config.clientKey !== undefined ? { key: config.clientKey } : {}),
          })
        : new http.Agent({ keepAlive: true });
  }

  /** Closes idle connections; open watches end when their signals abort. */
  close(): void {
    this.#agent.destroy();
  }

  /** Sends one request; resolves for 2xx, rejects with KubeApiError otherwise. */
  request(req: KubeRequest): Promise<KubeResponse> {
    const what = `${req.method} ${req.path}: `;
    let payload: string | undefined;
    let contentType = req.contentType;
    if (req.body !== undefined) {
      payload = typeof req.body === 'string' ? req.body : JSON.stringify(req.body);
      contentType ??= req.method === 'PATCH' ? 'application/merge-patch+json' : 'application/json';
    }
    return new Promise<KubeResponse>((resolve, reject) => {
      if (req.signal?.aborted === true) {
        reject(transportError(what, req.signal.reason ?? new Error('aborted')));
        return;
      }
      const r = this.#send(req.method, req.path, req.query, contentType, payload, (res) => {
        const parts: Buffer[] = [];
        let size = 0;
        res.on('data', (c: Buffer) => {
          size += c.length;
          if (size > this.#opts.maxResponseBytes) {
            r.destroy(new KubeApiError(0, 'Transport', `${what}response larger than ${this.#opts.maxResponseBytes} bytes`));
            return;
          }
          parts.push(c);
        });
        res.on('error', (e) => reject(transportError(what, e)));
        res.on('end', () => {
          const text = Buffer.concat(parts, size).toString('utf8');
          const status = res.statusCode ?? 0;
          let body: unknown = text;
          if (/json/i.test(res.headers['content-type'] ?? '') && text !== '') {
            try {
              body = JSON.parse(text);
            } catch {
              // A truncated or non-JSON body stays text; the status still says what happened.
            }
          }
          if (status >= 200 && status < 300) resolve({ status, body, headers: res.headers });
          else reject(KubeApiError.fromStatus(status, body, headerOf(res, 'retry-after'), what));
        });
      });
      const timeoutMs = req.timeoutMs ?? this.#opts.requestTimeoutMs;
      r.setTimeout(timeoutMs, () => r.destroy(new KubeApiError(0, 'Timeout', `${what}no response within ${timeoutMs} ms`)));
      const onAbort = () => r.destroy(req.signal?.reason instanceof Error ? req.signal.reason : new Error('aborted'));
      req.signal?.addEventListener('abort', onAbort, { once: true });
      r.on('close', () => req.signal?.removeEventListener('abort', onAbort));
      r.on('error', (e) => reject(e instanceof KubeApiError ? e : transportError(what, e)));
      r.end(payload);
    });
  }

  /**
   * Streams a watch: GET `path` with `watch=true` and `query`, calling `onEvent` for every event
   * in order. Resolves when the server ends the stream (its timeoutSeconds) or `signal` aborts;
   * rejects with KubeApiError for a non-2xx answer or a broken connection, and with
   * KubeWatchStreamError for a malformed stream. ERROR events are passed to `onEvent`: the
   * caller decides (410 means relist).
   */
  watch(path: string, query: Readonly<Record<string, string>>, onEvent: (e: WatchEvent) => void, signal: AbortSignal, opts: WatchOptions = {}): Promise<void> {
    const what = `WATCH ${path}: `;
    const decoder = new LineDecoder(opts.maxLineBytes ?? DEFAULT_MAX_LINE_BYTES);
    const idleMs = opts.idleTimeoutMs ?? 300_000;
    return new Promise<void>((resolve, reject) => {
      if (signal.aborted) {
        resolve();
        return;
      }
      let settled = false;
      const finish = (e?: unknown) => {
        if (settled) return;
        settled = true;
        signal.removeEventListener('abort', onAbort);
        if (e === undefined || signal.aborted) resolve();
        else reject(e);
      };
      const r = this.#send('GET', path, { ...query, watch: 'true' }, undefined, undefined, (res) => {
        const status = res.statusCode ?? 0;
        if (status < 200 || status >= 300) {
          const parts: Buffer[] = [];
          res.on('data', (c: Buffer) => parts.push(c));
          res.on('end', () => {
            const text = Buffer.concat(parts).toString('utf8');
            let body: unknown = text;
            try {
              body = JSON.parse(text);
            } catch {
              // Not JSON: the status line says enough.
            }
            finish(KubeApiError.fromStatus(status, body, headerOf(res, 'retry-after'), what));
          });
          res.on('error', (e) => finish(transportError(what, e)));
          return;
        }
        res.on('data', (c: Buffer) => {
          if (settled) return;
          try {
            for (const line of decoder.push(c)) {
              onEvent(parseWatchLine(line));
              if (settled) return;
            }
          } catch (e) {
            r.destroy();
            finish(e);
          }
        });
        res.on('end', () => {
          try {
            const last = decoder.end();
            if (last !== undefined) onEvent(parseWatchLine(last));
            finish();
          } catch (e) {
            finish(e);
          }
        });
        // An aborted response (server gone mid-stream) emits 'aborted'/'error', then 'close'.
        res.on('error', (e) => finish(transportError(what, e)));
        res.on('close', () => {
          if (!res.complete) finish(transportError(what, new Error('watch stream closed before its end')));
        });
      });
      const onAbort = () => {
        r.destroy();
        finish();
      };
      signal.addEventListener('abort', onAbort, { once: true });
      r.setTimeout(idleMs, () => r.destroy(new KubeApiError(0, 'Timeout', `${what}no bytes for ${idleMs} ms`)));
      r.on('error', (e) => finish(e instanceof KubeApiError ? e : transportError(what, e)));
      r.end();
    });
  }

  #send(
    method: string,
    path: string,
    query: Readonly<Record<string, string>> | undefined,
    contentType: string | undefined,
    payload: string | undefined,
    onResponse: (res: IncomingMessage) => void,
  ): http.ClientRequest {
    const qs = query !== undefined && Object.keys(query).length > 0 ? `?${new URLSearchParams(query).toString()}` : '';
    const prefix = this.#base.pathname.replace(/\/+$/, '');
    const headers: OutgoingHttpHeaders = { accept: 'application/json', 'user-agent': this.#opts.userAgent };
    const token = this.#currentToken();
    if (token !== undefined) headers.authorization = `Bearer ${token}`;
    if (payload !== undefined) {
      headers['content-type'] = contentType;
      headers['content-length'] = Buffer.byteLength(payload);
    }
    const options: http.RequestOptions = {
      method,
      host: this.#base.hostname.replace(/^\[|\]$/g, ''),
      port: this.#base.port !== '' ? Number(this.#base.port) : this.#base.protocol === 'https:' ? 443 : 80,
      path: `${prefix}${path}${qs}`,
      headers,
      agent: this.#agent,
    };
    return this.#base.protocol === 'https:' ? https.request(options, onResponse) : http.request(options, onResponse);
  }

  /** The bearer token; a token file is re-read when its mtime or size changes (projected tokens rotate). */
  #currentToken(): string | undefined {
    const t = this.config.token;
    if (t === undefined) return undefined;
    if ('value' in t) return t.value;
    const now = Date.now();
    // A stat per request is cheap, but a burst of requests need not stat more than once a second.
    if (this.#token !== undefined && now - this.#token.checkedAt < 1000) return this.#token.value;
    try {
      const st = statSync(t.file);
      if (this.#token === undefined || st.mtimeMs !== this.#token.mtimeMs || st.size !== this.#token.size) {
        this.#token = { value: readFileSync(t.file, 'utf8').trim(), mtimeMs: st.mtimeMs, size: st.size, checkedAt: now };
      } else this.#token.checkedAt = now;
    } catch {
      // The file is being swapped (atomic writer): keep the last token until it is back.
      if (this.#token === undefined) return undefined;
    }
    return this.#token?.value;
  }
}

function headerOf(res: IncomingMessage, name: string): string | undefined {
  const v = res.headers[name];
  return Array.isArray(v) ? v[0] : v;
}

function transportError(what: string, e: unknown): KubeApiError {
  const msg = e instanceof Error ? e.message : String(e);
  return new KubeApiError(0, 'Transport', `${what}${msg}`, { cause: e });
}
