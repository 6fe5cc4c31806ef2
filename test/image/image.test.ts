/**
 * `npm run image`: builds the image, unpacks the archive as a runtime would, and runs ward from
 * it with the image's own node and libraries (chroot, as the image's default user).
 */
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';

const ROOT = join(import.meta.dirname, '../..');
const VERSION = (JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as { version: string }).version;
const CHROOT = '/usr/sbin/chroot';

function unavailable(): string | undefined {
  if (process.getuid?.() !== 0) return 'needs root (chroot into the unpacked image)';
  for (const tool of [CHROOT, '/usr/sbin/xtables-nft-multi', '/usr/sbin/xtables-legacy-multi']) if (!existsSync(tool)) return `needs ${tool}`;
  return undefined;
}
const why = unavailable();

interface ImageConfig {
  config: { User?: string; Entrypoint?: string[]; Cmd?: unknown; Env?: string[] };
  rootfs: { diff_ids: string[] };
}

describe('npm run image', { skip: why !== undefined && process.env.CI !== 'true' ? why : false }, () => {
  const work = mkdtempSync(join(tmpdir(), 'ward-image-test-'));
  const rootfs = join(work, 'rootfs');
  let config: ImageConfig;
  let manifest: { Config: string; RepoTags: string[]; Layers: string[] }[];
  let built: { bytes: number; parts: Record<string, number> };

  before(async () => {
    if (why !== undefined) throw new Error(why);
    const { buildImage } = (await import(new URL('../../scripts/image.mjs', import.meta.url).href)) as {
      buildImage: (o: { out: string }) => Promise<{ bytes: number; parts: Record<string, number> }>;
    };
    built = await buildImage({ out: join(work, 'ward.tar') });
    const unpacked = join(work, 'archive');
    mkdirSync(unpacked);
    mkdirSync(rootfs);
    const tar = (args: string[]) => assert.equal(spawnSync('tar', args, { stdio: 'inherit' }).status, 0, `tar ${args.join(' ')}`);
    tar(['-xf', join(work, 'ward.tar'), '-C', unpacked]);
    manifest = JSON.parse(readFileSync(join(unpacked, 'manifest.json'), 'utf8')) as typeof manifest;
    config = JSON.parse(readFileSync(join(unpacked, manifest[0]?.Config ?? ''), 'utf8')) as ImageConfig;
    tar(['-xf', join(unpacked, manifest[0]?.Layers[0] ?? ''), '-C', rootfs]);
  });
  after(() => rmSync(work, { recursive: true, force: true }));

  /** Runs the image's entrypoint with `args`, as `user` (default: the image's User), with an empty environment but the image's. */
  const runImage = (args: string[], user?: string) => {
    const entry = config.config.Entrypoint ?? [];
    const env = Object.fromEntries((config.config.Env ?? []).map((e) => [e.slice(0, e.indexOf('=')), e.slice(e.indexOf('=') + 1)]));
    return spawnSync(CHROOT, [`--userspec=${user ?? config.config.User}`, rootfs, ...entry, ...args], { encoding: 'utf8', env, timeout: 120_000 });
  };

  it('is a docker-archive with the ref, a non-root default user, and ward as the entrypoint', () => {
    assert.deepEqual(
      manifest.map((m) => m.RepoTags),
      [[`localhost/ward:${VERSION}`]],
    );
    assert.equal(config.rootfs.diff_ids.length, 1);
    assert.equal(config.config.User, '2102:2102');
    assert.deepEqual(config.config.Entrypoint, ['/usr/bin/node', '/opt/ward/bin/ward.js']);
    assert.equal(config.config.Cmd, null);
    const passwd = readFileSync(join(rootfs, 'etc/passwd'), 'utf8');
    assert.match(passwd, /^ward:x:2102:2102:/m);
    // Node's binary is most of it; the rest stays small.
    assert.ok(built.bytes < 160 * 1024 * 1024, `${built.bytes} bytes`);
    assert.ok(Object.values(built.parts).reduce((a, b) => a + b, 0) - (built.parts.node ?? 0) < 40 * 1024 * 1024, JSON.stringify(built.parts));
  });

  it('runs ward --version and a bundled command with its own node and libraries', () => {
    const v = runImage(['--version']);
    assert.equal(v.status, 0, v.stderr);
    assert.equal(v.stdout, `ward ${VERSION}\n`);
    const crds = runImage(['install', '--crds', '-o', 'json']);
    assert.equal(crds.status, 0, crds.stderr);
    assert.equal((JSON.parse(crds.stdout) as { items: unknown[] }).items.length, 8);
  });

  it('has the packages loaded at run time: certificates (x509), then a controller (gRPC, metrics)', async () => {
    mkdirSync(join(rootfs, 'tmp', 'manifests'), { recursive: true });
    const init = runImage(['identity', 'init', '--out', '/tmp/identity']);
    assert.equal(init.status, 0, init.stderr);
    const controller = spawn(
      CHROOT,
      [
        `--userspec=${config.config.User}`,
        rootfs,
        ...(config.config.Entrypoint ?? []),
        'controller',
        '--manifests=/tmp/manifests',
        '--identity-dir=/tmp/identity',
        ...['policy', 'identity', 'destination', 'admin'].map((a) => `--${a}-addr=127.0.0.1:0`),
      ],
      { env: {}, stdio: ['ignore', 'ignore', 'pipe'] },
    );
    let stderr = '';
    const ready = await new Promise<boolean>((resolve) => {
      const timer = setTimeout(() => resolve(false), 60_000);
      controller.stderr.on('data', (d: Buffer) => {
        stderr += d.toString();
        if (stderr.includes('ward controller ready')) {
          clearTimeout(timer);
          resolve(true);
        }
      });
      controller.on('exit', () => {
        clearTimeout(timer);
        resolve(false);
      });
    });
    const exited = new Promise((r) => controller.on('exit', r));
    controller.kill('SIGTERM');
    await exited;
    assert.ok(ready, stderr);
  });

  it('loads the native addons as the default user', () => {
    const r = spawnSync(
      CHROOT,
      [
        `--userspec=${config.config.User}`,
        rootfs,
        '/usr/bin/node',
        '-e',
        "for (const a of ['so_original_dst', 'gc_pauses', 'malloc_trim']) require('/opt/ward/native/build/node-v' + process.versions.modules + '/' + a + '.node')",
      ],
      { encoding: 'utf8', env: {} },
    );
    assert.equal(r.status, 0, r.stderr);
  });

  it('has iptables, nft and legacy, for ward proxy-init', () => {
    for (const [tool, flavour] of [
      ['iptables', 'nf_tables'],
      ['iptables-nft-restore', 'nf_tables'],
      ['iptables-legacy-save', 'legacy'],
      ['ip6tables-legacy-restore', 'legacy'],
    ] as const) {
      const r = spawnSync(CHROOT, [rootfs, `/usr/sbin/${tool}`, '--version'], { encoding: 'utf8', env: {} });
      assert.equal(r.status, 0, `${tool}: ${r.stderr}`);
      assert.match(r.stdout, new RegExp(`\\(${flavour}\\)`), tool);
    }
    assert.ok(existsSync(join(rootfs, 'usr/lib/x86_64-linux-gnu/xtables/libxt_REDIRECT.so')));
    assert.ok(existsSync(join(rootfs, 'usr/lib/x86_64-linux-gnu/xtables/libxt_owner.so')));
  });
});
