// GET /call?url=U&n=N[&delays=a,b,…]: calls U N times in turn through the pod's outbound proxy
// (absolute-form HTTP/1.1, as HTTP_PROXY clients do), the i-th with ?delay= the i-th delay
// (cycling); answers the statuses it got.
import { Agent, createServer, request } from 'node:http';

const proxy = new URL(process.env.HTTP_PROXY);
const agent = new Agent({ keepAlive: true, maxSockets: 1 });

function call(url) {
  return new Promise((resolve) => {
    const target = new URL(url);
    const out = request({ host: proxy.hostname, port: Number(proxy.port), path: target.href, headers: { host: target.host }, agent }, (r) => {
      r.resume();
      r.on('end', () => resolve(r.statusCode));
    });
    out.on('error', () => resolve(0));
    out.end();
  });
}

createServer(async (req, res) => {
  const q = new URL(req.url, 'http://relay').searchParams;
  const n = Number(q.get('n') ?? '1');
  const delays = (q.get('delays') ?? '0').split(',').map(Number);
  const statuses = [];
  for (let i = 0; i < n; i++) {
    const url = new URL(q.get('url') ?? 'http://none');
    url.searchParams.set('delay', String(delays[i % delays.length]));
    statuses.push(await call(url.href));
  }
  res.end(JSON.stringify({ statuses }));
}).listen(8080, process.env.WARD_APP_HOST, () => console.log('relay listening via ' + proxy.href));
