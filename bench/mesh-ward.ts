/**
 * The ward side of `npm run bench -- mesh`, as users run it (like test/e2e/outbound.test.ts): a
 * real `ward controller` on a manifests directory and two real `ward proxy` processes on
 * loopback. The server pod demo/server-0 (127.0.0.1) serves pod ports 8080 (`HTTP/1`), 8081
 * (`gRPC`) and 9000 (`opaque`, also annotated `config.linkerd.io/opaque-ports`) through its proxy
 * (inbound only) to the bench apps; each port admits only the `client` identity. The client pod
 * demo/client-0 (127.0.0.2) runs the outbound forward proxy; the client reaches the service
 * `server-svc` through it, and it reaches the server proxy's mesh port through the hidden
 * `--mesh-port-override`. Identity: `ward identity init`'s files (written in-process by the same
 * code) and ServiceAccount tokens minted from its token key.
 */
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { IDENTITY_FILES, initIdentity, mintToken } from '../src/identity/index.js';
import { PROXY_NODE_OPTIONS } from '../src/proxy/index.js';
import { type LoggedChild, spawnLogged, waitFor, waitForLog } from './mesh-proc.js';

const HOST = '127.0.0.1';
const SERVER_POD_IP = '127.0.0.1';
const CLIENT_POD_IP = '127.0.0.2';
const START_TIMEOUT_MS = 30_000;
const WARD_BIN = new URL('../bin/ward.js', import.meta.url).pathname;
/**
 * Extra node options for the two proxies (after `PROXY_NODE_OPTIONS`, which they run with as `ward up`
 * starts them), space-separated (`WARD_BENCH_PROXY_NODE_ARGS`), e.g. `--cpu-prof
 * --cpu-prof-dir=/tmp/prof` to profile them under the bench's load.
 */
/** Node options from a space-separated environment variable's value (unset: none). */
export const splitNodeArgs = (value: string | undefined): string[] => (value ?? '').split(' ').filter((a) => a !== '');
const PROXY_NODE_ARGS = splitNodeArgs(process.env.WARD_BENCH_PROXY_NODE_ARGS);
const idOf = (ns: string, sa: string) => `${sa}.${ns}.serviceaccount.identity.linkerd.cluster.local`;

/** The client workload's mesh identity. */
export const CLIENT_ID = idOf('demo', 'client');
/** The server workload's mesh identity. */
export const SERVER_ID = idOf('demo', 'server');
/** The authorities the client asks its outbound proxy for, per protocol. */
export const SERVICE_AUTHORITY = {
  http1: 'server-svc.demo.svc.cluster.local:80',
  grpc: 'server-svc.demo.svc.cluster.local:8081',
  tcp: 'server-svc.demo.svc.cluster.local:9000',
} as const;

/** The major (mark-compact) GCs a ward proxy made so far and their total pause, from its `/metrics`. */
export interface MajorGcs {
  readonly count: number;
  readonly pauseMs: number;
}

/** Reads {@link MajorGcs} from the proxy whose admin port is `adminPort` (`nodejs_gc_duration_seconds`). */
export async function majorGcsOf(adminPort: number): Promise<MajorGcs> {
  const res = await fetch(`http://${HOST}:${adminPort}/metrics`, { signal: AbortSignal.timeout(5000) });
  const text = await res.text();
  const count = /^nodejs_gc_duration_seconds_count\{kind="major"\} (\d+)$/m.exec(text)?.[1];
  const sum = /^nodejs_gc_duration_seconds_sum\{kind="major"\} (\S+)$/m.exec(text)?.[1];
  if (count === undefined || sum === undefined) throw new Error(`no nodejs_gc_duration_seconds{kind="major"} on :${adminPort}/metrics (HTTP ${res.status})`);
  return { count: Number(count), pauseMs: Number(sum) * 1000 };
}

/** Where the bench apps listen (127.0.0.1). */
export interface AppPorts {
  readonly http1: number;
  readonly grpc: number;
  readonly tcp: number;
}

/** A running ward mesh. */
export interface WardMesh {
  /** The identity directory (`ca.crt`, `issuer.crt`, `issuer.key`, `token.key`). */
  readonly identityDir: string;
  readonly controller: LoggedChild;
  /** The client pod's proxy (outbound). */
  readonly outbound: LoggedChild;
  /** The server pod's proxy (inbound). */
  readonly inbound: LoggedChild;
  /** The client proxy's forward-proxy port (127.0.0.1). */
  readonly outboundPort: number;
  /** The admin ports (`/metrics`) of [outbound, inbound], on 127.0.0.1. */
  readonly adminPorts: readonly [number, number];
  stop(): Promise<void>;
}

/** A Server on the server pod's `port` and its AuthorizationPolicy admitting the client identity. */
const serverPolicy = (name: string, port: number, protocol: string): string => `---
apiVersion: policy.linkerd.io/v1beta3
kind: Server
metadata: {name: server-${name}, namespace: demo}
spec:
  podSelector: {matchLabels: {app: server}}
  port: ${port}
  proxyProtocol: ${protocol}
---
apiVersion: policy.linkerd.io/v1alpha1
kind: AuthorizationPolicy
metadata: {name: server-${name}-clients, namespace: demo}
spec:
  targetRef: {group: policy.linkerd.io, kind: Server, name: server-${name}}
  requiredAuthenticationRefs:
  - {group: policy.linkerd.io, kind: MeshTLSAuthentication, name: clients}
`;

const MANIFESTS = `apiVersion: v1
kind: Namespace
metadata:
  name: demo
  annotations: {linkerd.io/inject: enabled}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: server, namespace: demo}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: client, namespace: demo}
---
apiVersion: v1
kind: Pod
metadata:
  name: server-0
  namespace: demo
  labels: {app: server}
  annotations: {config.linkerd.io/opaque-ports: "9000"}
spec:
  serviceAccountName: server
  containers:
  - name: app
    image: bench/server
    ports:
    - {name: http, containerPort: 8080}
    - {name: grpc, containerPort: 8081}
    - {name: tcp, containerPort: 9000}
status: {podIP: ${SERVER_POD_IP}}
---
apiVersion: v1
kind: Pod
metadata: {name: client-0, namespace: demo, labels: {app: client}}
spec:
  serviceAccountName: client
  containers: [{name: app, image: bench/client}]
status: {podIP: ${CLIENT_POD_IP}}
---
apiVersion: v1
kind: Service
metadata: {name: server-svc, namespace: demo}
spec:
  selector: {app: server}
  ports:
  - {name: http, port: 80, targetPort: 8080}
  - {name: grpc, port: 8081, targetPort: 8081}
  - {name: tcp, port: 9000, targetPort: 9000}
---
apiVersion: policy.linkerd.io/v1alpha1
kind: MeshTLSAuthentication
metadata: {name: clients, namespace: demo}
spec:
  identities: ["${CLIENT_ID}"]
${[serverPolicy('http', 8080, 'HTTP/1'), serverPolicy('grpc', 8081, 'gRPC'), serverPolicy('tcp', 9000, 'opaque')].join('')}`;

const PROXY_READY = /ward proxy ready: identity \S+, mesh :(\d+), admin :(\d+), inbound .*?(?:, outbound :(\d+))?$/m;
const CONTROLLER_READY = /ward controller ready: policy :(\d+), identity :(\d+), destination :(\d+), admin http:\/\/[^:]+:(\d+)/;

interface ProxyPorts {
  readonly mesh: number;
  readonly admin: number;
  readonly outbound: number | undefined;
}

/** Waits for a proxy's ready line and for its admin `/ready` to answer 200. */
async function proxyReady(p: LoggedChild): Promise<ProxyPorts> {
  const m = await waitForLog(p, PROXY_READY, START_TIMEOUT_MS);
  const ports = { mesh: Number(m[1]), admin: Number(m[2]), outbound: m[3] === undefined ? undefined : Number(m[3]) };
  await waitFor(
    `${p.name} /ready`,
    async () => {
      try {
        return (await fetch(`http://${HOST}:${ports.admin}/ready`, { signal: AbortSignal.timeout(2000) })).status === 200 ? true : undefined;
      } catch {
        return undefined;
      }
    },
    START_TIMEOUT_MS,
  );
  return ports;
}

/**
 * Starts the controller and both proxies in `dir`; stops whatever started when a step fails.
 * `proxyNodeArgs` are the proxies' extra node options (default: `WARD_BENCH_PROXY_NODE_ARGS`);
 * `proxyBin` is the `ward` executable the proxies run (default this checkout's bin/ward.js; another
 * checkout's, to compare builds).
 */
export async function startWardMesh(dir: string, apps: AppPorts, proxyNodeArgs: readonly string[] = PROXY_NODE_ARGS, proxyBin = WARD_BIN): Promise<WardMesh> {
  const identityDir = join(dir, 'identity');
  const manifests = join(dir, 'manifests');
  mkdirSync(manifests, { recursive: true });
  const init = await initIdentity({ outDir: identityDir });
  if (!init.ok) throw new Error(`identity init failed: ${init.diagnostics.map((d) => d.message).join('; ')}`);
  writeFileSync(join(manifests, 'bench.yaml'), MANIFESTS);
  const signerKeyPem = readFileSync(join(identityDir, IDENTITY_FILES.tokenKey), 'utf8');
  const tokenFile = (sa: string, pod: string): string => {
    const file = join(dir, `${sa}.token`);
    writeFileSync(file, `${mintToken({ signerKeyPem, namespace: 'demo', serviceAccount: sa, pod })}\n`);
    return file;
  };

  // As `ward up` does: the bundles are checked (and built if stale) once, and the proxies, told so
  // (bin/ward.js), do not check again.
  const buildScript = join(dirname(proxyBin), '..', 'scripts', 'build.mjs');
  const proxyEnv: NodeJS.ProcessEnv = {};
  if (existsSync(buildScript)) {
    const built = spawnSync(process.execPath, [buildScript, '--if-stale'], { encoding: 'utf8', timeout: 120_000 });
    if (built.status !== 0) throw new Error(`${buildScript} --if-stale failed: ${built.stderr}`);
    proxyEnv.WARD_BUNDLES_CHECKED = '1';
  }

  const started: LoggedChild[] = [];
  const stop = async () => {
    for (const p of started.reverse()) await p.stop();
  };
  const ward = (name: string, args: readonly string[]): LoggedChild => {
    const isProxy = args[0] === 'proxy';
    const nodeArgs = isProxy ? [...PROXY_NODE_OPTIONS, ...proxyNodeArgs] : [];
    const p = spawnLogged(name, process.execPath, [...nodeArgs, isProxy ? proxyBin : WARD_BIN, ...args], join(dir, `${name}.log`), isProxy ? proxyEnv : {});
    started.push(p);
    return p;
  };
  try {
    const controller = ward('ward-controller', [
      'controller',
      '--manifests',
      manifests,
      '--identity-dir',
      identityDir,
      ...['--policy-addr', '--identity-addr', '--destination-addr', '--admin-addr'].flatMap((f) => [f, `${HOST}:0`]),
    ]);
    const c = await waitForLog(controller, CONTROLLER_READY, START_TIMEOUT_MS);
    const ctl = { policy: Number(c[1]), identity: Number(c[2]), destination: Number(c[3]) };
    const proxy = (name: string, pod: string, sa: string, extra: readonly string[]) =>
      ward(name, [
        'proxy',
        '--workload',
        `demo/${pod}`,
        '--service-account',
        sa,
        '--trust-anchors',
        join(identityDir, IDENTITY_FILES.anchorCert),
        '--token-file',
        tokenFile(sa, pod),
        '--identity-addr',
        `${HOST}:${ctl.identity}`,
        '--policy-addr',
        `${HOST}:${ctl.policy}`,
        '--mesh-addr',
        `${HOST}:0`,
        '--admin-addr',
        `${HOST}:0`,
        ...extra,
      ]);
    const inbound = proxy('ward-proxy-inbound', 'server-0', 'server', [
      '--listen-host',
      SERVER_POD_IP,
      '--inbound',
      `8080@0=${HOST}:${apps.http1}`,
      '--inbound',
      `8081@0=${HOST}:${apps.grpc}`,
      '--inbound',
      `9000@0=${HOST}:${apps.tcp}`,
    ]);
    const inboundPorts = await proxyReady(inbound);
    const outbound = proxy('ward-proxy-outbound', 'client-0', 'client', [
      '--listen-host',
      CLIENT_POD_IP,
      '--destination-addr',
      `${HOST}:${ctl.destination}`,
      '--outbound-addr',
      `${HOST}:0`,
      '--mesh-port-override',
      `${SERVER_POD_IP}=${inboundPorts.mesh}`,
    ]);
    const outboundPorts = await proxyReady(outbound);
    if (outboundPorts.outbound === undefined) throw new Error('the client proxy reported no outbound port');
    return { identityDir, controller, outbound, inbound, outboundPort: outboundPorts.outbound, adminPorts: [outboundPorts.admin, inboundPorts.admin], stop };
  } catch (e) {
    await stop();
    throw e;
  }
}
