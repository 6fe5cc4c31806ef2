/**
 * HTTP/2 conformance of the inbound proxy's HTTP/2 server: h2spec (RFC 7540/7541 cases, all 146
 * of `--strict`) against a real {@link InboundProxy} whose port has an `http2` policy admitting
 * everyone, in front of an HTTP/2 application that answers every request with a small body.
 *
 * Twice: on the plaintext application port (prior knowledge), and through mesh TLS. h2spec cannot
 * present a client certificate, so for the second a relay of the test's own accepts its plaintext
 * connections and originates mesh TLS (client certificate, SNI = the proxy's identity, ALPN h2)
 * to the same port.
 *
 * h2spec is a Go program, built by `scripts/ensure-tool.mjs` (`.ci/run` builds it). Without it
 * the test is skipped, unless `CI` is set: then a missing h2spec fails it.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { existsSync, readFileSync } from 'node:fs';
import { createServer as createHttp2Server, type Http2Server } from 'node:http2';
import { type AddressInfo, createServer as createNetServer, type Server as NetServer, type Socket } from 'node:net';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { type TLSSocket, connect as tlsConnect } from 'node:tls';
import type { InboundServer } from '../../src/core/index.js';
import { InboundProxy } from '../../src/proxy/inbound/proxy.js';
import { mkTestMesh, TempDirs } from '../../src/proxy/testing/identity.js';
import { FakePolicies } from '../../src/proxy/testing/policies.js';
import { MeshTlsContext } from '../../src/proxy/tls/context.js';

const HOST = '127.0.0.1';
/** Cases of `h2spec --strict` (h2spec v2.2.1). */
const CASES = 146;
/**
 * h2spec's wait per case for what it expects (its default is 2 s). A passing case ends as soon as
 * it sees what it expects, so only failures pay this (the whole run took the same 0.4 s plaintext
 * and 3.5 s through mesh TLS with 2 s and 5 s): 5 s keeps a busy 2-core machine from failing a case.
 */
const CASE_TIMEOUT_S = 5;

// The build script knows where it puts the tool (a plain ES module, imported by URL: it has no types).
const tools = (await import(new URL('../../scripts/ensure-tool.mjs', import.meta.url).href)) as { goToolPath(name: string): string };
const h2spec = tools.goToolPath('h2spec');
const installed = existsSync(h2spec);
const skip = installed || process.env.CI ? false : `h2spec is not installed (${h2spec}); build it with scripts/ensure-tool.mjs`;

const policy: InboundServer = {
  meta: { group: 'policy.linkerd.io', kind: 'Server', name: 'h2spec' },
  protocol: {
    kind: 'http2',
    routes: [
      {
        meta: { group: 'policy.linkerd.io', kind: 'HTTPRoute', name: 'everything' },
        hosts: [],
        authorizations: [],
        rules: [{ matches: [{ path: { kind: 'prefix', value: '/' }, headers: [], queryParams: [] }], filters: [] }],
      },
    ],
  },
  authorizations: [
    {
      meta: { group: 'policy.linkerd.io', kind: 'AuthorizationPolicy', name: 'everyone' },
      networks: [
        { net: { ip: '0.0.0.0', prefixLen: 0 }, except: [] },
        { net: { ip: '::', prefixLen: 0 }, except: [] },
      ],
      authentication: { kind: 'unauthenticated' },
    },
  ],
};

interface H2specResult {
  readonly total: number;
  readonly passed: number;
  readonly failed: number;
  readonly skipped: number;
  /** Names of the failed cases with h2spec's message. */
  readonly failures: string[];
  readonly output: string;
}

/** Runs `h2spec --strict` against `port` (asynchronously: the proxy serves from this process). */
async function runH2spec(port: number, dir: string, name: string): Promise<H2specResult> {
  const junit = join(dir, `${name}.xml`);
  const child = spawn(h2spec, ['--strict', '-h', HOST, '-p', String(port), '-o', String(CASE_TIMEOUT_S), '-j', junit], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  child.stdout.setEncoding('utf8').on('data', (s: string) => {
    output += s;
  });
  child.stderr.setEncoding('utf8').on('data', (s: string) => {
    output += s;
  });
  await once(child, 'close');
  assert.ok(existsSync(junit), `h2spec wrote no report:\n${output}`);
  const xml = readFileSync(junit, 'utf8');
  const failures: string[] = [];
  let total = 0;
  let skipped = 0;
  for (const m of xml.matchAll(/<testcase\b[^>]*?(?:\/>|>([\s\S]*?)<\/testcase>)/g)) {
    total++;
    const body = m[1] ?? '';
    if (body.includes('<skipped')) skipped++;
    const f = /<failure\b[^>]*?(?:message="([^"]*)")?[^>]*>([\s\S]*?)<\/failure>|<error\b[^>]*>([\s\S]*?)<\/error>/.exec(body);
    if (f !== null) {
      const title = /name="([^"]*)"/.exec(m[0])?.[1] ?? '?';
      const pkg = /package="([^"]*)"/.exec(m[0])?.[1] ?? '';
      failures.push(`${pkg} ${title}: ${(f[2] ?? f[3] ?? f[1] ?? '').trim().replace(/\s+/g, ' ')}`);
    }
  }
  return { total, passed: total - failures.length - skipped, failed: failures.length, skipped, failures, output };
}

/** Plaintext TCP in, mesh TLS out: what h2spec sends goes to `port` as a meshed client's bytes. */
function meshRelay(port: number, client: MeshTlsContext, proxyId: string): NetServer {
  const open = new Set<Socket>();
  const server = createNetServer((plain: Socket) => {
    const tls: TLSSocket = tlsConnect({ ...client.clientOptions(proxyId, ['h2']), host: HOST, port });
    open.add(plain).add(tls);
    const gone = () => {
      open.delete(plain);
      open.delete(tls);
      plain.destroy();
      tls.destroy();
    };
    plain.on('error', gone).on('close', gone);
    tls.on('error', gone).on('close', gone);
    plain.pipe(tls);
    tls.pipe(plain);
  });
  server.on('close', () => {
    for (const s of open) s.destroy();
  });
  return server;
}

async function listen(server: NetServer | Http2Server): Promise<number> {
  server.listen(0, HOST);
  await once(server, 'listening');
  return (server.address() as AddressInfo).port;
}

describe('h2spec --strict against the inbound HTTP/2 server', { skip, timeout: 300_000 }, () => {
  const dirs = new TempDirs();
  let app: Http2Server;
  let proxy: InboundProxy;
  let relay: NetServer;
  let proxyPort = 0;
  let relayPort = 0;
  let reportDir = '';

  before(async () => {
    // (CI without h2spec: each case fails below.)
    if (!installed) return;
    reportDir = dirs.make('ward-h2spec-');
    const mesh = await mkTestMesh(dirs);
    const [proxyCert, clientCert] = await Promise.all([mesh.issue('emojivoto', 'web'), mesh.issue('emojivoto', 'vote-bot')]);
    // Every request gets a small body (h2spec's flow-control cases wait for DATA), once the request
    // has ended: an answer before it would race the invalid frames a case sends after its HEADERS
    // (the proxy may then have closed the stream with NO_ERROR, RFC 9113 §8.1, and ignore them).
    app = createHttp2Server();
    app.on('stream', (stream) => {
      stream.on('error', () => {});
      stream.resume();
      stream.on('end', () => {
        if (stream.destroyed || stream.closed) return;
        stream.respond({ ':status': 200, 'content-type': 'text/plain' });
        stream.end('conformance\n'.repeat(16));
      });
    });
    const appPort = await listen(app);
    const policies = new FakePolicies();
    proxy = new InboundProxy({
      identity: proxyCert.identity,
      tls: new MeshTlsContext(proxyCert, mesh.anchorsPem),
      policies,
      appHost: HOST,
      appPortOf: () => appPort,
      listen: { host: HOST, meshPort: 0, appPorts: [0] },
    });
    const bound = await proxy.start();
    proxyPort = bound.appPorts[0] as number;
    policies.set(proxyPort, policy);
    relay = meshRelay(proxyPort, new MeshTlsContext(clientCert, mesh.anchorsPem), proxyCert.identity);
    relayPort = await listen(relay);
  });

  after(async () => {
    relay?.close();
    await proxy?.close();
    app?.close();
    dirs.cleanup();
  });

  for (const via of ['plaintext', 'mesh TLS'] as const) {
    it(`passes all ${CASES} cases over ${via}`, async () => {
      assert.ok(installed, `h2spec is not installed (${h2spec}) and CI is set: .ci/run builds it with scripts/ensure-tool.mjs`);
      const r = await runH2spec(via === 'plaintext' ? proxyPort : relayPort, reportDir, via.replace(' ', '-'));
      const summary = `${r.passed}/${r.total} passed, ${r.failed} failed, ${r.skipped} skipped`;
      assert.deepEqual(r.failures, [], `${via}: ${summary}\n${r.failures.join('\n')}`);
      assert.equal(r.total, CASES, `${via}: ${summary}\n${r.output}`);
      assert.equal(r.passed, CASES, `${via}: ${summary}`);
    });
  }
});
