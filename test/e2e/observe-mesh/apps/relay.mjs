// GET /call?url=U&n=N: calls U N times in turn, through the pod's outbound proxy when it has one
// (HTTP_PROXY, absolute-form requests) or directly from the pod's address; answers the statuses.
// GET /tcp?to=HOST:PORT&holdMs=MS: opens a TCP connection (a CONNECT tunnel through the proxy, or
// directly), checks that it echoes, answers, and keeps the connection open for MS milliseconds.
import { Agent, createServer, request } from 'node:http';
import { connect } from 'node:net';

const proxy = process.env.HTTP_PROXY ? new URL(process.env.HTTP_PROXY) : undefined;
const agent = new Agent({ keepAlive: true, maxSockets: 1 });

function call(url) {
  return new Promise((resolve) => {
    const target = new URL(url);
    const opts = proxy
      ? { host: proxy.hostname, port: Number(proxy.port), path: target.href, headers: { host: target.host }, agent }
      : { host: target.hostname, port: Number(target.port || 80), path: target.pathname + target.search, localAddress: process.env.POD_IP };
    const out = request(opts, (r) => {
      r.resume();
      r.on('end', () => resolve(r.statusCode));
    });
    out.on('error', () => resolve(0));
    out.end();
  });
}

function tunnel(to) {
  return new Promise((resolve, reject) => {
    if (!proxy) {
      const [h, p] = to.split(':');
      const s = connect(Number(p), h, () => resolve(s));
      s.once('error', reject);
      return;
    }
    const req = request({ host: proxy.hostname, port: Number(proxy.port), method: 'CONNECT', path: to, agent: false });
    req.on('connect', (res, socket) => (res.statusCode === 200 ? resolve(socket) : reject(new Error(`CONNECT ${res.statusCode}`))));
    req.on('error', reject);
    req.end();
  });
}

createServer(async (req, res) => {
  const q = new URL(req.url, 'http://relay').searchParams;
  if (req.url.startsWith('/tcp')) {
    try {
      const s = await tunnel(q.get('to'));
      s.on('error', () => {});
      s.write('ping');
      const echo = await new Promise((r) => s.once('data', (d) => r(d.toString())));
      setTimeout(() => s.destroy(), Number(q.get('holdMs') ?? '0')).unref();
      res.end(JSON.stringify({ echo }));
    } catch (e) {
      res.statusCode = 502;
      res.end(JSON.stringify({ error: String(e.message) }));
    }
    return;
  }
  const n = Number(q.get('n') ?? '1');
  const statuses = [];
  for (let i = 0; i < n; i++) statuses.push(await call(q.get('url')));
  res.end(JSON.stringify({ statuses }));
}).listen(8080, process.env.WARD_APP_HOST, () => console.log('relay listening'));
