/**
 * `ward inject` in-process: the default annotation, `--manual`, documents it does not touch,
 * `-o json`, and bad input.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { parse, parseAllDocuments } from 'yaml';
import { initIdentity } from '../../identity/index.js';
import { injectKubePod } from '../../manifest/index.js';
import { bufferIo, EXIT } from '../io.js';
import { main } from '../main.js';

const SERVICE = `# the web service
apiVersion: v1
kind: Service
metadata:
  name: web   # kept as written
  namespace: app
spec:
  ports: [{port: 80, targetPort: 8080}]
`;

const DEPLOYMENT = `apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  namespace: app
spec:
  replicas: 2
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}   # pod labels
    spec:
      containers:
      - name: main
        image: web:1
        ports: [{containerPort: 8080}]
`;

const OPTED_OUT = `apiVersion: apps/v1
kind: StatefulSet
metadata: {name: db, namespace: app}
spec:
  selector: {matchLabels: {app: db}}
  template:
    metadata:
      labels: {app: db}
      annotations: {linkerd.io/inject: disabled}
    spec:
      containers: [{name: db, image: db:1}]
`;

let dir: string;
let anchors: string;

before(() => {
  dir = mkdtempSync(join(tmpdir(), 'ward-inject-cli-'));
  anchors = join(dir, 'ca.crt');
  writeFileSync(anchors, '-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n');
});
after(() => rmSync(dir, { recursive: true, force: true }));

async function run(args: string[], stdin = '') {
  const io = bufferIo(stdin);
  const status = await main(args, io);
  return { status, stdout: io.stdout, stderr: io.stderr };
}

type Obj = Record<string, unknown>;
const at = (v: unknown, ...path: (string | number)[]): unknown => path.reduce<unknown>((o, k) => (o as Record<string | number, unknown>)?.[k], v);

describe('ward inject', () => {
  it('adds linkerd.io/inject: enabled to pod templates and keeps other documents and comments as written', async () => {
    const r = await run(['inject', '-'], `${SERVICE}---\n${DEPLOYMENT}---\n${OPTED_OUT}`);
    assert.equal(r.status, 0, r.stderr);
    const docs = parseAllDocuments(r.stdout).map((d) => d.toJS() as Obj);
    assert.equal(docs.length, 3);
    assert.deepEqual(at(docs[1], 'spec', 'template', 'metadata'), { labels: { app: 'web' }, annotations: { 'linkerd.io/inject': 'enabled' } });
    assert.deepEqual(at(docs[1], 'spec', 'template', 'spec'), at(parse(DEPLOYMENT), 'spec', 'template', 'spec'));
    // The Service, byte for byte; comments of the Deployment kept.
    assert.ok(r.stdout.startsWith(SERVICE), r.stdout);
    assert.match(r.stdout, /labels: \{ app: web \} # pod labels|labels: \{app: web\}\s+# pod labels/);
    // A template that opts out is left alone and reported.
    assert.deepEqual(at(docs[2], 'spec', 'template', 'metadata', 'annotations'), { 'linkerd.io/inject': 'disabled' });
    assert.match(r.stderr, /^deployment "web" annotated for injection$/m);
    assert.match(r.stderr, /^skipped statefulset "db": pod has the annotation "linkerd.io\/inject: disabled"$/m);
  });

  it('--manual writes the proxy, the init container and the token volume into the template (-o json)', async () => {
    const file = join(dir, 'deploy.yaml');
    writeFileSync(file, DEPLOYMENT);
    const r = await run(['inject', '--manual', '--trust-anchors', anchors, '--controller-host', '10.0.0.57', '-o', 'json', file]);
    assert.equal(r.status, 0, r.stderr);
    const out = JSON.parse(r.stdout) as Obj;
    const spec = at(out, 'spec', 'template', 'spec') as Obj;
    assert.deepEqual(
      (spec.containers as Obj[]).map((c) => c.name),
      ['main', 'linkerd-proxy'],
    );
    assert.deepEqual(
      (spec.initContainers as Obj[]).map((c) => c.name),
      ['linkerd-init'],
    );
    assert.ok((spec.volumes as Obj[]).some((v) => v.name === 'linkerd-identity-token'));
    const proxy = (spec.containers as Obj[])[1] as Obj;
    assert.match(String(proxy.image), /^localhost\/ward:\d+\.\d+\.\d+/);
    const args = proxy.args as string[];
    assert.equal(args[args.indexOf('--policy-addr') + 1], '10.0.0.57:8090');
    assert.equal(at(out, 'spec', 'template', 'metadata', 'labels', 'linkerd.io/control-plane-ns'), 'linkerd');
    assert.equal(at(out, 'spec', 'template', 'metadata', 'annotations', 'linkerd.io/inject'), undefined, 'no annotation with --manual');
    // The workload itself is untouched around its template.
    assert.equal(at(out, 'spec', 'replicas'), 2);
    assert.match(r.stderr, /^deployment "web" injected$/m);
  });

  it('--manual injects bare Pods, CronJob templates and the items of a List; the controller address defaults to the Service name', async () => {
    const list = JSON.stringify({
      apiVersion: 'v1',
      kind: 'List',
      items: [
        { apiVersion: 'v1', kind: 'Pod', metadata: { name: 'p', namespace: 'app' }, spec: { containers: [{ name: 'main' }] } },
        {
          apiVersion: 'batch/v1',
          kind: 'CronJob',
          metadata: { name: 'c', namespace: 'app' },
          spec: { schedule: '* * * * *', jobTemplate: { spec: { template: { spec: { containers: [{ name: 'job' }], restartPolicy: 'Never' } } } } },
        },
        { apiVersion: 'v1', kind: 'ConfigMap', metadata: { name: 'cm' }, data: { a: 'b' } },
      ],
    });
    const r = await run(['inject', '--manual', '--trust-anchors', anchors, '-o', 'json', '-'], list);
    assert.equal(r.status, 0, r.stderr);
    const out = JSON.parse(r.stdout) as Obj;
    const items = out.items as Obj[];
    const names = (v: unknown) => (v as Obj[]).map((c) => c.name);
    assert.deepEqual(names(at(items[0], 'spec', 'containers')), ['main', 'linkerd-proxy']);
    assert.deepEqual(names(at(items[1], 'spec', 'jobTemplate', 'spec', 'template', 'spec', 'containers')), ['job', 'linkerd-proxy']);
    assert.deepEqual(items[2], { apiVersion: 'v1', kind: 'ConfigMap', metadata: { name: 'cm' }, data: { a: 'b' } });
    const args = at(items[0], 'spec', 'containers', 1, 'args') as string[];
    assert.equal(args[args.indexOf('--identity-addr') + 1], 'ward-controller.linkerd.svc.cluster.local:8080');
  });

  it('exits 2 with a message for --manual without trust anchors, unreadable paths, YAML errors and bad formats', async () => {
    const cases: [string[], string, RegExp][] = [
      [['inject', '--manual', '-'], DEPLOYMENT, /--manual needs --trust-anchors FILE/],
      [['inject', join(dir, 'missing.yaml')], '', /missing\.yaml: cannot read/],
      [['inject', '-'], 'a: [1,\n', /<stdin>: not YAML/],
      [['inject', '-o', 'wide', '-'], DEPLOYMENT, /the output format must be yaml or json/],
      [['inject'], '', /no manifests/],
    ];
    for (const [args, stdin, message] of cases) {
      const r = await run(args, stdin);
      assert.equal(r.status, 2, `${args.join(' ')}: ${r.stderr}`);
      assert.match(r.stderr, message);
    }
  });

  it("the injected proxy's arguments, once Kubernetes expands them, are flags ward proxy accepts", async () => {
    const init = await initIdentity({ outDir: join(dir, 'id') });
    assert.ok(init.ok);
    const pem = readFileSync(join(dir, 'id', 'ca.crt'), 'utf8');
    const token = join(dir, 'token');
    writeFileSync(token, 'not-a-real-token\n');
    const pod = {
      apiVersion: 'v1',
      kind: 'Pod',
      metadata: { name: 'web-0', annotations: { 'linkerd.io/inject': 'enabled' } },
      spec: { serviceAccountName: 'web', containers: [{ name: 'main', ports: [{ containerPort: 8080 }] }] },
    };
    const r = injectKubePod(
      pod,
      undefined,
      { controlPlaneNamespace: 'linkerd', image: 'x', controllerHost: '127.0.0.1', trustAnchorsPem: pem },
      { namespace: 'app' },
    );
    const proxy = ((r.pod.spec as Obj).containers as Obj[]).find((c) => c.name === 'linkerd-proxy') as Obj;
    // The image's entrypoint runs ward: the arguments are its subcommand and flags.
    assert.equal(proxy.command, undefined);
    const vars: Record<string, string> = { _pod_ns: 'app', _pod_name: 'web-0', _pod_sa: 'web', _pod_ip: '127.0.0.1' };
    const args = (proxy.args as string[])
      .map((a) => a.replace(/\$\((\w+)\)/g, (_, v: string) => vars[v] ?? `$(${v})`))
      .map((a) => (a === '/var/run/secrets/tokens/linkerd-identity-token' ? token : a));
    const env = (proxy.env as { name: string; value?: string }[]).find((e) => e.name === 'LINKERD2_PROXY_IDENTITY_TRUST_ANCHORS');
    const saved = process.env.LINKERD2_PROXY_IDENTITY_TRUST_ANCHORS;
    process.env.LINKERD2_PROXY_IDENTITY_TRUST_ANCHORS = env?.value;
    try {
      const io = bufferIo();
      // Stopped at once: past flag checking, it either starts and stops (0) or cannot run here (1: no addon, busy port).
      const status = await main([...args, '--log-level', 'silent'], io, AbortSignal.abort());
      assert.notEqual(status, EXIT.usage, io.stderr);
      assert.doesNotMatch(io.stderr, /unknown option|is not|required option/, io.stderr);
      // Where it could run: the pod's identity, its declared port at its address, transparent.
      if (status === EXIT.ok) {
        assert.match(
          io.stderr,
          /identity web\.app\.serviceaccount\.identity\.linkerd\.cluster\.local, .*inbound 8080@4143->127\.0\.0\.1:8080, outbound :4140, transparent/,
        );
      }
    } finally {
      if (saved === undefined) delete process.env.LINKERD2_PROXY_IDENTITY_TRUST_ANCHORS;
      else process.env.LINKERD2_PROXY_IDENTITY_TRUST_ANCHORS = saved;
    }
  });
});
