import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { decodeResource } from './decode.js';
import { parseManifestText } from './load.js';
import type { Resource, Workload } from './types.js';
import { expandWorkloads, podTemplateHash } from './workloads.js';

function resources(text: string): Resource[] {
  return parseManifestText(text, 'w.yaml').documents.flatMap((doc) => {
    const r = decodeResource(doc);
    assert.equal(r.status, 'ok', JSON.stringify(r.diagnostics));
    return r.status === 'ok' ? [r.resource] : [];
  });
}

const workload = (apiVersion: string, kind: string, name: string, extra = '') => `apiVersion: ${apiVersion}
kind: ${kind}
metadata: {name: ${name}, namespace: shop}
spec:
${extra}  template:
    metadata:
      labels: {app: ${name}}
      annotations: {config.linkerd.io/default-inbound-policy: deny}
    spec:
      serviceAccountName: ${name}
      containers: [{name: main, ports: [{name: http, containerPort: 8080}]}]
`;

describe('expandWorkloads', () => {
  it('builds <workload>-<i> pods from the template, replicas for replicated kinds and one otherwise', () => {
    const rs = resources(
      [
        workload('apps/v1', 'Deployment', 'web', '  replicas: 3\n'),
        workload('apps/v1', 'StatefulSet', 'db'),
        workload('apps/v1', 'DaemonSet', 'agent'),
        workload('apps/v1', 'ReplicaSet', 'idle', '  replicas: 0\n'),
        workload('batch/v1', 'Job', 'migrate'),
        'apiVersion: v1\nkind: Pod\nmetadata: {name: solo}\nspec: {containers: [{name: c}]}\n',
      ].join('---\n'),
    );
    const pods = expandWorkloads(rs);
    assert.deepEqual(
      pods.map((p) => [p.metadata.namespace, p.metadata.name, p.owner]),
      [
        ['shop', 'web-0', 'Deployment/web'],
        ['shop', 'web-1', 'Deployment/web'],
        ['shop', 'web-2', 'Deployment/web'],
        ['shop', 'db-0', 'StatefulSet/db'],
        ['shop', 'agent-0', 'DaemonSet/agent'],
        ['shop', 'migrate-0', 'Job/migrate'],
      ],
    );
    const [web1] = pods.slice(1);
    assert.ok(web1);
    const { origin, ...rest } = web1;
    assert.deepEqual(rest, {
      kind: 'Pod',
      apiVersion: 'v1',
      metadata: {
        namespace: 'shop',
        name: 'web-1',
        labels: { app: 'web' },
        annotations: { 'config.linkerd.io/default-inbound-policy': 'deny' },
      },
      spec: { serviceAccountName: 'web', containers: [{ name: 'main', ports: [{ name: 'http', containerPort: 8080 }] }] },
      owner: 'Deployment/web',
    });
    assert.deepEqual(origin?.source, rs[0]?.origin?.source, 'pods point at their workload');
    assert.deepEqual(origin?.source, { file: 'w.yaml', line: 1, col: 1 });
    // Pod paths land inside the workload's pod template.
    assert.deepEqual(origin?.positionOf(['spec', 'containers', 0, 'ports']), rs[0]?.origin?.positionOf(['spec', 'template', 'spec', 'containers', 0, 'ports']));
  });

  it('expands a CronJob from its job template', () => {
    const rs = resources(`apiVersion: batch/v1
kind: CronJob
metadata: {name: nightly, namespace: ops}
spec:
  schedule: "0 0 * * *"
  jobTemplate:
    spec:
      template:
        metadata: {labels: {job: nightly}}
        spec: {containers: [{name: c}]}
`);
    const pods = expandWorkloads(rs);
    assert.deepEqual(
      pods.map((p) => [p.metadata.name, p.metadata.labels, p.owner]),
      [['nightly-0', { job: 'nightly' }, 'CronJob/nightly']],
    );
  });
});

describe('expandWorkloads with template-hash names', () => {
  const deployment = (annotation: string, replicas = 2) =>
    resources(
      workload('apps/v1', 'Deployment', 'web', `  replicas: ${replicas}\n`).replace('default-inbound-policy: deny', `default-inbound-policy: ${annotation}`),
    );

  it('names pods <workload>-<hash>-<i> and labels Deployment pods with the hash', () => {
    const [w] = deployment('deny');
    const hash = podTemplateHash(w as Workload);
    assert.match(hash, /^[bcdfghjklmnpqrstvwxz2456789]{1,10}$/);
    const pods = expandWorkloads(deployment('deny'), { podNames: 'template-hash' });
    assert.deepEqual(
      pods.map((p) => [p.metadata.name, p.metadata.labels, p.owner]),
      [
        [`web-${hash}-0`, { app: 'web', 'pod-template-hash': hash }, 'Deployment/web'],
        [`web-${hash}-1`, { app: 'web', 'pod-template-hash': hash }, 'Deployment/web'],
      ],
    );
    const [db] = expandWorkloads(resources(workload('apps/v1', 'StatefulSet', 'db')), { podNames: 'template-hash' });
    assert.match(db?.metadata.name ?? '', /^db-[bcdfghjklmnpqrstvwxz2456789]+-0$/);
    assert.deepEqual(db?.metadata.labels, { app: 'db' }, 'only Deployment pods carry pod-template-hash');
  });

  it('gives a changed template new pod names, and an equal one the same names', () => {
    const names = (rs: Resource[]) => expandWorkloads(rs, { podNames: 'template-hash' }).map((p) => p.metadata.name);
    assert.deepEqual(names(deployment('deny')), names(deployment('deny')));
    // An annotation edit is a new template: new pods, none of the old names.
    const edited = names(deployment('all-unauthenticated'));
    for (const n of names(deployment('deny'))) assert.ok(!edited.includes(n), `${n} survived the template change`);
    // Replicas are not part of the template: scaling keeps the names of the pods that stay.
    assert.deepEqual(names(deployment('deny', 3)).slice(0, 2), names(deployment('deny', 2)));
    // Key order in the manifest is not content.
    const reordered = resources(`apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: shop}
spec:
  replicas: 2
  template:
    spec:
      containers: [{ports: [{containerPort: 8080, name: http}], name: main}]
      serviceAccountName: web
    metadata:
      annotations: {config.linkerd.io/default-inbound-policy: deny}
      labels: {app: web}
`);
    assert.deepEqual(names(reordered), names(deployment('deny')));
  });
});
