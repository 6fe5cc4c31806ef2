/**
 * Runs every case of the conformance file (decision, controller-output and admission cases)
 * through the CLI (`ward test`, `ward diagnostics policy`, `ward check`) and, for cases whose
 * cluster evolves in steps, through the index directly.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import { parse, stringify } from 'yaml';
import { type Json, lookupPort, parseWorkload, serverToProtoJson } from '../../src/api/index.js';
import { clusterConfig } from '../../src/cli/cluster-config.js';
import { actualValue } from '../../src/cli/commands/test.js';
import { bufferIo } from '../../src/cli/io.js';
import { main } from '../../src/cli/main.js';
import { buildWorkspace } from '../../src/cli/workspace.js';
import { authorizeConnection, clientInfo, compileServer, reauthorizeConnection } from '../../src/core/index.js';
import { evaluate, type Probe, resourceKey } from '../../src/index/index.js';
import { decodeResource, documentFromObject } from '../../src/manifest/index.js';
import { clusterBlock, diff, type PodShorthand, podManifest, readable, suiteTest } from './harness.js';

type Obj = Record<string, unknown>;
const FILE = new URL('./policy-cases.yaml', import.meta.url);
const data = parse(readFileSync(FILE, 'utf8')) as { cases: Obj[]; controllerOutputCases: Obj[]; admissionCases: Obj[] };
const dir = mkdtempSync(join(tmpdir(), 'ward-conformance-'));
after(() => rmSync(dir, { recursive: true, force: true }));

function manifestsOf(c: Obj): Obj[] {
  return [...((c.pods as PodShorthand[]) ?? []).map(podManifest), ...((c.resources as Obj[]) ?? [])];
}

/** Checks the keys `ward test` cannot express (oneOf) against the actual result. */
function checkOneOf(expect: Obj, actual: Parameters<typeof actualValue>[0], label: string): void {
  if (expect.authzOneOf !== undefined)
    assert.ok(
      (expect.authzOneOf as string[]).includes(actualValue(actual, 'authz') as string),
      `${label}: authz ${actualValue(actual, 'authz')} not in ${expect.authzOneOf}`,
    );
  if (expect.decisionOneOf !== undefined) {
    assert.ok((expect.decisionOneOf as string[]).includes(actual.decision), `${label}: decision ${actual.decision}`);
    // ward credits explicit authorizations before audit, so it must give the recommended answer.
    if (expect.recommended !== undefined) assert.equal(actual.decision, expect.recommended, `${label}: recommended decision`);
  }
}

function probeOf(p: Obj): Probe {
  const t = suiteTest(p, 'x') as Obj;
  const [namespace, pod] = (p.pod as string).split('/') as [string, string];
  const from = t.from as Obj;
  const traffic =
    t.grpc !== undefined
      ? { kind: 'grpc' as const, ...(t.grpc as { service: string; method: string }) }
      : t.http !== undefined
        ? { kind: 'http' as const, headers: {}, ...(t.http as { method: string; path: string }) }
        : { kind: 'tcp' as const };
  return {
    namespace,
    pod,
    port: p.port as number,
    client: {
      ip: from.ip as string,
      identity: (from.identity as string | null) ?? undefined,
      tls: from.tls as 'passthrough' | undefined,
      sni: from.sni as string | undefined,
    },
    traffic,
  };
}

describe('conformance: decision cases', () => {
  for (const c of data.cases) {
    it(`${c.id} ${c.title}`, async () => {
      if (c.steps === undefined) {
        const probes = c.probes as Obj[];
        const suite = { cluster: clusterBlock(c.env as Obj), resources: manifestsOf(c), tests: probes.map((p, i) => suiteTest(p, `${c.id}#${i + 1}`)) };
        const file = join(dir, `${c.id}.suite.yaml`);
        writeFileSync(file, stringify(suite));
        const io = bufferIo();
        const status = await main(['test', file, '-o', 'json'], io);
        assert.equal(io.stderr, '', `${c.id}: ward test reported problems`);
        const out = JSON.parse(io.stdout) as { results: { name: string; passed: boolean; expected: Obj; actual: Obj }[]; failed: number };
        const failures = out.results
          .filter((r) => !r.passed)
          .map((r) => `${r.name}: expected ${JSON.stringify(r.expected)} got ${JSON.stringify({ ...r.actual, chain: undefined })}`);
        assert.deepEqual(failures, [], failures.join('\n'));
        assert.equal(status, 0);
        for (const [i, r] of out.results.entries()) checkOneOf((probes[i] as Obj).expect as Obj, r.actual as never, r.name);
        return;
      }
      // Evolving cluster: apply steps to the index and evaluate with the same engine.
      const ws = buildWorkspace(
        { documents: manifestsOf(c).map((m) => documentFromObject(m, `${c.id}.yaml`)) },
        clusterConfig(clusterBlock(c.env as Obj) as never),
      );
      const originals = new Map(manifestsOf(c).map((m) => [`${m.kind}/${(m.metadata as Obj).namespace}/${(m.metadata as Obj).name}`, m]));
      const connections = new Map<string, { probe: Probe; client: NonNullable<ReturnType<typeof clientInfo>> }>();
      for (const step of c.steps as Obj[]) {
        ws.index.update((tx) => {
          for (const m of (step.apply as Obj[]) ?? []) {
            const d = decodeResource(documentFromObject(m));
            assert.equal(d.status, 'ok');
            if (d.status === 'ok') tx.apply(d.resource);
          }
          for (const del of (step.delete as Obj[]) ?? [])
            tx.delete({ kind: del.kind as string, group: '', namespace: del.namespace as string, name: del.name as string });
          for (const p of (step.patch as Obj[]) ?? []) {
            const key = `${p.kind}/${p.namespace}/${p.name}`;
            const patched = mergePatch(originals.get(key), p.mergePatch) as Obj;
            originals.set(key, patched);
            const d = decodeResource(documentFromObject(patched));
            assert.equal(d.status, 'ok');
            if (d.status === 'ok') tx.apply(d.resource);
          }
        });
        for (const p of (step.probes as Obj[]) ?? []) {
          const probe = probeOf(p);
          const actual = evaluate(ws, probe);
          const e = p.expect as Obj;
          for (const k of ['decision', 'denyKind', 'level', 'server', 'route', 'authz']) {
            if (e[k] !== undefined) assert.equal(actualValue(actual, k), e[k], `${c.id} step "${step.name}": ${k}`);
          }
          checkOneOf(e, actual, `${c.id} ${step.name}`);
          if (p.connection !== undefined) {
            const client = clientInfo(
              probe.client.ip as string,
              probe.client.identity ? { kind: 'established', clientId: probe.client.identity } : { kind: 'none', reason: 'no_tls_from_remote' },
            );
            assert.ok(client);
            const cell = ws.index.lookup(probe.namespace, probe.pod, probe.port);
            assert.ok(cell);
            assert.equal(authorizeConnection(compileServer(cell.value), client).allowed, actual.decision !== 'deny');
            connections.set(p.connection as string, { probe, client });
          }
        }
        for (const ec of (step.expectConnections as Obj[]) ?? []) {
          const conn = connections.get(ec.connection as string);
          assert.ok(conn, `connection ${ec.connection} was opened`);
          const cell = ws.index.lookup(conn.probe.namespace, conn.probe.pod, conn.probe.port);
          assert.ok(cell);
          const d = reauthorizeConnection(compileServer(cell.value), conn.client);
          assert.equal(d.allowed ? 'open' : 'terminated', ec.state, `${c.id}: connection ${ec.connection}`);
        }
      }
    });
  }
});

function mergePatch(target: unknown, patch: unknown): unknown {
  if (typeof patch !== 'object' || patch === null || Array.isArray(patch)) return patch;
  const out: Obj = typeof target === 'object' && target !== null && !Array.isArray(target) ? { ...(target as Obj) } : {};
  for (const [k, v] of Object.entries(patch as Obj)) {
    if (v === null) delete out[k];
    else out[k] = mergePatch(out[k], v);
  }
  return out;
}

describe('conformance: controller output cases', () => {
  for (const c of data.controllerOutputCases) {
    it(`${c.id} ${c.title}`, async () => {
      if (c.requests !== undefined) {
        const ws = buildWorkspace(
          { documents: [podManifest({ namespace: 'app', name: 'pause', containers: [{ name: 'pause' }] })].map((m) => documentFromObject(m)) },
          clusterConfig({}),
        );
        for (const r of c.requests as Obj[]) {
          const res = lookupPort(ws.index, r.workload as string, r.port as number);
          const want = (r.expectStatus as string).split(' ')[0];
          assert.equal(res.code, want, `${r.workload} port ${r.port}`);
        }
        return;
      }
      const request = c.request as Obj | undefined;
      if (c.steps === undefined && request !== undefined) {
        const w = parseWorkload(request.workload as string);
        assert.ok(typeof w !== 'string');
        const file = join(dir, `${c.id}.yaml`);
        writeFileSync(
          file,
          manifestsOf(c)
            .map((m) => stringify(m))
            .join('---\n'),
        );
        const cluster = clusterBlock(c.env as Obj);
        const flags = cluster.defaultPolicy ? ['--default-policy', cluster.defaultPolicy as string] : [];
        if (cluster.probeNetworks) flags.push('--probe-networks', (cluster.probeNetworks as string[]).join(','));
        const io = bufferIo();
        const status = await main(['diagnostics', 'policy', '-f', file, ...flags, `pod/${w.namespace}/${w.name}`, String(request.port), '-o', 'json'], io);
        assert.equal(status, 0, io.stderr);
        const got = readable(JSON.parse(io.stdout) as Json);
        const d = diff(c.expectFirstMessage ?? c.expect, got);
        assert.equal(d, undefined, `${d}\nactual: ${JSON.stringify(got)}`);
        return;
      }
      const ws = buildWorkspace({ documents: manifestsOf(c).map((m) => documentFromObject(m)) }, clusterConfig(clusterBlock(c.env as Obj) as never));
      for (const step of c.steps as Obj[]) {
        ws.index.update((tx) => {
          for (const m of (step.apply as Obj[]) ?? []) {
            const dec = decodeResource(documentFromObject(m));
            if (dec.status === 'ok') tx.apply(dec.resource);
          }
          for (const del of (step.delete as Obj[]) ?? [])
            tx.delete({ kind: del.kind as string, group: '', namespace: del.namespace as string, name: del.name as string });
        });
        const pod = (c.pods as PodShorthand[])[0] as PodShorthand;
        const cell = ws.index.lookup(pod.namespace, pod.name, 4191);
        assert.ok(cell);
        const got = readable(serverToProtoJson(cell.value));
        const d = diff(step.expect, got);
        assert.equal(d, undefined, `step "${step.name}": ${d}\nactual: ${JSON.stringify(got)}`);
      }
    });
  }
});

describe('conformance: admission cases', () => {
  for (const c of data.admissionCases) {
    it(`${c.id} ${c.source}`, async () => {
      const file = join(dir, `${c.id}.yaml`);
      writeFileSync(file, stringify(c.resource));
      const io = bufferIo();
      await main(['check', '-f', file, '-o', 'json'], io);
      const out = JSON.parse(io.stdout) as { resources: { admitted: boolean }[] };
      assert.equal(out.resources.length, 1);
      assert.equal(out.resources[0]?.admitted, c.expect === 'accept', JSON.stringify(out, null, 1));
    });
  }
});

describe('conformance data', () => {
  it('the copy in the repository matches ../shared when it is present', () => {
    let shared: string;
    try {
      shared = readFileSync(new URL('../../../shared/conformance/policy-cases.yaml', import.meta.url), 'utf8');
    } catch {
      return; // a clone without shared/ beside it: nothing to compare
    }
    assert.equal(readFileSync(FILE, 'utf8'), shared, 'test/conformance/policy-cases.yaml is out of date: copy ../shared/conformance/policy-cases.yaml');
  });
  it('keys resources like the index does', () => {
    const d = decodeResource(
      documentFromObject({ apiVersion: 'gateway.networking.k8s.io/v1', kind: 'HTTPRoute', metadata: { name: 'r', namespace: 'a' }, spec: {} }),
    );
    assert.equal(d.status, 'ok');
    if (d.status === 'ok') assert.deepEqual(resourceKey(d.resource), { kind: 'HTTPRoute', group: 'gateway.networking.k8s.io', namespace: 'a', name: 'r' });
  });
});
