import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, rmSync, utimesSync, writeFileSync } from 'node:fs';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { inClusterConfig, KubeApiError, KubeClient, type KubeConfig, LineDecoder, loadKubeconfig, type WatchEvent } from './client.js';

const b64 = (s: string) => Buffer.from(s).toString('base64');

describe('loadKubeconfig', () => {
  let dir: string;
  before(() => {
    dir = mkdtempSync(join(tmpdir(), 'ward-kubeconfig-'));
    mkdirSync(join(dir, 'pki'));
    writeFileSync(join(dir, 'pki', 'ca.crt'), 'CA FILE PEM\n');
    writeFileSync(join(dir, 'pki', 'admin.crt'), 'CERT FILE PEM\n');
    writeFileSync(join(dir, 'pki', 'admin.key'), 'KEY FILE PEM\n');
    writeFileSync(join(dir, 'token'), 'file-token\n');
  });
  after(() => rmSync(dir, { recursive: true, force: true }));

  const write = (name: string, text: string) => {
    const p = join(dir, name);
    writeFileSync(p, text);
    return p;
  };

  it('reads a token user with a CA file relative to the kubeconfig', () => {
    const p = write(
      'token.yaml',
      `apiVersion: v1
kind: Config
clusters:
- name: c
  cluster: {server: "https://127.0.0.1:6443/", certificate-authority: pki/ca.crt}
users:
- name: u
  user: {token: abc123}
contexts:
- name: x
  context: {cluster: c, user: u, namespace: demo}
current-context: x
`,
    );
    assert.deepEqual(loadKubeconfig(p), {
      server: 'https://127.0.0.1:6443',
      ca: 'CA FILE PEM\n',
      token: { value: 'abc123' },
      namespace: 'demo',
      insecureSkipTlsVerify: false,
    });
  });

  it('reads client certificate data, CA data and a token file; namespace defaults to default', () => {
    const p = write(
      'cert.yaml',
      `clusters:
- name: c
  cluster:
    server: https://k.example:443
    certificate-authority-data: ${b64('CA DATA')}
users:
- name: u
  user:
    client-certificate-data: ${b64('CERT DATA')}
    client-key-data: ${b64('KEY DATA')}
- name: f
  user:
    client-certificate: pki/admin.crt
    client-key: pki/admin.key
    tokenFile: token
contexts:
- {name: x, context: {cluster: c, user: u}}
- {name: y, context: {cluster: c, user: f}}
current-context: x
`,
    );
    assert.deepEqual(loadKubeconfig(p), {
      server: 'https://k.example:443',
      ca: 'CA DATA',
      clientCert: 'CERT DATA',
      clientKey: 'KEY DATA',
      namespace: 'default',
      insecureSkipTlsVerify: false,
    });
    assert.deepEqual(loadKubeconfig(p, { context: 'y' }), {
      server: 'https://k.example:443',
      ca: 'CA DATA',
      token: { file: join(dir, 'token') },
      clientCert: 'CERT FILE PEM\n',
      clientKey: 'KEY FILE PEM\n',
      namespace: 'default',
      insecureSkipTlsVerify: false,
    });
  });

  it('merges the files of $KUBECONFIG, the first one winning', () => {
    const a = write('a.yaml', `current-context: x\ncontexts:\n- {name: x, context: {cluster: c, user: u}}\nusers:\n- {name: u, user: {token: first}}\n`);
    const b = write('b.yaml', `current-context: other\nclusters:\n- {name: c, cluster: {server: "https://b:1"}}\nusers:\n- {name: u, user: {token: second}}\n`);
    const cfg = loadKubeconfig(undefined, { env: { KUBECONFIG: `${a}:${join(dir, 'missing.yaml')}:${b}` } });
    assert.equal(cfg.server, 'https://b:1');
    assert.deepEqual(cfg.token, { value: 'first' });
  });

  it('refuses insecure-skip-tls-verify unless allowed', () => {
    const p = write(
      'insecure.yaml',
      `clusters:\n- {name: c, cluster: {server: "https://h:1", insecure-skip-tls-verify: true}}\ncontexts:\n- {name: x, context: {cluster: c}}\ncurrent-context: x\n`,
    );
    assert.throws(
      () => loadKubeconfig(p),
      (e: unknown) => (e as { code?: string }).code === 'ERR_KUBE_CONFIG' && /insecure-skip-tls-verify/.test((e as Error).message),
    );
    assert.equal(loadKubeconfig(p, { allowInsecure: true }).insecureSkipTlsVerify, true);
  });

  it('names what is missing or unsupported', () => {
    const cases: [string, RegExp][] = [
      ['contexts:\n- {name: x, context: {cluster: c}}\n', /no current-context/],
      ['current-context: x\n', /no context "x"/],
      ['current-context: x\ncontexts:\n- {name: x, context: {cluster: c}}\n', /no cluster "c"/],
      ['current-context: x\ncontexts:\n- {name: x, context: {cluster: c}}\nclusters:\n- {name: c, cluster: {}}\n', /has no server/],
      [
        'current-context: x\ncontexts:\n- {name: x, context: {cluster: c, user: u}}\nclusters:\n- {name: c, cluster: {server: "https://h"}}\nusers:\n- {name: u, user: {exec: {command: aws}}}\n',
        /exec plugin/,
      ],
      [
        'current-context: x\ncontexts:\n- {name: x, context: {cluster: c}}\nclusters:\n- {name: c, cluster: {server: "https://h", certificate-authority: nope.crt}}\n',
        /cannot read certificate-authority/,
      ],
    ];
    for (const [i, [text, re]] of cases.entries()) {
      const p = write(`bad-${i}.yaml`, text);
      assert.throws(() => loadKubeconfig(p), re, text);
    }
    assert.throws(() => loadKubeconfig(join(dir, 'nothing.yaml')), /cannot read kubeconfig/);
  });
});

describe('inClusterConfig', () => {
  it('reads the ServiceAccount directory and the service env', () => {
    const dir = mkdtempSync(join(tmpdir(), 'ward-sa-'));
    try {
      writeFileSync(join(dir, 'ca.crt'), 'SA CA');
      writeFileSync(join(dir, 'token'), 'tok');
      writeFileSync(join(dir, 'namespace'), 'linkerd\n');
      assert.deepEqual(inClusterConfig({ dir, env: { KUBERNETES_SERVICE_HOST: 'fd00::1', KUBERNETES_SERVICE_PORT: '443' } }), {
        server: 'https://[fd00::1]:443',
        ca: 'SA CA',
        token: { file: join(dir, 'token') },
        namespace: 'linkerd',
        insecureSkipTlsVerify: false,
      });
      assert.throws(() => inClusterConfig({ dir, env: {} }), /KUBERNETES_SERVICE_HOST/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe('LineDecoder', () => {
  it('frames lines split across chunks, including inside a multi-byte character', () => {
    const text = '{"a":"é€"}\n{"b":2}\n\n{"c":3}\n';
    const bytes = Buffer.from(text);
    for (let step = 1; step <= bytes.length; step++) {
      const d = new LineDecoder();
      const lines: string[] = [];
      for (let i = 0; i < bytes.length; i += step) lines.push(...d.push(bytes.subarray(i, i + step)));
      assert.deepEqual(lines, ['{"a":"é€"}', '{"b":2}', '{"c":3}'], `step ${step}`);
      assert.equal(d.end(), undefined);
    }
  });

  it('returns an unterminated last line at the end', () => {
    const d = new LineDecoder();
    assert.deepEqual(d.push(Buffer.from('{"x":1}\n{"y"')), ['{"x":1}']);
    assert.deepEqual(d.push(Buffer.from(':2}')), []);
    assert.equal(d.end(), '{"y":2}');
  });

  it('rejects a line over the limit, whether it arrives in one chunk or many', () => {
    assert.throws(() => new LineDecoder(10).push(Buffer.from('0123456789A\n')), { code: 'ERR_KUBE_WATCH_STREAM' });
    const d = new LineDecoder(10);
    d.push(Buffer.from('012345'));
    assert.throws(() => d.push(Buffer.from('6789AB')), { code: 'ERR_KUBE_WATCH_STREAM' });
    assert.deepEqual(new LineDecoder(10).push(Buffer.from('0123456789\n')), ['0123456789']);
  });
});

describe('KubeClient over a real socket', () => {
  let server: Server;
  let base: string;
  let handler: (req: IncomingMessage, res: ServerResponse) => void = () => {};
  const seen: { method: string; url: string; auth: string | undefined; contentType: string | undefined; body: string }[] = [];
  before(async () => {
    server = createServer((req, res) => {
      const parts: Buffer[] = [];
      req.on('data', (c: Buffer) => parts.push(c));
      req.on('end', () => {
        seen.push({
          method: req.method ?? '',
          url: req.url ?? '',
          auth: req.headers.authorization,
          contentType: req.headers['content-type'],
          body: Buffer.concat(parts).toString(),
        });
        handler(req, res);
      });
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });
  after(async () => {
    server.closeAllConnections();
    await new Promise((r) => server.close(r));
  });
  const cfg = (over: Partial<KubeConfig> = {}): KubeConfig => ({
    server: base,
    namespace: 'default',
    insecureSkipTlsVerify: false,
    token: { value: 't0' },
    ...over,
  });
  const json = (res: ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}) => {
    res.writeHead(status, { 'content-type': 'application/json', ...headers });
    res.end(JSON.stringify(body));
  };

  it('sends JSON bodies, query and token; merge-patch by default for PATCH; strings as is', async () => {
    seen.length = 0;
    handler = (_req, res) => json(res, 201, { kind: 'Thing', ok: true });
    const c = new KubeClient(cfg());
    try {
      const r = await c.request({ method: 'POST', path: '/api/v1/namespaces/x/configmaps', query: { fieldManager: 'ward', dryRun: 'All' }, body: { a: 1 } });
      assert.equal(r.status, 201);
      assert.deepEqual(r.body, { kind: 'Thing', ok: true });
      await c.request({ method: 'PATCH', path: '/p', body: { b: 2 } });
      await c.request({ method: 'PATCH', path: '/q', body: 'status:\n  x: 1\n', contentType: 'application/apply-patch+yaml' });
      assert.deepEqual(seen, [
        {
          method: 'POST',
          url: '/api/v1/namespaces/x/configmaps?fieldManager=ward&dryRun=All',
          auth: 'Bearer t0',
          contentType: 'application/json',
          body: '{"a":1}',
        },
        { method: 'PATCH', url: '/p', auth: 'Bearer t0', contentType: 'application/merge-patch+json', body: '{"b":2}' },
        { method: 'PATCH', url: '/q', auth: 'Bearer t0', contentType: 'application/apply-patch+yaml', body: 'status:\n  x: 1\n' },
      ]);
    } finally {
      c.close();
    }
  });

  it('rejects non-2xx answers with the Status reason, message and retry-after', async () => {
    const c = new KubeClient(cfg());
    try {
      handler = (_req, res) =>
        json(res, 409, { kind: 'Status', status: 'Failure', reason: 'AlreadyExists', message: 'configmaps "a" already exists', code: 409 });
      await assert.rejects(c.request({ method: 'POST', path: '/x', body: {} }), (e: unknown) => {
        assert.ok(e instanceof KubeApiError);
        assert.equal(e.code, 'ERR_KUBE_API');
        assert.equal(e.status, 409);
        assert.equal(e.reason, 'AlreadyExists');
        assert.match(e.message, /configmaps "a" already exists/);
        assert.equal(e.retryAfterSeconds, undefined);
        return true;
      });
      handler = (_req, res) =>
        json(res, 429, { kind: 'Status', reason: 'TooManyRequests', message: 'storage is (re)initializing', details: { retryAfterSeconds: 1 }, code: 429 });
      await assert.rejects(c.request({ method: 'GET', path: '/y' }), { status: 429, reason: 'TooManyRequests', retryAfterSeconds: 1 });
      handler = (_req, res) => json(res, 503, { kind: 'Status', code: 503 }, { 'retry-after': '7' });
      await assert.rejects(c.request({ method: 'GET', path: '/z' }), { status: 503, reason: 'ServiceUnavailable', retryAfterSeconds: 7 });
    } finally {
      c.close();
    }
  });

  it('reports a refused connection as status 0', async () => {
    const c = new KubeClient(cfg({ server: 'http://127.0.0.1:1' }));
    try {
      await assert.rejects(c.request({ method: 'GET', path: '/' }), { code: 'ERR_KUBE_API', status: 0, reason: 'Transport' });
    } finally {
      c.close();
    }
  });

  it('re-reads a token file when it changes', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'ward-token-'));
    const file = join(dir, 'token');
    writeFileSync(file, 'first\n');
    handler = (_req, res) => json(res, 200, {});
    const c = new KubeClient(cfg({ token: { file } }));
    try {
      seen.length = 0;
      await c.request({ method: 'GET', path: '/a' });
      writeFileSync(file, 'second-token\n');
      utimesSync(file, new Date(), new Date(Date.now() + 5000));
      await new Promise((r) => setTimeout(r, 1100));
      await c.request({ method: 'GET', path: '/b' });
      assert.deepEqual(
        seen.map((s) => s.auth),
        ['Bearer first', 'Bearer second-token'],
      );
    } finally {
      c.close();
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('streams watch events written in odd chunks, and ends with the stream', async () => {
    const events = [
      { type: 'ADDED', object: { metadata: { name: 'a', resourceVersion: '5' }, data: { s: 'ü'.repeat(3000) } } },
      { type: 'BOOKMARK', object: { metadata: { resourceVersion: '6' } } },
      { type: 'DELETED', object: { metadata: { name: 'a', resourceVersion: '7' } } },
    ];
    const bytes = Buffer.from(events.map((e) => `${JSON.stringify(e)}\n`).join(''));
    handler = (_req, res) => {
      res.writeHead(200, { 'content-type': 'application/json' });
      let i = 0;
      const step = () => {
        if (i >= bytes.length) {
          res.end();
          return;
        }
        // Uneven chunk sizes, so lines and characters break across writes.
        const n = 1 + ((i * 7919) % 997);
        res.write(bytes.subarray(i, i + n));
        i += n;
        setImmediate(step);
      };
      step();
    };
    seen.length = 0;
    const c = new KubeClient(cfg());
    try {
      const got: WatchEvent[] = [];
      await c.watch('/api/v1/configmaps', { resourceVersion: '4', allowWatchBookmarks: 'true' }, (e) => got.push(e), new AbortController().signal);
      assert.deepEqual(got, events);
      assert.equal(seen[0]?.url, '/api/v1/configmaps?resourceVersion=4&allowWatchBookmarks=true&watch=true');
    } finally {
      c.close();
    }
  });

  it('fails a watch whose line exceeds the limit, and one whose connection breaks', async () => {
    const c = new KubeClient(cfg());
    try {
      handler = (_req, res) => {
        res.writeHead(200, { 'content-type': 'application/json' });
        res.write(`{"type":"ADDED","object":{"x":"${'a'.repeat(5000)}`);
      };
      await assert.rejects(
        c.watch('/w', {}, () => {}, new AbortController().signal, { maxLineBytes: 4096 }),
        { code: 'ERR_KUBE_WATCH_STREAM' },
      );
      const got: WatchEvent[] = [];
      handler = (_req, res) => {
        res.writeHead(200, { 'content-type': 'application/json' });
        res.write('{"type":"ADDED","object":{}}\n{"type":"MOD');
        setTimeout(() => res.socket?.destroy(), 20);
      };
      await assert.rejects(
        c.watch('/w', {}, (e) => got.push(e), new AbortController().signal),
        { code: 'ERR_KUBE_API', status: 0 },
      );
      assert.deepEqual(got, [{ type: 'ADDED', object: {} }]);
      handler = (_req, res) => json(res, 410, { kind: 'Status', reason: 'Expired', message: 'too old resource version: 1 (99)', code: 410 });
      await assert.rejects(
        c.watch('/w', {}, () => {}, new AbortController().signal),
        { status: 410, reason: 'Expired' },
      );
    } finally {
      c.close();
    }
  });

  it('resolves a watch when its signal aborts', async () => {
    handler = (_req, res) => {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.write('{"type":"ADDED","object":{"n":1}}\n');
    };
    const c = new KubeClient(cfg());
    try {
      const ac = new AbortController();
      const got: WatchEvent[] = [];
      const done = c.watch(
        '/w',
        {},
        (e) => {
          got.push(e);
          ac.abort();
        },
        ac.signal,
      );
      await done;
      assert.deepEqual(got, [{ type: 'ADDED', object: { n: 1 } }]);
    } finally {
      c.close();
    }
  });
});
