/**
 * The ClientHello sniffer under arbitrary input: real hellos captured from node:tls, fragmented
 * over records and mutated, give at every prefix either `need-more` or the whole input's result,
 * whatever the memory they sit in; and OpenSSL (a node:tls server) is the reference for what a
 * hello it accepts asks for: where both read a hello, they read the same SNI and ALPN.
 */
import assert from 'node:assert/strict';
import { once } from 'node:events';
import { type AddressInfo, connect as netConnect } from 'node:net';
import { after, before, describe, it } from 'node:test';
import { createServer as createTlsServer, type Server as TlsServer } from 'node:tls';
import fc from 'fast-check';
import { fuzzParams, mutate, mutation } from '../../shared/testing/fuzz.js';
import { captureClientHello, fragmentRecords, handshakeOf } from '../testing/client-hello-fixtures.js';
import { CLIENT_HELLO_MAX_PREFIX_BYTES, type ClientHelloSniff, sniffClientHello } from './client-hello.js';

let hellos: Buffer[] = [];

before(async () => {
  hellos = [
    await captureClientHello({ servername: 'web.emojivoto.serviceaccount.identity.linkerd.cluster.local', ALPNProtocols: ['h2', 'http/1.1'] }),
    await captureClientHello({}),
    await captureClientHello({ servername: 'API.Example.com', ALPNProtocols: ['transport.l5d.io/v1'], maxVersion: 'TLSv1.2' }),
    await captureClientHello({ servername: 'a.b', ALPNProtocols: ['x', 'y'.repeat(200), 'h2'] }),
    await captureClientHello({ servername: `${'l'.repeat(63)}.${'m'.repeat(63)}.example` }),
    await captureClientHello({ ALPNProtocols: ['http/1.1'], minVersion: 'TLSv1.3' }),
  ];
});

/** A captured hello as sent, or its handshake message re-fragmented over several records. */
const helloInput = fc
  .tuple(fc.nat(), fc.option(fc.array(fc.integer({ min: 1, max: 300 }), { minLength: 1, maxLength: 5 }), { nil: undefined }))
  .map(([which, sizes]) => {
    const hello = hellos[which % hellos.length] as Buffer;
    return sizes === undefined ? hello : fragmentRecords(handshakeOf(hello), sizes, 0x0303);
  });
const input = fc.oneof(
  helloInput,
  fc.tuple(helloInput, fc.array(mutation, { minLength: 1, maxLength: 4 })).map(([b, ms]) => mutate(b, ms)),
  fc.uint8Array({ maxLength: 64 }).map((b) => Buffer.concat([Buffer.of(0x16, 0x03, 0x01), b])),
);

describe('client hello fuzz: prefixes and memory', () => {
  it('gives need-more or the whole result at every prefix, and reads a view as it reads a copy', () => {
    fc.assert(
      fc.property(input, fc.nat(16), (bytes, offset) => {
        const whole = sniffClientHello(bytes);
        if (bytes.length >= CLIENT_HELLO_MAX_PREFIX_BYTES) assert.notEqual(whole.kind, 'need-more');
        let decided: ClientHelloSniff | undefined;
        for (let k = 0; k <= bytes.length; k++) {
          const r = sniffClientHello(bytes.subarray(0, k));
          if (r.kind === 'need-more') {
            assert.equal(decided, undefined, `need-more at ${k} after a decision`);
            continue;
          }
          decided = r;
          assert.deepEqual(r, whole, `prefix of ${k} bytes`);
        }
        const backing = new Uint8Array(offset + bytes.length + 8).fill(0x16);
        backing.set(bytes, offset);
        assert.deepEqual(sniffClientHello(backing.subarray(offset, offset + bytes.length)), whole);
      }),
      fuzzParams(300),
    );
  });
});

/** What OpenSSL made of a ClientHello, as far as it got: the SNI and ALPN it handed to node's callbacks. */
interface OpenSslView {
  /** Some callback ran: OpenSSL read the whole hello. */
  reached: boolean;
  servername: string | undefined;
  /** Undefined when the ALPN callback did not run (no ALPN extension, or the handshake failed before it). */
  protocols: string[] | undefined;
}

describe('client hello fuzz: OpenSSL (node:tls) as the reference', () => {
  let server: TlsServer;
  let port: number;
  let current: OpenSslView | undefined;

  before(async () => {
    // No certificate: each handshake fails once OpenSSL has read the hello and run the callbacks.
    server = createTlsServer({
      SNICallback(servername, cb) {
        if (current !== undefined) {
          current.reached = true;
          current.servername = servername;
        }
        cb(null, undefined);
      },
      ALPNCallback({ servername, protocols }: { servername: string | undefined; protocols: string[] }) {
        if (current !== undefined) {
          current.reached = true;
          current.servername = servername || undefined;
          current.protocols = protocols;
        }
        return undefined;
      },
    } as Parameters<typeof createTlsServer>[0]);
    server.on('tlsClientError', () => {});
    server.listen(0, '127.0.0.1');
    await once(server, 'listening');
    port = (server.address() as AddressInfo).port;
  });

  after(() => server.close());

  /** Sends `bytes` to the TLS server; what OpenSSL read once it closed the connection. */
  function openSsl(bytes: Buffer): Promise<OpenSslView> {
    const view: OpenSslView = { reached: false, servername: undefined, protocols: undefined };
    current = view;
    return new Promise((resolve) => {
      const s = netConnect({ port, host: '127.0.0.1' });
      const done = (): void => {
        clearTimeout(timer);
        s.destroy();
        if (current === view) current = undefined;
        resolve(view);
      };
      // The bytes end with our FIN, so a truncated hello fails at once; the timer is a backstop.
      const timer = setTimeout(done, 2000);
      s.on('error', () => {});
      s.on('data', () => {});
      s.on('close', done);
      s.end(bytes);
    });
  }

  it('reads the SNI and ALPN OpenSSL reads from every hello both accept', async () => {
    // Mutations that keep the framing more often than not, so OpenSSL still gets to its callbacks.
    const light = fc.tuple(helloInput, fc.array(mutation, { maxLength: 2 })).map(([b, ms]) => mutate(b, ms));
    let compared = 0;
    await fc.assert(
      fc.asyncProperty(light, async (bytes) => {
        const ours = sniffClientHello(bytes);
        const theirs = await openSsl(bytes);
        if (!theirs.reached) return;
        // What OpenSSL reads as a hello is TLS to us too: malformed only for an SNI that is no
        // DNS host name (OpenSSL takes any octets there; ward does not).
        if (ours.kind === 'malformed') assert.equal(ours.reason, 'SNI host_name is not a DNS host name');
        else assert.equal(ours.kind, 'hello');
        if (ours.kind !== 'hello') return;
        compared++;
        assert.equal(ours.sni, theirs.servername, 'SNI');
        // node hands ALPN names over as ASCII (each octet's high bit dropped).
        const ascii = ours.alpn.map((p) => Buffer.from(p, 'latin1').toString('ascii'));
        if (theirs.protocols !== undefined) assert.deepEqual(ascii, theirs.protocols, 'ALPN');
      }),
      fuzzParams(300),
    );
    assert.ok(compared > 0, 'some hellos were read by both');
  });

  it('reads a hello in records of any 3.x version, as OpenSSL does', async () => {
    // Found by the comparison above: record version 3.128 was taken for "not TLS".
    for (const version of [0x0300, 0x0305, 0x0380, 0x03ff]) {
      const message = handshakeOf(hellos[0] as Buffer);
      const bytes = fragmentRecords(message, [40], version);
      const theirs = await openSsl(bytes);
      assert.ok(theirs.reached, `OpenSSL reads records of version ${version.toString(16)}`);
      assert.deepEqual(sniffClientHello(bytes), { kind: 'hello', sni: theirs.servername, alpn: theirs.protocols });
    }
  });

  it('reads a hello whose legacy_version is above 3.3, as OpenSSL does', async () => {
    // Found by the comparison above: legacy_version 4.3 was malformed.
    for (const version of [0x0304, 0x0403, 0xfefd]) {
      const message = Buffer.from(handshakeOf(hellos[0] as Buffer));
      message.writeUInt16BE(version, 4);
      const bytes = fragmentRecords(message, [], 0x0301);
      const theirs = await openSsl(bytes);
      assert.ok(theirs.reached, `OpenSSL reads legacy_version ${version.toString(16)}`);
      assert.deepEqual(sniffClientHello(bytes), { kind: 'hello', sni: theirs.servername, alpn: theirs.protocols });
    }
  });
});
