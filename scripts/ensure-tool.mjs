// Installs a dev tool on demand, without recording it in package-lock.json. Used for tools whose
// npm package pulls a per-platform binary through optionalDependencies (Biome, buf): the registry
// this project builds from serves only the Linux builds, and a lock file that names them all (as
// npm writes it) makes `npm ci` fail for the missing ones. Go tools (h2spec) are built from the Go
// module proxy with the Go toolchain into a cache under the home directory, kept between runs.
import { spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { homedir } from 'node:os';
import { join } from 'node:path';

/** Pinned tools: package spec and the file whose presence means "installed". */
export const TOOLS = {
  biome: { spec: '@biomejs/biome@2.6.8', marker: 'node_modules/@biomejs/biome/package.json' },
  buf: { spec: '@bufbuild/buf@1.75.0', marker: 'node_modules/@bufbuild/buf/package.json' },
};

/**
 * Pinned Go tools: the package to build and the modules it is built with. h2spec's last release
 * on the module proxy (v2.2.1, the 146 cases of `--strict`) has no go.mod, so `go install` would
 * take its dependencies at their latest; a go.mod of our own pins them.
 */
export const GO_TOOLS = {
  h2spec: {
    pkg: 'github.com/summerwind/h2spec/cmd/h2spec',
    requires: {
      'github.com/summerwind/h2spec': 'v2.2.1+incompatible',
      'github.com/fatih/color': 'v1.18.0',
      'github.com/spf13/cobra': 'v1.10.2',
      'golang.org/x/net': 'v0.33.0',
    },
  },
};

/** Where Go tools are built: `$XDG_CACHE_HOME/ward/tools` (default `~/.cache/ward/tools`). */
export function toolsDir() {
  return join(process.env.XDG_CACHE_HOME || join(homedir(), '.cache'), 'ward', 'tools');
}

/** The binary of Go tool `name` as pinned (present or not): a change of the pins builds it anew. */
export function goToolPath(name) {
  const pins = createHash('sha256').update(JSON.stringify(GO_TOOLS[name])).digest('hex').slice(0, 12);
  return join(toolsDir(), `${name}-${pins}`, name);
}

/** The `go` command: on PATH, else where the official archive installs it. */
function goCommand() {
  const onPath = spawnSync('go', ['version'], { stdio: 'ignore' });
  if (onPath.status === 0) return 'go';
  return existsSync('/usr/local/go/bin/go') ? '/usr/local/go/bin/go' : undefined;
}

function ensureGoTool(name) {
  const bin = goToolPath(name);
  if (existsSync(bin)) return true;
  const go = goCommand();
  if (go === undefined) {
    console.error(`cannot build ${name}: no Go toolchain (go on PATH or /usr/local/go/bin/go)`);
    return false;
  }
  const tool = GO_TOOLS[name];
  const dir = join(toolsDir(), `${name}-build`);
  rmSync(dir, { recursive: true, force: true });
  mkdirSync(dir, { recursive: true });
  const requires = Object.entries(tool.requires).map(([m, v]) => `\t${m} ${v}\n`);
  writeFileSync(join(dir, 'go.mod'), `module ward.local/tools/${name}\n\ngo 1.18\n\nrequire (\n${requires.join('')})\n`);
  console.error(`building ${tool.pkg} into ${bin}`);
  // -mod=mod: the indirect requirements and go.sum are filled in from the pinned modules' own go.mod files.
  const r = spawnSync(go, ['build', '-mod=mod', '-trimpath', '-o', bin, tool.pkg], {
    cwd: dir,
    stdio: ['ignore', 'inherit', 'inherit'],
    env: { ...process.env, GOFLAGS: '-buildvcs=false', GOTOOLCHAIN: 'local' },
  });
  return r.status === 0 && existsSync(bin);
}

/**
 * Makes sure `tool` is installed; returns false (after printing why) when it cannot be. Every
 * pinned npm tool is installed in the same command: `npm install --no-save` prunes packages that
 * are not in the lock file, so installing one alone would remove the other.
 */
export function ensureTool(name) {
  if (name in GO_TOOLS) return ensureGoTool(name);
  if (existsSync(TOOLS[name].marker)) return true;
  const specs = Object.values(TOOLS).map((t) => t.spec);
  console.error(`installing ${specs.join(', ')} (kept out of the lock file, see scripts/ensure-tool.mjs)`);
  const r = spawnSync('npm', ['install', '--no-save', '--no-audit', '--no-fund', ...specs], { stdio: ['ignore', 'inherit', 'inherit'] });
  return r.status === 0 && existsSync(TOOLS[name].marker);
}
