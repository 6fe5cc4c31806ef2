/**
 * The emojivoto services (examples/emojivoto/services) as real processes on loopback: first on
 * their own (no mesh, no proxy variables), then with web's gRPC calls and the vote-bot's HTTP
 * requests going through proxies written here that stand in for the pod proxy's outbound port.
 */
import assert from 'node:assert/strict';
import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import { once } from 'node:events';
import { createServer, type Server } from 'node:http';
import { createServer as createH2cServer } from 'node:http2';
import { type AddressInfo, connect, type Socket } from 'node:net';
import { after, before, describe, it } from 'node:test';

const EXAMPLE = new URL('../../examples/emojivoto/', import.meta.url).pathname;
/** Upper bound for anything a service should do: start (tsx compiles on first run), answer, stop. */
const WAIT_MS = 30_000;
const VOTE_OK = /^vote :[a-z0-9_]+: -> 200$/;

/** A service process with its output collected line by line. */
interface Service {
  readonly name: string;
  readonly child: ChildProcess;
  readonly lines: string[];
  stderr: string;
  readonly exit: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  /** Resolves with the first line (already written or still to come) matching `re`. */
  waitFor(re: RegExp, count?: number): Promise<string[]>;
}

const started: Service[] = [];

// The manifests run the bundles of the services (services/dist/, made by scripts/build.mjs).
before(() => {
  const r = spawnSync(process.execPath, [new URL('../../scripts/build.mjs', import.meta.url).pathname, '--if-stale'], { encoding: 'utf8', timeout: 120_000 });
  assert.equal(r.status, 0, r.stderr);
});

/** Starts `services/dist/<script>.mjs` the way the manifests do, with only `env` (and PATH) set. */
function startService(script: string, env: Record<string, string>): Service {
  const child = spawn(process.execPath, [`services/dist/${script}.mjs`], {
    cwd: EXAMPLE,
    // Nothing inherited: no proxy variables from the environment running the tests, no node:test context.
    env: { PATH: process.env.PATH ?? '', ...(process.env.TMPDIR === undefined ? {} : { TMPDIR: process.env.TMPDIR }), ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const lines: string[] = [];
  const waiters = new Set<() => void>();
  let partial = '';
  child.stdout?.setEncoding('utf8').on('data', (chunk: string) => {
    const parts = (partial + chunk).split('\n');
    partial = parts.pop() ?? '';
    lines.push(...parts);
    for (const w of waiters) w();
  });
  const service: Service = {
    name: script,
    child,
    lines,
    stderr: '',
    exit: once(child, 'exit').then(([code, signal]) => ({ code: code as number | null, signal: signal as NodeJS.Signals | null })),
    waitFor: (re, count = 1) =>
      new Promise((resolve, reject) => {
        const check = () => {
          const found = lines.filter((l) => re.test(l));
          if (found.length < count) return false;
          finish();
          resolve(found);
          return true;
        };
        const timer = setTimeout(() => {
          finish();
          reject(new Error(`${script}: no ${count} line(s) matching ${re} within ${WAIT_MS} ms; stdout:\n${lines.join('\n')}\nstderr:\n${service.stderr}`));
        }, WAIT_MS);
        const onExit = () => {
          if (check()) return;
          finish();
          reject(new Error(`${script} exited before writing ${re}; stdout:\n${lines.join('\n')}\nstderr:\n${service.stderr}`));
        };
        const finish = () => {
          clearTimeout(timer);
          waiters.delete(check);
          child.off('exit', onExit);
        };
        if (check()) return;
        waiters.add(check);
        child.once('exit', onExit);
      }),
  };
  child.stderr?.setEncoding('utf8').on('data', (chunk: string) => {
    service.stderr += chunk;
  });
  started.push(service);
  return service;
}

/** Sends SIGTERM and returns the exit status and how long the process took to exit (bounded). */
async function stop(service: Service): Promise<{ code: number | null; afterMs: number }> {
  const start = Date.now();
  service.child.kill('SIGTERM');
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${service.name} still running ${WAIT_MS} ms after SIGTERM`)), WAIT_MS);
  });
  try {
    const { code } = await Promise.race([service.exit, timeout]);
    return { code, afterMs: Date.now() - start };
  } finally {
    clearTimeout(timer);
  }
}

/** A port that was free a moment ago. */
async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  await new Promise((resolve) => server.close(resolve));
  return port;
}

async function getJson(url: string): Promise<{ status: number; body: unknown }> {
  const res = await fetch(url, { signal: AbortSignal.timeout(WAIT_MS) });
  return { status: res.status, body: await res.json() };
}

async function listen(server: Server): Promise<number> {
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return (server.address() as AddressInfo).port;
}

after(async () => {
  for (const s of started) if (s.child.exitCode === null && s.child.signalCode === null) s.child.kill('SIGKILL');
  await Promise.all(started.map((s) => s.exit));
});

describe('emojivoto services without a mesh', () => {
  const ports = { emoji: 0, voting: 0, votingProm: 0, web: 0 };
  let web: string;
  let emoji: Service;
  let voting: Service;
  let webService: Service;

  before(async () => {
    for (const k of Object.keys(ports) as (keyof typeof ports)[]) ports[k] = await freePort();
    web = `http://127.0.0.1:${ports.web}`;
    emoji = startService('emoji', { WARD_APP_HOST: '127.0.0.1', GRPC_PORT: String(ports.emoji) });
    voting = startService('voting', { WARD_APP_HOST: '127.0.0.1', GRPC_PORT: String(ports.voting), PROM_PORT: String(ports.votingProm) });
    webService = startService('web', {
      WARD_APP_HOST: '127.0.0.1',
      WEB_PORT: String(ports.web),
      EMOJISVC_HOST: `127.0.0.1:${ports.emoji}`,
      VOTINGSVC_HOST: `127.0.0.1:${ports.voting}`,
    });
    await Promise.all([emoji.waitFor(/^serving emojivoto\.v1\.EmojiService/), voting.waitFor(/^metrics on /), webService.waitFor(/^serving http:/)]);
  });

  it('web is ready once it serves', async () => {
    const res = await fetch(`${web}/ready`, { signal: AbortSignal.timeout(WAIT_MS) });
    assert.equal(res.status, 200);
    assert.equal(await res.text(), 'ready\n');
  });

  it('lists the emoji', async () => {
    const { status, body } = await getJson(`${web}/api/list`);
    assert.equal(status, 200);
    const list = body as { unicode: string; shortcode: string }[];
    assert.equal(list.length, 30);
    assert.deepEqual(list[2], { unicode: '🍩', shortcode: ':doughnut:' });
    assert.ok(list.every((e) => /^:[a-z0-9_]+:$/.test(e.shortcode) && e.unicode !== ''));
  });

  it('serves a self-contained page', async () => {
    const res = await fetch(`${web}/`, { signal: AbortSignal.timeout(WAIT_MS) });
    const html = await res.text();
    assert.equal(res.status, 200);
    assert.match(res.headers.get('content-type') ?? '', /^text\/html/);
    assert.match(html, /<html[\s>]/);
    assert.match(html, /\/api\/vote\?choice=/);
    assert.doesNotMatch(html, /(src|href)\s*=\s*["']?(https?:)?\/\//);
  });

  it('counts votes, ranks them and exports the counts', async () => {
    for (const choice of [':doughnut:', ':joy:', ':doughnut:']) {
      const { status, body } = await getJson(`${web}/api/vote?choice=${encodeURIComponent(choice)}`);
      assert.equal(status, 200, JSON.stringify(body));
      assert.equal((body as { shortcode: string }).shortcode, choice);
    }
    assert.deepEqual(await getJson(`${web}/api/leaderboard`), {
      status: 200,
      body: [
        { unicode: '🍩', shortcode: ':doughnut:', votes: 2 },
        { unicode: '😂', shortcode: ':joy:', votes: 1 },
      ],
    });
    const metrics = await (await fetch(`http://127.0.0.1:${ports.votingProm}/metrics`, { signal: AbortSignal.timeout(WAIT_MS) })).text();
    assert.match(metrics, /^# TYPE emojivoto_votes_total counter$/m);
    assert.match(metrics, /^emojivoto_votes_total\{shortcode=":doughnut:"\} 2$/m);
    await voting.waitFor(/^vote :doughnut: \(2\)$/);
  });

  it('answers 400 for an unknown emoji or no choice at all', async () => {
    const unknown = await getJson(`${web}/api/vote?choice=:no_such_emoji:`);
    assert.equal(unknown.status, 400);
    assert.match((unknown.body as { error: string }).error, /unknown emoji ":no_such_emoji:"/);
    assert.equal((await getJson(`${web}/api/vote`)).status, 400);
  });

  it('the vote-bot votes through web every VOTE_INTERVAL_MS and stops on SIGTERM', async () => {
    const before = await getJson(`${web}/api/leaderboard`);
    const total = (body: unknown) => (body as { votes: number }[]).reduce((n, r) => n + r.votes, 0);
    const bot = startService('vote-bot', { WEB_HOST: `127.0.0.1:${ports.web}`, VOTE_INTERVAL_MS: '50' });
    await bot.waitFor(VOTE_OK, 3);
    assert.equal((await stop(bot)).code, 0);
    const ok = bot.lines.filter((l) => VOTE_OK.test(l)).length;
    assert.deepEqual(
      bot.lines.filter((l) => l.startsWith('vote ') && !VOTE_OK.test(l)),
      [],
    );
    // A vote in flight at SIGTERM may have been counted without being logged.
    const added = total((await getJson(`${web}/api/leaderboard`)).body) - total(before.body);
    assert.ok(added === ok || added === ok + 1, `${added} votes counted, ${ok} logged`);
  });

  it('fails loudly on a missing variable or a port it cannot bind', async () => {
    const noPort = startService('emoji', { WARD_APP_HOST: '127.0.0.1' });
    assert.equal((await noPort.exit).code, 1);
    assert.match(noPort.stderr, /^emoji: fatal: environment variable GRPC_PORT is required but not set$/m);
    const taken = startService('web', { WARD_APP_HOST: '127.0.0.1', WEB_PORT: String(ports.web), EMOJISVC_HOST: 'x:1', VOTINGSVC_HOST: 'y:1' });
    assert.equal((await taken.exit).code, 1);
    assert.match(taken.stderr, new RegExp(`^web: fatal: cannot listen on 127\\.0\\.0\\.1:${ports.web} \\(WEB_PORT\\): .*EADDRINUSE`, 'm'));
  });

  it('every service exits 0 within about a second of SIGTERM', async () => {
    for (const s of [webService, emoji, voting]) {
      const { code, afterMs } = await stop(s);
      assert.equal(code, 0, `${s.name}: ${s.stderr}`);
      assert.ok(afterMs < 1500, `${s.name} took ${afterMs} ms`);
      assert.equal(s.lines.at(-1), 'stopped');
    }
  });
});

describe('emojivoto services through a forward proxy (what the pod proxy offers)', () => {
  const PROXY_ERROR = 'unauthorized request on route';
  let emoji: Service;
  let webService: Service;
  let web: string;
  let proxyUrl: string;
  const connects: string[] = [];
  const requests: { method: string; url: string; host: string }[] = [];
  const proxy = createServer();
  const tunnels = new Set<Socket>();
  // Stands in for voting-svc behind a denying mesh: Vote* calls are denied the way the inbound
  // proxy denies them (grpc-status 7 with no response message), Results fails as unavailable.
  const deniedVoting = createH2cServer();
  deniedVoting.on('stream', (stream, headers) => {
    const denied = !String(headers[':path']).endsWith('/Results');
    stream.respond(
      { ':status': 200, 'content-type': 'application/grpc', 'grpc-status': denied ? '7' : '14', 'grpc-message': denied ? PROXY_ERROR : 'no endpoints' },
      { endStream: true },
    );
  });

  before(async () => {
    const [emojiPort, webPort] = [await freePort(), await freePort()];
    // Absolute-form HTTP/1 (the vote-bot): the mesh denies it, as for a caller from namespace bad.
    proxy.on('request', (req, res) => {
      requests.push({ method: req.method ?? '', url: req.url ?? '', host: req.headers.host ?? '' });
      res.writeHead(403, { 'l5d-proxy-error': PROXY_ERROR, 'content-length': '0' }).end();
    });
    // CONNECT (grpc-js): emoji-svc is tunnelled to the real emoji service, voting-svc to the fake.
    proxy.on('connect', (req, socket: Socket, head: Buffer) => {
      const target = req.url ?? '';
      connects.push(target);
      tunnels.add(socket);
      socket.on('close', () => tunnels.delete(socket));
      socket.on('error', () => socket.destroy());
      if (target === 'emoji-svc.emojivoto:8080') {
        const upstream = connect(emojiPort, '127.0.0.1', () => {
          socket.write('HTTP/1.1 200 Connection Established\r\n\r\n');
          upstream.write(head);
          upstream.pipe(socket).pipe(upstream);
        });
        upstream.on('error', () => socket.destroy());
        socket.on('close', () => upstream.destroy());
      } else if (target === 'voting-svc.emojivoto:8080') {
        socket.write('HTTP/1.1 200 Connection Established\r\n\r\n');
        if (head.length > 0) socket.unshift(head);
        deniedVoting.emit('connection', socket);
      } else {
        socket.end('HTTP/1.1 502 Bad Gateway\r\n\r\n');
      }
    });
    proxyUrl = `http://127.0.0.1:${await listen(proxy)}`;
    const meshEnv = { HTTP_PROXY: proxyUrl, http_proxy: proxyUrl, grpc_proxy: proxyUrl };
    web = `http://127.0.0.1:${webPort}`;
    emoji = startService('emoji', { WARD_APP_HOST: '127.0.0.1', GRPC_PORT: String(emojiPort) });
    webService = startService('web', {
      WARD_APP_HOST: '127.0.0.1',
      WEB_PORT: String(webPort),
      EMOJISVC_HOST: 'emoji-svc.emojivoto:8080',
      VOTINGSVC_HOST: 'voting-svc.emojivoto:8080',
      ...meshEnv,
    });
    await Promise.all([emoji.waitFor(/^serving /), webService.waitFor(/^serving http:/)]);
  });

  after(async () => {
    for (const s of tunnels) s.destroy();
    proxy.closeAllConnections();
    await new Promise((resolve) => proxy.close(resolve));
    await new Promise((resolve) => deniedVoting.close(resolve));
  });

  it("web's gRPC calls go through grpc_proxy by name (CONNECT emoji-svc.emojivoto:8080)", async () => {
    const { status, body } = await getJson(`${web}/api/list`);
    assert.equal(status, 200);
    assert.equal((body as unknown[]).length, 30);
    assert.ok(connects.includes('emoji-svc.emojivoto:8080'), connects.join(', '));
  });

  it('a call the mesh denies (PERMISSION_DENIED) becomes a 403 with a JSON error', async () => {
    const { status, body } = await getJson(`${web}/api/vote?choice=:joy:`);
    assert.equal(status, 403);
    assert.deepEqual(body, { error: `emojivoto.v1.VotingService/VoteJoy: PERMISSION_DENIED: ${PROXY_ERROR}`, grpcStatus: 'PERMISSION_DENIED' });
    assert.ok(connects.includes('voting-svc.emojivoto:8080'), connects.join(', '));
    await webService.waitFor(/^GET \/api\/vote\?choice=:joy: -> 403 \(emojivoto\.v1\.VotingService\/VoteJoy: PERMISSION_DENIED/);
  });

  it('any other gRPC failure becomes a 502; an unknown emoji is still a 400', async () => {
    const board = await getJson(`${web}/api/leaderboard`);
    assert.equal(board.status, 502);
    assert.equal((board.body as { grpcStatus: string }).grpcStatus, 'UNAVAILABLE');
    assert.equal((await getJson(`${web}/api/vote?choice=:no_such_emoji:`)).status, 400);
  });

  it('the vote-bot sends absolute-form requests through HTTP_PROXY and logs the denial', async () => {
    const bot = startService('vote-bot', {
      WEB_HOST: 'web-svc.emojivoto:80',
      VOTE_INTERVAL_MS: '50',
      HTTP_PROXY: proxyUrl,
      http_proxy: proxyUrl,
      grpc_proxy: proxyUrl,
    });
    const [line] = await bot.waitFor(new RegExp(`^vote :[a-z0-9_]+: -> 403 \\(l5d-proxy-error: ${PROXY_ERROR}\\)$`), 2);
    assert.equal((await stop(bot)).code, 0);
    const shortcode = line?.split(' ')[1] ?? '';
    assert.deepEqual(requests[0], {
      method: 'GET',
      url: `http://web-svc.emojivoto:80/api/vote?choice=${encodeURIComponent(shortcode)}`,
      host: 'web-svc.emojivoto:80',
    });
  });

  it('the vote-bot logs a network error and keeps trying', async () => {
    const closed = `http://127.0.0.1:${await freePort()}`;
    const bot = startService('vote-bot', { WEB_HOST: 'web-svc.emojivoto:80', VOTE_INTERVAL_MS: '50', HTTP_PROXY: closed, http_proxy: closed });
    await bot.waitFor(/^vote :[a-z0-9_]+: -> error: .*ECONNREFUSED/, 3);
    assert.equal((await stop(bot)).code, 0);
  });

  it('stops cleanly', async () => {
    for (const s of [webService, emoji]) assert.equal((await stop(s)).code, 0, s.stderr);
  });
});
