import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { type ClusterConfig, PolicyIndex, resourceKey } from '../../index/index.js';
import { decodeResource, documentFromObject, type Resource } from '../../manifest/index.js';
import { waitFor } from '../../shared/testing/waits.js';
import { KubeApiError, type KubeRequest, type KubeRequester, type KubeResponse } from '../../sources/index.js';
import { StatusWriter } from './status-writer.js';

const CONFIG: ClusterConfig = {
  defaultPolicy: 'all-unauthenticated',
  clusterNetworks: [],
  probeNetworks: [],
  trustDomain: 'cluster.local',
  controlPlaneNamespace: 'linkerd',
};

type Obj = Record<string, unknown> & { metadata: Record<string, unknown>; status?: Record<string, unknown> };

/**
 * Stores objects and applies `status` patches the way the API server does for a whole-status
 * apply: the stored status becomes the patch's status, the resourceVersion moves on. Failures
 * can be queued per request.
 */
class FakeApi implements KubeRequester {
  readonly objects = new Map<string, Obj>();
  readonly patches: KubeRequest[] = [];
  readonly failures: KubeApiError[] = [];
  #rv = 100;

  put(obj: Obj): Obj {
    const stored = structuredClone({ ...obj, metadata: { generation: 1, ...obj.metadata, resourceVersion: String(this.#rv++) } });
    this.objects.set(pathOf(stored), stored);
    return stored;
  }

  async request(req: KubeRequest): Promise<KubeResponse> {
    await new Promise((r) => setImmediate(r));
    assert.equal(req.method, 'PATCH');
    this.patches.push(req);
    const failure = this.failures.shift();
    if (failure !== undefined) throw failure;
    const path = req.path.replace(/\/status$/, '');
    const current = this.objects.get(path);
    if (current === undefined) throw new KubeApiError(404, 'NotFound', 'not found');
    const body = req.body as Obj;
    const stored = { ...current, status: body.status, metadata: { ...current.metadata, resourceVersion: String(this.#rv++) } } as Obj;
    this.objects.set(path, stored);
    return { status: 200, body: structuredClone(stored), headers: {} };
  }
}

function pathOf(o: Obj): string {
  const [group, version] = String(o.apiVersion).split('/');
  const plural = `${String(o.kind).toLowerCase()}s`.replace('authorizationpolicys', 'authorizationpolicies');
  return `/apis/${group}/${version}/namespaces/${String(o.metadata.namespace)}/${plural}/${String(o.metadata.name)}`;
}

const pod = (name: string): Obj => ({
  apiVersion: 'v1',
  kind: 'Pod',
  metadata: { namespace: 'app', name, labels: { app: 'web', 'linkerd.io/control-plane-ns': 'linkerd' } },
  spec: { containers: [{ name: 'app', ports: [{ name: 'http', containerPort: 8080 }] }] },
});
const server = (name: string, app = 'web'): Obj => ({
  apiVersion: 'policy.linkerd.io/v1beta3',
  kind: 'Server',
  metadata: { namespace: 'app', name },
  spec: { podSelector: { matchLabels: { app } }, port: 'http' },
});
const policy = (name: string, target: string): Obj => ({
  apiVersion: 'policy.linkerd.io/v1alpha1',
  kind: 'AuthorizationPolicy',
  metadata: { namespace: 'app', name },
  spec: { targetRef: { group: 'policy.linkerd.io', kind: 'Server', name: target }, requiredAuthenticationRefs: [] },
});

function decode(o: Obj): Resource {
  const r = decodeResource(documentFromObject(o));
  assert.equal(r.status, 'ok', JSON.stringify(r.diagnostics));
  return (r as { resource: Resource }).resource;
}

function setup(o: { leader?: () => boolean; wallMs?: () => number; rejected?: Map<string, string> } = {}) {
  const api = new FakeApi();
  const index = new PolicyIndex(CONFIG);
  const writer = new StatusWriter({
    client: api,
    index,
    isLeader: o.leader ?? (() => true),
    debounceMs: 5,
    backoff: { minMs: 20, maxMs: 50 },
    ...(o.wallMs !== undefined ? { wallMs: o.wallMs } : {}),
    rejected: () =>
      [...(o.rejected ?? [])].map(([k, reason]) => {
        const [kind, name] = k.split('/') as [string, string];
        return { group: 'policy.linkerd.io', kind, namespace: 'app', name, reason };
      }),
  });
  /** Creates or updates an object: in the API, the index and the writer, as a source would. */
  const feed = (o: Obj) => {
    const stored = o.kind === 'Pod' ? o : api.put(o);
    index.apply(decode(stored));
    writer.observe(stored);
    return stored;
  };
  const remove = (o: Obj) => {
    index.delete(resourceKey(decode(o)));
    writer.forget(o);
  };
  const statusOf = (o: Obj) => api.objects.get(pathOf(o))?.status;
  return { api, index, writer, feed, remove, statusOf };
}

describe('StatusWriter', () => {
  it('writes nothing while not leading', async () => {
    const t = setup({ leader: () => false });
    t.feed(pod('web-0'));
    t.feed(server('web-http'));
    await t.writer.flush();
    assert.equal(t.api.patches.length, 0);
    assert.equal(t.writer.stats.writes, 0);
  });

  it('applies status server-side on the status subresource, then skips an unchanged status', async () => {
    let now = Date.UTC(2026, 10, 28, 7, 0, 0);
    const t = setup({ wallMs: () => now });
    t.feed(pod('web-0'));
    const ap = t.feed(policy('allow', 'web-http'));
    await t.writer.flush();
    const [patch] = t.api.patches;
    assert.equal(patch?.path, '/apis/policy.linkerd.io/v1alpha1/namespaces/app/authorizationpolicies/allow/status');
    assert.equal(patch?.contentType, 'application/apply-patch+yaml');
    assert.deepEqual(patch?.query, { fieldManager: 'ward-controller', force: 'true' });
    assert.deepEqual(patch?.body, {
      apiVersion: 'policy.linkerd.io/v1alpha1',
      kind: 'AuthorizationPolicy',
      metadata: { name: 'allow', namespace: 'app' },
      status: {
        conditions: [
          { type: 'Accepted', status: 'True', reason: 'Accepted', message: '', observedGeneration: 1, lastTransitionTime: '2026-11-28T07:00:00Z' },
          {
            type: 'ResolvedRefs',
            status: 'False',
            reason: 'TargetNotFound',
            message: 'Server web-http not found in namespace app',
            observedGeneration: 1,
            lastTransitionTime: '2026-11-28T07:00:00Z',
          },
        ],
        selectedPods: 0,
        selectedPorts: 0,
      },
    });
    // The same state again, and the watch's echo of the write: nothing to write.
    await t.writer.flush();
    t.writer.observe(t.api.objects.get(pathOf(ap)));
    await t.writer.flush();
    assert.equal(t.api.patches.length, 1);
    assert.ok(t.writer.stats.skippedUnchanged >= 2);

    // The Server appears: ResolvedRefs turns True with a new transition time; Accepted keeps its own.
    now += 60_000;
    t.feed(server('web-http'));
    await t.writer.flush();
    const st = t.statusOf(ap) as { conditions: Record<string, unknown>[]; selectedPods: number; selectedPorts: number };
    assert.deepEqual(
      st.conditions.map((c) => [c.type, c.status, c.reason, c.lastTransitionTime]),
      [
        ['Accepted', 'True', 'Accepted', '2026-11-28T07:00:00Z'],
        ['ResolvedRefs', 'True', 'ResolvedRefs', '2026-11-28T07:01:00Z'],
      ],
    );
    assert.deepEqual([st.selectedPods, st.selectedPorts], [1, 1]);
    assert.deepEqual((t.statusOf(server('web-http')) as { selectedPods: number }).selectedPods, 1);
  });

  it('writes again when someone else changes the status it owns', async () => {
    const t = setup();
    t.feed(pod('web-0'));
    const srv = t.feed(server('web-http'));
    await t.writer.flush();
    const before = t.api.patches.length;
    const tampered = t.api.put({ ...(t.api.objects.get(pathOf(srv)) as Obj), status: { selectedPods: 7 } });
    t.writer.observe(tampered);
    await t.writer.flush();
    assert.equal(t.api.patches.length, before + 1);
    assert.equal((t.statusOf(srv) as { selectedPods: number }).selectedPods, 1);
  });

  it('follows the Kubernetes source: objects from onObject, deletions forgotten', async () => {
    const t = setup();
    const type = { group: 'policy.linkerd.io', kind: 'Server' };
    t.feed(pod('web-0'));
    const srv = t.api.put(server('web-http'));
    t.index.apply(decode(srv));
    t.writer.onObject(type, 'app/web-http', srv);
    await t.writer.flush();
    assert.equal(t.api.patches.length, 1);
    t.writer.onObject(type, 'app/web-http', undefined);
    // A second pod would change the Server's counts: only a forgotten Server is not written.
    t.feed(pod('web-1'));
    await t.writer.flush();
    assert.equal(t.api.patches.length, 1, 'a deleted object is not written');
    t.writer.onObject(type, 'app/web-http', srv);
    await t.writer.flush();
    assert.equal(t.api.patches.length, 2);
  });

  it('retries server errors with backoff, and does not retry a rejected write until something changes', async () => {
    const t = setup();
    t.feed(pod('web-0'));
    t.api.failures.push(new KubeApiError(503, 'ServiceUnavailable', 'try later'));
    const srv = t.feed(server('web-http'));
    await t.writer.flush();
    assert.equal(t.writer.stats.errors, 1);
    await waitFor(() => t.writer.stats.writes === 1, 'the retried write');
    assert.equal((t.statusOf(srv) as { selectedPorts: number }).selectedPorts, 1);

    t.api.failures.push(new KubeApiError(422, 'Invalid', 'status.selectedPods: Invalid value'));
    t.feed(server('other', 'db'));
    await t.writer.flush();
    const patches = t.api.patches.length;
    await t.writer.flush();
    await new Promise((r) => setTimeout(r, 100));
    assert.equal(t.api.patches.length, patches, 'a 422 is not retried on its own');
    t.feed({ ...server('other', 'db'), metadata: { namespace: 'app', name: 'other', generation: 2 } });
    await t.writer.flush();
    assert.equal(t.api.patches.length, patches + 1);
  });

  it('keeps route parent statuses written by other controllers', async () => {
    const t = setup({ wallMs: () => Date.UTC(2026, 10, 28, 8, 0, 0) });
    t.feed(server('web-http'));
    const foreign = {
      parentRef: { group: 'gateway.networking.k8s.io', kind: 'Gateway', namespace: 'app', name: 'gw' },
      controllerName: 'example.com/gateway',
      conditions: [{ type: 'Accepted', status: 'True', reason: 'Accepted', message: '', lastTransitionTime: '2026-01-01T00:00:00Z' }],
    };
    const route = t.feed({
      apiVersion: 'gateway.networking.k8s.io/v1',
      kind: 'HTTPRoute',
      metadata: { namespace: 'app', name: 'r' },
      spec: {
        parentRefs: [
          { group: 'policy.linkerd.io', kind: 'Server', name: 'web-http' },
          { group: 'gateway.networking.k8s.io', kind: 'Gateway', name: 'gw' },
        ],
        rules: [{}],
      },
      status: { parents: [foreign] },
    });
    await t.writer.flush();
    const parents = (t.statusOf(route) as { parents: Record<string, unknown>[] }).parents;
    assert.deepEqual(parents[0], foreign);
    assert.deepEqual(parents.slice(1), [
      {
        parentRef: { group: 'policy.linkerd.io', kind: 'Server', namespace: 'app', name: 'web-http' },
        controllerName: 'linkerd.io/policy-controller',
        conditions: [{ type: 'Accepted', status: 'True', reason: 'Accepted', message: '', lastTransitionTime: '2026-11-28T08:00:00Z' }],
      },
    ]);
    await t.writer.flush();
    assert.equal(t.api.patches.length, 2, 'one write for the Server, one for the route');
  });

  it('objects the source refused are not accepted: with the last good version in force, or without', async () => {
    const rejected = new Map([['Server/web-http', 'spec.port: expected a number or a string']]);
    const t = setup({ rejected });
    t.feed(pod('web-0'));
    const srv = t.feed(server('web-http'));
    // Never valid: the index does not have it, only the writer saw it.
    const broken = t.api.put({ ...server('broken'), spec: { podSelector: {}, port: [] } });
    t.writer.observe(broken);
    rejected.set('Server/broken', 'spec.port: expected a number or a string');
    await t.writer.flush();
    const conditions = (o: Obj) => (t.statusOf(o) as { conditions: Record<string, unknown>[] }).conditions.map((c) => [c.type, c.status, c.reason, c.message]);
    assert.deepEqual(conditions(srv), [
      ['Accepted', 'False', 'Invalid', 'spec.port: expected a number or a string; the previous version stays in force'],
      ['ResolvedRefs', 'True', 'ResolvedRefs', ''],
    ]);
    assert.equal((t.statusOf(srv) as { selectedPorts: number }).selectedPorts, 1);
    assert.deepEqual(conditions(broken), [
      ['Accepted', 'False', 'Invalid', 'spec.port: expected a number or a string'],
      ['ResolvedRefs', 'Unknown', 'Invalid', 'not evaluated: the object is invalid'],
    ]);
  });
});
