import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { once } from 'node:events';
import { type AddressInfo, connect, createServer, type Server, type Socket } from 'node:net';
import { after, describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { forwardTcp } from './forward.js';

const servers: Server[] = [];
after(() => {
  for (const s of servers) s.close();
});

/** A listener on 127.0.0.1 whose accepted sockets go to `onSocket` (half-open, as the proxy's are). */
async function listen(onSocket: (s: Socket) => void): Promise<number> {
  const server = createServer({ allowHalfOpen: true }, (s) => {
    s.on('error', () => undefined);
    onSocket(s);
  });
  servers.push(server);
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  return (server.address() as AddressInfo).port;
}

/** Everything `s` sends until its FIN. */
async function readAll(s: Socket): Promise<Buffer> {
  const chunks: Buffer[] = [];
  s.on('data', (c: Buffer) => chunks.push(c));
  await once(s, 'end');
  return Buffer.concat(chunks);
}

const sha = (b: Buffer) => createHash('sha256').update(b).digest('hex');

/** A relay like the inbound proxy's: a client's connection accepted here, forwarded to `appPort`. */
async function relayTo(appPort: number): Promise<{ port: number; upstreams: Socket[] }> {
  const upstreams: Socket[] = [];
  const port = await listen((client) => {
    upstreams.push(forwardTcp(client, { host: '127.0.0.1', port: appPort }, () => undefined));
  });
  return { port, upstreams };
}

describe('forwardTcp', () => {
  it('relays both ways and carries each half-close to the other side', async () => {
    const appPort = await listen((s) => {
      // Echo, then answer the client's FIN with a last message and a FIN of its own.
      s.on('data', (c: Buffer) => s.write(c));
      s.once('end', () => s.end('bye'));
    });
    const { port } = await relayTo(appPort);
    const c = connect({ host: '127.0.0.1', port, allowHalfOpen: true });
    await once(c, 'connect');
    const got = readAll(c);
    c.write('ping ');
    await sleep(20);
    c.end('pong');
    assert.equal((await got).toString(), 'ping pongbye');
    c.destroy();
  });

  it('keeps what the application says before the client says anything (server speaks first)', async () => {
    const appPort = await listen((s) => s.end('220 ready\r\n'));
    const { port } = await relayTo(appPort);
    const c = connect({ host: '127.0.0.1', port, allowHalfOpen: true });
    assert.equal((await readAll(c)).toString(), '220 ready\r\n');
    c.destroy();
  });

  it('relays 32 MiB to a slow reader unchanged, pausing the application meanwhile', async () => {
    const payload = Buffer.alloc(32 * 1024 * 1024);
    for (let i = 0; i < payload.length; i += 4) payload.writeUInt32LE(i, i);
    let appWaitedForDrain = 0;
    const appPort = await listen((s) => {
      // Writes until the kernel and the relay stop taking bytes: only backpressure stops it.
      let off = 0;
      const more = (): void => {
        while (off < payload.length) {
          const next = payload.subarray(off, off + 256 * 1024);
          off += next.length;
          if (!s.write(next)) {
            appWaitedForDrain++;
            s.once('drain', more);
            return;
          }
        }
        s.end();
      };
      more();
    });
    const { port, upstreams } = await relayTo(appPort);
    const c = connect({ host: '127.0.0.1', port, allowHalfOpen: true });
    c.pause();
    await once(c, 'connect');
    // Nobody reads for a while: the relay must stop reading the application, not buffer 32 MiB
    // (a proxy holding whatever a fast sender sends would be a memory exhaustion away).
    await sleep(300);
    const upstream = upstreams[0] as Socket;
    assert.ok(upstream.bytesRead < payload.length / 2, `the relay read ${upstream.bytesRead} bytes while its client read nothing`);
    c.resume();
    const got = await readAll(c);
    assert.equal(got.length, payload.length);
    assert.equal(sha(got), sha(payload));
    assert.ok(appWaitedForDrain > 0);
    // What tcp_read_bytes_total adds for the connection.
    assert.equal(upstream.bytesRead, payload.length);
    c.destroy();
  });

  it('takes the client down when the application resets', async () => {
    const appPort = await listen((s) => {
      s.once('data', () => s.resetAndDestroy());
    });
    const { port } = await relayTo(appPort);
    const c = connect({ host: '127.0.0.1', port, allowHalfOpen: true });
    c.on('error', () => undefined);
    await once(c, 'connect');
    c.write('x');
    // The relay destroys its side: a FIN to this (half-open) client, who then sees its end.
    await once(c, 'end');
    c.destroy();
  });
});
