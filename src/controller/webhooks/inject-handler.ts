/**
 * The mutating webhook (`POST /inject`): a Pod being created gets the proxy injector's JSON Patch
 * (manifest's `injectKubePod`). It always admits: a pod that cannot be injected is created as it
 * is and the failure is logged, as upstream's injector behaves under `failurePolicy: Ignore`.
 * Nothing here has side effects, so dry-run requests get the same answer.
 */
import { injectKubePod, type KubeInjectConfig } from '../../manifest/index.js';
import { errorMessage, type Logger } from '../../shared/index.js';
import { type AdmissionRequest, type AdmissionResponse, allow, isRecord } from './admission-review.js';

/** What the mutating webhook needs from the controller. */
export interface InjectOptions {
  /** The injector's install values (a function: the trust anchors or the controller's address may change). */
  readonly config: KubeInjectConfig | (() => KubeInjectConfig);
  /** The Namespace object from the controller's cache; undefined when it does not know it. */
  readonly lookupNamespace: (name: string) => unknown;
  /** Reads the Namespace from the API server when the cache does not know it; undefined if absent. */
  readonly fetchNamespace?: ((name: string) => Promise<unknown>) | undefined;
  /**
   * How long to wait for `fetchNamespace` (default 5 s): the API server gives the webhook 10 s at
   * most, and a late answer would leave the pod to the failure policy instead of this log.
   */
  readonly fetchTimeoutMs?: number | undefined;
  readonly logger?: Logger | undefined;
}

function withTimeout<T>(p: Promise<T>, ms: number, namespace: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`reading namespace ${namespace} took longer than ${ms} ms`)), ms);
  });
  return Promise.race([p, late]).finally(() => clearTimeout(timer));
}

/** True for the requests the injector transforms: the creation of a Pod itself. */
function isPodCreate(r: AdmissionRequest): boolean {
  return r.operation === 'CREATE' && r.kind.group === '' && r.kind.kind === 'Pod' && r.subResource === undefined;
}

/** The mutating webhook's answer to one request. Never rejects. */
export async function handleInject(request: AdmissionRequest, opts: InjectOptions): Promise<AdmissionResponse> {
  const { uid } = request;
  if (!isPodCreate(request)) return allow(uid);
  const pod = request.object;
  const meta = isRecord(pod) && isRecord(pod.metadata) ? pod.metadata : {};
  const namespace = request.namespace ?? (typeof meta.namespace === 'string' && meta.namespace !== '' ? meta.namespace : 'default');
  const podName = typeof meta.name === 'string' && meta.name !== '' ? meta.name : `${typeof meta.generateName === 'string' ? meta.generateName : ''}*`;
  const log = { namespace, pod: podName, dryRun: request.dryRun };
  try {
    let ns = opts.lookupNamespace(namespace);
    if (ns === undefined && opts.fetchNamespace !== undefined) ns = await withTimeout(opts.fetchNamespace(namespace), opts.fetchTimeoutMs ?? 5_000, namespace);
    const config = typeof opts.config === 'function' ? opts.config() : opts.config;
    const r = injectKubePod(pod, ns, config, { namespace });
    for (const w of r.warnings) opts.logger?.warn(log, w);
    if (!r.injected) {
      opts.logger?.debug({ ...log, reason: r.reason }, 'pod not injected');
      return allow(uid);
    }
    opts.logger?.info(log, 'proxy injected');
    return {
      uid,
      allowed: true,
      patchType: 'JSONPatch',
      patch: Buffer.from(JSON.stringify(r.patch)).toString('base64'),
      ...(r.warnings.length > 0 ? { warnings: r.warnings } : {}),
    };
  } catch (e) {
    // A failure to inject must not block the pod: admit it as it is.
    opts.logger?.error({ ...log, err: errorMessage(e) }, 'proxy injection failed; pod admitted without a proxy');
    return allow(uid);
  }
}
