import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { appendFileSync, chmodSync, copyFileSync, cpSync, mkdirSync, mkdtempSync, renameSync, rmSync, symlinkSync, truncateSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { after, afterEach, describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { type InboundServer, parseCidr } from '../core/index.js';
import { type ClusterConfig, PolicyIndex } from '../index/index.js';
import { admitDocuments, dedupeResources, loadManifests, namespacesOf, podsOf, type Resource, type ResourceKey } from '../manifest/index.js';
import { createLogger } from '../shared/index.js';
import { type ChangeSummary, DirectorySource, type DirectorySourceOptions, EMPTY_FILE_GRACE_MS, type SourceSink } from './directory-source.js';

// === fixtures ===

const net = (cidr: string) => ({ net: parseCidr(cidr)!, except: [] });
const CONFIG: ClusterConfig = {
  defaultPolicy: 'all-unauthenticated',
  clusterNetworks: ['10.0.0.0/8', '172.16.0.0/12', '192.168.0.0/16'].map(net),
  probeNetworks: [net('0.0.0.0/0'), net('::/0')],
  trustDomain: 'cluster.local',
  controlPlaneNamespace: 'linkerd',
};

const NAMESPACE = (annotations: Record<string, string> = {}) => `apiVersion: v1
kind: Namespace
metadata:
  name: app
  annotations: ${JSON.stringify({ 'linkerd.io/inject': 'enabled', ...annotations })}
`;

const DEPLOYMENT = (o: { replicas?: number; name?: string; labels?: Record<string, string> } = {}) => `apiVersion: apps/v1
kind: Deployment
metadata: {namespace: app, name: ${o.name ?? 'web'}}
spec:
  replicas: ${o.replicas ?? 1}
  selector: {matchLabels: {app: ${o.name ?? 'web'}}}
  template:
    metadata: {labels: ${JSON.stringify(o.labels ?? { app: o.name ?? 'web' })}}
    spec:
      containers:
      - name: app
        ports: [{name: http, containerPort: 8080}]
`;

const SERVER = (o: { name?: string; protocol?: string; app?: string; port?: number | string } = {}) => `apiVersion: policy.linkerd.io/v1beta3
kind: Server
metadata: {namespace: app, name: ${o.name ?? 'web-http'}}
spec:
  podSelector: {matchLabels: {app: ${o.app ?? 'web'}}}
  port: ${o.port ?? 8080}
  proxyProtocol: ${o.protocol ?? 'HTTP/1'}
`;

const AUTHZ = (name: string, server = 'web-http') => `apiVersion: policy.linkerd.io/v1alpha1
kind: AuthorizationPolicy
metadata: {namespace: app, name: ${name}}
spec:
  targetRef: {group: policy.linkerd.io, kind: Server, name: ${server}}
  requiredAuthenticationRefs: []
`;

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
const IS_ROOT = process.getuid?.() === 0;

// === helpers ===

const dirs: string[] = [];
const sources: DirectorySource[] = [];
afterEach(() => {
  for (const s of sources.splice(0)) s.stop();
});
after(() => {
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

/** Polls `predicate` every 10 ms; fails after `timeoutMs`. */
async function waitFor(predicate: () => boolean, timeoutMs = 5000, what = 'the condition'): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!predicate()) {
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await sleep(10);
  }
}

function tempDir(): string {
  const d = mkdtempSync(join(tmpdir(), 'ward-dirsrc-'));
  dirs.push(d);
  return d;
}

function write(dir: string, rel: string, text: string | Buffer): void {
  mkdirSync(dirname(join(dir, rel)), { recursive: true });
  writeFileSync(join(dir, rel), text);
}

/** Writes through a temporary file and a rename, as editors and `kubectl`-style tools do. */
function writeAtomic(dir: string, rel: string, text: string): void {
  const tmp = join(dir, `.${rel.replaceAll('/', '_')}.tmp`);
  writeFileSync(tmp, text);
  renameSync(tmp, join(dir, rel));
}

interface Harness {
  readonly dir: string;
  readonly index: PolicyIndex;
  readonly source: DirectorySource;
  readonly changes: ChangeSummary[];
  readonly logs: Record<string, unknown>[];
  /** The policy of (app, pod, port). */
  policy(pod: string, port?: number): InboundServer | undefined;
  /** Resolves after the next batch that read or removed `file` (relative). */
  nextBatch(file?: string): Promise<ChangeSummary>;
}

async function startSource(files: Record<string, string>, opts: Partial<DirectorySourceOptions> & { dir?: string } = {}): Promise<Harness> {
  const dir = opts.dir ?? tempDir();
  for (const [rel, text] of Object.entries(files)) write(dir, rel, text);
  const index = new PolicyIndex(CONFIG);
  const changes: ChangeSummary[] = [];
  const logs: Record<string, unknown>[] = [];
  const waiters: { file: string | undefined; resolve: (c: ChangeSummary) => void }[] = [];
  const logger = createLogger({ level: 'info', destination: { write: (line: string) => void logs.push(JSON.parse(line) as Record<string, unknown>) } });
  const source = new DirectorySource({
    dir,
    config: { controlPlaneNamespace: CONFIG.controlPlaneNamespace },
    sink: index,
    logger,
    debounceMs: 30,
    ...opts,
    onChange: (c) => {
      changes.push(c);
      for (const w of waiters.splice(0)) {
        if (w.file === undefined || c.files.includes(join(dir, w.file))) w.resolve(c);
        else waiters.push(w);
      }
    },
  });
  sources.push(source);
  await source.start();
  return {
    dir,
    index,
    source,
    changes,
    logs,
    policy: (pod, port = 8080) => index.lookup('app', pod, port)?.value,
    nextBatch: (file) =>
      Promise.race([
        new Promise<ChangeSummary>((resolve) => waiters.push({ file, resolve })),
        sleep(5000).then(() => Promise.reject(new Error(`no batch for ${file ?? 'any file'} within 5000 ms`))),
      ]),
  };
}

function statusOf(h: Harness, rel: string) {
  const st = h.source.status().find((s) => s.file === join(h.dir, rel));
  assert.ok(st !== undefined, `no status for ${rel}`);
  return st;
}

const serverKey = (name: string): ResourceKey => ({ kind: 'Server', group: '', namespace: 'app', name });

// === tests ===

describe('DirectorySource', () => {
  it('loads the directory into the index in one transaction', async () => {
    const dir = tempDir();
    write(dir, 'ns.yaml', NAMESPACE());
    write(dir, 'apps/web.yaml', DEPLOYMENT({ replicas: 2 }));
    write(dir, 'policy/server.yml', `${SERVER()}---\n${AUTHZ('web-everyone')}`);
    write(dir, 'policy/ignored.json', JSON.stringify({ apiVersion: 'v1', kind: 'ConfigMap', metadata: { name: 'x' } }));
    write(dir, '.hidden/evil.yaml', SERVER({ protocol: 'opaque' }));
    write(dir, 'policy/server.yaml~', SERVER({ protocol: 'opaque' }));
    write(dir, 'README.md', '# not a manifest');
    let transactions = 0;
    const index = new PolicyIndex(CONFIG);
    const sink: SourceSink = {
      update: (fn) => {
        transactions++;
        index.update(fn);
      },
    };
    const h = await startSource({}, { dir, sink });
    assert.equal(transactions, 1);
    assert.equal(index.lookup('app', 'web-0', 8080)?.value.meta.name, 'web-http');
    assert.equal(index.lookup('app', 'web-1', 8080)?.value.protocol.kind, 'http1');
    assert.deepEqual(
      index.lookup('app', 'web-1', 8080)?.value.authorizations.map((a) => a.meta.name),
      ['web-everyone'],
    );
    assert.deepEqual(
      h.source.status().map((s) => [s.file.slice(dir.length + 1), s.ok, s.resources.length]),
      [
        ['apps/web.yaml', true, 1],
        ['ns.yaml', true, 1],
        ['policy/ignored.json', true, 0],
        ['policy/server.yml', true, 2],
      ],
    );
    assert.equal(h.changes.length, 1);
    assert.equal(h.changes[0]?.files.length, 4);
    assert.equal(h.source.lastChangeStartedAt, h.changes[0]?.startedAtMs);
  });

  it('applies an edit to the cells that depend on it, and only the objects that changed', async () => {
    const h = await startSource({ 'ns.yaml': NAMESPACE(), 'web.yaml': DEPLOYMENT(), 'policy.yaml': `${SERVER()}---\n${AUTHZ('a')}` });
    const cell = h.index.lookup('app', 'web-0', 8080);
    assert.ok(cell !== undefined);
    const seen: InboundServer[] = [];
    cell.subscribe((v) => seen.push(v));
    const batch = h.nextBatch('policy.yaml');
    write(h.dir, 'policy.yaml', `${SERVER({ protocol: 'opaque' })}---\n${AUTHZ('a')}`);
    const c = await batch;
    assert.equal(c.applied, 1, 'only the Server changed');
    assert.equal(c.deleted, 0);
    assert.ok(c.startedAtMs <= Date.now());
    await waitFor(() => seen.length > 0, 5000, 'the cell to change');
    assert.equal(cell.value.protocol.kind, 'opaque');
    assert.equal(h.source.lastChangeStartedAt, c.startedAtMs);

    // Inserting lines above an object moves it but does not change it: nothing is applied.
    const moved = h.nextBatch('policy.yaml');
    writeAtomic(h.dir, 'policy.yaml', `# a comment\n\n${SERVER({ protocol: 'opaque' })}---\n${AUTHZ('a')}`);
    assert.deepEqual([(await moved).applied, (await moved).deleted], [0, 0]);
  });

  it('adds and deletes files', async () => {
    const h = await startSource({ 'ns.yaml': NAMESPACE(), 'web.yaml': DEPLOYMENT() });
    assert.equal(h.policy('web-0')?.meta.kind, 'default');
    write(h.dir, 'more/deeper/server.yaml', SERVER());
    await waitFor(() => h.policy('web-0')?.meta.name === 'web-http', 5000, 'the new Server');
    write(h.dir, 'api.yaml', DEPLOYMENT({ name: 'api' }));
    await waitFor(() => h.policy('api-0') !== undefined, 5000, 'the new pod');
    rmSync(join(h.dir, 'more'), { recursive: true });
    await waitFor(() => h.policy('web-0')?.meta.kind === 'default', 5000, 'the Server to go');
    rmSync(join(h.dir, 'api.yaml'));
    await waitFor(() => h.policy('api-0') === undefined, 5000, 'the pod to go');
    assert.deepEqual(
      h.source.status().map((s) => s.file),
      [join(h.dir, 'ns.yaml'), join(h.dir, 'web.yaml')],
    );
  });

  it('gives a file that turned empty a grace period: a slow truncate-then-write never withdraws its objects', async () => {
    const h = await startSource({ 'ns.yaml': NAMESPACE(), 'web.yaml': DEPLOYMENT(), 'server.yaml': SERVER() });
    assert.equal(h.policy('web-0')?.meta.name, 'web-http');
    const seen: string[] = [];
    const poll = setInterval(() => seen.push(h.policy('web-0')?.meta.kind ?? 'none'), 5);
    try {
      // An editor (or a busy machine) that truncates, then writes well after the debounce.
      writeFileSync(join(h.dir, 'server.yaml'), '');
      await sleep(150);
      writeFileSync(join(h.dir, 'server.yaml'), SERVER());
      await sleep(EMPTY_FILE_GRACE_MS + 200);
    } finally {
      clearInterval(poll);
    }
    assert.ok(seen.length > 20);
    assert.deepEqual([...new Set(seen)], ['server'], 'the Server was withdrawn while its file was being rewritten');
    // A file that stays empty really was emptied.
    writeFileSync(join(h.dir, 'server.yaml'), '');
    const t0 = Date.now();
    await waitFor(() => h.policy('web-0')?.meta.kind === 'default', 5000, 'the Server to go');
    assert.ok(Date.now() - t0 >= EMPTY_FILE_GRACE_MS - 50, `withdrawn after ${Date.now() - t0} ms`);
  });

  it('keeps the last good policy through a YAML syntax error, reports it with file:line:col, and applies the fix', async () => {
    const h = await startSource({ 'ns.yaml': NAMESPACE(), 'web.yaml': DEPLOYMENT(), 'policy.yaml': `${SERVER()}---\n${AUTHZ('a')}` });
    const before = h.policy('web-0');
    assert.equal(before?.meta.name, 'web-http');
    const broken = h.nextBatch('policy.yaml');
    write(h.dir, 'policy.yaml', `${SERVER({ protocol: 'opaque' })}---\n${AUTHZ('a')}  extra: [unterminated\n`);
    await broken;
    const st = statusOf(h, 'policy.yaml');
    assert.equal(st.ok, false);
    const syntax = st.diagnostics.find((d) => d.code === 'POL001');
    assert.ok(
      syntax?.source !== undefined && syntax.source.file === join(h.dir, 'policy.yaml') && syntax.source.line > 0 && syntax.source.col > 0,
      JSON.stringify(syntax),
    );
    assert.ok(st.lastErrorAt !== undefined && st.lastGoodAt !== undefined);
    // The broken document's objects stay; (the valid one around it is applied).
    assert.deepEqual(st.retained, [{ kind: 'AuthorizationPolicy', group: '', namespace: 'app', name: 'a' }]);
    assert.deepEqual(
      h.policy('web-0')?.authorizations.map((a) => a.meta.name),
      ['a'],
    );
    const warnings = h.logs.filter((l) => l.level === 40 && l.file === join(h.dir, 'policy.yaml'));
    assert.equal(warnings.length, 1);
    assert.ok(
      ((warnings[0]?.diagnostics ?? []) as string[]).some((d) => d.startsWith(`${join(h.dir, 'policy.yaml')}:`) && d.includes('POL001')),
      JSON.stringify(warnings[0]),
    );

    // The same broken content again, and a rescan: no new warning.
    write(h.dir, 'policy.yaml', `${SERVER({ protocol: 'opaque' })}---\n${AUTHZ('a')}  extra: [unterminated\n`);
    await sleep(150);
    h.source.rescan();
    assert.equal(h.logs.filter((l) => l.level === 40 && l.file === join(h.dir, 'policy.yaml')).length, 1);

    // A whole file that does not parse keeps everything.
    write(h.dir, 'policy.yaml', '{{{{ this is: [not yaml');
    await waitFor(() => statusOf(h, 'policy.yaml').retained.length === 2, 5000, 'both objects retained');
    assert.equal(h.policy('web-0')?.meta.name, 'web-http');

    write(h.dir, 'policy.yaml', `${SERVER({ protocol: 'HTTP/2' })}---\n${AUTHZ('b')}`);
    await waitFor(() => h.policy('web-0')?.protocol.kind === 'http2', 5000, 'the fix');
    assert.deepEqual(
      h.policy('web-0')?.authorizations.map((a) => a.meta.name),
      ['b'],
    );
    const fixed = statusOf(h, 'policy.yaml');
    assert.equal(fixed.ok, true);
    assert.deepEqual(fixed.retained, []);
    assert.deepEqual(fixed.diagnostics, []);
  });

  it('keeps the last good version of a document that stops validating', async () => {
    const h = await startSource({ 'ns.yaml': NAMESPACE(), 'web.yaml': DEPLOYMENT(), 'policy.yaml': `${SERVER()}---\n${AUTHZ('a')}` });
    // A schema error in the Server, and a document whose kind cannot be read any more.
    write(h.dir, 'policy.yaml', `${SERVER({ protocol: 'HTTP/9' })}---\n${AUTHZ('a')}`);
    await waitFor(() => !statusOf(h, 'policy.yaml').ok, 5000, 'the error');
    const st = statusOf(h, 'policy.yaml');
    assert.deepEqual(st.retained, [serverKey('web-http')]);
    const err = st.diagnostics.find((d) => d.severity === 'error');
    assert.equal(err?.resource?.name, 'web-http');
    assert.ok((err?.source?.line ?? 0) > 0);
    assert.equal(h.policy('web-0')?.protocol.kind, 'http1');

    // Admission rejects it (a port name that is not a valid name): still the last good version.
    write(h.dir, 'policy.yaml', `${SERVER({ port: '"Not_A_Name"', protocol: 'opaque' })}---\n${AUTHZ('a')}`);
    await waitFor(() => statusOf(h, 'policy.yaml').diagnostics.some((d) => d.code === 'POL025'), 5000, 'the rejection');
    assert.deepEqual(statusOf(h, 'policy.yaml').retained, [serverKey('web-http')]);
    assert.equal(h.policy('web-0')?.protocol.kind, 'http1');

    // A document that is not a Kubernetes object at all: the file's objects all stay.
    write(h.dir, 'policy.yaml', `- just\n- a list\n---\n${AUTHZ('a')}`);
    await waitFor(() => statusOf(h, 'policy.yaml').diagnostics.some((d) => d.code === 'POL002'), 5000, 'POL002');
    assert.deepEqual(statusOf(h, 'policy.yaml').retained, [serverKey('web-http')]);
    assert.equal(h.policy('web-0')?.meta.name, 'web-http');

    // Valid again, and the Server really removed: it goes.
    write(h.dir, 'policy.yaml', AUTHZ('a'));
    await waitFor(() => h.policy('web-0')?.meta.kind === 'default', 5000, 'the Server to go');
    assert.equal(statusOf(h, 'policy.yaml').ok, true);
  });

  it('lets the last file in path order win a duplicated object, and restores the other on delete', async () => {
    const h = await startSource({
      'ns.yaml': NAMESPACE(),
      'web.yaml': DEPLOYMENT(),
      'a/server.yaml': SERVER({ protocol: 'HTTP/2' }),
      'b/server.yaml': SERVER({ protocol: 'opaque' }),
    });
    assert.equal(h.policy('web-0')?.protocol.kind, 'opaque');
    const dup = statusOf(h, 'a/server.yaml').diagnostics.find((d) => d.code === 'POL006');
    assert.ok(dup !== undefined, 'POL006 on the losing file');
    assert.ok(dup.message.includes(join(h.dir, 'b/server.yaml')), dup.message);
    assert.equal(statusOf(h, 'a/server.yaml').ok, true, 'a warning only');
    assert.deepEqual(statusOf(h, 'b/server.yaml').diagnostics, []);

    rmSync(join(h.dir, 'b/server.yaml'));
    await waitFor(() => h.policy('web-0')?.protocol.kind === 'http2', 5000, 'the other definition');
    assert.deepEqual(statusOf(h, 'a/server.yaml').diagnostics, []);
    rmSync(join(h.dir, 'a/server.yaml'));
    await waitFor(() => h.policy('web-0')?.meta.kind === 'default', 5000, 'no Server');
  });

  it('fixes the default policy of a pod at its creation: a later namespace annotation reaches only new pods', async () => {
    const h = await startSource({ 'ns.yaml': NAMESPACE(), 'web.yaml': DEPLOYMENT({ replicas: 1 }) });
    assert.equal(h.policy('web-0')?.meta.name, 'all-unauthenticated');
    const batch = h.nextBatch('ns.yaml');
    write(h.dir, 'ns.yaml', NAMESPACE({ 'config.linkerd.io/default-inbound-policy': 'deny' }));
    const c = await batch;
    assert.equal(c.applied, 1, 'the Namespace only');
    assert.equal(h.policy('web-0')?.meta.name, 'all-unauthenticated');

    write(h.dir, 'web.yaml', DEPLOYMENT({ replicas: 2 }));
    await waitFor(() => h.policy('web-1') !== undefined, 5000, 'the new pod');
    assert.equal(h.policy('web-1')?.meta.name, 'deny');
    assert.equal(h.policy('web-0')?.meta.name, 'all-unauthenticated');

    // A new template recreates every pod.
    write(h.dir, 'web.yaml', DEPLOYMENT({ replicas: 2, labels: { app: 'web', version: 'v2' } }));
    await waitFor(() => h.policy('web-0')?.meta.name === 'deny', 5000, 'the recreated pod');
    assert.equal(h.policy('web-1')?.meta.name, 'deny');
  });

  it('names pods after their template with template-hash names: a template edit makes new pods and deletes the old', async () => {
    const annotated = (policy: string) =>
      DEPLOYMENT({ replicas: 2 }).replace(
        'metadata: {labels: {"app":"web"}}',
        `metadata: {labels: {app: web}, annotations: {config.linkerd.io/default-inbound-policy: ${policy}}}`,
      );
    const h = await startSource({ 'ns.yaml': NAMESPACE(), 'web.yaml': annotated('deny') }, { podNames: 'template-hash' });
    const pods = () =>
      h.index
        .pods()
        .map((p) => p.name)
        .sort();
    const before = pods();
    assert.equal(before.length, 2);
    assert.match(before[0] ?? '', /^web-[a-z0-9]+-0$/);
    assert.equal(before[1], (before[0] ?? '').replace(/-0$/, '-1'));
    for (const p of before) assert.equal(h.policy(p)?.meta.name, 'deny');

    // The same template written again keeps the pods.
    const same = h.nextBatch('web.yaml');
    write(h.dir, 'web.yaml', `# rewritten\n${annotated('deny')}`);
    await same;
    assert.deepEqual(pods(), before);

    write(h.dir, 'web.yaml', annotated('all-authenticated'));
    await waitFor(() => !pods().includes(before[0] ?? ''), 5000, 'the old pods to go');
    const after = pods();
    assert.equal(after.length, 2);
    for (const p of after) {
      assert.ok(!before.includes(p), `${p} is a new pod`);
      assert.equal(h.policy(p)?.meta.name, 'all-authenticated');
    }
  });

  it('debounces a burst of writes into few batches', async () => {
    const h = await startSource({ 'ns.yaml': NAMESPACE(), 'web.yaml': DEPLOYMENT(), 'policy.yaml': AUTHZ('a0') }, { debounceMs: 50 });
    const before = h.changes.length;
    for (let i = 1; i <= 100; i++) write(h.dir, 'policy.yaml', `${SERVER()}---\n${AUTHZ(`a${i}`)}`);
    await waitFor(() => h.policy('web-0')?.authorizations[0]?.meta.name === 'a100', 5000, 'the last write');
    await sleep(200);
    const batches = h.changes.length - before;
    assert.ok(batches >= 1 && batches <= 5, `${batches} batches`);
    assert.equal(statusOf(h, 'policy.yaml').resources.length, 2);
  });

  it('reports files that cannot be read or parsed without disturbing anything else', async () => {
    const h = await startSource({ 'ns.yaml': NAMESPACE(), 'web.yaml': DEPLOYMENT(), 'policy.yaml': SERVER() }, { maxFileBytes: 64 * 1024 });
    write(h.dir, 'garbage.yaml', randomBytes(32 * 1024));
    write(h.dir, 'huge.yaml', `# ${'x'.repeat(100 * 1024)}\n`);
    mkdirSync(join(h.dir, 'dir.yaml'));
    write(h.dir, 'dir.yaml/inner.yaml', AUTHZ('inner'));
    symlinkSync('loop.yaml', join(h.dir, 'loop.yaml'));
    symlinkSync('missing.yaml', join(h.dir, 'dangling.yaml'));
    write(h.dir, 'locked.yaml', AUTHZ('locked'));
    chmodSync(join(h.dir, 'locked.yaml'), 0);
    await waitFor(() => h.source.status().length === 9, 5000, 'all files');
    await waitFor(() => h.policy('web-0')?.authorizations.some((a) => a.meta.name === 'inner') === true, 5000, 'the file inside dir.yaml');
    const bad = h.source
      .status()
      .filter((s) => !s.ok)
      .map((s) => s.file.slice(h.dir.length + 1));
    assert.deepEqual(bad, ['dangling.yaml', 'garbage.yaml', 'huge.yaml', ...(IS_ROOT ? [] : ['locked.yaml']), 'loop.yaml']);
    assert.equal(statusOf(h, 'huge.yaml').diagnostics[0]?.code, 'POL003');
    assert.equal(statusOf(h, 'loop.yaml').diagnostics[0]?.code, 'POL003');
    assert.equal(h.policy('web-0')?.meta.name, 'web-http');
    // Unreadable files that become readable are picked up (chmod changes the fingerprint).
    chmodSync(join(h.dir, 'locked.yaml'), 0o644);
    await waitFor(() => h.policy('web-0')?.authorizations.some((a) => a.meta.name === 'locked') === true, 5000, 'the unlocked file');
  });

  it('heals changes missed by the watcher with the periodic rescan', async () => {
    const h = await startSource({ 'ns.yaml': NAMESPACE(), 'web.yaml': DEPLOYMENT(), 'policy.yaml': SERVER() }, { watch: false, rescanIntervalMs: 100 });
    assert.equal(h.source.watching, false);
    write(h.dir, 'policy.yaml', SERVER({ protocol: 'opaque' }));
    await waitFor(() => h.policy('web-0')?.protocol.kind === 'opaque', 5000, 'the rescan');
    rmSync(join(h.dir, 'policy.yaml'));
    await waitFor(() => h.policy('web-0')?.meta.kind === 'default', 5000, 'the removal');
  });

  it('retries a batch the sink failed to apply, even when no file changes again', async () => {
    const index = new PolicyIndex(CONFIG);
    let failNext = false;
    const sink = {
      update(fn: Parameters<PolicyIndex['update']>[0]) {
        if (failNext) {
          failNext = false;
          throw new Error('sink hiccup');
        }
        index.update(fn);
      },
    };
    const h = await startSource({ 'ns.yaml': NAMESPACE(), 'web.yaml': DEPLOYMENT(), 'policy.yaml': SERVER() }, { watch: false, rescanIntervalMs: 0, sink });
    const policy = () => index.lookup('app', 'web-0', 8080)?.value;
    assert.equal(policy()?.protocol.kind, 'http1');
    failNext = true;
    write(h.dir, 'policy.yaml', SERVER({ protocol: 'opaque' }));
    h.source.rescan();
    assert.equal(policy()?.protocol.kind, 'http1', 'the failed batch did not apply');
    assert.ok(h.logs.some((l) => String(l.msg).includes('the sink failed')));
    h.source.rescan();
    assert.equal(policy()?.protocol.kind, 'opaque', 'the next batch applied the same change');
  });

  it('rescans on demand', async () => {
    const h = await startSource({ 'ns.yaml': NAMESPACE(), 'web.yaml': DEPLOYMENT(), 'policy.yaml': SERVER() }, { watch: false, rescanIntervalMs: 0 });
    write(h.dir, 'policy.yaml', SERVER({ protocol: 'opaque' }));
    await sleep(100);
    assert.equal(h.policy('web-0')?.protocol.kind, 'http1');
    h.source.rescan();
    assert.equal(h.policy('web-0')?.protocol.kind, 'opaque');
    assert.deepEqual(h.changes.at(-1)?.files, [join(h.dir, 'policy.yaml')]);
  });

  it('keeps the state while the directory is gone and reloads it when it comes back', async () => {
    const h = await startSource({ 'ns.yaml': NAMESPACE(), 'web.yaml': DEPLOYMENT(), 'policy.yaml': SERVER() }, { rescanIntervalMs: 200, maxDelayMs: 300 });
    assert.equal(h.source.watching, true);
    rmSync(h.dir, { recursive: true });
    await waitFor(() => h.logs.some((l) => l.level === 40 && String(l.msg).includes('gone')), 5000, 'the warning');
    assert.equal(h.policy('web-0')?.meta.name, 'web-http');
    mkdirSync(h.dir);
    write(h.dir, 'ns.yaml', NAMESPACE());
    write(h.dir, 'web.yaml', DEPLOYMENT());
    write(h.dir, 'policy.yaml', SERVER({ protocol: 'opaque' }));
    await waitFor(() => h.policy('web-0')?.protocol.kind === 'opaque', 5000, 'the reload');
    await waitFor(() => h.source.watching, 5000, 'the watcher to restart');
    // Watched again: an edit arrives through the watcher.
    write(h.dir, 'policy.yaml', SERVER({ protocol: 'HTTP/2' }));
    await waitFor(() => h.policy('web-0')?.protocol.kind === 'http2', 5000, 'the edit');
  });

  it('rejects a directory that does not exist, and stops cleanly', async () => {
    const source = new DirectorySource({ dir: join(tempDir(), 'nope'), config: { controlPlaneNamespace: 'linkerd' }, sink: new PolicyIndex(CONFIG) });
    await assert.rejects(source.start(), (e: unknown) => (e as { code?: string }).code === 'ERR_SOURCE_DIR');
    source.stop();
  });

  it('produces the same index as the offline pipeline on the emojivoto example', async () => {
    const dir = tempDir();
    cpSync(join(ROOT, 'examples/emojivoto/app'), join(dir, 'app'), { recursive: true });
    cpSync(join(ROOT, 'examples/emojivoto/policy'), join(dir, 'policy'), { recursive: true });
    const h = await startSource({}, { dir });

    const loaded = loadManifests([dir]);
    const unique = dedupeResources(admitDocuments(loaded.documents).admitted).resources;
    const { pods } = podsOf(unique, namespacesOf(unique), { controlPlaneNamespace: CONFIG.controlPlaneNamespace });
    const offline = new PolicyIndex(CONFIG);
    offline.update((tx) => {
      for (const r of [...unique.filter((r: Resource) => r.kind !== 'Pod'), ...pods]) tx.apply(r);
    });

    const describePods = (index: PolicyIndex) =>
      index
        .pods()
        .map((p) => `${p.namespace}/${p.name}`)
        .sort();
    assert.ok(describePods(offline).length > 3);
    assert.deepEqual(describePods(h.index), describePods(offline));
    for (const p of offline.pods()) {
      for (const port of [...p.declaredPorts, 4191, 9999]) {
        assert.deepEqual(
          h.index.lookup(p.namespace, p.name, port)?.value,
          offline.lookup(p.namespace, p.name, port)?.value,
          `${p.namespace}/${p.name}:${port}`,
        );
      }
    }
  });
});

// === watching: every edit is seen, however it is written ===

/**
 * Generous: the rescan is off in these tests, so an edit the watcher misses fails the test at
 * this deadline rather than arriving late; nothing here bounds how fast an edit must arrive.
 */
const EDIT_SEEN_MS = 10_000;

/** A policy file whose AuthorizationPolicy is named `name` (what the waits look for). */
const POLICY = (name: string) => `${SERVER()}---\n${AUTHZ(name)}`;

/** Renames a new file over `rel`, its temporary file named as atomic writers name theirs (not a manifest, not ignored). */
function renameOver(dir: string, rel: string, text: string): void {
  const tmp = join(dir, `${rel}.${process.pid}`);
  writeFileSync(tmp, text);
  renameSync(tmp, join(dir, rel));
}

/** Ways tools and editors write a file. */
const WRITE_STYLES: readonly { readonly name: string; write(dir: string, rel: string, text: string): void }[] = [
  { name: 'an in-place write', write: (dir, rel, text) => writeFileSync(join(dir, rel), text) },
  {
    name: 'a truncate, then a write',
    write: (dir, rel, text) => {
      truncateSync(join(dir, rel), 0);
      appendFileSync(join(dir, rel), text);
    },
  },
  {
    name: 'cp over it',
    write: (dir, rel, text) => {
      const staged = join(tempDir(), 'staged.yaml');
      writeFileSync(staged, text);
      copyFileSync(staged, join(dir, rel));
    },
  },
  {
    name: 'mv over it from another directory',
    write: (dir, rel, text) => {
      const staged = join(tempDir(), 'staged.yaml');
      writeFileSync(staged, text);
      renameSync(staged, join(dir, rel));
    },
  },
  { name: 'an atomic save (a new file renamed over it)', write: renameOver },
];

describe('DirectorySource watching', () => {
  for (const style of WRITE_STYLES) {
    it(`sees every edit made by ${style.name}, also after the file was saved by a rename`, async () => {
      const h = await startSource({ 'ns.yaml': NAMESPACE(), 'web.yaml': DEPLOYMENT(), 'policy.yaml': POLICY('a0') }, { rescanIntervalMs: 0 });
      const authz = () => h.policy('web-0')?.authorizations[0]?.meta.name;
      assert.equal(authz(), 'a0');
      // As an editor saves: from now on the path names another inode than the one first seen.
      renameOver(h.dir, 'policy.yaml', POLICY('a1'));
      await waitFor(() => authz() === 'a1', EDIT_SEEN_MS, 'the editor save');
      for (const n of [2, 3]) {
        style.write(h.dir, 'policy.yaml', POLICY(`a${n}`));
        await waitFor(() => authz() === `a${n}`, EDIT_SEEN_MS, `edit ${n}`);
      }
    });
  }

  it('follows a symlinked file: every edit of its target, and the link pointed at another file', async () => {
    const [dir, outside, elsewhere] = [tempDir(), tempDir(), tempDir()];
    write(outside, 'real.yaml', POLICY('a0'));
    write(elsewhere, 'other.yaml', POLICY('b0'));
    symlinkSync(join(outside, 'real.yaml'), join(dir, 'policy.yaml'));
    const h = await startSource({ 'ns.yaml': NAMESPACE(), 'web.yaml': DEPLOYMENT() }, { dir, rescanIntervalMs: 0 });
    const authz = () => h.policy('web-0')?.authorizations[0]?.meta.name;
    assert.equal(authz(), 'a0');
    renameOver(outside, 'real.yaml', POLICY('a1'));
    await waitFor(() => authz() === 'a1', EDIT_SEEN_MS, 'the target saved by a rename');
    writeFileSync(join(outside, 'real.yaml'), POLICY('a2'));
    await waitFor(() => authz() === 'a2', EDIT_SEEN_MS, 'the target written in place');
    // ln -sf: a new link renamed over the old one.
    symlinkSync(join(elsewhere, 'other.yaml'), join(dir, 'policy.yaml.new'));
    renameSync(join(dir, 'policy.yaml.new'), join(dir, 'policy.yaml'));
    await waitFor(() => authz() === 'b0', EDIT_SEEN_MS, 'the link pointed elsewhere');
    writeFileSync(join(elsewhere, 'other.yaml'), POLICY('b1'));
    await waitFor(() => authz() === 'b1', EDIT_SEEN_MS, 'the new target written in place');
  });

  it('sees a new file in a new subdirectory and every later edit, also after the directory was made again', async () => {
    const h = await startSource({ 'ns.yaml': NAMESPACE(), 'web.yaml': DEPLOYMENT() }, { rescanIntervalMs: 0 });
    const authz = () => h.policy('web-0')?.authorizations[0]?.meta.name;
    const rel = 'team/policies/policy.yaml';
    write(h.dir, rel, POLICY('a1'));
    await waitFor(() => authz() === 'a1', EDIT_SEEN_MS, 'the new file');
    renameOver(h.dir, rel, POLICY('a2'));
    await waitFor(() => authz() === 'a2', EDIT_SEEN_MS, 'the file saved by a rename');
    writeFileSync(join(h.dir, rel), POLICY('a3'));
    await waitFor(() => authz() === 'a3', EDIT_SEEN_MS, 'the file written in place');
    // Removed and made again at once: the new directories get the old ones' inode numbers (ext4).
    rmSync(join(h.dir, 'team'), { recursive: true });
    write(h.dir, rel, POLICY('a4'));
    await waitFor(() => authz() === 'a4', EDIT_SEEN_MS, 'the file in the directory made again');
    writeFileSync(join(h.dir, rel), POLICY('a5'));
    await waitFor(() => authz() === 'a5', EDIT_SEEN_MS, 'an edit in the directory made again');
    rmSync(join(h.dir, 'team'), { recursive: true });
    await waitFor(() => h.policy('web-0')?.meta.kind === 'default', EDIT_SEEN_MS, 'the removal');
  });
});
