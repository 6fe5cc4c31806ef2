import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, it } from 'node:test';
import { waitFor } from '../../shared/testing/waits.js';
import { KubeClient, type KubeRequest, loadKubeconfig } from './client.js';
import { type KubeObject, Reflector, type ReflectorChange, type ResourceType } from './reflector.js';
import { describeWithKubeKit, type KubeKit, linkerdCrdNames, linkerdCrdsPath, startKubeKit } from './testing/kube-kit.js';

const CONFIGMAPS: ResourceType = { group: '', version: 'v1', plural: 'configmaps', kind: 'ConfigMap', namespaced: true };
const SERVERS: ResourceType = { group: 'policy.linkerd.io', version: 'v1beta3', plural: 'servers', kind: 'Server', namespaced: true };

/** The store as `key=data.v`, sorted. */
const contents = (r: Reflector) =>
  r
    .list()
    .map((o) => `${o.metadata.namespace}/${o.metadata.name}=${String((o.data as Record<string, string> | undefined)?.v ?? '')}`)
    .sort();

const describeChange = (c: ReflectorChange) => `${c.type} ${c.key}`;

const WAIT_MS = 60_000;

describeWithKubeKit('Reflector against a real API server', () => {
  let kit: KubeKit;
  let client: KubeClient;
  const reflectors: Reflector[] = [];
  const mk = (opts: Omit<ConstructorParameters<typeof Reflector>[0], 'client'> & { client?: ConstructorParameters<typeof Reflector>[0]['client'] }) => {
    const r = new Reflector({ client, backoff: { minMs: 100, maxMs: 1000 }, ...opts });
    reflectors.push(r);
    r.start();
    return r;
  };
  const configMap = (ns: string, name: string, v: string) =>
    `apiVersion: v1\nkind: ConfigMap\nmetadata: {name: ${name}, namespace: ${ns}}\ndata: {v: "${v}"}\n`;

  before(async () => {
    kit = await startKubeKit();
    client = new KubeClient(loadKubeconfig(kit.kubeconfigPath));
  });
  after(async () => {
    // Open watches delay the API server's shutdown: stop them first.
    await Promise.all(reflectors.map((r) => r.stop()));
    client?.close();
    await kit?.stop();
  });

  it('lists in pages, then sees creates, updates and deletes in order', async () => {
    await kit.kubectl(['create', 'namespace', 'r1']);
    await kit.kubectl(['apply', '-f', '-'], ['a', 'b', 'c', 'd', 'e'].map((n) => configMap('r1', n, '1')).join('---\n'));
    const requests: KubeRequest[] = [];
    const changes: string[] = [];
    const r = mk({
      type: CONFIGMAPS,
      namespace: 'r1',
      pageSize: 2,
      client: {
        request: (req) => {
          requests.push(req);
          return client.request(req);
        },
        watch: client.watch.bind(client),
      },
      onChange: (cs) => changes.push(...cs.map(describeChange)),
    });
    await r.synced;
    assert.deepEqual(contents(r), ['r1/a=1', 'r1/b=1', 'r1/c=1', 'r1/d=1', 'r1/e=1']);
    assert.deepEqual(
      requests.map((q) => q.query?.continue !== undefined),
      [false, true, true],
      'three pages of two',
    );
    assert.equal(r.get('r1/a')?.kind, 'ConfigMap');
    assert.equal(r.get('r1/a')?.apiVersion, 'v1');
    changes.length = 0;
    await kit.kubectl(['apply', '-f', '-'], configMap('r1', 'f', '1'));
    await kit.kubectl(['apply', '-f', '-'], configMap('r1', 'a', '2'));
    await kit.kubectl(['-n', 'r1', 'delete', 'configmap', 'b']);
    await waitFor(() => changes.length >= 3, 'three changes', WAIT_MS);
    assert.deepEqual(changes, ['added r1/f', 'updated r1/a', 'deleted r1/b']);
    assert.deepEqual(contents(r), ['r1/a=2', 'r1/c=1', 'r1/d=1', 'r1/e=1', 'r1/f=1']);
    assert.equal(r.stats().relists, 0);
  });

  it('treats a type not served as synced and empty, and follows its CRD being installed', async () => {
    const early: ReflectorChange[] = [];
    // Before the CRDs exist: a 404, reported, not fatal.
    const early404 = mk({ type: SERVERS, notFoundRetryMs: 300, onChange: (cs) => early.push(...cs) });
    await early404.synced;
    assert.equal(early404.stats().state === 'missing' || early404.stats().state === 'waiting', true, early404.stats().state);
    assert.equal(early404.list().length, 0);

    // Start right after the CRD is created: its resources answer 404, then (for a moment after
    // Established) 429 "storage is (re)initializing", then serve.
    await kit.kubectl(['apply', '--server-side', '-f', '-'], crdOnly('servers.policy.linkerd.io'));
    const changes: string[] = [];
    const r = mk({ type: SERVERS, notFoundRetryMs: 20, onChange: (cs) => changes.push(...cs.map(describeChange)) });
    await r.synced;
    await kit.kubectl(['create', 'namespace', 'r2']);
    await kit.kubectl(
      ['apply', '-f', '-'],
      'apiVersion: policy.linkerd.io/v1beta3\nkind: Server\nmetadata: {name: web, namespace: r2}\nspec: {podSelector: {}, port: 8080}\n',
    );
    await waitFor(() => changes.includes('added r2/web'), 'the Server', WAIT_MS);
    // The reflector started before the CRD retries slowly and finds it too.
    await waitFor(() => early404.get('r2/web') !== undefined, 'the Server through the first reflector', WAIT_MS);
    assert.deepEqual(
      early.map((c) => describeChange(c)),
      ['added r2/web'],
    );
    const s = r.stats();
    assert.equal(s.errors, s.throttled + s.notFound, `only 404s and 429s expected: ${JSON.stringify(s)}`);
    process.stdout.write(`# while the CRD became Established: ${s.notFound} answers 404, ${s.throttled} answers 429\n`);
  });

  it('keeps its store while the API server is down, then resumes (relisting on 410) and converges', async () => {
    await kit.kubectl(['create', 'namespace', 'r3']);
    await kit.kubectl(['apply', '-f', '-'], ['keep', 'gone', 'edit'].map((n) => configMap('r3', n, '1')).join('---\n'));
    const changes: string[] = [];
    const r = mk({ type: CONFIGMAPS, namespace: 'r3', onChange: (cs) => changes.push(...cs.map(describeChange)) });
    await r.synced;
    await waitFor(() => r.stats().state === 'watching', 'the watch', WAIT_MS);
    // Writes elsewhere move the global resourceVersion past the reflector's, so the restarted
    // server's fresh watch cache answers its resume with 410 "too old resource version".
    for (const i of [1, 2, 3]) await kit.kubectl(['-n', 'default', 'create', 'configmap', `noise-${i}`]);
    await kit.stopApiserver();
    await waitFor(() => r.stats().errors > 0, 'the reflector to notice the outage', WAIT_MS);
    assert.deepEqual(contents(r), ['r3/edit=1', 'r3/gone=1', 'r3/keep=1'], 'the last state serves during the outage');
    await kit.startApiserver();
    await kit.kubectl(['-n', 'r3', 'delete', 'configmap', 'gone']);
    await kit.kubectl(['apply', '-f', '-'], `${configMap('r3', 'edit', '2')}---\n${configMap('r3', 'new', '1')}`);
    await waitFor(() => contents(r).join() === 'r3/edit=2,r3/keep=1,r3/new=1', 'convergence', WAIT_MS);
    const s = r.stats();
    assert.equal(s.relists, 1, JSON.stringify(s));
    assert.ok(s.watchRestarts >= 1, JSON.stringify(s));
    assert.equal(changes.slice(3).filter((c) => c.endsWith('r3/keep')).length, 0, 'an unchanged object is not re-emitted by the relist');
    assert.deepEqual(changes.slice(3).sort(), ['added r3/new', 'deleted r3/gone', 'updated r3/edit']);
  });
});

/** One CRD document of the kit's CRD file. */
function crdOnly(name: string): string {
  const docs = readFileSync(linkerdCrdsPath(), 'utf8').split(/^---\s*$/m);
  const doc = docs.find((d) => new RegExp(`^\\s+name: ${name.replace(/\./g, '\\.')}$`, 'm').test(d) && /kind: CustomResourceDefinition/.test(d));
  if (doc === undefined) throw new Error(`no CRD ${name} in the kit (has ${linkerdCrdNames().join(', ')})`);
  return doc;
}

// Without the Retry-After, the hour-long backoff would outlast the test's timeout.
it('a 429 is waited out as the server says, then the list succeeds', { timeout: 120_000 }, async () => {
  let calls = 0;
  const server: Server = createServer((req, res) => {
    calls++;
    res.setHeader('content-type', 'application/json');
    if (req.url?.includes('watch=true')) {
      res.writeHead(200);
      res.write('');
      return;
    }
    if (calls === 1) {
      res.writeHead(429);
      res.end(
        JSON.stringify({ kind: 'Status', code: 429, reason: 'TooManyRequests', message: 'storage is (re)initializing', details: { retryAfterSeconds: 1 } }),
      );
      return;
    }
    res.writeHead(200);
    res.end(JSON.stringify({ metadata: { resourceVersion: '9' }, items: [{ metadata: { name: 'x', namespace: 'n', resourceVersion: '9' } }] }));
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const client = new KubeClient({ server: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, namespace: 'default', insecureSkipTlsVerify: false });
  const r = new Reflector({ client, type: CONFIGMAPS, backoff: { minMs: 3_600_000, maxMs: 3_600_000 } });
  try {
    r.start();
    await r.synced;
    assert.deepEqual(
      r.list().map((o: KubeObject) => o.metadata.name),
      ['x'],
    );
    assert.equal(r.stats().throttled, 1);
  } finally {
    await r.stop();
    client.close();
    server.closeAllConnections();
    await new Promise((res) => server.close(res));
  }
});

it('keeps its objects through a brief 404 of a restarting API server, and lets them go when the type stays gone', { timeout: 120_000 }, async () => {
  let served = true;
  let lists = 0;
  const server: Server = createServer((req, res) => {
    res.setHeader('content-type', 'application/json');
    if (!served) {
      res.writeHead(404);
      res.end(JSON.stringify({ kind: 'Status', code: 404, reason: 'NotFound', message: 'the server could not find the requested resource' }));
      return;
    }
    if (req.url?.includes('watch=true')) {
      // The watch ends at once: the reflector lists again only after a 404 (or 410).
      res.writeHead(200);
      res.end();
      return;
    }
    lists++;
    res.writeHead(200);
    res.end(JSON.stringify({ metadata: { resourceVersion: '3' }, items: [{ metadata: { name: 'web', namespace: 'n', resourceVersion: '3' } }] }));
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const client = new KubeClient({ server: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, namespace: 'default', insecureSkipTlsVerify: false });
  const changes: string[] = [];
  const r = new Reflector({
    client,
    type: SERVERS,
    backoff: { minMs: 20, maxMs: 50 },
    notFoundRetryMs: 50,
    notFoundGraceMs: 5000,
    onChange: (cs) => changes.push(...cs.map(describeChange)),
  });
  try {
    r.start();
    await r.synced;
    assert.deepEqual(changes, ['added n/web']);
    served = false;
    await waitFor(() => r.stats().notFound >= 3, 'a few 404s', WAIT_MS);
    // Within the grace period the object stays.
    assert.equal(r.get('n/web')?.metadata.name, 'web');
    served = true;
    await waitFor(() => r.stats().state === 'watching' && lists >= 2, 'the type served again', WAIT_MS);
    assert.deepEqual(changes, ['added n/web'], 'the relist agreed: nothing changed');
    served = false;
    await waitFor(() => changes.length === 2, 'the object dropped after the grace period', WAIT_MS);
    assert.deepEqual(changes, ['added n/web', 'deleted n/web']);
    assert.equal(r.list().length, 0);
  } finally {
    await r.stop();
    client.close();
    server.closeAllConnections();
    await new Promise((res) => server.close(res));
  }
});
