/**
 * `ward up` as users run it: a real `ward up DIR` (controller in-process, every pod as local
 * processes with its own `ward proxy` on its own loopback address) on a small directory of two
 * meshed namespaces, asserted through real traffic:
 *
 * - demo (deny default): the pod of Deployment server, named after its template as in a cluster
 *   (`server-<pod-template-hash>-0`; an HTTP app behind a Server that admits only the
 *   `client.other` identity; probes through the proxy) and noprobe (an HTTP route that leaves its
 *   readiness probe unauthorized, so it must stay unready);
 * - other (cluster default all-unauthenticated): client and intruder, tiny relays that call the
 *   server through their proxy's outbound port (`HTTP_PROXY`) when the test asks them to, and an
 *   unmeshed pod that keeps crashing; later a Deployment echo of two pods whose readiness the
 *   test turns off and on (Destination must follow it), and whose template it edits (a rollout:
 *   the running pods keep their policy, new pods replace them once ready).
 *
 * The test process is "the host" (127.0.0.1), outside the cluster networks.
 */
import assert from 'node:assert/strict';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { localMeshApi, processesMentioning, upControllerFlags, type WardProcess, waitFor, wardSpawn, wardSync } from './helpers.js';

const TD = 'cluster.local';
const idOf = (ns: string, sa: string) => `${sa}.${ns}.serviceaccount.identity.linkerd.${TD}`;
/** Pod addresses of this test (apart from a developer's mesh on 127.20.0.x and other tests). */
const FIRST_IP = '127.20.200.1';
const IP_PREFIX = '127.20.200.';

const SERVER_APP = `import { createServer } from 'node:http';
const host = process.env.WARD_APP_HOST;
const port = Number(process.env.PORT);
createServer((req, res) => {
  if (req.url === '/live') res.statusCode = Number(process.env.LIVE_STATUS ?? 200);
  if (req.url === '/ready' || req.url === '/live') return res.end('ok');
  res.setHeader('content-type', 'application/json');
  res.end(JSON.stringify({ pod: process.env.POD_NAME, greeting: process.env.GREETING, clientId: req.headers['l5d-client-id'] ?? null }));
}).listen(port, host, () => console.log('server listening on ' + host + ':' + port));
`;

/** Calls ?url= through the pod's outbound proxy (absolute-form HTTP/1.1, as HTTP_PROXY clients do). */
const RELAY_APP = `import { createServer, request } from 'node:http';
const proxy = new URL(process.env.HTTP_PROXY);
createServer((req, res) => {
  const target = new URL(new URL(req.url, 'http://relay').searchParams.get('url') ?? 'http://none');
  const out = request({ host: proxy.hostname, port: Number(proxy.port), path: target.href, headers: { host: target.host } }, (r) => {
    let body = '';
    r.on('data', (c) => { body += c; });
    r.on('end', () => res.end(JSON.stringify({ status: r.statusCode, body })));
  });
  out.on('error', (e) => res.end(JSON.stringify({ status: 0, body: e.message })));
  out.end();
}).listen(8080, process.env.WARD_APP_HOST, () => console.log('relay listening via ' + proxy.href));
`;

const NAMESPACES = (otherPolicy: string) => `apiVersion: v1
kind: Namespace
metadata:
  name: demo
  annotations: {linkerd.io/inject: enabled, config.linkerd.io/default-inbound-policy: deny}
---
apiVersion: v1
kind: Namespace
metadata:
  name: other
  annotations: {linkerd.io/inject: enabled, config.linkerd.io/default-inbound-policy: ${otherPolicy}}
`;

const APPS = `apiVersion: v1
kind: ServiceAccount
metadata: {name: server, namespace: demo}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: server, namespace: demo}
spec:
  replicas: 1
  selector: {matchLabels: {app: server}}
  template:
    metadata: {labels: {app: server}}
    spec:
      serviceAccountName: server
      containers:
      - name: server
        command: [node, server.mjs]
        workingDir: apps
        env: [{name: PORT, value: "8080"}, {name: GREETING, value: "hello from $(POD_NAME) at $(POD_IP)"}]
        ports: [{name: http, containerPort: 8080}]
        readinessProbe: {httpGet: {path: /ready, port: http}, periodSeconds: 1}
        livenessProbe: {httpGet: {path: /live, port: http}, periodSeconds: 1}
---
apiVersion: v1
kind: Service
metadata: {name: server, namespace: demo}
spec:
  selector: {app: server}
  ports: [{name: http, port: 80, targetPort: http}]
---
apiVersion: v1
kind: Pod
metadata: {name: noprobe, namespace: demo, labels: {app: noprobe}}
spec:
  containers:
  - name: server
    command: [node, apps/server.mjs]
    env: [{name: PORT, value: "8081"}]
    ports: [{name: http, containerPort: 8081}]
    readinessProbe: {httpGet: {path: /ready, port: 8081}, periodSeconds: 1}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: client, namespace: other}
---
apiVersion: v1
kind: Pod
metadata: {name: client, namespace: other}
spec:
  serviceAccountName: client
  containers:
  - name: relay
    command: [node, apps/relay.mjs]
    ports: [{name: http, containerPort: 8080}]
    readinessProbe: {tcpSocket: {port: http}, periodSeconds: 1}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: intruder, namespace: other}
---
apiVersion: v1
kind: Pod
metadata: {name: intruder, namespace: other}
spec:
  serviceAccountName: intruder
  containers:
  - name: relay
    command: [node, apps/relay.mjs]
    ports: [{name: http, containerPort: 8080}]
    readinessProbe: {tcpSocket: {port: 8080}, periodSeconds: 1}
---
apiVersion: v1
kind: Pod
metadata: {name: flaky, namespace: other}
spec:
  containers:
  - name: server
    command: [node, apps/server.mjs]
    env: [{name: PORT, value: "8080"}, {name: LIVE_STATUS, value: "500"}]
    ports: [{name: http, containerPort: 8080}]
    livenessProbe: {httpGet: {path: /live, port: http}, periodSeconds: 1, failureThreshold: 2}
---
apiVersion: v1
kind: Pod
metadata:
  name: crashy
  namespace: other
  annotations: {linkerd.io/inject: disabled}
spec:
  containers:
  - name: crashy
    command: [node, -e, "console.log('about to fail'); setTimeout(() => process.exit(3), 300)"]
`;

const policy = (identities: string[]) => `apiVersion: policy.linkerd.io/v1beta3
kind: Server
metadata: {name: server-http, namespace: demo}
spec:
  podSelector: {matchLabels: {app: server}}
  port: http
  proxyProtocol: HTTP/1
---
apiVersion: policy.linkerd.io/v1alpha1
kind: MeshTLSAuthentication
metadata: {name: clients, namespace: demo}
spec:
  identities: [${identities.map((i) => JSON.stringify(i)).join(', ')}]
---
apiVersion: policy.linkerd.io/v1alpha1
kind: AuthorizationPolicy
metadata: {name: server-clients, namespace: demo}
spec:
  targetRef: {group: policy.linkerd.io, kind: Server, name: server-http}
  requiredAuthenticationRefs:
  - {group: policy.linkerd.io, kind: MeshTLSAuthentication, name: clients}
---
apiVersion: policy.linkerd.io/v1beta3
kind: Server
metadata: {name: noprobe-http, namespace: demo}
spec:
  podSelector: {matchLabels: {app: noprobe}}
  port: 8081
  proxyProtocol: HTTP/1
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: noprobe-api, namespace: demo}
spec:
  parentRefs: [{group: policy.linkerd.io, kind: Server, name: noprobe-http}]
  rules:
  - matches: [{path: {type: PathPrefix, value: /api}}]
`;

interface PodJson {
  namespace: string;
  name: string;
  owner: string | null;
  /** An old pod of a rollout. */
  replaced?: true;
  ip: string;
  ready: boolean;
  restarts: number;
  adminAddress: string | null;
  identity: string | null;
  containers: { name: string; pid?: number; message?: string }[];
}
interface StatusJson {
  pods: PodJson[];
  denials: { namespace: string; pod: string; port: number; kind: string; client: string; clientId: string | null; path?: string }[];
}

let work: string;
let dir: string;
let state: string;
let up: WardProcess;
let api: string;
let token: string;
/** The name of the pod of Deployment demo/server (`server-<hash>-0`). */
let serverPod = 'server-?';

/** The local API's status (faster than spawning `ward status` in polling loops). */
async function status(): Promise<StatusJson> {
  const res = await fetch(`${api}/api/v1/local/status`, { headers: { authorization: `Bearer ${token}` }, signal: AbortSignal.timeout(5000) });
  return (await res.json()) as StatusJson;
}

async function pod(ns: string, name: string): Promise<PodJson> {
  const p = (await status()).pods.find((x) => x.namespace === ns && x.name === name);
  assert.ok(p, `pod ${ns}/${name} is listed`);
  return p;
}

/** Asks the relay of pod `ip` to GET `url` through its proxy. */
async function viaRelay(ip: string, url: string): Promise<{ status: number; body: string }> {
  const res = await fetch(`http://${ip}:8080/call?url=${encodeURIComponent(url)}`, { signal: AbortSignal.timeout(5000) });
  return (await res.json()) as { status: number; body: string };
}

/** Our processes whose command line names the state dir or whose environment has a pod address of this test. */
function leftovers(): string[] {
  const out: string[] = [];
  for (const pid of readdirSync('/proc').filter((p) => /^\d+$/.test(p))) {
    if (Number(pid) === process.pid) continue;
    try {
      const cmdline = readFileSync(`/proc/${pid}/cmdline`, 'utf8').replaceAll('\0', ' ');
      const environ = readFileSync(`/proc/${pid}/environ`, 'utf8');
      const podIp = /(?:^|\0)POD_IP=([^\0]*)/.exec(environ)?.[1];
      if (cmdline.includes(state) || cmdline.includes(IP_PREFIX) || podIp?.startsWith(IP_PREFIX) === true)
        out.push(`${pid}: ${cmdline} [POD_IP=${podIp ?? ''}]`);
    } catch {
      // gone, or not ours
    }
  }
  return out;
}

const SERVER_URL = 'http://server.demo.svc.cluster.local/hello';

/** Answers with its pod's name; unready while `$FLAGS/unready-<pod>` or `$FLAGS/hold-<GEN>` exists. */
const ECHO_APP = `import { createServer } from 'node:http';
import { existsSync } from 'node:fs';
const flags = process.env.FLAGS;
const pod = process.env.POD_NAME;
createServer((req, res) => {
  if (req.url === '/ready') {
    res.statusCode = existsSync(flags + '/unready-' + pod) || existsSync(flags + '/hold-' + process.env.GEN) ? 503 : 200;
    return res.end();
  }
  res.end(JSON.stringify({ pod }));
}).listen(8080, process.env.WARD_APP_HOST);
`;

const ECHO = (gen: string, defaultPolicy: string, flags: string) => `apiVersion: apps/v1
kind: Deployment
metadata: {name: echo, namespace: other}
spec:
  replicas: 2
  selector: {matchLabels: {app: echo}}
  template:
    metadata:
      labels: {app: echo}
      annotations: {config.linkerd.io/default-inbound-policy: ${defaultPolicy}}
    spec:
      containers:
      - name: echo
        command: [node, apps/echo.mjs]
        env: [{name: FLAGS, value: ${JSON.stringify(flags)}}, {name: GEN, value: ${gen}}]
        ports: [{name: http, containerPort: 8080}]
        readinessProbe: {httpGet: {path: /ready, port: http}, periodSeconds: 1, failureThreshold: 1}
---
apiVersion: v1
kind: Service
metadata: {name: echo, namespace: other}
spec:
  selector: {app: echo}
  ports: [{name: http, port: 80, targetPort: http}]
`;
const ECHO_URL = 'http://echo.other.svc.cluster.local/';

describe('ward up', { timeout: 180_000 }, () => {
  before(async () => {
    work = mkdtempSync(join(tmpdir(), 'ward-up-'));
    dir = join(work, 'mesh');
    state = join(work, 'state');
    mkdirSync(join(dir, 'apps'), { recursive: true });
    writeFileSync(join(dir, 'apps', 'server.mjs'), SERVER_APP);
    writeFileSync(join(dir, 'apps', 'relay.mjs'), RELAY_APP);
    writeFileSync(join(dir, 'namespaces.yaml'), NAMESPACES('all-unauthenticated'));
    writeFileSync(join(dir, 'apps.yaml'), APPS);
    writeFileSync(join(dir, 'policy.yaml'), policy([idOf('other', 'client')]));
    up = wardSpawn(['up', dir, '--state-dir', state, ...upControllerFlags(), '--first-pod-ip', FIRST_IP, '--restart-backoff-ms', '300']);
    const mesh = await localMeshApi(up, state);
    api = mesh.api;
    token = mesh.token;
  });

  after(async () => {
    if (up.child.exitCode === null) await up.stop(5000);
    rmSync(work, { recursive: true, force: true });
  });

  it('starts every pod on its own address; all become ready under the deny default, except the one whose probes are not authorized', async () => {
    const t0 = Date.now();
    await waitFor(
      `the pods to be ready (ward up: ${up.stdout()}${up.stderr()})`,
      async () => {
        const s = await status();
        const ready = s.pods.filter((p) => p.ready).map((p) => `${p.namespace}/${p.name}`);
        serverPod = s.pods.find((p) => p.owner === 'Deployment/server')?.name ?? serverPod;
        return [`demo/${serverPod}`, 'other/client', 'other/intruder'].every((p) => ready.includes(p)) ? ready : undefined;
      },
      45_000,
      250,
    );
    console.log(`# pods ready ${Date.now() - t0} ms after mesh.json`);
    const s = await status();
    assert.match(serverPod, /^server-[bcdfghjklmnpqrstvwxz2456789]+-0$/, 'a Deployment pod carries its template hash');
    assert.deepEqual(
      // flaky fails its liveness probe and crashy exits, on purpose: their readiness comes and goes.
      s.pods.map((p) => [p.namespace, p.name, p.ip, p.name === 'flaky' || p.name === 'crashy' ? null : p.ready, p.adminAddress, p.identity]),
      [
        ['demo', 'noprobe', '127.20.200.1', false, '127.20.200.1:4191', idOf('demo', 'default')],
        ['demo', serverPod, '127.20.200.2', true, '127.20.200.2:4191', idOf('demo', 'server')],
        ['other', 'client', '127.20.200.3', true, '127.20.200.3:4191', idOf('other', 'client')],
        ['other', 'crashy', '127.20.200.4', null, null, null],
        ['other', 'flaky', '127.20.200.5', null, '127.20.200.5:4191', idOf('other', 'default')],
        ['other', 'intruder', '127.20.200.6', true, '127.20.200.6:4191', idOf('other', 'intruder')],
      ],
    );
    // The proxy's admin server answers the kubelet's view of it.
    assert.equal((await fetch('http://127.20.200.2:4191/ready')).status, 200);
  });

  it('a pod whose readiness probe its policy denies stays unready, and the denial is listed', async () => {
    await new Promise((r) => setTimeout(r, 1500));
    const p = await pod('demo', 'noprobe');
    assert.equal(p.ready, false);
    assert.match(p.containers[0]?.message ?? '', /^readiness probe failed: HTTP 404/);
    const d = (await status()).denials.find((x) => x.pod === 'noprobe');
    assert.deepEqual(d && [d.port, d.kind, d.client, d.clientId, d.path], [8081, 'http404', '127.19.0.1', null, '/ready']);
  });

  it('a call through the mesh reaches the server with the caller identity (l5d-client-id), env expanded', async () => {
    const r = await viaRelay('127.20.200.3', SERVER_URL);
    assert.equal(r.status, 200, r.body);
    assert.deepEqual(JSON.parse(r.body), { pod: serverPod, greeting: `hello from ${serverPod} at 127.20.200.2`, clientId: idOf('other', 'client') });
  });

  it('a caller the policy does not admit gets 403, listed by `ward status -o json` with its identity', async () => {
    const r = await viaRelay('127.20.200.6', SERVER_URL);
    assert.equal(r.status, 403);
    // The host (127.0.0.1) is outside the cluster, plaintext: denied too.
    assert.equal((await fetch('http://127.20.200.2:8080/hello')).status, 403);
    const s = wardSync(['status', '-o', 'json', '--state-dir', state]);
    assert.equal(s.status, 0, s.stderr);
    const denials = (JSON.parse(s.stdout) as StatusJson).denials.filter((d) => d.pod === serverPod);
    assert.ok(
      denials.some(
        (d) => d.namespace === 'demo' && d.port === 8080 && d.kind === 'http403' && d.client === '127.20.200.6' && d.clientId === idOf('other', 'intruder'),
      ),
      JSON.stringify(denials),
    );
    assert.ok(denials.some((d) => d.client === '127.0.0.1' && d.clientId === null));
    const text = wardSync(['status', '--state-dir', state]);
    assert.equal(text.status, 0, text.stderr);
    assert.match(text.stdout, /NAMESPACE\s+NAME\s+IP\s+READY\s+RESTARTS\s+ADMIN\s+IDENTITY/);
    assert.match(
      text.stdout,
      new RegExp(`demo\\s+${serverPod}\\s+127\\.20\\.200\\.2\\s+2/2\\s+0\\s+127\\.20\\.200\\.2:4191\\s+server\\.demo\\.serviceaccount`),
    );
    assert.match(text.stdout, /RECENT DENIALS/);
  });

  it('online commands default to the local mesh when given neither -f nor --controller', () => {
    const saved = process.env.WARD_STATE_DIR;
    process.env.WARD_STATE_DIR = state;
    try {
      const r = wardSync(['authz', '-n', 'demo', 'deploy/server', '-o', 'json']);
      assert.equal(r.status, 0, r.stderr);
      assert.match(r.stdout, /"server-http"/);
    } finally {
      if (saved === undefined) delete process.env.WARD_STATE_DIR;
      else process.env.WARD_STATE_DIR = saved;
    }
  });

  it('a policy edit admitting the intruder takes effect within 2 s, and so does its revert', async () => {
    const attempt = async (want: number) => {
      const t0 = Date.now();
      const r = await waitFor(`status ${want}`, async () => ((await viaRelay('127.20.200.6', SERVER_URL)).status === want ? true : undefined), 2000, 50);
      return { ok: r, ms: Date.now() - t0 };
    };
    writeFileSync(join(dir, 'policy.yaml'), policy([idOf('other', 'client'), idOf('other', 'intruder')]));
    const admitted = await attempt(200);
    writeFileSync(join(dir, 'policy.yaml'), policy([idOf('other', 'client')]));
    const reverted = await attempt(403);
    console.log(`# edit took effect in ${admitted.ms} ms, revert in ${reverted.ms} ms`);
    assert.equal((await viaRelay('127.20.200.3', SERVER_URL)).status, 200, 'the client stays admitted');
  });

  it('an app that keeps exiting is reported with its last lines and restarted; the rest keeps running', async () => {
    await waitFor('crashy restarts', async () => ((await pod('other', 'crashy')).restarts >= 2 ? true : undefined), 15_000, 200);
    assert.match(up.stdout(), /pod other\/crashy: container crashy exited with code 3 \(restarting in \d+ s\); last lines:\n.*\| about to fail/);
    assert.equal((await pod('demo', serverPod)).ready, true);
  });

  it('a failing liveness probe restarts the app', async () => {
    await waitFor('flaky restarted', async () => ((await pod('other', 'flaky')).restarts >= 1 ? true : undefined), 15_000, 200);
    assert.match(up.stdout(), /pod other\/flaky: container server failed its liveness probe \(HTTP 500\); restarting it/);
  });

  it('follows the directory: a pod added starts, a pod removed stops', async () => {
    writeFileSync(
      join(dir, 'extra.yaml'),
      `apiVersion: v1
kind: Pod
metadata: {name: extra, namespace: other, annotations: {linkerd.io/inject: disabled}}
spec:
  containers:
  - name: server
    command: [node, apps/server.mjs]
    env: [{name: PORT, value: "8082"}]
    readinessProbe: {tcpSocket: {port: 8082}, periodSeconds: 1}
`,
    );
    const extra = await waitFor('extra ready', async () => (await status()).pods.find((p) => p.name === 'extra' && p.ready), 15_000, 200);
    assert.equal(extra.ip, '127.20.200.7', 'the next free address');
    // Unmeshed: the app listens on the pod address itself.
    assert.equal((await fetch('http://127.20.200.7:8082/ready')).status, 200);
    rmSync(join(dir, 'extra.yaml'));
    await waitFor('extra gone', async () => ((await status()).pods.some((p) => p.name === 'extra') ? undefined : true), 10_000, 200);
    assert.deepEqual(
      leftovers().filter((l) => l.includes('127.20.200.7')),
      [],
    );
  });

  describe('a Deployment behind a Service', () => {
    let flags: string;
    /** The echo pods, by name. */
    const echoPods = async () => (await status()).pods.filter((p) => p.owner === 'Deployment/echo');
    /** The pods that answered `n` calls to the Service from the client pod, through its proxy. */
    const answering = async (n: number) => {
      const seen: string[] = [];
      for (let i = 0; i < n; i++) {
        const r = await viaRelay('127.20.200.3', ECHO_URL);
        seen.push(r.status === 200 ? (JSON.parse(r.body) as { pod: string }).pod : `status ${r.status}: ${r.body}`);
      }
      return [...new Set(seen)].sort();
    };

    before(async () => {
      flags = join(work, 'flags');
      mkdirSync(flags, { recursive: true });
      writeFileSync(join(dir, 'apps', 'echo.mjs'), ECHO_APP);
      writeFileSync(join(dir, 'echo.yaml'), ECHO('v1', 'all-unauthenticated', flags));
      await waitFor(
        'both echo pods ready',
        async () => {
          const pods = await echoPods();
          return pods.length === 2 && pods.every((p) => p.ready) ? true : undefined;
        },
        45_000,
        200,
      );
    });

    after(async () => {
      rmSync(join(dir, 'echo.yaml'), { force: true });
      await waitFor('the echo pods gone', async () => ((await echoPods()).length === 0 ? true : undefined), 20_000, 200);
    });

    it('Destination answers only ready pods: an unready pod gets no calls until it is ready again', async () => {
      const [a, b] = (await echoPods()).map((p) => p.name).sort() as [string, string];
      await waitFor('calls to reach both pods', async () => ((await answering(10)).length === 2 ? true : undefined), 20_000, 100);

      writeFileSync(join(flags, `unready-${b}`), '');
      await waitFor(`${b} unready`, async () => ((await pod('other', b)).ready ? undefined : true), 15_000, 100);
      // The app of b still answers; only Destination can keep calls away from it.
      await waitFor(`calls to avoid ${b}`, async () => (JSON.stringify(await answering(20)) === JSON.stringify([a]) ? true : undefined), 10_000, 100);
      assert.deepEqual(await answering(20), [a]);

      rmSync(join(flags, `unready-${b}`));
      await waitFor(`${b} ready again`, async () => ((await pod('other', b)).ready ? true : undefined), 15_000, 100);
      await waitFor(`calls to reach ${b} again`, async () => ((await answering(10)).includes(b) ? true : undefined), 10_000, 100);
    });

    it('a template edit leaves the running pods their policy, and new pods with the new one replace them once ready', async () => {
      const old = (await echoPods()).sort((x, y) => (x.name < y.name ? -1 : 1));
      assert.equal(old.length, 2);
      // Created under all-unauthenticated: the host (plaintext, outside the cluster) is admitted.
      for (const p of old) assert.equal((await fetch(`http://${p.ip}:8080/`)).status, 200, p.name);

      // The new template's pods are held unready, so that the old ones must keep serving.
      writeFileSync(join(flags, 'hold-v2'), '');
      writeFileSync(join(dir, 'echo.yaml'), ECHO('v2', 'all-authenticated', flags));
      const fresh = await waitFor(
        'the new pods running',
        async () => {
          const pods = (await echoPods()).filter((p) => !old.some((o) => o.name === p.name));
          return pods.length === 2 && pods.every((p) => p.containers[0]?.pid !== undefined) ? pods : undefined;
        },
        30_000,
        200,
      );
      for (const p of fresh) assert.match(p.name, /^echo-[bcdfghjklmnpqrstvwxz2456789]+-[01]$/);
      assert.notEqual(fresh[0]?.name.split('-')[1], old[0]?.name.split('-')[1], 'a new template hash');
      // Each new pod's proxy enforces the new default once it has its policy: the host is refused.
      for (const p of fresh)
        await waitFor(`${p.name} to refuse the host`, async () => ((await fetch(`http://${p.ip}:8080/`)).status === 403 ? true : undefined), 20_000, 200);
      // The running pods keep what they were created with, stay ready and keep answering the Service.
      for (const p of old) {
        assert.equal((await fetch(`http://${p.ip}:8080/`)).status, 200, `${p.name} keeps all-unauthenticated`);
        const now = await pod('other', p.name);
        assert.deepEqual([now.ready, now.replaced], [true, true]);
      }
      // The held pods get no calls: every answer comes from a running pod.
      for (const n of await answering(10))
        assert.ok(
          old.some((p) => p.name === n),
          `${n} answered`,
        );

      // Once the new pods are ready, the old ones go and the Service answers with the new pods.
      rmSync(join(flags, 'hold-v2'));
      await waitFor(
        'the old pods gone',
        async () => {
          const names = (await echoPods()).map((p) => p.name);
          return old.every((o) => !names.includes(o.name)) ? true : undefined;
        },
        30_000,
        200,
      );
      for (const p of fresh) assert.equal((await pod('other', p.name)).ready, true);
      await waitFor(
        'calls to reach the new pods',
        async () => ((await answering(10)).every((n) => fresh.some((p) => p.name === n)) ? true : undefined),
        10_000,
        100,
      );
      assert.match(up.stdout(), new RegExp(`pod other/${old[0]?.name}.*replaced by the new pods of Deployment/echo`));
    });

    it('a template edited back before its new pods are ready keeps the running pods and drops the new ones', async () => {
      const running = (await echoPods()).sort((x, y) => (x.name < y.name ? -1 : 1));
      writeFileSync(join(flags, 'hold-v3'), '');
      writeFileSync(join(dir, 'echo.yaml'), ECHO('v3', 'deny', flags));
      await waitFor('the v3 pods started', async () => ((await echoPods()).length === 4 ? true : undefined), 30_000, 200);
      writeFileSync(join(dir, 'echo.yaml'), ECHO('v2', 'all-authenticated', flags));
      const after = await waitFor(
        'the v3 pods gone',
        async () => {
          const pods = await echoPods();
          return pods.length === 2 ? pods.sort((x, y) => (x.name < y.name ? -1 : 1)) : undefined;
        },
        30_000,
        200,
      );
      // The same pods, never restarted, still ready and serving.
      assert.deepEqual(
        after.map((p) => [p.name, p.containers[0]?.pid, p.ready]),
        running.map((p) => [p.name, p.containers[0]?.pid, true]),
      );
      for (const n of await answering(10))
        assert.ok(
          running.some((p) => p.name === n),
          `${n} answered`,
        );
      rmSync(join(flags, 'hold-v3'));
    });
  });

  it('ward logs -f follows new lines until Ctrl-C', async () => {
    const logs = wardSpawn(['logs', `demo/${serverPod}`, '-c', 'proxy', '-f', '--tail', '1', '--state-dir', state]);
    try {
      await waitFor(`the last line (${logs.stderr()})`, () => (logs.stdout().includes('\n') ? true : undefined), 10_000);
      assert.equal((await fetch('http://127.20.200.2:8080/followed')).status, 403);
      await waitFor(`the denial followed (${logs.stdout()})`, () => (logs.stdout().includes('"path":"/followed"') ? true : undefined), 5000);
      logs.child.kill('SIGINT');
      assert.equal(await logs.exited, 0, logs.stderr());
    } finally {
      await logs.stop(1000);
    }
  });

  it('refuses a second mesh on the same state directory', () => {
    const r = wardSync(['up', dir, '--state-dir', state]);
    assert.equal(r.status, 2);
    assert.match(r.stderr, /^error: a local mesh is already running from .* \(pid \d+, /m);
  });

  it('ward logs shows a pod app output and its proxy log', () => {
    const app = wardSync(['logs', 'other/client', '--state-dir', state]);
    assert.equal(app.status, 0, app.stderr);
    assert.match(app.stdout, /^relay listening via http:\/\/127\.20\.200\.3:4140\/$/m);
    const proxy = wardSync(['logs', `demo/${serverPod}`, '-c', 'proxy', '--tail', '200', '--state-dir', state]);
    assert.equal(proxy.status, 0, proxy.stderr);
    assert.match(proxy.stdout, /"msg":"Request denied"/);
    const missing = wardSync(['logs', 'demo/nope', '--state-dir', state]);
    assert.deepEqual([missing.status, missing.stderr], [2, 'error: no pod demo/nope in this mesh\n']);
  });

  it('ward restart recreates a pod: new processes, namespace annotations applied again', async () => {
    // The namespace turns to deny; running pods keep what they were created with.
    writeFileSync(join(dir, 'namespaces.yaml'), NAMESPACES('deny'));
    await new Promise((r) => setTimeout(r, 1000));
    const before = await pod('other', 'intruder');
    assert.equal((await fetch('http://127.20.200.6:8080/call')).status, 200, 'created under all-unauthenticated');
    const r = wardSync(['restart', 'other/intruder', '--state-dir', state]);
    assert.deepEqual([r.status, r.stdout], [0, 'pod other/intruder restarted\n'], r.stderr);
    const after = await waitFor(
      'intruder ready again',
      async () => {
        const p = await pod('other', 'intruder');
        return p.ready && p.containers[0]?.pid !== before.containers[0]?.pid ? p : undefined;
      },
      20_000,
      200,
    );
    assert.equal(after.ip, before.ip, 'same address');
    assert.equal((await fetch('http://127.20.200.6:8080/call')).status, 403, 'recreated under deny: the host is refused');
  });

  it('stops on SIGINT within a few seconds, leaving no process and no mesh.json', async () => {
    assert.equal(leftovers().filter((l) => l.includes(' proxy ')).length, 5, 'one proxy per meshed pod while running');
    const t0 = Date.now();
    up.child.kill('SIGINT');
    const code = await up.exited;
    const ms = Date.now() - t0;
    console.log(`# stopped in ${ms} ms`);
    assert.equal(code, 0, up.stderr());
    assert.ok(ms < 6000, `took ${ms} ms`);
    assert.equal(existsSync(join(state, 'mesh.json')), false);
    await waitFor('no process left', () => (leftovers().length === 0 ? true : undefined), 3000, 100).catch(() => {
      assert.deepEqual(leftovers(), []);
    });
    const s = wardSync(['status', '--state-dir', state]);
    assert.deepEqual([s.status, s.stderr], [2, 'error: no local mesh is running (start one with `ward up DIR`)\n']);
  });
});

/** True while `pid` runs (a zombie does not: it waits for a parent that may never reap it). */
function runs(pid: number): boolean {
  try {
    return !readFileSync(`/proc/${pid}/stat`, 'utf8').includes(') Z');
  } catch {
    return false;
  }
}

describe('ward up after a ward up that could not clean up, and on SIGHUP or SIGQUIT', { timeout: 120_000 }, () => {
  let work2: string;
  const procs: WardProcess[] = [];
  after(async () => {
    for (const p of procs) if (p.child.exitCode === null && p.child.signalCode === null) await p.stop(3000);
    // A failed assertion may leave the pod of the SIGKILLed ward up: end it.
    for (const { pid } of processesMentioning([join(work2, 'state')])) {
      try {
        process.kill(pid, 'SIGKILL');
      } catch {
        // gone already
      }
    }
    rmSync(work2, { recursive: true, force: true });
  });

  it('a later ward up ends the pods a SIGKILLed one left running; SIGHUP (the terminal closed) and SIGQUIT stop every pod', async () => {
    work2 = mkdtempSync(join(tmpdir(), 'ward-up-crash-'));
    const dir2 = join(work2, 'mesh');
    const state2 = join(work2, 'state');
    mkdirSync(dir2);
    writeFileSync(
      join(dir2, 'pod.yaml'),
      `apiVersion: v1
kind: Pod
metadata: {name: lone, namespace: default}
spec:
  containers: [{name: main, command: [node, -e, "setInterval(() => {}, 1000)"]}]
`,
    );
    const any = '127.0.0.1:0';
    const start = () => {
      const p = wardSpawn([
        'up',
        dir2,
        '--state-dir',
        state2,
        '--policy-addr',
        any,
        '--identity-addr',
        any,
        '--destination-addr',
        any,
        '--admin-addr',
        any,
        '--first-pod-ip',
        '127.20.201.1',
      ]);
      procs.push(p);
      return p;
    };
    /** The pod's pid, once the mesh of `p` runs it. */
    const podPid = (p: WardProcess) =>
      waitFor(
        `the pod of ward up ${p.child.pid} (${p.stdout()}${p.stderr()})`,
        async () => {
          if (p.child.exitCode !== null) throw new Error(`ward up exited with ${p.child.exitCode}: ${p.stdout()}${p.stderr()}`);
          if (!existsSync(join(state2, 'mesh.json'))) return undefined;
          const m = JSON.parse(readFileSync(join(state2, 'mesh.json'), 'utf8')) as { pid: number; api: string; token: string };
          if (m.pid !== p.child.pid) return undefined;
          const res = await fetch(`${m.api}/api/v1/local/status`, { headers: { authorization: `Bearer ${m.token}` } });
          return ((await res.json()) as StatusJson).pods[0]?.containers[0]?.pid;
        },
        30_000,
        100,
      );

    const first = start();
    const orphan = await podPid(first);
    first.child.kill('SIGKILL');
    await first.exited;
    await new Promise((r) => setTimeout(r, 200));
    assert.ok(runs(orphan), 'the pod outlives a SIGKILLed ward up (its own process group)');

    const second = start();
    const pod2 = await podPid(second);
    assert.ok(!runs(orphan), 'the pod left behind was killed');
    assert.match(second.stdout(), /killed 1 process groups left running by an earlier ward up from /);
    second.child.kill('SIGHUP');
    assert.equal(await second.exited, 0, second.stderr());
    assert.equal(runs(pod2), false, 'SIGHUP stopped the pod');
    assert.equal(existsSync(join(state2, 'mesh.json')), false);

    const third = start();
    const pod3 = await podPid(third);
    assert.doesNotMatch(third.stdout(), /left running/, 'a clean stop leaves nothing to kill');
    third.child.kill('SIGQUIT');
    assert.equal(await third.exited, 0, third.stderr());
    assert.equal(runs(pod3), false, 'SIGQUIT stopped the pod');
  });
});

describe('ward up on a directory with errors', () => {
  it('reports them like ward check and starts nothing (exit 2)', () => {
    const bad = mkdtempSync(join(tmpdir(), 'ward-up-bad-'));
    try {
      writeFileSync(
        join(bad, 'pod.yaml'),
        `apiVersion: v1
kind: Pod
metadata: {name: web, namespace: default}
spec:
  containers:
  - name: web
    image: nginx
`,
      );
      const r = wardSync(['up', bad, '--state-dir', join(bad, 'state')]);
      assert.equal(r.status, 2);
      assert.equal(
        r.stderr,
        `${join(bad, 'pod.yaml')}:6:5: error LOC001 container web of pod default/web has no command [Pod default/web]\n` +
          "  hint: local mode runs a container's command/args; image is ignored\n" +
          `✖ ${bad}: 1 errors; nothing was started\n`,
      );
      assert.equal(existsSync(join(bad, 'state')), false);
    } finally {
      rmSync(bad, { recursive: true, force: true });
    }
  });
});
