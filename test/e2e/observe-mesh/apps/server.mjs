// HTTP on 8080: /work/fail answers 500 (an application error), anything else 200.
// TCP on 9000: echoes what it reads.
import { createServer } from 'node:http';
import { createServer as createTcpServer } from 'node:net';

const host = process.env.WARD_APP_HOST;
createServer((req, res) => {
  res.statusCode = req.url.startsWith('/work/fail') ? 500 : 200;
  res.end(JSON.stringify({ pod: process.env.POD_NAME, clientId: req.headers['l5d-client-id'] ?? null }));
}).listen(8080, host, () => console.log('server listening'));
createTcpServer((s) => {
  s.on('error', () => {});
  s.pipe(s);
}).listen(9000, host);
