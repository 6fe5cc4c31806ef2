/**
 * A lab for running Linkerd's own proxy (`../shared/interop/linkerd2-proxy/linkerd2-proxy`) on
 * ward's control plane, as Kubernetes would with Linkerd's injector: network namespaces on a
 * bridge (see netns.ts), a "node" namespace at `<subnet>.1` running the real `ward controller
 * --manifests` (so every control-plane connection leaves the pod: the proxy talks plaintext to a
 * loopback control plane and TLS otherwise), pods with upstream proxy-init's nat rules, and in
 * each pod either the real linkerd2-proxy configured by environment exactly as Linkerd's
 * `_proxy.tpl` does (identity directory with `key.p8` and `csr.der` made by `openssl`, as
 * Linkerd's wrapper script makes them) or `ward proxy --transparent`.
 *
 * Proxies run with group {@link PROXY_GID} (still uid 0, so they read the test's files) and the
 * nat OUTPUT rules exempt that group, as upstream exempts the proxy's uid.
 *
 * Every namespace is deleted by {@link LinkerdLab.stop} (processes left in them are killed); ones
 * left by a crashed run are swept at start. Only addresses inside these namespaces are used.
 */
import assert from 'node:assert/strict';
import { type ChildProcessWithoutNullStreams, spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { createInterface } from 'node:readline';
import { ORIGINAL_DST_ADDON_PATH } from '../../src/proxy/transport/original-dst.js';
import { type ControllerPorts, controllerPorts, initWorkdir, spawnController, WARD_BIN, type WardProcess, waitFor, wardSpawn, wardSync } from './helpers.js';
import { type LabPod, NetnsAgent, NetnsLab, netnsPrerequisites, run, sweepStaleNamespaces } from './netns.js';

const ROOT = new URL('../../', import.meta.url).pathname;

/** Where the real linkerd2-proxy must be (absent on a user's machine, present in CI). */
export const LINKERD_PROXY_PATH = resolve(ROOT, '../shared/interop/linkerd2-proxy/linkerd2-proxy');
/** The proxies' group: their sockets are exempt from the outbound redirect. */
export const PROXY_GID = 2102;
/** The identity trust domain and control-plane namespace ward's controller uses by default. */
export const TRUST_DOMAIN = 'cluster.local';
/** How long a lab waits for processes to come up. */
export const LAB_WAIT_MS = 30_000;

/** The identity Linkerd gives ServiceAccount `ns/sa`. */
export function identityOf(ns: string, sa: string): string {
  return `${sa}.${ns}.serviceaccount.identity.linkerd.${TRUST_DOMAIN}`;
}

/** What an interop test needs and is missing on this machine (undefined: nothing). */
export function linkerdLabMissing(): string | undefined {
  const missing: string[] = [];
  const netns = netnsPrerequisites();
  if (netns !== undefined) missing.push(netns);
  if (!existsSync(LINKERD_PROXY_PATH)) missing.push(`the linkerd2-proxy binary at ${LINKERD_PROXY_PATH}`);
  if (spawnSync('openssl', ['version'], { stdio: 'ignore', timeout: 10_000 }).status !== 0) missing.push('openssl (Debian package openssl)');
  return missing.length === 0 ? undefined : missing.join(', ');
}

/** upstream proxy-init's nat rules (proxy group exempt instead of its uid), for iptables-restore. */
export const PROXY_INIT_RULES = `*nat
:PREROUTING ACCEPT [0:0]
:INPUT ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:POSTROUTING ACCEPT [0:0]
:PROXY_INIT_REDIRECT - [0:0]
:PROXY_INIT_OUTPUT - [0:0]
-A PREROUTING -j PROXY_INIT_REDIRECT
-A PROXY_INIT_REDIRECT -p tcp -m multiport --dports 4190,4191 -j RETURN
-A PROXY_INIT_REDIRECT -p tcp -j REDIRECT --to-ports 4143
-A OUTPUT -j PROXY_INIT_OUTPUT
-A PROXY_INIT_OUTPUT -m owner --gid-owner ${PROXY_GID} -j RETURN
-A PROXY_INIT_OUTPUT -o lo -j RETURN
-A PROXY_INIT_OUTPUT -p tcp -j REDIRECT --to-ports 4140
COMMIT
`;

/** A process the lab started (same shape as {@link WardProcess}). */
export type LabProcess = WardProcess;

function spawnProcess(argv: readonly string[], env: NodeJS.ProcessEnv): LabProcess {
  const child = spawn(argv[0] as string, argv.slice(1), { env });
  let out = '';
  let err = '';
  child.stdout.on('data', (c: Buffer) => {
    out += c.toString();
  });
  child.stderr.on('data', (c: Buffer) => {
    err += c.toString();
  });
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  return {
    child,
    stdout: () => out,
    stderr: () => err,
    exited,
    async stop(graceMs = 5000) {
      if (child.exitCode !== null || child.signalCode !== null) return child.exitCode;
      child.kill('SIGTERM');
      const timer = setTimeout(() => child.kill('SIGKILL'), graceMs);
      const code = await exited;
      clearTimeout(timer);
      return code;
    },
  };
}

/** A pod of the lab: its namespace, address and Kubernetes names. */
export interface LinkerdLabPod extends LabPod {
  /** Kubernetes namespace, pod name and ServiceAccount (as the manifests declare them). */
  readonly namespace: string;
  readonly name: string;
  readonly sa: string;
  /** `identityOf(namespace, sa)`. */
  readonly identity: string;
}

/** How to configure a real linkerd2-proxy (what the injector derives from the pod). */
export interface LinkerdProxyOptions {
  /** The container ports (`LINKERD2_PROXY_INBOUND_PORTS`). */
  readonly inboundPorts?: readonly number[];
  /** `LINKERD2_PROXY_INBOUND_DEFAULT_POLICY` (default `all-unauthenticated`). */
  readonly defaultPolicy?: string;
  /** `LINKERD2_PROXY_INBOUND_PORTS_DISABLE_PROTOCOL_DETECTION` (the opaque ports). */
  readonly opaquePorts?: readonly number[];
  /** `LINKERD2_PROXY_LOG` (default `warn,linkerd=info,trust_dns=error`). */
  readonly log?: string;
  /** Further variables, or overrides (an empty string removes a variable). */
  readonly env?: Readonly<Record<string, string>>;
}

/** A running real linkerd2-proxy. */
export interface LinkerdProxy {
  readonly pod: LinkerdLabPod;
  readonly process: LabProcess;
  /** Its identity directory (`key.p8`, `csr.der`, `token`). */
  readonly identityDir: string;
  /** The environment it was started with (for the report of a failing test). */
  readonly env: Readonly<Record<string, string>>;
}

/** How to start `ward proxy --transparent` in a pod. */
export interface WardProxyOptions {
  /** Pod ports the proxy serves inbound (forwarded to `127.0.0.1:<port>`). */
  readonly inboundPorts?: readonly number[];
  /** Connect to the controller's Destination API (outbound). Default true. */
  readonly destination?: boolean;
  /** Further `ward proxy` arguments. */
  readonly extra?: readonly string[];
  /** Node options of the proxy's process (e.g. `PROXY_NODE_OPTIONS`, as `ward up` runs sidecars). */
  readonly nodeArgs?: readonly string[];
}

/** The answer to {@link LinkerdLab.h2Request}. */
export interface H2Reply {
  readonly status?: number;
  readonly headers?: Readonly<Record<string, string>>;
  readonly trailers?: Readonly<Record<string, string>>;
  /** The body, as UTF-8. */
  readonly body?: string;
  /** A connection or stream error (code), instead of an answer. */
  readonly error?: string;
}

/** An HTTP/2 request made from a namespace (prior knowledge, plaintext). */
export interface H2Request {
  readonly host: string;
  readonly port: number;
  readonly path: string;
  readonly method?: string;
  readonly headers?: Readonly<Record<string, string>>;
  /** The request body (UTF-8, or a Buffer). */
  readonly body?: string | Buffer;
  readonly timeoutMs?: number;
}

/** The 5-byte-framed body of a gRPC request with an empty message. */
export const EMPTY_GRPC_MESSAGE = Buffer.from([0, 0, 0, 0, 0]);

/** An HTTP/2 client, run with `node --input-type=module -e` inside a namespace: one request from argv, JSON on stdout. */
const H2_CLIENT = `
import { connect } from 'node:http2';
const req = JSON.parse(process.argv[1]);
const out = (v) => { process.stdout.write(JSON.stringify(v)); process.exit(0); };
const flat = (h) => Object.fromEntries(Object.entries(h).filter(([k]) => !k.startsWith(':')).map(([k, v]) => [k, String(v)]));
setTimeout(() => out({ error: 'ETIMEDOUT' }), req.timeoutMs ?? 10000);
const session = connect('http://' + req.host + ':' + req.port);
session.on('error', (e) => out({ error: e.code ?? e.message }));
const stream = session.request({ ':method': req.method ?? 'GET', ':path': req.path, ...(req.headers ?? {}) });
let status; let headers = {}; let trailers = {}; const chunks = [];
stream.on('response', (h) => { status = h[':status']; headers = flat(h); });
stream.on('trailers', (h) => { trailers = flat(h); });
stream.on('data', (c) => chunks.push(c));
stream.on('error', (e) => out({ error: e.code ?? e.message, ...(status === undefined ? {} : { status, headers }) }));
stream.on('end', () => out({ status, headers, trailers, body: Buffer.concat(chunks).toString('utf8') }));
stream.end(req.body === undefined ? undefined : Buffer.from(req.body, 'base64'));
`;

/**
 * A long-lived TCP client, run inside a namespace: it connects, then for each line on stdin
 * (base64) writes the bytes and prints `{"data": "<what came back, utf8>"}` lines as they arrive,
 * and `{"closed": true}` when the peer closes or resets.
 */
const TCP_CLIENT = `
import { connect } from 'node:net';
import { createInterface } from 'node:readline';
const [host, port] = process.argv.slice(1);
const s = connect({ host, port: Number(port) });
const say = (v) => process.stdout.write(JSON.stringify(v) + '\\n');
s.on('connect', () => say({ connected: true }));
s.on('data', (c) => say({ data: c.toString('utf8') }));
s.on('error', (e) => say({ error: e.code ?? e.message }));
s.on('close', () => { say({ closed: true }); process.exit(0); });
createInterface({ input: process.stdin }).on('line', (l) => s.write(Buffer.from(l, 'base64')));
`;

/**
 * An HTTP/2 (prior knowledge) and gRPC server, run inside a namespace on argv's host and port:
 * every request gets 200 with headers `x-path` and `x-client-id` (the `l5d-client-id` it saw, or
 * `none`); requests with a gRPC content type get trailers `grpc-status: 0`. Prints `{"listening":
 * true}` once bound.
 */
const H2_SERVER = `
import { createServer } from 'node:http2';
const [host, port] = process.argv.slice(1);
const server = createServer((req, res) => {
  req.resume();
  req.on('end', () => {
    const grpc = String(req.headers['content-type'] ?? '').startsWith('application/grpc');
    res.writeHead(200, { 'content-type': grpc ? 'application/grpc' : 'text/plain', 'x-path': req.url, 'x-client-id': String(req.headers['l5d-client-id'] ?? 'none') });
    if (grpc) {
      res.addTrailers({ 'grpc-status': '0' });
      res.end(Buffer.from([0, 0, 0, 0, 0]));
    } else res.end('h2 ' + req.url);
  });
});
server.on('error', (e) => { process.stdout.write(JSON.stringify({ error: e.code ?? e.message }) + '\\n'); process.exit(1); });
server.listen({ host, port: Number(port) }, () => process.stdout.write(JSON.stringify({ listening: true }) + '\\n'));
`;

/** An open TCP connection from a namespace (see {@link LinkerdLab.openTcp}). */
export interface LabTcpConnection {
  /** Writes `data` and resolves with what came back once `expect` bytes arrived (rejects on close or after `timeoutMs`). */
  exchange(data: string, timeoutMs?: number): Promise<string>;
  /** Resolves when the connection is closed (by the peer, or reset). */
  readonly closed: Promise<void>;
  isClosed(): boolean;
  /** Closes the client. */
  end(): Promise<void>;
}

/** Options of {@link LinkerdLab.start}. */
export interface LinkerdLabOptions {
  /** The first three octets of the lab's /24, e.g. `10.244.78` (each suite its own). */
  readonly subnet: string;
  /** The manifests the controller starts with, by file name (in its `--manifests` directory). */
  readonly manifests: Readonly<Record<string, string>>;
  /** Prefix of the temporary directory. */
  readonly name?: string;
}

/**
 * One suite's lab: the node namespace with `ward controller` on `<subnet>.1` and an agent, and
 * the pods added to it. Create with {@link LinkerdLab.start}, end with {@link LinkerdLab.stop}.
 */
export class LinkerdLab {
  readonly dir: string;
  /** ward's identity directory (`ca.crt` is the trust anchor). */
  readonly idDir: string;
  /** The controller's `--manifests` directory (watched: files written here are live edits). */
  readonly manifestsDir: string;
  readonly netns: NetnsLab;
  readonly node: LabPod;
  readonly controller: WardProcess;
  readonly ports: ControllerPorts;
  /** An agent in the node namespace (an unmeshed client and server on `<subnet>.1`). */
  readonly nodeAgent: NetnsAgent;
  readonly #agents = new Map<string, NetnsAgent>();
  readonly #processes: LabProcess[] = [];
  readonly #tcp: ChildProcessWithoutNullStreams[] = [];

  private constructor(f: {
    dir: string;
    idDir: string;
    manifestsDir: string;
    netns: NetnsLab;
    controller: WardProcess;
    ports: ControllerPorts;
    nodeAgent: NetnsAgent;
  }) {
    this.dir = f.dir;
    this.idDir = f.idDir;
    this.manifestsDir = f.manifestsDir;
    this.netns = f.netns;
    this.node = f.netns.node;
    this.controller = f.controller;
    this.ports = f.ports;
    this.nodeAgent = f.nodeAgent;
    this.#agents.set(this.node.ns, f.nodeAgent);
  }

  /** Builds the native addon if needed, sweeps stale namespaces, makes the node and starts the controller. */
  static async start(opts: LinkerdLabOptions): Promise<LinkerdLab> {
    if (!existsSync(ORIGINAL_DST_ADDON_PATH)) {
      const b = spawnSync('npm', ['run', 'build:native'], { encoding: 'utf8', timeout: 120_000, cwd: ROOT });
      assert.equal(b.status, 0, `npm run build:native failed:\n${b.stdout}\n${b.stderr}`);
    }
    sweepStaleNamespaces();
    const dir = mkdtempSync(join(tmpdir(), `ward-e2e-${opts.name ?? 'linkerd'}-`));
    let netns: NetnsLab | undefined;
    let controller: WardProcess | undefined;
    let nodeAgent: NetnsAgent | undefined;
    try {
      const work = initWorkdir(dir);
      for (const [file, text] of Object.entries(opts.manifests)) writeFileSync(join(work.manifests, file), text);
      netns = new NetnsLab(opts.subnet);
      controller = spawnController(work.manifests, work.idDir, netns.node.ip, undefined, ['ip', 'netns', 'exec', netns.node.ns]);
      const ports = await controllerPorts(controller, LAB_WAIT_MS);
      nodeAgent = new NetnsAgent(netns.node.ns);
      return new LinkerdLab({ dir, idDir: work.idDir, manifestsDir: work.manifests, netns, controller, ports, nodeAgent });
    } catch (e) {
      await nodeAgent?.stop();
      await controller?.stop();
      netns?.cleanup();
      rmSync(dir, { recursive: true, force: true });
      throw e;
    }
  }

  /** The trust anchor's PEM. */
  get trustAnchorsPem(): string {
    return readFileSync(join(this.idDir, 'ca.crt'), 'utf8');
  }

  /**
   * Adds pod namespace `<subnet>.<host>` for Kubernetes pod `namespace/name` running as
   * ServiceAccount `sa`, with proxy-init's rules unless `proxyInit` is false.
   */
  addPod(host: number, k: { namespace: string; name: string; sa: string; proxyInit?: boolean }): LinkerdLabPod {
    const pod = this.netns.addPod(k.name, host);
    if (k.proxyInit !== false) this.netns.exec(pod.ns, 'iptables-restore', [], PROXY_INIT_RULES);
    return { ...pod, namespace: k.namespace, name: k.name, sa: k.sa, identity: identityOf(k.namespace, k.sa) };
  }

  /** The agent of namespace `ns` (started on first use; applications and clients inside it). */
  agent(pod: LabPod): NetnsAgent {
    let a = this.#agents.get(pod.ns);
    if (a === undefined) {
      a = new NetnsAgent(pod.ns);
      this.#agents.set(pod.ns, a);
    }
    return a;
  }

  /** Writes (or replaces) manifest file `file`: the controller picks it up as a live edit. */
  writeManifest(file: string, text: string): void {
    writeFileSync(join(this.manifestsDir, file), text);
  }

  /** Removes manifest file `file` (a live edit). */
  removeManifest(file: string): void {
    rmSync(join(this.manifestsDir, file), { force: true });
  }

  /** A ServiceAccount token for the pod (minted by `ward identity token`), without a trailing newline. */
  tokenFile(pod: LinkerdLabPod): string {
    const t = wardSync(['identity', 'token', '--identity-dir', this.idDir, '--sa', `${pod.namespace}/${pod.sa}`, '--pod', `${pod.namespace}/${pod.name}`]);
    assert.equal(t.status, 0, t.stderr);
    const file = join(this.dir, `${pod.namespace}-${pod.name}.token`);
    writeFileSync(file, t.stdout.trim());
    return file;
  }

  /**
   * Starts the real linkerd2-proxy in `pod`, configured as Linkerd's injector does, talking to
   * the controller on the node's address. Does not wait: see {@link waitLinkerdReady}.
   */
  startLinkerdProxy(pod: LinkerdLabPod, opts: LinkerdProxyOptions = {}): LinkerdProxy {
    const identityDir = join(this.dir, `linkerd-identity-${pod.name}`);
    mkdirSync(identityDir, { recursive: true });
    writeIdentityDir(identityDir, pod.identity);
    const token = this.tokenFile(pod);
    const cp = (sa: string) => `${sa}.linkerd.serviceaccount.identity.linkerd.${TRUST_DOMAIN}`;
    const node = this.node.ip;
    const vars: Record<string, string> = {
      LINKERD2_PROXY_LOG: opts.log ?? 'warn,linkerd=info,trust_dns=error',
      LINKERD2_PROXY_LOG_FORMAT: 'plain',
      LINKERD2_PROXY_IDENTITY_DIR: identityDir,
      LINKERD2_PROXY_IDENTITY_TRUST_ANCHORS: this.trustAnchorsPem,
      LINKERD2_PROXY_IDENTITY_TOKEN_FILE: token,
      LINKERD2_PROXY_IDENTITY_SVC_ADDR: `${node}:${this.ports.identity}`,
      LINKERD2_PROXY_IDENTITY_SVC_NAME: cp('linkerd-identity'),
      LINKERD2_PROXY_IDENTITY_LOCAL_NAME: pod.identity,
      LINKERD2_PROXY_DESTINATION_SVC_ADDR: `${node}:${this.ports.destination}`,
      LINKERD2_PROXY_DESTINATION_SVC_NAME: cp('linkerd-destination'),
      LINKERD2_PROXY_POLICY_SVC_ADDR: `${node}:${this.ports.policy}`,
      LINKERD2_PROXY_POLICY_SVC_NAME: cp('linkerd-destination'),
      LINKERD2_PROXY_POLICY_WORKLOAD: `{"ns":"${pod.namespace}", "pod":"${pod.name}"}\n`,
      LINKERD2_PROXY_DESTINATION_CONTEXT: `{"ns":"${pod.namespace}", "nodeName":"node", "pod":"${pod.name}"}`,
      LINKERD2_PROXY_DESTINATION_PROFILE_NETWORKS: '10.244.0.0/16',
      LINKERD2_PROXY_POLICY_CLUSTER_NETWORKS: '10.244.0.0/16',
      LINKERD2_PROXY_DESTINATION_PROFILE_SUFFIXES: 'svc.cluster.local.',
      LINKERD2_PROXY_INBOUND_DEFAULT_POLICY: opts.defaultPolicy ?? 'all-unauthenticated',
      LINKERD2_PROXY_INBOUND_LISTEN_ADDR: '0.0.0.0:4143',
      LINKERD2_PROXY_OUTBOUND_LISTEN_ADDR: '127.0.0.1:4140',
      LINKERD2_PROXY_ADMIN_LISTEN_ADDR: '0.0.0.0:4191',
      LINKERD2_PROXY_CONTROL_LISTEN_ADDR: '0.0.0.0:4190',
      LINKERD2_PROXY_INBOUND_IPS: pod.ip,
      LINKERD2_PROXY_INBOUND_PORTS: (opts.inboundPorts ?? []).join(','),
      LINKERD2_PROXY_CORES: '1',
    };
    if (opts.opaquePorts !== undefined) vars.LINKERD2_PROXY_INBOUND_PORTS_DISABLE_PROTOCOL_DETECTION = opts.opaquePorts.join(',');
    for (const [k, v] of Object.entries(opts.env ?? {})) {
      if (v === '') delete vars[k];
      else vars[k] = v;
    }
    // Only what Linkerd sets (and PATH): nothing of this process's environment leaks into the proxy's configuration.
    const env = { PATH: process.env.PATH ?? '/usr/bin:/bin', ...vars };
    const p = spawnProcess(['nsenter', `--net=/run/netns/${pod.ns}`, `--setgid=${PROXY_GID}`, '--', LINKERD_PROXY_PATH], env);
    this.#processes.push(p);
    return { pod, process: p, identityDir, env: vars };
  }

  /** Waits until the proxy's admin `/ready` (port 4191, asked from the node) answers 200: it holds a certificate. */
  async waitLinkerdReady(p: LinkerdProxy, timeoutMs = LAB_WAIT_MS): Promise<void> {
    await waitFor(
      `linkerd2-proxy in ${p.pod.name} to be ready (its log so far: ${linkerdLog(p).slice(-3000)})`,
      async () => {
        if (p.process.child.exitCode !== null) throw new Error(`linkerd2-proxy exited with ${p.process.child.exitCode}: ${linkerdLog(p).slice(-3000)}`);
        const r = await this.nodeAgent.request({ op: 'http-get', host: p.pod.ip, port: 4191, path: '/ready', timeoutMs: 2000 });
        return r.status === 200 ? true : undefined;
      },
      timeoutMs,
      100,
    );
  }

  /**
   * The certificate chain (PEM, leaf first) the proxy in `pod` presents on its mesh port to a TLS
   * client naming its identity (ALPN `transport.l5d.io/v1`), fetched with `openssl s_client` from
   * the node.
   */
  peerCertificates(pod: LinkerdLabPod, port = 4143): string[] {
    const args = [
      'netns',
      'exec',
      this.node.ns,
      'openssl',
      's_client',
      '-connect',
      `${pod.ip}:${port}`,
      '-servername',
      pod.identity,
      '-alpn',
      'transport.l5d.io/v1',
      '-showcerts',
    ];
    // The exit status is not the answer: the proxy closes the connection once no transport header follows the handshake.
    const r = spawnSync('ip', args, { encoding: 'utf8', timeout: 30_000, input: '' });
    const certs = [...(r.stdout ?? '').matchAll(/-----BEGIN CERTIFICATE-----[\s\S]*?-----END CERTIFICATE-----\n?/g)].map((m) => m[0]);
    if (certs.length === 0)
      throw new Error(`no certificate from ${pod.ip}:${port} (openssl s_client: ${r.error?.message ?? `exit ${r.status}`}): ${r.stdout}${r.stderr}`);
    return certs;
  }

  /** `openssl verify` of `leafPem` (with `intermediatesPem` untrusted) against ward's trust anchor. */
  verifyWithAnchor(leafPem: string, intermediatesPem: readonly string[] = []): { ok: boolean; output: string } {
    const leaf = join(this.dir, `verify-leaf-${Date.now()}.pem`);
    writeFileSync(leaf, leafPem);
    const args = ['verify', '-CAfile', join(this.idDir, 'ca.crt')];
    if (intermediatesPem.length > 0) {
      const chain = join(this.dir, `verify-chain-${Date.now()}.pem`);
      writeFileSync(chain, intermediatesPem.join(''));
      args.push('-untrusted', chain);
    }
    const r = spawnSync('openssl', [...args, leaf], { encoding: 'utf8', timeout: 10_000 });
    return { ok: r.status === 0, output: `${r.stdout}${r.stderr}` };
  }

  /** `ward proxy --transparent` for `pod`, with the proxy's group, on the controller's APIs. Does not wait: see {@link waitWardReady}. */
  startWardProxy(pod: LinkerdLabPod, opts: WardProxyOptions = {}): WardProcess {
    const node = this.node.ip;
    const args = [
      'proxy',
      '--transparent',
      '--workload',
      `${pod.namespace}/${pod.name}`,
      '--service-account',
      pod.sa,
      '--trust-anchors',
      join(this.idDir, 'ca.crt'),
      '--token-file',
      this.tokenFile(pod),
      '--identity-addr',
      `${node}:${this.ports.identity}`,
      '--policy-addr',
      `${node}:${this.ports.policy}`,
      '--listen-host',
      pod.ip,
      '--admin-addr',
      '0.0.0.0:4191',
      ...(opts.inboundPorts ?? []).flatMap((port) => ['--inbound', `${port}=127.0.0.1:${port}`]),
      ...(opts.destination === false ? [] : ['--destination-addr', `${node}:${this.ports.destination}`]),
      ...(opts.extra ?? []),
    ];
    const enter = ['nsenter', `--net=/run/netns/${pod.ns}`, `--setgid=${PROXY_GID}`, '--'];
    const p =
      opts.nodeArgs === undefined
        ? wardSpawn(args, {}, enter)
        : spawnProcess([...enter, process.execPath, ...opts.nodeArgs, WARD_BIN, ...args], { ...process.env, NO_COLOR: '1', FORCE_COLOR: '0' });
    this.#processes.push(p);
    return p;
  }

  /** Waits for a ward proxy's ready line and its `proxy ready` log (certificate and every policy in); returns the line. */
  async waitWardReady(p: WardProcess, timeoutMs = LAB_WAIT_MS): Promise<string> {
    return waitFor(
      `the ward proxy to be ready (stderr so far: ${p.stderr().slice(-1500)})`,
      () => {
        if (p.child.exitCode !== null) throw new Error(`ward proxy exited with ${p.child.exitCode}: ${p.stderr()}`);
        const line = /^ward proxy ready: .*$/m.exec(p.stderr())?.[0];
        return line !== undefined && p.stderr().includes('"msg":"proxy ready"') ? line : undefined;
      },
      timeoutMs,
      50,
    );
  }

  /** GET `path` from a proxy's admin port (4191, not redirected) in `pod`, from the node. */
  async admin(pod: LabPod, path: string): Promise<string> {
    const r = await this.nodeAgent.request({ op: 'http-get', host: pod.ip, port: 4191, path });
    assert.equal(r.status, 200, JSON.stringify(r));
    return r.body ?? '';
  }

  /** One HTTP/2 request (prior knowledge) made from inside `from`'s namespace. */
  h2Request(from: LabPod, req: H2Request): Promise<H2Reply> {
    const arg = JSON.stringify({ ...req, body: req.body === undefined ? undefined : Buffer.from(req.body).toString('base64') });
    return new Promise((resolvePromise) => {
      const child = spawn('ip', ['netns', 'exec', from.ns, process.execPath, '--input-type=module', '-e', H2_CLIENT, arg]);
      let out = '';
      let err = '';
      child.stdout.on('data', (c: Buffer) => {
        out += c.toString();
      });
      child.stderr.on('data', (c: Buffer) => {
        err += c.toString();
      });
      const killer = setTimeout(() => child.kill('SIGKILL'), (req.timeoutMs ?? 10_000) + 10_000);
      child.once('exit', () => {
        clearTimeout(killer);
        try {
          resolvePromise(JSON.parse(out) as H2Reply);
        } catch {
          resolvePromise({ error: `the HTTP/2 client failed: ${out}${err}` });
        }
      });
    });
  }

  /** A gRPC call with an empty message (`/<service>/<method>`) from `from`: the reply's `grpc-status` is in trailers (or headers, trailers-only). */
  grpcCall(from: LabPod, host: string, port: number, path: string): Promise<H2Reply> {
    return this.h2Request(from, {
      host,
      port,
      path,
      method: 'POST',
      headers: { 'content-type': 'application/grpc', te: 'trailers' },
      body: EMPTY_GRPC_MESSAGE,
    });
  }

  /** Starts an HTTP/2 and gRPC application (see {@link H2_SERVER}) in `pod` on `host:port`; resolves once it listens. */
  async serveH2(pod: LabPod, host: string, port: number): Promise<void> {
    const child = spawn('ip', ['netns', 'exec', pod.ns, process.execPath, '--input-type=module', '-e', H2_SERVER, host, String(port)]);
    this.#tcp.push(child);
    let stderr = '';
    child.stderr.on('data', (c: Buffer) => {
      stderr += c.toString();
    });
    const first = await new Promise<string>((r) => {
      createInterface({ input: child.stdout }).once('line', r);
      child.once('exit', () => r(''));
    });
    if (!first.includes('"listening":true')) throw new Error(`the HTTP/2 application could not listen on ${host}:${port}: ${first}${stderr}`);
  }

  /** Opens a TCP connection from inside `from`'s namespace and keeps it open. */
  async openTcp(from: LabPod, host: string, port: number, timeoutMs = 10_000): Promise<LabTcpConnection> {
    const child = spawn('ip', ['netns', 'exec', from.ns, process.execPath, '--input-type=module', '-e', TCP_CLIENT, host, String(port)]);
    this.#tcp.push(child);
    let received = '';
    let isClosed = false;
    const waiters = new Set<() => void>();
    let stderr = '';
    child.stderr.on('data', (c: Buffer) => {
      stderr += c.toString();
    });
    let onConnected: (ok: boolean) => void = () => {};
    const connected = new Promise<boolean>((r) => {
      onConnected = r;
    });
    const closed = new Promise<void>((resolveClosed) => {
      createInterface({ input: child.stdout }).on('line', (line) => {
        const msg = JSON.parse(line) as { connected?: boolean; data?: string; closed?: boolean; error?: string };
        if (msg.connected === true) onConnected(true);
        if (msg.data !== undefined) received += msg.data;
        if (msg.closed === true) {
          isClosed = true;
          onConnected(false);
          resolveClosed();
        }
        for (const w of waiters) w();
      });
      child.once('exit', () => {
        isClosed = true;
        onConnected(false);
        resolveClosed();
        for (const w of waiters) w();
      });
    });
    const ok = await Promise.race([connected, new Promise<boolean>((r) => setTimeout(() => r(false), timeoutMs))]);
    if (!ok) {
      child.kill('SIGKILL');
      throw new Error(`could not connect to ${host}:${port} from ${from.ns}: ${stderr}`);
    }
    return {
      closed,
      isClosed: () => isClosed,
      exchange: (data, exchangeTimeoutMs = 10_000) => {
        const start = received.length;
        child.stdin.write(`${Buffer.from(data).toString('base64')}\n`);
        return new Promise((res, rej) => {
          const timer = setTimeout(() => {
            waiters.delete(check);
            rej(new Error(`no echo of ${JSON.stringify(data)} within ${exchangeTimeoutMs} ms (got ${JSON.stringify(received.slice(start))})`));
          }, exchangeTimeoutMs);
          const check = () => {
            const got = received.slice(start);
            if (got.length >= Buffer.byteLength(data) || isClosed) {
              clearTimeout(timer);
              waiters.delete(check);
              if (got.length >= Buffer.byteLength(data)) res(got);
              else rej(new Error(`the connection closed after ${JSON.stringify(got)}`));
            }
          };
          waiters.add(check);
          check();
        });
      },
      end: async () => {
        if (child.exitCode !== null || child.signalCode !== null) return;
        const exited = new Promise<void>((r) => child.once('exit', () => r()));
        child.kill('SIGKILL');
        await exited;
      },
    };
  }

  /** Stops every process and agent the lab started, deletes its namespaces and directory. Never throws. */
  async stop(): Promise<void> {
    for (const c of this.#tcp) if (c.exitCode === null && c.signalCode === null) c.kill('SIGKILL');
    for (const p of this.#processes) await p.stop().catch(() => undefined);
    await this.controller.stop().catch(() => undefined);
    for (const a of this.#agents.values()) await a.stop().catch(() => undefined);
    this.netns.cleanup();
    rmSync(this.dir, { recursive: true, force: true });
  }
}

/** What a linkerd2-proxy logged (it logs on stdout). */
export function linkerdLog(p: LinkerdProxy): string {
  return `${p.process.stdout()}${p.process.stderr()}`;
}

/**
 * Writes what Linkerd's proxy wrapper writes before the proxy starts: `key.p8` (PKCS#8 DER,
 * P-256) and `csr.der` (CN and DNS SAN = `identity`).
 */
export function writeIdentityDir(dir: string, identity: string): void {
  const pem = join(dir, 'key.pem');
  run('openssl', ['genpkey', '-algorithm', 'EC', '-pkeyopt', 'ec_paramgen_curve:P-256', '-out', pem]);
  run('openssl', ['pkcs8', '-topk8', '-nocrypt', '-in', pem, '-outform', 'DER', '-out', join(dir, 'key.p8')]);
  run('openssl', [
    'req',
    '-new',
    '-key',
    pem,
    '-subj',
    `/CN=${identity}`,
    '-addext',
    `subjectAltName=DNS:${identity}`,
    '-outform',
    'DER',
    '-out',
    join(dir, 'csr.der'),
  ]);
  rmSync(pem);
}
