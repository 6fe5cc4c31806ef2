/**
 * The proxy imports this module's public surface in every pod and uses only its clients, which
 * speak gRPC over ward's own HTTP/2 (`http`); `@grpc/grpc-js` (~2.3 MB RSS at import, more for its
 * channels) is loaded only when a server is started, and node:http2 (~2 MB with a session) is not
 * imported at all. Checked in a fresh process, since this test process may have loaded both.
 *
 * node:http2 is checked by who imports it (a resolve hook), not by `process.moduleLoadList`: under
 * tsx an ES import of node:http reads all its exports, and the `WebSocket` getter among them loads
 * undici and node:http2 with it. The proxy's bundle requires built-ins instead, which reads none.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { type AddressInfo, createServer } from 'node:net';
import { before, describe, it } from 'node:test';

/** CommonJS modules of grpc-js and its own dependencies. */
const GRPC_MODULE = /@grpc\/|@js-sdsl|proto-loader/;

/**
 * Imports `input.entry`; for the api surface, makes one call with each client (to a port where
 * nothing listens: the whole client path runs and fails UNAVAILABLE); with `startServer`, also
 * starts and stops a gRPC server (the control that shows the check can fail). Prints the codes
 * and `require.cache`'s keys as JSON.
 */
const CHILD = `
import { createRequire, registerHooks } from 'node:module';
const http2Importers = [];
registerHooks({
  resolve(specifier, context, next) {
    if (/^(node:)?http2$/.test(specifier)) http2Importers.push(context.parentURL);
    return next(specifier, context);
  },
});
const input = JSON.parse(process.env.WARD_FOOTPRINT_INPUT);
const mod = await import(new URL(input.entry, input.rootUrl));
const codes = [];
if (input.entry === 'src/api/index.ts') {
  const address = '127.0.0.1:' + input.closedPort;
  const identity = new mod.IdentityClient({ address });
  const inbound = new mod.InboundPolicyClient({ address });
  const destination = new mod.DestinationClient({ address, dedicatedConnection: true });
  codes.push(await identity.certify({ identity: 'x', token: new Uint8Array(), csrDer: new Uint8Array() }).then(() => 'OK', (e) => e.code));
  codes.push(await inbound.getPort('ns:pod', 80).then(() => 'OK', (e) => e.code));
  codes.push(await new Promise((resolve) => inbound.watchPort('ns:pod', 80, { onMessage: () => {}, onEnd: (e) => resolve(e?.code ?? 'OK') })));
  codes.push(await new Promise((resolve) => destination.get('web.ns.svc.cluster.local:80', { onMessage: () => {}, onEnd: (e) => resolve(e?.code ?? 'OK') })));
  identity.close();
  inbound.close();
  destination.close();
  if (input.startServer) {
    const server = await mod.startGrpcServer({ host: '127.0.0.1', port: 0, services: [] });
    await server.close(0);
  }
}
console.log(JSON.stringify({ codes, modules: Object.keys(createRequire(import.meta.url).cache), http2Importers }));
`;

interface ChildOutput {
  codes: string[];
  modules: string[];
  /** The modules that imported node:http2. */
  http2Importers: string[];
}

let closedPort: number;
before(async () => {
  const s = createServer();
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', r));
  closedPort = (s.address() as AddressInfo).port;
  await new Promise<void>((r) => s.close(() => r()));
});

function runChild(entry: string, startServer = false): ChildOutput {
  const root = new URL('../../', import.meta.url);
  const out = spawnSync(process.execPath, ['--import', 'tsx', '--input-type=module', '--eval', CHILD], {
    cwd: root.pathname,
    // Without NODE_TEST_CONTEXT, which would make the child report to this test runner.
    env: { ...process.env, NODE_TEST_CONTEXT: undefined, WARD_FOOTPRINT_INPUT: JSON.stringify({ entry, rootUrl: root.href, closedPort, startServer }) },
    encoding: 'utf8',
    timeout: 60_000,
  });
  assert.equal(out.status, 0, `child failed:\n${out.stderr}`);
  return JSON.parse(out.stdout.trim().split('\n').at(-1) ?? '') as ChildOutput;
}

describe('load footprint', () => {
  it('the api surface and its three clients (calls included) do not load @grpc/grpc-js, nor import node:http2', () => {
    const out = runChild('src/api/index.ts');
    assert.deepEqual(out.codes, ['UNAVAILABLE', 'UNAVAILABLE', 'UNAVAILABLE', 'UNAVAILABLE']);
    assert.deepEqual(
      out.modules.filter((m) => GRPC_MODULE.test(m)),
      [],
    );
    assert.deepEqual(out.http2Importers, []);
  });

  it('the proxy module does not load @grpc/grpc-js, nor node:http2 through this module', () => {
    const out = runChild('src/proxy/index.ts');
    assert.deepEqual(
      out.modules.filter((m) => GRPC_MODULE.test(m)),
      [],
    );
    assert.deepEqual(
      out.http2Importers.filter((m) => m.includes('/src/api/')),
      [],
    );
  });

  it('sees grpc-js once a server is started (the checks above can fail)', () => {
    const out = runChild('src/api/index.ts', true);
    assert.ok(
      out.modules.some((m) => m.includes('/node_modules/@grpc/grpc-js/')),
      'grpc-js not seen',
    );
  });
});
