import assert from 'node:assert/strict';
import { once } from 'node:events';
import { createServer as createHttpServer, type Server } from 'node:http';
import { createServer as createH2Server, type Http2Server } from 'node:http2';
import type { AddressInfo } from 'node:net';
import { createServer as createTcpServer } from 'node:net';
import { after, before, describe, it } from 'node:test';
import { NODE_ADDRESS } from './addresses.js';
import { healthCheckFrame, healthCheckStatus, type ProbeResult, type ProbeState, ProbeWorker, probeCheck, probeTiming } from './probes.js';

const HOST = '127.0.0.1';
const target = { host: HOST, localAddress: NODE_ADDRESS };
const portOf = (s: { address(): AddressInfo | string | null }) => (s.address() as AddressInfo).port;

/** An HTTP app whose answers the test sets; records who asked. */
let http: Server;
let status = 200;
let delayMs = 0;
const seen: { path: string; from: string; headers: Record<string, unknown> }[] = [];
/** A gRPC health service answering `serving` (1 = SERVING), or grpc-status 12 for an unknown method. */
let h2: Http2Server;
let serving = 1;
let closedPort = 0;

before(async () => {
  http = createHttpServer((req, res) => {
    seen.push({ path: req.url ?? '', from: req.socket.remoteAddress ?? '', headers: req.headers });
    setTimeout(() => res.writeHead(status).end('body'), delayMs);
  });
  http.listen(0, HOST);
  h2 = createH2Server();
  h2.on('stream', (stream, headers) => {
    const chunks: Buffer[] = [];
    stream.on('data', (c: Buffer) => chunks.push(c));
    stream.on('end', () => {
      if (headers[':path'] !== '/grpc.health.v1.Health/Check') {
        stream.respond({ ':status': 200, 'content-type': 'application/grpc', 'grpc-status': '12' }, { endStream: true });
        return;
      }
      const req = Buffer.concat(chunks);
      const service = req.length > 5 ? req.subarray(7).toString() : '';
      if (service === 'unknown') {
        stream.respond({ ':status': 200, 'content-type': 'application/grpc', 'grpc-status': '5', 'grpc-message': 'unknown%20service' }, { endStream: true });
        return;
      }
      stream.respond({ ':status': 200, 'content-type': 'application/grpc' }, { waitForTrailers: true });
      stream.once('wantTrailers', () => stream.sendTrailers({ 'grpc-status': '0' }));
      const body = serving === 0 ? Buffer.alloc(0) : Buffer.from([0x08, serving]);
      const frame = Buffer.alloc(5 + body.length);
      frame.writeUInt32BE(body.length, 1);
      body.copy(frame, 5);
      stream.end(frame);
    });
  });
  h2.listen(0, HOST);
  const tmp = createTcpServer();
  tmp.listen(0, HOST);
  await Promise.all([once(http, 'listening'), once(h2, 'listening'), once(tmp, 'listening')]);
  closedPort = portOf(tmp);
  tmp.close();
});

after(() => {
  http.close();
  http.closeAllConnections();
  h2.close();
});

const run = async (spec: Parameters<typeof probeCheck>[0], ports: Record<string, number> = {}, timeoutMs = 1000): Promise<ProbeResult> => {
  const check = probeCheck(spec, (p) => (typeof p === 'number' ? p : ports[p]), target);
  if (typeof check === 'string') throw new Error(check);
  return check(timeoutMs);
};

describe('probes against real servers', () => {
  it('httpGet: 200-399 pass, others fail; sent from the node address with the kubelet headers', async () => {
    status = 200;
    seen.length = 0;
    const r = await run({ httpGet: { port: 'web', path: '/healthz?x=1', httpHeaders: [{ name: 'X-Probe', value: 'yes' }] } }, { web: portOf(http) });
    assert.deepEqual(r, { ok: true, detail: 'HTTP 200' });
    assert.equal(seen[0]?.path, '/healthz?x=1');
    assert.equal(seen[0]?.from, NODE_ADDRESS);
    assert.match(String(seen[0]?.headers['user-agent']), /^kube-probe\//);
    assert.equal(seen[0]?.headers['x-probe'], 'yes');
    status = 302;
    assert.equal((await run({ httpGet: { port: portOf(http) } })).ok, true);
    status = 403;
    assert.deepEqual(await run({ httpGet: { port: portOf(http) } }), { ok: false, detail: 'HTTP 403' });
    status = 200;
  });

  it('httpGet: a slow answer is a timeout, a closed port a refusal', async () => {
    delayMs = 300;
    assert.deepEqual(await run({ httpGet: { port: portOf(http) } }, {}, 100), { ok: false, detail: 'timeout after 100 ms' });
    delayMs = 0;
    assert.deepEqual(await run({ httpGet: { port: closedPort } }), { ok: false, detail: 'ECONNREFUSED' });
  });

  it('tcpSocket: connect or not', async () => {
    assert.deepEqual(await run({ tcpSocket: { port: portOf(http) } }), { ok: true, detail: 'connected' });
    assert.deepEqual(await run({ tcpSocket: { port: closedPort } }), { ok: false, detail: 'ECONNREFUSED' });
  });

  it('grpc: grpc.health.v1 Check; SERVING passes, anything else fails', async () => {
    serving = 1;
    assert.deepEqual(await run({ grpc: { port: portOf(h2) } }), { ok: true, detail: 'SERVING' });
    serving = 2;
    assert.deepEqual(await run({ grpc: { port: portOf(h2), service: 'svc' } }), { ok: false, detail: 'NOT_SERVING' });
    serving = 0;
    assert.deepEqual(await run({ grpc: { port: portOf(h2) } }), { ok: false, detail: 'UNKNOWN' });
    assert.deepEqual(await run({ grpc: { port: portOf(h2), service: 'unknown' } }), { ok: false, detail: 'grpc-status 5 (unknown service)' });
    assert.deepEqual(await run({ grpc: { port: closedPort } }), { ok: false, detail: 'ECONNREFUSED' });
    serving = 1;
  });

  it('reports probes it cannot run', () => {
    assert.equal(
      probeCheck({ httpGet: { port: 'nope' } }, () => undefined, target),
      'httpGet port nope is not a port of the container',
    );
    assert.equal(
      probeCheck({}, () => undefined, target),
      'the probe has no httpGet, tcpSocket or grpc handler',
    );
  });
});

describe('grpc health framing', () => {
  it('encodes the request and decodes the status', () => {
    assert.deepEqual([...healthCheckFrame('')], [0, 0, 0, 0, 0]);
    assert.deepEqual([...healthCheckFrame('ab')], [0, 0, 0, 0, 4, 0x0a, 2, 0x61, 0x62]);
    assert.equal(healthCheckStatus(Buffer.from([0, 0, 0, 0, 2, 0x08, 1])), 1);
    assert.equal(healthCheckStatus(Buffer.from([0, 0, 0, 0, 0])), 0);
    assert.equal(healthCheckStatus(Buffer.from([0, 0, 0, 0, 9, 0x08])), undefined);
  });
});

describe('probe timing', () => {
  it('fills the kubelet defaults and scales delays and periods', () => {
    assert.deepEqual(probeTiming({}, 'readiness'), { initialDelayMs: 0, periodMs: 10_000, timeoutMs: 1000, successThreshold: 1, failureThreshold: 3 });
    assert.deepEqual(probeTiming({ initialDelaySeconds: 5, periodSeconds: 2, timeoutSeconds: 3, successThreshold: 2, failureThreshold: 1 }, 'readiness', 0.1), {
      initialDelayMs: 500,
      periodMs: 200,
      timeoutMs: 3000,
      successThreshold: 2,
      failureThreshold: 1,
    });
    assert.equal(probeTiming({ successThreshold: 3 }, 'liveness').successThreshold, 1, 'liveness and startup need 1');
  });
});

describe('ProbeWorker thresholds', () => {
  /** Runs a worker over a scripted series of results; returns the states after each probe and the flips. */
  async function script(kind: 'readiness' | 'liveness' | 'startup', results: boolean[], thresholds: { successThreshold?: number; failureThreshold?: number }) {
    const states: ProbeState[] = [];
    const flips: ProbeState[] = [];
    let i = 0;
    let resolveDone: () => void = () => {};
    const done = new Promise<void>((r) => {
      resolveDone = r;
    });
    const w = new ProbeWorker({
      kind,
      timing: {
        initialDelayMs: 0,
        periodMs: 1,
        timeoutMs: 100,
        successThreshold: thresholds.successThreshold ?? 1,
        failureThreshold: thresholds.failureThreshold ?? 3,
      },
      check: () => Promise.resolve({ ok: results[i++] ?? false, detail: '' }),
      onResult: (state, _r, changed) => {
        states.push(state);
        if (changed) flips.push(state);
        if (states.length === results.length) {
          w.stop();
          resolveDone();
        }
      },
    });
    w.start();
    await done;
    return { states, flips };
  }

  it('readiness starts failed and needs successThreshold successes; failureThreshold failures to fall back', async () => {
    const r = await script('readiness', [false, true, true, false, false, true, false, false, false], { successThreshold: 2, failureThreshold: 3 });
    assert.deepEqual(r.states, ['failure', 'failure', 'success', 'success', 'success', 'success', 'success', 'success', 'failure']);
    assert.deepEqual(r.flips, ['success', 'failure']);
  });

  it('liveness starts succeeded and flips after failureThreshold consecutive failures', async () => {
    const r = await script('liveness', [false, false, true, false, false, false], { failureThreshold: 3 });
    assert.deepEqual(r.flips, ['failure']);
    assert.equal(r.states.indexOf('failure'), 5);
  });

  it('startup starts unknown: success or failure flips it', async () => {
    assert.deepEqual((await script('startup', [false, true], {})).flips, ['success']);
    assert.deepEqual((await script('startup', [false, false], { failureThreshold: 2 })).flips, ['failure']);
  });
});
