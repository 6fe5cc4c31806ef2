/**
 * `ward inject`: adds the proxy to workloads in manifests, offline, as `linkerd inject` does.
 * By default each pod template (Deployment, StatefulSet, DaemonSet, ReplicaSet, Job, CronJob,
 * Pod; also inside a `v1 List`) only gets `linkerd.io/inject: enabled`, and the cluster's
 * injector adds the proxy to each pod at creation; with `--manual` the template gets the whole
 * proxy (manifest's `injectKubeWorkload`, the webhook's transform). Other documents, comments and
 * formatting are kept as they are. Reads files, directories or `-` (stdin); writes YAML or JSON
 * on stdout and one line per workload on stderr.
 */
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import type { Command } from '@commander-js/extra-typings';
import { Composer, CST, type Document, Parser } from 'yaml';
import { injectKubeWorkload, type KubeInjectConfig } from '../../manifest/index.js';
import { errorMessage, packageVersionOf } from '../../shared/index.js';
import { type CliIo, EXIT, UsageError } from '../io.js';
import { palette } from '../output.js';
import { defaultImage } from './install.js';

/** Flags of `ward inject`. */
export interface InjectFlags {
  readonly filename: readonly string[];
  readonly manual?: boolean;
  readonly output: string;
  readonly image?: string;
  readonly imagePullPolicy: string;
  readonly controllerHost?: string;
  readonly trustAnchors?: string;
  readonly controlPlaneNamespace: string;
  readonly trustDomain: string;
  readonly clusterDomain: string;
  readonly proxyUid?: string;
}

const collect = (value: string, previous: string[]) => [...previous, value];
const MANIFEST_FILE = /\.(ya?ml|json)$/i;

/** Registers `ward inject`. */
export function registerInjectCommand(program: Command, io: CliIo, result: { status: number }): void {
  program
    .command('inject')
    .description("add ward's proxy to the workloads of manifests (by default the inject annotation, for the cluster's injector)")
    .argument('[paths...]', 'manifest files or directories; - for stdin')
    .option('-f, --filename <path>', 'manifest file or directory (repeatable; - for stdin)', collect, [] as string[])
    .option('--manual', 'write the proxy and init containers into the pod templates instead of the inject annotation')
    .option('-o, --output <format>', 'output format: yaml or json', 'yaml')
    .option('--image <image>', 'with --manual: the image of the injected containers (default localhost/ward:<version>)')
    .option('--image-pull-policy <policy>', 'with --manual: Always, IfNotPresent or Never', 'IfNotPresent')
    .option('--controller-host <host>', "with --manual: the controller's address (default ward-controller.<control-plane-namespace>.svc.<cluster-domain>)")
    .option('--trust-anchors <file>', 'with --manual: the trust anchors (PEM) the proxies verify the controller with')
    .option('--control-plane-namespace <ns>', 'control-plane namespace', 'linkerd')
    .option('--trust-domain <domain>', 'identity trust domain', 'cluster.local')
    .option('--cluster-domain <domain>', 'cluster domain', 'cluster.local')
    .option('--proxy-uid <uid>', 'with --manual: the user the proxy runs as (default 2102)')
    .action((paths, opts) => {
      const flags = opts as unknown as InjectFlags;
      result.status = runInject({ ...flags, filename: [...paths, ...flags.filename] }, io);
    });
}

/** The injector's values for `--manual`; throws `UsageError`. */
function manualConfig(flags: InjectFlags): KubeInjectConfig {
  if (flags.trustAnchors === undefined) throw new UsageError('--manual needs --trust-anchors FILE (the PEM the injected proxies verify the controller with)');
  let pem: string;
  try {
    pem = readFileSync(flags.trustAnchors, 'utf8');
  } catch (e) {
    throw new UsageError(`--trust-anchors ${flags.trustAnchors}: cannot read: ${errorMessage(e)}`);
  }
  if (!pem.includes('-----BEGIN CERTIFICATE-----')) throw new UsageError(`--trust-anchors ${flags.trustAnchors}: no PEM certificate in it`);
  if (!['Always', 'IfNotPresent', 'Never'].includes(flags.imagePullPolicy)) {
    throw new UsageError(`--image-pull-policy "${flags.imagePullPolicy}" must be Always, IfNotPresent or Never`);
  }
  const uid = flags.proxyUid === undefined ? undefined : /^\d{1,10}$/.test(flags.proxyUid) && Number(flags.proxyUid) > 0 ? Number(flags.proxyUid) : Number.NaN;
  if (Number.isNaN(uid)) throw new UsageError(`--proxy-uid "${flags.proxyUid ?? ''}" is not a user id above 0`);
  const version = packageVersionOf(import.meta.url);
  return {
    controlPlaneNamespace: flags.controlPlaneNamespace,
    image: flags.image ?? defaultImage(version),
    imagePullPolicy: flags.imagePullPolicy,
    controllerHost: flags.controllerHost ?? `ward-controller.${flags.controlPlaneNamespace}.svc.${flags.clusterDomain}`,
    trustAnchorsPem: pem,
    trustDomain: flags.trustDomain,
    clusterDomain: flags.clusterDomain,
    version,
    ...(uid !== undefined ? { proxyUid: uid } : {}),
  };
}

/** The texts of the inputs, in order; throws `UsageError` for unreadable paths. */
function readInputs(paths: readonly string[], io: CliIo): { name: string; text: string }[] {
  const out: { name: string; text: string }[] = [];
  for (const path of paths) {
    if (path === '-') {
      out.push({ name: '<stdin>', text: io.stdin() });
      continue;
    }
    try {
      const files = statSync(path).isDirectory()
        ? readdirSync(path, { recursive: true, withFileTypes: true })
            .filter((e) => e.isFile() && MANIFEST_FILE.test(e.name))
            .map((e) => join(e.parentPath, e.name))
            .sort()
        : [path];
      for (const file of files) out.push({ name: file, text: readFileSync(file, 'utf8') });
    } catch (e) {
      throw new UsageError(`${path}: cannot read: ${errorMessage(e)}`);
    }
  }
  return out;
}

/** Runs `ward inject`; throws `UsageError` for bad flags and unreadable input. */
export function runInject(flags: InjectFlags, io: CliIo): number {
  if (flags.filename.length === 0) throw new UsageError('no manifests: give files or directories, or - for stdin');
  if (flags.output !== 'yaml' && flags.output !== 'json') throw new UsageError(`-o ${flags.output}: the output format must be yaml or json`);
  const cfg = flags.manual === true ? manualConfig(flags) : undefined;
  const p = palette(io.color);
  const pieces: Piece[] = [];
  for (const input of readInputs(flags.filename, io)) pieces.push(...splitDocuments(input.name, input.text));
  for (const piece of pieces) {
    const { doc } = piece;
    if (doc === undefined || doc.contents === null) continue;
    const value: unknown = doc.toJS();
    const isList = isRecord(value) && value.kind === 'List' && Array.isArray(value.items);
    const objects = isList ? (value.items as unknown[]).map((item, i) => ({ item, prefix: ['items', i] })) : [{ item: value, prefix: [] }];
    for (const { item, prefix } of objects) {
      const r = injectKubeWorkload(item, cfg, { manual: cfg !== undefined });
      if (r.outcome === 'unsupported') continue;
      const name = `${String((item as { kind: string }).kind).toLowerCase()} "${nameOf(item)}"`;
      for (const w of r.warnings) io.err(`${p.yellow('warning')}: ${name}: ${w}\n`);
      if (r.template === undefined) {
        io.err(`${p.yellow('skipped')} ${name}: ${r.reason ?? 'nothing to do'}\n`);
        continue;
      }
      if (r.outcome === 'annotated') {
        // Only the annotation is set, so the rest of the document keeps its layout and comments.
        doc.setIn([...prefix, ...r.templatePath, 'metadata', 'annotations', 'linkerd.io/inject'], 'enabled');
      } else if (prefix.length + r.templatePath.length === 0) {
        doc.contents = doc.createNode(r.template);
      } else {
        doc.setIn([...prefix, ...r.templatePath], doc.createNode(r.template));
      }
      piece.changed = true;
      io.err(`${name} ${r.outcome === 'injected' ? 'injected' : 'annotated for injection'}\n`);
    }
  }
  if (flags.output === 'json') {
    const values = pieces.flatMap((x) => (x.doc !== undefined && x.doc.contents !== null ? [x.doc.toJS() as unknown] : []));
    const out = values.length === 1 ? values[0] : { apiVersion: 'v1', kind: 'List', items: values };
    io.out(`${JSON.stringify(out, null, 2)}\n`);
  } else {
    io.out(joinDocuments(pieces));
  }
  return EXIT.ok;
}

/** One document of an input: its source text (with what precedes it) and its parsed form. */
interface Piece {
  /** Comments and markers before the document, then the document, exactly as written. */
  readonly source: string;
  /** Undefined for text between documents that is not one (a trailing comment). */
  readonly doc: Document | undefined;
  changed: boolean;
}

/** Splits a YAML stream into documents, keeping each one's exact text; throws `UsageError` on syntax errors. */
function splitDocuments(name: string, text: string): Piece[] {
  const tokens = [...new Parser().parse(text)];
  const docs = [...new Composer().compose(tokens)];
  const bad = docs.flatMap((d) => d.errors);
  if (bad.length > 0) throw new UsageError(`${name}: not YAML: ${bad.map((e) => e.message).join('; ')}`);
  const pieces: Piece[] = [];
  let pending = '';
  let next = 0;
  for (const token of tokens) {
    pending += CST.stringify(token);
    if (token.type !== 'document') continue;
    pieces.push({ source: pending, doc: docs[next++], changed: false });
    pending = '';
  }
  if (pending !== '') pieces.push({ source: pending, doc: undefined, changed: false });
  return pieces;
}

/** The output stream: untouched documents as written, changed ones rendered again, `---` between. */
function joinDocuments(pieces: readonly Piece[]): string {
  let out = '';
  let documents = 0;
  for (const piece of pieces) {
    let text = piece.changed && piece.doc !== undefined ? piece.doc.toString({ flowCollectionPadding: false, lineWidth: 0 }) : piece.source;
    if (piece.doc !== undefined) {
      if (documents > 0 && !/^(#.*\n|\s*\n)*---/.test(text)) text = `---\n${text}`;
      documents++;
    }
    if (out !== '' && !out.endsWith('\n')) out += '\n';
    out += text;
  }
  return out;
}

function nameOf(obj: unknown): string {
  const meta = isRecord(obj) && isRecord(obj.metadata) ? obj.metadata : {};
  return typeof meta.name === 'string' ? meta.name : typeof meta.generateName === 'string' ? meta.generateName : '';
}

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}
