/**
 * The admission webhooks without an API server: the handlers on AdmissionReview requests, and the
 * HTTPS server on a real socket (bad requests, routing, certificate reload).
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { X509Certificate } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { request as httpsRequest } from 'node:https';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import type { TLSSocket } from 'node:tls';
import { decodeResource, documentFromObject, type KubeInjectConfig, type Resource } from '../../manifest/index.js';
import { type AdmissionRequest, parseAdmissionReview } from './admission-review.js';
import { handleInject } from './inject-handler.js';
import { handleValidate } from './validate-handler.js';
import { type RunningWebhookServer, startWebhookServer, WebhookTlsError } from './webhook-server.js';

const CFG: KubeInjectConfig = {
  controlPlaneNamespace: 'linkerd',
  image: 'localhost/ward:0.1.0',
  controllerHost: '10.0.0.57',
  trustAnchorsPem: 'PEM',
};

function mkServer(spec: Record<string, unknown>, name = 'web', apiVersion = 'policy.linkerd.io/v1beta3'): Record<string, unknown> {
  return { apiVersion, kind: 'Server', metadata: { name, namespace: 'app' }, spec };
}

function mkRequest(object: unknown, over: Partial<AdmissionRequest> = {}): AdmissionRequest {
  const kind = typeof object === 'object' && object !== null && 'kind' in object ? String(object.kind) : 'Server';
  return {
    uid: 'u-1',
    kind: { group: kind === 'Pod' || kind === 'ConfigMap' ? '' : 'policy.linkerd.io', version: 'v1beta3', kind },
    namespace: 'app',
    operation: 'CREATE',
    object,
    dryRun: false,
    ...over,
  };
}

const goodServer = () => mkServer({ podSelector: { matchLabels: { app: 'web' } }, port: 8080, proxyProtocol: 'HTTP/1' });

describe('handleValidate', () => {
  it('admits a valid Server and denies one with a bad port name (422) with ward check’s text, the field path and the code', async () => {
    assert.deepEqual(await handleValidate(mkRequest(goodServer())), { uid: 'u-1', allowed: true });
    const r = await handleValidate(mkRequest(mkServer({ podSelector: { matchLabels: { app: 'web' } }, port: 'Bad_Port' })));
    assert.equal(r.allowed, false);
    assert.equal(r.status?.code, 422);
    assert.equal(
      r.status?.message,
      'error POL025 port name "Bad_Port" is not a valid port name [Server app/web] at spec.port (hint: a port name is 1-15 lower-case letters, digits and dashes, with at least one letter)',
    );
  });

  it('denies an object that does not decode with 400, naming every missing field', async () => {
    const r = await handleValidate(mkRequest(mkServer({ podSelector: { matchLabels: { app: 'web' } } })));
    assert.equal(r.allowed, false);
    assert.equal(r.status?.code, 400);
    assert.match(r.status?.message ?? '', /^error POL012 .*spec\.port.* \[Server app\/web\] at spec\.port/);
  });

  it('admits deletions, kinds ward does not read and status updates; an admitted object’s lint warnings come back as warnings', async () => {
    const bad = mkServer({ port: 'Bad_Port' });
    assert.equal((await handleValidate(mkRequest(bad, { operation: 'DELETE', object: undefined, oldObject: bad }))).allowed, true);
    assert.equal((await handleValidate(mkRequest({ apiVersion: 'v1', kind: 'ConfigMap', metadata: { name: 'x' } }))).allowed, true);
    assert.equal((await handleValidate(mkRequest(bad, { operation: 'UPDATE', subResource: 'status' }))).allowed, true);
    const quoted = await handleValidate(mkRequest(mkServer({ podSelector: { matchLabels: { app: 'web' } }, port: '8080' })));
    assert.equal(quoted.allowed, true);
    assert.deepEqual(quoted.warnings, [
      'warning POL100 spec.port "8080" is quoted, so it is a port name, not the number 8080 [Server app/web] at spec.port (hint: write port: 8080 without quotes to bind the port number)',
    ]);
  });

  it('uses the request namespace when the object has none, and asks the controller for existing objects when the emulated version needs them', async () => {
    const other = decodeResource(documentFromObject(mkServer({ podSelector: { matchLabels: {} }, port: 8080 }, 'all'))) as { resource: Resource };
    const asked: string[] = [];
    const existing = (ns: string) => {
      asked.push(ns);
      return [other.resource];
    };
    const obj = {
      apiVersion: 'policy.linkerd.io/v1beta3',
      kind: 'Server',
      metadata: { name: 'web' },
      spec: { podSelector: { matchLabels: { app: 'web' } }, port: 8080 },
    };
    assert.equal((await handleValidate(mkRequest(obj), { existing })).allowed, true);
    assert.deepEqual(asked, [], 'latest does not compare with existing Servers');
    const legacy = await handleValidate(mkRequest(obj), { existing, version: '2.17' });
    assert.deepEqual(asked, ['app']);
    assert.equal(legacy.allowed, false);
    assert.match(
      legacy.status?.message ?? '',
      /^error POL026 Server port 8080 in namespace app is already defined by Server all .*\[Server app\/web\] at spec\.port/,
    );
  });
});

describe('handleInject', () => {
  const pod = { apiVersion: 'v1', kind: 'Pod', metadata: { generateName: 'web-' }, spec: { containers: [{ name: 'main', ports: [{ containerPort: 8080 }] }] } };
  const enabled = { apiVersion: 'v1', kind: 'Namespace', metadata: { name: 'app', annotations: { 'linkerd.io/inject': 'enabled' } } };

  it('answers a Pod CREATE in an injected namespace with a JSON patch; asks the API server when the cache does not know the namespace', async () => {
    const fetched: string[] = [];
    const r = await handleInject(mkRequest(pod), {
      config: CFG,
      lookupNamespace: () => undefined,
      fetchNamespace: (name) => {
        fetched.push(name);
        return Promise.resolve(enabled);
      },
    });
    assert.deepEqual(fetched, ['app']);
    assert.equal(r.allowed, true);
    assert.equal(r.patchType, 'JSONPatch');
    const ops = JSON.parse(Buffer.from(r.patch ?? '', 'base64').toString('utf8')) as { op: string; path: string; value: unknown }[];
    assert.ok(ops.some((op) => op.path === '/spec/containers/-' && (op.value as { name: string }).name === 'linkerd-proxy'));
    assert.ok(ops.some((op) => op.path === '/spec/initContainers'));
    // The namespace the request names (the object has none yet).
    const labels = ops.find((op) => op.path === '/metadata/labels')?.value;
    assert.deepEqual(labels, { 'linkerd.io/control-plane-ns': 'linkerd', 'linkerd.io/workload-ns': 'app' });
  });

  it('admits without a patch: other kinds and operations, pods that are not meshed, and failures to inject', async () => {
    const opts = { config: CFG, lookupNamespace: () => enabled };
    assert.deepEqual(await handleInject(mkRequest(pod, { operation: 'UPDATE' }), opts), { uid: 'u-1', allowed: true });
    assert.deepEqual(await handleInject(mkRequest({ apiVersion: 'v1', kind: 'ConfigMap' }), opts), { uid: 'u-1', allowed: true });
    assert.deepEqual(await handleInject(mkRequest(pod), { config: CFG, lookupNamespace: () => ({ metadata: { name: 'app' } }) }), {
      uid: 'u-1',
      allowed: true,
    });
    const logged: string[] = [];
    const logger = { error: (_o: unknown, msg: string) => logged.push(msg), info() {}, warn() {}, debug() {} } as unknown as Parameters<
      typeof handleInject
    >[1]['logger'];
    const failing = await handleInject(mkRequest(pod), {
      config: () => {
        throw new Error('no trust anchors yet');
      },
      lookupNamespace: () => enabled,
      logger,
    });
    assert.deepEqual(failing, { uid: 'u-1', allowed: true });
    assert.deepEqual(logged, ['proxy injection failed; pod admitted without a proxy']);
    // A namespace read that does not answer in time: admitted as it is, logged.
    const slow = await handleInject(mkRequest(pod), {
      config: CFG,
      lookupNamespace: () => undefined,
      fetchNamespace: () => new Promise(() => {}),
      fetchTimeoutMs: 50,
      logger,
    });
    assert.deepEqual(slow, { uid: 'u-1', allowed: true });
    assert.equal(logged.length, 2);
  });
});

describe('parseAdmissionReview', () => {
  it('names what is wrong with a body that is not a v1 review', () => {
    const cases: [unknown, RegExp][] = [
      [[], /not a JSON object/],
      [{ kind: 'Pod' }, /kind is "Pod"/],
      [{ kind: 'AdmissionReview', apiVersion: 'admission.k8s.io/v1beta1' }, /speaks admission.k8s.io\/v1/],
      [{ kind: 'AdmissionReview', apiVersion: 'admission.k8s.io/v1' }, /request is missing/],
      [
        { kind: 'AdmissionReview', apiVersion: 'admission.k8s.io/v1', request: { uid: 'x', kind: { version: 'v1', kind: 'Pod' }, operation: 'PATCH' } },
        /operation "PATCH"/,
      ],
    ];
    for (const [body, message] of cases) {
      const r = parseAdmissionReview(body);
      assert.equal(r.ok, false);
      assert.match((r as { message: string }).message, message);
    }
  });
});

// === the server on a real socket ===

let dir: string;
let server: RunningWebhookServer | undefined;

function makeCert(name: string): void {
  execFileSync(
    'openssl',
    [
      'req',
      '-x509',
      '-newkey',
      'ec',
      '-pkeyopt',
      'ec_paramgen_curve:P-256',
      '-nodes',
      '-days',
      '1',
      '-subj',
      `/CN=${name}`,
      '-addext',
      'subjectAltName=IP:127.0.0.1',
      '-keyout',
      join(dir, `${name}.key`),
      '-out',
      join(dir, `${name}.crt`),
    ],
    { stdio: 'ignore' },
  );
}

interface Answer {
  readonly status: number;
  readonly body: string;
  readonly peerCn: string;
}

function post(path: string, body: string | Buffer, method = 'POST'): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const req = httpsRequest(
      { host: '127.0.0.1', port: server?.port, path, method, rejectUnauthorized: false, agent: false, headers: { 'content-type': 'application/json' } },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => {
          const raw = (res.socket as TLSSocket).getPeerCertificate(false).raw;
          const peerCn = raw === undefined ? '' : new X509Certificate(raw).subject;
          resolve({ status: res.statusCode ?? 0, body: Buffer.concat(chunks).toString('utf8'), peerCn });
        });
      },
    );
    req.on('error', reject);
    req.end(body);
  });
}

const review = (object: unknown) => JSON.stringify({ apiVersion: 'admission.k8s.io/v1', kind: 'AdmissionReview', request: mkRequest(object) });

describe('startWebhookServer', () => {
  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'ward-webhook-'));
    makeCert('first');
    makeCert('second');
    writeFileSync(join(dir, 'tls.crt'), readFileSync(join(dir, 'first.crt')));
    writeFileSync(join(dir, 'tls.key'), readFileSync(join(dir, 'first.key')));
    server = await startWebhookServer({
      certFile: join(dir, 'tls.crt'),
      keyFile: join(dir, 'tls.key'),
      host: '127.0.0.1',
      port: 0,
      validate: {},
      inject: { config: CFG, lookupNamespace: () => ({ metadata: { name: 'app', annotations: { 'linkerd.io/inject': 'enabled' } } }) },
      maxBodyBytes: 64 * 1024,
      reloadIntervalMs: 100,
    });
  });
  after(async () => {
    await server?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('answers POST /validate (with the API server’s ?timeout query) with an AdmissionReview', async () => {
    const ok = await post('/validate?timeout=10s', review(goodServer()));
    assert.equal(ok.status, 200);
    assert.deepEqual(JSON.parse(ok.body), { apiVersion: 'admission.k8s.io/v1', kind: 'AdmissionReview', response: { uid: 'u-1', allowed: true } });
    const denied = JSON.parse((await post('/validate', review(mkServer({ podSelector: { matchLabels: {} }, port: 'Bad_Port' })))).body) as {
      response: { allowed: boolean; status: { code: number } };
    };
    assert.deepEqual([denied.response.allowed, denied.response.status.code], [false, 422]);
    const injected = JSON.parse(
      (await post('/inject', review({ apiVersion: 'v1', kind: 'Pod', metadata: { name: 'p' }, spec: { containers: [{ name: 'main' }] } }))).body,
    ) as {
      response: { patchType?: string };
    };
    assert.equal(injected.response.patchType, 'JSONPatch');
  });

  it('refuses what is not a review with a 4xx and a message, and keeps serving', async () => {
    const malformed = await post('/validate', '{"apiVersion": ');
    assert.equal(malformed.status, 400);
    assert.match(malformed.body, /^malformed JSON: /);
    const notReview = await post('/validate', JSON.stringify({ kind: 'Pod' }));
    assert.deepEqual([notReview.status, notReview.body], [400, 'not an AdmissionReview: kind is "Pod", not "AdmissionReview"\n']);
    const large = await post('/validate', Buffer.alloc(100 * 1024, 0x20));
    assert.deepEqual([large.status, large.body], [413, 'request body larger than 65536 bytes\n']);
    assert.equal((await post('/mutate', review(goodServer()))).status, 404);
    assert.equal((await post('/validate', '', 'GET')).status, 405);
    assert.equal((await post('/validate', review(goodServer()))).status, 200);
  });

  it('serves a renewed certificate once the files change; a broken pair leaves the previous one', async () => {
    assert.equal((await post('/validate', review(goodServer()))).peerCn, 'CN=first');
    // A key that does not match: ignored.
    writeFileSync(join(dir, 'tls.crt'), readFileSync(join(dir, 'second.crt')));
    await new Promise((r) => setTimeout(r, 400));
    assert.equal((await post('/validate', review(goodServer()))).peerCn, 'CN=first');
    writeFileSync(join(dir, 'tls.key'), readFileSync(join(dir, 'second.key')));
    const deadline = Date.now() + 10_000;
    let cn = (await post('/validate', review(goodServer()))).peerCn;
    while (Date.now() < deadline && cn !== 'CN=second') {
      await new Promise((r) => setTimeout(r, 50));
      cn = (await post('/validate', review(goodServer()))).peerCn;
    }
    assert.equal(cn, 'CN=second');
  });

  it('refuses to start with a key that does not match the certificate (ERR_WEBHOOK_TLS)', async () => {
    await assert.rejects(
      startWebhookServer({ certFile: join(dir, 'first.crt'), keyFile: join(dir, 'second.key'), port: 0, validate: {} }),
      (e: unknown) => e instanceof WebhookTlsError && e.code === 'ERR_WEBHOOK_TLS',
    );
  });
});
