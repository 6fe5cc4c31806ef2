/**
 * Test fixtures for the byte-level detectors (not part of the proxy's public surface): real
 * ClientHellos captured from node:tls, and builders for hand-made hellos and record layouts.
 */
import { once } from 'node:events';
import { type AddressInfo, createConnection, createServer, type Socket } from 'node:net';
import { type ConnectionOptions, connect } from 'node:tls';

/** A connected socket pair on loopback: `client` dialled `server` (the accepted side). */
export interface SocketPair {
  readonly client: Socket;
  readonly server: Socket;
  /** Destroys both sockets and closes the listener. */
  close(): Promise<void>;
}

/** Opens a listener on 127.0.0.1 port 0, connects to it once and returns both ends. */
export async function mkSocketPair(): Promise<SocketPair> {
  const listener = createServer();
  listener.listen(0, '127.0.0.1');
  await once(listener, 'listening');
  const { port } = listener.address() as AddressInfo;
  const accepted = once(listener, 'connection') as Promise<[Socket]>;
  const client = createConnection({ port, host: '127.0.0.1' });
  await once(client, 'connect');
  const [server] = await accepted;
  return {
    client,
    server,
    async close() {
      client.destroy();
      server.destroy();
      await new Promise<void>((resolve) => listener.close(() => resolve()));
    },
  };
}

/**
 * Connects a real node:tls client (host 127.0.0.1, so no SNI unless `servername` is given) to a
 * raw TCP listener and returns the first TLS record it sends: the whole ClientHello, which node
 * sends in one record. Framing is read here independently of the sniffer under test.
 */
export async function captureClientHello(options: Omit<ConnectionOptions, 'host' | 'port'> = {}): Promise<Buffer> {
  const listener = createServer();
  listener.listen(0, '127.0.0.1');
  await once(listener, 'listening');
  const { port } = listener.address() as AddressInfo;
  const bytes = new Promise<Buffer>((resolve, reject) => {
    listener.once('connection', (socket: Socket) => {
      const chunks: Buffer[] = [];
      let length = 0;
      const timer = setTimeout(() => reject(new Error('no ClientHello within 5 s')), 5000);
      socket.on('data', (chunk: Buffer) => {
        chunks.push(chunk);
        length += chunk.length;
        const all = Buffer.concat(chunks, length);
        if (all.length >= 5 && all.length >= 5 + all.readUInt16BE(3)) {
          clearTimeout(timer);
          socket.destroy();
          resolve(all.subarray(0, 5 + all.readUInt16BE(3)));
        }
      });
      socket.on('error', () => {});
    });
  });
  const client = connect({ host: '127.0.0.1', port, rejectUnauthorized: false, ...options });
  client.on('error', () => {}); // the listener hangs up mid-handshake
  try {
    return await bytes;
  } finally {
    client.destroy();
    await new Promise<void>((resolve) => listener.close(() => resolve()));
  }
}

/** TLS record header + fragment. */
export function record(fragment: Uint8Array, contentType = 0x16, version = 0x0301): Buffer {
  const out = Buffer.alloc(5 + fragment.length);
  out[0] = contentType;
  out.writeUInt16BE(version, 1);
  out.writeUInt16BE(fragment.length, 3);
  out.set(fragment, 5);
  return out;
}

/**
 * Splits the handshake bytes of `message` into records of the given fragment sizes (the last
 * record takes whatever is left; sizes past the end are ignored).
 */
export function fragmentRecords(message: Uint8Array, sizes: readonly number[], version = 0x0301): Buffer {
  const records: Buffer[] = [];
  let at = 0;
  for (const size of sizes) {
    if (at >= message.length) break;
    records.push(record(message.subarray(at, Math.min(message.length, at + size)), 0x16, version));
    at += size;
  }
  if (at < message.length) records.push(record(message.subarray(at), 0x16, version));
  return Buffer.concat(records);
}

/** The handshake message carried by a single-record hello. */
export function handshakeOf(singleRecordHello: Buffer): Buffer {
  return singleRecordHello.subarray(5, 5 + singleRecordHello.readUInt16BE(3));
}

const u16 = (n: number) => {
  const b = Buffer.alloc(2);
  b.writeUInt16BE(n);
  return b;
};

/** One extension: type, length, data. */
export function extension(type: number, data: Uint8Array): Buffer {
  return Buffer.concat([u16(type), u16(data.length), data]);
}

/** server_name extension data with the given entries (`[nameType, name]`). */
export function serverNameData(...entries: readonly (readonly [number, Uint8Array | string])[]): Buffer {
  const list = Buffer.concat(
    entries.map(([type, name]) => {
      const b = typeof name === 'string' ? Buffer.from(name, 'latin1') : Buffer.from(name);
      return Buffer.concat([Buffer.of(type), u16(b.length), b]);
    }),
  );
  return Buffer.concat([u16(list.length), list]);
}

/** ALPN extension data. */
export function alpnData(...names: readonly (Uint8Array | string)[]): Buffer {
  const list = Buffer.concat(
    names.map((n) => {
      const b = typeof n === 'string' ? Buffer.from(n, 'latin1') : Buffer.from(n);
      return Buffer.concat([Buffer.of(b.length), b]);
    }),
  );
  return Buffer.concat([u16(list.length), list]);
}

/** Parts of a hand-made ClientHello; every part is raw bytes so tests can break any of them. */
export interface HelloParts {
  readonly legacyVersion?: number;
  readonly sessionId?: Uint8Array;
  readonly cipherSuites?: Uint8Array;
  readonly compression?: Uint8Array;
  /** Raw extensions (see {@link extension}); undefined omits the extensions block entirely. */
  readonly extensions?: readonly Uint8Array[];
}

/** A ClientHello handshake message (4-byte header included) from parts. */
export function mkClientHelloMessage(parts: HelloParts = {}): Buffer {
  const sessionId = parts.sessionId ?? Buffer.alloc(32, 7);
  const cipherSuites = parts.cipherSuites ?? Buffer.from('130113021303c02f', 'hex');
  const compression = parts.compression ?? Buffer.of(0);
  const body = [u16(parts.legacyVersion ?? 0x0303), Buffer.alloc(32, 0xaa), Buffer.of(sessionId.length), sessionId];
  body.push(u16(cipherSuites.length), cipherSuites, Buffer.of(compression.length), compression);
  if (parts.extensions !== undefined) {
    const exts = Buffer.concat(parts.extensions);
    body.push(u16(exts.length), exts);
  }
  const b = Buffer.concat(body);
  const header = Buffer.of(0x01, (b.length >> 16) & 0xff, (b.length >> 8) & 0xff, b.length & 0xff);
  return Buffer.concat([header, b]);
}
