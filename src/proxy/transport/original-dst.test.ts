/**
 * The SO_ORIGINAL_DST wrapper's error paths: an addon that is not built or does not load, the
 * ENOENT fallback to the socket's local address, other errno failures and sockets without a file
 * descriptor as data — with stand-in addons (CommonJS files), and the real addon on a plain
 * loopback connection (no NAT entry). The redirected case needs iptables in a network namespace:
 * test/e2e/transparent.test.ts.
 */
import assert from 'node:assert/strict';
import { once } from 'node:events';
import { writeFileSync } from 'node:fs';
import { type AddressInfo, createServer, connect as netConnect, type Server, Socket } from 'node:net';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { socketFd } from '../../http/node-internals.js';
import { MeshError } from '../../shared/index.js';
import { TempDirs, within } from '../testing/identity.js';
import { buildAddonIfMissing } from '../testing/native.js';
import { loadOriginalDst, ORIGINAL_DST_ADDON_PATH, OriginalDstAddonError, type OriginalDstReader, originalDstAddonPath } from './original-dst.js';

const HOST = '127.0.0.1';
const dirs = new TempDirs();
let dir: string;
let server: Server;
const accepted: Socket[] = [];
const clients: Socket[] = [];

/** A stand-in addon whose getOriginalDst runs `body` (CommonJS, loaded like the .node file). */
function fakeAddon(name: string, body: string): string {
  const file = join(dir, `${name}.cjs`);
  writeFileSync(file, `exports.getOriginalDst = (fd) => { ${body} };\n`);
  return file;
}

/** A loopback connection; resolves with the server's side of it. */
async function acceptOne(): Promise<Socket> {
  const got = once(server, 'connection') as Promise<[Socket]>;
  const c = netConnect({ host: HOST, port: (server.address() as AddressInfo).port });
  c.on('error', () => {});
  clients.push(c);
  const [s] = await within(got, 5000, 'a connection');
  s.on('error', () => {});
  accepted.push(s);
  return s;
}

before(async () => {
  dir = dirs.make('ward-odst-');
  server = createServer();
  server.listen(0, HOST);
  await once(server, 'listening');
});

after(async () => {
  for (const s of [...accepted, ...clients]) s.destroy();
  await new Promise((r) => server.close(r));
  dirs.cleanup();
});

describe('loadOriginalDst', () => {
  it('fails with ERR_ORIGINAL_DST_ADDON and the build hint when the addon is not built', () => {
    const missing = join(dir, 'build', 'Release', 'so_original_dst.node');
    assert.throws(
      () => loadOriginalDst(missing),
      (e: unknown) => {
        assert.ok(e instanceof OriginalDstAddonError && e instanceof MeshError);
        assert.equal(e.code, 'ERR_ORIGINAL_DST_ADDON');
        assert.equal(e.message, `transparent mode needs the SO_ORIGINAL_DST addon, which is not built: ${missing} does not exist`);
        assert.match(e.hint, /npm run build:native/);
        return true;
      },
    );
  });

  it('fails with ERR_ORIGINAL_DST_ADDON when the file does not load or is not the addon', () => {
    const garbage = join(dir, 'garbage.node');
    writeFileSync(garbage, 'not an ELF file');
    assert.throws(() => loadOriginalDst(garbage), {
      code: 'ERR_ORIGINAL_DST_ADDON',
      message: new RegExp(`^the SO_ORIGINAL_DST addon ${garbage} does not load: `),
    });
    const other = join(dir, 'other.cjs');
    writeFileSync(other, 'exports.somethingElse = 1;\n');
    assert.throws(() => loadOriginalDst(other), { code: 'ERR_ORIGINAL_DST_ADDON', message: /has no getOriginalDst function/ });
  });
});

describe('OriginalDstReader', () => {
  it('reports a redirected destination with the socket’s fd', async () => {
    const read = loadOriginalDst(fakeAddon('redirected', "if (typeof fd !== 'number') throw new Error('no fd'); return ['10.1.2.3', 8080];"));
    const s = await acceptOne();
    assert.equal(typeof socketFd(s), 'number');
    assert.deepEqual(read(s), { ok: true, value: { address: '10.1.2.3', port: 8080, redirected: true } });
  });

  it('falls back to the local address on ENOENT (no NAT entry)', async () => {
    const read = loadOriginalDst(
      fakeAddon('enoent', "const e = new Error('getsockopt(SO_ORIGINAL_DST): No such file or directory'); e.code = 'ENOENT'; throw e;"),
    );
    const s = await acceptOne();
    assert.deepEqual(read(s), { ok: true, value: { address: HOST, port: s.localPort, redirected: false } });
  });

  it('returns other errno failures, and sockets without a descriptor, as data', async () => {
    const read = loadOriginalDst(
      fakeAddon('enoprotoopt', "const e = new Error('getsockopt(SO_ORIGINAL_DST): Protocol not available'); e.code = 'ENOPROTOOPT'; throw e;"),
    );
    assert.deepEqual(read(await acceptOne()), { ok: false, code: 'ENOPROTOOPT', message: 'getsockopt(SO_ORIGINAL_DST): Protocol not available' });
    const unconnected = new Socket();
    assert.equal(socketFd(unconnected), undefined);
    assert.deepEqual(read(unconnected), { ok: false, code: 'ERR_NO_FD', message: 'the socket has no file descriptor' });
  });

  it('the real addon: a plain loopback connection reports its own local address', async (t) => {
    // A fresh clone: build it as `npm test` users would.
    const failed = buildAddonIfMissing(ORIGINAL_DST_ADDON_PATH);
    if (failed !== undefined && process.env.CI !== 'true') {
      t.skip(failed);
      return;
    }
    assert.equal(failed, undefined, failed);
    const read: OriginalDstReader = loadOriginalDst();
    const s = await acceptOne();
    const r = read(s);
    assert.ok(r.ok, JSON.stringify(r));
    // No NAT entry → ENOENT → the fallback. (In a namespace where NAT is active, conntrack keeps an
    // identity entry instead: the same address, reported as redirected; so `redirected` is not asserted.)
    assert.deepEqual({ address: r.value.address, port: r.value.port }, { address: HOST, port: s.localPort });
  });
});

describe('originalDstAddonPath', () => {
  it('is under the package root, for the ABI asked', () => {
    assert.equal(ORIGINAL_DST_ADDON_PATH, originalDstAddonPath(import.meta.url));
    assert.ok(originalDstAddonPath(import.meta.url, '137').endsWith('/native/build/node-v137/so_original_dst.node'));
  });
});
