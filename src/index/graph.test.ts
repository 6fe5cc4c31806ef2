/**
 * The who-can-talk graph of the emojivoto lockdown, read from the example's own manifests.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import { parseCidr } from '../core/index.js';
import { admitDocuments, dedupeResources, loadManifests, namespacesOf, type Pod, podsOf, type Resource } from '../manifest/index.js';
import { type GraphEdge, type PolicyGraph, policyGraph } from './graph.js';
import { type ClusterConfig, PolicyIndex } from './policy-index.js';

const EXAMPLE = fileURLToPath(new URL('../../examples/emojivoto', import.meta.url));

function emojivoto(opts: { local: boolean; nsDefault?: string; namespace?: string }) {
  const config: ClusterConfig = {
    defaultPolicy: 'all-unauthenticated',
    clusterNetworks: [{ net: parseCidr('127.22.0.0/16')!, except: [] }],
    probeNetworks: [{ net: parseCidr('0.0.0.0/0')!, except: [] }],
    trustDomain: 'cluster.local',
    controlPlaneNamespace: 'linkerd',
    localhostIsPodAddress: opts.local,
  };
  const docs = loadManifests([EXAMPLE]);
  const admitted = dedupeResources(admitDocuments(docs.documents).admitted).resources;
  const namespaces = namespacesOf(admitted);
  const { pods } = podsOf(admitted, namespaces, { controlPlaneNamespace: 'linkerd' });
  let n = 10;
  const addressed: Pod[] = opts.local ? pods.map((p) => ({ ...p, status: { podIP: `127.22.3.${n++}` } })) : pods;
  const index = new PolicyIndex(config);
  index.update((tx) => {
    for (const r of [...admitted.filter((r) => r.kind !== 'Pod'), ...addressed] as Resource[]) tx.apply(r);
  });
  const annotations = (ns: string) => {
    const a = namespaces.get(ns)?.metadata.annotations;
    if (a === undefined || opts.nsDefault === undefined) return a;
    return { ...a, 'config.linkerd.io/default-inbound-policy': opts.nsDefault };
  };
  return policyGraph({ config, index }, { namespaceAnnotations: annotations, namespace: opts.namespace });
}

/** `src -> dst:port route decision authz` lines of the app ports (not the proxy admin port). */
function appEdges(g: PolicyGraph, filter: (e: GraphEdge) => boolean = () => true): string[] {
  return g.edges
    .filter((e) => !g.targets[e.target]?.proxyPort && filter(e))
    .map((e) => `${e.src} -> ${e.dst}:${e.port} ${g.targets[e.target]?.routes[e.route]?.route} ${e.decision} ${e.authz}`)
    .sort();
}

describe('policyGraph on the emojivoto lockdown', () => {
  const g = emojivoto({ local: true });

  it('lists the workloads with their identities and the pseudo-sources', () => {
    assert.deepEqual(
      g.nodes.map((n) => `${n.id} ${n.identity ?? '-'}`),
      [
        'bad/Deployment/vote-bot vote-bot.bad.serviceaccount.identity.linkerd.cluster.local',
        'emojivoto/Deployment/emoji emoji.emojivoto.serviceaccount.identity.linkerd.cluster.local',
        'emojivoto/Deployment/vote-bot vote-bot.emojivoto.serviceaccount.identity.linkerd.cluster.local',
        'emojivoto/Deployment/voting voting.emojivoto.serviceaccount.identity.linkerd.cluster.local',
        'emojivoto/Deployment/web web.emojivoto.serviceaccount.identity.linkerd.cluster.local',
        '/External/unmeshed -',
        '/Host/localhost -',
      ],
    );
  });

  it('emoji and voting admit only web; web admits the namespace and the host, not bad/vote-bot', () => {
    const toEmojivoto = appEdges(g, (e) => e.dst.startsWith('emojivoto/') && !g.targets[e.target]?.routes[e.route]?.probe);
    assert.deepEqual(toEmojivoto, [
      '/Host/localhost -> emojivoto/Deployment/web:8080 HTTPRoute/web-app allow authorizationpolicy/web-from-host',
      'emojivoto/Deployment/emoji -> emojivoto/Deployment/web:8080 HTTPRoute/web-app allow authorizationpolicy/web-from-emojivoto',
      'emojivoto/Deployment/vote-bot -> emojivoto/Deployment/web:8080 HTTPRoute/web-app allow authorizationpolicy/web-from-emojivoto',
      'emojivoto/Deployment/voting -> emojivoto/Deployment/web:8080 HTTPRoute/web-app allow authorizationpolicy/web-from-emojivoto',
      'emojivoto/Deployment/web -> emojivoto/Deployment/emoji:8080 default/default allow authorizationpolicy/emoji-from-web',
      'emojivoto/Deployment/web -> emojivoto/Deployment/voting:8080 default/default allow authorizationpolicy/voting-from-web',
      'emojivoto/Deployment/web -> emojivoto/Deployment/web:8080 HTTPRoute/web-app allow authorizationpolicy/web-from-emojivoto',
    ]);
  });

  it("marks web's readiness route as a probe route, open to everyone", () => {
    const web = g.targets.find((t) => t.node === 'emojivoto/Deployment/web' && t.port === 8080);
    assert.deepEqual(
      web?.routes.map((r) => [r.route, r.sample, r.probe]),
      [
        ['HTTPRoute/web-app', 'GET /', false],
        ['HTTPRoute/web-probes', 'GET /ready', true],
      ],
    );
    const probeSources = appEdges(g, (e) => e.dst === 'emojivoto/Deployment/web' && web?.routes[e.route]?.probe === true);
    assert.ok(probeSources.some((l) => l.startsWith('bad/Deployment/vote-bot ')));
  });

  it('leaves the pod-own localhost permits out', () => {
    assert.ok(g.edges.every((e) => e.authz !== 'default/localhost'));
  });

  it('says where the default policy comes from and when it is stale', () => {
    const web = g.nodes.find((n) => n.id === 'emojivoto/Deployment/web');
    assert.deepEqual(web?.defaultPolicy, { name: 'deny', source: 'pod-annotation', namespaceValue: 'deny', stale: false });
    const bad = g.nodes.find((n) => n.id === 'bad/Deployment/vote-bot');
    assert.deepEqual(bad?.defaultPolicy, { name: 'all-unauthenticated', source: 'cluster', namespaceValue: null, stale: false });
    const changed = emojivoto({ local: true, nsDefault: 'all-authenticated' });
    assert.equal(changed.nodes.find((n) => n.id === 'emojivoto/Deployment/web')?.defaultPolicy?.stale, true);
  });

  it('evaluates pods without addresses from a cluster address (manifests read offline)', () => {
    const offline = emojivoto({ local: false });
    const web = offline.nodes.find((n) => n.id === 'emojivoto/Deployment/web');
    assert.equal(web?.ipAssumed, true);
    // Identity decides every emojivoto permit, so the graph is the same without addresses.
    assert.deepEqual(
      appEdges(offline, (e) => e.dst.startsWith('emojivoto/') && !offline.targets[e.target]?.routes[e.route]?.probe && e.src !== '/Host/localhost'),
      appEdges(g, (e) => e.dst.startsWith('emojivoto/') && !g.targets[e.target]?.routes[e.route]?.probe && e.src !== '/Host/localhost'),
    );
  });

  it('lists only the destinations of one namespace when asked, with sources from everywhere', () => {
    const bad = emojivoto({ local: true, namespace: 'bad' });
    assert.ok(bad.targets.length > 0);
    assert.ok(bad.targets.every((t) => t.node.startsWith('bad/')));
    assert.ok(
      bad.edges.some((e) => e.src.startsWith('emojivoto/')),
      'the bad namespace admits every client by default',
    );
  });
});

describe('policyGraph with many sources', () => {
  it('lists a permit most sources share once, with the sources it leaves out', () => {
    const config: ClusterConfig = {
      defaultPolicy: 'all-authenticated',
      clusterNetworks: [{ net: parseCidr('10.0.0.0/8')!, except: [] }],
      probeNetworks: [],
      trustDomain: 'cluster.local',
      controlPlaneNamespace: 'linkerd',
    };
    const pods: Pod[] = Array.from({ length: 40 }, (_, i) => ({
      kind: 'Pod',
      apiVersion: 'v1',
      metadata: { namespace: 'big', name: `p-${i}`, labels: { 'linkerd.io/control-plane-ns': 'linkerd' }, annotations: {} },
      spec: { serviceAccountName: `sa-${i}`, containers: [{ name: 'app', ports: [{ name: 'http', containerPort: 8080 }] }] },
      status: { podIP: `10.0.0.${i + 1}` },
    }));
    const index = new PolicyIndex(config);
    index.update((tx) => {
      for (const p of pods) tx.apply(p);
    });
    const g = policyGraph({ config, index });
    const t = g.targets.findIndex((x) => x.node === 'big/Pod/p-3' && x.port === 8080);
    assert.ok(t >= 0);
    const bulk = g.bulk.filter((b) => b.target === t);
    // Every meshed pod is admitted by the default; the plaintext pseudo-source is not.
    assert.deepEqual(
      bulk.map((b) => [b.decision, b.authz, b.except]),
      [['allow', 'default/all-authenticated', ['/External/unmeshed']]],
    );
    assert.deepEqual(
      g.edges.filter((e) => e.target === t),
      [],
    );
  });
});
