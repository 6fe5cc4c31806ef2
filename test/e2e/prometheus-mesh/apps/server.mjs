// Answers every request after ?delay= milliseconds (so that latencies fall in several buckets).
import { createServer } from 'node:http';

createServer((req, res) => {
  const delay = Number(new URL(req.url, 'http://server').searchParams.get('delay') ?? '0');
  setTimeout(() => res.end(JSON.stringify({ pod: process.env.POD_NAME, clientId: req.headers['l5d-client-id'] ?? null })), delay);
}).listen(8080, process.env.WARD_APP_HOST, () => console.log('server listening'));
