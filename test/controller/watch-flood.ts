/**
 * Child process for the fault tests: opens N WatchPort streams to a controller, prints "ready N"
 * once every stream got its first message, then waits to be killed (an abrupt proxy death).
 * argv: port caPem-file serverName count
 */
import { readFileSync } from 'node:fs';
import { InboundPolicyClient } from '../../src/api/index.js';

const [port, caFile, serverName, countText] = process.argv.slice(2) as [string, string, string, string];
const count = Number(countText);
const caPem = readFileSync(caFile, 'utf8');
const clients = Array.from(
  { length: 5 },
  () => new InboundPolicyClient({ address: `127.0.0.1:${port}`, tls: { caPem, serverName }, dedicatedConnection: true }),
);
let firsts = 0;
for (let i = 0; i < count; i++) {
  (clients[i % clients.length] as InboundPolicyClient).watchPort(`emojivoto:${['web-0', 'emoji-0', 'voting-0'][i % 3]}`, 4191, {
    onMessage: () => {
      firsts++;
      if (firsts === count) process.stdout.write(`ready ${count}\n`);
    },
    onEnd: () => {},
  });
}
setTimeout(() => process.exit(3), 120_000).unref();
setInterval(() => {}, 1000);
