/**
 * The dashboard on 500 workloads: a generated fixture (50 namespaces of 10 Deployments, each
 * admitting the two workloads before it in its namespace and the same-numbered workload of the
 * next namespace) read by a controller over a directory. It measures and prints how long
 * /api/v1/graph takes and how long the dashboard takes from navigation to a rendered graph (and
 * to the workloads table); no bound is asserted on either. What is asserted is that the graph
 * says what the fixture's policy says.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import type { Browser } from 'playwright-core';
import { controllerPorts, initWorkdir, spawnController, type WardProcess } from '../e2e/helpers.js';
import { browserSkipReason, launchBrowser, screenshotDir, watchPage } from './browser.js';

const ROOT = new URL('../../', import.meta.url).pathname;
const NAMESPACES = 50;
const PER_NAMESPACE = 10;
const TD = 'serviceaccount.identity.linkerd.cluster.local';

const ns = (i: number) => `team-${String(i).padStart(2, '0')}`;
const wl = (j: number) => `svc-${j}`;

/** The callers the fixture's policy admits on workload `j` of namespace `i`, as graph node ids. */
function callersOf(i: number, j: number): string[] {
  const out: string[] = [];
  for (const k of [j - 1, j - 2]) if (k >= 0) out.push(`${ns(i)}/Deployment/${wl(k)}`);
  out.push(`${ns((i + 1) % NAMESPACES)}/Deployment/${wl(j)}`);
  return out;
}

/** One namespace of the fixture: ServiceAccounts, Deployments, Servers and their authorizations. */
function namespaceManifests(i: number): string {
  const docs: string[] = [
    `apiVersion: v1
kind: Namespace
metadata:
  name: ${ns(i)}
  annotations: {linkerd.io/inject: enabled, config.linkerd.io/default-inbound-policy: ${i % 2 === 0 ? 'deny' : 'cluster-authenticated'}}`,
  ];
  for (let j = 0; j < PER_NAMESPACE; j++) {
    const name = wl(j);
    const identities = callersOf(i, j).map((id) => {
      const [n, , w] = id.split('/');
      return `"${w}.${n}.${TD}"`;
    });
    docs.push(
      `apiVersion: v1
kind: ServiceAccount
metadata: {name: ${name}, namespace: ${ns(i)}}`,
      `apiVersion: apps/v1
kind: Deployment
metadata: {name: ${name}, namespace: ${ns(i)}}
spec:
  replicas: 1
  selector: {matchLabels: {app: ${name}}}
  template:
    metadata: {labels: {app: ${name}}}
    spec:
      serviceAccountName: ${name}
      containers:
      - name: app
        image: example/app
        ports: [{name: http, containerPort: 8080}]`,
      `apiVersion: policy.linkerd.io/v1beta3
kind: Server
metadata: {name: ${name}-http, namespace: ${ns(i)}}
spec:
  podSelector: {matchLabels: {app: ${name}}}
  port: http
  proxyProtocol: HTTP/1`,
      `apiVersion: policy.linkerd.io/v1alpha1
kind: MeshTLSAuthentication
metadata: {name: ${name}-callers, namespace: ${ns(i)}}
spec:
  identities: [${identities.join(', ')}]`,
      `apiVersion: policy.linkerd.io/v1alpha1
kind: AuthorizationPolicy
metadata: {name: ${name}-from-callers, namespace: ${ns(i)}}
spec:
  targetRef: {group: policy.linkerd.io, kind: Server, name: ${name}-http}
  requiredAuthenticationRefs: [{group: policy.linkerd.io, kind: MeshTLSAuthentication, name: ${name}-callers}]`,
    );
  }
  return `${docs.join('\n---\n')}\n`;
}

interface GraphJson {
  computeMs: number;
  nodes: { id: string }[];
  targets: { node: string; port: number; proxyPort: boolean; routes: { probe: boolean }[] }[];
  edges: { src: string; dst: string; target: number; route: number; decision: string }[];
  stats: { sources: number; groups: number; evaluations: number };
}

const skip = browserSkipReason();

let work: string;
let controller: WardProcess | undefined;
let base: string;
let browser: Browser | undefined;

describe('dashboard on 500 workloads', { timeout: 300_000 }, () => {
  before(async () => {
    const built = spawnSync(process.execPath, [join(ROOT, 'scripts', 'build.mjs'), '--if-stale'], { encoding: 'utf8', timeout: 240_000 });
    assert.equal(built.status, 0, built.stderr);
    work = mkdtempSync(join(tmpdir(), 'ward-dashboard-scale-'));
    const { idDir, manifests } = initWorkdir(work);
    for (let i = 0; i < NAMESPACES; i++) writeFileSync(join(manifests, `${ns(i)}.yaml`), namespaceManifests(i));
    controller = spawnController(manifests, idDir, '127.0.0.1');
    const ports = await controllerPorts(controller, 120_000);
    base = `http://127.0.0.1:${ports.admin}`;
  });

  after(async () => {
    await browser?.close();
    await controller?.stop(5000);
    if (work !== undefined) rmSync(work, { recursive: true, force: true });
  });

  it('the graph API says what the generated policy says', async () => {
    const t0 = performance.now();
    const res = await fetch(`${base}/api/v1/graph?allNamespaces=true`, { signal: AbortSignal.timeout(120_000) });
    const body = await res.text();
    const wallMs = performance.now() - t0;
    assert.equal(res.status, 200, body.slice(0, 500));
    const g = JSON.parse(body) as GraphJson;
    console.log(
      `# /api/v1/graph on ${NAMESPACES * PER_NAMESPACE} workloads: computed in ${g.computeMs} ms (${wallMs.toFixed(0)} ms with the request), ${(body.length / 1024).toFixed(0)} KiB, ${g.stats.sources} sources in ${g.stats.groups} groups, ${g.stats.evaluations} engine calls`,
    );
    const workloads = g.nodes.filter((n) => !n.id.startsWith('/'));
    assert.equal(workloads.length, NAMESPACES * PER_NAMESPACE);
    const app = g.edges.filter((e) => {
      const t = g.targets[e.target];
      return t !== undefined && !t.proxyPort && t.routes[e.route]?.probe !== true && !e.src.startsWith('/');
    });
    for (const [i, j] of [
      [0, 0],
      [7, 3],
      [49, 9],
    ] as const) {
      const dst = `${ns(i)}/Deployment/${wl(j)}`;
      const srcs = [...new Set(app.filter((e) => e.dst === dst).map((e) => e.src))].sort();
      assert.deepEqual(srcs, callersOf(i, j).sort(), dst);
    }
    const expected = NAMESPACES * PER_NAMESPACE * 3 - NAMESPACES * 3;
    assert.equal(new Set(app.map((e) => `${e.src}->${e.dst}`)).size, expected);
    const again = await fetch(`${base}/api/v1/graph?allNamespaces=true&since=${(JSON.parse(body) as { version: number }).version}`);
    assert.deepEqual(await again.json(), { version: (JSON.parse(body) as { version: number }).version, unchanged: true });
  });

  it('the dashboard renders the graph and the workloads (load times printed)', { skip: skip ?? false }, async () => {
    browser = await launchBrowser();
    const page = await browser.newPage({ viewport: { width: 1600, height: 1000 } });
    const problems = watchPage(page);
    const t0 = Date.now();
    await page.goto(`${base}/dashboard/#/graph`);
    await page.waitForSelector('svg[data-graph-ready="true"][data-level="namespaces"]', { timeout: 240_000 });
    const graphMs = Date.now() - t0;
    const layoutMs = Number(await page.evaluate('window.wardLayoutMs ?? -1'));
    // Every team-(i+1) workload calls its namesake in team-i: a ring of namespaces.
    assert.equal(await page.$$eval('[data-node^="ns:"]', (ns) => ns.length), NAMESPACES);
    const ring = await page.$$eval('[data-edge]', (es) => es.map((e) => e.getAttribute('data-edge')).sort());
    assert.deepEqual(ring, Array.from({ length: NAMESPACES }, (_, i) => `ns:${ns((i + 1) % NAMESPACES)}->ns:${ns(i)}`).sort());
    console.log(`# dashboard on 500 workloads: navigation to a rendered graph (by namespace) ${graphMs} ms (elkjs layout ${layoutMs.toFixed(0)} ms)`);
    await page.screenshot({ path: join(screenshotDir(), 'graph-500-namespaces.png') });

    // Drill into one namespace: its workloads, their callers and callees.
    const t2 = Date.now();
    await page.focus(`[data-node="ns:${ns(7)}"]`);
    await page.keyboard.press('Enter');
    await page.waitForSelector('svg[data-graph-ready="true"][data-level="workloads"]', { timeout: 120_000 });
    console.log(`# dashboard on 500 workloads: one namespace's workloads drawn ${Date.now() - t2} ms after choosing it`);
    assert.equal(await page.$$eval('[data-node]', (ns) => ns.length), 3 * PER_NAMESPACE);
    const drawnEdges = await page.$$eval('[data-edge]', (es) => es.map((e) => e.getAttribute('data-edge')));
    // Inside: svc-j is called by svc-(j-1) and svc-(j-2); across: ten in from team-08, ten out to team-06.
    assert.equal(drawnEdges.length, PER_NAMESPACE * 2 - 3 + 2 * PER_NAMESPACE, drawnEdges.join('\n'));
    const into = await page.$$eval(`[data-edge][data-dst="${ns(7)}/Deployment/${wl(5)}"]`, (es) => es.map((e) => e.getAttribute('data-src')).sort());
    assert.deepEqual(into, callersOf(7, 5).sort());
    // Thirty workloads in a chain: drawn at a readable size (top to bottom, scrolling), not shrunk
    // to fit the panel's width.
    const drawnScale = Number(await page.getAttribute('svg[data-graph-ready]', 'data-scale'));
    assert.ok(drawnScale >= 0.75, `one namespace's graph drawn at ${drawnScale}`);
    await page.screenshot({ path: join(screenshotDir(), 'graph-500-namespace.png') });

    // Every workload at once, on request.
    await page.click('[data-all-namespaces]');
    await page.waitForSelector('svg[data-graph-ready="true"][data-level="namespaces"]', { timeout: 120_000 });
    const t3 = Date.now();
    await page.check('[data-toggle="expand"]');
    await page.waitForSelector('svg[data-graph-ready="true"][data-level="workloads"]', { timeout: 240_000 });
    console.log(`# dashboard on 500 workloads: all 500 workloads laid out ${Date.now() - t3} ms after asking`);
    assert.equal(await page.$$eval('[data-edge]', (es) => es.length), NAMESPACES * PER_NAMESPACE * 3 - NAMESPACES * 3);

    const t1 = Date.now();
    await page.goto('about:blank');
    await page.goto(`${base}/dashboard/#/workloads`);
    await page.waitForSelector(`[data-workload="${ns(49)}/Deployment/${wl(9)}"]`, { timeout: 120_000 });
    console.log(`# dashboard on 500 workloads: navigation to the workloads table ${Date.now() - t1} ms`);
    assert.equal(await page.$$eval('[data-workload]', (rs) => rs.length), NAMESPACES * PER_NAMESPACE);
    await page.screenshot({ path: join(screenshotDir(), 'workloads-500.png') });
    assert.deepEqual(problems, []);
  });
});
