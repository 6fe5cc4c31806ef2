#!/usr/bin/env node
// `npm run gen:proto [-- --output DIR]`: regenerates src/api/gen from proto/ with ts-proto, run by
// buf as a local plugin (buf.gen.yaml). buf is installed on demand (see ensure-tool.mjs).
// A second run generates examples/emojivoto/services/gen from the example's own protos with the
// same plugin and options, except that its services are grpc-js stubs (the example's apps are
// grpc-js clients and servers; src/api/gen has plain definitions). Its template is derived here
// rather than kept in a second YAML file, because `ward up examples/emojivoto` reads every YAML
// file below the example as a manifest.
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { parse } from 'yaml';
import { ensureTool } from './ensure-tool.mjs';

const EXAMPLE_PROTO = 'examples/emojivoto/services/proto';
const EXAMPLE_GEN = 'examples/emojivoto/services/gen';

if (!ensureTool('buf')) process.exit(1);

function buf(args) {
  // Run through node: the shim's executable bit is not always set by an on-demand install.
  return spawnSync(process.execPath, ['node_modules/@bufbuild/buf/bin/buf', 'generate', ...args, ...process.argv.slice(2)], { stdio: 'inherit' }).status ?? 1;
}

const template = parse(readFileSync('buf.gen.yaml', 'utf8'));
/** The example's plugin options: buf.gen.yaml's, with grpc-js service stubs. */
const exampleOpt = (opt) => [...opt.filter((o) => !o.startsWith('outputServices=')), 'outputServices=grpc-js'];
const example = {
  ...template,
  plugins: template.plugins.map((p) => ({ ...p, out: EXAMPLE_GEN, opt: exampleOpt(p.opt ?? []) })),
  inputs: [{ directory: EXAMPLE_PROTO }],
};
const status = buf([]);
process.exit(status === 0 ? buf(['--template', JSON.stringify(example)]) : status);
