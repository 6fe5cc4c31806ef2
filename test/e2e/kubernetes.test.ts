/**
 * ward on a real single-node Kubernetes cluster (../shared/cluster: kubelet, containerd, runc,
 * bridge CNI, kube-proxy, controller-manager, scheduler), installed as a user would:
 *
 *     npm run image; npm run image -- --example        (imported into the node's containerd)
 *     ward install --image localhost/ward:<v> | kubectl apply -f -
 *     kubectl apply -f examples/emojivoto/app -f examples/emojivoto/policy
 *
 * The controller runs in the cluster (two replicas, its own ServiceAccount and RBAC); the API
 * server calls its webhooks through their Service; the pods are injected by the mutating webhook
 * (proxy sidecar, proxy-init writing iptables in the pod, projected token) and their proxies get
 * certificates through TokenReview. Then: the validating webhook refuses what `ward check`
 * rejects; pods become Ready through the kubelet's probes under a deny default; policy is enforced
 * over mTLS for pod-to-pod and Service traffic, and a tap on the node's bridge sees no plaintext
 * between meshed pods; kubectl changes reach the proxies and deletions revoke; status conditions
 * appear; deleting the leader moves status writing to the other replica; an API server restart
 * changes no decision; `kubectl rollout restart` picks up a changed namespace default.
 *
 * The kit's node has no cluster DNS and no default route (by design: it reaches nothing outside
 * its namespace). So the example's Service names are replaced by their ClusterIPs in the
 * manifests applied here, and the node's namespace gets a route for the Service network (a real
 * node reaches ClusterIPs through its default route; the API server needs it to call webhooks by
 * Service). Needs root; skipped without the kit, except under CI=true.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, it } from 'node:test';
import { parseAllDocuments } from 'yaml';
import { waitFor, wardSync } from './helpers.js';
import { type Cluster, describeWithCluster, run, startCluster } from './kubernetes-cluster.js';

const ROOT = new URL('../../', import.meta.url).pathname;
const EXAMPLE = join(ROOT, 'examples', 'emojivoto');
const VERSION = (JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as { version: string }).version;
const WARD_IMAGE = `localhost/ward:${VERSION}`;
/** Long enough for a busy 2-core machine; every wait is bounded. */
const WAIT_MS = 180_000;

/** Lets the bad namespace's vote-bot call web. */
const ALLOW_BAD = `
apiVersion: policy.linkerd.io/v1alpha1
kind: MeshTLSAuthentication
metadata: {name: bad-vote-bot, namespace: emojivoto}
spec:
  identityRefs: [{kind: ServiceAccount, name: vote-bot, namespace: bad}]
---
apiVersion: policy.linkerd.io/v1alpha1
kind: AuthorizationPolicy
metadata: {name: web-from-bad, namespace: emojivoto}
spec:
  targetRef: {group: policy.linkerd.io, kind: Server, name: web-http}
  requiredAuthenticationRefs: [{group: policy.linkerd.io, kind: MeshTLSAuthentication, name: bad-vote-bot}]
`;

type Obj = { kind: string; metadata: { name: string; namespace?: string }; [k: string]: unknown };

/** The example's documents, file by file (files are applied whole, not concatenated). */
function exampleDocs(dir: string): Obj[] {
  const out: Obj[] = [];
  for (const f of readdirSync(dir)
    .filter((n) => n.endsWith('.yaml'))
    .sort())
    for (const d of parseAllDocuments(readFileSync(join(dir, f), 'utf8'))) {
      const o = d.toJSON() as Obj | null;
      if (o !== null) out.push(o);
    }
  return out;
}

const toStream = (objs: readonly unknown[]) => objs.map((o) => JSON.stringify(o)).join('\n---\n');

function buildImage(args: readonly string[]): string {
  const r = spawnSync(process.execPath, [join(ROOT, 'scripts', 'image.mjs'), ...args], { encoding: 'utf8', timeout: 600_000 });
  assert.equal(r.status, 0, `image.mjs ${args.join(' ')}: ${r.stderr}`);
  return r.stdout;
}

describeWithCluster('e2e: ward on a real Kubernetes cluster', { timeout: 30 * 60_000 }, () => {
  let cluster: Cluster;
  let dir: string;
  const k = (args: readonly string[], stdin?: string) => cluster.kubectl(args, stdin);
  const getJson = async <T>(args: readonly string[]): Promise<T> => JSON.parse(await k([...args, '-o', 'json'])) as T;
  type PodList = { items: PodJson[] };
  type PodJson = {
    metadata: { name: string; labels?: Record<string, string>; annotations?: Record<string, string>; deletionTimestamp?: string };
    spec: { containers: { name: string }[]; initContainers?: { name: string }[]; volumes?: { name: string; projected?: unknown }[] };
    status: { podIP?: string; phase?: string; conditions?: { type: string; status: string }[] };
  };
  const isReady = (p: PodJson) => p.status.conditions?.some((c) => c.type === 'Ready' && c.status === 'True') === true;

  /** The last `n` lines a workload's container logged. */
  const logs = async (ns: string, target: string, container: string, n = 5) =>
    (await k(['logs', '-n', ns, target, '-c', container, `--tail=${n}`])).trim().split('\n');
  /** Waits until the workload's last vote got `status` (the vote-bot votes once a second). */
  const voteOutcome = (ns: string, status: number) =>
    waitFor(
      `${ns}/vote-bot's votes to get ${status}`,
      async () => {
        const last = (await logs(ns, 'deploy/vote-bot', 'vote-bot', 3)).filter((l) => l.startsWith('vote '));
        return last.length >= 2 && last.slice(-2).every((l) => l.includes(`-> ${status}`)) ? last : undefined;
      },
      WAIT_MS,
      500,
    );
  const leaseHolder = async () =>
    (await getJson<{ spec: { holderIdentity?: string } }>(['get', 'lease', 'ward-controller', '-n', 'linkerd'])).spec.holderIdentity ?? '';

  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'ward-k8s-'));
    buildImage([]);
    buildImage(['--example']);
    cluster = await startCluster(join(dir, 'cluster'));
    await cluster.importImage(join(ROOT, 'dist', 'image', 'ward.tar'));
    await cluster.importImage(join(ROOT, 'dist', 'image', 'emojivoto.tar'));

    const install = wardSync(['install', '--image', WARD_IMAGE, '--image-pull-policy', 'Never']);
    assert.equal(install.status, 0, install.stderr);
    await k(['apply', '-f', '-'], install.stdout);
    await k(['rollout', 'status', 'deploy/ward-controller', '-n', 'linkerd', `--timeout=${WAIT_MS / 1000}s`]);
    // The controller pods made the bridge; the Service network is reached through it.
    const route = await cluster.inNode(['ip', 'route', 'replace', cluster.env.SERVICE_CIDR as string, 'dev', 'cni0']);
    assert.equal(route.code, 0, route.stderr);

    const app = exampleDocs(join(EXAMPLE, 'app'));
    await k(['apply', '-f', '-'], toStream(app.filter((o) => o.kind === 'Namespace')));
    await k(['apply', '-f', '-'], toStream(app.filter((o) => o.kind === 'Service')));
    let workloads = toStream(app.filter((o) => o.kind !== 'Namespace' && o.kind !== 'Service'));
    for (const svc of app.filter((o) => o.kind === 'Service')) {
      const ip = (await k(['get', 'svc', svc.metadata.name, '-n', svc.metadata.namespace as string, '-o', 'jsonpath={.spec.clusterIP}'])).trim();
      workloads = workloads.replaceAll(`${svc.metadata.name}.${svc.metadata.namespace}:`, `${ip}:`);
    }
    await k(['apply', '-f', '-'], toStream(exampleDocs(join(EXAMPLE, 'policy'))));
    await k(['apply', '-f', '-'], workloads);
    for (const ns of ['emojivoto', 'bad']) await k(['wait', '--for=condition=Available', 'deploy', '--all', '-n', ns, `--timeout=${WAIT_MS / 1000}s`]);
  });

  after(async () => {
    await cluster?.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  it("refuses an invalid Server with ward check's message, through the validating webhook", async () => {
    const server =
      'apiVersion: policy.linkerd.io/v1beta3\nkind: Server\nmetadata: {name: broken, namespace: emojivoto}\nspec:\n  podSelector: {matchLabels: {app: web-svc}}\n  port: 0\n';
    const applied = await cluster.kubectlResult(['apply', '-f', '-'], server);
    assert.notEqual(applied.code, 0);
    assert.match(
      applied.stderr,
      /admission webhook "[^"]+" denied the request: error POL022 spec\.port 0 is out of range \[Server emojivoto\/broken\] at spec\.port/,
    );
    const file = join(dir, 'broken.yaml');
    writeFileSync(file, server);
    const check = wardSync(['check', '-f', file]);
    assert.match(check.stdout + check.stderr, /error POL022 spec\.port 0 is out of range \[Server emojivoto\/broken\]/);
  });

  it('injects every pod of the meshed namespaces, which become Ready through the kubelet under a deny default', async () => {
    for (const ns of ['emojivoto', 'bad']) {
      const pods = (await getJson<PodList>(['get', 'pods', '-n', ns])).items.filter((p) => p.metadata.deletionTimestamp === undefined);
      assert.ok(pods.length > 0, ns);
      for (const p of pods) {
        const name = `${ns}/${p.metadata.name}`;
        assert.ok(
          p.spec.containers.some((c) => c.name === 'linkerd-proxy'),
          `${name}: no proxy container`,
        );
        assert.ok(
          p.spec.initContainers?.some((c) => c.name === 'linkerd-init'),
          `${name}: no proxy-init`,
        );
        assert.ok(
          p.spec.volumes?.some((v) => v.name === 'linkerd-identity-token' && v.projected !== undefined),
          `${name}: no projected token`,
        );
        assert.equal(p.metadata.labels?.['linkerd.io/control-plane-ns'], 'linkerd', name);
        assert.ok(isReady(p), `${name} is not Ready`);
        const init = await k(['logs', '-n', ns, p.metadata.name, '-c', 'linkerd-init']);
        assert.match(init, /PROXY_INIT_REDIRECT/, `${name}: proxy-init wrote no redirect`);
      }
    }
    const emojivoto = await getJson<{ metadata: { annotations: Record<string, string> } }>(['get', 'ns', 'emojivoto']);
    assert.equal(emojivoto.metadata.annotations['config.linkerd.io/default-inbound-policy'], 'deny');
  });

  it("gives each proxy its ServiceAccount's identity, through TokenReview", async () => {
    for (const [ns, sa] of [
      ['emojivoto', 'web'],
      ['emojivoto', 'emoji'],
      ['emojivoto', 'voting'],
      ['emojivoto', 'vote-bot'],
      ['bad', 'vote-bot'],
    ] as const) {
      const text = await k(['logs', '-n', ns, `deploy/${sa === 'vote-bot' ? 'vote-bot' : sa}`, '-c', 'linkerd-proxy']);
      assert.match(text, new RegExp(`ward proxy ready: identity ${sa}\\.${ns}\\.serviceaccount\\.identity\\.linkerd\\.cluster\\.local`), `${ns}/${sa}`);
    }
  });

  it('enforces policy over mTLS: emojivoto/vote-bot through the web Service is allowed, bad/vote-bot denied', async () => {
    await voteOutcome('emojivoto', 200);
    const denied = await voteOutcome('bad', 403);
    assert.match(denied.at(-1) as string, /l5d-proxy-error: unauthorized/);
    const web = await logs('emojivoto', 'deploy/web', 'linkerd-proxy', 200);
    assert.ok(
      web.some((l) => l.includes('"tls":"mtls vote-bot.bad.serviceaccount.identity.linkerd.cluster.local"')),
      'the denied request arrived over mTLS with the caller identity',
    );
    // Pod to pod, by address: the emojivoto vote-bot's application dials the web pod directly.
    const webPod = (await getJson<PodList>(['get', 'pods', '-n', 'emojivoto', '-l', 'app=web-svc'])).items.find(isReady);
    assert.ok(webPod?.status.podIP !== undefined);
    const script = `require('http').get('http://${webPod.status.podIP}:8080/api/list', r => { console.log('STATUS', r.statusCode); r.resume(); }).on('error', e => console.log('ERR', e.message))`;
    const direct = await k(['exec', '-n', 'emojivoto', 'deploy/vote-bot', '-c', 'vote-bot', '--', 'node', '-e', script]);
    assert.match(direct, /STATUS 200/);
    const fromBad = await k(['exec', '-n', 'bad', 'deploy/vote-bot', '-c', 'vote-bot', '--', 'node', '-e', script]);
    assert.match(fromBad, /STATUS 403/);
  });

  it("answers a meshed pod on the controller Service's admin port with metrics, and refuses it the API", async () => {
    // From a meshed pod, through its proxy and the Service: the controller runs without a proxy,
    // so the client's proxy must not dial it with mesh TLS; kube-proxy carries the connection to
    // a replica from a pod address, never loopback.
    const ip = (await k(['get', 'svc', 'ward-controller', '-n', 'linkerd', '-o', 'jsonpath={.spec.clusterIP}'])).trim();
    const script = `for (const p of ['/metrics', '/api/v1/pods']) require('http').get('http://${ip}:9990' + p, r => { let b = ''; r.on('data', c => b += c); r.on('end', () => console.log('STATUS', p, r.statusCode, p === '/metrics' ? '' : b)); }).on('error', e => console.log('ERR', p, e.message))`;
    const out = await k(['exec', '-n', 'bad', 'deploy/vote-bot', '-c', 'vote-bot', '--', 'node', '-e', script]);
    assert.match(out, /STATUS \/metrics 200/);
    assert.match(out, /STATUS \/api\/v1\/pods 403 [\s\S]*"FORBIDDEN"[\s\S]*kubectl port-forward -n linkerd deploy\/ward-controller 9990:9990/);
  });

  it('shows no plaintext between meshed pods on the node bridge', async () => {
    const webPod = (await getJson<PodList>(['get', 'pods', '-n', 'emojivoto', '-l', 'app=web-svc'])).items.find(isReady);
    const webIp = webPod?.status.podIP as string;
    // A plaintext request from the host during the capture: proof that the tap sees plaintext.
    const tap = cluster.inNode(['timeout', '8', 'tcpdump', '-i', 'cni0', '-nn', '-A', '-s', '0', '-l', 'tcp and not host 10.88.0.1'], { timeoutMs: 30_000 });
    await new Promise((r) => setTimeout(r, 2000));
    await run('curl', ['-sS', '-o', '/dev/null', '--max-time', '3', `http://${webIp}:8080/plaintext-marker`]);
    const out = (await tap).stdout;
    const packets = out.split(/\n(?=\d\d:\d\d:\d\d\.\d+ IP )/);
    const between = (p: string, re: RegExp) => re.test(p.split('\n')[0] as string);
    const podToPod = packets.filter((p) => between(p, /^\S+ IP 10\.88\.\d+\.\d+\.\d+ > 10\.88\.\d+\.\d+\.\d+:/));
    const fromHost = packets.filter((p) => between(p, /^\S+ IP 10\.87\.0\.1\.\d+ > /));
    assert.ok(podToPod.length > 10, `the tap saw ${podToPod.length} packets between pods`);
    assert.ok(
      fromHost.some((p) => p.includes('GET /plaintext-marker HTTP/1.1')),
      "the tap did not see the host's plaintext request",
    );
    const plain = podToPod.filter((p) => /HTTP\/1\.1|\/api\/|application\/grpc|emojivoto\.v1/.test(p));
    assert.deepEqual(plain, [], 'plaintext between meshed pods');
  });

  it('applies a policy change made with kubectl to the proxies, and revokes it on delete', async () => {
    await k(['apply', '-f', '-'], ALLOW_BAD);
    await voteOutcome('bad', 200);
    await k(['delete', '-f', '-'], ALLOW_BAD);
    await voteOutcome('bad', 403);
  });

  it('writes status conditions on policies and routes', async () => {
    type Status = {
      status?: { conditions?: { type: string; status: string }[]; selectedPods?: number; parents?: { conditions?: { type: string; status: string }[] }[] };
    };
    const accepted = (s: Status) => s.status?.conditions?.some((c) => c.type === 'Accepted' && c.status === 'True') === true;
    await waitFor(
      'Server web-http Accepted',
      async () => (accepted(await getJson<Status>(['get', 'server', 'web-http', '-n', 'emojivoto'])) ? true : undefined),
      WAIT_MS,
      500,
    );
    const server = await getJson<Status>(['get', 'server', 'web-http', '-n', 'emojivoto']);
    assert.equal(server.status?.selectedPods, 1);
    const policy = await getJson<Status>(['get', 'authorizationpolicy', 'emoji-from-web', '-n', 'emojivoto']);
    assert.ok(accepted(policy), JSON.stringify(policy.status));
    const route = await getJson<Status>(['get', 'httproutes.policy.linkerd.io', 'web-app', '-n', 'emojivoto']);
    assert.ok(
      route.status?.parents?.[0]?.conditions?.some((c) => c.type === 'Accepted' && c.status === 'True'),
      JSON.stringify(route.status),
    );
    const wide = await k(['get', 'server', '-n', 'emojivoto', '-o', 'wide']);
    assert.match(wide, /web-http\s+http\s+HTTP\/1\s+.*True\s+1\s+1\s+True/);
  });

  it('moves status writing to the other replica when the leader pod is deleted; proxies keep their policy', async () => {
    const leader = await leaseHolder();
    assert.match(leader, /^ward-controller-/);
    await k(['delete', 'pod', leader, '-n', 'linkerd', '--wait=false']);
    const next = await waitFor(
      'another replica to hold the Lease',
      async () => {
        const h = await leaseHolder();
        return h !== '' && h !== leader ? h : undefined;
      },
      WAIT_MS,
      250,
    );
    assert.notEqual(next, leader);
    // The new leader writes the status of something new.
    await k(
      ['apply', '-f', '-'],
      'apiVersion: policy.linkerd.io/v1beta3\nkind: Server\nmetadata: {name: voting-prom, namespace: emojivoto}\nspec:\n  podSelector: {matchLabels: {app: voting-svc}}\n  port: prom\n  proxyProtocol: HTTP/1\n',
    );
    await waitFor(
      'the new Server to get status from the new leader',
      async () => {
        const s = await getJson<{ status?: { conditions?: { type: string; status: string }[] } }>(['get', 'server', 'voting-prom', '-n', 'emojivoto']);
        return s.status?.conditions?.some((c) => c.type === 'Accepted') === true ? true : undefined;
      },
      WAIT_MS,
      500,
    );
    await k(['delete', 'server', 'voting-prom', '-n', 'emojivoto']);
    await voteOutcome('emojivoto', 200);
    await voteOutcome('bad', 403);
  });

  it('changes no decision across an API server restart, and the controllers resync', async () => {
    const stoppedAt = new Date();
    await cluster.stopApiserver();
    await new Promise((r) => setTimeout(r, 5000));
    await cluster.startApiserver();
    const restartedAt = new Date();
    // What the bots got while the API server was away (their logs are the kubelet's, read now).
    for (const [ns, status] of [
      ['emojivoto', 200],
      ['bad', 403],
    ] as const) {
      const text = await k(['logs', '-n', ns, 'deploy/vote-bot', '-c', 'vote-bot', '--timestamps', `--since-time=${stoppedAt.toISOString()}`]);
      const during = text
        .split('\n')
        .filter((l) => l.includes(' vote '))
        .filter((l) => new Date(l.slice(0, l.indexOf(' '))) <= restartedAt);
      assert.ok(during.length >= 3, `${ns}: ${during.length} votes while the API server was down`);
      for (const l of during) assert.ok(l.includes(`-> ${status}`), `${ns}: ${l}`);
    }
    // Resynced: a change made after the restart reaches the proxies, and its deletion too.
    await k(['apply', '-f', '-'], ALLOW_BAD);
    await voteOutcome('bad', 200);
    await k(['delete', '-f', '-'], ALLOW_BAD);
    await voteOutcome('bad', 403);
    await voteOutcome('emojivoto', 200);
  });

  it('picks up a changed namespace default only when kubectl rollout restart makes new pods', async () => {
    const votingPod = async () =>
      (await getJson<PodList>(['get', 'pods', '-n', 'emojivoto', '-l', 'app=voting-svc'])).items.filter((p) => p.metadata.deletionTimestamp === undefined);
    const metricsFrom = async (ip: string) =>
      (await run('curl', ['-sS', '-o', '/dev/null', '-w', '%{http_code}', '--max-time', '3', `http://${ip}:8801/metrics`])).stdout.trim();
    const [before] = await votingPod();
    assert.ok(before?.status.podIP !== undefined);
    // Under the namespace's deny default, the unauthenticated host is refused on the port no Server covers.
    assert.notEqual(await metricsFrom(before.status.podIP), '200');
    await k(['annotate', 'ns', 'emojivoto', 'config.linkerd.io/default-inbound-policy=all-unauthenticated', '--overwrite']);
    await new Promise((r) => setTimeout(r, 3000));
    // A running pod keeps what it was created with.
    assert.notEqual(await metricsFrom(before.status.podIP), '200');
    await k(['rollout', 'restart', 'deploy/voting', '-n', 'emojivoto']);
    await k(['rollout', 'status', 'deploy/voting', '-n', 'emojivoto', `--timeout=${WAIT_MS / 1000}s`]);
    const after = await waitFor(
      'the new voting pod',
      async () => (await votingPod()).find((p) => p.metadata.name !== before.metadata.name && isReady(p)),
      WAIT_MS,
      500,
    );
    assert.equal(after.metadata.annotations?.['config.linkerd.io/default-inbound-policy'], 'all-unauthenticated');
    await waitFor(
      'the new pod to admit the host on its metrics port',
      async () => ((await metricsFrom(after.status.podIP as string)) === '200' ? true : undefined),
      WAIT_MS,
      500,
    );
  });
});
