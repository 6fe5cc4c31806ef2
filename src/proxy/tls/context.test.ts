/**
 * Mesh TLS over real handshakes on 127.0.0.1: who gets in, what identity the server reads, what
 * the originating side accepts, and rotation.
 */
import assert from 'node:assert/strict';
import { X509Certificate } from 'node:crypto';
import type { AddressInfo } from 'node:net';
import { after, before, describe, it } from 'node:test';
import { type ConnectionOptions, connect, createServer, type Server, type TLSSocket, type TlsOptions } from 'node:tls';
import type { WorkloadCertificate } from '../../identity/index.js';
import { mkTestMesh, TempDirs, type TestMesh, within } from '../testing/identity.js';
import {
  checkMeshServerIdentity,
  clientIdentityOf,
  MESH_SERVER_ALPN,
  MeshTlsContext,
  meshClientOptions,
  meshSecureContext,
  meshServerOptions,
  TRANSPORT_HEADER_ALPN,
} from './context.js';
import { dnsSans, firstIdentitySan, parseSubjectAltNames } from './san.js';

const DAY = 86_400_000;
const dirs = new TempDirs();
const servers: TestServer[] = [];
after(async () => {
  await Promise.all(servers.map((s) => s.close()));
  dirs.cleanup();
});

/** A mesh TLS server that answers each accepted connection with the client id it read, then echoes. */
interface TestServer {
  readonly port: number;
  /** Client ids of the connections the server accepted (`-` for none). */
  readonly accepted: string[];
  /** Fingerprints of the client certificates of accepted connections. */
  readonly peers: (string | undefined)[];
  /** Handshakes the server refused, with the socket's `authorizationError` when verification failed. */
  readonly refused: { error: Error; authorizationError: string | undefined }[];
  readonly server: Server;
  close(): Promise<void>;
}

async function startServer(options: TlsOptions): Promise<TestServer> {
  const server = createServer(options);
  const sockets = new Set<TLSSocket>();
  const accepted: string[] = [];
  const peers: (string | undefined)[] = [];
  const refused: TestServer['refused'][number][] = [];
  server.on('secureConnection', (socket: TLSSocket) => {
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
    socket.on('error', () => {});
    const id = clientIdentityOf(socket) ?? '-';
    accepted.push(id);
    peers.push(socket.getPeerX509Certificate()?.fingerprint256);
    socket.write(`${id}\n`);
    socket.pipe(socket);
  });
  server.on('tlsClientError', (error, socket) => {
    const authorizationError = socket.authorizationError as Error | string | undefined;
    refused.push({ error, authorizationError: authorizationError instanceof Error ? authorizationError.message : authorizationError });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const s: TestServer = {
    port: (server.address() as AddressInfo).port,
    accepted,
    peers,
    refused,
    server,
    close: () =>
      new Promise<void>((resolve) => {
        for (const socket of sockets) socket.destroy();
        server.close(() => resolve());
      }),
  };
  servers.push(s);
  return s;
}

/** How a connection attempt went: the first line the server sent, or the error. */
interface Attempt {
  readonly line: string | undefined;
  readonly error: (Error & { code?: string }) | undefined;
  readonly socket: TLSSocket;
}

/** Connects, reads the server's first line (or fails), and leaves the socket open when `keep`. */
function attempt(port: number, options: ConnectionOptions, keep = false): Promise<Attempt> {
  return within(
    new Promise<Attempt>((resolve) => {
      const socket = connect({ ...options, host: '127.0.0.1', port });
      let buffered = '';
      let done = false;
      const finish = (line: string | undefined, error: Error | undefined) => {
        if (done) return;
        done = true;
        if (!keep || line === undefined) socket.destroy();
        resolve({ line, error, socket });
      };
      socket.setEncoding('utf8');
      socket.on('data', (chunk: string) => {
        buffered += chunk;
        const nl = buffered.indexOf('\n');
        if (nl !== -1) finish(buffered.slice(0, nl), undefined);
      });
      socket.on('error', (e) => finish(undefined, e));
      socket.on('close', () => finish(undefined, undefined));
    }),
    5000,
    'a TLS connection attempt',
  );
}

/** Asserts that the server refused the handshake: no line, no accepted connection, a handshake error. */
async function assertRefusedByServer(s: TestServer, options: ConnectionOptions, pattern: RegExp): Promise<void> {
  const acceptedBefore = s.accepted.length;
  const refusedBefore = s.refused.length;
  const a = await attempt(s.port, options);
  assert.equal(a.line, undefined, 'the client must not get an answer');
  assert.equal(s.accepted.length, acceptedBefore, 'the server must not accept the connection');
  // The server's verdict can land just after the client saw the connection close.
  for (let i = 0; i < 100 && s.refused.length === refusedBefore; i++) await new Promise((r) => setTimeout(r, 5));
  const r = s.refused[refusedBefore];
  assert.ok(r !== undefined, 'the server reports a handshake error');
  assert.match(`${r.authorizationError ?? ''} ${(r.error as { code?: string }).code ?? ''} ${r.error.message}`, pattern);
}

const fingerprint = (cert: WorkloadCertificate) => new X509Certificate(cert.certPem).fingerprint256;

let mesh: TestMesh;
let foreign: TestMesh;
let web: WorkloadCertificate;
let voteBot: WorkloadCertificate;
let emoji: WorkloadCertificate;
let srv: TestServer;

before(async () => {
  [mesh, foreign] = await Promise.all([mkTestMesh(dirs), mkTestMesh(dirs)]);
  [web, voteBot, emoji] = await Promise.all([mesh.issue('emojivoto', 'web'), mesh.issue('emojivoto', 'vote-bot'), mesh.issue('emojivoto', 'emoji')]);
  srv = await startServer(meshServerOptions(web, mesh.anchorsPem));
});

describe('mesh TLS handshakes', () => {
  it('a mesh client with a valid identity connects; each side reads the other identity', async () => {
    const a = await attempt(srv.port, meshClientOptions(voteBot, mesh.anchorsPem, web.identity, [TRANSPORT_HEADER_ALPN]), true);
    try {
      assert.equal(a.error, undefined);
      assert.equal(a.line, voteBot.identity);
      assert.equal(a.socket.getProtocol(), 'TLSv1.3');
      assert.equal(a.socket.alpnProtocol, TRANSPORT_HEADER_ALPN);
      assert.equal(clientIdentityOf(a.socket), web.identity);
    } finally {
      a.socket.destroy();
    }
  });

  it('offers transport.l5d.io/v1, h2 and http/1.1; no ALPN unless asked', async () => {
    assert.deepEqual(MESH_SERVER_ALPN, ['transport.l5d.io/v1', 'h2', 'http/1.1']);
    for (const alpn of MESH_SERVER_ALPN) {
      const a = await attempt(srv.port, meshClientOptions(voteBot, mesh.anchorsPem, web.identity, [alpn]), true);
      assert.equal(a.socket.alpnProtocol, alpn);
      a.socket.destroy();
    }
    const none = await attempt(srv.port, meshClientOptions(voteBot, mesh.anchorsPem, web.identity), true);
    assert.equal(none.line, voteBot.identity);
    assert.equal(none.socket.alpnProtocol, false);
    none.socket.destroy();
  });

  it('refuses a client whose certificate comes from another CA', async () => {
    const stranger = await foreign.issue('emojivoto', 'vote-bot');
    // The client trusts our server; only its own certificate is foreign.
    await assertRefusedByServer(srv, meshClientOptions(stranger, mesh.anchorsPem, web.identity), /UNABLE_TO_GET_ISSUER_CERT|unable to get|certificate/i);
  });

  it('refuses a client without a certificate', async () => {
    await assertRefusedByServer(
      srv,
      { ca: mesh.anchorsPem, servername: web.identity, minVersion: 'TLSv1.3', checkServerIdentity: () => undefined },
      /certificate|PEER_DID_NOT_RETURN/i,
    );
  });

  it('refuses an expired client certificate', async () => {
    const expired = await mesh.issue('emojivoto', 'vote-bot', { now: Date.now() - 3 * DAY });
    assert.ok(expired.notAfterMs < Date.now() - DAY, 'the certificate expired a day ago');
    await assertRefusedByServer(srv, meshClientOptions(expired, mesh.anchorsPem, web.identity), /CERT_HAS_EXPIRED|expired/i);
  });

  it('refuses a TLS 1.2-only client', async () => {
    await assertRefusedByServer(
      srv,
      {
        cert: voteBot.certPem + voteBot.chainPem,
        key: voteBot.keyPem,
        ca: mesh.anchorsPem,
        servername: web.identity,
        maxVersion: 'TLSv1.2',
        checkServerIdentity: () => undefined,
      },
      /protocol|version/i,
    );
  });

  it('the client refuses a server whose certificate carries another identity', async () => {
    const accepted = srv.accepted.length;
    const a = await attempt(srv.port, meshClientOptions(voteBot, mesh.anchorsPem, emoji.identity));
    assert.equal(a.line, undefined);
    assert.equal(a.error?.code, 'ERR_TLS_CERT_ALTNAME_INVALID');
    assert.match(a.error?.message ?? '', /does not carry the identity emoji\.emojivoto/);
    // Whatever the server saw, no data flowed to the client.
    assert.ok(srv.accepted.length <= accepted + 1);
  });

  it('the client refuses a server whose chain comes from another CA', async () => {
    const strangerWeb = await foreign.issue('emojivoto', 'web');
    const other = await startServer(meshServerOptions(strangerWeb, foreign.anchorsPem));
    const a = await attempt(other.port, meshClientOptions(voteBot, mesh.anchorsPem, web.identity));
    assert.equal(a.line, undefined);
    assert.match(a.error?.message ?? '', /issuer|certificate/i);
    await other.close();
  });
});

describe('server identity check', () => {
  const id = 'web.emojivoto.serviceaccount.identity.linkerd.cluster.local';
  it('accepts an exact DNS SAN anywhere in the list', () => {
    assert.equal(checkMeshServerIdentity(id, { subjectaltname: `DNS:${id}` }), undefined);
    assert.equal(checkMeshServerIdentity(id, { subjectaltname: `DNS:other.example, URI:spiffe://x/y, DNS:${id}` }), undefined);
  });
  it('rejects wildcards, URIs, case variants, CN-only and missing SANs', () => {
    for (const subjectaltname of [
      'DNS:*.emojivoto.serviceaccount.identity.linkerd.cluster.local',
      `URI:${id}`,
      `DNS:${id.toUpperCase()}`,
      `DNS:${id}.evil`,
      '',
    ]) {
      const err = checkMeshServerIdentity(id, { subjectaltname });
      assert.ok(err instanceof Error, subjectaltname);
      assert.equal((err as Error & { code?: string }).code, 'ERR_TLS_CERT_ALTNAME_INVALID');
    }
    assert.ok(checkMeshServerIdentity(id, {} as { subjectaltname: string }) instanceof Error);
  });
});

describe('subjectAltName parsing', () => {
  it('keeps certificate order and types', () => {
    assert.deepEqual(parseSubjectAltNames('DNS:a.b, URI:spiffe://td/ns/x, IP Address:10.0.0.1, IP Address:FD00:0:0:0:0:0:0:1, email:x@y'), [
      { type: 'DNS', value: 'a.b' },
      { type: 'URI', value: 'spiffe://td/ns/x' },
      { type: 'IP Address', value: '10.0.0.1' },
      { type: 'IP Address', value: 'FD00:0:0:0:0:0:0:1' },
      { type: 'email', value: 'x@y' },
    ]);
  });
  it('decodes JSON-quoted values (commas and quotes cannot fake an entry)', () => {
    assert.deepEqual(parseSubjectAltNames('DNS:"a, DNS:evil", DNS:c'), [
      { type: 'DNS', value: 'a, DNS:evil' },
      { type: 'DNS', value: 'c' },
    ]);
    assert.deepEqual(parseSubjectAltNames(String.raw`DNS:"q\"x\\", URI:u`), [
      { type: 'DNS', value: 'q"x\\' },
      { type: 'URI', value: 'u' },
    ]);
  });
  it('refuses text not in the node format', () => {
    for (const bad of ['nocolon', 'DNS:"unterminated', 'DNS:a,DNS:b', 'DNS:"a"x']) assert.equal(parseSubjectAltNames(bad), undefined, bad);
    assert.deepEqual(dnsSans('DNS:"unterminated'), []);
  });
  it('the client identity is the first DNS or URI SAN', () => {
    assert.equal(firstIdentitySan('DNS:a, URI:b'), 'a');
    assert.equal(firstIdentitySan('URI:spiffe://td/ns/web, DNS:a'), 'spiffe://td/ns/web');
    assert.equal(firstIdentitySan('IP Address:10.0.0.1, email:x@y, DNS:c'), 'c');
    assert.equal(firstIdentitySan('email:x@y'), undefined);
    assert.equal(firstIdentitySan(''), undefined);
    assert.equal(firstIdentitySan(undefined), undefined);
  });
});

describe('context caching and rotation', () => {
  it('one SecureContext per certificate and anchors', () => {
    assert.equal(meshSecureContext(web, mesh.anchorsPem), meshSecureContext(web, mesh.anchorsPem));
    assert.equal(
      meshClientOptions(web, mesh.anchorsPem, emoji.identity).secureContext,
      meshClientOptions(web, mesh.anchorsPem, voteBot.identity, [TRANSPORT_HEADER_ALPN]).secureContext,
    );
    assert.notEqual(meshSecureContext(web, mesh.anchorsPem), meshSecureContext(voteBot, mesh.anchorsPem));
    assert.notEqual(meshSecureContext(web, mesh.anchorsPem), meshSecureContext(web, foreign.anchorsPem));
  });

  it('a rotation changes the certificate of new handshakes only; open connections keep working', async () => {
    const web2 = await mesh.issue('emojivoto', 'web');
    const voteBot2 = await mesh.issue('emojivoto', 'vote-bot');
    assert.notEqual(fingerprint(web), fingerprint(web2));
    const serverTls = new MeshTlsContext(web, mesh.anchorsPem);
    const clientTls = new MeshTlsContext(voteBot, mesh.anchorsPem);
    const s = await startServer(serverTls.serverOptions());

    const before = await attempt(s.port, clientTls.clientOptions(web.identity), true);
    assert.equal(before.line, voteBot.identity);
    assert.equal(before.socket.getPeerX509Certificate()?.fingerprint256, fingerprint(web));
    const clientContextBefore = clientTls.clientOptions(web.identity).secureContext;

    serverTls.rotate(web2);
    clientTls.rotate(voteBot2);
    assert.equal(serverTls.certificate, web2);
    assert.notEqual(clientTls.clientOptions(web.identity).secureContext, clientContextBefore);

    const afterRotation = await attempt(s.port, clientTls.clientOptions(web.identity), true);
    assert.equal(afterRotation.line, voteBot.identity);
    assert.equal(afterRotation.socket.getPeerX509Certificate()?.fingerprint256, fingerprint(web2));
    assert.deepEqual(s.peers, [fingerprint(voteBot), fingerprint(voteBot2)]);

    // The connection made before the rotation still carries data (the server echoes).
    const echoed = within(new Promise<string>((resolve) => before.socket.once('data', (d: string) => resolve(d))), 5000, 'the echo');
    before.socket.write('ping');
    assert.equal(await echoed, 'ping');

    before.socket.destroy();
    afterRotation.socket.destroy();
    await s.close();
  });

  it('rotate refuses material that does not load and keeps the current certificate', () => {
    const ctx = new MeshTlsContext(web, mesh.anchorsPem);
    assert.throws(() => ctx.rotate({ ...voteBot, keyPem: web.keyPem }));
    assert.equal(ctx.certificate, web);
  });
});
