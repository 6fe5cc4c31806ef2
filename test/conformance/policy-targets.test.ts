/**
 * `ward authz` of policy objects agrees with the decision engine on every conformance case:
 * wherever a probe is admitted by `authorizationpolicy/X` or `serverauthorization/X` on
 * `server/S`, the view of X lists that pod and port, and the view of Server S lists it as bound.
 */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { describe, it } from 'node:test';
import { parse } from 'yaml';
import { clusterConfig } from '../../src/cli/cluster-config.js';
import { buildWorkspace } from '../../src/cli/workspace.js';
import { type PolicyKind, policyTargetsView } from '../../src/index/index.js';
import { documentFromObject } from '../../src/manifest/index.js';
import { clusterBlock, type PodShorthand, podManifest } from './harness.js';

type Obj = Record<string, unknown>;
const data = parse(readFileSync(new URL('./policy-cases.yaml', import.meta.url), 'utf8')) as { cases: Obj[] };

const KINDS: Readonly<Record<string, PolicyKind>> = {
  authorizationpolicy: 'AuthorizationPolicy',
  serverauthorization: 'ServerAuthorization',
  server: 'Server',
};

describe('conformance: where policy objects apply', () => {
  let checked = 0;
  for (const c of data.cases.filter((x) => x.steps === undefined)) {
    it(`${c.id} ${c.title}`, () => {
      const manifests = [...((c.pods as PodShorthand[]) ?? []).map(podManifest), ...((c.resources as Obj[]) ?? [])];
      const ws = buildWorkspace({ documents: manifests.map((m) => documentFromObject(m, `${c.id}.yaml`)) }, clusterConfig(clusterBlock(c.env as Obj) as never));
      for (const p of c.probes as Obj[]) {
        const expect = p.expect as Obj;
        if (expect.decision !== 'allow') continue;
        const [ns, pod] = (p.pod as string).split('/') as [string, string];
        for (const ref of [expect.authz, expect.server]) {
          if (typeof ref !== 'string') continue;
          const [kind, name] = ref.split('/') as [string, string];
          const policyKind = KINDS[kind];
          if (policyKind === undefined) continue; // default policies are not objects
          const view = policyTargetsView(ws, policyKind, name, ns);
          const rows = view.policies.flatMap((o) => o.appliesTo).filter((r) => r.active);
          assert.ok(
            rows.some((r) => r.pod === pod && r.port === p.port),
            `${c.id}: ${ref} admitted ${pod}:${p.port}, but ward authz ${kind}/${name} lists ${JSON.stringify(rows.map((r) => `${r.pod}:${r.port}`))}`,
          );
          checked++;
        }
      }
    });
  }
  it('checked a meaningful number of admissions', () => {
    assert.ok(checked >= 20, `only ${checked} checks`);
    console.log(`# ${checked} admissions checked`);
  });
});
