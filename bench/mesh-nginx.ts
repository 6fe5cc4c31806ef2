/**
 * The reference path of `npm run bench -- mesh`: two Debian nginx processes in the proxies'
 * places, with the same PKI as the ward mesh (leaves for the client and server identities issued
 * by the ward CA; verification against the ward trust anchor).
 *
 * - nginx "outbound" (client side) takes plain requests from the client — HTTP/1.1 on one port,
 *   HTTP/2 with prior knowledge (gRPC) on another, TCP on a third (`stream`) — and originates
 *   mTLS to nginx "inbound" over keep-alive upstream connections (`proxy_ssl_*`, `grpc_ssl_*`),
 *   verifying the server identity (`*_ssl_verify on`, `*_ssl_name` = the server identity).
 * - nginx "inbound" (server side) terminates mTLS (`ssl_verify_client on` against the trust
 *   anchor) and proxies to the apps over keep-alive connections (`grpc_pass grpc://` for gRPC).
 *
 * Each is one process (`master_process off`, which implies one worker), comparable to one Node
 * process. Keep-alive request limits are raised so neither side recycles connections during the
 * run (nginx's default `keepalive_requests` is 1000, which also caps HTTP/2 streams per session).
 * The TCP rows need the `stream` module (Debian: `libnginx-mod-stream`); without it they are
 * skipped. nginx is installed with apt-get when missing.
 */
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { type AddressInfo, createServer } from 'node:net';
import { join } from 'node:path';
import { CertificateAuthority, IDENTITY_FILES, LocalTokenAuthenticator, loadIssuer } from '../src/identity/index.js';
import { canConnect, type LoggedChild, spawnLogged, waitFor } from './mesh-proc.js';
import { type AppPorts, CLIENT_ID, SERVER_ID } from './mesh-ward.js';

const HOST = '127.0.0.1';
const START_TIMEOUT_MS = 10_000;
const APT_TIMEOUT_MS = 300_000;
const STREAM_MODULE_DIRS = ['/usr/lib/nginx/modules', '/usr/share/nginx/modules'];
/** High enough that no connection is recycled during a run. */
const KEEPALIVE_REQUESTS = 100_000_000;

/** nginx found (or installed) on this machine. */
export interface NginxInstall {
  readonly bin: string;
  readonly version: string;
  /** `load_module` path of the dynamic stream module; '' when stream is built in; undefined when unavailable. */
  readonly streamModule: string | undefined;
}

/** Where the nginx pair takes the client's traffic (127.0.0.1). */
export interface NginxPorts {
  readonly http1: number;
  readonly grpc: number;
  /** Undefined without the stream module. */
  readonly tcp: number | undefined;
}

/** A running nginx pair. */
export interface NginxMesh {
  readonly outbound: LoggedChild;
  readonly inbound: LoggedChild;
  readonly ports: NginxPorts;
  stop(): Promise<void>;
}

type Log = (line: string) => void;

function which(name: string): string | undefined {
  const r = spawnSync('sh', ['-c', `command -v ${name}`], { encoding: 'utf8' });
  const path = r.stdout.trim();
  if (r.status === 0 && path !== '') return path;
  return ['/usr/sbin', '/usr/local/sbin', '/sbin'].map((d) => join(d, name)).find((p) => existsSync(p));
}

/** `apt-get ARGS` as root (directly, or through passwordless sudo); returns the failure text, or undefined on success. */
function aptGet(args: readonly string[]): string | undefined {
  const root = process.getuid?.() === 0;
  if (!root && which('sudo') === undefined) return 'not root and no sudo';
  const [cmd, pre] = root ? ['apt-get', []] : ['sudo', ['-n', 'apt-get']];
  const r = spawnSync(cmd, [...pre, ...args], {
    encoding: 'utf8',
    timeout: APT_TIMEOUT_MS,
    env: { ...process.env, DEBIAN_FRONTEND: 'noninteractive' },
  });
  if (r.status === 0) return undefined;
  return `${[cmd, ...pre, ...args].join(' ')} failed (${r.error?.message ?? `exit ${r.status ?? r.signal}`}): ${`${r.stdout}${r.stderr}`.trim().split('\n').slice(-3).join(' | ')}`;
}

/** Installs Debian packages: `apt-get install`, and once more after `apt-get update` when that fails. */
function aptInstall(packages: readonly string[], log: Log): string | undefined {
  log(`mesh: installing ${packages.join(' ')} with apt-get (Debian) ...`);
  const install = ['install', '-y', '-q', '--no-install-recommends', ...packages];
  if (aptGet(install) === undefined) return undefined;
  log('mesh: apt-get install failed; running apt-get update and trying again ...');
  return aptGet(['update', '-q']) ?? aptGet(install);
}

function streamModuleOf(bin: string): string | undefined {
  const v = spawnSync(bin, ['-V'], { encoding: 'utf8' });
  const configure = `${v.stdout}${v.stderr}`;
  if (/--with-stream(?=\s|$)/m.test(configure)) return '';
  return STREAM_MODULE_DIRS.map((d) => join(d, 'ngx_stream_module.so')).find((p) => existsSync(p));
}

/**
 * Finds nginx, installing Debian's `nginx` and `libnginx-mod-stream` when it is missing (and
 * the stream module alone when only that is missing). Returns the reason when nginx stays
 * unavailable.
 */
export function ensureNginx(log: Log): NginxInstall | { readonly unavailable: string } {
  let bin = which('nginx');
  if (bin === undefined) {
    log('mesh: nginx is not installed (needed for the nginx reference rows)');
    const failed = aptInstall(['nginx', 'libnginx-mod-stream'], log);
    if (failed !== undefined) return { unavailable: failed };
    bin = which('nginx');
    if (bin === undefined) return { unavailable: 'apt-get installed nginx but no nginx binary is on PATH' };
    log(`mesh: nginx installed at ${bin}`);
  }
  let streamModule = streamModuleOf(bin);
  if (streamModule === undefined) {
    log('mesh: the nginx stream module is missing (needed for nginx/tcp)');
    const failed = aptInstall(['libnginx-mod-stream'], log);
    if (failed !== undefined) log(`mesh: WARNING: ${failed}`);
    streamModule = streamModuleOf(bin);
  }
  const v = spawnSync(bin, ['-v'], { encoding: 'utf8' });
  return { bin, version: `${v.stdout}${v.stderr}`.trim().replace(/^nginx version: /, ''), streamModule };
}

/** A free TCP port on 127.0.0.1 (bound, then released: nginx needs ports written in its config). */
async function freePort(): Promise<number> {
  const s = createServer();
  await new Promise<void>((resolve, reject) => {
    s.once('error', reject);
    s.listen(0, HOST, resolve);
  });
  const { port } = s.address() as AddressInfo;
  await new Promise((r) => s.close(r));
  return port;
}

/** Writes leaf + chain and key PEM files for `identity`, issued by the ward CA in `identityDir`. */
async function issue(ca: CertificateAuthority, identity: string, dir: string, name: string): Promise<{ cert: string; key: string }> {
  const creds = await ca.issueServerCertificate([identity]);
  const cert = join(dir, `${name}.crt`);
  const key = join(dir, `${name}.key`);
  writeFileSync(cert, `${creds.certPem}${creds.chainPem}`);
  writeFileSync(key, creds.keyPem, { mode: 0o600 });
  return { cert, key };
}

interface ConfigParts {
  readonly dir: string;
  readonly name: string;
  readonly streamModule: string | undefined;
  readonly http: string;
  readonly stream: string | undefined;
}

/** The common frame of both configs: one process, logs and temp files in `dir`. */
function config(p: ConfigParts): string {
  const tmp = join(p.dir, `${p.name}-tmp`);
  mkdirSync(tmp, { recursive: true });
  const load = p.stream !== undefined && p.streamModule !== undefined && p.streamModule !== '' ? `load_module ${p.streamModule};\n` : '';
  return `${load}daemon off;
master_process off;
worker_processes 1;
pid ${join(p.dir, `${p.name}.pid`)};
error_log ${join(p.dir, `${p.name}.log`)} warn;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path ${tmp}/body;
  proxy_temp_path ${tmp}/proxy;
  fastcgi_temp_path ${tmp}/fastcgi;
  uwsgi_temp_path ${tmp}/uwsgi;
  scgi_temp_path ${tmp}/scgi;
  keepalive_requests ${KEEPALIVE_REQUESTS};
  keepalive_timeout 300s;
${p.http}}
${p.stream === undefined ? '' : `stream {\n${p.stream}}\n`}`;
}

/**
 * Starts the nginx pair in front of the apps. The client-side certificate is for
 * {@link CLIENT_ID}, the server-side one for {@link SERVER_ID}, both from the ward CA.
 */
export async function startNginxMesh(install: NginxInstall, dir: string, identityDir: string, apps: AppPorts): Promise<NginxMesh> {
  mkdirSync(dir, { recursive: true });
  const issuer = await loadIssuer(identityDir);
  if (!issuer.ok) throw new Error(`cannot load the ward issuer from ${identityDir}`);
  const ca = new CertificateAuthority({
    issuer: issuer.value,
    authenticator: new LocalTokenAuthenticator({ keyPem: readFileSync(join(identityDir, IDENTITY_FILES.tokenKey), 'utf8') }),
    trustDomain: 'cluster.local',
    controlPlaneNamespace: 'linkerd',
  });
  const anchor = join(identityDir, IDENTITY_FILES.anchorCert);
  const client = await issue(ca, CLIENT_ID, dir, 'client');
  const server = await issue(ca, SERVER_ID, dir, 'server');
  const withStream = install.streamModule !== undefined;
  const [aHttp1, aGrpc, aTcp, bHttp1, bGrpc, bTcp] = (await Promise.all(Array.from({ length: 6 }, freePort))) as [
    number,
    number,
    number,
    number,
    number,
    number,
  ];

  // Client side: originate mTLS, verify the server identity. Verify depth 2: leaf, issuer, anchor.
  const originate = (prefix: 'proxy' | 'grpc') => `      ${prefix}_ssl_certificate ${client.cert};
      ${prefix}_ssl_certificate_key ${client.key};
      ${prefix}_ssl_trusted_certificate ${anchor};
      ${prefix}_ssl_verify on;
      ${prefix}_ssl_verify_depth 2;
      ${prefix}_ssl_name ${SERVER_ID};
      ${prefix}_ssl_server_name on;
      ${prefix}_ssl_session_reuse on;
`;
  const outboundConf = config({
    dir,
    name: 'nginx-outbound',
    streamModule: install.streamModule,
    http: `  upstream inbound_http1 { server ${HOST}:${bHttp1}; keepalive 64; keepalive_requests ${KEEPALIVE_REQUESTS}; }
  upstream inbound_grpc { server ${HOST}:${bGrpc}; keepalive 64; keepalive_requests ${KEEPALIVE_REQUESTS}; }
  server {
    listen ${HOST}:${aHttp1};
    location / {
      proxy_pass https://inbound_http1;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
${originate('proxy')}    }
  }
  server {
    listen ${HOST}:${aGrpc} http2;
    location / {
      grpc_pass grpcs://inbound_grpc;
${originate('grpc')}    }
  }
`,
    stream: withStream
      ? `  server {
    listen ${HOST}:${aTcp};
    proxy_pass ${HOST}:${bTcp};
    proxy_ssl on;
${originate('proxy').replace(/^ {2}/gm, '')}  }
`
      : undefined,
  });

  // Server side: terminate mTLS, require a client certificate from the trust anchor.
  const terminate = `    ssl_certificate ${server.cert};
    ssl_certificate_key ${server.key};
    ssl_client_certificate ${anchor};
    ssl_verify_client on;
    ssl_verify_depth 2;
`;
  const inboundConf = config({
    dir,
    name: 'nginx-inbound',
    streamModule: install.streamModule,
    http: `  upstream app_http1 { server ${HOST}:${apps.http1}; keepalive 64; keepalive_requests ${KEEPALIVE_REQUESTS}; }
  upstream app_grpc { server ${HOST}:${apps.grpc}; keepalive 64; keepalive_requests ${KEEPALIVE_REQUESTS}; }
  server {
    listen ${HOST}:${bHttp1} ssl;
${terminate}    location / {
      proxy_pass http://app_http1;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
    }
  }
  server {
    listen ${HOST}:${bGrpc} ssl http2;
${terminate}    location / {
      grpc_pass grpc://app_grpc;
    }
  }
`,
    stream: withStream
      ? `  server {
    listen ${HOST}:${bTcp} ssl;
${terminate}    proxy_pass ${HOST}:${apps.tcp};
  }
`
      : undefined,
  });

  const started: LoggedChild[] = [];
  const stop = async () => {
    for (const p of started.reverse()) await p.stop();
  };
  const start = async (name: string, conf: string, ports: readonly number[]): Promise<LoggedChild> => {
    const file = join(dir, `${name}.conf`);
    writeFileSync(file, conf);
    const p = spawnLogged(name, install.bin, ['-p', dir, '-c', file, '-e', join(dir, `${name}.log`)], join(dir, `${name}.log`));
    started.push(p);
    await waitFor(
      `${name} to listen`,
      async () => {
        if (p.child.exitCode !== null || p.child.signalCode !== null) throw new Error(`${name} exited: ${p.log().slice(-2000)}`);
        const up = await Promise.all(ports.map((port) => canConnect(HOST, port)));
        return up.every(Boolean) ? true : undefined;
      },
      START_TIMEOUT_MS,
    );
    return p;
  };
  try {
    const inbound = await start('nginx-inbound', inboundConf, withStream ? [bHttp1, bGrpc, bTcp] : [bHttp1, bGrpc]);
    const outbound = await start('nginx-outbound', outboundConf, withStream ? [aHttp1, aGrpc, aTcp] : [aHttp1, aGrpc]);
    return { outbound, inbound, ports: { http1: aHttp1, grpc: aGrpc, tcp: withStream ? aTcp : undefined }, stop };
  } catch (e) {
    await stop();
    throw e;
  }
}
